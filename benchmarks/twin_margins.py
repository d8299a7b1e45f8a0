"""Where the field zoo's truth sits against what a run alone can show.

    python benchmarks/twin_margins.py --runs /tmp/s8-runs [--score detection.json]

The truth of a fault injected at step t0 (sample_runs/training.py `broke_against`) compares the
run with its fault-free twin (`healthy-<arch>-s<seed>`: same model, seed and batches): it
diverged when the loss jumped ≥ 1.2× within 10 steps of t0 and it ends ≥ 1.25× the twin's final
loss (a fault from step 0, `lr_too_high`/`lr_too_low`: not learning when it ends ≥ 1.25× the
twin, among others; its "level before" here is the median of its first 10 losses, t0 shown as
10). The analyzer has no twin; it calls a finite incident recovered when the loss ends within
1.1× its own level before the onset (`OutcomeThresholds.recovered_factor`). For every run whose
fault is dated in its notes and whose loss stayed finite, this prints both margins: end / twin
end (the truth's yardstick) and end / level before t0 (the run's own), and with `--score` (a
`benchmarks/detection.py --json` file) what the analyzer called it at the defaults. Reads the
run directories with pyarrow only.

mean/before is the mean of the last 10 losses over that level (`OutcomeThresholds.recovered_mean_factor`).
Two more yardsticks of the run's own record are printed beside them (session 8, helper 12m):
end / trend, the final loss over where the run's own pre-fault trend was heading (a power law,
log loss against log step, fitted on the losses from step 5 to t0 and extrapolated to the last
10 steps), with twin / trend, the same prediction held against the twin's end (how well the
trend foresees what the truth compares with); and val end / before, the last `val_loss` over the
last one recorded before t0, where the run records one.

With `--cut` it prints instead, for each layer cut off from the gradient (`detach`,
`frozen_layer`; truth `training.stalled_against`: not learning when it ends ≥ 1.15× the twin
and gained since t0 at most half of what the twin gained), the analyzer's yardstick (the loss's
gain from the median of the 10 losses before t0 to the median of the last 10, against
`GradientThresholds.cut_off_still_learns`) beside the twin's gain over the same steps, and the
outcome yardstick on the whole loss and on the losses from t0 (session 10, helper 12r).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout
from postmortem.detectors.base import measure_outcome  # noqa: E402
from postmortem.detectors.thresholds import OutcomeThresholds  # noqa: E402

_T0 = re.compile(r"(?:at|from) step (\d+)")
_FROM_START = ("lr_too_high-", "lr_too_low-")  # wrong from step 0: "before" is the first 10 losses


def _scalar(run: Path, name: str):
    table = ds.dataset(run / "scalars", format="parquet").to_table().to_pandas()
    return table[table["name"] == name].groupby("step")["value"].mean().sort_index()


def _loss(run: Path) -> np.ndarray:
    return _scalar(run, "loss").to_numpy(np.float64)


def _learns(loss: np.ndarray) -> bool | None:
    """The analyzer's outcome yardstick on these losses alone (`measure_outcome`, no metrics)."""
    return measure_outcome(np.arange(len(loss)), loss, {}, OutcomeThresholds()).learns


def _trend(loss: np.ndarray, t0: int) -> float:
    """Where the loss before t0 was heading at the last 10 steps: log loss against log step,
    fitted from step 5 (past the first steps' fall) to t0; NaN with < 10 positive losses."""
    steps = np.arange(5, t0)
    values = loss[5:t0]
    if len(values) < 10 or np.any(values <= 0):
        return float("nan")
    slope, intercept = np.polyfit(np.log(steps), np.log(values), 1)
    return float(np.exp(intercept + slope * np.log(np.mean(np.arange(len(loss))[-10:]))))


def _val_end_over_before(run: Path, t0: int) -> float:
    val = _scalar(run, "val_loss")
    before = val[val.index < t0]
    return float(val.iloc[-1] / before.iloc[-1]) if len(before) and val.index[-1] > t0 else float("nan")


def margins(runs: Path, called: dict[str, str]) -> list[dict]:
    rows = []
    for run in sorted(p for p in runs.iterdir() if (p / "expected.json").exists()):
        expected = json.loads((run / "expected.json").read_text())
        found = _T0.search(expected.get("notes") or "")
        twin = runs / f"healthy-{expected.get('arch')}-s{expected.get('seed')}"
        if not twin.exists() or run == twin or (not found and not run.name.startswith(_FROM_START)):
            continue
        t0, loss, twin_loss = int(found.group(1)) if found else 10, _loss(run), _loss(twin)
        if len(loss) < t0 + 10 or t0 < 10 or not np.all(np.isfinite(loss)):
            continue
        end, trend = float(np.mean(loss[-10:])), _trend(loss, t0)
        rows.append({
            "run": run.name, "arch": expected.get("arch"), "truth": expected["verdict"], "called": called.get(run.name), "t0": t0,
            "end_over_twin": end / float(np.mean(twin_loss[-10:])),
            "end_over_before": float(np.median(loss[-10:])) / float(np.median(loss[t0 - 10:t0])),
            "mean_over_before": end / float(np.median(loss[t0 - 10:t0])),
            "end_over_trend": end / trend, "twin_over_trend": float(np.mean(twin_loss[-10:])) / trend,
            "val_end_over_before": _val_end_over_before(run, t0), "learns": _learns(loss),
        })
    return rows


