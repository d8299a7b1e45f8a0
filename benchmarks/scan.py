"""Scan of a sweep: `postmortem scan` over 200 small synthetic runs, serially and on Dask.

The runs are written with sample_runs/synthetic.py in the recorder's format (a third diverge
into NaN, a third diverge and stay finite, a third are healthy; `--steps` steps × `--tensors`
stat series each) plus one corrupt run directory. Each mode runs in a fresh subprocess: a serial
scan in-process (`workers=0`, no Dask) and a LocalCluster of each `--workers` count, cluster
start-up and shutdown included. Both must give the same run table. Wall time is reported with
the load average: other jobs share this machine's CPUs.

    python benchmarks/scan.py [--runs 200] [--steps 100] [--tensors 21] [--workers 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_MEASURE = r"""
import json, resource, sys, time
sys.path.insert(0, {root!r})
from postmortem.scan import find_runs, scan_runs

def main():
    sweep, output, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    start = time.perf_counter()
    finished = []
    runs = find_runs([sweep])
    result = scan_runs(runs, output, workers=workers,
                       on_done=lambda row: finished.append(time.perf_counter() - start))
    wall = time.perf_counter() - start
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({{
        "runs": len(result.runs), "wall_s": wall, "first_result_s": min(finished),
        "last_result_s": max(finished),
        "cpu_s": own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
        "verdicts": result.runs["verdict"].value_counts().to_dict()}}))

if __name__ == "__main__":
    main()
"""


def write_sweep(root: Path, runs: int, steps: int, tensors: int) -> None:
    from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

    divergence = [{"onset": steps // 2, "nan_at": steps * 3 // 4}, {"onset": steps // 2}, {}]
    for number in range(runs - 1):
        spec = SyntheticSpec(steps=steps, tensors=tensors, seed=number, **divergence[number % 3])
        write_synthetic_run(root / f"group-{number % 10}" / f"run-{number:04d}", spec)
    corrupt = root / "group-0" / "run-corrupt"
    (corrupt / "stats").mkdir(parents=True)
    (corrupt / "manifest.json").write_text("{")
    (corrupt / "stats" / "part-000000.parquet").write_bytes(b"not parquet")


def measure(sweep: Path, output: Path, workers: int) -> dict:
    code = _MEASURE.format(root=str(ROOT))
    load = os.getloadavg()[0]
    done = subprocess.run([sys.executable, "-c", code, str(sweep), str(output), str(workers)],
                          check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(workers=workers, load_before=load, load_after=os.getloadavg()[0])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--tensors", type=int, default=21)
    parser.add_argument("--workers", type=int, nargs="+", default=[2],
                        help="LocalCluster sizes to measure beside the serial scan")
    parser.add_argument("--dir", type=Path, help="write (or reuse) the sweep and the outputs here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        base = args.dir or Path(tmp)
        sweep = base / "sweep"
        if not sweep.exists():
            start = time.perf_counter()
            write_sweep(sweep, args.runs, args.steps, args.tensors)
            print(f"wrote {args.runs} runs into {sweep} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        results = []
        tables = []
        for workers in [0, *args.workers]:
            output = base / f"scan-{workers}"
            results.append(measure(sweep, output, workers))
            tables.append(pd.read_parquet(output / "runs.parquet"))
            print(json.dumps(results[-1]), file=sys.stderr)
        same = all(table.equals(tables[0]) for table in tables[1:])
    serial = results[0]["wall_s"]
    print(json.dumps({"runs": args.runs, "steps": args.steps, "tensors": args.tensors,
                      "same_table": same, "cpus": os.cpu_count(),
                      "results": [{**r, "speedup": serial / r["wall_s"]} for r in results]}, indent=2))
    if not same:
        raise SystemExit("the Dask scans gave another table than the serial scan")


if __name__ == "__main__":
    main()
