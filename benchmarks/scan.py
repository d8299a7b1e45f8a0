"""Scan of a sweep: `postmortem scan` over 200 small synthetic runs, serially and on Dask.

The runs are written with sample_runs/synthetic.py in the recorder's format (a third diverge
into NaN, a third diverge and stay finite, a third are healthy; `--steps` steps × `--tensors`
stat series each) plus one corrupt run directory. Each mode runs in a fresh subprocess: a serial
scan in-process (`workers=0`, no Dask) and a LocalCluster of each `--workers` count, cluster
start-up and shutdown included. Both must give the same run table. Wall time is reported with
the load average: other jobs share this machine's CPUs. Two more numbers say where the time
goes: the CPU one run costs, split into its analysis and its report, and the CPU an idle
LocalCluster of 2 workers burns in 30 s (scheduler, nannies, workers).

    python benchmarks/scan.py [--runs 200] [--steps 100] [--tensors 21] [--workers 2] [--dir DIR]
                              [--rounds 1] [--no-scans]

`--rounds N` runs the modes N times, alternating (serial, Dask, serial, Dask...), so that a
change in the machine's load between the modes shows instead of passing for a speed-up.
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
from postmortem.scan import find_runs
from postmortem_cli.scan import scan_runs

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


_PER_RUN = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from postmortem import analyze
from postmortem.scan import find_runs
from reports import build_page, render_html

runs = [path for name, path in find_runs([sys.argv[1]]) if "corrupt" not in name][:int(sys.argv[2])]
render_html(build_page(analyze(runs[0])))  # imports and first-figure set-up out of the way
analysis = report = 0.0
for path in runs:
    start = time.process_time()
    result = analyze(path)
    analysis += time.process_time() - start
    start = time.process_time()
    render_html(build_page(result))
    report += time.process_time() - start
print(json.dumps({{"runs": len(runs), "analysis_cpu_s": analysis / len(runs), "report_cpu_s": report / len(runs)}}))
"""

_IDLE = r"""
import json, logging, time
import psutil
from distributed import Client, LocalCluster

def main():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster):
        me = psutil.Process()
        def cpu():
            return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])
        time.sleep(3)
        before = cpu()
        time.sleep(30)
        print(json.dumps({{"idle_cpu_s_per_30s": cpu() - before, "processes": 1 + len(me.children(recursive=True))}}))

if __name__ == "__main__":
    main()
"""


def _child(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code.format(root=str(ROOT)), *args],
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


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
    load = os.getloadavg()[0]
    result = _child(_MEASURE, str(sweep), str(output), str(workers))
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
    parser.add_argument("--rounds", type=int, default=1, help="alternate the modes this many times")
    parser.add_argument("--no-scans", action="store_true",
                        help="only the per-run split and the idle cluster, not the scans")
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
        extras = {"load_before": os.getloadavg()[0], "per_run": _child(_PER_RUN, str(sweep), "10"),
                  "idle_cluster": _child(_IDLE), "load_after": os.getloadavg()[0]}
        print(json.dumps(extras), file=sys.stderr)
        results = []
        tables = []
        for workers in [] if args.no_scans else [0, *args.workers] * args.rounds:
            output = base / f"scan-{workers}"
            results.append(measure(sweep, output, workers))
            tables.append(pd.read_parquet(output / "runs.parquet"))
            print(json.dumps(results[-1]), file=sys.stderr)
        same = all(table.equals(tables[0]) for table in tables[1:])
    serial = results[0]["wall_s"] if results else None
    print(json.dumps({"runs": args.runs, "steps": args.steps, "tensors": args.tensors,
                      "same_table": same, "cpus": os.cpu_count(), **extras,
                      "results": [{**r, "speedup": serial / r["wall_s"]} for r in results]}, indent=2))
    if not same:
        raise SystemExit("the Dask scans gave another table than the serial scan")


if __name__ == "__main__":
    main()
