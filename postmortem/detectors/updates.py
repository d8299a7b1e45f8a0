"""Findings about the steps the optimizer took: none at all, or far too small."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..findings import Finding
from ..manifest import is_weight, manifest_order, parameter_shapes
from ..series import SeriesTable
from .base import ERROR, Evidence, Outcome, adaptive_optimizer, finding, loss_curve, register, role, scalar
from .gradients import SilentGradients, silence
from .thresholds import Thresholds, UpdateThresholds

__all__ = ["LossPace", "UpdateActivity", "UpdateRatios", "lr_too_low", "no_update", "slow_steady_descent", "weights_travelled"]


@dataclass(frozen=True)
class UpdateActivity:
    """What the optimizer did with the gradients it was given."""

    grads: SilentGradients
    grad_rms: dict[str, float]  # median gradient RMS per parameter
    updates: SilentGradients | None  # the same silence bookkeeping for the `update` rows
    param_change: dict[str, float] | None  # without update rows: |late − early| / |early| per weight
    stepped: tuple[np.ndarray, np.ndarray]  # steps and values of every optimizer_stepped.<name> (schema 2)
    lr: float | None


def _update_activity(ev: Evidence) -> UpdateActivity:
    grads = role(ev.summary, "grad")
    rms = {n: float(m / np.sqrt(max(k, 1))) for n, m, k in zip(grads.get("name", []), grads.get("median", []),
                                                                 grads.get("numel", []))}
    params = role(ev.summary, "param")
    change = None
    if role(ev.summary, "update").empty and not params.empty and (params["steps"] >= 10).all():
        change = {n: float(abs(late - early) / max(abs(early), 1e-300))
                  for n, early, late in zip(params["name"], params["early"], params["late"])}
    rows = ev.scalars[ev.scalars["name"].astype(str).str.startswith("optimizer_stepped.")]
    stepped = (rows["step"].to_numpy(np.int64), rows["value"].to_numpy(np.float64))
    updates = role(ev.summary, "update")
    return UpdateActivity(silence(grads, ev.manifest, ev.outcome), rms,
                          None if updates.empty else silence(updates, ev.manifest, ev.outcome),
                          change, stepped, first_lr(ev.scalars))


def first_lr(scalars) -> float | None:
    values = scalar(scalars, "lr")
    values = values[np.isfinite(values)]
    return float(values[0]) if len(values) else None


def peak_lr(scalars) -> float | None:
    """The largest recorded lr: the schedule's peak, not a warm-up's first value."""
    values = scalar(scalars, "lr")
    values = values[np.isfinite(values)]
    return float(values.max()) if len(values) else None


@register("no_update", None, _update_activity)
def no_update(activity: UpdateActivity, th: Thresholds) -> list[Finding]:
    """Gradients arrive but the parameters do not move: a missing optimizer.step(), or lr 0."""
    silent_grads = activity.grads.quiet(th.gradients)
    # Gradients below the vanishing threshold may legitimately round to no change at all.
    live = [n for n in activity.grads.first_step
            if n not in silent_grads and activity.grad_rms.get(n, 0.0) >= th.gradients.vanishing_rms]
    if not live:
        return []
    lr = activity.lr
    if activity.updates is not None:
        stuck_since = {n: s for n, s in activity.updates.quiet(th.gradients).items() if n in live}
        if not stuck_since:
            return []
        since = min(stuck_since.values())
        evidence = {"parameters_not_updated": len(stuck_since), "parameters_with_gradients": len(live),
                    "since_step": since, "lr": lr,
                    "grad_norm_rms_median": float(np.median([activity.grad_rms[n] for n in live]))}
        tensors = sorted(stuck_since)
    elif activity.param_change is not None:
        if any(change > 1e-7 for change in activity.param_change.values()):
            return []
        since, tensors = 0, sorted(activity.param_change)
        evidence = {"param_norm_change": 0.0, "lr": lr}
    else:
        return []
    # Schema 2: whether the optimizers stepped at all since then (share of steps, 0.0 = never).
    steps, values = activity.stepped
    if np.any(steps >= since):
        evidence["optimizer_stepped"] = float(np.mean(values[steps >= since]))
    fix = "set a learning rate above 0" if lr == 0 else \
        "call optimizer.step() after loss.backward() in every step"
    return [finding("no_update", since, tensors[:10], evidence, fix)]


@dataclass(frozen=True)
class UpdateRatios:
    """Each trained tensor's median update/param ratio (model order; 0 where it never moved),
    whether it is a weight matrix (2-D or more), and its norm at the end over its norm at the
    start (NaN where unknown)."""

    ratio: np.ndarray
    matrix: np.ndarray
    growth: np.ndarray

    def read(self, th: UpdateThresholds) -> np.ndarray:
        """The ratios CS231n's target is about, NaN where a tensor never moved. CS231n's ratio is
        about weight matrices: a bias, a norm's gain or a layer scale starts at 0, 1 or 1e-6, and
        its ratio follows that start more than the step size (ConvNeXt at lr ×1e-4: median 9e-3
        over every tensor, 3e-6 over its 2-D+ weights). So is a matrix that started near 0 (LoRA's
        B: its ratio 1e-2 beside A's 1e-6 at lr ×1e-4; round 13). Without such matrices, every tensor."""
        matrices = self.matrix & ~(self.growth >= th.started_near_zero_growth)
        ratios = self.ratio[matrices] if matrices.any() else self.ratio
        return np.where(ratios == 0, np.nan, ratios)


@dataclass(frozen=True)
class LossPace:
    """The training loss (finite, step order), the update/param ratios, the peak lr."""

    loss: np.ndarray
    ratios: UpdateRatios
    lr: float | None
    outcome: Outcome
    diverged: bool
    gradients_vanish: bool = False  # vanishing_gradient found: the updates may be tiny because the gradients are
    adaptive: bool = False
    """An adaptive optimizer (`adaptive_optimizer`): its steps follow the lr, so under it tiny
    updates near the loss mean the lr is too low even where gradients vanish toward the input
    (round 10: reinforce and wgan_gp at lr ×1e-4, 1e-6 there). Under SGD the step is lr ×
    gradient, and a vanished signal makes every update tiny (seed 003)."""
    stepless: bool = False  # no_update found that the optimizer never stepped, whatever its lr
    gradientless: bool = False
    """no_gradient found that no parameter gets a gradient: tiny updates then say nothing of the lr
    (Adam's steps decay to 0 without one; round 18: NeRF at Adam lr 0.05, every unit dead after its
    first update, whose "raise the lr" was the wrong way)."""
    too_high: bool = False  # lr_too_high found: the first updates erased the init (a VQ-VAE at lr ×100 whose units then died)

    def update_ratio(self, th: UpdateThresholds) -> float | None:
        """The median ratio, and that of the output-side half of the tensors read (model order)."""
        return _nanmedian(self.ratios.read(th))

    def output_update_ratio(self, th: UpdateThresholds) -> float | None:
        ratios = self.ratios.read(th)
        return _nanmedian(ratios[len(ratios) // 2:])


def _nanmedian(values: np.ndarray) -> float | None:
    finite = values[~np.isnan(values)]
    return float(np.median(finite)) if len(finite) else None


def _stepless(no_update: dict) -> bool:
    """A no_update finding's evidence says the optimizer never stepped: the recorder saw no step
    (`optimizer_stepped` 0), or no parameter with a gradient moved. Four tensors whose updates
    round to 0 under fp16 after a ÷10 schedule step (kws at lr ×1e-4) are no such loop."""
    return no_update.get("optimizer_stepped") == 0.0 or \
        no_update.get("parameters_not_updated", 0) >= no_update.get("parameters_with_gradients", 1)


def _gradientless(no_gradient: dict) -> bool:
    """A no_gradient finding's evidence says every parameter it read went without a gradient."""
    return no_gradient.get("parameters_without_gradient", 0) >= no_gradient.get("parameters", 1)


def _loss_pace(ev: Evidence) -> LossPace:
    updates = role(ev.summary, "update")
    shapes = parameter_shapes(ev.manifest)
    order = manifest_order(ev.manifest)
    if not updates.empty:
        updates = updates.assign(pos=updates["name"].map(lambda n: order.get(n, 10**6))).sort_values("pos", kind="stable")
    params = role(ev.summary, "param")
    growth = dict(zip(params["name"], params["late"] / params["early"])) if not params.empty else {}
    names = list(updates["name"]) if not updates.empty else []
    ratios = UpdateRatios(updates["ratio_median"].to_numpy(np.float64) if names else np.zeros(0),
                          np.array([is_weight(n, int(k), shapes) for n, k in zip(names, updates["numel"])] if names
                                   else [], bool),
                          np.array([growth.get(n, np.nan) for n in names], np.float64))
    _, loss = loss_curve(ev.scalars)
    return LossPace(loss, ratios, peak_lr(ev.scalars), ev.outcome, ev.diverged and not ev.recovered,
                    any(f.label == "vanishing_gradient" and f.severity == ERROR for f in ev.found),
                    adaptive_optimizer(ev.scalars),
                    any(f.label == "no_update" and _stepless(f.evidence) for f in ev.found),
                    any(f.label == "no_gradient" and _gradientless(f.evidence) for f in ev.found),
                    any(f.label == "lr_too_high" for f in ev.found))


@register("lr_too_low", "updates", _loss_pace)
def lr_too_low(pace: LossPace, th: UpdateThresholds) -> list[Finding]:
    """Updates ≪ the CS231n ratio in a run that does not learn, or a loss still falling at its
    first, slow pace at the end (far from converged: each step just too small, seed 002)."""
    if pace.diverged or pace.stepless or pace.gradientless or pace.too_high:
        return []
    improvement = pace.outcome.improvement
    slow = slow_steady_descent(pace.loss, improvement, th)
    ratio, output_ratio = pace.update_ratio(th), pace.output_update_ratio(th)
    tiny_updates = ratio is not None and ratio <= th.ratio_low and \
        not pace.outcome.learns and (improvement is None or improvement <= th.slow_max_improvement) \
        and not (pace.gradients_vanish and not (pace.adaptive and output_ratio is not None
                                                and output_ratio <= th.ratio_low))
    if not (tiny_updates or slow):
        return []
    fix = "raise the learning rate ×10"
    if pace.lr is not None:
        fix += f" (lr {pace.lr:.3g} → {pace.lr * 10:.3g})"
    if ratio and ratio < th.ratio_target:
        fix += f"; updates are {th.ratio_target / ratio:.3g}× below the ~1e-3 update/parameter ratio"
    return [finding(
        "lr_too_low", None, [],
        {"update_ratio_median": ratio, "cs231n_target_ratio": th.ratio_target, "lr": pace.lr,
         "loss_improvement": improvement, "steady_slow_descent": slow},
        fix + "; sweep 0.1, 0.01, 0.001", ERROR,
    )]


def slow_steady_descent(values: np.ndarray, improvement: float | None, th: UpdateThresholds) -> bool:
    """The loss fell by less than half, along a straight line (r² ≥ 0.9) whose second half
    keeps the pace of the first."""
    if improvement is None or not th.slow_min_improvement <= improvement <= th.slow_max_improvement:
        return False
    from scipy.stats import linregress  # here: importing scipy.stats costs ~1 s of every analysis

    half = len(values) // 2
    whole = linregress(np.arange(len(values)), values)
    early = linregress(np.arange(half), values[:half])
    late = linregress(np.arange(len(values) - half), values[half:])
    if not (early.slope < 0 and late.slope < 0 and whole.rvalue**2 >= th.slow_linear_r2):
        return False
    return bool(th.slow_pace_kept <= late.slope / early.slope <= 1 / th.slow_pace_kept)


def weights_travelled(table: SeriesTable, manifest: dict) -> float | None:
    """How far the weights (`is_weight`) moved over the run, as a share of their norm: the median
    over weights of each one's mean update/param ratio × the steps recorded (its path, also where a
    long run's rows were thinned); None without update ratios."""
    shapes, steps = parameter_shapes(manifest), len(np.unique(table.recorded_steps()))
    paths = []
    for index in table.indices("update"):
        if is_weight(table.keys[index].name, int(table.numel[index]), shapes):
            ratios = table.column(index, "ratio")
            ratios = ratios[np.isfinite(ratios)]
            if len(ratios):
                paths.append(float(np.mean(ratios)) * steps)
    return float(np.median(paths)) if paths else None
