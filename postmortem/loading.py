"""Read a run directory (docs/run-format.md) into tidy frames, tolerating crash damage.

Only Parquet and JSON are read; nothing is unpickled. Segments are scanned one by one in
segment-number order so a damaged file is skipped with a warning naming it, and column
projection and row filters are pushed down to pyarrow so memory grows with what is read.
"""

from __future__ import annotations

import json
import re
import stat
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recorders.vocabulary import (EVENTS_SCHEMA, SCALARS_SCHEMA, SEGMENT_NAME, STATS_SCHEMA,
                                  SUPPORTED_SCHEMA_VERSIONS)

from .exceptions import RunDirectoryError, SchemaVersionError
from .findings import CheckpointInfo

__all__ = ["Run", "load_run", "stats_frame", "SUPPORTED_SCHEMA_VERSIONS", "STATS_SCHEMA", "MAX_STEP"]

# Steps beyond 2**53 are not exact in float64, where the growth models fit them.
MAX_STEP = 2**53
# Bounds on what one file may make us do. The recorder's manifest is a few KB; its segments
# hold under 1 row per byte on disk (0.34 at most in sample_runs/), so 10 rows or 200 decoded
# bytes per stored byte leave a wide margin and refuse only decompression bombs.
MAX_MANIFEST_BYTES = 8 * 2**20
_MAX_ROWS_PER_BYTE = 10
_MAX_DECODED_PER_BYTE = 200
_ROWS_ALWAYS_ALLOWED = 65_536
_DECODED_ALWAYS_ALLOWED = 64 * 2**20
_READERS = 2  # row groups decoded at once, each by its own reader, while the caller works

_STEP_TEXT = re.compile(rb"[0-9]{1,19}")  # a checkpoint's step metadata: an int64 in ASCII digits
# Segments are read through the run format's schemas (those of version 2; version 1 lacks dtype
# and kind), so that a column missing from one segment (or typed null because it was empty)
# reads as nulls.
_SCHEMAS = {"stats": STATS_SCHEMA, "scalars": SCALARS_SCHEMA, "events": EVENTS_SCHEMA}
# Without these a segment's rows cannot be placed in a series.
_REQUIRED_COLUMNS = {"stats": ("step", "role", "name"), "scalars": ("step", "name", "value"),
                     "events": ("step",)}


