"""How far the first updates move the weights, per run: what `lr_too_high` reads on a finite run.

    python benchmarks/early_update_ratio.py --runs /tmp/s10-runs [MORE_DIRS ...] [--within 1 5 10 20]

For every run under --runs, over its weights of more than one element (an init has a scale):
the median of each weight's largest update/param ratio in its first k recorded updates, for each
k of --within (k = 1: the first update alone). `lr_too_high` on a run that stayed finite fires at
≥ `DivergenceThresholds.update_ratio_erases_init` (0.5) with k = `erases_init_within` (5).
Prints one row per run (run, truth verdict from expected.json, the medians, and the loss's
relative decrease by the run's own yardstick, `Outcome.improvement`: the erased init is a warning
at ≥ `DivergenceThresholds.erased_init_still_learns`) and, per truth, the largest value among runs
whose fault is not `lr_too_high`, so a threshold can be checked against every healthy run at once.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from postmortem import analyze, load_run
from postmortem.series import read_series


def early_ratios(run_dir: Path, within: list[int]) -> list[float] | None:
    table = read_series(load_run(run_dir))
    largest: dict[int, list[float]] = {k: [] for k in within}
    for index in table.indices("update"):
        if not table.keys[index].name.endswith("weight") or table.numel[index] <= 1:
            continue
        ratios = table.column(index, "ratio")[: 4 * max(within)]
        ratios = ratios[np.isfinite(ratios)]
        for k in within:
            if len(ratios):
                largest[k].append(float(np.max(ratios[:k])))
    if not largest[within[0]]:
        return None
    return [float(np.median(largest[k])) for k in within]


def loss_improvement(run_dir: Path) -> float | None:
    """The run's relative loss decrease, first → last quarter, as the analyzer measures it."""
    return analyze(run_dir).outcome.improvement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="folders of runs (a run name counted once)")
    parser.add_argument("--within", type=int, nargs="+", default=[1, 5, 10, 20])
    args = parser.parse_args()
    worst: dict[str, tuple[float, str]] = {}
    print("run", "truth", *(f"within_{k}" for k in args.within), "loss_improvement")
    runs = {p.name: p for folder in reversed(args.runs) for p in folder.iterdir() if (p / "expected.json").exists()}
    for run_dir in (runs[name] for name in sorted(runs)):
        truth = json.loads((run_dir / "expected.json").read_text())["verdict"]
        values = early_ratios(run_dir, args.within)
        if values is None:
            continue
        improvement = loss_improvement(run_dir)
        print(run_dir.name, truth, *(f"{v:.3g}" for v in values),
              "—" if improvement is None else f"{improvement:.3g}", flush=True)
        if not run_dir.name.startswith("lr_too_high") and values[-1] > worst.get(truth, (-1.0, ""))[0]:
            worst[truth] = (values[-1], run_dir.name)
    for truth, (value, name) in sorted(worst.items()):
        print(f"# largest within_{args.within[-1]} without an lr_too_high fault, truth {truth}: {value:.3g} ({name})")


if __name__ == "__main__":
    main()
