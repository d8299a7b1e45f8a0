"""The words the three packages share: the run format, and the analysis' labels.

The recorder writes a run directory (docs/run-format.md) that postmortem reads and reports
renders; each side used to keep its own copy of the schemas, the segment names, the recorder's
scalar names and the error raised for a bad run directory. They are defined here once. This
module imports only the standard library and pyarrow, so the analyzer and the renderer import it
without torch (``recorders/__init__`` imports the recorder lazily for that reason); it lives in
the recorder's package because the producer of the format defines it and the recorder may
depend on nothing of ours.
"""

from __future__ import annotations

import enum
import re

import pyarrow as pa

__all__ = [
    "SCHEMA_VERSION", "SUPPORTED_SCHEMA_VERSIONS", "STATS_SCHEMA", "SCALARS_SCHEMA",
    "EVENTS_SCHEMA", "CHECKPOINT_SCHEMA", "TABLES", "SEGMENT_NAME", "segment_name",
    "ROLE_STATISTICS", "ROLES", "describe_tensor", "RESERVED_SCALARS", "RESERVED_PREFIXES", "USER_PREFIX",
    "is_reserved_scalar", "Label", "LABELS", "Verdict", "VERDICTS", "Severity",
    "PostmortemError", "RecorderError", "RunDirectoryError",
]

# --- the run directory -------------------------------------------------------------------------

SCHEMA_VERSION = 2  # what the recorder writes (manifest and every segment's metadata)
SUPPORTED_SCHEMA_VERSIONS = frozenset({1, 2})  # what the analyzer reads

_DICT = pa.dictionary(pa.int32(), pa.string())
# The columns of schema version 2 (version 1 lacks dtype and kind).
STATS_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("role", _DICT),
    ("name", _DICT),
    ("key", _DICT),
    ("numel", pa.int64()),
    ("norm", pa.float64()),
    ("max_abs", pa.float32()),
    ("mean", pa.float32()),
    ("std", pa.float32()),
    ("min", pa.float32()),
    ("max", pa.float32()),
    ("zero_frac", pa.float32()),
    ("sat_frac", pa.float32()),
    ("ratio", pa.float32()),
    ("nonfinite", pa.int64()),
    ("grad_none", pa.bool_()),
    ("shape", pa.string()),
    ("hash", pa.string()),
    ("dtype", _DICT),  # input/target rows: torch dtype name
    ("kind", _DICT),  # input/target rows: float, index or mask
])
SCALARS_SCHEMA = pa.schema([("step", pa.int64()), ("name", _DICT), ("value", pa.float64())])
EVENTS_SCHEMA = pa.schema([
    ("step", pa.int64()), ("kind", pa.string()), ("message", pa.string()),
    ("wall_time", pa.float64()),
])
CHECKPOINT_SCHEMA = pa.schema([
    ("step", pa.int64()),
    ("owner", pa.string()),
    ("kind", pa.string()),
    ("name", pa.string()),
    ("key", pa.string()),
    ("dtype", pa.string()),
    ("shape", pa.list_(pa.int64())),
    ("data", pa.binary()),
])

# The folders of segments, each `part-NNNNNN.parquet` (more digits past a million segments).
TABLES = ("stats", "scalars", "events")
SEGMENT_NAME = re.compile(r"^part-(\d+)\.parquet$")


def segment_name(number: int) -> str:
    return f"part-{number:06d}.parquet"


# The statistics each role's rows carry (docs/run-format.md); the others are null.
ROLE_STATISTICS = {
    "param": ("norm", "max_abs", "mean", "std"),
    "update": ("norm",),
    "grad": ("norm", "max_abs", "zero_frac"),
    "state": ("norm", "max_abs"),
    "activation": ("max_abs", "mean", "std", "zero_frac", "sat_frac"),
    "input": ("mean", "std", "min", "max"),
    "target": ("mean", "std", "min", "max"),
}
ROLES = tuple(ROLE_STATISTICS)

# How a tensor of each role reads in a sentence (the analysis' story, the report's headline);
# scalars are the values a loop logged.
_ROLE_WORDS = {
    "param": "the parameter {name}", "grad": "the gradient of {name}", "update": "the update of {name}",
    "state": "the {key} state of {name}", "activation": "the activations of {name}",
    "input": "the input batch {name}", "target": "the target batch {name}", "scalar": "the logged {name}",
}
assert set(ROLES) < set(_ROLE_WORDS), "every recorded role has its words"


