"""Errors and warnings raised by the recorder.

Usage errors derive from ``TypeError``/``ValueError`` so callers can catch them the usual way;
everything also derives from :class:`RecorderError` so one ``except`` catches all of ours.
"""

from __future__ import annotations

from .vocabulary import RecorderError, RunDirectoryError

__all__ = ["RecorderError", "RunDirectoryError", "RecorderWriteError", "RecorderMeasureError",
           "RecorderWarning"]


class RecorderWriteError(RecorderError, OSError):
    """Writing recorded data failed and ``strict=True`` was asked for."""


class RecorderMeasureError(RecorderError, RuntimeError):
    """Measuring a tensor failed (a kind of tensor the recorder cannot handle) and
    ``strict=True`` was asked for."""


class RecorderWarning(UserWarning):
    """Recording degraded (a write failed, a tensor could not be measured) but training goes
    on."""
