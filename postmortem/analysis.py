"""analyze(): load → first non-finite → breaks → onset (accumulation, direct causes) → diagnoses → verdict."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from .detectors import (CAUSE_LABELS, NOTE, REGISTRY, Evidence, Outcome, Thresholds, diagnose, gradients, measure_outcome,
                        summarize)
from .detectors import onsets
from .detectors import verdict as diagnoses_verdict
from .detectors.base import judging_curve, loss_curve, main_loss, metric_curves
from .detectors.divergence import weight_update_ratios
from .detectors.outcome import objective_settled, recovered_spike
from .detectors.updates import weights_travelled
from .detectors.root_causes import CAUSES
from .detectors.thresholds import GradientThresholds
from .findings import Finding, FirstNonfinite, Onset, RankedTensor
from .gaps import missing_step_warnings, unmeasured_warnings
from .loading import Run, load_run
from .manifest import manifest_order
from .ranking import (
    TensorBreak,
    diverging,
    first_nonfinite,
    fit_breaks,
    moved_at,
    nonfinite_beyond_inputs,
    rank,
    run_onset,
)
from .report_data import ReportData, report_data
from .series import READ_STAGES, SeriesTable, read_series
from .story import chain_sentences

__all__ = ["ANALYSIS_STAGES", "Analysis", "analyze", "JSON_SCHEMA_VERSION"]

JSON_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Analysis:
    run: Run
    verdict: str  # "diverged" | "not_learning" | "healthy"
    onset: Onset | None
    first_nonfinite: FirstNonfinite | None
    ranking: list[RankedTensor]
    chain: list[str]
    findings: list[Finding]
    warnings: list[str]  # the run's own (unreadable files, ...) and the analysis's
    data: ReportData  # what a report shows of the run: renderers read nothing else
    outcome: Outcome  # does the objective improve (from where the analysis starts): what the verdict follows

    @property
    def significant(self) -> list[Finding]:
        """Errors and warnings: what the headline and `--fail-on` read."""
        return [f for f in self.findings if f.severity != NOTE]

    @property
    def causes(self) -> list[Finding]:
        """What started the incident, as the recorder saw it (a changed lr, rescaled weights, a
        bad batch, a sigmoid's 0/1 outputs into log): the headline names the first."""
        return [f for f in self.significant if f.label in CAUSE_LABELS]

    @property
    def notes(self) -> list[Finding]:
        """Structure, or mechanisms seen in a run that learns: shown apart, never a verdict."""
        return [f for f in self.findings if f.severity == NOTE and f.label != "healthy"]

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


ANALYSIS_STAGES = 4 + READ_STAGES  # the calls `analyze` makes to its `progress`


def analyze(run: Run | str | Path, *, thresholds: Thresholds | None = None,
            progress: Callable[[str], None] | None = None) -> Analysis:
    """Analyse a run directory (or an already loaded Run) with `thresholds` (default
    `Thresholds()`; `dataclasses.replace` makes a variant); `progress(label)` is called at the
    start of each of its ANALYSIS_STAGES stages.

    The onset is settled before any diagnosis: the log-space breaks give a first date, an
    accumulation of gradients (a missing zero_grad) or a direct cause the recorder saw (a
    hyperparameter changed, weights changed outside the optimizer) moves it to where it began,
    and then every detector reads the run once.
    """
    thresholds = thresholds if thresholds is not None else Thresholds()
    advance = progress or (lambda label: None)
    if not isinstance(run, Run):
        run = load_run(run)
    advance("reading tensor statistics")
    table = read_series(run, progress=advance)
    scalars = run.scalars()
    events = run.events()
    tie_order = manifest_order(run.manifest)
    scaled = bool((scalars["name"] == "grad_scale").any())
    first = first_nonfinite(table, scalars, tie_order, ignore_grads=scaled)
    recorded = (table, scalars)
    settled = _settled(table, scalars, run.manifest, first, thresholds)
    if settled is not None:
        table, scalars = table.since(settled.step), scalars[scalars["step"] >= settled.step]
    advance(f"fitting {len(table.keys):,} series")
    breaks = fit_breaks(table, scalars, first.step if first else None, thresholds.breaks)
    nonfinite = nonfinite_beyond_inputs(table, scalars, ignore_grads=scaled)
    loss_steps, loss = loss_curve(scalars)
    outcome = measure_outcome(loss_steps, loss, metric_curves(scalars), thresholds.outcome, loss=main_loss(scalars),
                              travelled=weights_travelled(table, run.manifest))
    history = gradients.gradient_history(table, scalars, outcome)
    stale = gradients.stale_gradients(history, thresholds)
    leaders = diverging(breaks, scalars, stayed_finite=not nonfinite, loss_must_feel=not stale,
                        nonfinite_at=first.step if first else None, thresholds=thresholds.ranking)
    onset, involved = run_onset(breaks, leaders, first, tie_order, thresholds=thresholds.ranking,
                                precursor_steps=thresholds.divergence.precursor_steps,
                                robust_floor=thresholds.root_causes.robust_floor)
    diverged = bool(leaders) or nonfinite
    advance("diagnosing")
    precomputed = {"stale_gradients": stale}
    onset, diverged = _accumulated(onset, diverged, nonfinite, stale, judging_curve(scalars, outcome), first,
                                   thresholds.gradients)
    evidence = Evidence(table=table, summary=pd.DataFrame(), scalars=scalars, events=events,
                        manifest=run.manifest, first_nonfinite=first, onset=onset if diverged else None,
                        diverged=diverged, recovered=False, breaks=breaks, outcome=outcome)
    if diverged and onset is not None:
        onset = _caused(evidence, onset, first, thresholds, precomputed)
    elif not diverged:
        onset = onsets.regression_onset(evidence, thresholds, first) or onsets.runaway_onset(evidence, thresholds)
        diverged = onset is not None
        if diverged:
            involved = moved_at(breaks, onset.step, tie_order, precursor_steps=thresholds.divergence.precursor_steps,
                                robust_floor=thresholds.root_causes.robust_floor, thresholds=thresholds.ranking)
        evidence = replace(evidence, onset=onset, diverged=diverged)
        if not diverged:
            precomputed.update(_spike_causes(evidence, thresholds))
    recovered = diverged and onsets.came_back(table, scalars, onset, thresholds.outcome, ignore_grads=scaled, run_outcome=outcome)
    if diverged and not recovered and any(f.severity == NOTE for f in stale):
        # Found before the verdict, as a note where the loss still ended lower: in a run that
        # diverged, the carried-over gradients explain it (round 22's Conformer).
        precomputed["stale_gradients"] = gradients.stale_gradients(replace(history, diverged=True), thresholds)
    evidence = replace(
        evidence, onset=onset if diverged else None, recovered=recovered,
        summary=summarize(table, before=_healthy_until(table, onset, thresholds) if diverged else None))
    findings = diagnose(evidence, thresholds, precomputed)
    advance("ranking and writing the story")
    return _concluded(run, evidence, findings, involved, onset, thresholds.root_causes.batch_range_factor,
                      recorded, [settled.warning] if settled is not None else [])


@dataclass(frozen=True)
class _Settled:
    step: int  # the analysis reads the run from here on
    warning: str


def _settled(table: SeriesTable, scalars: pd.DataFrame, manifest: dict, first: FirstNonfinite | None,
             thresholds: Thresholds) -> _Settled | None:
    """Where the objective the run trains on settled (`outcome.objective_settled`), when that is
    after its first step and before anything went non-finite: every detector reads the run from
    there, as if it had started there."""
    steps, loss = loss_curve(scalars)
    if not len(steps) or (len(table.step) and steps[0] != int(table.step.min())):
        return None
    index = objective_settled(loss, weight_update_ratios(table, manifest), thresholds.outcome)
    if index is None or (first is not None and first.step <= int(steps[index])):
        return None
    step = int(steps[index])
    return _Settled(step, f"the analysis starts at step {step}: the loss went from {loss[0]:.3g} to "
                          f"{loss[index]:.3g} by then and stayed up, while the weights had barely "
                          f"moved, so its first values measured another objective (a queue or memory bank "
                          f"still filling); steps before {step} are shown, not analysed")


def _spike_causes(ev: Evidence, thresholds: Thresholds) -> dict[str, list[Finding]]:
    """The direct causes the recorder saw at a loss spike the run came back from, by the
    root-cause rules run at the spike's step (issue 12: a recovered incident names its cause;
    round 23, a GAT's loss ×390 at a batch ×1000): warnings, as for an incident that recovered."""
    steps, values = loss_curve(ev.scalars)
    spike = recovered_spike(values, thresholds.outcome)
    if spike is None:
        return {}
    step = int(steps[spike[0]])
    at_spike = replace(ev, recovered=True, onset=Onset(step=step, interval=(step, step), series="scalar loss",
                                                       growth_per_step=None, doubling_steps=None, jump=None,
                                                       lead_steps=None))
    causes = {label: REGISTRY[label].run(at_spike, thresholds) for label in CAUSES}
    # A batch out of range away from the spike is a warning of its own (the rule, with no onset).
    causes["batch_out_of_range"] = causes["batch_out_of_range"] or REGISTRY["batch_out_of_range"].run(ev, thresholds)
    return causes


def _caused(ev: Evidence, onset: Onset, first: FirstNonfinite | None, thresholds: Thresholds,
            precomputed: dict[str, list[Finding]]) -> Onset:
    """A diverged run's onset moved to what caused it: log(0) where the sigmoid reached its
    bound (seed 001), not where the NaN it made first showed; the earliest direct cause the
    recorder saw; past a learning-phase break, the cause of the later rise or the NaN batch."""
    precomputed["log_of_zero"] = REGISTRY["log_of_zero"].run(ev, thresholds)
    onset = onsets.cause_onset(onset, [*onsets.root_cause_findings(ev, thresholds), *precomputed["log_of_zero"]], first)
    if first is None:
        return onsets.after_learning(ev, onset, thresholds) or onset
    # Dates the onset only: `diagnose` runs the rule again once the run's recovery is known.
    inputs = REGISTRY["nonfinite_input"].run(ev, thresholds)
    return onsets.nonfinite_input_onset(ev, onset, first, inputs, thresholds) or onset


def _accumulated(onset: Onset | None, diverged: bool, nonfinite: bool, stale: list[Finding],
                 curve: tuple[np.ndarray, np.ndarray], first: FirstNonfinite | None,
                 th: GradientThresholds) -> tuple[Onset | None, bool]:
    """(onset, diverged) once an accumulation of gradients (a missing zero_grad) is accounted for:
    the onset moves to where it began, and what judges the run (`judging_curve`: its loss, or an
    outcome metric) decides whether it broke the run."""
    loss_steps, loss = curve
    finite = np.isfinite(loss)
    loss_steps, loss = loss_steps[finite], loss[finite]
    if diverged:
        onset = onsets.accumulation_onset(onset, stale, first)
        # A finite run whose recorded gradients grew only because they accumulate, while its
        # loss drifted instead of jumping, stopped learning; it did not diverge.
        if stale and not nonfinite and not gradients.loss_jumped(loss_steps, loss, onset.interval, th):
            diverged = False
    elif gradients.accumulation_broke(stale, loss_steps, loss, th):
        # The mirror: an accumulation whose loss jumped from where it began broke the run even
        # when no statistic ran away in log space (a running sum of noisy gradients grows ×40,
        # short of a break; issue 12j, missing_zero_grad-gnn-s2: loss 0.45 → 0.87 and stays).
        onset, diverged = onsets.accumulation_onset(None, stale, first), True
    return onset, diverged

def _concluded(run: Run, ev: Evidence, findings: list[Finding], involved: list[TensorBreak], onset: Onset | None,
               batch_range_factor: float, recorded: tuple[SeriesTable, pd.DataFrame],
               analysis_warnings: list[str]) -> Analysis:
    """The verdict `findings` give; for a divergence, what amplified first and the story of it.
    The report shows the run as `recorded` (every step, also those the analysis did not read)."""
    verdict = diagnoses_verdict(findings)
    failed = verdict == "diverged"
    first, (table, scalars) = ev.first_nonfinite, recorded
    ranking = _cause_first(rank(involved, first, ev.table, onset, batch_range_factor, manifest_order(run.manifest)),
                           findings) if failed else []
    chain = chain_sentences(ev, ranking, batch_range_factor) if failed else []
    onset = onset if failed else None
    data = report_data(run, onset=onset, first_nonfinite=first, ranking=ranking, findings=findings,
                       table=table, scalars=scalars, events=ev.events)
    warnings = [*run.warnings,
                *missing_step_warnings("tensor statistics", table.recorded_steps(), run.manifest),
                *missing_step_warnings("scalars", scalars["step"].to_numpy(np.int64), run.manifest),
                *unmeasured_warnings(run.manifest), *analysis_warnings]
    return Analysis(run=run, verdict=verdict, onset=onset, first_nonfinite=first, ranking=ranking,
                    chain=chain, findings=findings, warnings=warnings, data=data, outcome=ev.outcome)


def _cause_first(ranking: list[RankedTensor], findings: list[Finding]) -> list[RankedTensor]:
    """Tensors a direct cause names lead the ranking (the weights rescaled outside the
    optimizer, the parameters of the group whose lr changed, the sigmoid whose 0/1 outputs
    made log(0)), in their ranked order."""
    leads = ("hyperparameter_changed", "optimizer_state_changed", "weights_changed_outside_optimizer", "log_of_zero")
    cause = next((f for f in findings if f.label in leads and f.tensors), None)
    if cause is None:
        return ranking
    named = set(cause.tensors)
    leading = [r for r in ranking if r.tensor in named and r.role in ("param", "update", "grad", "state")]
    if not leading:
        role = {"weights_changed_outside_optimizer": "param", "log_of_zero": "activation"}.get(cause.label, "update")
        leading = [RankedTensor(t, role, None, cause.step, None, None, cause.label)
                   for t in cause.tensors[:3]]
    return [*leading, *(r for r in ranking if r not in leading)]


def _healthy_until(table: SeriesTable, onset: Onset | None, thresholds: Thresholds) -> int | None:
    """Detectors of a diverged run read its healthy phase, when it had one worth reading."""
    if onset is None or not len(table.step) or \
            onset.step - int(table.step.min()) < thresholds.divergence.min_healthy_steps:
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
