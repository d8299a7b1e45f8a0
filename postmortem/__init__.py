"""postmortem: load a recorded training run, find when and where it went wrong, and why."""

from .analysis import Analysis, analyze
from .exceptions import PostmortemError, RunDirectoryError, SchemaVersionError
from .findings import LABELS, VERDICTS, CheckpointInfo, Finding, FirstNonfinite, Onset, RankedTensor
from .loading import Run, load_run

__all__ = [
    "Analysis",
    "CheckpointInfo",
    "Finding",
    "FirstNonfinite",
    "LABELS",
    "Onset",
    "PostmortemError",
    "RankedTensor",
    "Run",
    "RunDirectoryError",
    "SchemaVersionError",
    "VERDICTS",
    "analyze",
    "load_run",
]
