"""Where gradients began to accumulate (a missing ``optimizer.zero_grad()``).

Without ``zero_grad()`` every recorded gradient is the running sum G_t = G_{t-1} + g_t, and it
starts at the same step t0 in every parameter. Each gradient norm then leaves its noisy level
along a bend (a hinge), not a straight line: flat before t0, climbing from t0. For every step k
and every gradient series, a fixed window of ``PRE`` points before k and ``POST`` points from k
on is fitted in log10 space with a hinge at k and with a straight line; the deviance
n·log(SSE_line / SSE_hinge) says how much better the bend at k explains that window. A fault
common to all parameters adds up over the series, so the onset is the step with the largest
mean deviance across them. Fixed windows keep scores comparable from one step to the next,
and the line (not a flat level) as the alternative keeps steady learning trends and the middle
of a climb from scoring.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .models import CHI2_95

__all__ = ["AccumulationOnset", "accumulation_onset", "bend_deviance", "PRE", "POST"]

PRE = 20  # points of the stable phase in front of the bend (ranking's local stable window)
POST = 10  # points of climb after it: enough to see a sum grow, short enough to stay near t0
_SSE_FLOOR = 1e-12


@dataclass(frozen=True)
class AccumulationOnset:
    step: int
    interval: tuple[int, int]  # steps whose mean deviance is within the χ²(1) 95 % bound
    mean_deviance: float  # per gradient series, at the chosen step
    series: int  # gradient series that took part


def bend_deviance(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps k and the deviance of a rising hinge at k over a straight line, in log10.

    Only finite, positive values count; windows whose hinge slope does not rise score 0.
    """
    keep = np.isfinite(values) & (values > 0)
    x, y = steps[keep].astype(np.float64), np.log10(values[keep])
    width = PRE + POST
    if len(y) < width:
        return np.zeros(0, np.int64), np.zeros(0)
    xw, yw = sliding_window_view(x, width), sliding_window_view(y, width)
    hinge = np.maximum(xw - xw[:, PRE - 1: PRE], 0.0)
    xc = xw - xw.mean(axis=1, keepdims=True)
    yc = yw - yw.mean(axis=1, keepdims=True)
    hc = hinge - hinge.mean(axis=1, keepdims=True)
    syy = np.einsum("ij,ij->i", yc, yc)
    sxx, sxy = np.einsum("ij,ij->i", xc, xc), np.einsum("ij,ij->i", xc, yc)
    shh, shy = np.einsum("ij,ij->i", hc, hc), np.einsum("ij,ij->i", hc, yc)
    floor = _SSE_FLOOR * width
    line = np.maximum(syy - sxy**2 / sxx, floor)
    bend = np.maximum(syy - shy**2 / shh, floor)
    deviance = np.where(shy > 0, width * np.log(line / bend), 0.0)
    return steps[keep][PRE: len(y) - POST + 1].astype(np.int64), deviance


def accumulation_onset(series: list[tuple[np.ndarray, np.ndarray]]) -> AccumulationOnset | None:
    """The step where a bend common to the gradient series is strongest (mean deviance)."""
    scored = [bend_deviance(steps, values) for steps, values in series]
    scored = [(k, d) for k, d in scored if len(k)]
    if not scored:
        return None
    every = np.unique(np.concatenate([k for k, _ in scored]))
    total = np.zeros(len(every))
    for k, d in scored:
        np.add.at(total, np.searchsorted(every, k), d)
    mean = total / len(scored)
    best = int(np.argmax(mean))
    inside = every[mean >= mean[best] - CHI2_95]
    inside = inside[np.abs(inside - every[best]) <= POST]  # the bend itself, not a later one
    return AccumulationOnset(int(every[best]), (int(inside.min()), int(inside.max())),
                             float(mean[best]), len(scored))
