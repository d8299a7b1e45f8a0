"""Columnar per-series view of the stats segments, built in one streaming pass.

A 100 000-step run with 200 tensors has 20 M stat rows; a pandas frame of all of them would
not fit the memory budget. This module keeps, per row, only the step, a magnitude (norm,
max_abs, or the largest |min|/|max|), the non-finite count and two role-specific auxiliary
statistics, grouped by series (role, name, key) and sorted by step with duplicates removed.

A run of up to FULL_ROWS rows is kept whole. A longer one (a 7 B-parameter model: ~1 500
series × 100 000 steps = 150 M rows, which would need ~4 GB here) is read in two passes. The
coarse pass keeps every `stride`-th step (about COARSE_ROWS rows), every non-finite row and,
per batch of each series, its first row and its largest and smallest magnitude (the history
keeps its range and its spikes), and every row of the last FINE_STEPS steps (the row groups'
step statistics say where they begin); the fine pass then re-reads whole the FINE_STEPS steps
before its first non-finite steps (and before the end, if the footers did not say), from the
row groups whose step statistics reach them. The break fits are cut at the first non-finite
step and fitted on the final rise (onset.py), so a divergence whose rise lasts up to
~FINE_STEPS / 5 steps is fitted on every row, as in a short run; older history is thinned.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .loading import STATS_SCHEMA, Run, stats_frame

try:
    from . import _kernels
except ImportError:  # not compiled (no C++ compiler at install): the numpy twins below
    _kernels = None

__all__ = ["SeriesKey", "SeriesTable", "read_series", "AUX_COLUMNS", "READ_COLUMNS"]

FULL_ROWS = 40_000_000  # kept whole up to here: ~1.1 GB of arrays
COARSE_ROWS = 10_000_000
FINE_STEPS = 10_000
READ_STAGES = 8  # progress calls while reading
_SLICED_SPANS = 1024  # runs of one role in a batch up to which its aux columns are copied by slices

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
INPUT_ROLES = ("input", "target")
INPUT_COLUMNS = ["step", "role", "name", "key", "mean", "std", "min", "max", "nonfinite", "hash", "shape"]
_PARTS = ("sid", "step", "mag", "nf", "a0", "a1")
_SCATTERED_BESIDE = ("step", "mag")  # by finish()'s second thread: 16 of the 28 bytes a row
READ_COLUMNS = [
    "step", "role", "name", "key", "norm", "max_abs", "min", "max", "nonfinite",
    "mean", "std", "zero_frac", "sat_frac", "ratio", "grad_none", "numel", "hash", "kind", "shape",
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
    # Every recorded step, ascending, when a long run's rows were thinned; None: `step` has them.
    thinned_steps: np.ndarray | None = None
    # Every input/target row with INPUT_COLUMNS, as Run.stats(roles=INPUT_ROLES) gives them
    # (ranges, shapes and hashes of the batches: a report shows them without reading the run).
    input_rows: pd.DataFrame | None = None

    def recorded_steps(self) -> np.ndarray:
        """The steps the stats recorded (all of them, also where a long run was thinned)."""
        return self.step if self.thinned_steps is None else self.thinned_steps

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

    def since(self, step: int) -> SeriesTable:
        """The rows from `step` on; a series with none left is dropped."""
        keep = self.step >= step
        counts = np.bincount(np.repeat(np.arange(len(self.keys)), np.diff(self.offsets))[keep],
                             minlength=len(self.keys))
        live = np.flatnonzero(counts > 0)
        hashes, rows = self.input_hashes, self.input_rows
        return SeriesTable(
            [self.keys[i] for i in live], np.concatenate([[0], np.cumsum(counts[live])]), self.step[keep],
            self.magnitude[keep], self.nonfinite[keep], self.aux[:, keep], self.numel[live],
            hashes[hashes["step"] >= step] if len(hashes) else hashes, self.input_kinds,
            None if self.thinned_steps is None else self.thinned_steps[self.thinned_steps >= step],
            None if rows is None else rows[rows["step"] >= step])


def read_series(run: Run, progress: Callable[[str], None] | None = None) -> SeriesTable:
    """Stream the stats segments once (twice for a long run, see above) and group them by series.

    `progress(label)` is called READ_STAGES times, as each READ_STAGES-th of the rows is read.
    """
    with _small_pages():
        return _read_series(run, progress)


@contextmanager
def _small_pages() -> Iterator[None]:
    """numpy's large arrays without transparent huge pages while inside. The read's arrays
    are written once each (the kept rows of a batch, then the grouped arrays they are
    scattered into, series by series): with huge pages the first row written anywhere in 2 MB
    has the kernel clear all of it, and the grouped arrays are faulted in whole while the
    batches' rows are still held. Measured at 150 M rows: ~270 MB less peak RSS, ~1 s less
    kernel time. A numpy without the switch (it is private) keeps its default."""
    modules = (getattr(np, name, None) for name in ("_core", "core"))  # numpy 2, numpy 1
    switch = next((getattr(m.multiarray, "_set_madvise_hugepage", None) for m in modules
                   if hasattr(m, "multiarray")), None)
    if switch is None:
        yield
        return
    previous = switch(False)
    try:
        yield
    finally:
        switch(previous)


def _read_series(run: Run, progress: Callable[[str], None] | None) -> SeriesTable:
    total = run.stats_rows()
    stride = 1 if total <= FULL_ROWS else -(-total // COARSE_ROWS)
    last = run.stats_last_step() if stride > 1 else None
    # The coarse pass keeps the last FINE_STEPS steps whole when the footers say where they are.
    tail = None if last is None else last - FINE_STEPS
    builder = _Builder(stride, tail)
    shares = _Shares(progress, total)
    for batch in run.stats_batches(READ_COLUMNS):
        shares.read(batch.num_rows)
        batch = _named_rows(batch, run)
        if batch.num_rows:
            builder.add(batch)
    if stride > 1 and builder.parts["step"]:
        windows = [w for w in builder.fine_windows() if tail is None or w[0] < tail]
        if windows:  # else the coarse rows are all there is
            coarse = builder.split(windows)
            for index, window in enumerate(windows):
                builder.extend(coarse[index])
                for batch in run.stats_batches(READ_COLUMNS, steps=window):
                    batch = _named_rows(batch, run)
                    if batch.num_rows:
                        builder.add(batch, window=window)
            builder.extend(coarse[-1])
    shares.read(shares.total)  # rows the loader dropped (bad steps, damaged segments) count too
    # Arrow's allocator keeps freed scan buffers for reuse; hand them back before the sort.
    pa.default_memory_pool().release_unused()
    return builder.finish()


class _Shares:
    """Calls `progress` once as each READ_STAGES-th of `total` rows is read."""

    def __init__(self, progress: Callable[[str], None] | None, total: int) -> None:
        self.progress, self.total, self.rows, self.told = progress, max(total, 1), 0, 0

    def read(self, rows: int) -> None:
        self.rows = min(self.rows + rows, self.total)
        while self.told < READ_STAGES * self.rows // self.total:
            self.told += 1
            if self.progress is not None:
                self.progress(f"reading tensor statistics ({self.told}/{READ_STAGES})")


def _named_rows(batch: pa.RecordBatch, run: Run) -> pa.RecordBatch:
    """Rows that name their series (role and name present); the others are dropped with a warning."""
    role, name = batch.column("role"), batch.column("name")
    if role.null_count == 0 and name.null_count == 0:
        return batch
    run._warn(f"skipped stats rows of {run.path} that have no role or no name")
    return batch.filter(pc.and_(pc.is_valid(role), pc.is_valid(name)))


class _Builder:
    """Accumulates per-row arrays batch by batch; finish() groups them by series."""

    def __init__(self, stride: int = 1, tail: int | None = None) -> None:
        self.stride, self.tail = stride, tail
        self.ids: dict[SeriesKey, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in _PARTS}
        self.hashes: list[pa.Table] = []
        self.kinds: dict[tuple[str, str], str] = {}
        self.numel = np.zeros(0, np.int64)  # per series id, from the first batch with a row of it
        self.numel_known = np.zeros(0, bool)
        self.steps_seen: list[np.ndarray] = []  # distinct steps per batch, when thinned
        self.inputs: list[pa.Table] = []
        self._dictionaries: tuple[pa.Array, ...] | None = None
        self._lut = np.zeros(0, np.int64)
        self._buffers: dict[str, np.ndarray] = {}

    def add(self, batch: pa.RecordBatch, window: tuple[int, int] | None = None) -> None:
        """Keep the batch's rows: all of them, those of the coarse pass (stride > 1), or those
        inside a fine pass's `window` (its batches were seen by the coarse pass already)."""
        run_sid, starts, role_codes, role_names = self._series_ids(batch)
        step = _ints(batch.column("step"))
        nf = _ints(batch.column("nonfinite"))
        if window is None:
            self.hashes.extend(_input_hashes(batch))
            self.kinds.update(_input_kinds(batch))
            self.inputs.append(_input_rows(batch, starts, role_codes, role_names))
        keep, rows, mag = None, None, _magnitude(batch, self._scratch("magnitude", batch.num_rows, np.float64))
        if window is not None:
            keep = (step >= window[0]) & (step <= window[1])
        elif self.stride > 1:
            distinct, keep, rows = self._coarse(step, nf, mag, run_sid, starts)
            self.steps_seen.append(distinct)
        if keep is not None and not keep.all():
            rows = (np.flatnonzero(keep), None)
        if rows is not None:  # the batch's rows kept, and their series (None: all rows kept)
            rows, sid = rows
            if sid is None:
                sid = run_sid[np.searchsorted(starts, rows, side="right") - 1]  # a row's run's series
            step, nf, role_codes, mag = step[rows], nf[rows], role_codes[rows], mag[rows]
            starts = _run_starts(sid)
        else:
            sid = np.repeat(run_sid, np.diff(np.r_[starts, batch.num_rows]))
            self._keep_scratch("magnitude", mag)
        self.parts["sid"].append(sid)
        self.parts["step"].append(step)
        self.parts["mag"].append(mag)
        self.parts["nf"].append(_counts(nf))
        a0, a1 = _aux(batch, rows, starts, role_codes, role_names)
        self.parts["a0"].append(a0)
        self.parts["a1"].append(a1)
        # numel is constant along a series, so any row of each series will do (here the last
        # row of each series in the first batch that has it, as a scatter of every row leaves).
        if len(sid):
            ends = np.r_[starts[1:], len(sid)] - 1
            grow = len(self.ids) - len(self.numel)
            self.numel = np.r_[self.numel, np.zeros(grow, np.int64)]
            self.numel_known = np.r_[self.numel_known, np.zeros(grow, bool)]
            sizes, present = np.zeros(len(self.ids), np.int64), np.zeros(len(self.ids), bool)
            sizes[sid[ends]] = _ints(pc.take(batch.column("numel"), pa.array(ends if rows is None else rows[ends])))
            present[sid[ends]] = True
            first = present & ~self.numel_known
            self.numel[first] = sizes[first]
            self.numel_known |= present

    def _coarse(self, step: np.ndarray, nf: np.ndarray, mag: np.ndarray, run_sid: np.ndarray,
                starts: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, tuple | None]:
        """The coarse pass's rows of a batch: its distinct steps and the rows it keeps, either
        as a mask or (compiled, one pass) as (rows, their series); both None when all are kept.
        Kept: every `stride`-th step, every step from `tail` on, non-finite rows, _extremes."""
        low, high = int(step.min()), int(step.max())
        if _kernels is None or high - low > 4 * len(step):
            distinct, keep = _coarse_steps(step, self.stride, self.tail, self._scratch("offset", len(step), np.int64))
            if not keep.all():  # else (a batch of the last steps) every row is kept already
                keep |= (nf > 0) | _extremes(run_sid, starts, mag)
            return distinct, keep, None
        steps = np.arange(low, high + 1)
        kept = steps % self.stride == 0
        if self.tail is not None:
            kept |= steps >= self.tail
        seen, rows = np.zeros(len(steps), bool), self._scratch("rows", len(step), np.int64)
        sid = self._scratch("row_sid", len(step), np.int32)
        arrays = [np.ascontiguousarray(a, t) for a, t in ((step, np.int64), (nf, np.int64), (mag, np.float64),
                                                          (starts, np.int64), (run_sid, np.int32))]
        count = _kernels.coarse_rows(*(a.ctypes.data for a in arrays[:3]), len(step), arrays[3].ctypes.data,
                                     arrays[4].ctypes.data, len(starts), int(run_sid.max()) + 1, low,
                                     kept.ctypes.data, seen.ctypes.data, rows.ctypes.data, sid.ctypes.data)
        return steps[seen], None, None if count == len(step) else (rows[:count], sid[:count].copy())

    def _scratch(self, name: str, rows: int, dtype: type) -> np.ndarray:
        """A buffer of `rows` values for a per-batch temporary, reused batch after batch: a
        fresh one each batch had its pages faulted in and cleared by the kernel each time."""
        buffer = self._buffers.get(name)
        if buffer is None or len(buffer) < rows:
            buffer = self._buffers[name] = np.empty(rows, dtype)
        return buffer[:rows]

    def _keep_scratch(self, name: str, kept: np.ndarray) -> None:
        """`kept` is kept beyond this batch: if it is the scratch buffer, take a new one next time."""
        buffer = self._buffers.get(name)
        if buffer is not None and np.may_share_memory(buffer, kept):
            del self._buffers[name]

    def _series_ids(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """Global series id (int32) of each run of rows of one series, the first row of each
        run, each row's role code and the role dictionary. The work per row is finding where
        the runs begin (the recorder writes a flush's rows series by series); the ids are
        looked up per run."""
        role, name, key = (_dictionary(batch.column(c)) for c in ("role", "name", "key"))
        r = _codes(role)
        nn, nk = len(name.dictionary), len(key.dictionary) + 1
        size = max(len(role.dictionary) * nn * nk, 1)
        if _kernels is not None and all(_int32_codes(c) for c in (role, name, key)):
            starts = self._code_run_starts((role, name, key), batch.num_rows)
            n_at, k_at = _codes_at(name, starts), _codes_at(key, starts)  # key -1 means null
        else:
            n, k = _codes(name), _codes(key)
            starts = _run_starts(r, n, k)
            n_at, k_at = n[starts], k[starts]
        code = (r[starts].astype(np.int64) * nn + n_at) * nk + (k_at + 1)
        dictionaries = (role.dictionary, name.dictionary, key.dictionary)
        # Segments from one recorder share their dictionaries: reuse the lookup table.
        if self._dictionaries is None or len(self._lut) != size or not all(
            a.equals(b) for a, b in zip(dictionaries, self._dictionaries)
        ):
            self._dictionaries = dictionaries
            self._lut = np.full(size, -1, np.int64)
        role_names = role.dictionary.to_pylist()
        missing = np.unique(code[self._lut[code] < 0])  # usually none: every series seen before
        if len(missing):
            names = name.dictionary.to_pylist()
            key_names = [None, *key.dictionary.to_pylist()]
            for c in missing.tolist():
                ri, rest = divmod(c, nn * nk)
                ni, ki = divmod(rest, nk)
                series = SeriesKey(role_names[ri], names[ni], key_names[ki])
                self._lut[c] = self.ids.setdefault(series, len(self.ids))
        run_sid = self._lut[code].astype(np.int32)
        # Codes of one series (a dictionary that repeats a value) make one run.
        merged = np.r_[True, run_sid[1:] != run_sid[:-1]]
        return run_sid[merged], starts[merged], r, role_names

    def _code_run_starts(self, columns: tuple[pa.DictionaryArray, ...], rows: int) -> np.ndarray:
        """_run_starts of the columns' dictionary codes (null: -1), in one compiled pass."""
        out = self._scratch("starts", rows, np.int64)
        found = _kernels.run_starts(out.ctypes.data, rows, tuple(
            (c.indices.buffers()[1].address, _validity_address(c.indices), c.indices.offset)
            for c in columns))
        return out[:found]

    def fine_windows(self) -> list[tuple[int, int]]:
        """Step ranges to read whole: FINE_STEPS steps before the end, before the first
        non-finite step and before the first one outside the gradients (which a GradScaler's
        run ignores), merged where they overlap."""
        steps, nf, sid = self.parts["step"], self.parts["nf"], self.parts["sid"]
        grads = np.array([k.role == "grad" for k in sorted(self.ids, key=self.ids.get)])
        ends = [max(int(s.max()) for s in steps if len(s))]
        for skip_grads in (False, True):
            bad = [s[(f > 0) & ~grads[i]] if skip_grads else s[f > 0] for s, f, i in zip(steps, nf, sid)]
            bad = [int(b.min()) for b in bad if len(b)]
            ends += [min(bad)] if bad else []
        windows: list[tuple[int, int]] = []
        for end in sorted(set(ends)):
            low = max(0, end - FINE_STEPS)
            if windows and low <= windows[-1][1] + 1:
                windows[-1] = (windows[-1][0], max(windows[-1][1], end))
            else:
                windows.append((low, end))
        return windows

    def split(self, windows: list[tuple[int, int]]) -> list[dict[str, list[np.ndarray]]]:
        """The coarse rows between the windows, in len(windows) + 1 parts (rows inside a
        window are dropped: the fine pass re-reads them), one batch at a time."""
        edges = np.array([edge for low, high in windows for edge in (low, high + 1)])
        between = [{name: [] for name in _PARTS} for _ in range(len(windows) + 1)]
        for i in range(len(self.parts["step"])):
            where = np.searchsorted(edges, self.parts["step"][i], side="right")
            for slot in np.unique(where[where % 2 == 0]).tolist():
                rows = where == slot
                for name in _PARTS:
                    between[slot // 2][name].append(self.parts[name][i][rows])
            for name in _PARTS:
                self.parts[name][i] = None
        self.parts = {name: [] for name in _PARTS}
        return between

    def extend(self, parts: dict[str, list[np.ndarray]]) -> None:
        for name in _PARTS:
            self.parts[name].extend(parts[name])
            parts[name].clear()

    def input_frame(self) -> pd.DataFrame:
        schema = pa.schema([STATS_SCHEMA.field(c) for c in INPUT_COLUMNS])
        return stats_frame(pa.concat_tables([schema.empty_table(), *self.inputs]))

    def finish(self) -> SeriesTable:
        keys = sorted(self.ids, key=self.ids.get)
        hashes = (pa.concat_tables(self.hashes).to_pandas() if self.hashes
                  else pd.DataFrame({"step": [], "name": [], "hash": []}))
        if not keys:
            empty = np.zeros(0)
            return SeriesTable([], np.zeros(1, np.int64), empty.astype(np.int64), empty,
                               empty.astype(np.int32), np.zeros((2, 0), np.float32),
                               np.zeros(0, np.int64), hashes, input_rows=self.input_frame())
        sid_parts = self.parts.pop("sid")
        counts = np.zeros(len(keys), np.int64)
        for sid in sid_parts:
            counts += np.bincount(sid, minlength=len(keys))
        offsets = np.concatenate([[0], np.cumsum(counts)])
        aux = np.empty((2, int(offsets[-1])), np.float32)
        grouped = {name: np.empty(int(offsets[-1]), self.parts[name][0].dtype)
                   for name in self.parts if name not in ("a0", "a1")}
        grouped.update(a0=aux[0], a1=aux[1])
        # Counting sort, one batch at a time: each batch is scattered to its series' next free
        # rows and then dropped, so no 20 M-row concatenation or global argsort is needed. The
        # reading is over, so step and magnitude are scattered on a second thread meanwhile
        # (numpy releases the GIL; most of the time is the first touch of the grouped arrays).
        cursor = offsets[:-1].copy()

        def scatter(names: tuple[str, ...], i: int, destination: np.ndarray) -> None:
            for name in names:
                grouped[name][destination] = self.parts[name][i]
                self.parts[name][i] = None

        with ThreadPoolExecutor(max_workers=1) as pool:
            for i, sid in enumerate(sid_parts):
                destination = _destinations(sid, cursor)
                beside = pool.submit(scatter, _SCATTERED_BESIDE, i, destination)
                scatter(tuple(n for n in self.parts if n not in _SCATTERED_BESIDE), i, destination)
                beside.result()
                sid_parts[i] = None
        sizes = np.r_[self.numel, np.zeros(len(keys) - len(self.numel), np.int64)]
        thinned = np.unique(np.concatenate(self.steps_seen)) if self.steps_seen else None
        table = SeriesTable(keys, offsets, grouped["step"], grouped["mag"], grouped["nf"], aux,
                            sizes, hashes, self.kinds, thinned, self.input_frame())
        return _deduplicated(table)


def _destinations(sid: np.ndarray, cursor: np.ndarray) -> np.ndarray:
    """Where each row of a batch goes in the grouped arrays: its series' next free row
    (`cursor`, advanced), rows of one series in batch order. Worked out per run of rows of one
    series (a compacted segment's batch holds flush after flush, each series a run in each)."""
    starts = _run_starts(sid) if len(sid) else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, len(sid)])
    order = np.argsort(sid[starts], kind="stable")
    series, ordered = sid[starts][order], lengths[order]
    first = np.flatnonzero(np.r_[True, series[1:] != series[:-1]]) if len(order) else starts
    before = np.cumsum(ordered) - ordered  # rows of the runs before, in series order
    within = before - np.repeat(before[first], np.diff(np.r_[first, len(order)]))
    run_destination = np.empty(len(starts), np.int64)
    run_destination[order] = cursor[series] + within
    if len(first):
        cursor[series[first]] += np.add.reduceat(ordered, first)
    return np.repeat(run_destination - starts, lengths) + np.arange(len(sid))


