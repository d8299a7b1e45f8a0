"""Growth models and per-series break analysis on synthetic series with known breaks.

Breaks are placed at random steps (several per shape) so nothing is tuned to one step.
"""

from __future__ import annotations

import numpy as np
import pytest

from postmortem.models import (CHI2_95, ExponentialFrom, JumpAt, JumpThenExponential, NoBreak, median,
                               select_break)
from postmortem.onset import BreakThresholds, analyse_series

N = 300
NOISE = 0.1  # decades


def test_the_written_out_chi2_quantile_is_scipys():
    from scipy.stats import chi2

    assert CHI2_95 == float(chi2.ppf(0.95, df=1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fast_median_is_numpys_bit_for_bit(dtype):
    rng = np.random.default_rng(7)
    for n in [*range(1, 40), 4096, 4097]:
        values = rng.lognormal(0.0, 3.0, n).astype(dtype)
        for view in (values, values[::3]):
            if len(view):
                assert np.float64(median(view)).tobytes() == np.float64(np.median(view)).tobytes(), n


def _t0s(seed: int, count: int = 4) -> list[int]:
    return sorted(np.random.default_rng(seed).integers(30, N - 20, size=count).tolist())


def _noise(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, NOISE, N)


@pytest.mark.parametrize("t0", _t0s(1))
def test_jump_is_located_with_its_size(t0):
    x = np.arange(N, dtype=float)
    y = _noise(t0) + np.where(x >= t0, 1.7, 0.0)
    model = JumpAt().fit(x, y)
    assert model.t0_ == t0
    assert model.interval_[0] <= t0 <= model.interval_[1]
    assert model.jump == pytest.approx(10**1.7, rel=0.15)
    best, delta = select_break(x, y)
    assert abs(best.t0_ - t0) <= 1 and delta > 10


@pytest.mark.parametrize("t0", _t0s(2))
def test_exponential_growth_gives_rate_and_doubling_time(t0):
    x = np.arange(N, dtype=float)
    rate = 0.2  # decades per step → ×1.585 per step
    y = _noise(t0) + np.where(x >= t0, rate * (x - t0 + 1), 0.0)
    model = ExponentialFrom().fit(x, y)
    assert abs(model.t0_ - t0) <= 1
    assert model.growth_per_step == pytest.approx(10**rate, rel=0.02)
    assert model.doubling_steps == pytest.approx(np.log10(2) / rate, rel=0.05)
    best, delta = select_break(x, y)
    assert abs(best.t0_ - t0) <= 1 and delta > 10


@pytest.mark.parametrize("t0", _t0s(3))
def test_jump_then_exponential(t0):
    x = np.arange(N, dtype=float)
    y = _noise(t0) + np.where(x >= t0, 1.5 + 0.3 * (x - t0), 0.0)
    model = JumpThenExponential().fit(x, y)
    assert model.t0_ == t0
    assert model.jump == pytest.approx(10**1.5, rel=0.3)
    assert model.growth_per_step == pytest.approx(10**0.3, rel=0.05)
    best, _ = select_break(x, y)
    assert best.t0_ == t0


@pytest.mark.parametrize("seed", [4, 5, 6, 7])
def test_noise_only_has_no_credible_break(seed):
    x = np.arange(N, dtype=float)
    y = _noise(seed)
    _, delta = select_break(x, y)
    assert delta < 10
    fit = analyse_series("grad w", x.astype(np.int64), 10**y)
    assert not fit.credible and not fit.diverges


def test_constant_series_fits_without_errors():
    x = np.arange(50, dtype=float)
    assert np.isfinite(NoBreak().fit(x, np.zeros(50)).bic_)
    _, delta = select_break(x, np.zeros(50))
    assert delta < 10


def test_models_reject_bad_input():
    with pytest.raises(ValueError):
        JumpAt().fit([0, 1, 2, 3], [0.0, np.nan, 0.0, 1.0])
    with pytest.raises(ValueError):
        JumpAt().fit([0, 2, 1, 3], [0.0, 0.0, 0.0, 1.0])


def test_late_break_with_large_steps_is_precise():
    # Suffix sums measured from the end: a break two points from the end of a long run with
    # large step numbers must not suffer from cancellation.
    x = np.arange(99_000, 100_000, dtype=float)
    y = np.random.default_rng(9).normal(0, NOISE, 1000)
    y[-2:] += [3.0, 6.0]
    best, delta = select_break(x, y)
    assert best.t0_ == 99_998 and delta > 10


@pytest.mark.parametrize("t0", _t0s(10, 3))
def test_divergence_is_called_with_its_onset(t0):
    steps = np.arange(t0 + 12)
    y = _noise(t0)[: len(steps)] + np.where(steps >= t0, 1.7 + 0.5 * (steps - t0), 0.0)
    fit = analyse_series("grad fc2.weight", steps, 10**y)
    assert fit.credible and fit.diverges and fit.amplified
    assert fit.onset_step == t0
    assert fit.interval[0] <= t0 <= fit.interval[1]
    # What counts as credible and diverging is Thresholds.breaks'.
    strict = analyse_series("grad fc2.weight", steps, 10**y, thresholds=BreakThresholds(bic_margin=1e9))
    assert not strict.credible and not strict.amplified
    far = analyse_series("grad fc2.weight", steps, 10**y, thresholds=BreakThresholds(divergence_decades=50.0))
    assert far.credible and not far.diverges


@pytest.mark.parametrize("t0", _t0s(11, 3))
def test_recovered_spike_is_not_a_divergence(t0):
    steps = np.arange(N)
    y = _noise(t0) + np.where((steps >= t0) & (steps < t0 + 3), 2.0, 0.0)
    fit = analyse_series("grad fc2.weight", steps, 10**y)
    assert not fit.diverges


def test_warmup_ramp_then_plateau_is_not_a_divergence():
    steps = np.arange(N)
    ramp = np.minimum(steps / 100, 1.0) * 2.0  # ×100 over the first 100 steps, then flat
    y = _noise(12) + ramp
    fit = analyse_series("update w", steps, 10**y)
    assert not fit.diverges


def test_slow_noisy_decline_is_not_a_divergence():
    steps = np.arange(N)
    y = _noise(13) * 3 - steps / N
    fit = analyse_series("scalar loss", steps, 10**y)
    assert not fit.diverges


def test_the_bound_that_skips_an_earlier_breaks_fits_changes_no_answer():
    from postmortem.onset import _earlier_sharp_break, _held_bound

    rng = np.random.default_rng(18)
    th = BreakThresholds()
    skipped = found = 0
    for _ in range(400):
        n = int(rng.integers(6, 200))
        y = rng.normal(0.0, rng.choice([0.005, 0.02, 0.08]), n)
        t0 = int(rng.integers(1, n))
        y[t0:] += rng.uniform(0.0, 2.5 * th.sharp_decades)  # jumps either side of the thresholds
        x = np.arange(n, dtype=np.float64) + float(rng.integers(0, 10_000))
        reference = _earlier_sharp_break(x, y, th, bound=False)  # its three fits always run
        got = _earlier_sharp_break(x, y, th)
        assert (got is None) == (reference is None)
        if got is not None:
            found += 1
            assert got[1] == reference[1] and got[0].index_ == reference[0].index_
        skipped += _held_bound(y) < th.sharp_decades / 2
    assert skipped >= 20 and found >= 20  # both ways through the bound are taken
