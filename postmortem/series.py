"""Columnar per-series view of the stats segments, built in one streaming pass.

A 100 000-step run with 200 tensors has 20 M stat rows; a pandas frame of all of them would
not fit the memory budget. This module keeps, per row, only the step, a magnitude (norm,
max_abs, or the largest |min|/|max|), the non-finite count and two role-specific auxiliary
statistics, grouped by series (role, name, key) and sorted by step with duplicates removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .loading import Run

__all__ = ["SeriesKey", "SeriesTable", "read_series", "AUX_COLUMNS"]

# Which statistics each role keeps besides its magnitude (docs/run-format.md lists what each
# role fills). Two slots are enough for what the detectors use; numel is kept per series.
AUX_COLUMNS: dict[str, tuple[str, str]] = {
    "param": ("mean", "std"),
    "grad": ("zero_frac", "grad_none"),
    "update": ("ratio",),
    "state": ("max_abs",),
    "activation": ("zero_frac", "sat_frac"),
    "input": ("mean", "std"),
    "target": ("mean", "std"),
}
_READ_COLUMNS = [
    "step", "role", "name", "key", "norm", "max_abs", "min", "max", "nonfinite",
    "mean", "std", "zero_frac", "sat_frac", "ratio", "grad_none", "numel", "hash",
]


@dataclass(frozen=True, order=True)
class SeriesKey:
    role: str
    name: str
    key: str | None

    @property
    def label(self) -> str:
        suffix = f"[{self.key}]" if self.key else ""
        return f"{self.role} {self.name}{suffix}"


@dataclass
class SeriesTable:
    """Rows grouped by series; series i occupies rows offsets[i]:offsets[i+1], steps ascending."""

    keys: list[SeriesKey]
    offsets: np.ndarray
    step: np.ndarray
    magnitude: np.ndarray
    nonfinite: np.ndarray
    aux: np.ndarray  # shape (2, rows), float32, meaning per role in AUX_COLUMNS
    numel: np.ndarray  # per series: element count at its last recorded step
    input_hashes: dict[str, dict[int, str]]

    def __len__(self) -> int:
        return len(self.keys)

    def rows(self, index: int) -> slice:
        return slice(int(self.offsets[index]), int(self.offsets[index + 1]))

    def column(self, index: int, name: str) -> np.ndarray:
        """A role-specific statistic of one series (see AUX_COLUMNS)."""
        slot = AUX_COLUMNS[self.keys[index].role].index(name)
        return self.aux[slot, self.rows(index)]

    def indices(self, role: str | None = None) -> list[int]:
        return [i for i, k in enumerate(self.keys) if role is None or k.role == role]

    def find(self, role: str, name: str, key: str | None = None) -> int | None:
        for i, k in enumerate(self.keys):
            if (k.role, k.name, k.key) == (role, name, key):
                return i
        return None


def read_series(run: Run) -> SeriesTable:
    """Stream the stats segments once and group them by series."""
    ids: dict[SeriesKey, int] = {}
    parts: dict[str, list[np.ndarray]] = {c: [] for c in ("sid", "step", "mag", "nf", "a0", "a1")}
    hashes: dict[str, dict[int, str]] = {}
    numel: dict[int, int] = {}
    for batch in run.stats_batches(_READ_COLUMNS):
        if batch.num_rows == 0:
            continue
        sid, role_codes, role_names = _series_ids(batch, ids)
        parts["sid"].append(sid)
        parts["step"].append(_ints(batch.column("step")))
        parts["mag"].append(_magnitude(batch))
        parts["nf"].append(_ints(batch.column("nonfinite")))
        a0, a1 = _aux(batch, role_codes, role_names)
        parts["a0"].append(a0)
        parts["a1"].append(a1)
        _collect_hashes(batch, hashes)
        # numel is constant along a series, so any row of each series will do.
        sizes = np.zeros(len(ids), np.int64)
        sizes[sid] = _ints(batch.column("numel"))
        for index in np.flatnonzero(np.bincount(sid)).tolist():
            numel[index] = int(sizes[index])
    keys = sorted(ids, key=ids.get)
    if not keys:
        empty = np.zeros(0)
        return SeriesTable([], np.zeros(1, np.int64), empty.astype(np.int64), empty,
                           empty.astype(np.int64), np.zeros((2, 0), np.float32),
                           np.zeros(0, np.int64), hashes)
    dtype = np.int16 if len(keys) < 2**15 else np.int32
    sid = np.concatenate(parts.pop("sid")).astype(dtype)
    step = np.concatenate(parts.pop("step"))
    order = _grouped_order(sid, step)
    sid, step = sid[order], step[order]
    magnitude = np.concatenate(parts.pop("mag"))[order]
    nonfinite = np.concatenate(parts.pop("nf"))[order]
    aux = np.empty((2, len(order)), np.float32)
    aux[0] = np.concatenate(parts.pop("a0"))[order]
    aux[1] = np.concatenate(parts.pop("a1"))[order]
    counts = np.bincount(sid, minlength=len(keys))
    offsets = np.concatenate([[0], np.cumsum(counts)])
    sizes = np.array([numel.get(i, 0) for i in range(len(keys))], np.int64)
    return SeriesTable(keys, offsets, step, magnitude, nonfinite, aux, sizes, hashes)


def _grouped_order(sid: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Row order grouping series, steps ascending, keeping the last occurrence of a step."""
    order = np.argsort(sid, kind="stable")  # radix sort on int16: linear time
    s, t = sid[order], step[order]
    same_series = s[1:] == s[:-1]
    if not np.any(same_series & (t[1:] <= t[:-1])):
        return order  # segments were in step order and had no duplicates: the usual case
    order = np.lexsort((np.arange(len(sid)), step, sid))
    s, t = sid[order], step[order]
    is_last = np.ones(len(order), bool)
    is_last[:-1] = (s[1:] != s[:-1]) | (t[1:] != t[:-1])
    return order[is_last]


