"""Direct causes the recorder saw at the onset, named before any growth model is believed.

A param group's hyperparameter changed ×k at a step; a parameter's weights changed by more than
its optimizer can explain; a batch outside the range of every batch before it. Each is searched
from `lookback` steps before the fitted onset to `window` steps after it: the fitted break may
see only the explosion that follows a cause (an lr raised ×30 shows in the loss steps later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ..findings import Finding
from ..manifest import optimizer_groups, parameter_shapes
from ..ranking import healthy_range, out_of_range
from .base import ERROR, WARNING, Evidence, finding, register
from .inputs import NOT_FEATURES
from .thresholds import RootCauseThresholds

__all__ = [
    "CAUSES",
    "OnsetWindow",
    "Series",
    "batch_out_of_range",
    "batches_out_of_range",
    "hp_changes",
    "hyperparameter_changed",
    "optimizer_state_changed",
    "state_changes",
    "weights_changed_outside_optimizer",
]

CAUSES = ("hyperparameter_changed", "optimizer_state_changed", "weights_changed_outside_optimizer",
          "batch_out_of_range")


@dataclass(frozen=True)
class Series:
    steps: np.ndarray
    values: np.ndarray

    def at(self, step: int) -> float | None:
        i = np.searchsorted(self.steps, step)
        return float(self.values[i]) if i < len(self.steps) and self.steps[i] == step else None

    def before(self, step: int) -> np.ndarray:
        return self.values[self.steps < step]


@dataclass(frozen=True)
class OnsetWindow:
    """The series around an incident's fitted onset that a direct cause shows in."""

    onset: int | None
    first_step: int
    hyperparameters: dict[str, Series]  # hp.<optimizer>.<group>.<name>
    groups: dict[str, list[str]]  # "<optimizer>.<group>" → its parameters
    params: dict[str, Series]  # parameter norms
    updates: dict[str, Series]  # update norms
    grads: dict[str, Series]
    states: dict[tuple[str, str], Series]  # (parameter, state key) → norm
    batches: dict[str, Series]  # input/target max |x| (NaN where a batch held NaN/inf)
    severity: str  # error in a run that diverged, warning in one that came back
    batch_kinds: dict[str, str] = field(default_factory=dict)  # input/target name → "float", "index", "mask"
    numel: dict[str, int] = field(default_factory=dict)  # parameter → its element count (the manifest's shapes)

    def group_of(self, name: str) -> str | None:
        """The "<optimizer>.<group>" holding parameter `name`, None where no group lists it."""
        return next((group for group, params in self.groups.items() if name in params), None)

    def lookback(self, th: RootCauseThresholds) -> tuple[int, int]:
        return max(self.first_step + 1, self.onset - th.lookback), self.onset + th.window


def _series(ev: Evidence, role: str, steps: tuple[int, int] | None = None, *, by_key: bool = False) -> dict:
    """Each series of `role` (non-finite points as NaN) by name, or by (name, state key) with
    `by_key`; within `steps` (inclusive) when given: a 100 000-step run's tensors are read only
    around the onset."""
    table = ev.table
    found = {}
    for index in table.indices(role):
        rows = table.rows(index)
        step = table.step[rows]
        if steps is not None:
            lo, hi = np.searchsorted(step, [steps[0], steps[1] + 1])
            rows = slice(rows.start + int(lo), rows.start + int(hi))
            step = table.step[rows]
        values = np.where(table.nonfinite[rows] > 0, np.nan, table.magnitude[rows].astype(np.float64))
        key = table.keys[index]
        found[(key.name, key.key or "") if by_key else key.name] = Series(step, values)
    return found


def onset_window(ev: Evidence) -> OnsetWindow:
    hp = {}
    for name, group in ev.scalars.groupby("name", sort=True, observed=True):
        if str(name).startswith("hp."):
            hp[str(name)] = Series(group["step"].to_numpy(np.int64), group["value"].to_numpy(np.float64))
    groups = optimizer_groups(ev.manifest)
    batches = {**_series(ev, "input"), **_series(ev, "target")}
    kinds = {name: kind for (role, name), kind in ev.table.input_kinds.items() if role in ("input", "target")}
    onset = ev.onset.step if ev.onset is not None else None
    # Tensors: the widest lookback any variant searches, plus the history a jump is measured on.
    near = (onset - _TENSOR_REACH, onset + _TENSOR_REACH) if onset is not None else (0, -1)
    return OnsetWindow(
        onset, int(ev.table.step.min()) if len(ev.table.step) else 0,
        hp, groups, _series(ev, "param", near), _series(ev, "update", near), _series(ev, "grad", near),
        _series(ev, "state", near, by_key=True), batches, WARNING if ev.recovered else ERROR, kinds,
        {name: math.prod(shape) for name, shape in parameter_shapes(ev.manifest).items()})


