"""Where do two runs part ways? The first step with a different batch or different numbers.

Two runs fed the same batch (same input hash) from the same state should produce the same loss and
gradients; the first step where they do not is where nondeterminism or a code change entered.
A different batch hash at a step means the data order differs, which explains every later gap.
The result is data; reports.compare words it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["Mismatch", "Difference", "Comparison", "compare_runs"]

_IGNORED_SCALARS = ("wall_time",)  # differs on every rerun by design


@dataclass(frozen=True)
class Mismatch:
    """One series that differs at the step: a batch tensor's hash or a scalar's value."""

    series: str
    a: object
    b: object


@dataclass(frozen=True)
class Difference:
    step: int
    reason: str  # "different_batch", "different_values" or "missing_step"
    mismatches: tuple[Mismatch, ...] = ()  # the batch hashes or the scalars that differ
    gradients: tuple[str, ...] = ()  # different_values: tensors whose gradient norms differ
    only_in: str | None = None  # missing_step: "A" or "B", the run that recorded the step


@dataclass(frozen=True)
class Comparison:
    common_steps: int
    last_step_a: int | None
    last_step_b: int | None
    first_difference: Difference | None


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise exact equality where NaN equals NaN (a rerun must reproduce NaNs too)."""
    return (a == b) | (pd.isna(a) & pd.isna(b))


def _wide(frame: pd.DataFrame, columns: list[str], value: str) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame()
    frame = frame.assign(series=frame[columns].astype(str).agg(" ".join, axis=1))
    return frame.drop_duplicates(["step", "series"], keep="last").pivot(index="step", columns="series", values=value)


def _first_mismatch(a: pd.DataFrame, b: pd.DataFrame, steps: pd.Index) -> tuple[int | None, list[str]]:
    """First step in `steps` where the wide frames disagree, and the series that disagree there."""
    series = a.columns.union(b.columns)
    if series.empty:
        return None, []
    a, b = a.reindex(index=steps, columns=series), b.reindex(index=steps, columns=series)
    same = _same(a.to_numpy(dtype=object), b.to_numpy(dtype=object))
    rows = np.flatnonzero(~same.all(axis=1))
    if not len(rows):
        return None, []
    row = rows[0]
    return int(steps[row]), [str(series[c]) for c in np.flatnonzero(~same[row])]


def compare_runs(run_a, run_b) -> Comparison:
    """The first step (of those both runs recorded) where the runs differ, and why."""
    scalars_a, scalars_b = (r.scalars() for r in (run_a, run_b))
    scalars_a = scalars_a[~scalars_a["name"].isin(_IGNORED_SCALARS)]
    scalars_b = scalars_b[~scalars_b["name"].isin(_IGNORED_SCALARS)]
    steps_a, steps_b = pd.Index(scalars_a["step"].unique()), pd.Index(scalars_b["step"].unique())
    last_a = int(steps_a.max()) if len(steps_a) else None
    last_b = int(steps_b.max()) if len(steps_b) else None
    horizon = min(last_a, last_b) if last_a is not None and last_b is not None else -1
    union = steps_a.union(steps_b)
    union = union[union <= horizon].sort_values()
    common = steps_a.intersection(steps_b).sort_values()

    candidates: list[Difference] = []
    missing = union.difference(common)
    if len(missing):
        step = int(missing[0])
        candidates.append(Difference(step, "missing_step", only_in="A" if step in steps_a else "B"))
    # Batch tensors are named `input`, `target` or `input.<key>`: the name alone identifies them.
    batches_a, batches_b = (_wide(r.stats(roles=["input", "target"], columns=["step", "role", "name", "key", "hash"]),
                                  ["name"], "hash") for r in (run_a, run_b))
    step, names = _first_mismatch(batches_a, batches_b, common)
    if step is not None:
        candidates.append(Difference(step, "different_batch", _mismatches(batches_a, batches_b, step, names)))
    values_a, values_b = (_wide(s, ["name"], "value") for s in (scalars_a, scalars_b))
    step, names = _first_mismatch(values_a, values_b, common)
    if step is not None:
        candidates.append(Difference(step, "different_values", _mismatches(values_a, values_b, step, names),
                                     gradients=_different_gradients(run_a, run_b, step)))
    # At one step a batch difference explains a value difference, so it wins the tie.
    order = {"missing_step": 0, "different_batch": 1, "different_values": 2}
    first = min(candidates, key=lambda d: (d.step, order[d.reason]), default=None)
    return Comparison(len(common), last_a, last_b, first)


def _at(frame: pd.DataFrame, step: int, column: str) -> object:
    return frame[column].get(step) if column in frame.columns else None


def _mismatches(a: pd.DataFrame, b: pd.DataFrame, step: int, names: list[str]) -> tuple[Mismatch, ...]:
    return tuple(Mismatch(n, _at(a, step, n), _at(b, step, n)) for n in names)


def _different_gradients(run_a, run_b, step: int) -> tuple[str, ...]:
    """Which tensors' gradients differ at `step`, to say where in the model the runs split."""
    grads_a, grads_b = (_wide(r.stats(roles=["grad"], columns=["step", "role", "name", "key", "norm"]), ["name"], "norm")
                        for r in (run_a, run_b))
    _, names = _first_mismatch(grads_a, grads_b, pd.Index([step]))
    return tuple(names)
