"""Would evaluation metrics logged only a few times be fit to judge a run: what they would flip.

    python benchmarks/sparse_metrics.py --runs DIR [DIR ...] [--min-points 5]

An outcome metric (`scalars.metric_direction`) judges a run whose loss does not learn only with
at least `OutcomeThresholds.min_steps` (10) finite points. Many loops evaluate 3–9 times a run.
For every run under --runs (a run name counted once over all DIRs) with such a metric of at least
--min-points points, this reads whether the metric improves by `_improves` read at its own point
count, and whether the loss alone says the run does not learn (the analyzer's `Outcome` at the
defaults). Letting the few-point metric judge would flip exactly the runs where both hold:
printed one per line with their truth (expected.json), then counted by truth. A flip of a
`not_learning` truth is a new miss; of a `healthy` truth, a false alarm fixed.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
from pathlib import Path

import numpy as np

from postmortem import analyze, load_run
from postmortem.detectors.base import _improves, metric_curves
from postmortem.detectors.thresholds import OutcomeThresholds
from postmortem.scalars import is_loss


def sparse_improving(metrics: dict[str, tuple[np.ndarray, bool]], min_points: int, th: OutcomeThresholds) -> list[str]:
    """The outcome metrics (not losses) of min_points..min_steps-1 finite points that improve."""
    improving = []
    for name, (values, higher) in sorted(metrics.items()):
        finite = values[np.isfinite(values)]
        if is_loss(name) or not min_points <= len(finite) < th.min_steps:
            continue
        if _improves(finite if higher else -finite, dataclasses.replace(th, min_steps=len(finite))):
            improving.append(name)
    return improving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    parser.add_argument("--min-points", type=int, default=5)
    args = parser.parse_args()
    th = OutcomeThresholds()
    counts: collections.Counter = collections.Counter()
    seen: set[str] = set()
    for pool in args.runs:
        for run_dir in sorted(p for p in pool.iterdir() if (p / "expected.json").exists() and p.name not in seen):
            seen.add(run_dir.name)
            scalars = load_run(run_dir).scalars()
            metrics = metric_curves(scalars)
            sparse = [n for n, (v, _) in metrics.items() if not is_loss(n)
                      and args.min_points <= np.isfinite(v).sum() < th.min_steps]
            if not sparse:
                continue
            truth = json.loads((run_dir / "expected.json").read_text())["verdict"]
            by_loss = analyze(run_dir).outcome.learns
            improving = sparse_improving(metrics, args.min_points, th)
            flips = by_loss is False and bool(improving)
            counts[truth, "flips" if flips else "unchanged"] += 1
            if flips:
                print(run_dir.name, truth, ",".join(improving), flush=True)
    print(f"# {sum(counts.values())} runs with a metric of {args.min_points}-{th.min_steps - 1} points")
    for (truth, what), n in sorted(counts.items()):
        print(f"# {truth}: {what} {n}")


if __name__ == "__main__":
    main()
