"""Findings about gradients: none arriving, accumulating (no zero_grad), vanishing toward the input."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..accumulation import PRE, AccumulationOnset, accumulation_onset
from ..findings import Finding
from ..manifest import frozen_parameters, is_weight, manifest_order, parameter_shapes
from ..scalars import main_loss, raised
from ..series import SeriesTable
from .base import (ERROR, NOTE, WARNING, Evidence, Outcome, finding, judging_curve, layer_list,
                   metric_improved_since, metric_series, register, role)
from .thresholds import GradientThresholds, Thresholds

__all__ = [
    "GradientHistory",
    "LayerGradients",
    "SilentGradients",
    "accumulation_broke",
    "global_grad_norm",
    "grad_norm_series",
    "gradient_history",
    "loss_jumped",
    "no_gradient",
    "silence",
    "stale_gradients",
    "vanishing_gradient",
]


@dataclass(frozen=True)
class SilentGradients:
    """Per parameter, in model order: its first step, the first step of its final stretch of
    zero/missing gradients (None: none) and that stretch's share of its steps."""

    first_step: dict[str, int]
    silent_from: dict[str, int | None]
    silent_share: dict[str, float]
    steps: dict[str, int]
    frozen: frozenset[str]  # requires_grad=False in the manifest
    outcome: Outcome
    called: frozenset[str] | None = None  # modules whose outputs were recorded (None: none were)
    dead: tuple[str, ...] = ()  # modules dead_units found outputting exactly 0
    loss: tuple[np.ndarray, np.ndarray] | None = None
    """What judges the run (steps, values, lower is better: `judging_curve`): the training loss,
    or an agent's negated reward (PPO's loss rises as it learns)."""
    metrics: dict[str, tuple[np.ndarray, np.ndarray, bool]] = field(default_factory=dict)
    """The run's outcome metrics (`metric_series`): one that improved after the cut says the run learned on."""

    def quiet(self, th: GradientThresholds) -> dict[str, int]:
        return {n: s for n, s in self.silent_from.items() if s is not None
                and self.silent_share[n] * self.steps[n] >= th.silent_min_steps
                and self.silent_share[n] >= th.silent_min_share}


def silence(rows: pd.DataFrame, manifest: dict, outcome: Outcome,
            called: frozenset[str] | None = None) -> SilentGradients:
    """The silence bookkeeping of one role's summary rows (grads, or updates)."""
    if rows.empty:
        return SilentGradients({}, {}, {}, {}, frozenset(), outcome)
    order = manifest_order(manifest)
    rows = rows.assign(pos=rows["name"].map(lambda n: order.get(n, 10**6))).sort_values("pos", kind="stable")
    names = list(rows["name"])
    return SilentGradients(
        dict(zip(names, (int(s) for s in rows["first_step"]))),
        dict(zip(names, (None if pd.isna(s) else int(s) for s in rows["silent_from"]))),
        dict(zip(names, (float(s) for s in rows["silent_share"]))),
        dict(zip(names, (int(s) for s in rows["steps"]))),
        frozenset(frozen_parameters(manifest)), outcome, called)


def _silent_gradients(ev: Evidence) -> SilentGradients:
    called = frozenset(role(ev.summary, "activation").get("name", []))
    dead = tuple(t for f in ev.found if f.label == "dead_units" for t in f.tensors)
    return replace(silence(role(ev.summary, "grad"), ev.manifest, ev.outcome, called or None), dead=dead,
                   loss=judging_curve(ev.scalars, ev.outcome) if main_loss(ev.scalars) or ev.outcome.judged_by
                   else None, metrics=metric_series(ev.scalars))


def _module(parameter: str) -> str:
    return parameter.rsplit(".", 1)[0] if "." in parameter else ""


