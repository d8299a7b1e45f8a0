"""Per-series break analysis: did this series diverge, and when did its growth begin?

Thresholds (`BreakThresholds`, a field of `postmortem.detectors.Thresholds`; docs/diagnoses.md
cites them):
- a break is credible when the best break model beats the no-break model by ΔBIC ≥ 10
  ("very strong" evidence on the Kass & Raftery scale);
- a series diverges when its final level is ≥ 100× its stable level and ≥ 10× anything seen in
  the stable phase (seed 000: grad norm 9 → 483 → 1e14+; healthy noise and warm-up stay below);
- a series amplified (enters the ranking) when the break is credible, rising, and the final level
  is ≥ 10× the stable level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .models import ExponentialFrom, JumpThenExponential, median, select_break

__all__ = ["BreakThresholds", "SeriesBreak", "analyse_series"]

# Structure of the fit, not tunables: the fewest points a break model is fitted to, how far
# before a rise a precursor is searched, the recent stable window (the noise yardstick), the
# stable phase kept in front of the final rise and the tail whose median is the final level.
_MIN_POINTS = 6
_PRECURSOR_REACH = 5
_LOCAL_STABLE = 20
_MIN_STABLE = 50  # steps of stable phase kept in front of the final rise
_TAIL = 3  # the final level is the median of the last few finite points


@dataclass(frozen=True)
class BreakThresholds:
    """What makes one series' break credible, diverging, amplified (`Thresholds.breaks`)."""

    bic_margin: float = 10.0  # ΔBIC ≥ 10: "very strong" evidence for the break (Kass & Raftery)
    divergence_decades: float = 2.0  # ends ≥ 100× its stable level (seed 000: 9 → 483 → 1e14+; our choice: far above healthy noise and warm-up)
    beyond_stable_decades: float = 1.0  # ...and ≥ 10× anything seen in the stable phase (our choice: one noisy spike is no stable level)
    amplified_decades: float = 1.0  # ends ≥ 10× its stable level: enters the ranking (our choice)
    sharp_decades: float = float(np.log10(2.0))  # an earlier break counts when it jumps at least ×2 (our choice)


@dataclass(frozen=True)
class SeriesBreak:
    """The break fitted to one series and what it means."""

    label: str
    first_step: int  # first finite point of the series
    onset_step: int
    interval: tuple[int, int]
    growth_per_step: float
    doubling_steps: float | None
    jump: float
    step_jump: float  # measured ratio between the value at the onset and the step before
    delta_bic: float
    stable_level: float  # value (not log) before the break
    noise_decades: float  # robust σ of log10 over the last stable points
    final_level: float
    credible: bool
    diverges: bool
    amplified: bool
    first_level: float  # value (not log) at the series' first finite, positive point


def analyse_series(
    label: str, steps: np.ndarray, values: np.ndarray, *, earliest: bool = False,
    thresholds: BreakThresholds = BreakThresholds(),
) -> SeriesBreak | None:
    """Fit the break models to log10(values) over the finite, positive points.

    With `earliest`, a sharp sustained rise before the best break is looked for too (binary
    segmentation to the left): a weight scaled ×30 at step 96 that explodes at step 99 has its
    onset at 96, not where the explosion dominates the likelihood.
    """
    keep = np.isfinite(values) & (values > 0)
    steps, values = steps[keep], values[keep]
    if len(values) < _MIN_POINTS:
        return None
    y = np.log10(values)
    x = steps.astype(np.float64)
    first_step = int(steps[0])
    start = _window_start(y)
    x, y = x[start:], y[start:]
    if len(y) < _MIN_POINTS:
        return None
    model, delta_bic = select_break(x, y)
    if earliest:
        x, y, model, delta_bic = _earliest_break(x, y, model, delta_bic, thresholds)
    k = model.index_
    onset_index = _visible_onset(y, k, model)
    at_first_step = int(x[0]) == first_step  # the window still starts at the series' start
    if at_first_step and k == model.min_pre and model.rate_ > 0 and np.all(np.diff(y[: k + 1]) > 0):
        onset_index = 0  # rising from the very first step: no stable phase to break from
    stable = y[:k]
    stable_level = median(stable)
    final_level = median(y[-_TAIL:])
    rise = final_level - stable_level
    credible = delta_bic >= thresholds.bic_margin and model.jump_decades_ + max(model.rate_, 0.0) > 0
    diverges = rise >= thresholds.divergence_decades and final_level >= float(np.max(stable)) + thresholds.beyond_stable_decades
    return SeriesBreak(
        label=label,
        first_step=first_step,
        onset_step=int(x[onset_index]),
        interval=(min(int(model.interval_[0]), int(x[onset_index])),
                  max(int(model.interval_[1]), int(x[onset_index]))),
        growth_per_step=model.growth_per_step,
        doubling_steps=model.doubling_steps,
        # Moved off the fitted break: the jump is the measured one, not the model's.
        jump=model.jump if onset_index == k else float(10 ** (y[onset_index] - stable_level)),
        step_jump=float(10 ** (y[onset_index] - y[onset_index - 1])) if onset_index > 0 else 1.0,
        delta_bic=delta_bic,
        stable_level=float(10**stable_level),
        noise_decades=_robust_sigma(stable[-_LOCAL_STABLE:]),
        final_level=float(10**final_level),
        credible=credible,
        diverges=diverges,
        amplified=credible and rise >= thresholds.amplified_decades,
        first_level=float(values[0]),
    )