def cut_gains(runs: Path, called: dict[str, str]) -> list[dict]:
    """Per cut-off layer: its own gain since the cut and its twin's over the same steps."""
    rows = []
    for run in sorted(p for p in runs.iterdir() if p.name.startswith(("detach-", "frozen_layer-"))):
        expected = json.loads((run / "expected.json").read_text())
        found = _T0.search(expected.get("notes") or "")
        twin = runs / f"healthy-{expected.get('arch')}-s{expected.get('seed')}"
        if not found or not twin.exists():
            continue
        t0, loss, twin_loss = int(found.group(1)), _loss(run), _loss(twin)
        if t0 < 3 or len(loss) < 20 or not np.all(np.isfinite(loss)):
            continue

        def gain(values: np.ndarray) -> float:
            before = float(np.median(values[max(0, t0 - 10):t0]))
            return (before - float(np.median(values[-10:]))) / abs(before)

        rows.append({"run": run.name, "arch": expected.get("arch"), "truth": expected["verdict"],
                     "called": called.get(run.name), "t0": t0, "gain": gain(loss), "twin_gain": gain(twin_loss),
                     "end_over_twin": float(np.mean(loss[-10:])) / float(np.mean(twin_loss[-10:])),
                     "learns": _learns(loss), "learns_after": _learns(loss[t0:])})
    return rows


def _print_cut(rows: list[dict]) -> None:
    print(f"{'run':34s} {'truth':12s} {'called':12s} {'t0':>4s} {'gain':>7s} {'twin gain':>9s} {'end/twin':>9s} "
          f"{'learns':>6s} {'after':>6s}")
    for r in sorted(rows, key=lambda r: (r["truth"], r["gain"])):
        print(f"{r['run']:34s} {r['truth']:12s} {str(r['called']):12s} {r['t0']:4d} {r['gain']:7.3f} "
              f"{r['twin_gain']:9.3f} {r['end_over_twin']:9.3f} {str(r['learns']):>6s} {str(r['learns_after']):>6s}")
    for truth in ("healthy", "not_learning"):
        chosen = [r for r in rows if r["truth"] == truth]
        if chosen:
            gains, twins = [r["gain"] for r in chosen], [r["twin_gain"] for r in chosen]
            print(f"truth {truth}: {len(chosen)} runs, gain since the cut {min(gains):.3f}–{max(gains):.3f}, "
                  f"twin's gain {min(twins):.3f}–{max(twins):.3f}, learn by the outcome yardstick "
                  f"{sum(bool(r['learns']) for r in chosen)}, after the cut {sum(bool(r['learns_after']) for r in chosen)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True)
    parser.add_argument("--score", type=Path, help="a benchmarks/detection.py --json file (default rows)")
    parser.add_argument("--family", action="append", help="only runs whose name starts with FAMILY- (repeatable)")
    parser.add_argument("--arch", action="append", help="only runs of this model family (repeatable)")
    parser.add_argument("--cut", action="store_true", help="cut-off layers: gain since the cut, the run's and its twin's")
    args = parser.parse_args(argv)
    if not args.runs.is_dir():
        print(f"not a directory: {args.runs}", file=sys.stderr)
        return 2
    called = {}
    if args.score:
        called = {r["run"]: r["verdict"] for r in json.loads(args.score.read_text()) if r.get("config") == "default"}
    rows = (cut_gains if args.cut else margins)(args.runs, called)
    if args.family:
        rows = [r for r in rows if any(r["run"].startswith(f + "-") for f in args.family)]
    if args.arch:
        rows = [r for r in rows if r["arch"] in args.arch]
    if args.cut:
        _print_cut(rows)
        return 0
    print(f"{'run':34s} {'truth':12s} {'called':12s} {'t0':>4s} {'end/twin':>9s} {'end/before':>10s} "
          f"{'mean/before':>11s} {'end/trend':>9s} {'twin/trend':>10s} {'val end/before':>14s} {'learns':>6s}")
    for r in sorted(rows, key=lambda r: (r["truth"], r["end_over_before"])):
        print(f"{r['run']:34s} {r['truth']:12s} {str(r['called']):12s} {r['t0']:4d} "
              f"{r['end_over_twin']:9.3f} {r['end_over_before']:10.3f} {r['mean_over_before']:11.3f} {r['end_over_trend']:9.3f} "
              f"{r['twin_over_trend']:10.3f} {r['val_end_over_before']:14.3f} {str(r['learns']):>6s}")
    # The overlap: runs the own yardstick calls recovered (end within 1.1× the level before).
    back = [r for r in rows if r["end_over_before"] <= 1.1]
    for truth in ("healthy", "diverged", "not_learning"):
        chosen = [r["end_over_before"] for r in back if r["truth"] == truth]
        if chosen:
            print(f"ended within 1.1× the level before t0, truth {truth}: {len(chosen)} runs, "
                  f"end/before {min(chosen):.2f}–{max(chosen):.2f}")
    for key in ("mean_over_before", "end_over_trend", "val_end_over_before"):
        for truth in ("healthy", "diverged", "not_learning"):
            chosen = [r[key] for r in back if r["truth"] == truth and np.isfinite(r[key])]
            if chosen:
                print(f"  of those, truth {truth}: {key} {min(chosen):.2f}–{max(chosen):.2f} ({len(chosen)} runs)")
    predicted = [r["twin_over_trend"] for r in rows if np.isfinite(r["twin_over_trend"])]
    if predicted:
        print(f"the trend against the twin's end (twin/trend), {len(predicted)} runs: "
              f"{min(predicted):.2f}–{max(predicted):.2f}, 5–95 % {np.percentile(predicted, 5):.2f}–"
              f"{np.percentile(predicted, 95):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
