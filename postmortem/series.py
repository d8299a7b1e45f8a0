"""Columnar per-series view of the stats segments, built in one streaming pass.

A 100 000-step run with 200 tensors has 20 M stat rows; a pandas frame of all of them would
not fit the memory budget. This module keeps, per row, only the step, a magnitude (norm,
max_abs, or the largest |min|/|max|), the non-finite count and two role-specific auxiliary
statistics, grouped by series (role, name, key) and sorted by step with duplicates removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
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
    "mean", "std", "zero_frac", "sat_frac", "ratio", "grad_none", "numel", "hash", "kind",
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
    numel: np.ndarray  # per series: element count
    input_hashes: pd.DataFrame  # [step, name, hash] of input/target batches
    # (role, name) -> "float", "index" or "mask" for input/target series (schema 2 runs)
    input_kinds: dict[tuple[str, str], str] = field(default_factory=dict)

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


def read_series(run: Run) -> SeriesTable:
    """Stream the stats segments once and group them by series."""
    builder = _Builder()
    for batch in run.stats_batches(_READ_COLUMNS):
        batch = _named_rows(batch, run)
        if batch.num_rows:
            builder.add(batch)
    # Arrow's allocator keeps freed scan buffers for reuse; hand them back before the sort.
    pa.default_memory_pool().release_unused()
    return builder.finish()


def _named_rows(batch: pa.RecordBatch, run: Run) -> pa.RecordBatch:
    """Rows that name their series (role and name present); the others are dropped with a warning."""
    role, name = batch.column("role"), batch.column("name")
    if role.null_count == 0 and name.null_count == 0:
        return batch
    run._warn(f"skipped stats rows of {run.path} that have no role or no name")
    return batch.filter(pc.and_(pc.is_valid(role), pc.is_valid(name)))


class _Builder:
    """Accumulates per-row arrays batch by batch; finish() groups them by series."""

    def __init__(self) -> None:
        self.ids: dict[SeriesKey, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in ("sid", "step", "mag", "nf", "a0", "a1")}
        self.hashes: list[pa.Table] = []
        self.kinds: dict[tuple[str, str], str] = {}
        self.numel: dict[int, int] = {}
        self._dictionaries: tuple[pa.Array, ...] | None = None
        self._lut = np.zeros(0, np.int64)

    def add(self, batch: pa.RecordBatch) -> None:
        sid, role_codes, role_names = self._series_ids(batch)
        self.parts["sid"].append(sid.astype(np.int32))
        self.parts["step"].append(_ints(batch.column("step")))
        self.parts["mag"].append(_magnitude(batch))
        self.parts["nf"].append(np.minimum(_ints(batch.column("nonfinite")), 2**31 - 1).astype(np.int32))
        a0, a1 = _aux(batch, role_codes, role_names)
        self.parts["a0"].append(a0)
        self.parts["a1"].append(a1)
        self.hashes.extend(_input_hashes(batch))
        self.kinds.update(_input_kinds(batch))
        # numel is constant along a series, so any row of each series will do.
        sizes = np.zeros(len(self.ids), np.int64)
        sizes[sid] = _ints(batch.column("numel"))
        for index in np.flatnonzero(np.bincount(sid)).tolist():
            self.numel.setdefault(index, int(sizes[index]))

    def _series_ids(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """Global series id per row, plus each row's role code and the role dictionary."""
        role, name, key = (_dictionary(batch.column(c)) for c in ("role", "name", "key"))
        r, n, k = _codes(role), _codes(name), _codes(key) + 1  # key 0 means null
        nn, nk = len(name.dictionary), len(key.dictionary) + 1
        size = max(len(role.dictionary) * nn * nk, 1)
        code = (r * nn + n) * nk + k
        dictionaries = (role.dictionary, name.dictionary, key.dictionary)
        # Segments from one recorder share their dictionaries: reuse the lookup table.
        if self._dictionaries is None or len(self._lut) != size or not all(
            a.equals(b) for a, b in zip(dictionaries, self._dictionaries)
        ):
            self._dictionaries = dictionaries
            self._lut = np.full(size, -1, np.int64)
        role_names = role.dictionary.to_pylist()
        missing = np.flatnonzero(np.bincount(code, minlength=size))
        missing = missing[self._lut[missing] < 0]
        if len(missing):
            names = name.dictionary.to_pylist()
            key_names = [None, *key.dictionary.to_pylist()]
            for c in missing.tolist():
                ri, rest = divmod(c, nn * nk)
                ni, ki = divmod(rest, nk)
                series = SeriesKey(role_names[ri], names[ni], key_names[ki])
                self._lut[c] = self.ids.setdefault(series, len(self.ids))
        return self._lut[code], r, role_names

    def finish(self) -> SeriesTable:
        keys = sorted(self.ids, key=self.ids.get)
        hashes = (pa.concat_tables(self.hashes).to_pandas() if self.hashes
                  else pd.DataFrame({"step": [], "name": [], "hash": []}))
        if not keys:
            empty = np.zeros(0)
            return SeriesTable([], np.zeros(1, np.int64), empty.astype(np.int64), empty,
                               empty.astype(np.int32), np.zeros((2, 0), np.float32),
                               np.zeros(0, np.int64), hashes)
        sid_parts = self.parts.pop("sid")
        counts = np.zeros(len(keys), np.int64)
        for sid in sid_parts:
            counts += np.bincount(sid, minlength=len(keys))
        offsets = np.concatenate([[0], np.cumsum(counts)])
        grouped = {name: np.empty(int(offsets[-1]), self.parts[name][0].dtype) for name in self.parts}
        # Counting sort, one batch at a time: each batch is scattered to its series' next free
        # rows and then dropped, so no 20 M-row concatenation or global argsort is needed.
        cursor = offsets[:-1].copy()
        for i, sid in enumerate(sid_parts):
            starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
            order = None
            if len(np.unique(sid[starts])) != len(starts):
                # Not one run per series (the recorder sorts segments by series; others may
                # not): group the batch first.
                order = np.argsort(sid, kind="stable")
                sid = sid[order]
                starts = np.flatnonzero(np.r_[True, sid[1:] != sid[:-1]])
            lengths = np.diff(np.r_[starts, len(sid)])
            destination = cursor[sid] + (np.arange(len(sid)) - np.repeat(starts, lengths))
            cursor[sid[starts]] += lengths
            for name, pieces in self.parts.items():
                grouped[name][destination] = pieces[i] if order is None else pieces[i][order]
                pieces[i] = None
            sid_parts[i] = None
        aux = np.stack([grouped.pop("a0"), grouped.pop("a1")])
        sizes = np.array([self.numel.get(i, 0) for i in range(len(keys))], np.int64)
        table = SeriesTable(keys, offsets, grouped["step"], grouped["mag"], grouped["nf"], aux,
                            sizes, hashes, self.kinds)
        return _deduplicated(table)


