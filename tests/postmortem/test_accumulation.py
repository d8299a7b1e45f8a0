"""The bend common to gradient norms that start summing at t0 (a missing zero_grad())."""

from __future__ import annotations

import numpy as np
import pytest

from postmortem.accumulation import POST, PRE, accumulation_onset, bend_deviance

STEPS = 150


def _summed_norms(t0: int | None, seed: int, dims=(30, 60, 8), drift=0.2):
    """Per-parameter gradient norms; from t0 on each is the running sum of the fresh ones."""
    rng = np.random.default_rng(seed)
    series = []
    for d in dims:
        fresh = rng.normal(drift, 1.0, size=(STEPS, d))
        if t0 is not None:
            fresh[t0 - 1:] = np.cumsum(fresh[t0 - 1:], axis=0)
        series.append((np.arange(STEPS), np.linalg.norm(fresh, axis=1)))
    return series


@pytest.mark.parametrize("seed", range(5))
def test_onset_of_sums_from_a_random_step(seed):
    t0 = int(np.random.default_rng(seed).integers(PRE + 5, STEPS - POST - 20))
    found = accumulation_onset(_summed_norms(t0, seed))
    assert found is not None and found.series == 3
    assert abs(found.step - t0) <= 2  # a continuous bend fits a concave sum a step or two early
    assert found.interval[0] <= found.step <= found.interval[1]
    assert found.mean_deviance > 10


def test_noise_and_steady_trends_have_no_strong_bend():
    rng = np.random.default_rng(9)
    steps = np.arange(STEPS)
    trend = 10 ** (0.01 * steps + rng.normal(0, 0.05, STEPS))  # a steady log-linear rise
    noise = _summed_norms(None, 9)
    found = accumulation_onset([*noise, (steps, trend)])
    summed = accumulation_onset(_summed_norms(80, 9))
    assert found.mean_deviance < summed.mean_deviance / 3


def test_bend_deviance_ignores_non_finite_points_and_short_series():
    steps = np.arange(PRE + POST + 5)
    values = np.ones(len(steps))
    values[3] = np.nan
    values[7] = 0.0
    k, deviance = bend_deviance(steps, values)
    assert len(k) == len(steps) - 2 - (PRE + POST) + 1 and np.all(np.isfinite(deviance))
    assert len(bend_deviance(steps[:PRE], values[:PRE])[0]) == 0
    assert accumulation_onset([(steps[:PRE], values[:PRE])]) is None
