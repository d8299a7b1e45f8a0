"""Flight recorder for PyTorch training runs: per-step tensor statistics, crash-safe Parquet."""

from .errors import (RecorderError, RecorderMeasureError, RecorderWarning, RecorderWriteError,
                     RunDirectoryError)
from .recorder import Recorder

__all__ = ["Recorder", "RecorderError", "RecorderMeasureError", "RecorderWarning",
           "RecorderWriteError", "RunDirectoryError"]