# Optimizer states that accumulate squares (Adam/AdamW/NAdam/RAdam, AMSGrad, RMSprop, Adagrad, Adadelta).
_SQUARES = frozenset({"exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum", "acc_delta"})
_MIN_HISTORY = 3  # step-to-step changes seen before a hyperparameter change can be a cause
_HISTORY = 20  # a jump is measured over the median of the 20 finite values before it
_TENSOR_REACH = 200 + _HISTORY  # tensors are read this far around the onset (lookback ≤ 200)

# Which way a hyperparameter must move to make steps larger or less damped. A decaying lr
# schedule, a growing eps or a lighter weight decay cannot start a divergence.
_HARMFUL = {"lr": 1, "momentum": 1, "weight_decay": 1, "eps": -1, "beta1": 0, "beta2": 0}


def hp_changes(window: OnsetWindow, th: RootCauseThresholds) -> list[tuple[int, str, float, float]]:
    """(step, name, before, after) of every harmful change ×k inside the window."""
    low, high = window.lookback(th)
    found = []
    for name, series in window.hyperparameters.items():
        direction = _HARMFUL.get(name.rsplit(".", 1)[-1], 0)
        values = series.values
        if len(values) < 2:
            continue
        change = _log_ratios(values[:-1], values[1:])
        # The largest change before each one: a schedule that moves this much anyway (a
        # warm-up's first steps) is no cause.
        size = np.nan_to_num(np.abs(change), nan=0.0, posinf=0.0)  # from 0 is a start, not a ×k
        seen = np.concatenate([[0.0], np.maximum.accumulate(size)[:-1]])
        steps = series.steps[1:]
        # A cause needs a few changes of history to stand out from (a warm-up's first step
        # doubles the lr from nothing seen before).
        enough = np.arange(len(change)) >= _MIN_HISTORY
        # A change still in force at the onset counts however long before it (an lr ×1000 on
        # one group 48 steps before its LoRA blew up; session 13, round 13's lr_spike-lora-s2).
        held = _held_until(change, steps, high, th.hp_change_factor,
                           np.flatnonzero(np.abs(np.nan_to_num(change)) >= math.log(th.hp_change_factor)))
        hit = (enough & ((steps >= low) | held) & (steps <= high) & np.isfinite(values[:-1]) & np.isfinite(values[1:])
               & (np.abs(change) >= math.log(th.hp_change_factor)) & ~(change * direction < 0)
               & ((seen == 0) | (np.abs(change) >= seen + math.log(th.hp_beyond_history))))
        hit &= np.isfinite(change)
        for i in np.flatnonzero(hit):
            found.append((int(steps[i]), name, float(values[i]), float(values[i + 1])))
    return sorted(found)


def _held_until(change: np.ndarray, steps: np.ndarray, until: int, factor: float, changes: np.ndarray) -> np.ndarray:
    """Per step-to-step change (`change`: log ratios, at `steps`; only those indexed by `changes`
    are read, the ×k ones): whether no later change through step `until` undid it (×`factor` the
    other way in one step). A schedule's decay, a little each step, undoes nothing."""
    held = np.zeros(len(steps), dtype=bool)
    end = int(np.searchsorted(steps, until, side="right"))
    for i in changes:
        later = np.nan_to_num(change[i + 1: end], nan=0.0)
        held[i] = not np.any(later * np.sign(change[i]) <= -math.log(factor))
    return held


