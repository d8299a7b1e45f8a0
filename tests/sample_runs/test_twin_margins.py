"""benchmarks/twin_margins.py on two hand-built runs and their twin."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sample_run_helpers import load_script


@pytest.fixture(scope="module")
def margins():
    return load_script("benchmarks/twin_margins.py")


def _run(folder: Path, name: str, loss: np.ndarray, notes: str, verdict: str) -> None:
    (folder / name / "scalars").mkdir(parents=True)
    pd.DataFrame({"step": np.arange(len(loss)), "name": "loss", "value": loss}).to_parquet(
        folder / name / "scalars" / "part-000000.parquet")
    arch, seed = name.split("-")[1], int(name[-1])
    (folder / name / "expected.json").write_text(json.dumps(
        {"arch": arch, "seed": seed, "notes": notes, "verdict": verdict}))


def test_margins_against_the_twin_and_the_runs_own_level(margins, tmp_path):
    twin = np.linspace(2.0, 1.0, 60)
    _run(tmp_path, "healthy-toy-s0", twin, "", "healthy")
    stuck = twin.copy()
    stuck[30:] = stuck[25]  # back to its level before step 30 and stays there: the twin went on
    _run(tmp_path, "lr_spike-toy-s0", stuck, "lr raised at step 30", "diverged")
    _run(tmp_path, "nan-toy-s0", np.where(np.arange(60) > 40, np.nan, twin), "at step 40", "diverged")
    rows = {r["run"]: r for r in margins.margins(tmp_path, {"lr_spike-toy-s0": "healthy"})}
    assert set(rows) == {"lr_spike-toy-s0"}  # the twin itself and a non-finite run are left out
    row = rows["lr_spike-toy-s0"]
    assert row["t0"] == 30 and row["called"] == "healthy"
    assert row["end_over_twin"] == pytest.approx(stuck[-1] / np.mean(twin[-10:]))
    assert row["end_over_before"] == pytest.approx(stuck[-1] / np.median(twin[20:30]))
    # The trend of steps 5-29 (a power law) heads below the stuck run's end, and the twin's end
    # sits nearer to it than the stuck run's; no val_loss recorded, none compared.
    assert row["end_over_trend"] > row["twin_over_trend"] and row["end_over_trend"] > 1.0
    assert np.isnan(row["val_end_over_before"])


def test_the_val_loss_end_over_its_last_value_before_t0(margins, tmp_path):
    _run(tmp_path, "healthy-toy-s0", np.linspace(2.0, 1.0, 60), "", "healthy")
    _run(tmp_path, "lr_spike-toy-s0", np.linspace(2.0, 1.0, 60), "lr raised at step 30", "diverged")
    scalars = tmp_path / "lr_spike-toy-s0" / "scalars"
    pd.DataFrame({"step": [0, 25, 50], "name": "val_loss", "value": [2.0, 1.6, 2.4]}).to_parquet(
        scalars / "part-000001.parquet")
    (row,) = margins.margins(tmp_path, {})
    assert row["val_end_over_before"] == pytest.approx(2.4 / 1.6)


def test_a_missing_runs_folder_exits_2(margins, tmp_path):
    assert margins.main(["--runs", str(tmp_path / "none")]) == 2


def test_cut_gains_against_the_twins_gain_since_the_cut(margins, tmp_path):
    twin = np.linspace(2.0, 1.0, 60)
    _run(tmp_path, "healthy-toy-s0", twin, "", "healthy")
    cut = twin.copy()
    cut[30:] = np.linspace(cut[30], 1.3, 30)  # learns on, more slowly than the twin, after the cut
    _run(tmp_path, "detach-toy-s0", cut, "output of fc1 detached from step 30", "not_learning")
    _run(tmp_path, "lr_spike-toy-s0", twin, "lr raised at step 30", "diverged")  # not a cut: left out
    (row,) = margins.cut_gains(tmp_path, {"detach-toy-s0": "healthy"})
    assert row["run"] == "detach-toy-s0" and row["t0"] == 30 and row["called"] == "healthy"
    before = np.median(twin[20:30])
    assert row["gain"] == pytest.approx((before - np.median(cut[-10:])) / before)
    assert row["twin_gain"] == pytest.approx((before - np.median(twin[-10:])) / before)
    assert row["gain"] < row["twin_gain"] and row["end_over_twin"] > 1.0
    assert row["learns"] and row["learns_after"]  # the loss falls over the run and after the cut