def describe_tensor(name: str, role: str, key: str | None = None) -> str:
    """`the gradient of `fc1.weight``, `the exp_avg_sq state of `fc1.weight``, `the logged `loss``;
    a role outside the vocabulary as `the <role> of ...`, a key other than a state's in brackets."""
    if role == "state":
        return _ROLE_WORDS["state"].format(key=key or "optimizer", name=f"`{name}`")
    words = _ROLE_WORDS.get(role, f"the {role} of {{name}}").format(name=f"`{name}`")
    return words + (f" [{key}]" if key else "")

# Scalars the recorder writes itself (docs/run-format.md), and the prefixes of its families.
# `lr` is not among them: `rec.step(lr=...)` is how a loop without an optimizer supplies it.
# A user's scalar of such a name is recorded as `user.<name>`.
RESERVED_SCALARS = frozenset({"grad_norm", "grad_scale", "wall_time", "grad_norm_clipped",
                              "clip_coef", "scaler_skipped", "grad_carried_over"})
RESERVED_PREFIXES = ("grad_norm.", "hp.", "optimizer_stepped.")
USER_PREFIX = "user."


def is_reserved_scalar(name: str) -> bool:
    return name in RESERVED_SCALARS or name.startswith(RESERVED_PREFIXES)


# --- the analysis ------------------------------------------------------------------------------

class _StrEnum(str, enum.Enum):
    """Members are their string values in comparisons, JSON, ``str()`` and f-strings
    (enum.StrEnum from Python 3.11 on)."""

    __str__ = str.__str__
    __format__ = str.__format__


class Label(_StrEnum):
    """Every label a detector can emit (docs/diagnoses.md); adding one is one line here."""

    DIVERGED = "diverged"
    EXPLODING_GRADIENT = "exploding_gradient"
    LR_TOO_HIGH = "lr_too_high"
    NONFINITE_INPUT = "nonfinite_input"
    NO_UPDATE = "no_update"
    NO_GRADIENT = "no_gradient"
    STALE_GRADIENTS = "stale_gradients"
    VANISHING_GRADIENT = "vanishing_gradient"
    DEAD_UNITS = "dead_units"
    SATURATED_UNITS = "saturated_units"
    LR_TOO_LOW = "lr_too_low"
    UNSCALED_INPUTS = "unscaled_inputs"
    POOR_INIT = "poor_init"
    LOSS_PLATEAU = "loss_plateau"
    LOSS_ROSE_BACK = "loss_rose_back"
    RECOVERED_INCIDENT = "recovered_incident"
    HEALTHY = "healthy"
    HYPERPARAMETER_CHANGED = "hyperparameter_changed"
    WEIGHTS_CHANGED_OUTSIDE_OPTIMIZER = "weights_changed_outside_optimizer"
    BATCH_OUT_OF_RANGE = "batch_out_of_range"
    LOG_OF_ZERO = "log_of_zero"
    OPTIMIZER_STATE_CHANGED = "optimizer_state_changed"


class Verdict(_StrEnum):
    DIVERGED = "diverged"
    NOT_LEARNING = "not_learning"
    HEALTHY = "healthy"


class Severity(_StrEnum):
    """How a finding bears on the verdict (postmortem.detectors.base)."""

    ERROR = "error"  # explains the verdict
    WARNING = "warning"  # a fault the run survived
    NOTE = "note"  # structure, or a mechanism seen in a run that learns


LABELS = frozenset(label.value for label in Label)
VERDICTS = tuple(verdict.value for verdict in Verdict)

# --- errors ------------------------------------------------------------------------------------


class PostmortemError(Exception):
    """Base class of every error the analysis side raises."""


class RecorderError(Exception):
    """Base class of every error the recorder raises."""


class RunDirectoryError(RecorderError, PostmortemError, ValueError):
    """A run directory cannot be used: the recorder cannot write it (not empty, not writable,
    in use, not a run to append to) or the analyzer cannot read it (missing, not a directory,
    no readable segments). One class for both sides, so one ``except`` catches it."""
