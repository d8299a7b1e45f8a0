"""Flight recorder for PyTorch training runs: per-step tensor statistics, crash-safe Parquet."""

from .errors import RecorderError, RecorderWarning, RecorderWriteError, RunDirectoryError
from .recorder import Recorder

__all__ = ["Recorder", "RecorderError", "RecorderWarning", "RecorderWriteError",
           "RunDirectoryError"]