def _earliest_break(x: np.ndarray, y: np.ndarray, model, delta_bic: float, th: BreakThresholds):
    """Binary segmentation to the left of `model`'s break: the earliest sharp sustained rise,
    with the window (x, y) it was fitted on."""
    # Only a precursor of this rise: no further back than the rise itself lasted.
    bound = x[model.index_] - max(_PRECURSOR_REACH, len(y) - model.index_)
    while True:
        lo = max(0, int(np.searchsorted(x, bound)) - _MIN_STABLE)
        earlier = _earlier_sharp_break(x[lo: model.index_], y[lo: model.index_], th)
        if earlier is None or earlier[0].t0_ < bound:
            return x, y, model, delta_bic
        x, y = x[lo:], y[lo:]
        model, delta_bic = earlier


def _visible_onset(y: np.ndarray, k: int, model) -> int:
    """A hinge fitted to a jump followed by fast growth may start one step early, at a point
    still inside the stable band. When the fitted first step of growth should stand out of the
    noise (rate ≥ 4 robust σ of the stable phase) but does not, move to the first point that
    does (at most two steps on)."""
    # A hinge, or a jump-then-growth whose fitted "jump" is downwards, both claim growth from a
    # point that may not show it.
    climbing = isinstance(model, ExponentialFrom) or (
        isinstance(model, JumpThenExponential) and model.jump_decades_ <= 0)
    if not climbing or k < _MIN_POINTS:
        return k
    stable = y[max(0, k - _LOCAL_STABLE): k]  # the recent level, not the start of training
    sigma = max(_robust_sigma(stable), 0.01)
    if model.rate_ < 4 * sigma:
        return k
    band = median(stable) + 4 * sigma
    for i in range(k, min(k + 3, len(y))):
        if y[i] > band:
            return i
    return k


def _robust_sigma(values: np.ndarray) -> float:
    """1.4826 × MAD: the noise σ of a stable stretch, blind to the odd spike."""
    if len(values) == 0:
        return 0.0
    return 1.4826 * median(np.abs(values - median(values)))


def _earlier_sharp_break(x: np.ndarray, y: np.ndarray, th: BreakThresholds, *, bound: bool = True):
    """A credible break before the current one that jumps ≥ ×2 and whose level holds."""
    if len(y) < _MIN_POINTS:
        return None
    # Speed only (`bound=False` is the reference): `held` ≤ min(y[k:]) − min(y[:k]) at every k (a
    # median is never below the minimum, and float rounding is monotone); where that bound is
    # under the threshold at every k, no break can pass, and the three fits are skipped.
    if bound and _held_bound(y) < th.sharp_decades / 2:
        return None
    model, delta_bic = select_break(x, y)
    k = model.index_
    held = float(np.min(y[k:])) - median(y[:k])
    if delta_bic < th.bic_margin or model.jump_decades_ < th.sharp_decades or held < th.sharp_decades / 2:
        return None
    return model, delta_bic


def _held_bound(y: np.ndarray) -> float:
    """max over k of min(y[k:]) − min(y[:k]), in O(n)."""
    return float(np.max(np.minimum.accumulate(y[::-1])[::-1][1:] - np.minimum.accumulate(y)[:-1]))


def _window_start(y: np.ndarray) -> int:
    """Index where the fit window starts: a stable stretch before the final rise.

    Long runs can change regime many times; fitting one break to all of it would let an old
    change compete with the final rise. The rise starts after the last point below a quarter
    of the way from the early baseline to the final level.
    """
    n = len(y)
    baseline = median(y[: max(_TAIL, n // 2)])
    final = median(y[-_TAIL:])
    if final <= baseline:
        return max(0, n - 4 * _MIN_STABLE)
    below = np.flatnonzero(y[:-1] <= baseline + 0.25 * (final - baseline))
    last_stable = int(below[-1]) if len(below) else 0
    rise = n - 1 - last_stable
    return max(0, last_stable - max(_MIN_STABLE, 4 * rise))
