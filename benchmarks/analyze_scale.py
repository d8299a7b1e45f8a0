"""Analyzer scale: `postmortem analyze` on a synthetic run in the recorder's exact format.

Sizes: issue 3's 100 000 steps × 200 series (20 M stat rows) and issue 18's 7 B-parameter
model, ~300 tensors in ~1 500 series (``--tensors 1500``; 100 000 steps = 150 M rows).
Targets (issue 18): `postmortem analyze RUN -o report.html` end to end ≤ 120 s, ≤ 3 GB peak
RSS, ≤ 2× a bare pyarrow scan of the columns it needs.

The run is written here, as the recorder would have left it: one 50-step flush per segment
(``--flush-every``), built by the recorder's own `stats_table` (sorted by role, name, key,
step; norms at float32 precision), compacted 8 at a time into the next level (the recorder's
`RunWriter` numbering and layout: a merged segment holds its flushes one after the other, in
row groups of pyarrow's default 1 048 576 rows), written with the recorder's Parquet options.
A divergence is injected: the culprit's gradient (`layers.0.weight`) jumps ×50 at the onset
and every series follows one step later, growing ×3 a step, until non-finite values at the
last step. Each measurement runs in a fresh subprocess and reads its own peak RSS and CPU time
with resource.getrusage; the load average is printed beside them (other jobs share the CPUs).

    python benchmarks/analyze_scale.py [--steps 100000] [--tensors 1500] [--dir DIR] [--report]
        [--only scan --only rowgroups --only report] [--repeat 5]

Bare scans of the columns the analyzer reads (`READ_COLUMNS` and the scalars): `scan`,
pyarrow's dataset scanner (multi-threaded, with readahead); `rowgroups`, the analyzer's way
of reading until session 7 (row group by row group, each decoded on one thread, the next one
on a second thread meanwhile; `rowgroups_pool`: the same with each row group's columns spread
over pyarrow's pool); `rowgroups2`, the loader's way since then (two readers, each its own
ParquetFile, decoding the next two row groups, handed over in order).
With --repeat the modes alternate, round after round, and the medians of
each mode and of each round's ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recorders.writer import (EVENTS_SCHEMA, SCALARS_SCHEMA, STATS_SCHEMA, RunWriter,  # noqa: E402
                              _float32_precision, _parquet_options, events_table,
                              scalars_table, stats_table)
from postmortem.series import READ_COLUMNS  # noqa: E402
from sample_runs.synthetic import tensor_layout  # noqa: E402

ROW_GROUP = 1 << 20  # pyarrow's default row group size, which the recorder's writes keep
_LEVELS = {"param": 1.0, "grad": 0.0, "update": -2.0, "state": 0.0, "activation": 0.5, "input": 0.0}
_FLOATS = ("norm", "max_abs", "mean", "std", "min", "max", "zero_frac", "sat_frac", "ratio")

_MEASURE = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
mode, run_dir = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if mode in ("scan", "rowgroups", "rowgroups_pool", "rowgroups2"):
    # Decode every column the analyzer reads (READ_COLUMNS, given by the parent: importing
    # postmortem here would add its imports to the baseline) of every segment once, nothing else.
    from pathlib import Path
    read_columns = json.loads(sys.argv[3])
    rows = 0
    for kind, columns in (("stats", read_columns), ("scalars", None)):
        files = sorted(str(p) for p in Path(run_dir, kind).glob("part-*.parquet"))
        if mode == "scan":  # pyarrow's dataset scanner: its thread pool and readahead
            import pyarrow.dataset as ds
            for batch in ds.dataset(files, format="parquet").to_batches(columns=columns):
                rows += batch.num_rows
            continue
        import pyarrow.parquet as pq
        from concurrent.futures import ThreadPoolExecutor
        if mode == "rowgroups2":
            # What the analyzer's loader does since session 7 (18s): row group n decoded on
            # one thread by reader n % 2 (each its own ParquetFile), two ahead, across files,
            # handed over in order.
            from collections import deque
            tasks = [(path, index) for path in files
                     for index in range(pq.read_metadata(path).num_row_groups)]
            opened = [None, None]
            def decode(reader, path, index):
                if opened[reader] is None or opened[reader][0] != path:
                    opened[reader] = (path, pq.ParquetFile(path))
                return opened[reader][1].read_row_group(index, columns=columns, use_threads=False)
            with ThreadPoolExecutor(max_workers=2) as pool:
                pending = deque(pool.submit(decode, n % 2, *task) for n, task in enumerate(tasks[:2]))
                for n in range(2, len(tasks) + 2):
                    rows += pending.popleft().result().num_rows
                    if n < len(tasks):
                        pending.append(pool.submit(decode, n % 2, *tasks[n]))
            continue
        # What the analyzer's loader did until session 7: row group by row group, each decoded
        # on one thread (use_threads=False; rowgroups_pool: on pyarrow's pool), the next one on
        # a second thread while this one is handed over.
        with ThreadPoolExecutor(max_workers=1) as pool:
            for path in files:
                file = pq.ParquetFile(path)
                pending = None
                for index in range(file.metadata.num_row_groups):
                    following = pool.submit(file.read_row_group, index, columns=columns,
                                            use_threads=mode == "rowgroups_pool")
                    rows += pending.result().num_rows if pending is not None else 0
                    pending = following
                rows += pending.result().num_rows if pending is not None else 0
    result = {{"rows": rows}}
elif mode == "report":
    import subprocess, tempfile
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-m", "postmortem", "analyze", run_dir,
                               "-o", out + "/report.html"], capture_output=True, text=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({{"exit_code": done.returncode, "stderr": done.stderr[-500:],
                      "wall_s": time.perf_counter() - start,
                      "cpu_s": usage.ru_utime + usage.ru_stime,
                      "peak_rss_mb": usage.ru_maxrss / 1024, "page_faults": usage.ru_minflt}}))
    sys.exit(0)
else:
    import postmortem
    analysis = postmortem.analyze(run_dir)
    result = {{"verdict": analysis.verdict,
               "onset_step": analysis.onset.step if analysis.onset else None,
               "first_nonfinite_step": analysis.first_nonfinite.step if analysis.first_nonfinite else None,
               "culprit": analysis.ranking[0].tensor if analysis.ranking else None}}
usage = resource.getrusage(resource.RUSAGE_SELF)
result["wall_s"] = time.perf_counter() - start
result["cpu_s"] = usage.ru_utime + usage.ru_stime  # includes interpreter start and imports
result["peak_rss_mb"] = usage.ru_maxrss / 1024
result["page_faults"] = usage.ru_minflt  # minor faults: fresh pages the kernel had to clear
print(json.dumps(result))
"""


