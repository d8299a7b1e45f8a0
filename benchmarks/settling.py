"""Where the analysis starts: runs whose loss rose early, and whether their objective settled.

    python benchmarks/settling.py --runs RUNS_DIR [MORE_DIRS ...]

For every run under --runs whose main loss rose ≥ `OutcomeThresholds.settling_rise` above its
first value within `settling_steps`: one row with the truth (expected.json), its first losses, the
weights' update/param ratio before the loss first reached that rise (the median over weights of
each one's largest; `detectors.outcome.objective_settled` reads up to where the rise stopped) and
the step the analysis starts from (None: the first). A last line per truth verdict counts those runs and the settled ones, and gives the range
of the ratio in each group: the margin `settling_update_ratio` sits in.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from postmortem import load_run
from postmortem.detectors.divergence import weight_update_ratios
from postmortem.detectors.outcome import objective_settled
from postmortem.detectors.thresholds import OutcomeThresholds
from postmortem.scalars import loss_curve
from postmortem.series import read_series


def early_rise(run_dir: Path, th: OutcomeThresholds) -> dict | None:
    """The row of a run whose loss rose early (None for any other run)."""
    run = load_run(run_dir)
    steps, loss = loss_curve(run.scalars())
    head = loss[1:th.settling_steps + 1]
    if len(loss) < 2 or loss[0] <= 0 or not np.any(head >= th.settling_rise * loss[0]):
        return None
    rise = 1 + int(np.argmax(head >= th.settling_rise * loss[0]))
    ratios = weight_update_ratios(read_series(run), run.manifest)
    moved = [float(np.max(r[:rise])) for r in ratios if len(r) >= rise]
    settled = objective_settled(loss, ratios, th)
    return {"run": run_dir.name, "truth": json.loads((run_dir / "expected.json").read_text())["verdict"],
            "first_losses": [round(float(v), 4) for v in loss[:th.settling_steps + 1]],
            "update_ratio": float(np.median(moved)) if moved else None,
            "starts_at": None if settled is None else int(steps[settled])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="folders of runs (a run name counted once)")
    args = parser.parse_args()
    th = OutcomeThresholds()
    runs = {p.name: p for folder in reversed(args.runs) for p in folder.iterdir() if (p / "expected.json").exists()}
    rows = [row for row in (early_rise(runs[name], th) for name in sorted(runs)) if row is not None]
    print(f"# {len(runs)} runs, {len(rows)} whose loss rose ≥ ×{th.settling_rise:g} within {th.settling_steps} steps")
    for row in rows:
        print(row["run"], row["truth"], row["first_losses"], "ratio",
              "—" if row["update_ratio"] is None else f"{row['update_ratio']:.2g}", "starts_at", row["starts_at"])
    for truth in sorted({r["truth"] for r in rows}):
        for settled in (True, False):
            group = [r for r in rows if r["truth"] == truth and (r["starts_at"] is not None) == settled]
            ratios = [r["update_ratio"] for r in group if r["update_ratio"] is not None]
            span = f", ratio {min(ratios):.2g}–{max(ratios):.2g}" if ratios else ""
            print(f"# truth {truth}, {'settled' if settled else 'read from the first step'}: {len(group)}{span}")


if __name__ == "__main__":
    main()