def _structural(grads: SilentGradients, quiet: dict[str, int]) -> bool:
    """Zero by construction, in a run that learns: each silent tensor was silent from its first
    step, and either its module's other parameters do get gradients (an attention key bias:
    softmax ignores a per-query constant) or its module never ran (an unused branch). A whole
    layer that runs and gets no gradient is cut off (a detach), not structure, unless it is one
    module alone behind parameters that do get gradients: a dead end, whose output reaches no
    loss (WaveNet's last residual conv: the last block feeds only its skip; round 21). A cut
    silences every layer before it. Lone biases whose weights get gradients are structure whatever
    the outcome (a WGAN critic's output bias cancels in E[D(fake)] − E[D(real)]; round 10): a run
    that does not learn has another reason."""
    if len(quiet) >= len(grads.first_step) / 2:
        return False
    if not grads.outcome.learns and not all(_lone_bias(grads, quiet, name) for name in quiet):
        return False
    if any(since != grads.first_step[name] for name, since in quiet.items()):
        return False
    return _dead_end(grads, quiet) or all(_silent_by_construction(grads, quiet, name) for name in quiet)


def _silent_by_construction(grads: SilentGradients, quiet: dict[str, int], name: str) -> bool:
    """Its module's other parameters get gradients (an attention key bias), or its module never
    ran (an unused branch), or, behind parameters that get gradients (nothing before it was cut
    off), its parent module's others do: a key projection attending over a set of one (a Set
    Transformer's SABs after PMA with one seed: softmax over one key is 1; round 22)."""
    module = _module(name)
    siblings = [p for p in grads.first_step if _module(p) == module and p not in quiet]
    unused = grads.called is not None and not any(c == module or c.startswith(module + ".") for c in grads.called)
    return bool(siblings) or unused or _parent_learns(grads, quiet, name)


def _parent_learns(grads: SilentGradients, quiet: dict[str, int], name: str) -> bool:
    parent = _module(_module(name))
    if not parent:  # the model itself: a top-level layer cut off beside a head that learns
        return False
    return _learns_before(grads, quiet, name) and any(n.startswith(parent + ".") and n not in quiet
                                                      for n in grads.first_step)


def _dead_end(grads: SilentGradients, quiet: dict[str, int]) -> bool:
    """The silent parameters are one module's, and a parameter before it in model order gets
    gradients: nothing before the module was cut off, so its own output goes nowhere."""
    first = min(quiet, key=list(grads.first_step).index)
    return len({_module(n) for n in quiet}) == 1 and _learns_before(grads, quiet, first)


def _learns_before(grads: SilentGradients, quiet: dict[str, int], name: str) -> bool:
    """A parameter before `name` in model order gets gradients (a cut silences every layer
    before it)."""
    names = list(grads.first_step)
    return any(n not in quiet for n in names[:names.index(name)])


def _lone_bias(grads: SilentGradients, quiet: dict[str, int], name: str) -> bool:
    """A bias silent from its first step beside a weight of its module that gets gradients."""
    weight = f"{_module(name)}.weight"
    return (name.endswith("bias") and quiet[name] == grads.first_step[name] and weight in grads.first_step
            and weight not in quiet)


@register("no_gradient", None, _silent_gradients)
def no_gradient(grads: SilentGradients, thresholds: Thresholds) -> list[Finding]:
    th = thresholds.gradients
    quiet = grads.quiet(th)
    # Parameters frozen on purpose from the first step (requires_grad=False) are not a fault.
    quiet = {n: s for n, s in quiet.items() if not (n in grads.frozen and s == grads.first_step[n])}
    if not quiet:
        return []
    # Structure silent from the start beside a later cut is two findings: the cut is dated, and
    # its loss gain measured, from the cut (round 21: a WaveNet's dead-end conv, silent from step
    # 0, had dated a detach at step 74 to step 0).
    from_start = {n: s for n, s in quiet.items() if s == grads.first_step[n]}
    later = {n: s for n, s in quiet.items() if n not in from_start}
    if from_start and later and _structural(grads, from_start):
        return [_silent_finding(grads, from_start, thresholds), _silent_finding(grads, later, thresholds)]
    return [_silent_finding(grads, quiet, thresholds)]


