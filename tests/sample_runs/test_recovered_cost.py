"""benchmarks/recovered_cost.py: the power-law forecast of a loss before an incident."""

import numpy as np
import pytest

from sample_run_helpers import load_script


def _script():
    return load_script("benchmarks/recovered_cost.py")


def test_forecast_extends_the_power_law_before_the_onset_to_the_last_steps():
    forecast = _script().forecast
    steps = np.arange(150)
    loss = 3.0 * np.maximum(steps, 1) ** -0.5
    loss[60:] *= 5  # the incident: nothing after the onset enters the forecast
    assert forecast(steps, loss, 60) == pytest.approx(3.0 * steps[-10:].mean() ** -0.5, rel=1e-9)
    assert forecast(steps, loss, 15) is None  # fewer than 20 losses before the onset
    assert forecast(steps, np.where(steps == 30, -1.0, loss), 60) is None  # a loss at or below 0 has no log
