"""The recorder's policy when something it measures or hooks fails: training goes on.

One place for it, shared by the parts of the recorder (hooks, the step measurer, checkpoints):
under ``strict`` a failure raises :class:`RecorderMeasureError`; otherwise the first one warns,
the first error per place is kept in the manifest's ``measure_errors``, and recording goes on
without what failed.
"""

from __future__ import annotations

import warnings
from typing import Any

from .errors import RecorderMeasureError, RecorderWarning

__all__ = ["MeasureFailures"]


class MeasureFailures:
    """Call it with where a tensor could not be measured and why."""

    def __init__(self, manifest: dict[str, Any], *, strict: bool) -> None:
        self.manifest = manifest  # the run's manifest, kept up to date
        self.strict = strict
        self._errors: dict[str, str] = {}  # where -> the first error there

    def __call__(self, where: str, exc: Exception) -> None:
        message = f"{type(exc).__name__}: {exc}"
        if self.strict:
            raise RecorderMeasureError(f"could not measure {where}: {message}") from exc
        if not self._errors:
            warnings.warn(f"postmortem recorder: could not measure {where} ({message}); "
                          "recording goes on without it", RecorderWarning, stacklevel=3)
        self._errors.setdefault(where, message)
        self.manifest["measure_errors"] = dict(self._errors)
