"""Long-run benchmark: does the recorder stay flat in memory and bounded in files over 100 000 steps?

A tiny model (Linear(4, 4), SGD) is trained in this process with a small flush interval, the
worst case for file count. Every `--sample-every` steps the resident set size (from
/proc/self/statm) and the number of files in the run directory are sampled.

    .venv/bin/python benchmarks/long_run.py                  # 100 000 steps, flush_every=10
    .venv/bin/python benchmarks/long_run.py --steps 5000     # a quick look

Printed: a Markdown table of the samples and the verdict lines used in docs/benchmarks.md
(section "Crash campaign", subsection "Long run").
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from recorders import Recorder  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Sample:
    step: int
    rss_mib: float
    files: int
    seconds: float


def rss_mib() -> float:
    """Current resident set size (not the peak) of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def count_files(run_dir: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(run_dir))


def long_run(run_dir: Path, *, steps: int, flush_every: int, sample_every: int) -> list[Sample]:
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    samples = []
    start = time.perf_counter()
    with Recorder(run_dir, model, optimizer, flush_every=flush_every,
                  checkpoint_every=10_000) as rec:
        for step in range(steps):
            optimizer.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            rec.step(loss=loss, inputs=x, targets=y)
            if (step + 1) % sample_every == 0:
                samples.append(Sample(step + 1, rss_mib(), count_files(run_dir),
                                      time.perf_counter() - start))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--flush-every", type=int, default=10)
    parser.add_argument("--sample-every", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="long_run_") as tmp:
        samples = long_run(Path(tmp) / "run", steps=args.steps, flush_every=args.flush_every,
                           sample_every=min(args.sample_every, args.steps))
    print("| steps | RSS (MiB) | files in run dir | elapsed (s) |")
    print("| ---: | ---: | ---: | ---: |")
    for s in samples:
        print(f"| {s.step} | {s.rss_mib:.1f} | {s.files} | {s.seconds:.0f} |")
    first, last = samples[0], samples[-1]
    print(f"\nRSS {first.rss_mib:.1f} MiB after {first.step} steps -> {last.rss_mib:.1f} MiB after "
          f"{last.step} steps ({last.rss_mib - first.rss_mib:+.1f} MiB); peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB")
    print(f"files: {first.files} -> {last.files} with flush_every={args.flush_every} "
          f"({last.files / last.step * 1000:.1f} per 1000 steps)")


if __name__ == "__main__":
    main()
