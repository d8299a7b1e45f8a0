"""Detectors: one module per family of findings, every threshold in `Thresholds`, every rule in
`REGISTRY` by the label it emits.

- `inputs`: nonfinite_input, unscaled_inputs
- `root_causes`: hyperparameter_changed, optimizer_state_changed, weights_changed_outside_optimizer,
  batch_out_of_range
- `divergence`: diverged, exploding_gradient, lr_too_high, recovered_incident
- `gradients`: no_gradient, stale_gradients, vanishing_gradient
- `updates`: no_update, lr_too_low
- `activations`: dead_units, saturated_units, log_of_zero
- `init`: poor_init
- `outcome`: loss_plateau, loss_rose_back (and `base.measure_outcome`, the yardstick every severity reads)
- `onsets`: no label; where an incident began, settled before the rules run (an accumulation's
  start, a direct cause, a finite run's rise after a cause, whether the loss came back)

`REGISTRY[label]` gives the rule: `gather` (Evidence → its small typed input), `detect` (input,
thresholds → findings) and `family` (its field of `Thresholds`).
"""

from __future__ import annotations

from dataclasses import replace

from ..findings import Finding
from . import inputs, root_causes, divergence, gradients, updates, activations, init, outcome  # noqa: F401 (registration order)
from .base import ERROR, NOTE, REGISTRY, SEVERITIES, WARNING, Evidence, Outcome, Rule, finding, measure_outcome, summarize
from .thresholds import (
    ActivationThresholds,
    BreakThresholds,
    DivergenceThresholds,
    GradientThresholds,
    InitThresholds,
    InputThresholds,
    OutcomeThresholds,
    RankingThresholds,
    RootCauseThresholds,
    Thresholds,
    UpdateThresholds,
)

__all__ = [
    "ActivationThresholds",
    "BreakThresholds",
    "CAUSE_LABELS",
    "DivergenceThresholds",
    "ERROR",
    "Evidence",
    "GradientThresholds",
    "INFORMATIONAL",
    "InitThresholds",
    "InputThresholds",
    "NOTE",
    "NOT_LEARNING",
    "Outcome",
    "OutcomeThresholds",
    "REGISTRY",
    "RUN_ORDER",
    "RankingThresholds",
    "RootCauseThresholds",
    "Rule",
    "SEVERITIES",
    "Thresholds",
    "UpdateThresholds",
    "WARNING",
    "diagnose",
    "measure_outcome",
    "summarize",
    "verdict",
]

# Run order: the data, then direct causes and the mechanism of a NaN, before the divergence
# findings whose fix texts they shape; then the not-learning mechanisms (dead units before the
# missing gradients they explain), the outcome last.
RUN_ORDER = (
    "nonfinite_input", "unscaled_inputs",
    "hyperparameter_changed", "optimizer_state_changed", "weights_changed_outside_optimizer",
    "batch_out_of_range", "log_of_zero",
    "diverged", "exploding_gradient", "lr_too_high", "recovered_incident",
    "dead_units", "no_gradient", "stale_gradients", "vanishing_gradient", "no_update", "lr_too_low",
    "saturated_units", "poor_init", "loss_plateau", "loss_rose_back",
)
assert set(RUN_ORDER) == set(REGISTRY), "every registered rule has its place in RUN_ORDER"

# Findings that name what started an incident (the report's headline says it first).
CAUSE_LABELS = (*root_causes.CAUSES, "log_of_zero", "nonfinite_input")

INFORMATIONAL = frozenset({"healthy", "recovered_incident"})
# Labels that, as errors, make a run "not learning" (when it did not diverge).
NOT_LEARNING = frozenset({
    "no_update", "no_gradient", "stale_gradients", "vanishing_gradient", "dead_units",
    "saturated_units", "lr_too_low", "unscaled_inputs", "poor_init", "loss_plateau",
    "nonfinite_input", "lr_too_high",
})


def diagnose(ev: Evidence, thresholds: Thresholds | None = None,
             precomputed: dict[str, list[Finding]] | None = None) -> list[Finding]:
    """Every registered rule in order; each sees the findings of the rules before it (the
    root causes before the divergence they explain). `precomputed` holds rules already run."""
    thresholds = thresholds if thresholds is not None else Thresholds()
    precomputed = precomputed or {}
    found: list[Finding] = []
    for label in RUN_ORDER:
        rule = REGISTRY[label]
        found += precomputed[label] if label in precomputed else rule.run(replace(ev, found=list(found)), thresholds)
    # Without tensor statistics most detectors saw nothing: health is not claimed then.
    if len(ev.table) and not any(f.severity in (ERROR, WARNING) for f in found):
        judged = {"judged_by": ev.outcome.judged_by} if ev.outcome.judged_by else {}  # a reward, not the loss
        # `learns` None: no single training loss, nor a metric with enough points, says whether it
        # learns (a GAN's two losses, a loop that passes no loss): health from the tensors alone.
        found.append(finding("healthy", None, [], {"loss_improvement": ev.outcome.improvement,
                                                   "learns": ev.outcome.learns, **judged},
                             "nothing to fix", NOTE))
    return found


def verdict(findings: list[Finding]) -> str:
    if any(f.label == "diverged" for f in findings):
        return "diverged"
    if any(f.severity == ERROR and f.label in NOT_LEARNING for f in findings):
        return "not_learning"
    return "healthy"
