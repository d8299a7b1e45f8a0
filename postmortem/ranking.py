"""First non-finite value, run onset and the ranking of what amplified first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .findings import FirstNonfinite, Onset, RankedTensor
from .onset import BreakThresholds, SeriesBreak, analyse_series
from .scalars import is_loss, loss_curve, main_loss, raised
from .series import SeriesTable

__all__ = [
    "CAUSAL_ORDER",
    "RankingThresholds",
    "TensorBreak",
    "first_nonfinite",
    "fit_breaks",
    "run_onset",
    "moved_at",
    "rank",
    "healthy_range",
    "out_of_range",
    "clips_recorded",
    "diverging",
    "nonfinite_beyond_inputs",
]

# Within one step, data flows input → params → activations → loss → grads → state → update;
# ties on the onset step are broken in this order so the cause ranks before its effects.
CAUSAL_ORDER = {
    "input": 0, "target": 1, "param": 2, "activation": 3, "scalar": 8,
    "grad": 5, "state": 6, "update": 7,
}
_FITTED_ROLES = ("param", "grad", "update", "state", "activation")
_SPREAD_STEPS = 50  # steps of the non-finite spread listed (what the report shows, not a test)
_LOSS_WINDOW = 10  # the loss's level: the median of its 10 values up to a step (outcome's windows)


@dataclass(frozen=True)
class RankingThresholds:
    """Which fitted breaks make a run diverged (`diverging`), which are sharp (`run_onset`):
    `Thresholds.ranking`. How far a precursor may lead is `DivergenceThresholds.precursor_steps`
    (the divergence rules read it too), a batch out of range `RootCauseThresholds.batch_range_factor`."""

    settle_steps: int = 10  # a break ≥ 10 steps after a series' first point: a slow climb from the first steps is a model waking up, not a divergence (our choice)
    abrupt_param_jump: float = 10.0  # a parameter norm never moves ×10 in one healthy step (our choice: a decade, as the other one-step factors)
    grown_before_break: float = 10.0  # a parameter whose level before its break is ≥ 10× its first is still growing from a near-zero init, not diverging (session 14, round 15's detector: zero-initialised head biases ×100 by step 10 of a warm-up from lr 0; as abrupt_param_jump, a decade)
    loss_recovered_factor: float = 2.0  # a parameter that jumped ×10 and stayed: the run is not destroyed while its final loss is within 2× its level before (Megatron-LM's "back below 2×")
    felt_steps: int = 20  # a tensor's gradient break counts when the loss felt it within 20 steps (two loss windows; session 8, read on round 7's convnext)
    felt_factor: float = 1.1  # ...by rising above 1.1× its level at the break (OutcomeThresholds.recovered_factor)
    sharp_jump: float = 2.0  # a sharp break: a visible jump ≥ ×2 at the break...
    noise_sigmas: float = 3.0  # ...beyond 3 robust σ of the series' own noise...
    sharp_growth: float = 1.1  # ...or growth ×1.1 a step (doubling in ≤ 7 steps; our choice)


@dataclass(frozen=True)
class TensorBreak:
    """A fitted break tied to the series it came from ("scalar" role for scalars)."""

    role: str
    name: str
    key: str | None
    fit: SeriesBreak


def _divergence_scalar(name: str) -> bool:
    return is_loss(name) or name.startswith("grad_norm")


def first_nonfinite(
    table: SeriesTable, scalars: pd.DataFrame, tie_order: dict[str, int], *, ignore_grads: bool
) -> FirstNonfinite | None:
    """Earliest NaN/inf among tensors and loss scalars, causal order breaking ties.

    With a GradScaler (``ignore_grads``) non-finite gradients are expected overflow that the
    scaler skips, so only the other roles count.
    """
    rows = np.flatnonzero(table.nonfinite > 0)
    series = np.searchsorted(table.offsets, rows, side="right") - 1
    candidates: list[tuple[int, int, int, str, str, str | None]] = []
    counts: dict[int, int] = {}
    for row, index in zip(rows, series):
        key = table.keys[index]
        if ignore_grads and key.role == "grad":
            continue
        step = int(table.step[row])
        counts[step] = counts.get(step, 0) + 1
        candidates.append(
            (step, CAUSAL_ORDER[key.role] if key.role in CAUSAL_ORDER else 9,
             tie_order.get(key.name, 10**6), key.name, key.role, key.key)
        )
    names = [n for n in scalars["name"].unique() if _divergence_scalar(str(n))]
    bad = scalars[scalars["name"].isin(names) & ~np.isfinite(scalars["value"])]
    for step, name in zip(bad["step"], bad["name"]):
        counts[int(step)] = counts.get(int(step), 0) + 1
        candidates.append((int(step), CAUSAL_ORDER["scalar"], 0, name, "scalar", None))
    if not candidates:
        return None
    step, _, _, name, role, key = min(candidates, key=lambda c: c[:4])
    spread = sorted((s, c) for s, c in counts.items() if s >= step)[:_SPREAD_STEPS]
    return FirstNonfinite(step=step, tensor=name, role=role, key=key, spread=spread)


def fit_breaks(table: SeriesTable, scalars: pd.DataFrame, cut: int | None,
               thresholds: BreakThresholds = BreakThresholds()) -> list[TensorBreak]:
    """Fit every tensor series and every loss / grad-norm scalar up to (not including) `cut`."""
    found = []
    for index, key in enumerate(table.keys):
        if key.role not in _FITTED_ROLES:
            continue
        rows = table.rows(index)
        steps, values = table.step[rows], table.magnitude[rows]
        fit = _fit_before(key.label, steps, values, table.nonfinite[rows], cut, thresholds, earliest=True)
        if fit is not None:
            found.append(TensorBreak(key.role, key.name, key.key, fit))
    for name, group in scalars.groupby("name", sort=True, observed=True):
        if not _divergence_scalar(str(name)):
            continue
        steps = group["step"].to_numpy(np.int64)
        values = group["value"].to_numpy(np.float64)
        fit = _fit_before(f"scalar {name}", steps, values, np.zeros(len(steps), np.int64), cut, thresholds)
        if fit is not None:
            found.append(TensorBreak("scalar", str(name), None, fit))
    return found


def _fit_before(label, steps, values, nonfinite, cut, thresholds, *, earliest=False) -> SeriesBreak | None:
    keep = nonfinite == 0
    if cut is not None:
        keep &= steps < cut
    # Tensors get the earliest sharp rise; scalars (the loss) keep their main break, since a
    # loss also steps up at every domain switch without anything amplifying yet.
    return analyse_series(label, steps[keep], values[keep], earliest=earliest, thresholds=thresholds)


_CLIP_COEF_ROUNDING = 1e-3  # two float32 sums of squares of one set of gradients, compared


def clips_recorded(scalars: pd.DataFrame) -> bool:
    """The recorder saw the optimizer consume clipped gradients (`clip_coef`/`grad_norm_clipped`),
    and no `clip_coef` above 1. Clipping never grows a gradient: a larger coefficient says the
    optimizer consumed gradients something else rewrote (round 26's sae projects each decoder
    column's gradient off the column before the step: ×26 at a step where the columns were ×200)."""
    coef = scalars.loc[scalars["name"] == "clip_coef", "value"].to_numpy(np.float64)
    return bool(scalars["name"].isin(("clip_coef", "grad_norm_clipped")).any()) \
        and not np.any(coef > 1 + _CLIP_COEF_ROUNDING)


def diverging(breaks: list[TensorBreak], scalars: pd.DataFrame, *, stayed_finite: bool = False,
              loss_must_feel: bool = False, nonfinite_at: int | None = None,
              thresholds: RankingThresholds = RankingThresholds()) -> list[TensorBreak]:
    """Series whose break makes the run diverged.

    Either a loss, gradient or parameter series ends ≥ 100× above its stable level after a
    sharp rise, or a parameter jumped ≥ 10× in one step and stayed there while the loss never
    came back to its level before the jump (a destroyed model that stays finite).

    In a run that `stayed_finite` and clips its gradients, the (pre-clip) gradients growing is
    not a divergence on its own: every step was bounded, so only a loss or a parameter running
    away says the run broke (seed 003's GAN: the discriminator wins, its gradient grows ×100
    while the generator, badly initialised, never learns).

    With `loss_must_feel` (a run whose gradients do not accumulate), one tensor's gradient break
    counts only when the loss rose, or something went non-finite (`nonfinite_at`), within
    `felt_steps` after it.
    """
    th = thresholds
    found = []
    bounded = stayed_finite and clips_recorded(scalars)
    curve = loss_curve(scalars) if loss_must_feel else None
    for b in breaks:
        if not b.fit.credible:
            continue
        if bounded and (b.role == "grad" or (b.role == "scalar" and b.name.startswith("grad_norm"))):
            continue
        # Updates follow the LR schedule (a warm-up is no divergence), Adam's moments start
        # from zero and grow for hundreds of steps by design, and activations count through
        # what they do to the rest: none of them decides on its own.
        settled = b.fit.onset_step >= b.fit.first_step + th.settle_steps
        gradual = b.role == "grad" or (b.role == "param" and not _sharp_measured(b, th))
        if (curve is not None and gradual and _loss_unmoved(curve, b.fit.onset_step, th)
                and not (nonfinite_at is not None and nonfinite_at < b.fit.onset_step + th.felt_steps)):
            # One tensor's gradient growing while the loss keeps falling is a branch waking up (a
            # residual branch behind ConvNeXt's layer scale 1e-6 passes its block ×1e-6 of the
            # gradient until gamma grows), not a runaway: the loss (or the global grad norm, a
            # scalar) must feel it. So must a parameter that grew by no measured jump and no fast
            # growth (a zero-initialised BatchNorm bias ×190 over 130 steps of a OneCycle warm-up,
            # ×1.02 a step: round 30's patchtst). Accumulating gradients are a running sum whose
            # growth is the story before the loss feels it, hence the flag.
            continue
        if b.fit.diverges and b.role in ("scalar", "grad") and (settled or _sharp_measured(b, th)):
            # A slow climb from the first step is a model starting to learn (gradients of a
            # badly initialised deep net grow ×100 as it wakes up), not a divergence.
            found.append(b)
        elif (b.fit.diverges and b.role == "param"
              and (b.fit.jump >= th.abrupt_param_jump or b.fit.growth_per_step >= th.sharp_growth)
              and settled and b.fit.stable_level < th.grown_before_break * b.fit.first_level):
            # Small or zero-initialised parameters (biases) may grow by orders of magnitude
            # while the model learns, from the first steps on; one already ×10 above where it
            # started when it "broke" is still growing from that start (FCOS's zero biases under
            # a warm-up from lr 0: 1e-5 → 1e-3 by step 10 → 0.07).
            found.append(b)
        elif (b.role == "param" and b.fit.step_jump >= th.abrupt_param_jump
              and settled
              and b.fit.final_level >= th.abrupt_param_jump * b.fit.stable_level
              and not _loss_recovered(scalars, b.fit.onset_step, th.loss_recovered_factor)):
            found.append(b)
    return found


def _loss_recovered(scalars: pd.DataFrame, step: int, factor: float) -> bool:
    """Is the loss at the end of the run within `factor` (2×) of its level just before `step`?"""
    name = main_loss(scalars)
    if name is None:
        return True  # nothing says the model was hurt
    loss = scalars[scalars["name"] == name]
    before = loss.loc[loss["step"] < step, "value"].tail(_LOSS_WINDOW).to_numpy(np.float64)
    after = loss.loc[loss["step"] >= step, "value"].to_numpy(np.float64)
    after = after[np.isfinite(after)][-_LOSS_WINDOW:]
    if len(before) == 0 or len(after) == 0:
        return True
    return float(np.median(after)) <= raised(float(np.median(before)), factor)


def _loss_unmoved(curve: tuple[np.ndarray, np.ndarray], step: int, th: RankingThresholds) -> bool:
    """Did the loss (`scalars.loss_curve`: finite, step order; a non-finite one is `nonfinite_at`'s
    to say) stay within `felt_factor` (10 %) of its level at `step` (median of the 10 losses up to
    it) over the `felt_steps` after it, by a 5-step rolling median (one spiky batch is no rise)?
    No loss, or too few points, says nothing: the break counts."""
    steps, values = curve
    before = values[steps <= step][-_LOSS_WINDOW:]
    after = values[(steps >= step) & (steps < step + th.felt_steps)]
    if len(before) == 0 or len(after) < th.felt_steps // 2:
        return False
    rolling = pd.Series(after).rolling(5).median().to_numpy()[4:]
    return bool(np.all(rolling <= raised(float(np.median(before)), th.felt_factor)))


def run_onset(
    breaks: list[TensorBreak], leaders: list[TensorBreak], first: FirstNonfinite | None,
    tie_order: dict[str, int], *, precursor_steps: int, robust_floor: float = 0.05,
    thresholds: RankingThresholds = RankingThresholds(),
) -> tuple[Onset | None, list[TensorBreak]]:
    """The run's onset and the amplified series that belong to the divergence.

    Precursors (an update that jumped with the LR one step before the parameters followed)
    may lead the earliest diverging series by a few steps (`precursor_steps`,
    `DivergenceThresholds.precursor_steps`); older breaks are other stories.
    """
    if not leaders:
        if first is None:
            return None, []
        onset = Onset(first.step, (first.step, first.step), f"{first.role} {first.tensor}",
                      None, None, None, 0)
        return onset, []
    # Slow drifts (a parameter norm creeping up while the model learns) also end far above
    # their start; the onset is where amplification became sharp, if any series shows it.
    sharp = [b for b in leaders if _sharp(b, thresholds)] or leaders
    earliest = min(b.fit.onset_step for b in sharp)
    # Membership by identity: dataclass equality would compare every fit field, and a 7 B
    # model's 1 500 series made these tests quadratic.
    sharp_ids, leader_ids = {id(b) for b in sharp}, {id(b) for b in leaders}
    involved = [
        b for b in breaks
        if b.fit.amplified and (_sharp(b, thresholds) or id(b) in sharp_ids)
        and b.fit.onset_step >= earliest - precursor_steps
        and (id(b) in leader_ids or b.role != "scalar")
    ]
    involved.sort(key=lambda b: _rank_key(b, tie_order, robust_floor))
    top = involved[0]
    onset = Onset(
        step=top.fit.onset_step,
        interval=top.fit.interval,
        series=top.fit.label,
        growth_per_step=top.fit.growth_per_step,
        doubling_steps=top.fit.doubling_steps,
        jump=top.fit.jump,
        lead_steps=(first.step - top.fit.onset_step) if first is not None else None,
    )
    return onset, involved


def moved_at(breaks: list[TensorBreak], step: int, tie_order: dict[str, int], *, precursor_steps: int,
             robust_floor: float = 0.05, thresholds: RankingThresholds = RankingThresholds()) -> list[TensorBreak]:
    """The tensors whose series broke sharply and stayed amplified within `precursor_steps` of
    `step`, ranked as `run_onset` ranks them: what moved at an onset dated by something other than
    the breaks (a finite run's loss spike that never came back, a cause the recorder saw)."""
    moved = [b for b in breaks if b.role != "scalar" and b.fit.amplified and _sharp(b, thresholds)
             and abs(b.fit.onset_step - step) <= precursor_steps]
    return sorted(moved, key=lambda b: _rank_key(b, tie_order, robust_floor))


def _sharp(b: TensorBreak, th: RankingThresholds) -> bool:
    """A jump ≥ ×2 and beyond the series' own noise (3 σ), or fast growth."""
    return b.fit.jump >= _jump_floor(b, th) or b.fit.growth_per_step >= th.sharp_growth


def _sharp_measured(b: TensorBreak, th: RankingThresholds) -> bool:
    return b.fit.step_jump >= _jump_floor(b, th) or b.fit.growth_per_step >= th.sharp_growth


def _jump_floor(b: TensorBreak, th: RankingThresholds) -> float:
    return max(th.sharp_jump, 10 ** (th.noise_sigmas * b.fit.noise_decades))


def nonfinite_beyond_inputs(table: SeriesTable, scalars: pd.DataFrame, *, ignore_grads: bool) -> bool:
    """Did NaN/inf reach the model (anything but the data), or the loss?"""
    rows = np.flatnonzero(table.nonfinite > 0)
    series = np.unique(np.searchsorted(table.offsets, rows, side="right") - 1)
    ignored = {"input", "target", *(("grad",) if ignore_grads else ())}
    if any(table.keys[i].role not in ignored for i in series):
        return True
    loss = scalars[scalars["name"].isin([n for n in scalars["name"].unique() if is_loss(str(n))])]
    return bool((~np.isfinite(loss["value"].to_numpy(np.float64))).any())


def _rank_key(b: TensorBreak, tie_order: dict[str, int], robust_floor: float):
    # Same step, same role: the largest one-step jump in robust units of the tensor's own
    # noise (decades over its robust σ) is the likelier origin; a tensor that merely moved
    # with it jumps less against its own history.
    return (
        b.fit.onset_step,
        CAUSAL_ORDER.get(b.role, 9),
        -np.log10(max(b.fit.step_jump, 1e-300)) / max(b.fit.noise_decades, robust_floor),
        -np.log10(max(b.fit.growth_per_step, 1e-300)),
        tie_order.get(b.name, 10**6),
    )


def healthy_range(before: np.ndarray) -> tuple[float, float] | None:
    """Smallest and largest max |x| of the batches before (finite, non-zero), None under three."""
    before = before[np.isfinite(before) & (before > 0)]
    return (float(np.min(before)), float(np.max(before))) if len(before) >= 3 else None


def out_of_range(value: float | np.ndarray, bounds: tuple, factor: float) -> bool | np.ndarray:
    """A batch whose largest |x| lies `factor` (`RootCauseThresholds.batch_range_factor`) outside
    the range of every batch before it (the story, batch_out_of_range and the ranking alike); of
    each element where `value` and `bounds` are arrays."""
    low, high = bounds
    return (value > factor * high) | (value * factor < low)


def extreme_batch(table: SeriesTable, step: int, factor: float) -> tuple[str, float] | None:
    """An input batch at `step` whose largest |x| is far above anything in the steps before it
    (out of range, upwards: a batch that shrank did not amplify anything)."""
    return _first_out_of_range(table, "input", step, factor)


def _first_out_of_range(table: SeriesTable, role: str, step: int, factor: float,
                        tie_order: dict[str, int] | None = None) -> tuple[str, float] | None:
    """The first series of `role` (in `tie_order`, the modules' registration ≈ forward order,
    where given) whose largest |x| at `step` is `factor` above anything before it, with that ratio."""
    order = tie_order or {}
    for index in sorted(table.indices(role), key=lambda i: order.get(table.keys[i].name, 10**6)):
        rows = table.rows(index)
        steps, magnitude = table.step[rows], table.magnitude[rows]
        bounds = healthy_range(magnitude[steps < step])
        now = magnitude[steps == step]
        if bounds is not None and len(now) and np.isfinite(now[0]) and now[0] > bounds[1] \
                and out_of_range(float(now[0]), bounds, factor):
            return table.keys[index].name, float(now[0] / bounds[1])
    return None


def rank(involved: list[TensorBreak], first: FirstNonfinite | None, table: SeriesTable, onset: Onset | None,
         batch_range_factor: float, tie_order: dict[str, int]) -> list[RankedTensor]:
    """Tensors in the order they began to amplify (scalars are summaries, not tensors).

    An input batch far above anything seen before (×`batch_range_factor`) at the onset step leads:
    the data came first in that step. Else the first activation so far out of its range does: the
    forward pass went off there, before the gradients and optimizer states it inflated (round 26,
    weight_scale-sae-s2: a decoder ×100 for one forward, then every Adam state ×1e5, the
    pre-encoder bias's the most in its own units), unless a parameter had already jumped.
    """
    ranked = [
        RankedTensor(b.name, b.role, b.key, b.fit.onset_step, b.fit.growth_per_step, b.fit.jump)
        for b in involved if b.role != "scalar"
    ]
    if onset is not None:
        # A parameter that jumped by the onset is upstream of every activation that followed it
        # (round 16's maml: fc1 ×300, then the inner steps' adapted fc0 out of range).
        param_moved = any(r.role == "param" and r.onset_step <= onset.step for r in ranked)
        for role in ("input",) if param_moved else ("input", "activation"):
            extreme = _first_out_of_range(table, role, onset.step, batch_range_factor, tie_order)
            if extreme is not None:
                ranked = [r for r in ranked if (r.tensor, r.role) != (extreme[0], role)]
                ranked.insert(0, RankedTensor(extreme[0], role, None, onset.step, None, extreme[1]))
                break
    seen = {(r.tensor, r.role, r.key) for r in ranked}
    if first is not None and first.role != "scalar" and (first.tensor, first.role, first.key) not in seen:
        ranked.append(RankedTensor(first.tensor, first.role, first.key, first.step, None, None))
    # Stable sort: entries already in rank order keep it; a non-finite input jumps ahead.
    return sorted(ranked, key=lambda r: (r.onset_step, CAUSAL_ORDER.get(r.role, 9) if r.role in ("input", "target") else 2))
