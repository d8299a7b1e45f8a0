"""Streaming aggregates over a run's tensor statistics, for the figures of long runs.

A 100 000-step run holds tens of millions of stat rows; a pandas frame of them costs gigabytes.
These functions scan pyarrow record batches (only the columns needed, rows filtered by role and
name in pyarrow) and keep only what a figure shows: a tensors × step-bins matrix, the distinct
names of a role, a peak per name, or one column's values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["StepBins", "Matrix", "binned_log_matrix", "names_of", "peak_by_name", "column_values"]


@dataclass(frozen=True)
class StepBins:
    """Steps lo..hi cut into bins of `width` steps (width 1: one column per step)."""

    lo: int
    hi: int
    width: int

    @classmethod
    def covering(cls, lo: int, hi: int, max_columns: int) -> StepBins:
        return cls(lo, hi, max(1, math.ceil((hi - lo + 1) / max_columns)))

    @property
    def count(self) -> int:
        return (self.hi - self.lo) // self.width + 1

    @property
    def starts(self) -> np.ndarray:
        return self.lo + np.arange(self.count) * self.width


@dataclass(frozen=True)
class Matrix:
    """Tensors × step bins: log10 values (NaN where no positive finite data), and masks of the
    cells holding non-finite values and of the cells where every value is exactly zero."""

    values: pd.DataFrame
    nonfinite: pd.DataFrame
    zero: pd.DataFrame


def _dictionary(array: pa.Array) -> pa.DictionaryArray:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return array if pa.types.is_dictionary(array.type) else pc.dictionary_encode(array)


def _row_indices(array: pa.Array, index: dict[str, int]) -> np.ndarray:
    """Row of each element's name in `index`, -1 for names not in it (or null)."""
    encoded = _dictionary(array)
    lookup = np.array([index.get(name, -1) for name in encoded.dictionary.to_pylist()] + [-1], dtype=np.int64)
    return lookup[encoded.indices.fill_null(len(lookup) - 1).to_numpy(zero_copy_only=False)]


def _floats(batch: pa.RecordBatch, column: str) -> np.ndarray:
    return batch.column(column).to_numpy(zero_copy_only=False).astype(float)  # nulls become NaN


def names_of(run, role: str) -> list[str]:
    """Distinct names that have rows of `role`, reading only the name column."""
    found: set[str] = set()
    for batch in run.stats_batches(columns=["name"], roles=[role]):
        encoded = _dictionary(batch.column("name"))
        used = np.unique(encoded.indices.drop_null().to_numpy(zero_copy_only=False))
        dictionary = encoded.dictionary.to_pylist()
        found.update(dictionary[i] for i in used)
    return sorted(found)


def binned_log_matrix(run, *, role: str, column: str, names: list[str], bins: StepBins) -> Matrix:
    """log10 of `column` for `names` × step bins, the largest value of each bin (spikes stay visible)."""
    shape = (len(names), bins.count)
    peak = np.full(shape, -np.inf)
    seen = np.zeros(shape, dtype=np.int64)
    zeros = np.zeros(shape, dtype=np.int64)
    nonfinite = np.zeros(shape, dtype=bool)
    index = {name: row for row, name in enumerate(names)}
    for batch in run.stats_batches(columns=["step", "name", column, "nonfinite"], roles=[role], names=names):
        steps = batch.column("step").to_numpy(zero_copy_only=False)
        rows = _row_indices(batch.column("name"), index)
        keep = (rows >= 0) & (steps >= bins.lo) & (steps <= bins.hi)
        if not keep.any():
            continue
        cells = rows[keep] * bins.count + (steps[keep] - bins.lo) // bins.width
        values = _floats(batch, column)[keep]
        with np.errstate(divide="ignore", invalid="ignore"):
            np.fmax.at(peak.ravel(), cells, np.log10(values))  # fmax skips the NaN of negatives and nulls
        np.add.at(seen.ravel(), cells, 1)
        np.add.at(zeros.ravel(), cells, values == 0)
        np.logical_or.at(nonfinite.ravel(), cells, np.nan_to_num(_floats(batch, "nonfinite")[keep]) > 0)
    frame = lambda data: pd.DataFrame(data, index=names, columns=bins.starts)  # noqa: E731
    values = np.where(np.isfinite(peak), peak, np.nan)
    return Matrix(frame(values), frame(nonfinite), frame((seen > 0) & (zeros == seen) & ~nonfinite))


def peak_by_name(run, *, role: str, column: str) -> dict[str, float]:
    """Largest finite value of `column` for each name of `role`."""
    peaks: dict[str, float] = {}
    for batch in run.stats_batches(columns=["name", column], roles=[role]):
        encoded = _dictionary(batch.column("name"))
        size = len(encoded.dictionary)
        codes = encoded.indices.fill_null(size).to_numpy(zero_copy_only=False)  # null names: a spare slot
        values = _floats(batch, column)
        best = np.full(size + 1, -np.inf)
        np.fmax.at(best, codes, np.where(np.isfinite(values), values, np.nan))
        for name, value in zip(encoded.dictionary.to_pylist(), best[:size]):
            if np.isfinite(value):
                peaks[name] = max(value, peaks.get(name, -np.inf))
    return peaks


def column_values(run, *, role: str, column: str) -> np.ndarray:
    """Every non-null value of one column for one role (e.g. all update ratios), as float64."""
    parts = [_floats(batch, column) for batch in run.stats_batches(columns=[column], roles=[role])]
    values = np.concatenate(parts) if parts else np.array([])
    return values[~np.isnan(values)]
