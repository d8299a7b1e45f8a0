"""Where an incident began, settled before any diagnosis reads the run.

The log-space breaks give a first date (postmortem.ranking); these move it to where the incident
began: the start of an accumulation of gradients (a missing zero_grad), the earliest direct
cause the recorder saw (root_causes), a cause before a rise that followed a learning phase, and,
in a run that stayed finite, a recorded cause after which the loss rose (and whether it came back).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..findings import Finding, FirstNonfinite, Onset
from ..scalars import raised
from ..series import SeriesTable
from . import outcome, root_causes
from .base import REGISTRY, Evidence, Outcome, judging_curve, loss_curve, main_loss, metric_series
from .thresholds import OutcomeThresholds, Thresholds

__all__ = ["accumulation_onset", "after_learning", "came_back", "cause_onset", "nonfinite_input_onset", "regression_onset",
           "root_cause_findings", "runaway_onset"]


def root_cause_findings(ev: Evidence, thresholds: Thresholds) -> list[Finding]:
    """What every direct-cause rule (`root_causes.CAUSES`) finds around `ev.onset`."""
    return [f for label in root_causes.CAUSES for f in REGISTRY[label].run(ev, thresholds)]


def cause_onset(onset: Onset, causes: list[Finding], first: FirstNonfinite | None) -> Onset:
    """The earliest direct cause the recorder saw (searched from 40 steps before the fitted
    break to one after it; a sigmoid at its bounds before the log(0) it fed, however early) is
    the onset: the break may see only the explosion that follows (a param group's lr raised
    ×30), or a tensor that moved a step before the rescaled one."""
    found = [f for f in causes if f.label != "batch_out_of_range" and f.step is not None]
    if not found:
        return onset
    cause = min(found, key=lambda f: f.step)
    return Onset(
        step=cause.step, interval=(cause.step, cause.step),
        series=(f"activation {cause.tensors[0]} at exactly 0/1" if cause.label == "log_of_zero" else
                f"{cause.label}: {cause.evidence.get('hyperparameter') or ', '.join(cause.tensors[:3])}"),
        growth_per_step=None, doubling_steps=None, jump=None,
        lead_steps=(first.step - cause.step) if first is not None else None,
    )


def after_learning(ev: Evidence, onset: Onset, thresholds: Thresholds) -> Onset | None:
    """A fitted onset after which a finite run kept learning (its loss's rolling median over
    `OutcomeThresholds.min_steps` points fell ≥ 10 % below its level before the onset) is a learning-phase break (a gradient growing
    as embeddings wake up), not the incident's start: when the loss later rose ×2 above its best
    level, a direct cause the recorder saw in the 40 steps before that rise is the onset."""
    steps, loss = loss_curve(ev.scalars)
    th = thresholds.root_causes
    found = _best_after(steps, loss, onset.step, thresholds)
    if found is None:
        return None
    best, rolling = found
    later, after = steps[steps >= onset.step], loss[steps >= onset.step]
    rose = np.flatnonzero(after[best:] > th.rise_after_best * rolling[best])
    if not len(rose):
        return None
    step = int(later[best + rose[0]])
    rising = Onset(step, (step, step), "", None, None, None, None)
    moved = cause_onset(rising, root_cause_findings(replace(ev, onset=rising), thresholds), None)
    return moved if moved is not rising else None


def regression_onset(ev: Evidence, thresholds: Thresholds, first: FirstNonfinite | None) -> Onset | None:
    """A run that stayed finite but whose loss (or the outcome metric that judges it, `judging_curve`:
    a WGAN's sample distance) rose after a param group's hyperparameter changed ×k (or an
    optimizer state collapsed, weights were rescaled outside the optimizer, or a batch came ×10
    out of its range), and
    never came back (every group's lr ×300: loss 2.3 → 3.3 for good), diverged there. When every
    such rise came back, the first after a lasting change (a hyperparameter, an optimizer state;
    not a one-off batch, whose spike is a note) is the onset of an incident the run recovered
    from (one block's lr ×300: the loss jumps and returns), named with its cause."""
    steps, loss = judging_curve(ev.scalars, ev.outcome)  # a WGAN's distance, an agent's negated reward
    finite = np.isfinite(loss)
    steps, loss = steps[finite], loss[finite]
    if not len(steps):
        return None
    last = int(steps[-1])
    window = root_causes.onset_window(replace(ev, onset=Onset(last, (last, last), "", None, None, None, None)))
    whole_run = replace(thresholds.root_causes, lookback=10**9)
    th = thresholds.outcome
    candidates = [(step, f"hyperparameter_changed: {name}") for step, name, _, _ in root_causes.hp_changes(window, whole_run)]
    candidates += [(step, f"optimizer_state_changed: {name}[{key}]")
                   for step, name, key, _ in root_causes.state_changes(window, whole_run)]
    candidates += [(f.step, f"weights_changed_outside_optimizer: {', '.join(f.tensors[:3])}")
                   for f in root_causes.weights_changed_outside_optimizer(window, whole_run)]
    # A batch out of its range (a unit change, ×1e3), whether or not the loss spiked there: a
    # ×1e3 batch that train-mode BatchNorm normalises away still enters its running statistics,
    # and the held-out metric that judges the run is what breaks (round 16, batch_scale-pix2pix).
    candidates += [(step, f"batch_out_of_range: {name}")
                   for step, name in root_causes.batches_out_of_range(window, thresholds.root_causes)]
    spikes = steps[outcome.loss_spikes(loss, th)[0]]
    # A spike ×10 is itself the rise, whether or not the recorder saw its cause: one after which
    # the loss climbed on and never came back is where the run diverged (round 26,
    # weight_scale-sae: a decoder ×200 that the loop's own renorm undid before the parameters
    # were recorded, the loss ×3e5 for one step, back at once, then 0.11 → 0.20 for good under
    # Adam's second moment ×1e6). One that left the loss higher but no longer climbing is new
    # data as often as a fault (a domain switch): a note. Read after any cause at its step.
    candidates = [(step, False, series) for step, series in candidates] + [(int(step), True, "scalar loss") for step in spikes]
    recovered = None
    for step, spike, series in sorted(candidates):
        one_off = series.startswith("batch_out_of_range")
        lasting = not spike and not one_off  # a one-off's spike is a note
        before = loss[steps < step][-th.min_steps:]
        after = loss[steps > step][: th.min_steps]
        if len(before) < 3 or len(after) < 3:
            continue
        level = float(np.median(before))
        if not spike and not np.median(after) > raised(level, th.recovered_factor):
            continue  # the loss did not rise (a negated reward did not fall)
        if spike and not np.median(loss[-th.min_steps:]) > raised(float(np.median(after)), th.recovered_factor):
            continue  # the loss did not climb on after the spike
        if one_off and not _batch_acted(step, after, level, spikes, thresholds):
            continue
        onset = Onset(step, (step, step), series, None, None, None,
                      (first.step - step) if first is not None else None)
        if not came_back(ev.table, ev.scalars, onset, th, ignore_grads=True, run_outcome=ev.outcome):
            return onset
        recovered = recovered or (onset if lasting else None)
    return recovered


def _batch_acted(step: int, after: np.ndarray, level: float, spikes: np.ndarray, thresholds: Thresholds) -> bool:
    """A one-off batch acts at once: the first value after it already stands out (×1.1 over the
    level before, `recovered_factor`), or the loss spiked ×10 within `window` steps of it (its
    own loss). A rise that starts later is not its doing: a WGAN's sample distance swings ×3 on
    its own (round 10, batch_scale-wgan_gp-s1)."""
    at_once = after[0] > raised(level, thresholds.outcome.recovered_factor)
    return bool(at_once or np.any(np.abs(spikes - step) <= thresholds.root_causes.window))


def runaway_onset(ev: Evidence, thresholds: Thresholds) -> Onset | None:
    """A finite run judged by its loss (no outcome metric beside it improved) whose loss ends ≥ ×2
    where it began (`OutcomeThresholds.ran_away_factor`, `raised`; the first loss is the untrained
    model's) ran away and did not come back: diverged where its loss first crossed that line, or
    at the earliest direct cause the recorder saw around it (word2vec at lr ×100: 4.16 → 12 from
    its first step; a table rescaled ×k at 47: 2.5 → 9.7 for good; round 14). A metric logged beside
    a loss that did not improve either is no reason to doubt it (round 36's link predictor at lr ×100:
    its loss 1.39 → 34.5, −log of its 1e-15 floor, from the first step, Hits@50 0.04 → 0)."""
    th = thresholds.outcome
    if ev.outcome.learns is not False or ev.outcome.judged_by:
        return None
    steps, loss = loss_curve(ev.scalars)
    if len(loss) < th.min_steps:
        return None
    line = raised(float(loss[0]), th.ran_away_factor)
    if np.median(loss[-max(1, len(loss) // 4):]) < line:
        return None
    step = int(steps[np.argmax(loss > line)])
    crossing = Onset(step, (step, step), main_loss(ev.scalars) or "loss", None, None, None, None)
    return cause_onset(crossing, root_cause_findings(replace(ev, onset=crossing), thresholds), ev.first_nonfinite)


def _best_after(steps: np.ndarray, loss: np.ndarray, step: int,
                thresholds: Thresholds) -> tuple[int, np.ndarray] | None:
    """Where, after `step`, the loss's rolling median (over `OutcomeThresholds.min_steps`
    points) was lowest, and that rolling median, if it fell there ≥ 10 % below its level before
    `step` (the run kept learning after it); None otherwise."""
    points = thresholds.outcome.min_steps
    before, after = loss[steps < step][-points:], loss[steps >= step]
    if len(before) < 3 or len(after) < 2 * points:
        return None
    rolling = pd.Series(after).rolling(points).median().to_numpy()
    best = int(np.nanargmin(rolling))
    return (best, rolling) if rolling[best] <= (1 - thresholds.root_causes.learned_after) * float(np.median(before)) else None


def nonfinite_input_onset(ev: Evidence, onset: Onset, first: FirstNonfinite, inputs: list[Finding],
                          thresholds: Thresholds) -> Onset | None:
    """A batch that carried NaN or inf at the run's first non-finite step made that value; a
    fitted onset before it after which the loss kept learning until then is a learning-phase
    break, not the incident's start: the onset is the batch (round 10, batch_nan-swin-s1: a
    relative-position-bias table's break at 8, the loss 2.3 → 1.2 by 80, the NaN batch at 81)."""
    cause = next((f for f in inputs if f.label == "nonfinite_input" and f.step == first.step), None)
    if cause is None or onset.step >= first.step:
        return None
    steps, loss = loss_curve(ev.scalars)
    kept = steps < first.step
    if _best_after(steps[kept], loss[kept], onset.step, thresholds) is None:
        return None
    return cause_onset(onset, [cause], first)


def came_back(table: SeriesTable, scalars: pd.DataFrame, onset: Onset | None, th: OutcomeThresholds,
               *, ignore_grads: bool, run_outcome: Outcome) -> bool:
    """The run ends finite, its loss came back (`detectors.outcome.loss_came_back`) and the
    incident did not stop a run that learned until then (`outcome.learning_stopped`): a spike it
    shrugged off, not a run it ruined. Where an outcome metric judges the run (`Outcome.judged_by`)
    that metric must have come back instead (`outcome.metric_came_back`), and not stopped learning."""
    name = run_outcome.judged_by or main_loss(scalars)
    if onset is None or not len(table.step) or name is None:
        return False
    last = int(table.step.max())
    if last - onset.step < th.min_steps:
        return False
    at_last = np.flatnonzero(table.step == last)
    series = np.searchsorted(table.offsets, at_last, side="right") - 1
    ignored = {"input", "target", *(("grad",) if ignore_grads else ())}
    if any(table.nonfinite[i] > 0 and table.keys[s].role not in ignored for i, s in zip(at_last, series)):
        return False
    raw = scalars.loc[scalars["name"] == name, "value"].to_numpy(np.float64)
    if len(raw) == 0 or not np.isfinite(raw[-1]):
        return False
    if run_outcome.judged_by:
        steps, values = judging_curve(scalars, run_outcome)
        finite = np.isfinite(values)
        steps, values, back = steps[finite], values[finite], outcome.metric_came_back
    else:
        (steps, values), back = loss_curve(scalars), outcome.loss_came_back
    # Back at its level is no recovery where the incident took the progress, for a metric as for
    # the loss (round 19, missing_zero_grad-sac-s0: its return stands at −14.6 from the fault on,
    # where it had been rising from −18.5; the fault-free twin's goes on to −6.3).
    return (back(steps, values, onset.step, th)
            and not outcome.learning_stopped(steps, values, onset.step, run_outcome, th)
            and _metrics_came_back(scalars, onset.step, th, judged_by=run_outcome.judged_by))


def _metrics_came_back(scalars: pd.DataFrame, step: int, th: OutcomeThresholds, *, judged_by: str | None) -> bool:
    """Every held-out outcome metric logged beside what judges the run (`metric_series`) came back
    too, where it has the points to say (`metric_came_back`: 3 before, `min_steps` after): a
    forecaster whose training loss returned while its held-out quantile loss stayed ×1.8 where
    it was (round 37, adam_state-deepar-s1: val_wql 0.127 → 0.405 → 0.232) lost what it had learned."""
    for name, (steps, values, higher) in metric_series(scalars).items():
        finite = np.isfinite(values)
        steps, values = steps[finite], (-values if higher else values)[finite]
        if name == judged_by or np.sum(steps < step) < 3 or np.sum(steps > step) < th.min_steps:
            continue
        if not outcome.metric_came_back(steps, values, step, th):
            return False
    return True


def accumulation_onset(
    onset: Onset | None, stale: list[Finding], first: FirstNonfinite | None
) -> Onset | None:
    """A divergence fed by accumulating gradients began where the accumulation began: the
    log-space breaks see only the explosion it ends in, or a learning-phase rise before it."""
    if not stale:
        return onset
    stale = stale[0]
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