@dataclass
class Run:
    """A run directory opened for reading. Frames are read on demand, never cached whole."""

    path: Path
    manifest: dict
    warnings: list[str]
    segments: dict[str, list[Path]] = field(repr=False)

    def scalars(self, names: Sequence[str] | None = None) -> pd.DataFrame:
        """Per-step scalars as a frame [step, name, value], one row per (step, name)."""
        filt = None if names is None else {"name": list(names)}
        table = self._read("scalars", ["step", "name", "value"], filt)
        return _to_frame(table, ["step", "name"])

    def events(self) -> pd.DataFrame:
        """User markers as a frame [step, kind, message, wall_time], in step order."""
        table = self._read("events", ["step", "kind", "message", "wall_time"], None)
        frame = table.to_pandas()
        return frame.sort_values("step", kind="stable").reset_index(drop=True)

    def stats(
        self,
        roles: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        columns: Sequence[str] | None = None,
        steps: tuple[int, int] | None = None,
    ) -> pd.DataFrame:
        """Tensor statistics, tidy: one row per (step, role, name, key), last occurrence kept;
        with `steps` (first, last), only the rows of those steps (row groups outside the range
        are not read)."""
        wanted = list(STATS_SCHEMA.names) if columns is None else list(columns)
        unknown = sorted(set(wanted) - set(STATS_SCHEMA.names))
        if unknown:
            raise ValueError(f"unknown stats columns: {', '.join(unknown)}")
        read = list(dict.fromkeys(["step", "role", "name", "key", *wanted]))
        table = self._read("stats", read, _stats_filter(roles, names), steps)
        if steps is not None:
            step = table.column("step")
            table = table.filter(pc.and_(pc.greater_equal(step, steps[0]), pc.less_equal(step, steps[1])))
        return stats_frame(table)

    def stats_batches(
        self,
        columns: Sequence[str],
        roles: Sequence[str] | None = None,
        names: Sequence[str] | None = None,
        steps: tuple[int, int] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream stats record batches in segment order, one row group at a time (for analyses
        of very long runs). With `steps` (first, last), only the row groups whose step
        statistics overlap that range are read; their other rows are the caller's to drop."""
        return self._batches("stats", list(columns), _stats_filter(roles, names), steps)

    def stats_rows(self) -> int:
        """Stat rows in the readable segments, from their footers (nothing decoded)."""
        return sum(pq.read_metadata(path).num_rows for path in self.segments["stats"])

    def stats_last_step(self) -> int | None:
        """The largest step the stats segments' row-group statistics give (the recorder writes
        them), or None when a row group has none."""
        last = None
        for path in self.segments["stats"]:
            meta = pq.read_metadata(path)
            for index in range(meta.num_row_groups):
                bounds = _step_bounds(meta.row_group(index))
                if bounds is None:
                    return None
                last = bounds[1] if last is None else max(last, bounds[1])
        return last

    @property
    def checkpoints(self) -> list[CheckpointInfo]:
        """Checkpoint files with the step and reason from their Parquet key-value metadata."""
        folder = self.path / "checkpoints"
        root = self.path.resolve()
        found = []
        for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
            refused: list[str] = []
            if path.name.startswith(".") or _inside_file(root, path, "checkpoint", refused) is None:
                for message in refused:  # the property is read more than once: warn once
                    self._warn(message)
                continue
            try:
                meta = pq.read_metadata(path).metadata or {}
            except (OSError, pa.ArrowException) as exc:
                self._warn(f"skipped unreadable checkpoint {path}: {exc}")
                continue
            step, reason = meta.get(b"step"), meta.get(b"reason")
            try:
                reason = reason.decode() if reason is not None else None
            except UnicodeDecodeError:
                self._warn(f"skipped checkpoint {path}: its reason is not UTF-8 text")
                continue
            if step is not None and not _STEP_TEXT.fullmatch(step):  # int() has a digit limit
                self._warn(f"skipped checkpoint {path}: its step is not a step number")
                continue
            found.append(CheckpointInfo(path=str(path), step=None if step is None else int(step),
                                        reason=reason))
        return sorted(found, key=lambda c: (c.step is None, c.step or 0, c.path))

    def _read(self, kind: str, columns: list[str], filt, steps: tuple[int, int] | None = None) -> pa.Table:
        batches = list(self._batches(kind, columns, filt, steps))
        schema = pa.schema([_SCHEMAS[kind].field(c) for c in columns])
        return pa.Table.from_batches(batches, schema=schema)

    def _batches(self, kind: str, columns: list[str], filt, steps: tuple[int, int] | None = None
                 ) -> Iterator[pa.RecordBatch]:
        schema = _SCHEMAS[kind]
        read = columns if filt is None else list(dict.fromkeys([*columns, *filt]))
        failed = None  # the segment that failed last: its remaining row groups are skipped
        # Row group by row group: a compacted segment of a long run holds tens of millions
        # of rows, and reading it whole would hold all of them at once.
        for path, table in _row_groups(list(self.segments[kind]), schema, read, steps):
            if path == failed:
                continue
            try:
                if isinstance(table, Exception):
                    raise table
                if filt is not None:
                    table = table.filter(_allowed_rows(table, filt)).select(columns)
            except (OSError, pa.ArrowException) as exc:
                failed = path
                self.segments[kind].remove(path)
                self._warn(f"skipped unreadable segment {path}: {exc}")
                continue
            for batch in table.to_batches():
                yield self._valid_steps(batch, path) if "step" in columns else batch

    def _valid_steps(self, batch: pa.RecordBatch, path: Path) -> pa.RecordBatch:
        """Rows whose step is present and in 0..MAX_STEP; the others are dropped with a warning."""
        steps = batch.column("step")
        if not len(steps):
            return batch
        if steps.null_count == 0:
            bounds = pc.min_max(steps)
            if bounds["min"].as_py() >= 0 and bounds["max"].as_py() <= MAX_STEP:
                return batch
        keep = pc.fill_null(pc.and_(pc.greater_equal(steps, 0), pc.less_equal(steps, MAX_STEP)), False)
        self._warn(f"skipped rows of {path} whose step is missing, negative or beyond {MAX_STEP}")
        return batch.filter(keep)

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


def load_run(run_dir: str | Path) -> Run:
    """Open a run directory, finished or crashed.

    Raises RunDirectoryError when the path is not a directory or holds no readable segment,
    SchemaVersionError when the manifest or a segment declares an unknown schema version.
    Files that resolve outside the run directory (symlinks) or are not regular files (FIFOs,
    devices) are never opened: they are skipped with a warning.
    """
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirectoryError(f"{path} is not a directory")
    root = path.resolve()
    warnings: list[str] = []
    manifest = _read_manifest(root, path, warnings)
    segments = {kind: _valid_segments(root, path / kind, kind, warnings) for kind in _SCHEMAS}
    if not segments["stats"] and not segments["scalars"]:
        raise RunDirectoryError(f"{path} holds no readable stats or scalars segments")
    if not segments["stats"]:
        warnings.append(f"no readable tensor statistics in {path / 'stats'}: only the scalars were "
                        "analysed; gradients, parameters, activations and inputs could not be checked")
    return Run(path=path, manifest=manifest, warnings=warnings, segments=segments)


def _inside_file(root: Path, path: Path, what: str, warnings: list[str]) -> Path | None:
    """`path` if it resolves to a regular file inside `root`, else None with a warning.

    Every reader goes through here: a symlink out of the run directory could leak another
    file into the report, and opening a FIFO or device would hang or never end.
    """
    try:
        resolved = path.resolve(strict=True)
        mode = resolved.stat().st_mode
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        warnings.append(f"skipped {what} {path}: {getattr(exc, 'strerror', None) or exc}")
        return None
    if not resolved.is_relative_to(root):
        warnings.append(f"skipped {what} {path}: it links outside the run directory")
        return None
    if not stat.S_ISREG(mode):
        warnings.append(f"skipped {what} {path}: not a regular file")
        return None
    return path


def _read_manifest(root: Path, path: Path, warnings: list[str]) -> dict:
    file = path / "manifest.json"
    if not file.exists() and not file.is_symlink():
        warnings.append(f"no manifest.json in {path}; using what the segments say")
        return {}
    if _inside_file(root, file, "manifest", warnings) is None:
        return {}
    try:
        with open(file, "rb") as stream:
            data = stream.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            warnings.append(f"manifest {file} is larger than {MAX_MANIFEST_BYTES // 2**20} MB; ignored, "
                            "using what the segments say")
            return {}
        manifest = json.loads(data)
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: nesting too deep
        warnings.append(f"unreadable manifest {file}: {exc}; using what the segments say")
        return {}
    if not isinstance(manifest, dict):
        warnings.append(f"manifest {file} is not a JSON object; ignored")
        return {}
    _check_version(manifest.get("schema_version"), str(file))
    return manifest


def _check_version(version, where: str) -> None:
    """Only an integer listed in SUPPORTED_SCHEMA_VERSIONS passes (not 1.5, true or "1")."""
    if version is None:
        return
    if type(version) is not int or version not in SUPPORTED_SCHEMA_VERSIONS:
        supported = ", ".join(str(v) for v in sorted(SUPPORTED_SCHEMA_VERSIONS))
        raise SchemaVersionError(
            f"{where} has schema_version {version!r}; this postmortem reads version {supported}"
        )


def _segment_version(meta: pq.FileMetaData) -> int | str | None:
    """The schema_version a segment's key-value metadata declares (text unless all digits)."""
    raw = (meta.metadata or {}).get(b"schema_version")
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    return int(text) if re.fullmatch(r"[0-9]{1,9}", text) else text


def _valid_segments(root: Path, folder: Path, kind: str, warnings: list[str]) -> list[Path]:
    """Complete `part-N.parquet` files in number order; damaged ones are reported and skipped."""
    if not folder.is_dir():
        return []
    numbered = []
    for path in folder.iterdir():
        match = SEGMENT_NAME.match(path.name)
        if match and _inside_file(root, path, "segment", warnings) is not None:
            numbered.append((int(match.group(1)), path))
    valid = []
    for _, path in sorted(numbered):
        try:
            size = path.stat().st_size
            if size == 0:
                raise ValueError("zero-byte file")
            meta = pq.read_metadata(path)
            problem = _segment_problem(meta, size, kind)
        except (OSError, ValueError, pa.ArrowException) as exc:
            warnings.append(f"skipped unreadable segment {path}: {exc}")
            continue
        if problem:
            warnings.append(f"skipped segment {path}: {problem}")
            continue
        _check_version(_segment_version(meta), str(path))
        valid.append(path)
    return valid


def _segment_problem(meta: pq.FileMetaData, size: int, kind: str) -> str | None:
    """Why a segment must not be read: columns it cannot do without, or far too much to decode."""
    stored = set(meta.schema.to_arrow_schema().names)
    missing = [c for c in _REQUIRED_COLUMNS[kind] if c not in stored]
    if missing:
        return f"no {', '.join(missing)} column"
    if meta.num_rows > max(_ROWS_ALWAYS_ALLOWED, _MAX_ROWS_PER_BYTE * size):
        return (f"{meta.num_rows} rows in {size} bytes is more than {_MAX_ROWS_PER_BYTE} rows per "
                "byte (a decompression bomb, not a recorder segment)")
    decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if decoded > max(_DECODED_ALWAYS_ALLOWED, _MAX_DECODED_PER_BYTE * size):
        return (f"{decoded} bytes once decoded from {size} on disk is more than "
                f"{_MAX_DECODED_PER_BYTE}× (a decompression bomb, not a recorder segment)")
    return None


def _row_groups(paths: list[Path], schema: pa.Schema, columns: list[str], steps: tuple[int, int] | None
                ) -> Iterator[tuple[Path, pa.Table | OSError | pa.ArrowException]]:
    """The segments' row groups in order, each projected onto `columns` of `schema` (missing
    columns read as nulls) and tagged with its segment, or that segment's read error; with
    `steps`, only those whose `step` statistics may hold a step in that range.

    Without a row filter this is about twice as fast as a one-file pyarrow dataset scan. While
    the caller works on one row group, the next _READERS are decoded on as many threads
    (pyarrow releases the GIL; a compacted segment's row groups hold a million rows each),
    across segment boundaries too. Each row group is decoded on one thread
    (`use_threads=False`: spreading its columns over pyarrow's pool too took the same CPU
    time, `rowgroups_pool` in benchmarks/analyze_scale.py). A ParquetFile must not be read
    from two threads at once (two row groups of one file decoding at once segfaulted), so each
    reader opens the file itself: task n goes to reader n % _READERS, and task n + _READERS
    is handed out only once task n is done, so no reader ever has two tasks at once.
    """
    opened: list[tuple[Path, pq.ParquetFile, set[str]] | None] = [None] * _READERS

    def decode(reader: int, path: Path, index: int | OSError | pa.ArrowException):
        if not isinstance(index, int):
            return path, index
        try:
            held = opened[reader]
            if held is None or held[0] != path:
                file = pq.ParquetFile(path)
                held = opened[reader] = (path, file, set(file.schema_arrow.names))
            _, file, stored = held
            present = [c for c in columns if c in stored]
            table = file.read_row_group(index, columns=present, use_threads=False)
            return path, _projected(table, schema, columns, stored)
        except (OSError, pa.ArrowException) as exc:
            return path, exc

    tasks = enumerate(_wanted_row_groups(paths, steps))
    with ThreadPoolExecutor(max_workers=_READERS) as pool:
        pending = deque(pool.submit(decode, n % _READERS, *task) for n, task in islice(tasks, _READERS))
        while pending:
            done = pending.popleft().result()
            for n, task in islice(tasks, 1):  # the reader of the task just done is free
                pending.append(pool.submit(decode, n % _READERS, *task))
            yield done


def _wanted_row_groups(paths: list[Path], steps: tuple[int, int] | None
                       ) -> Iterator[tuple[Path, int | OSError | pa.ArrowException]]:
    """(segment, row group index) of each row group to read, in order; (segment, its error)
    for a segment whose footer cannot be read."""
    for path in paths:
        try:
            meta = pq.read_metadata(path)
        except (OSError, pa.ArrowException) as exc:
            yield path, exc
            continue
        for index in range(meta.num_row_groups):
            if steps is None or _may_hold(meta.row_group(index), steps):
                yield path, index


def _may_hold(group: pq.RowGroupMetaData, steps: tuple[int, int]) -> bool:
    """Whether a row group's step statistics leave room for a step in `steps` (no statistics:
    it may)."""
    bounds = _step_bounds(group)
    return bounds is None or (bounds[1] >= steps[0] and bounds[0] <= steps[1])


def _step_bounds(group: pq.RowGroupMetaData) -> tuple[int, int] | None:
    """(smallest, largest) step of a row group from its statistics, if it has them."""
    for index in range(group.num_columns):
        column = group.column(index)
        if column.path_in_schema == "step":
            statistics = column.statistics
            if statistics is None or not statistics.has_min_max:
                return None
            return int(statistics.min), int(statistics.max)
    return None


def _projected(table: pa.Table, schema: pa.Schema, columns: list[str], stored: set[str]) -> pa.Table:
    arrays = []
    for name in columns:
        field = schema.field(name)
        if name not in stored:
            arrays.append(pa.chunked_array([pa.nulls(table.num_rows, field.type)]))
            continue
        column = table.column(name)
        arrays.append(column if column.type == field.type else column.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema([schema.field(c) for c in columns]))


def _stats_filter(roles: Iterable[str] | None, names: Iterable[str] | None
                  ) -> dict[str, list[str]] | None:
    """The rows wanted, as {column: the values allowed}, or None for all of them."""
    allowed = {column: list(values) for column, values in (("role", roles), ("name", names))
               if values is not None}
    return allowed or None


def _allowed_rows(table: pa.Table, allowed: dict[str, list[str]]) -> pa.ChunkedArray:
    """Rows whose every column in `allowed` holds one of its values (a null: none). The test
    runs on each chunk's dictionary, then its indices are looked up: several times faster than
    a dataset filter, which compares every row's string."""
    keep = None
    for column, values in allowed.items():
        value_set = pa.array(values, pa.string())
        chunks = []
        for chunk in table.column(column).chunks:
            if pa.types.is_dictionary(chunk.type):
                # A lookup table indexed by code (the last slot for null), in numpy: several
                # times faster than pyarrow's take on a million rows.
                lookup = np.append(pc.fill_null(pc.is_in(chunk.dictionary, value_set=value_set), False)
                                   .to_numpy(zero_copy_only=False), False)
                codes = pc.fill_null(chunk.indices, len(lookup) - 1).to_numpy(zero_copy_only=False)
                chunks.append(pa.array(lookup[codes]))
            else:
                chunks.append(pc.fill_null(pc.is_in(chunk, value_set=value_set), False))
        mask = pa.chunked_array(chunks, pa.bool_())
        keep = mask if keep is None else pc.and_(keep, mask)
    return keep


def stats_frame(table: pa.Table) -> pd.DataFrame:
    """Stats rows read through STATS_SCHEMA (step, role, name, key first) as `Run.stats`
    returns them: tidy, the last occurrence of a (step, role, name, key) row kept."""
    return _to_frame(table, ["step", "role", "name", "key"])


def _to_frame(table: pa.Table, keys: list[str]) -> pd.DataFrame:
    """Table → frame with duplicated keys removed, keeping the last (newest segment) row."""
    # Cast dictionaries to plain strings first: segments carry different dictionaries.
    table = table.cast(
        pa.schema(
            [
                pa.field(f.name, pa.string()) if pa.types.is_dictionary(f.type) else f
                for f in table.schema
            ]
        )
    )
    frame = table.to_pandas()
    if len(frame):
        frame = frame.drop_duplicates(subset=keys, keep="last")
        frame = frame.sort_values(keys, kind="stable", na_position="first")
    return frame.reset_index(drop=True)

