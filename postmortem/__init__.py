"""postmortem: load a recorded training run, find when and where it went wrong, and why."""

from .analysis import Analysis, analyze
from .exceptions import PostmortemError, RunDirectoryError, SchemaVersionError
from .findings import LABELS, VERDICTS, CheckpointInfo, Finding, FirstNonfinite, Onset, RankedTensor
from .loading import Run, load_run
from .ranks import RankAnalysis, analyze_ranks

__all__ = [
    "Analysis",
    "CheckpointInfo",
    "Finding",
    "FirstNonfinite",
    "LABELS",
    "Onset",
    "PostmortemError",
    "RankAnalysis",
    "RankedTensor",
    "Run",
    "RunDirectoryError",
    "SchemaVersionError",
    "VERDICTS",
    "analyze",
    "analyze_ranks",
    "load_run",
]