def measure(mode: str, run_dir: Path) -> dict:
    code = _MEASURE.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, mode, str(run_dir), json.dumps(READ_COLUMNS)],
                         check=True, capture_output=True, text=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load_average": os.getloadavg()}


def medians(rounds: list[dict]) -> dict:
    """Per mode, the median wall and CPU seconds and peak RSS over the rounds, and each
    measured mode's median of its per-round ratios to each scan (the two ran back to back)."""
    summary: dict = {}
    modes = list(rounds[0])
    for mode in modes:
        summary[mode] = {k: float(np.median([r[mode][k] for r in rounds]))
                         for k in ("wall_s", "cpu_s", "peak_rss_mb")}
    for mode in (m for m in modes if m in ("analyze", "report")):
        for scan in (m for m in modes if m in ("scan", "rowgroups", "rowgroups_pool", "rowgroups2")):
            for k in ("wall_s", "cpu_s"):
                ratios = [r[mode][k] / r[scan][k] for r in rounds]
                summary[mode][f"{k[:-2]}_ratio_to_{scan}"] = float(np.median(ratios))
                summary[mode][f"{k[:-2]}_ratios_to_{scan}"] = [round(x, 2) for x in ratios]
    return summary


def segment_plan(flushes: int) -> list[tuple[int, int, int]]:
    """(segment number, first flush, flushes) of the segments a run of `flushes` flushes
    leaves, numbered and merged as RunWriter does (FAN_IN segments of a level → one)."""
    live: list[tuple[int, int, int, int]] = []  # (number, level, first flush, flushes)
    number = 0
    for flush in range(flushes):
        live.append((number, 0, flush, 1))
        number += 1
        merged = True
        while merged:
            merged = False
            for level in range(max(lv for _, lv, _, _ in live) + 1):
                group = [s for s in live if s[1] == level]
                if len(group) >= RunWriter.FAN_IN:
                    live = [s for s in live if s[1] != level]
                    live.append((number, level + 1, group[0][2], sum(s[3] for s in group)))
                    number += 1
                    merged = True
                    break
    return sorted((n, first, count) for n, _, first, count in live)