def _series_ids(
    batch: pa.RecordBatch, ids: dict[SeriesKey, int]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Global series id per row, plus each row's role code and the role dictionary."""
    role, name, key = (_dictionary(batch.column(c)) for c in ("role", "name", "key"))
    r = _codes(role)
    n = _codes(name)
    k = _codes(key) + 1  # 0 means null key
    nr, nn, nk = len(role.dictionary), len(name.dictionary), len(key.dictionary) + 1
    code = (r.astype(np.int64) * nn + n) * nk + k
    lut = np.full(max(nr * nn * nk, 1), -1, np.int64)
    role_names = role.dictionary.to_pylist()
    names = name.dictionary.to_pylist()
    key_names = [None, *key.dictionary.to_pylist()]
    for c in np.flatnonzero(np.bincount(code, minlength=len(lut))):
        ri, rest = divmod(int(c), nn * nk)
        ni, ki = divmod(rest, nk)
        series = SeriesKey(role_names[ri], names[ni], key_names[ki])
        lut[c] = ids.setdefault(series, len(ids))
    return lut[code], r, role_names


def _dictionary(column: pa.Array) -> pa.DictionaryArray:
    if pa.types.is_dictionary(column.type):
        return column
    return pc.dictionary_encode(column)


def _codes(column: pa.DictionaryArray) -> np.ndarray:
    return pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)


def _ints(column: pa.Array) -> np.ndarray:
    return pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)


def _floats(column: pa.Array) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def _magnitude(batch: pa.RecordBatch) -> np.ndarray:
    """norm where recorded (param/grad/update/state), else max_abs, else max(|min|, |max|)."""
    magnitude = _floats(batch.column("norm")).copy()
    missing = np.isnan(magnitude)
    if missing.any():
        magnitude[missing] = _floats(batch.column("max_abs"))[missing]
        missing = np.isnan(magnitude)
    if missing.any():
        low = np.abs(_floats(batch.column("min"))[missing])
        high = np.abs(_floats(batch.column("max"))[missing])
        magnitude[missing] = np.fmax(low, high)
    return magnitude


def _aux(
    batch: pa.RecordBatch, role_codes: np.ndarray, role_names: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    slots = (np.full(batch.num_rows, np.nan, np.float32), np.full(batch.num_rows, np.nan, np.float32))
    for code in np.flatnonzero(np.bincount(role_codes[role_codes >= 0])):
        columns = AUX_COLUMNS.get(role_names[code])
        if columns is None:
            continue
        mask = role_codes == code
        for slot, column in zip(slots, columns):
            values = batch.column(column)
            if pa.types.is_boolean(values.type):
                values = pc.cast(values, pa.float32())
            slot[mask] = _floats(values)[mask]
    return slots


def _collect_hashes(batch: pa.RecordBatch, hashes: dict[str, dict[int, str]]) -> None:
    """Batch content hashes of input rows, {name: {step: hash}}, last occurrence wins."""
    column = batch.column("hash")
    if column.null_count == len(column):
        return
    present = pc.is_valid(column)
    table = pa.table(
        {"step": batch.column("step"), "name": pc.cast(batch.column("name"), pa.string()), "hash": column}
    ).filter(present)
    for step, name, value in zip(*(table.column(c).to_pylist() for c in ("step", "name", "hash"))):
        hashes.setdefault(name, {})[step] = value
