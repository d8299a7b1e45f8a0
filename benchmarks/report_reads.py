"""How often `postmortem analyze RUN -o report.html` reads the run, and how long it takes.

Counts the scans of each table (stats, scalars, events: every read goes through Run._batches)
made by analyze() and then by the report (build_page + render_html), and times both, median of
--repeats runs in this process (CPU time beside wall time: the machine may be shared).

    python benchmarks/report_reads.py [RUN_DIR] [--repeats 3]
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from postmortem import analyze, load_run  # noqa: E402
from postmortem.loading import Run  # noqa: E402
from reports import build_page, render_html  # noqa: E402


_BATCHES = Run._batches


def _counting(counts: collections.Counter):
    def batches(self, kind, columns, filt):
        counts[kind] += 1
        return _BATCHES(self, kind, columns, filt)
    return batches


def _timed(call):
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", type=Path, default=ROOT / "sample_runs" / "cnn_domain_shift")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    analysis_reads, report_reads = collections.Counter(), collections.Counter()
    times = collections.defaultdict(list)
    for repeat in range(args.repeats):
        counts = analysis_reads if repeat == 0 else collections.Counter()
        Run._batches = _counting(counts)
        analysis, wall, cpu = _timed(lambda: analyze(load_run(args.run)))
        times["analyze_wall_s"].append(wall)
        times["analyze_cpu_s"].append(cpu)
        Run._batches = _counting(report_reads if repeat == 0 else collections.Counter())
        _, wall, cpu = _timed(lambda: render_html(build_page(analysis)))
        times["report_wall_s"].append(wall)
        times["report_cpu_s"].append(cpu)
    print(json.dumps({"run": str(args.run), "repeats": args.repeats,
                      "reads_by_analyze": dict(analysis_reads), "reads_by_report": dict(report_reads),
                      **{k: round(statistics.median(v), 3) for k, v in times.items()}}, indent=1))


if __name__ == "__main__":
    main()
