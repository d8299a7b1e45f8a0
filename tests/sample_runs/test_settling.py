"""benchmarks/settling.py on runs written from frames: a plain reading of their first losses."""
from pathlib import Path

import numpy as np
import pandas as pd

from sample_run_helpers import load_script

PM_RUNS = load_script("tests/postmortem/pm_runs.py")


def _run(path: Path, first_losses: list[float], ratio: float) -> Path:
    losses = [*first_losses, *np.geomspace(4.8, 3.0, 60)]
    steps = len(losses)
    stats = pd.concat([PM_RUNS.series_rows("param", "fc.weight", np.ones(steps)),
                       PM_RUNS.series_rows("update", "fc.weight", np.full(steps, ratio), ratio=ratio)])
    run = PM_RUNS.make_run(path, stats, PM_RUNS.scalar_rows("loss", losses))
    (run / "expected.json").write_text('{"verdict": "healthy"}')
    return run


def test_an_early_rise_is_listed_with_the_ratio_before_it_and_where_the_analysis_starts(tmp_path):
    script = load_script("benchmarks/settling.py")
    th = script.OutcomeThresholds()
    still = script.early_rise(_run(tmp_path / "queue", [0.9, 4.1, 4.8], 1e-4), th)
    assert still["first_losses"] == [0.9, 4.1, 4.8, 4.8] and still["starts_at"] == 2
    assert still["update_ratio"] == np.float32(1e-4)
    moved = script.early_rise(_run(tmp_path / "moved", [0.9, 4.1, 4.8], 2.0), th)
    assert moved["starts_at"] is None and moved["update_ratio"] == 2.0
    assert script.early_rise(_run(tmp_path / "flat", [4.7, 4.8, 4.8], 1e-4), th) is None
