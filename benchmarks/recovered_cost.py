"""Could one run's own loss say what a recovered incident cost it: the pre-incident trend against the twin.

    python benchmarks/recovered_cost.py --runs DIR [DIR ...]

The zoo's truth calls a run diverged when its loss jumped after the fault and ended ≥ 1.25× its
fault-free twin's (`sample_runs.training.broke_against`), even where the loss came back to its
level before the fault. The analyzer sees no twin: it calls such a run healthy with a
`recovered_incident`. For every run under --runs (a name counted once over all DIRs) that the
analyzer calls healthy with a recovered incident, and whose twin (`healthy-<arch>-s<seed>`, same
batches) lies under one of the DIRs, this extrapolates the loss before the incident's step by a
power law in the step (a line in log-log through the later half of the losses before it) to the
run's last 10 steps, and prints per run: the truth, that forecast over the twin's final loss
(medians of the last 10), and the run's final loss over the forecast. Then the summary: the
share of forecasts within ×1.25 of the twin's, and what the rule "final ≥ 1.25× the forecast:
diverged" would catch (diverged truths) and break (healthy truths).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from postmortem import analyze, load_run
from postmortem.scalars import loss_curve

MARGIN = 1.25  # the twin truth's own margin (broke_against)


def forecast(steps: np.ndarray, loss: np.ndarray, onset: int) -> float | None:
    """The power-law trend of the losses before `onset` (positive, steps ≥ 1, at least 20 of
    them; its later half fitted) at the mean of the last 10 steps."""
    before = (steps < onset) & (steps >= 1)
    s, v = steps[before], loss[before]
    if len(s) < 20 or np.any(v <= 0):
        return None
    half = len(s) // 2
    slope, intercept = np.polyfit(np.log(s[half:]), np.log(v[half:]), 1)
    return float(np.exp(intercept + slope * np.log(steps[-10:].mean())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    runs: dict[str, Path] = {}
    for pool in args.runs:
        for run_dir in sorted(p for p in pool.iterdir() if (p / "expected.json").exists()):
            runs.setdefault(run_dir.name, run_dir)
    rows = []
    for name, run_dir in runs.items():
        expected = json.loads((run_dir / "expected.json").read_text())
        twin = runs.get(f"healthy-{expected['arch']}-s{expected['seed']}")
        if expected["family"] == "healthy" or twin is None:
            continue
        analysis = analyze(run_dir)
        incident = [f for f in analysis.findings if f.label == "recovered_incident" and f.step is not None]
        if analysis.verdict != "healthy" or not incident:
            continue
        steps, loss = loss_curve(analysis.run.scalars())
        predicted = forecast(steps, loss, incident[0].step)
        if predicted is None:
            continue
        twin_final = float(np.median(loss_curve(load_run(twin).scalars())[1][-10:]))
        final = float(np.median(loss[-10:]))
        rows.append((name, expected["verdict"], predicted / twin_final, final / predicted))
        print(f"{name:44s} truth {expected['verdict']:12s} forecast/twin {predicted / twin_final:7.2f}  "
              f"final/forecast {final / predicted:7.2f}", flush=True)
    if not rows:
        print("no run the analyzer calls healthy with a recovered incident has its twin under --runs")
        return
    within = sum(1 / MARGIN <= r[2] <= MARGIN for r in rows)
    diverged = [r for r in rows if r[1] == "diverged"]
    healthy = [r for r in rows if r[1] == "healthy"]
    caught = sum(r[3] >= MARGIN for r in diverged)
    broken = sum(r[3] >= MARGIN for r in healthy)
    print(f"\n{len(rows)} runs called healthy with a recovered incident ({len(diverged)} diverged truths, "
          f"{len(healthy)} healthy); forecast within ×{MARGIN} of the twin's final loss: {within}/{len(rows)}; "
          f"'final ≥ ×{MARGIN} the forecast' would catch {caught}/{len(diverged)} diverged truths and "
          f"call {broken}/{len(healthy)} healthy truths diverged")


if __name__ == "__main__":
    main()