def _deduplicated(table: SeriesTable) -> SeriesTable:
    """Steps ascending within each series, keeping the last occurrence of a repeated step.

    Segments arrive in number order, so the last occurrence is the newest write.
    """
    series = np.repeat(np.arange(len(table.keys)), np.diff(table.offsets))
    same = series[1:] == series[:-1]
    if not np.any(same & (table.step[1:] <= table.step[:-1])):
        return table  # the usual case: segments in step order without duplicates
    order = np.lexsort((np.arange(len(series)), table.step, series))
    s, t = series[order], table.step[order]
    keep = np.ones(len(order), bool)
    keep[:-1] = (s[1:] != s[:-1]) | (t[1:] != t[:-1])
    order = order[keep]
    counts = np.bincount(series[order], minlength=len(table.keys))
    return SeriesTable(
        table.keys, np.concatenate([[0], np.cumsum(counts)]), table.step[order],
        table.magnitude[order], table.nonfinite[order], table.aux[:, order], table.numel,
        table.input_hashes, table.input_kinds,
    )


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
    converted: dict[str, np.ndarray] = {}
    for code in np.flatnonzero(np.bincount(role_codes[role_codes >= 0])).tolist():
        columns = AUX_COLUMNS.get(role_names[code])
        if columns is None:
            continue
        mask = role_codes == code
        for slot, column in zip(slots, columns):
            if column not in converted:
                values = batch.column(column)
                if pa.types.is_boolean(values.type):
                    values = pc.cast(values, pa.float32())
                converted[column] = values.to_numpy(zero_copy_only=False)
            slot[mask] = converted[column][mask]
    return slots


def _input_hashes(batch: pa.RecordBatch) -> list[pa.Table]:
    """(step, name, hash) of the rows that carry a batch content hash (inputs, targets)."""
    column = batch.column("hash")
    if column.null_count == len(column):
        return []
    table = pa.table({"step": batch.column("step"),
                      "name": pc.cast(batch.column("name"), pa.string()),
                      "hash": column})
    return [table.filter(pc.is_valid(column))]


def _input_kinds(batch: pa.RecordBatch) -> dict[tuple[str, str], str]:
    """(role, name) -> kind of the rows that carry one (inputs and targets, schema 2)."""
    column = batch.column("kind")
    if column.null_count == len(column):
        return {}
    rows = pa.table({"role": pc.cast(batch.column("role"), pa.string()),
                     "name": pc.cast(batch.column("name"), pa.string()),
                     "kind": pc.cast(column, pa.string())}).filter(pc.is_valid(column))
    return {(r, n): k for r, n, k in zip(*(rows.column(c).to_pylist() for c in ("role", "name", "kind")))}