def _log_ratios(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """log(after / before); +inf from 0 to a positive value, NaN where a sign makes it meaningless."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(after / before)
    ratio = np.where(before == after, 0.0, ratio)
    ratio = np.where((before == 0) & (after > 0), np.inf, ratio)
    return np.where(((before < 0) | (after < 0)) | ((before > 0) & (after == 0)), np.nan, ratio)


@register("hyperparameter_changed", "root_causes", onset_window)
def hyperparameter_changed(window: OnsetWindow, th: RootCauseThresholds) -> list[Finding]:
    if window.onset is None:
        return []
    changes = hp_changes(window, th)
    if not changes:
        return []
    step, name, before, after = changes[0]
    _, opt, group, kind = name.split(".", 3) if name.count(".") >= 3 else ("hp", "?", "?", name)
    params = window.groups.get(f"{opt}.{group}", [])
    factor = after / before if before else math.inf
    return [finding(
        "hyperparameter_changed", step, params[:10],
        {"hyperparameter": name, "before": before, "after": after, "factor": factor,
         "optimizer": opt, "param_group": group, "fitted_onset": window.onset,
         "also_changed": [c[1] for c in changes[1:] if c[0] == step][:10]},
        f"{kind} of param group {group} of optimizer `{opt}` changed ×{factor:.3g} at step {step} "
        f"({before:.3g} → {after:.3g}): check the scheduler and every assignment to "
        f"param_group['{kind}']; keep it at {before:.3g}",
        window.severity,
    )]


def state_changes(window: OnsetWindow, th: RootCauseThresholds) -> list[tuple[int, str, str, float]]:
    """(step, parameter, state key, factor) where a second-moment state's norm fell ÷k in one
    step (Adam's exp_avg_sq zeroed): an EMA of squares falls by β2 per step at most, a sum of
    squares never falls. Signed states (exp_avg, momentum_buffer) can cancel to ~0 when the
    gradient turns, so they say nothing here."""
    low, high = window.lookback(th)
    found = []
    for (name, key), series in window.states.items():
        if key not in _SQUARES:
            continue
        values = series.values
        if len(values) < _MIN_HISTORY + 2:
            continue
        change = _log_ratios(values[:-1], values[1:])
        steps = series.steps[1:]
        hit = ((np.arange(len(change)) >= _MIN_HISTORY) & (steps >= low) & (steps <= high)
               & np.isfinite(change) & (change <= -math.log(th.state_jump_factor)))
        found += [(int(steps[i]), name, key, float(np.exp(change[i]))) for i in np.flatnonzero(hit)]
    return sorted(found)


@register("optimizer_state_changed", "root_causes", onset_window)
def optimizer_state_changed(window: OnsetWindow, th: RootCauseThresholds) -> list[Finding]:
    if window.onset is None:
        return []
    changes = state_changes(window, th)
    if not changes:
        return []
    step = changes[0][0]
    same = [c for c in changes if c[0] == step]
    keys = sorted({c[2] for c in same})
    return [finding(
        "optimizer_state_changed", step, list(dict.fromkeys(c[1] for c in same))[:10],
        {"state_keys": keys, "factor": {f"{c[1]}[{c[2]}]": c[3] for c in same[:20]},
         "tensors_changed": len({c[1] for c in same}), "fitted_onset": window.onset},
        f"the optimizer state ({', '.join(keys)}) of {len({c[1] for c in same})} parameter(s) fell "
        f"×{min(c[3] for c in same):.3g} at step {step}, more than any optimizer step can make it: "
        "something reset or overwrote optimizer.state (a partial load_state_dict, a state reset "
        "without a warm-up, a dtype cast); restore the state or rebuild it with a short warm-up",
        window.severity,
    )]


@register("weights_changed_outside_optimizer", "root_causes", onset_window)
def weights_changed_outside_optimizer(window: OnsetWindow, th: RootCauseThresholds) -> list[Finding]:
    """A parameter norm ×k in one step with an update of the order of the parameter itself, far
    beyond what its gradient's change can explain, and no hyperparameter of its group changed."""
    if window.onset is None:
        return []
    low, high = window.lookback(th)
    changed_groups = {c[1].split(".")[1] + "." + c[1].split(".")[2] for c in hp_changes(window, th)
                      if c[1].count(".") >= 3}
    explained = {p for g in changed_groups for p in window.groups.get(g, [])}
    # The optimizer moved them, from a state something else had reset: an EMA of squares
    # falls ×β2 a step at most, so one that fell ÷1.5 was reset too, if refilled past ÷10.
    explained |= {c[1] for c in state_changes(window, replace(th, state_jump_factor=th.state_reset_explains))}
    # A tensor no optimizer holds is moved by the loop itself, every step, by design: an EMA copy
    # (round 34's MoCo key encoder, m·k + (1 − m)·q under no_grad), a target network. Only where
    # the manifest lists the optimizers' parameters can that be told.
    held = {p for params in window.groups.values() for p in params}
    hits = []
    for name, param in window.params.items():
        update, grad = window.updates.get(name), window.grads.get(name)
        if name in explained or update is None or (held and name not in held):
            continue
        for i in range(1, len(param.steps)):
            step = int(param.steps[i])
            if not low <= step <= high:
                continue
            before, now = float(param.values[i - 1]), float(param.values[i])
            u = update.at(step)
            if not (before > 0 and now > 0 and u is not None and math.isfinite(u)):
                continue
            jump = now / before
            if max(jump, 1 / jump) < th.param_jump_factor or u < th.outside_update_ratio * before:
                continue
            update_jump = _jump_over_history(update, step)
            grad_jump = _jump_over_history(grad, step) if grad is not None else 1.0
            # An optimizer's step moves with its gradient (SGD) or less (Adam), and SGD's with
            # momentum along its buffer, which carries the gradients of the steps before: an update
            # that jumped ×3.3 more than both did was not the optimizer's (round 32's
            # healthy_spike-qat-s2: a BatchNorm bias ×2.1 one step after wrong targets' gradients
            # ×340 had filled SGD's momentum buffer ×150, its own gradient back down). An adaptive
            # optimizer's first moment explains nothing: its step is divided by the second's.
            buffer = window.states.get((name, "momentum_buffer"))
            moment_jump = (_jump_over_history(buffer, step) or 0.0) if buffer is not None and not _adaptive(window, name) else 0.0
            if update_jump is None or (update_jump < th.update_over_grad_jump * max(grad_jump or 1.0, moment_jump, 1.0)
                                       and not _beyond_adaptive_step(window, name, step, u, th)):
                continue
            hits.append((step, -abs(math.log(jump)), name, jump, u / before, update_jump, grad_jump))
            break
    if not hits:
        return []
    hits.sort()
    step = hits[0][0]
    same = [h for h in hits if h[0] == step]
    return [finding(
        "weights_changed_outside_optimizer", step, [h[2] for h in same][:10],
        {"norm_factor": {h[2]: h[3] for h in same}, "update_over_param": {h[2]: h[4] for h in same},
         "update_jump": {h[2]: h[5] for h in same}, "grad_jump": {h[2]: h[6] for h in same},
         "fitted_onset": window.onset},
        f"the weights of {', '.join(h[2] for h in same[:3])} changed ×{same[0][3]:.3g} at step {step}, "
        "more than their optimizer step can explain (no gradient or learning-rate jump): look for "
        "code that writes into them outside optimizer.step() (a checkpoint restore, an in-place "
        "op on .data, a weight-tying or EMA bug)",
        window.severity,
    )]


def _beyond_adaptive_step(window: OnsetWindow, name: str, step: int, update: float,
                          th: RootCauseThresholds) -> bool:
    """An update no Adam step can make: Adam's step (AdamW, NAdam, RAdam alike: the groups with
    betas) is lr·m̂/(√v̂ + eps), at most lr·(1 − β1)/√(1 − β2) an element however large the
    gradient (Kingma & Ba 2015, §2.1; 3.2·lr at the default betas), so `adaptive_step_margin`×
    that over all its elements was not the optimizer's. A gradient that jumped with it explains
    nothing: a tensor rescaled ×300 before the forward has its gradient jump too (round 37,
    weight_scale-deepar-s2: an LSTM ×300, its gradient ×1e8). RMSprop's first steps reach
    lr/√(1 − α) and are not bounded here."""
    group = window.group_of(name)
    if group is None or name not in window.numel:
        return False

    def value(hp: str) -> float:
        series = window.hyperparameters.get(f"hp.{group}.{hp}")
        known = series.values[series.steps <= step] if series is not None else np.array([])
        return float(known[-1]) if len(known) and np.isfinite(known[-1]) else math.nan

    lr, beta1, beta2 = value("lr"), value("beta1"), value("beta2")
    if not (math.isfinite(lr) and 0 <= beta1 < 1 and 0 < beta2 < 1):  # NaN fails too: no betas recorded
        return False
    per_element = lr * (1 - beta1) / math.sqrt(1 - beta2)
    return update > th.adaptive_step_margin * per_element * math.sqrt(window.numel[name])


def _adaptive(window: OnsetWindow, name: str) -> bool:
    """Whether the parameter's optimizer divides its step by its gradients' scale: its group has
    an `eps` (Adam, RMSprop, Adagrad; `base.adaptive_optimizer`'s test, per group)."""
    group = window.group_of(name)
    return group is not None and f"hp.{group}.eps" in window.hyperparameters


def _jump_over_history(series: Series, step: int) -> float | None:
    """The value at `step` over the median of the `_HISTORY` finite values before it."""
    now = series.at(step)
    before = series.before(step)
    before = before[np.isfinite(before) & (before > 0)][-_HISTORY:]
    if now is None or not math.isfinite(now) or len(before) < 3:
        return None
    return float(now / np.median(before))


def batches_out_of_range(window: OnsetWindow, th: RootCauseThresholds) -> list[tuple[int, str]]:
    """(step, name) of every input or target batch in the run whose max |x| is ×k outside the
    range of every batch before it (`out_of_range`, read at once over the whole series: a
    100 000-step run's batches are not re-read per step). Indices and masks only above it: a
    batch of class IDs without the ignore index 255 is no fault (round 28's deeplab, its
    `healthy_spike` batches of labels 0–4), an ID ×10 above every ID before it is."""
    found = []
    for name, batch in window.batches.items():
        usable = np.isfinite(batch.values) & (batch.values > 0)
        # The smallest and largest usable value of the batches strictly before each step.
        low = np.minimum.accumulate(np.where(usable, batch.values, np.inf))
        high = np.maximum.accumulate(np.where(usable, batch.values, -np.inf))
        seen = np.cumsum(usable)
        low, high, seen = np.r_[np.inf, low[:-1]], np.r_[-np.inf, high[:-1]], np.r_[0, seen[:-1]]
        with np.errstate(invalid="ignore"):
            outside = out_of_range(batch.values, (low, high), th.batch_range_factor)
            if window.batch_kinds.get(name) in NOT_FEATURES:
                outside &= batch.values > high
        hits = np.flatnonzero(np.isfinite(batch.values) & (seen >= 3) & outside)
        found += [(int(batch.steps[i]), name) for i in hits]
    return sorted(found)


@register("batch_out_of_range", "root_causes", onset_window)
def batch_out_of_range(window: OnsetWindow, th: RootCauseThresholds) -> list[Finding]:
    """An input or target batch at the onset (±window) whose max |x| is ×k outside the range of
    every batch before it (non-finite batches are nonfinite_input's). In a run with no incident
    the first such batch is a warning of its own: the training loss did not feel it, but a
    batch ×1e3 that train-mode BatchNorm normalises away still enters its running statistics
    (round 31, batch_scale-timm_mixup: held-out top-1 at chance behind a training loss equal to
    its twin's)."""
    found = batches_out_of_range(window, th)
    if window.onset is not None:
        found = [(step, name) for step, name in found if window.onset - th.window <= step <= window.onset + th.window]
    if not found:
        return []
    step, name = found[0]
    batch = window.batches[name]
    now, (lo, hi) = batch.at(step), healthy_range(batch.before(step))
    unfelt = window.onset is None
    return [finding(
        "batch_out_of_range", step, [name],
        {"max_abs": now, "healthy_range": [lo, hi], "factor": now / hi if now > hi else now / lo,
         "batches_out_of_range": len(found) if unfelt else 1, "loss_felt_it": not unfelt},
        f"the batch `{name}` at step {step} had max |x| {now:.3g}, outside {lo:.3g}–{hi:.3g} of every "
        "batch before it" + (f" ({len(found)} such batches)" if unfelt and len(found) > 1 else "")
        + (": the training loss did not feel it, but normalisation layers' running statistics and "
           "held-out metrics may (check them after that step); " if unfelt else ": ")
        + "find that batch in the data pipeline (a unit change, a corrupt record); "
        "validate or clip the range of each batch before the forward pass",
        WARNING if unfelt else window.severity,
    )]