class SyntheticRun:
    """Values of every series at any step, and each flush's rows in the recorder's order."""

    def __init__(self, steps: int, tensors: int, onset: int, nan_at: int, flush_every: int,
                 seed: int = 0):
        self.layout = tensor_layout(tensors)
        self.steps, self.onset, self.nan_at, self.flush_every = steps, onset, nan_at, flush_every
        self.last_step = min(steps - 1, nan_at)  # the run ends at its first NaN
        self.rng = np.random.default_rng(seed)
        # The recorder sorts a flush's rows by role, name, key, step.
        self.order = sorted(range(len(self.layout)),
                            key=lambda i: (self.layout[i][0], self.layout[i][1], self.layout[i][2] or ""))
        roles = [self.layout[i][0] for i in self.order]
        self.role = np.array(roles)
        self.level = np.array([_LEVELS[r] for r in roles])
        culprit = ("grad", "layers.0.weight", None)
        self.lag = np.array([0 if self.layout[i] == culprit else 1 for i in self.order])
        self.follows = np.array([0.0 if r == "input" else 1.0 if lag == 0 else 0.8
                                 for r, lag in zip(roles, self.lag)])
        self._templates: dict[int, pa.Table] = {}
        self._checked: set[int] = set()

    def _log_growth(self, steps: np.ndarray) -> np.ndarray:
        after = steps >= self.onset
        return np.where(after, np.log10(50.0) + np.log10(3.0) * (steps - self.onset), 0.0)

    def _numbers(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The numeric columns of one flush (steps start..stop-1), NaN for null."""
        n, s = stop - start, len(self.order)
        steps = np.arange(start, stop)
        noise = self.rng.normal(0.0, 0.05, (s, n))
        growth = self._log_growth(steps[None, :] - self.lag[:, None]) * self.follows[:, None]
        values = (10.0 ** (self.level[:, None] + noise + growth)).ravel()
        role = np.repeat(self.role, n)
        param, grad, update, state, act, inp = (role == r for r in _LEVELS)
        step = np.tile(steps, s)
        return {
            "step": step, "numel": np.full(s * n, 4096.0),
            "nonfinite": np.where((step == self.nan_at) & ~inp, 7.0, 0.0),
            "norm": np.where(param | grad | update | state, values, np.nan),
            "max_abs": np.where(param | grad | state | act, values / 8, np.nan),
            "mean": np.where(param | act | inp, self.rng.normal(0, 0.01, s * n), np.nan),
            "std": np.where(param | act | inp, values / 64, np.nan),
            "min": np.where(inp, -values, np.nan), "max": np.where(inp, values, np.nan),
            "zero_frac": np.where(act, 0.3, np.where(grad, 0.0, np.nan)),
            "sat_frac": np.full(s * n, np.nan),
            "ratio": np.where(update, values / 10.0, np.nan),
        }

    def _hashes(self, step: np.ndarray) -> np.ndarray:
        """The input batches' CRC-32 as 8 hex digits (the recorder's `hash`), None elsewhere."""
        hashes = np.full(len(step), None, object)
        rows = np.flatnonzero(np.repeat(self.role == "input", len(step) // len(self.order)))
        hashes[rows] = [f"{zlib.crc32(int(t).to_bytes(8, 'little')):08x}" for t in step[rows]]
        return hashes

    def _columns(self, numbers: dict[str, np.ndarray]) -> dict[str, np.ndarray | list]:
        """All columns as the recorder's stats_table takes them."""
        n = len(numbers["step"]) // len(self.order)
        role = np.repeat(self.role, n)
        inputs = role == "input"
        columns: dict[str, np.ndarray | list] = {
            **numbers, "role": list(role),
            "name": [self.layout[i][1] for i in self.order for _ in range(n)],
            "key": [self.layout[i][2] for i in self.order for _ in range(n)],
            "grad_none": [False if r == "grad" else None for r in role],
            "hash": list(self._hashes(numbers["step"])),
        }
        for name, value in (("shape", "64x64"), ("dtype", "float32"), ("kind", "float")):
            columns[name] = [value if i else None for i in inputs]
        return columns

    def flush_table(self, start: int, stop: int) -> pa.Table:
        """One flush's segment table. Flushes of a new size go through the recorder's
        stats_table (0.3 s for 75 000 rows); the others reuse its string columns (same series in
        the same order), and the second of each size is checked against stats_table."""
        numbers = self._numbers(start, stop)
        rows = len(numbers["step"])
        template = self._templates.get(rows)
        if template is None:
            self._templates[rows] = stats_table(self._columns(numbers))
            return self._templates[rows]
        arrays = []
        for field in STATS_SCHEMA:
            values = numbers.get(field.name)
            if field.name == "hash":
                arrays.append(pa.array(self._hashes(numbers["step"]), pa.string()))
            elif values is None:
                arrays.append(template.column(field.name))
            elif field.name == "norm":
                arrays.append(_float32_precision(values))
            elif pa.types.is_integer(field.type):
                arrays.append(pa.array(values.astype(np.int64)))
            else:
                arrays.append(pa.array(values, type=field.type, mask=np.isnan(values)))
        table = pa.Table.from_arrays(arrays, schema=STATS_SCHEMA)
        if rows not in self._checked:
            self._checked.add(rows)
            assert table.equals(stats_table(self._columns(numbers))), "flush table != stats_table"
        return table

    def scalars(self) -> pa.Table:
        steps = np.arange(self.last_step + 1)
        growth = self._log_growth(steps)
        noise = self.rng.normal(0.0, 0.05, (2, len(steps)))
        loss = (2.0 * np.exp(-steps / max(1, self.steps / 3)) + 0.1) * 10 ** (
            noise[0] + np.concatenate([[0.0], growth[:-1]]))
        loss[self.nan_at] = np.nan
        grad_norm = 10 ** (noise[1] + growth)
        rows = [(int(t), name, float(v)) for name, values in
                (("loss", loss), ("grad_norm", grad_norm), ("lr", np.full(len(steps), 0.05)))
                for t, v in zip(steps, values)]
        return scalars_table(rows)

    def manifest(self) -> dict:
        layout = self.layout
        return {
            "schema_version": 2, "run_id": "analyze-scale", "status": "crashed",
            "last_step": self.last_step,
            "models": {"model": {
                "class": "Synthetic",
                "modules": [{"name": n, "type": "Linear"} for r, n, _ in layout if r == "activation"],
                "parameters": [{"name": n, "shape": [64, 64], "dtype": "float32", "requires_grad": True}
                               for r, n, _ in layout if r == "param"]}},
            "optimizers": {}, "options": {"flush_every": self.flush_every}, "config": {},
        }