def _silent_finding(grads: SilentGradients, quiet: dict[str, int], thresholds: Thresholds) -> Finding:
    """The `no_gradient` finding of these silent parameters (name → the step they fell silent)."""
    th = thresholds.gradients
    # Within a step, the deepest layer first (its parameters in model order): the graph is cut
    # right after the last silent layer (every unit before a .detach() loses its gradient).
    depth: dict[str, int] = {}
    for n in quiet:
        depth.setdefault(n.rpartition(".")[0], len(depth))
    ordered = sorted(quiet, key=lambda n: (quiet[n], -depth[n.rpartition(".")[0]]))
    everything = len(quiet) == len(grads.first_step)
    structural = _structural(grads, quiet)
    since = min(quiet.values())
    # What the run learned without the silent tensors.
    gain = None if everything or grads.loss is None else _loss_gain(*grads.loss, since)
    # Too few judged points since the cut to measure a gain (round 19: SAC's evaluation return,
    # every 10 steps, 5 points after it): a run that learns by its outcome says it alone.
    kept_learning = gain >= th.cut_off_still_learns if gain is not None else grads.loss is not None
    # An outcome metric that improved after the cut says so too, whatever the loss did (round 36's
    # DINO: its loss, a cross-entropy to a moving teacher, rose in healthy runs too; the kNN rose).
    learned_by = None if everything or kept_learning else metric_improved_since(grads.metrics, since, thresholds.outcome)
    learns_on = bool(grads.outcome.learns) and not everything and (kept_learning or learned_by is not None)
    where = "the loss is not connected to any parameter" if everything else \
        "these parameters stopped receiving a gradient while the rest of the model still does"
    # Every gradient alive at first and none later: the model went flat, its graph was not cut
    # (round 18: NeRF at Adam lr 0.05, its density relu'd to 0 after the first update).
    went_flat = everything and all(quiet[n] > grads.first_step[n] for n in quiet)
    marked_frozen = sorted(set(quiet) & grads.frozen)
    if structural:
        fix = (f"{', '.join(ordered)} never received a gradient while the run learned: zero by "
               "construction (e.g. an attention key bias, an unused branch, a module whose output no loss "
               "reads); remove the parameter if it is not meant to exist")
    elif grads.dead:
        fix = (f"no gradient flows back through {layer_list(list(grads.dead))}: their units output "
               "exactly 0 (dead ReLUs, see dead_units); fix the dead units first (biases, "
               "LeakyReLU(0.2), Kaiming init), else look for a .detach() cutting the graph")
    elif went_flat:
        fix = (f"every parameter received a gradient at first and none from step {max(quiet.values())} on: the "
               "units went dead or the output saturated (too large a step, see lr_too_high; a ReLU or clamp "
               "at the output), not a cut graph")
    elif learns_on:
        since_gain = f" ({learned_by} better since)" if learned_by else \
            f" (loss {gain:.0%} lower since)" if gain is not None else ""
        fix = (f"{layer_list(ordered)} stopped receiving a gradient at step {since}, while the rest of the "
               f"model kept learning{since_gain}: if they are meant to learn, remove "
               "the .detach() / torch.no_grad() / .item() that cuts the graph before them")
    else:
        fix = (f"{where}: remove the .detach() / torch.no_grad() / .item() that cuts the graph "
               "before these layers")
    if marked_frozen:
        fix += f"; {', '.join(marked_frozen)} have requires_grad=False: unfreeze them if they should learn"
    return finding(
        "no_gradient", min(quiet.values()), ordered,
        {"parameters_without_gradient": len(quiet), "parameters": len(grads.first_step),
         "since_step": {n: quiet[n] for n in ordered}, "requires_grad_false": marked_frozen,
         "loss_gain_since": gain, "metric_improved_since": learned_by},
        fix, NOTE if structural else WARNING if learns_on else ERROR,
    )


