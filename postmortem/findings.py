"""Typed results of an analysis: onset, first non-finite value, ranking, findings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from recorders.vocabulary import LABELS, VERDICTS, Label, Severity, Verdict

__all__ = ["Onset", "FirstNonfinite", "RankedTensor", "Finding", "CheckpointInfo", "Label", "LABELS",
           "Verdict", "VERDICTS", "Severity"]


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

    label: str  # a Label (its value or the member: they are equal)
    step: int | None
    tensors: list[str]
    evidence: dict[str, Any]
    fix: str
    severity: str = Severity.ERROR  # a Severity


@dataclass(frozen=True)
class CheckpointInfo:
    path: str
    step: int | None
    reason: str | None
