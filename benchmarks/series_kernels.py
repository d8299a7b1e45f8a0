"""The analyzer's per-batch work with and without its compiled kernels (postmortem/_kernels.cpp).

`_Builder.add` (the streaming read's work on the main thread: series ids, magnitudes, the coarse
pass's rows, aux columns) over the first row groups of a run's first stats segment, decoded
once into memory, thinned as the run's coarse pass thins them (its stride and tail). Rounds
alternate kernels / numpy (the fallback where the extension is not built), in one process;
thread CPU time per round, medians printed.

    python benchmarks/analyze_scale.py --steps 100000 --tensors 1500 --dir RUN --only scan
    python benchmarks/series_kernels.py RUN [--row-groups 12] [--rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from postmortem import series  # noqa: E402
from postmortem.loading import load_run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--row-groups", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if series._kernels is None:
        sys.exit("postmortem._kernels is not built")
    file = pq.ParquetFile(sorted((args.run / "stats").glob("part-*.parquet"))[0])
    batches = [file.read_row_group(i, columns=series.READ_COLUMNS).combine_chunks().to_batches()[0]
               for i in range(min(args.row_groups, file.num_row_groups))]
    run = load_run(args.run)  # the stride and tail its coarse pass takes, as series._read_series
    stride = max(1, -(-run.stats_rows() // series.COARSE_ROWS))
    tail = run.stats_last_step() - series.FINE_STEPS
    sides = {"kernels": series._kernels, "numpy": None}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(args.rounds):
        for name in (list(sides) if index % 2 == 0 else list(sides)[::-1]):
            series._kernels = sides[name]
            builder = series._Builder(stride, tail)
            start = time.thread_time()
            for batch in batches:
                builder.add(batch)
            times[name].append(time.thread_time() - start)
    series._kernels = sides["kernels"]
    print(json.dumps({"stride": stride, "tail": tail, "rows": sum(b.num_rows for b in batches), "row_groups": len(batches),
                      "load_average": os.getloadavg(),
                      **{f"{name}_s": [round(t, 3) for t in values] for name, values in times.items()},
                      **{f"{name}_median_s": round(float(np.median(values)), 3) for name, values in times.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
