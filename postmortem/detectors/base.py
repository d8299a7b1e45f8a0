"""What every detector shares: the evidence of a run, the outcome yardstick, severities and the
registry of rules by label.

A rule is a pure function `detect(input, thresholds) -> list[Finding]` of a small typed input
that `gather(evidence)` builds from a run (tests build the input by hand). `REGISTRY[label]`
is the rule that emits `label`: its module, its input type and its thresholds in one hop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..findings import Finding, FirstNonfinite, Onset, Severity
from ..models import median
from ..ranking import TensorBreak
from ..scalars import is_agent_outcome, is_loss, loss_curve, main_loss, metric_direction
from ..series import AUX_COLUMNS, SeriesTable
from .thresholds import OutcomeThresholds, Thresholds

__all__ = [
    "ERROR",
    "Evidence",
    "NOTE",
    "Outcome",
    "REGISTRY",
    "Rule",
    "SEVERITIES",
    "WARNING",
    "adaptive_optimizer",
    "finding",
    "judging_curve",
    "judging_metrics",
    "layer_list",
    "loss_curve",
    "main_loss",
    "measure_outcome",
    "median_difference_sigma",
    "metric_curves",
    "metric_improved_since",
    "metric_series",
    "register",
    "role",
    "scalar",
    "summarize",
]

# How much a finding matters: an error explains a verdict (the run diverged or does not learn),
# a warning is a real fault the run survived (a recovered incident), a note is structure or a
# mechanism seen in a run that learns. The headline and `--fail-on` read errors and warnings.
ERROR, WARNING, NOTE = Severity
SEVERITIES = tuple(Severity)


def layer_list(names: list[str], shown: int = 3) -> str:
    """`a`, `b`, `c` and 5 more: the layers a fix names, short enough for a ticket."""
    listed = ", ".join(f"`{n}`" for n in names[:shown])
    return listed + (f" and {len(names) - shown} more" if len(names) > shown else "")


def finding(label: str, step: int | None, tensors: list[str], evidence: dict[str, Any], fix: str,
            severity: str = ERROR) -> Finding:
    return Finding(label=label, step=step, tensors=tensors, evidence=evidence, fix=fix, severity=severity)


@dataclass(frozen=True)
class Outcome:
    """Did the run learn, by its own yardstick: the loss (and any metric) against its own noise.

    `learns` is None when nothing says (no single training loss: adversarial losses, or too
    few points); then mechanism detectors decide on their own, as before outcome grounding.
    """

    learns: bool | None
    improvement: float | None  # relative loss decrease, start (the lower of the first loss and the first quarter) → last quarter
    noise: float | None  # robust σ of that decrease, from the loss's own step-to-step noise
    loss: str | None = None
    judged_by: str | None = None  # an outcome metric that judges the run where the loss cannot
    higher_is_better: bool = False  # ...its direction


def measure_outcome(steps: np.ndarray, values: np.ndarray, metrics: dict[str, tuple[np.ndarray, bool]],
                    th: OutcomeThresholds, *, loss: str | None = "loss", travelled: float | None = None) -> Outcome:
    """`values`: the finite training loss in step order; `metrics`: name → (values, higher_is_better);
    `travelled`: how far the weights moved over the run (`updates.weights_travelled`), None unknown.

    Weights that travelled at most `still_weights_path` learned nothing, whatever a held-out metric
    says (BatchNorm's running statistics move one at any lr): then only the loss judges.

    An agent's reward (or return) judges its run always. Another outcome metric that is not a
    loss (a sample distance, an accuracy) judges the run where the loss cannot: where there is no
    single training loss (adversarial losses), or where the loss did not improve while that
    metric did (a policy-gradient surrogate, whose value term grows with the returns as the agent
    learns; round 10's reinforce). An evaluation loss measures the
    training loss's own objective and never takes its place."""
    if travelled is not None and travelled <= th.still_weights_path:
        metrics = {}
    improved = tuple(sorted(n for n, (v, higher) in metrics.items()
                            if _improves(v if higher else -v, th)))
    outcome_metrics = judging_metrics(metrics, th)
    # Of two returns (a training and an evaluation one), the one logged most often: SAC's return
    # every episode, not its evaluation every 10 (round 19), whose 5 points after an incident
    # could never show it came back.
    agents = [n for n in outcome_metrics if is_agent_outcome(n)]
    agent = max(agents, key=lambda n: int(np.isfinite(metrics[n][0]).sum()), default=None)
    if agent is not None:
        # An agent's loss is a surrogate whose fall says nothing of its policy (PPO's value loss
        # fits the returns while the policy stands still: round 15's ppo at lr ×1e-4, loss 23 → 20,
        # reward 23 → 21): its reward judges the run, always.
        return Outcome(agent in improved, None, None, loss, agent, True)
    if len(values) < th.min_steps:
        judge = next((n for n in outcome_metrics if n in improved), outcome_metrics[0] if outcome_metrics else None)
        learns = bool(improved) if improved else (False if judge else None)
        return Outcome(learns, None, None, loss, judge, bool(judge and metrics[judge][1]))
    quarter = max(1, len(values) // 4)
    # Learning starts from the model before its first step: a run whose first quarter blew up and
    # came back to where it began did not learn (nbeats at lr ×100: sMAPE 20.9, 200 for 90 steps,
    # then 20.9 again; round 13). So the start is the lower of the first loss and the first quarter's.
    early, late = min(float(np.median(values[:quarter])), float(values[0])), float(np.median(values[-quarter:]))
    improvement = 0.0 if early == 0 else (early - late) / abs(early)
    noise = median_difference_sigma(values, quarter, quarter)
    learns = (early - late > th.noise_sigmas * noise and improvement >= th.plateau_improvement)
    judge = None if learns else next((n for n in outcome_metrics if n in improved), None)
    return Outcome(bool(learns or improved), improvement, noise / abs(early) if early else None, loss,
                   judge, bool(judge and metrics[judge][1]))


def judging_metrics(metrics: dict[str, tuple[np.ndarray, bool]], th: OutcomeThresholds) -> list[str]:
    """The metrics that may judge a run where its loss cannot: no loss, with enough points."""
    return sorted(n for n, (v, _) in metrics.items() if not is_loss(n) and np.isfinite(v).sum() >= th.min_steps)


def judging_curve(scalars: pd.DataFrame, outcome: Outcome) -> tuple[np.ndarray, np.ndarray]:
    """Steps and values (non-finite kept) of what judges the run, lower being better: its main
    loss, or the outcome metric that judges it where the loss cannot (`Outcome.judged_by`; a
    higher-is-better metric negated)."""
    name = outcome.judged_by or main_loss(scalars)
    rows = scalars[scalars["name"] == name]
    values = rows["value"].to_numpy(np.float64)
    return rows["step"].to_numpy(np.int64), -values if outcome.judged_by and outcome.higher_is_better else values


def _improves(values: np.ndarray, th: OutcomeThresholds) -> bool:
    """A higher-is-better series whose last quarter beats its first beyond its noise and by the
    loss's own 1 % (`plateau_improvement`): a metric creeping by 1e-6 a step over a noiseless
    evaluation set is no progress (round 10, lr_too_low-wgan_gp: 1.19326 → 1.19323)."""
    values = values[np.isfinite(values)]
    if len(values) < th.min_steps:
        return False
    quarter = max(1, len(values) // 4)
    # From the model before its first step, as for the loss (`measure_outcome`): a metric whose first
    # quarter blew up and came back to where it began did not improve (round 16's PINN at lr ×100:
    # its error 0.95, 1.3, then 1.0 for good).
    early = max(float(np.median(values[:quarter])), float(values[0]))
    gain = float(np.median(values[-quarter:])) - early
    return gain > th.noise_sigmas * median_difference_sigma(values, quarter, quarter) and gain >= th.plateau_improvement * abs(early)


def median_difference_sigma(values: np.ndarray, first: int, last: int) -> float:
    """σ of (median of the first `first` values − median of the last `last`), from the
    step-to-step noise: σ_point = 1.4826·MAD(Δ)/√2, a median of n points has σ ≈ 1.25·σ_point/√n."""
    diffs = np.diff(values)
    if len(diffs) == 0:
        return 0.0
    point = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / np.sqrt(2)
    return float(1.25 * point * np.sqrt(1 / first + 1 / last))


@dataclass(frozen=True)
class Evidence:
    """Everything the gather functions may read from a run."""

    table: SeriesTable
    summary: pd.DataFrame  # one row per series (see summarize)
    scalars: pd.DataFrame
    events: pd.DataFrame
    manifest: dict
    first_nonfinite: FirstNonfinite | None
    onset: Onset | None
    diverged: bool  # the divergence machinery fired (postmortem.ranking)
    recovered: bool  # ...and the run came back (loss back to its level, last step finite)
    breaks: list[TensorBreak]
    outcome: Outcome
    found: list[Finding] = field(default_factory=list)  # findings of the rules run so far


@dataclass(frozen=True)
class Rule:
    label: str
    family: str | None  # the Thresholds field this rule reads (None: all of Thresholds)
    gather: Callable[[Evidence], Any]
    detect: Callable[[Any, Any], list[Finding]]

    def run(self, ev: Evidence, thresholds: Thresholds) -> list[Finding]:
        return self.detect(self.gather(ev), thresholds if self.family is None else getattr(thresholds, self.family))


REGISTRY: dict[str, Rule] = {}


def register(label: str, family: str, gather: Callable[[Evidence], Any]):
    """Decorator: `detect` becomes the rule for `label` (postmortem.detectors.RUN_ORDER runs them)."""
    def decorate(detect):
        if label in REGISTRY:
            raise ValueError(f"two rules for {label}")
        REGISTRY[label] = Rule(label, family, gather, detect)
        return detect
    return decorate


_SUMMARY_POINTS = 4096  # medians of longer stretches are taken on an even subsample


def _median(values: np.ndarray) -> float:
    if len(values) == 0:
        return float("nan")
    stride = max(1, len(values) // _SUMMARY_POINTS)
    return float(median(values[::stride]))  # np.median's, bit for bit, without its overhead


def summarize(table: SeriesTable, before: int | None = None) -> pd.DataFrame:
    """One row per series: sizes, early/late/median magnitude, and per-role statistics.

    `before` limits the summary to the steps before it (the healthy phase of a diverged run).
    `silent_from` is the first step of a final stretch where the series is zero or missing
    (a gradient that stopped arriving, an update that stopped), `silent_share` its share.
    """
    rows = []
    for index, key in enumerate(table.keys):
        sl = table.rows(index)
        steps, mag = table.step[sl], table.magnitude[sl]
        if before is not None:
            keep = steps < before
            steps, mag = steps[keep], mag[keep]
        silent = (mag == 0) | (np.isnan(mag) & (table.nonfinite[sl][: len(mag)] == 0))
        live = np.flatnonzero(~silent)
        silent_start = int(live[-1]) + 1 if len(live) else 0
        finite = np.isfinite(mag) & (table.nonfinite[sl][: len(mag)] == 0)
        values = mag[finite]
        n = len(values)
        quarter = max(1, n // 4)
        row = {
            "role": key.role, "name": key.name, "key": key.key,
            "numel": int(table.numel[index]), "steps": int(len(steps)),
            "first_step": int(steps[0]) if len(steps) else None,
            "first": float(values[0]) if n else np.nan,
            "early": _median(values[:quarter]),
            "late": _median(values[-quarter:]),
            "median": _median(values),
            "zero_share": float(np.mean(values == 0)) if n else np.nan,
            "nonfinite_rows": int(np.sum(table.nonfinite[sl] > 0)),
            "silent_from": int(steps[silent_start]) if silent_start < len(steps) else None,
            "silent_share": (len(steps) - silent_start) / len(steps) if len(steps) else np.nan,
        }
        for column in AUX_COLUMNS.get(key.role, ()):
            aux = table.column(index, column)[: len(mag)]
            aux = aux[np.isfinite(aux)]
            row[f"{column}_median"] = _median(aux)
            row[f"{column}_first"] = float(aux[0]) if len(aux) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def role(summary: pd.DataFrame, name: str) -> pd.DataFrame:
    if summary.empty:
        return summary
    return summary[summary["role"] == name]


def metric_curves(scalars: pd.DataFrame) -> dict[str, tuple[np.ndarray, bool]]:
    """Metrics passed to `rec.step()` whose direction their name says (`scalars.metric_direction`)."""
    found = {}
    main = main_loss(scalars)
    for name in scalars["name"].unique():
        name = str(name)
        higher = metric_direction(name)
        if name != main and higher is not None:
            found[name] = (scalar(scalars, name), higher)
    return found


def metric_series(scalars: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray, bool]]:
    """The outcome metrics that are not losses (`metric_curves`), each as (steps, values, higher_is_better)."""
    found = {}
    for name, (values, higher) in metric_curves(scalars).items():
        if not is_loss(name):
            found[name] = (scalars.loc[scalars["name"] == name, "step"].to_numpy(np.int64), values, higher)
    return found


def metric_improved_since(metrics: dict[str, tuple[np.ndarray, np.ndarray, bool]], step: int,
                          th: OutcomeThresholds) -> str | None:
    """The first outcome metric (`metric_series`) that improves, by `_improves`, over its points
    from the last one before `step` to the run's end: the run learned on after `step` by a
    held-out measure, whatever its loss did. None when none does or none has `min_steps` points there."""
    for name, (steps, values, higher) in sorted(metrics.items()):
        after = values[max(0, int(np.searchsorted(steps, step)) - 1):]
        if _improves(after if higher else -after, th):
            return name
    return None


def scalar(scalars: pd.DataFrame, name: str) -> np.ndarray:
    return scalars.loc[scalars["name"] == name, "value"].to_numpy(np.float64)


def adaptive_optimizer(scalars: pd.DataFrame) -> bool:
    """An optimizer that divides by its gradients' scale (Adam, RMSprop, Adagrad: the ones with an
    `eps` hyperparameter): its steps follow the lr, not the gradient (Kingma & Ba 2015, §2.1:
    |step| ≲ lr)."""
    return any(str(n).startswith("hp.") and str(n).endswith(".eps") for n in scalars["name"].unique())
