"""analyze(): load → first non-finite → breaks → onset and ranking → diagnoses → verdict."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import diagnoses
from .detectors import Thresholds
from .findings import Finding, FirstNonfinite, Onset, RankedTensor
from .gaps import missing_step_warnings, unmeasured_warnings
from .loading import Run, load_run
from .manifest import manifest_order
from .ranking import (
    diverging,
    first_nonfinite,
    fit_breaks,
    nonfinite_beyond_inputs,
    rank,
    run_onset,
)
from .series import SeriesTable, read_series
from .story import chain_sentences

__all__ = ["Analysis", "analyze", "JSON_SCHEMA_VERSION"]

JSON_SCHEMA_VERSION = 1
_MIN_HEALTHY_STEPS = 10


@dataclass
class Analysis:
    run: Run
    verdict: str  # "diverged" | "not_learning" | "healthy"
    onset: Onset | None
    first_nonfinite: FirstNonfinite | None
    ranking: list[RankedTensor]
    chain: list[str]
    findings: list[Finding]
    warnings: list[str]

    def to_json(self) -> dict:
        """A JSON-safe dict (NaN and inf become null), documented in docs/findings.md."""
        first = None
        if self.first_nonfinite is not None:
            first = asdict(self.first_nonfinite)
            first["spread"] = [list(pair) for pair in self.first_nonfinite.spread]
        payload = {
            "schema_version": JSON_SCHEMA_VERSION,
            "run": str(self.run.path),
            "verdict": self.verdict,
            "onset_step": self.onset.step if self.onset else None,
            "onset_interval": list(self.onset.interval) if self.onset else None,
            "onset": asdict(self.onset) if self.onset else None,
            "first_nonfinite": first,
            "ranking": [asdict(r) for r in self.ranking],
            "chain": list(self.chain),
            "diagnoses": [asdict(f) for f in self.findings],
            "warnings": list(self.warnings),
        }
        return _json_safe(payload)


def analyze(run: Run | str | Path, *, thresholds: Thresholds | None = None) -> Analysis:
    """Analyse a run directory (or an already loaded Run) with `thresholds` (default
    `Thresholds()`; `dataclasses.replace` makes a variant)."""
    thresholds = thresholds if thresholds is not None else Thresholds()
    if not isinstance(run, Run):
        run = load_run(run)
    table = read_series(run)
    scalars = run.scalars()
    events = run.events()
    tie_order = manifest_order(run.manifest)
    scaled = bool((scalars["name"] == "grad_scale").any())
    first = first_nonfinite(table, scalars, tie_order, ignore_grads=scaled)
    breaks = fit_breaks(table, scalars, first.step if first else None)
    leaders = diverging(breaks, scalars)
    onset, involved = run_onset(breaks, leaders, first, tie_order)
    diverged = bool(leaders) or nonfinite_beyond_inputs(table, scalars, ignore_grads=scaled)
    ranking = rank(involved, first, table, onset) if diverged else []
    evidence = _evidence(table, scalars, events, run.manifest, first, onset, diverged, breaks)
    findings = diagnoses.diagnose(evidence)
    moved = _accumulation_onset(onset, findings, first) if diverged else onset
    if moved != onset:  # the detectors (and the story) read the run up to the real onset
        onset = moved
        evidence = _evidence(table, scalars, events, run.manifest, first, onset, diverged, breaks)
        findings = diagnoses.diagnose(evidence)
    verdict = diagnoses.verdict(findings)
    chain = chain_sentences(evidence, ranking) if diverged else []
    return Analysis(
        run=run,
        verdict=verdict,
        onset=onset if diverged else None,
        first_nonfinite=first,
        ranking=ranking,
        chain=chain,
        findings=findings,
        warnings=[*run.warnings,
                  *missing_step_warnings("tensor statistics", table.step, run.manifest),
                  *missing_step_warnings("scalars", scalars["step"].to_numpy(np.int64), run.manifest),
                  *unmeasured_warnings(run.manifest)],
    )


def _evidence(
    table: SeriesTable, scalars: pd.DataFrame, events: pd.DataFrame, manifest: dict,
    first: FirstNonfinite | None, onset: Onset | None, diverged: bool, breaks: list,
) -> diagnoses.Evidence:
    return diagnoses.Evidence(
        table=table,
        summary=diagnoses.summarize(table, before=_healthy_until(table, onset) if diverged else None),
        scalars=scalars,
        events=events,
        manifest=manifest,
        first_nonfinite=first,
        onset=onset if diverged else None,
        diverged=diverged,
        breaks=breaks,
    )


def _accumulation_onset(
    onset: Onset | None, findings: list[Finding], first: FirstNonfinite | None
) -> Onset | None:
    """A divergence fed by accumulating gradients began where the accumulation began: the
    log-space breaks see only the explosion it ends in, or a learning-phase rise before it."""
    stale = next((f for f in findings if f.label == "stale_gradients"), None)
    if stale is None:
        return onset
    low, high = stale.evidence["onset_interval"]
    return Onset(
        step=stale.step,
        interval=(int(low), int(high)),
        series="grad norms (accumulating: missing zero_grad)",
        growth_per_step=None,
        doubling_steps=None,
        jump=None,
        lead_steps=(first.step - stale.step) if first is not None else None,
    )


def _healthy_until(table: SeriesTable, onset: Onset | None) -> int | None:
    """Detectors of a diverged run read its healthy phase, when it had one worth reading."""
    if onset is None or not len(table.step) or onset.step - int(table.step.min()) < _MIN_HEALTHY_STEPS:
        return None
    return onset.step


def _json_safe(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _json_safe(value.item())  # numpy scalars
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return value
