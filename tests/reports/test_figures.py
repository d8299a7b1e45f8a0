"""Axis choices of the report's line panels."""

import numpy as np
from matplotlib.figure import Figure

from reports import figures


def _scale(values: np.ndarray) -> str:
    ax = Figure().subplots()
    if figures._loggable([values]):
        return "log"
    figures._linear_scale(ax, [values])
    return ax.get_yscale()


def test_a_negative_loss_with_a_spike_gets_a_symmetric_log_axis():
    nll = np.linspace(1.3, -0.45, 150)  # a flow's NLL in nats per dimension, below 0 once it fits
    assert _scale(nll) == "linear"
    spiked = nll.copy()
    spiked[90:95] = [80.0, 700.0, 50.0, 440.0, 20.0]
    assert _scale(spiked) == "symlog"
    assert _scale(np.abs(spiked)) == "log"
