"""postmortem: load a recorded training run, find when and where it went wrong, and why."""

from .analysis import Analysis, analyze
from .compare import Comparison, compare_runs
from .exceptions import PostmortemError, RunDirectoryError, SchemaVersionError
from .findings import (LABELS, VERDICTS, CheckpointInfo, Finding, FirstNonfinite, Label, Onset, RankedTensor,
                       Severity, Verdict)
from .loading import Run, load_run
from .ranks import RankAnalysis, analyze_ranks

__all__ = [
    "Analysis",
    "CheckpointInfo",
    "Comparison",
    "Finding",
    "FirstNonfinite",
    "LABELS",
    "Label",
    "Onset",
    "PostmortemError",
    "RankAnalysis",
    "RankedTensor",
    "Run",
    "RunDirectoryError",
    "SchemaVersionError",
    "Severity",
    "VERDICTS",
    "Verdict",
    "analyze",
    "analyze_ranks",
    "compare_runs",
    "load_run",
]