def _deduplicated(table: SeriesTable) -> SeriesTable:
    """Steps ascending within each series, keeping the last occurrence of a repeated step.

    Segments arrive in number order, so the last occurrence is the newest write.
    """
    out_of_order = table.step[1:] <= table.step[:-1]
    boundaries = table.offsets[1:-1]  # a series' first row may follow any step of the one before
    out_of_order[boundaries[(boundaries > 0) & (boundaries < len(table.step))] - 1] = False
    if not out_of_order.any():
        return table  # the usual case: segments in step order without duplicates
    series = np.repeat(np.arange(len(table.keys)), np.diff(table.offsets))
    order = np.lexsort((np.arange(len(series)), table.step, series))
    s, t = series[order], table.step[order]
    keep = np.ones(len(order), bool)
    keep[:-1] = (s[1:] != s[:-1]) | (t[1:] != t[:-1])
    order = order[keep]
    counts = np.bincount(series[order], minlength=len(table.keys))
    return SeriesTable(
        table.keys, np.concatenate([[0], np.cumsum(counts)]), table.step[order],
        table.magnitude[order], table.nonfinite[order], table.aux[:, order], table.numel,
        table.input_hashes, table.input_kinds, table.thinned_steps, table.input_rows,
    )


def _extremes(run_sid: np.ndarray, starts: np.ndarray, magnitude: np.ndarray) -> np.ndarray:
    """Rows a coarse pass keeps besides its stride: the first row of each series in the batch
    and one row of its largest and one of its smallest magnitude, so that the thinned history
    keeps its range (a healthy batch scale, a spike). Vectorised over the batch's runs of
    rows of one series (beginning at `starts`, of series `run_sid`), not its million rows."""
    lengths = np.diff(np.r_[starts, len(magnitude)])
    keep = np.zeros(len(magnitude), bool)
    keep[starts[np.unique(run_sid, return_index=True)[1]]] = True
    with np.errstate(invalid="ignore"):
        for reduce in (np.fmax, np.fmin):
            best = np.full(int(run_sid.max()) + 1, np.nan)
            extreme = reduce.reduceat(magnitude, starts)
            reduce.at(best, run_sid, extreme)
            # Only a run whose extreme is its series' can hold a row that reaches it.
            reaching = np.flatnonzero(extreme == best[run_sid])
            rows = _run_rows(starts[reaching], lengths[reaching])
            row_sid = np.repeat(run_sid[reaching], lengths[reaching])
            hit = magnitude[rows] == best[row_sid]  # a constant series ties at every row
            keep[rows[hit][np.unique(row_sid[hit], return_index=True)[1]]] = True
    return keep


