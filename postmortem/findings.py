"""Typed results of an analysis: onset, first non-finite value, ranking, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Onset", "FirstNonfinite", "RankedTensor", "Finding", "CheckpointInfo", "LABELS", "VERDICTS"]

# Every label a detector can emit (docs/diagnoses.md); tests/postmortem checks the detectors against it.
LABELS = frozenset({
    "diverged", "exploding_gradient", "lr_too_high", "nonfinite_input", "no_update",
    "no_gradient", "stale_gradients", "vanishing_gradient", "dead_units", "saturated_units",
    "lr_too_low", "unscaled_inputs", "poor_init", "loss_plateau", "recovered_incident", "healthy",
    "hyperparameter_changed", "weights_changed_outside_optimizer", "batch_out_of_range", "log_of_zero",
    "optimizer_state_changed",
})
VERDICTS = ("diverged", "not_learning", "healthy")


@dataclass(frozen=True)
class Onset:
    """When the failure began: the earliest credible break among the diverging series."""

    step: int
    interval: tuple[int, int]
    series: str  # e.g. "grad fc2.weight", "scalar loss"
    growth_per_step: float | None  # multiplicative factor per step after the break
    doubling_steps: float | None
    jump: float | None  # factor between the stable level and the value at the break
    lead_steps: int | None  # steps between the onset and the first non-finite value


@dataclass(frozen=True)
class FirstNonfinite:
    """The first NaN/inf recorded, and how many non-finite tensors each later step had."""

    step: int
    tensor: str
    role: str
    key: str | None
    spread: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class RankedTensor:
    """One tensor series that amplified, with when and how fast."""

    tensor: str
    role: str
    key: str | None
    onset_step: int
    growth_per_step: float | None
    jump: float | None
    cause: str | None = None  # the direct cause's label, where that cause put it first


@dataclass(frozen=True)
class Finding:
    """One diagnosis: a label from docs/diagnoses.md, the numbers behind it and the fix."""

    label: str
    step: int | None
    tensors: list[str]
    evidence: dict[str, Any]
    fix: str
    # "error": explains the verdict; "warning": a fault the run survived; "note": structure, or
    # a mechanism seen in a run that learns (postmortem.detectors.base).
    severity: str = "error"


@dataclass(frozen=True)
class CheckpointInfo:
    path: str
    step: int | None
    reason: str | None
