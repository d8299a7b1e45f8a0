"""benchmarks/early_update_ratio.py against a plain reading of the same run's stats."""

import numpy as np
import pandas as pd

from sample_run_helpers import load_script


def test_the_largest_early_ratio_per_weight_and_its_median(tmp_path):
    script = load_script("benchmarks/early_update_ratio.py")
    run = load_script("tests/reports/report_runs.py").write_run(tmp_path / "run", kind="diverged")
    stats = pd.concat(pd.read_parquet(p) for p in sorted((run / "stats").glob("part-*.parquet")))
    weights = stats[(stats["role"] == "update") & stats["name"].str.endswith("weight")].sort_values("step")
    expected = [float(np.median([g["ratio"].to_numpy()[:k].max() for _, g in weights.groupby("name")]))
                for k in (1, 5, 50)]
    assert script.early_ratios(run, [1, 5, 50]) == expected
    assert expected[0] <= expected[1] < expected[2]  # the blow-up from step 40 reaches within 50, not within 5
