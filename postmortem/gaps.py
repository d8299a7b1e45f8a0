"""Steps missing from the record: a failed write (a full disk) or a lost segment leaves a hole.

The recorder records every `rec.step()` (docs/run-format.md), so inside a run the steps are
contiguous. A run written by other means may record every k-th step on purpose: the usual
distance between recorded steps is taken as the run's stride, and only longer gaps are holes.
"""

from __future__ import annotations

import numpy as np

__all__ = ["missing_steps", "missing_step_warnings", "unmeasured_warnings"]

_LISTED_HOLES = 3
_CHUNK = 1 << 20


def _present_steps(steps: np.ndarray) -> np.ndarray:
    """The distinct steps, ascending (a bitmap when the range is compact: no 20 M-row sort)."""
    if not len(steps):
        return np.zeros(0, np.int64)
    low, high = int(steps.min()), int(steps.max())
    if high - low > 4 * len(steps) + 1024:
        return np.unique(steps)
    seen = np.zeros(high - low + 1, bool)
    for begin in range(0, len(steps), _CHUNK):  # in chunks: no 20 M-row temporary
        seen[steps[begin: begin + _CHUNK] - low] = True
    return np.flatnonzero(seen) + low


def missing_steps(steps: np.ndarray) -> list[tuple[int, int, int]]:
    """(first, last, count) of each run of missing steps between recorded ones, at the run's stride."""
    present = _present_steps(np.asarray(steps, np.int64))
    if len(present) < 3:
        return []
    distances = np.diff(present)
    values, counts = np.unique(distances, return_counts=True)
    stride = int(values[np.argmax(counts)])
    holes = np.flatnonzero(distances > stride)
    return [(int(present[i]) + stride, int(present[i + 1]) - stride, int(distances[i]) // stride - 1)
            for i in holes]


def missing_step_warnings(what: str, steps: np.ndarray, manifest: dict) -> list[str]:
    """One warning naming the holes in `steps` (at most a few listed), and their likely cause."""
    holes = missing_steps(steps)
    if not holes:
        return []
    listed = ", ".join(f"steps {first}–{last}" if last > first else f"step {first}"
                       for first, last, _ in holes[:_LISTED_HOLES])
    more = f" and {len(holes) - _LISTED_HOLES} more gaps" if len(holes) > _LISTED_HOLES else ""
    total = sum(count for _, _, count in holes)
    failed = manifest.get("failed_writes")
    if type(failed) is int and failed > 0:
        cause = f"the recorder reported {failed} failed writes (a full disk?) and could not write them"
    else:
        cause = "no readable segment holds them"
    return [f"{what}: {listed}{more} missing ({total} steps in all): {cause}"]


def unmeasured_warnings(manifest: dict) -> list[str]:
    """A warning naming what the recorder could not measure (its rows are missing), and one
    naming the tensors its checkpoints leave out."""
    warnings = []
    for key, what, consequence in (
            ("measure_errors", "the recorder could not measure", "those rows are missing"),
            ("checkpoint_skipped", "checkpoints leave out", "they cannot be restored from them")):
        errors = manifest.get(key)
        if not isinstance(errors, dict) or not errors:
            continue
        listed = "; ".join(f"{str(place)[:100]} ({str(error)[:200]})"
                           for place, error in list(errors.items())[:_LISTED_HOLES])
        more = f" and {len(errors) - _LISTED_HOLES} more" if len(errors) > _LISTED_HOLES else ""
        warnings.append(f"{what} {listed}{more}: {consequence}")
    return warnings