def _run_starts(*codes: np.ndarray) -> np.ndarray:
    """The first row of each run of rows equal in every one of `codes` (arrays of one length)."""
    change = np.zeros(len(codes[0]), bool)
    change[:1] = True
    for values in codes:
        change[1:] |= values[1:] != values[:-1]
    return np.flatnonzero(change)


def _run_rows(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The rows of the runs that begin at `starts`, in order."""
    offsets = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return np.arange(int(lengths.sum())) + offsets


def _coarse_steps(step: np.ndarray, stride: int, tail: int | None, scratch: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct steps of a (non-empty) batch, ascending, and the rows the coarse pass keeps
    for their step: every `stride`-th step, every step from `tail` on. A bitmap and a lookup
    table over the batch's step range (a batch spans a few hundred steps): 10x faster than
    np.unique and an int64 modulo of every row. `scratch`: room for the batch's int64 step
    offsets."""
    low, high = int(step.min()), int(step.max())
    if high - low > 4 * len(step):
        steps, offset = np.unique(step, return_inverse=True)
        present = steps
    else:
        offset = np.subtract(step, low, out=scratch)
        steps = np.arange(low, high + 1)
        seen = np.zeros(len(steps), bool)
        seen[offset] = True
        present = steps[seen]
    kept = steps % stride == 0
    if tail is not None:
        kept |= steps >= tail
    return present, kept[offset]


def _dictionary(column: pa.Array) -> pa.DictionaryArray:
    if pa.types.is_dictionary(column.type):
        return column
    return pc.dictionary_encode(column)


def _codes(column: pa.DictionaryArray) -> np.ndarray:
    """Dictionary codes as int32, -1 for null."""
    values, valid = _raw(column.indices)
    return (values if valid is None else np.where(valid, values, -1)).astype(np.int32, copy=False)


def _ints(column: pa.Array) -> np.ndarray:
    if column.null_count:
        column = pc.fill_null(column, 0)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _counts(values: np.ndarray) -> np.ndarray:
    """Non-finite counts (int64, null read as 0) as int32, capped at 2**31 - 1."""
    if len(values) and values.max() >= 2**31:
        values = np.minimum(values, 2**31 - 1)
    return values.astype(np.int32)


def _magnitude(batch: pa.RecordBatch, scratch: np.ndarray) -> np.ndarray:
    """norm where recorded (param/grad/update/state), else max_abs, else max(|min|, |max|);
    written into `scratch` (float64, a value per row), in one compiled pass where it can."""
    columns = [batch.column(c) for c in ("norm", "max_abs", "min", "max")]
    if _kernels is None or not all(c.type in (pa.float32(), pa.float64()) for c in columns):
        return _magnitude_numpy(batch, scratch)
    _kernels.magnitude(scratch.ctypes.data, len(scratch), tuple(
        (0 if c.buffers()[1] is None else c.buffers()[1].address, _validity_address(c), c.offset,
         int(c.type == pa.float64())) for c in columns))
    return scratch


def _validity_address(column: pa.Array) -> int:
    """The address of a column's validity bitmap, 0 where every row is valid."""
    return column.buffers()[0].address if column.null_count else 0


def _int32_codes(column: pa.DictionaryArray) -> bool:
    return column.indices.type == pa.int32() and column.indices.buffers()[1] is not None


def _codes_at(column: pa.DictionaryArray, rows: np.ndarray) -> np.ndarray:
    """_codes(column)[rows] (int32 codes), reading only those rows."""
    indices = column.indices
    codes = np.frombuffer(indices.buffers()[1], np.int32, count=indices.offset + len(indices))[
        indices.offset:][rows]
    if indices.null_count:
        codes[_bits_at(indices.buffers()[0], indices.offset, rows) == 0] = -1
    return codes


def _magnitude_numpy(batch: pa.RecordBatch, scratch: np.ndarray) -> np.ndarray:
    """_magnitude with numpy, into `scratch` unless norm is recorded on every row. Read from
    the columns' own buffers and validity bitmaps: filling their nulls first made a new 8 MB
    array of each column every batch."""
    norm, valid = _raw(batch.column("norm"))
    missing = np.isnan(norm)
    if valid is not None:
        missing |= ~valid
    if not missing.any():
        return norm.astype(np.float64, copy=False)
    magnitude = scratch
    np.copyto(magnitude, norm)
    max_abs, valid = _raw(batch.column("max_abs"))
    np.copyto(magnitude, max_abs, where=missing)
    left = np.isnan(magnitude)
    if valid is not None:
        left |= missing & ~valid
    missing = np.flatnonzero(left)
    if len(missing):
        low = np.abs(_raw_at(batch.column("min"), missing))
        high = np.abs(_raw_at(batch.column("max"), missing))
        magnitude[missing] = np.fmax(low, high)
    return magnitude


def _raw(column: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """A fixed-width numeric column's values as numpy, without a copy (a bool column's
    unpacked to 0/1), any value where null, and which rows are valid (None: all of them)."""
    validity, data = column.buffers()[:2]
    start, rows = column.offset, len(column)
    if data is None:  # no values at all (every row null)
        kind = np.uint8 if pa.types.is_boolean(column.type) else column.type.to_pandas_dtype()
        return np.zeros(rows, kind), np.zeros(rows, bool)
    if pa.types.is_boolean(column.type):  # one bit a value
        values = np.unpackbits(np.frombuffer(data, np.uint8), count=start + rows, bitorder="little")[start:]
    else:
        values = np.frombuffer(data, column.type.to_pandas_dtype(), count=start + rows)[start:]
    if not column.null_count:
        return values, None
    bits = np.unpackbits(np.frombuffer(validity, np.uint8), count=start + rows, bitorder="little")
    return values, bits[start:].view(bool)


def _raw_at(column: pa.Array, rows: np.ndarray) -> np.ndarray:
    """A float column's values at `rows` (a bool column's as float32 0/1), NaN where null.
    For a few rows (a thinned batch keeps ~1 in 16) only their bits are read, not the whole
    column's bitmaps unpacked."""
    if 8 * len(rows) > len(column) or column.buffers()[1] is None:
        values, valid = _raw(column)
        taken = values[rows] if values.dtype.kind == "f" else values[rows].astype(np.float32)
        if valid is not None:
            taken[~valid[rows]] = np.nan
        return taken
    validity, data = column.buffers()[:2]
    if pa.types.is_boolean(column.type):
        taken = _bits_at(data, column.offset, rows).astype(np.float32)
    else:
        taken = np.frombuffer(data, column.type.to_pandas_dtype(), count=column.offset + len(column))[
            column.offset:][rows]
    if column.null_count:
        taken[_bits_at(validity, column.offset, rows) == 0] = np.nan
    return taken


def _bits_at(bitmap: pa.Buffer, offset: int, rows: np.ndarray) -> np.ndarray:
    """Bits `offset + rows` of an Arrow bitmap (least significant bit first), as uint8 0/1."""
    at = rows + offset
    return (np.frombuffer(bitmap, np.uint8)[at >> 3] >> (at & 7).astype(np.uint8)) & 1


def _aux(batch: pa.RecordBatch, rows: np.ndarray | None, starts: np.ndarray, role_codes: np.ndarray,
         role_names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The role-specific statistics (AUX_COLUMNS) of the kept rows: `rows` of the batch (None:
    every row), whose role codes are `role_codes` and whose runs of one series begin at
    `starts`. Each role's columns are copied for its own rows only: slice by slice when every
    row is kept (a flush's rows come role by role, so a batch holds a few dozen runs of one
    role), else taken row by row."""
    slots = (np.full(len(role_codes), np.nan, np.float32), np.full(len(role_codes), np.nan, np.float32))
    run_roles = role_codes[starts]
    first = _run_starts(run_roles)
    begin, span_roles = starts[first], run_roles[first]
    end = np.r_[begin[1:], len(role_codes)]
    sliced = rows is None and len(begin) <= _SLICED_SPANS
    whole: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for code in np.unique(span_roles).tolist():
        columns = AUX_COLUMNS.get(role_names[code]) if code >= 0 else None
        if columns is None:
            continue
        mine = span_roles == code
        if sliced:
            for slot, column in zip(slots, columns):
                if column not in whole:
                    whole[column] = _raw(batch.column(column))
                values, valid = whole[column]
                for low, high in zip(begin[mine].tolist(), end[mine].tolist()):
                    slot[low:high] = values[low:high]
                    if valid is not None:
                        np.copyto(slot[low:high], np.nan, where=~valid[low:high])
            continue
        at = _run_rows(begin[mine], (end - begin)[mine])
        taken = at if rows is None else rows[at]
        for slot, column in zip(slots, columns):
            slot[at] = _raw_at(batch.column(column), taken)
    return slots


def _input_hashes(batch: pa.RecordBatch) -> list[pa.Table]:
    """(step, name, hash) of the rows that carry a batch content hash (inputs, targets)."""
    column = batch.column("hash")
    if column.null_count == len(column):
        return []
    rows = pa.table({"step": batch.column("step"), "name": batch.column("name"), "hash": column}
                    ).filter(pc.is_valid(column))  # then cast: a million names cost 30 ms
    return [rows.set_column(1, "name", pc.cast(rows.column("name"), pa.string()))]


def _input_rows(batch: pa.RecordBatch, starts: np.ndarray, role_codes: np.ndarray, role_names: list[str]
                ) -> pa.Table:
    """The batch's input/target rows, INPUT_COLUMNS of them (found from its runs of one series,
    beginning at `starts`)."""
    wanted = np.array([r in INPUT_ROLES for r in role_names] + [False])  # code -1 (null): the last
    mine = wanted[role_codes[starts]]
    lengths = np.diff(np.r_[starts, len(role_codes)])
    rows = _run_rows(starts[mine], lengths[mine]) if mine.any() else np.zeros(0, np.int64)
    return pa.Table.from_batches([batch.select(INPUT_COLUMNS)]).take(rows)


def _input_kinds(batch: pa.RecordBatch) -> dict[tuple[str, str], str]:
    """(role, name) -> kind of the rows that carry one (inputs and targets, schema 2)."""
    column = batch.column("kind")
    if column.null_count == len(column):
        return {}
    rows = pa.table({"role": batch.column("role"), "name": batch.column("name"), "kind": column}
                    ).filter(pc.is_valid(column)).combine_chunks()
    # The first and the last row of each code decide the dict that the rows, one by one, build
    # (where each (role, name) first appears, the kind of its last row): a few rows, not all.
    role, name = (_dictionary(rows.column(c).chunk(0)) for c in ("role", "name"))
    code = _codes(role).astype(np.int64) * (len(name.dictionary) + 1) + _codes(name)
    _, first = np.unique(code, return_index=True)
    _, from_end = np.unique(code[::-1], return_index=True)
    rows = rows.take(pa.array(np.union1d(first, len(code) - 1 - from_end)))
    return {(r, n): k for r, n, k in zip(*(rows.column(c).to_pylist() for c in ("role", "name", "kind")))}
