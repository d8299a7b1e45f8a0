"""Analyzer scale: analyze() on a synthetic 100 000-step × 200-tensor run (20 M stat rows).

Targets (issue 3): wall ≤ 30 s, peak RSS ≤ 2 GB, and ≤ 3× a bare pyarrow scan of the same
columns. Issue 18: a 7 B-parameter model's size, ~300 tensors in ~1 500 series
(``--tensors 1500``; 100 000 steps would be 150 M rows), with the report written end to end
(``postmortem analyze RUN -o report.html``, timed as a child process). Each measurement runs
in a fresh subprocess and reads its own peak RSS and CPU time with resource.getrusage, so the
numbers do not include the generator or each other. CPU time is reported beside wall time
because other jobs may share the machine (the load average is printed too).

    python benchmarks/analyze_scale.py [--steps 100000] [--tensors 200] [--dir DIR] [--report]
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
mode, run_dir = sys.argv[1], sys.argv[2]
start = time.perf_counter()
if mode == "scan":
    import pyarrow.dataset as ds
    from pathlib import Path
    from postmortem.series import _READ_COLUMNS
    files = sorted(str(p) for p in Path(run_dir, "stats").glob("part-*.parquet"))
    rows = ds.dataset(files, format="parquet").to_table(columns=_READ_COLUMNS).num_rows
    files = sorted(str(p) for p in Path(run_dir, "scalars").glob("part-*.parquet"))
    rows += ds.dataset(files, format="parquet").to_table().num_rows
    result = {{"rows": rows}}
elif mode == "report":
    import subprocess, tempfile
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([sys.executable, "-m", "postmortem", "analyze", run_dir,
                               "-o", out + "/report.html"], capture_output=True, text=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({{"exit_code": done.returncode, "wall_s": time.perf_counter() - start,
                      "cpu_s": usage.ru_utime + usage.ru_stime,
                      "peak_rss_mb": usage.ru_maxrss / 1024}}))
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
print(json.dumps(result))
"""


def measure(mode: str, run_dir: Path) -> dict:
    code = _MEASURE.format(root=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code, mode, str(run_dir)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--steps-per-segment", type=int, default=50,
                        help="steps per Parquet segment (the recorder's default flush_every)")
    parser.add_argument("--dir", type=Path, help="reuse or create the synthetic run here")
    parser.add_argument("--report", action="store_true",
                        help="also time `postmortem analyze RUN -o report.html` end to end")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.dir or Path(tmp) / "run"
        if not (run_dir / "manifest.json").exists():
            # Diverge near the end so the run keeps all its steps (20 M rows at full size).
            onset, nan_at = args.steps - 20, args.steps - 1
            spec = SyntheticSpec(steps=args.steps, tensors=args.tensors, onset=onset,
                                 nan_at=nan_at, steps_per_segment=args.steps_per_segment)
            start = time.perf_counter()
            write_synthetic_run(run_dir, spec)
            print(f"wrote {run_dir} in {time.perf_counter() - start:.1f} s "
                  f"(onset {onset}, NaN at {nan_at})", file=sys.stderr)
        disk_mb = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file()) / 2 ** 20
        scan = measure("scan", run_dir)
        analysis = measure("analyze", run_dir)
        end_to_end = measure("report", run_dir) if args.report else None
    report = {
        "steps": args.steps, "tensors": args.tensors, "disk_mb": disk_mb,
        "scan": scan, "analyze": analysis, "report": end_to_end,
        "ratio_to_scan": analysis["wall_s"] / scan["wall_s"],
        "cpu_ratio_to_scan": analysis["cpu_s"] / scan["cpu_s"],
        **({"report_ratio_to_scan": end_to_end["wall_s"] / scan["wall_s"],
            "report_cpu_ratio_to_scan": end_to_end["cpu_s"] / scan["cpu_s"]} if end_to_end else {}),
        "load_average": os.getloadavg(),  # other jobs share the CPUs: read wall times with it
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