def write_run(run_dir: Path, run: SyntheticRun) -> None:
    """Every segment the recorder would have left, written one row group at a time."""
    for folder in ("stats", "scalars", "events", "checkpoints"):
        (run_dir / folder).mkdir(parents=True, exist_ok=True)
    flushes = -(-(run.last_step + 1) // run.flush_every)
    options = _parquet_options(STATS_SCHEMA)
    for number, first, count in segment_plan(flushes):
        path = run_dir / "stats" / f"part-{number:06d}.parquet"
        with pq.ParquetWriter(path, STATS_SCHEMA, **options) as writer:
            pending: list[pa.Table] = []
            for flush in range(first, first + count):
                start = flush * run.flush_every
                pending.append(run.flush_table(start, min(start + run.flush_every, run.last_step + 1)))
                if sum(t.num_rows for t in pending) >= ROW_GROUP:
                    pending = _write_row_groups(writer, pending, final=False)
            _write_row_groups(writer, pending, final=True)
    pq.write_table(run.scalars(), run_dir / "scalars" / "part-000000.parquet",
                   **_parquet_options(SCALARS_SCHEMA))
    pq.write_table(events_table([]), run_dir / "events" / "part-000000.parquet",
                   **_parquet_options(EVENTS_SCHEMA))
    (run_dir / "manifest.json").write_text(json.dumps(run.manifest(), indent=2))


def _write_row_groups(writer: pq.ParquetWriter, pending: list[pa.Table], *, final: bool) -> list[pa.Table]:
    """Write whole row groups of ROW_GROUP rows; the rest waits for more rows unless `final`."""
    table = pa.concat_tables(pending).unify_dictionaries().combine_chunks()
    whole = table.num_rows if final else table.num_rows - table.num_rows % ROW_GROUP
    for begin in range(0, whole, ROW_GROUP):
        writer.write_table(table.slice(begin, min(ROW_GROUP, whole - begin)))
    return [table.slice(whole)] if whole < table.num_rows else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--flush-every", type=int, default=50, help="the recorder's flush_every")
    parser.add_argument("--dir", type=Path, help="reuse or create the synthetic run here")
    parser.add_argument("--report", action="store_true",
                        help="also time `postmortem analyze RUN -o report.html` end to end")
    parser.add_argument("--only", choices=("scan", "rowgroups", "rowgroups_pool", "rowgroups2", "analyze",
                                           "report"),
                        action="append",
                        help="measure only these, in this order (repeatable; default: scan and analyze)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of the modes, one after the other in each round; medians printed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.dir or Path(tmp) / "run"
        if not (run_dir / "manifest.json").exists():
            # Diverge near the end so the run keeps all its steps.
            onset, nan_at = args.steps - 20, args.steps - 1
            run = SyntheticRun(args.steps, args.tensors, onset, nan_at, args.flush_every)
            start = time.perf_counter()
            write_run(run_dir, run)
            print(f"wrote {run_dir} in {time.perf_counter() - start:.1f} s "
                  f"(onset {onset}, NaN at {nan_at})", file=sys.stderr)
        disk_mb = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file()) / 2 ** 20
        modes = args.only or ["scan", "analyze", *(["report"] if args.report else [])]
        rounds = []
        for index in range(args.repeat):
            rounds.append({mode: measure(mode, run_dir) for mode in modes})
            print(json.dumps({"round": index + 1, **rounds[-1]}), file=sys.stderr, flush=True)
    report = {"steps": args.steps, "tensors": args.tensors, "disk_mb": disk_mb,
              "rounds": rounds, "medians": medians(rounds)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