def global_grad_norm(table: SeriesTable) -> tuple[np.ndarray, np.ndarray]:
    """The global gradient norm rebuilt from the per-tensor norms."""
    grads = table.indices("grad")
    if not grads:
        return np.zeros(0, np.int64), np.zeros(0)
    steps = np.concatenate([table.step[table.rows(i)] for i in grads])
    squares = np.concatenate([table.magnitude[table.rows(i)] ** 2 for i in grads])
    unique, inverse = np.unique(steps, return_inverse=True)
    return unique, np.sqrt(np.bincount(inverse, weights=np.nan_to_num(squares)))


def grad_norm_series(table: SeriesTable, scalars: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The recorded (pre-clip) `grad_norm`, else the global norm rebuilt from the tensors."""
    rows = scalars[scalars["name"] == "grad_norm"]
    steps = rows["step"].to_numpy(np.int64)
    values = rows["value"].to_numpy(np.float64)
    if len(values) == 0:
        steps, values = global_grad_norm(table)
    return steps, values


@dataclass(frozen=True)
class GradientHistory:
    """The global grad norm, each parameter's grad norm, and the loss, by step."""

    steps: np.ndarray
    norm: np.ndarray
    per_tensor: list[tuple[np.ndarray, np.ndarray]]
    loss_steps: np.ndarray
    loss: np.ndarray
    carried: tuple[np.ndarray, np.ndarray] | None = None
    """The recorder's `grad_carried_over` (steps, shares), where the run has it (from session 11)."""
    diverged: bool = False
    """The run diverged and did not come back (`Evidence.diverged`, not `recovered`)."""
    learns: bool | None = None
    """`Outcome.learns`: the run learned, by its own yardstick."""
    metrics: dict[str, tuple[np.ndarray, np.ndarray, bool]] = field(default_factory=dict)
    """The run's outcome metrics (`metric_series`)."""


def gradient_history(table: SeriesTable, scalars: pd.DataFrame, outcome: Outcome) -> GradientHistory:
    """`loss`: what judges the run (`judging_curve`: the main loss, or an outcome metric where the
    loss cannot), non-finite values too: _loss_change drops them."""
    steps, values = grad_norm_series(table, scalars)
    finite = np.isfinite(values)
    per_tensor = [(table.step[table.rows(i)], table.magnitude[table.rows(i)]) for i in table.indices("grad")]
    loss_steps, loss = judging_curve(scalars, outcome)
    carried = _after_an_optimizer_step(
        scalars[scalars["name"] == "grad_carried_over"].sort_values("step", kind="stable"), scalars)
    return GradientHistory(steps[finite], values[finite], per_tensor, loss_steps, loss,
                           (carried["step"].to_numpy(np.int64), carried["value"].to_numpy(np.float64))
                           if len(carried) else None, learns=outcome.learns, metrics=metric_series(scalars))


def _after_an_optimizer_step(carried: pd.DataFrame, scalars: pd.DataFrame) -> pd.DataFrame:
    """The `grad_carried_over` records whose record before stepped an optimizer (or that have
    none before them, or a run without `optimizer_stepped.*`). Between optimizer steps a loop
    that calls rec.step() once per micro-batch accumulates on purpose: only a gradient carried
    past an optimizer's step is a forgotten zero_grad()."""
    rows = scalars[scalars["name"].astype(str).str.startswith("optimizer_stepped.")]
    if rows.empty or carried.empty:
        return carried
    stepped = rows.groupby("step")["value"].max()
    before = np.searchsorted(stepped.index.to_numpy(np.int64), carried["step"].to_numpy(np.int64)) - 1
    keep = (before < 0) | (stepped.to_numpy(np.float64)[np.maximum(before, 0)] > 0)
    return carried[keep]


def _gradient_history(ev: Evidence) -> GradientHistory:
    return replace(gradient_history(ev.table, ev.scalars, ev.outcome), diverged=ev.diverged and not ev.recovered)


@register("stale_gradients", None, _gradient_history)
def stale_gradients(history: GradientHistory, thresholds: Thresholds) -> list[Finding]:
    """Missing zero_grad(): each recorded gradient is the running sum of all the previous ones.

    t0 is the bend common to the per-parameter gradient norms (postmortem.accumulation). From
    t0 the global norm must then climb like a sum: step after step by about one healthy
    gradient, without the jumps or the constant-ratio growth of an explosion, to ≥ 5× its
    level before, while the loss gets no better.

    Where the recorder saw it (`grad_carried_over`), that decides instead: see `_carried_over`.
    """
    th = thresholds.gradients
    if history.carried is not None:
        return _carried_over(history, thresholds)
    steps, values = history.steps, history.norm
    if len(values) < 20:
        return []
    # What follows an explosion says nothing about where the accumulation began.
    calm_level = float(np.median(values[: len(values) // 2]))
    exploded = np.flatnonzero(values > th.stale_exploded * calm_level)
    end = int(steps[exploded[0]]) if len(exploded) else int(steps[-1]) + 1
    unexploded = values[steps < end]
    blocks = [np.median(unexploded[i: i + PRE]) for i in range(0, len(unexploded) - PRE + 1, PRE)]
    if not blocks or np.sum(unexploded >= th.stale_growth * min(blocks)) < 2:
        # The climb must end ≥ 5× its level (median of its last 3 points): without two points
        # 5× above the lowest stretch there is nothing to look for, and no scan to pay for.
        return []
    # A later, sharper bend (an explosion the sum ends in) may outscore the start of the
    # accumulation and fail the climb checks: the start is then searched before that bend.
    for _ in range(1 + th.stale_earlier_bends):
        series = [(s[s < end], v[s < end]) for s, v in history.per_tensor]
        found = accumulation_onset(series or [(steps[steps < end], values[steps < end])])
        if found is None or found.mean_deviance <= 0:
            return []
        accumulating = _summed_climb(history, found, end, th)
        if accumulating:
            return accumulating
        end = found.step
    return []


def _carried_over(history: GradientHistory, thresholds: Thresholds) -> list[Finding]:
    """Missing zero_grad() as the recorder saw it: from t0 on, the first backward of each record
    found ≥ a quarter of the parameters it reached still holding the previous step's gradient.
    t0 starts a stretch of ≥ 3 such records in a row (one forgotten zero_grad is an accident,
    not an onset) after which ≥ 90 % of the records carry gradients over. In a run whose loss
    still ended lower than before t0 it is a note (the run learns on; some loops accumulate
    across rec.step() calls on purpose), unless the run diverged: then, as otherwise, it explains
    the verdict (round 22: a Conformer whose summed gradients ran away while its loss, CTC
    through Adam, still ended lower than before t0)."""
    th = thresholds.gradients
    steps, share = history.carried
    carrying = share >= th.carried_share
    k = th.carried_min_steps
    if len(carrying) < k:
        return []
    stretch = np.lib.stride_tricks.sliding_window_view(carrying, k).all(axis=1)
    # The share of carrying records from each record to the last.
    kept = np.cumsum(carrying[::-1])[::-1] / np.arange(len(carrying), 0, -1)
    starts = np.flatnonzero(stretch & (kept[: len(stretch)] >= th.carried_persist))
    if not len(starts):
        return []
    t0 = int(steps[starts[0]])
    after = share[starts[0]:]
    improvement = _loss_gain(history.loss_steps, history.loss, t0)
    # Or an outcome metric improved since, in a run that learns (round 36's DINO, whose loss rose in
    # healthy runs too while the teacher's kNN rose).
    learned_by = metric_improved_since(history.metrics, t0, thresholds.outcome) if history.learns else None
    fell = improvement is not None and improvement > th.carried_still_learns
    learns_on = (fell or learned_by is not None) and not history.diverged \
        and bool(np.isfinite(history.loss[history.loss_steps >= t0]).all())
    fix = (f"from step {t0} on, gradients are carried over from one step to the next (no "
           "optimizer.zero_grad()): call it at the start of every step")
    if learns_on:
        gained = f"the loss still fell {improvement:.0%}" if fell else f"{learned_by} still improved"
        fix += (f"; {gained} since, so if gradients are accumulated "
                "across rec.step() calls on purpose, call rec.step() once per optimizer step instead")
    return [finding(
        "stale_gradients", t0, [],
        {"carried_over_share": float(np.median(after)), "carrying_records": float(np.mean(after >= th.carried_share)),
         "records_since": len(after), "onset_interval": [t0, t0], "loss_change_since_start": improvement,
         "metric_improved_since": learned_by,
         "source": "grad_carried_over"},
        fix, NOTE if learns_on else ERROR,
    )]


def _loss_gain(steps: np.ndarray, values: np.ndarray, step: int) -> float | None:
    """Relative decrease of the finite loss from the 10 losses before `step` (the first 10 from
    it, when fewer than 3 came before) to the last 10 (positive: it improved)."""
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    before = values[steps < step][-10:]
    if len(before) < 3:
        before = values[steps >= step][:10]
    if len(before) < 3 or len(values) < 20 or np.median(before) == 0:
        return None
    return float((np.median(before) - np.median(values[-10:])) / abs(np.median(before)))


def _summed_climb(history: GradientHistory, found: AccumulationOnset, end: int,
                  th: GradientThresholds) -> list[Finding]:
    """The `stale_gradients` finding when the global norm climbs like a sum from the bend
    `found` (before step `end`): by about one healthy gradient a step, to ≥ 5× its level
    before, while the loss gets no better."""
    steps, values = history.steps, history.norm
    t0 = found.step
    before = values[steps < t0][-PRE:]
    climb = values[(steps >= t0) & (steps < end)]
    # An explosion may follow the accumulation: keep what comes before its first big jump (the
    # first step of the climb, t0 ± 1, may itself double the norm or more).
    jumps = np.flatnonzero(climb[1:] > th.stale_max_ratio * np.maximum(climb[:-1], 1e-300))
    jumps = jumps[jumps >= 1]
    if len(jumps):
        climb = climb[: jumps[0] + 1]
    # ...and up to its peak: once the loss has worsened, fresh gradients may turn against the
    # sum, which then stops growing; that plateau is not part of the climb.
    climb = climb[: int(np.argmax(climb)) + 1] if len(climb) else climb
    if len(before) < 10 or len(climb) < th.stale_min_climb:
        return []
    level = float(np.median(before))
    growth = float(np.median(climb[-3:]) / max(level, 1e-300))
    increments = np.diff(climb)
    rising = float(np.mean(increments >= 0))
    # |Δ‖G‖| ≤ ‖g_t‖: a sum moves by about one fresh gradient per step, an explosion by a
    # growing multiple of it.
    step_size = float(np.median(np.abs(increments)) / max(level, 1e-300))
    improvement = _loss_change(history.loss_steps, history.loss, t0)
    if growth < th.stale_growth or rising < th.stale_rising or step_size > th.stale_step_size or \
            (improvement is not None and improvement > th.stale_loss_improvement):
        return []
    return [finding(
        "stale_gradients", t0, [],
        {"grad_norm_before": level, "grad_norm_at_end": float(climb[-1]), "growth": growth,
         "rising_share": rising, "median_step_over_level": step_size, "bend_deviance": found.mean_deviance,
         "gradient_series": found.series,
         "onset_interval": list(found.interval), "loss_change_since_start": improvement},
        f"gradients accumulate across steps from step {t0} on: call optimizer.zero_grad() at "
        "the start of every step",
    )]


def loss_jumped(steps: np.ndarray, values: np.ndarray, interval: tuple[int, int], th: GradientThresholds) -> bool:
    """Whether the training loss (finite, step order) broke where the accumulation began,
    wherever in its interval (the bend's 95 % steps) that is: from every step of it, a loss
    within the 10 steps from it ≥ 1.2× the mean of the 10 before, or any later one ×100 above
    it (exploded). Without zero_grad() the recorded gradient is a running sum, so its growth is
    bookkeeping, not a runaway: a run whose loss then only drifts up stopped learning; one whose
    loss jumps or explodes broke (diverged)."""
    return all(_loss_jumped_at(steps, values, step, th) for step in range(interval[0], interval[1] + 1))


def accumulation_broke(stale: list[Finding], steps: np.ndarray, values: np.ndarray, th: GradientThresholds) -> bool:
    """Whether an accumulation of gradients (the first `stale_gradients` finding) began with a
    loss jump by `loss_jumped`'s test: the run broke there (diverged), it did not merely stall."""
    if not stale:
        return False
    low, high = (int(v) for v in stale[0].evidence["onset_interval"])
    # Only a loss that was there to jump says so (loss_jumped keeps a diverged call without one).
    if np.sum(steps < low) < 3 or not np.any(steps >= high):
        return False
    return loss_jumped(steps, values, (low, high), th)


def _loss_jumped_at(steps: np.ndarray, values: np.ndarray, step: int, th: GradientThresholds) -> bool:
    before = values[steps < step][-th.stale_jump_window:]
    after = values[steps >= step]
    if len(before) < 3 or not len(after):
        return True  # nothing to compare: the divergence machinery's call stands
    level = float(np.mean(before))
    return bool(np.max(after[: th.stale_jump_window]) >= raised(level, th.stale_loss_jump)
                or np.max(after) >= raised(level, th.stale_exploded))


def _loss_change(steps: np.ndarray, values: np.ndarray, step: int) -> float | None:
    """Relative loss decrease from just before `step` to the end (positive: it improved)."""
    before = values[steps < step][-10:]
    after = values[steps >= step][-10:]
    before, after = before[np.isfinite(before)], after[np.isfinite(after)]
    if len(before) == 0 or len(after) == 0 or np.median(before) == 0:
        return None
    return float((np.median(before) - np.median(after)) / abs(np.median(before)))


@dataclass(frozen=True)
class LayerGradients:
    """Median gradient RMS (norm/√numel) of each weight (`is_weight`; every parameter where the
    run has none), input side first."""

    rms: list[tuple[str, float]]
    outcome: Outcome
    networks: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    """Recorded model name → (its class, the module types it holds), when a run has several."""
    lr_erased_init: bool = False  # lr_too_high found as an error: the first updates wiped the init out


def _networks(manifest: dict) -> dict[str, tuple[str, tuple[str, ...]]]:
    models = manifest.get("models") or {}
    if not isinstance(models, dict) or len(models) < 2:  # a hostile manifest is read as none
        return {}
    return {str(name): (str(m.get("class", "")),
                        tuple(str(mod.get("type", "")) for mod in (m.get("modules") or []) if isinstance(mod, dict)))
            for name, m in models.items() if isinstance(m, dict) and isinstance(m.get("modules") or [], list)}


def _layer_gradients(ev: Evidence) -> LayerGradients:
    grads = role(ev.summary, "grad")
    networks = _networks(ev.manifest)
    if grads.empty:
        return LayerGradients([], ev.outcome, networks)
    grads = grads[(grads["median"] > 0) & (grads["numel"] > 0)]
    order = manifest_order(ev.manifest)
    grads = grads.assign(rms=grads["median"] / np.sqrt(grads["numel"]),
                         pos=grads["name"].map(lambda n: order.get(n, 10**6))).sort_values("pos", kind="stable")
    rms = [(n, float(r)) for n, r in zip(grads["name"], grads["rms"])]
    # By shape, a recurrent net's own weights count (an LSTM's `weight_ih_l0` is not named *weight):
    # the layers a vanishing signal crosses, where biases and gains would break the layer order.
    shapes = parameter_shapes(ev.manifest)
    weights = [(n, r) for (n, r), numel in zip(rms, grads["numel"]) if is_weight(n, int(numel), shapes)]
    return LayerGradients(weights or rms, ev.outcome, networks,
                          any(f.label == "lr_too_high" and f.severity == ERROR for f in ev.found))


@register("vanishing_gradient", "gradients", _layer_gradients)
def vanishing_gradient(layers: LayerGradients, th: GradientThresholds) -> list[Finding]:
    """Gradients that shrink layer by layer toward the input, in a run that does not learn.

    One tiny gradient is structure, not a fault (an attention key bias has a zero gradient by
    construction): the weights' RMS must fall from the output to the input on most layer-to-
    layer steps, and reach ≤ 1e-3 of the output layer's or below 1e-7, where the run does not
    learn.
    """
    if layers.outcome.learns:
        return []
    weights = layers.rms
    if len(weights) < 3:
        return []
    rms = np.array([r for _, r in weights])
    ratio = float(rms[0] / rms[-1])
    # No layer's gradient more than ×2 above the next one's (toward the output): a vanishing
    # signal may stay flat at its floor over the first layers, but never comes back.
    shrinking = float(np.mean(rms[:-1] <= th.vanishing_step_tolerance * rms[1:]))
    tiny = [n for n, r in weights if r < th.vanishing_rms]
    small = ratio < th.vanishing_layer_ratio or (len(tiny) >= len(weights) / 2 and rms[0] < th.vanishing_rms)
    if not (small and shrinking >= th.vanishing_monotone_share):
        return []
    vanished = (tiny or [weights[0][0]])[:10]
    network = next((n for n in layers.networks if all(x.startswith(n + ".") for x in vanished)), None)
    where = "the input"
    init = "kaiming_normal_ (nonlinearity='relu', or 'leaky_relu' with a= its slope, e.g. 0.2)"
    if network is not None:
        cls, types = layers.networks[network]
        where = f"the input of `{network}`" + (f" ({cls})" if cls else "")
        init = _init_for(types)
    evidence = {"smallest_grad_rms": float(rms.min()), "first_to_last_layer_grad_ratio": ratio,
                "share_of_layers_shrinking_toward_the_input": shrinking,
                "threshold_grad_rms": th.vanishing_rms, "network": network}
    if layers.lr_erased_init:
        # The lr wiped the init out first (ConvNeXt at lr ×100: its stem's gradient 1e-5 × its
        # head's afterwards): a new init would be wiped out again, the lr is the fix.
        return [finding("vanishing_gradient", None, vanished, evidence,
                        f"gradients vanish toward {where} ({layer_list(vanished)}) after the first updates erased "
                        "the initialisation: lower the learning rate first (see lr_too_high)", NOTE)]
    return [finding(
        "vanishing_gradient", None, vanished, evidence,
        f"gradients vanish toward {where} ({layer_list(vanished)}): re-initialise "
        f"{'its' if network else 'the'} weights with torch.nn.init.{init}, or normalise between layers",
    )]


def _init_for(types: tuple[str, ...]) -> str:
    """The init that keeps a signal's variance through the network's activations (seed 003)."""
    if "LeakyReLU" in types:
        return "kaiming_normal_(w, a=0.2, nonlinearity='leaky_relu') (a = its LeakyReLU slope)"
    if any(t in types for t in ("Tanh", "Sigmoid")) and not any(t in types for t in ("ReLU", "GELU", "SiLU")):
        return "xavier_uniform_(w, gain=calculate_gain('tanh')) (its activations are Tanh/Sigmoid)"
    return "kaiming_normal_(w, nonlinearity='relu')"
