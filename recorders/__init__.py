"""Flight recorder for PyTorch training runs: per-step tensor statistics, crash-safe Parquet.

`Recorder` is imported on first use (PEP 562), so that the analyzer can import
``recorders.vocabulary`` (the run format) where torch is not installed.
"""

from .errors import (RecorderError, RecorderMeasureError, RecorderWarning, RecorderWriteError,
                     RunDirectoryError)

__all__ = ["Recorder", "RecorderError", "RecorderMeasureError", "RecorderWarning",
           "RecorderWriteError", "RunDirectoryError"]


def __getattr__(name: str):
    if name == "Recorder":
        from .recorder import Recorder
        return Recorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
