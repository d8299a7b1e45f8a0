"""The runs committed in sample_runs/<name>/ load with plain pyarrow and match a regeneration."""
import json

import pyarrow.dataset as ds
import pytest
from sample_run_helpers import assert_same_stats, read_stats

from sample_runs import COMMITTED_SAMPLES, SAMPLES_DIR, VERDICTS, make, read_expected
from sample_runs.scenarios import COMMITTED_RECORDER_OPTIONS


@pytest.mark.parametrize("name", sorted(COMMITTED_SAMPLES))
def test_committed_run_loads_and_agrees_with_its_truth(name):
    run = SAMPLES_DIR / name
    truth = read_expected(run)
    assert truth.scenario == COMMITTED_SAMPLES[name] and truth.verdict in VERDICTS
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["schema_version"] == 2
    stats = ds.dataset(str(run / "stats"), format="parquet").to_table().to_pandas()
    scalars = ds.dataset(str(run / "scalars"), format="parquet").to_table().to_pandas()
    assert {"param", "grad", "activation"} <= set(stats["role"].astype(str))
    losses = scalars[scalars["name"].astype(str).str.startswith("loss")]
    nonfinite = losses[~losses["value"].apply(lambda v: v == v and abs(v) != float("inf"))]
    first = int(nonfinite["step"].min()) if len(nonfinite) else None
    assert first == truth.first_nonfinite_loss_step
    assert (truth.verdict == "diverged") == (first is not None)


def test_domain_shift_sample_records_the_switch():
    run = SAMPLES_DIR / "cnn_domain_shift"
    events = ds.dataset(str(run / "events"), format="parquet").to_table().to_pandas()
    assert list(events["kind"]) == ["domain_switch"]
    assert read_expected(run).first_nonfinite_loss_step > int(events["step"].iloc[0])


@pytest.mark.parametrize("name", ["linear_no_step", "mlp_healthy", "gan_log0"])
def test_regenerating_a_committed_run_reproduces_it(name, tmp_path):
    truth = make(COMMITTED_SAMPLES[name], tmp_path / name, COMMITTED_RECORDER_OPTIONS)
    assert truth == read_expected(SAMPLES_DIR / name)
    assert_same_stats(read_stats(tmp_path / name), read_stats(SAMPLES_DIR / name))
