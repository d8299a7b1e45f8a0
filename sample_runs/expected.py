"""`expected.json`: the ground truth written beside every generated run.

It comes from the scenario's configuration and injection (and, for the unscripted seed-000 runs,
from the losses the loop itself saw), never from the analyzer.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from recorders.vocabulary import VERDICTS

__all__ = ["Expected", "VERDICTS", "read_expected", "write_expected", "EXPECTED_FILE"]

EXPECTED_FILE = "expected.json"


@dataclass(frozen=True)
class Expected:
    scenario: str
    family: str
    arch: str
    seed: int
    verdict: str
    held_out: bool
    onset_step: int | None = None
    """Step the failure began, where the scenario fixes it (the injection step t0)."""
    culprit: str | None = None
    """Module (layer) name that carries the failure, where known; parameters `culprit.*` belong to it."""
    culprit_alternatives: list[str] = field(default_factory=list)
    """Other modules equally hit by the fault (every layer before a `detach()`)."""
    labels: list[str] = field(default_factory=list)
    """Diagnosis labels (docs/diagnoses.md vocabulary) a correct analysis must contain."""
    tolerated: list[str] = field(default_factory=list)
    """Labels an analysis may report on a healthy run without being wrong: the mechanism of a fault
    the run survived (a warning; it broke nothing, so nothing requires it)."""
    first_nonfinite_loss_step: int | None = None
    """Observed by the training loop: first step whose loss was NaN or inf."""
    notes: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.verdict!r}")


def write_expected(run_dir: Path, expected: Expected) -> Path:
    path = Path(run_dir) / EXPECTED_FILE
    path.write_text(json.dumps(asdict(expected), indent=2, sort_keys=True) + "\n")
    return path


def read_expected(run_dir: Path) -> Expected:
    return Expected(**json.loads((Path(run_dir) / EXPECTED_FILE).read_text()))
