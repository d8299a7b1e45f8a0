"""The generator: deterministic per seed, truth written beside each run, a usable CLI."""
import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from sample_run_helpers import assert_same_stats, read_stats

from sample_runs import scenarios

from sample_runs import (
    HELD_OUT_ARCHS,
    HELD_OUT_FAMILIES,
    SCENARIOS,
    VERDICTS,
    Expected,
    get,
    make,
    read_expected,
    scenario_names,
)

ROOT = Path(__file__).resolve().parents[2]


def test_catalogue_covers_the_issue():
    families = {s.family for s in SCENARIOS.values()}
    for family in ("lr_spike", "weight_scale", "batch_scale", "batch_nan", "missing_zero_grad", "frozen_layer",
                   "detach", "adam_eps", "fp16_overflow", "label_shuffle", "cnn_domain_shift", "gan_log0",
                   "gan_healthy", "gan_bad_init", "gan_kaiming", "linear_lr_0.001", "linear_no_step", "linear_lr_10", "linear_lr_1e-7",
                   "linear_unscaled", "linear_overfit_batch", "deep_vanishing", "deep_kaiming", "deep_dead_relu"):
        assert family in families
    for family in ("lr_spike", "adam_eps", "fp16_overflow", "label_shuffle"):
        assert {s.arch for s in SCENARIOS.values() if s.family == family} - set(HELD_OUT_ARCHS) == {"mlp", "cnn", "lstm"}
    healthy = [s for s in SCENARIOS.values() if s.family.startswith("healthy")]
    assert len(healthy) >= 30
    assert len([s for s in SCENARIOS.values() if s.family == "cnn_domain_shift"]) == 10
    assert all(s.held_out == (s.family in HELD_OUT_FAMILIES or s.arch in HELD_OUT_ARCHS) for s in SCENARIOS.values())
    small = scenario_names("small")
    assert 0 < len(small) < len(SCENARIOS) and all(SCENARIOS[n].seed == 0 for n in small)
    with pytest.raises(ValueError):
        scenario_names("huge")
    with pytest.raises(ValueError, match="unknown scenario"):
        get("no_such_run")




def test_same_seed_same_run_and_truth(tmp_path):
    first = make("linear_lr_10-s1", tmp_path / "a")
    second = make("linear_lr_10-s1", tmp_path / "b")
    assert first == second
    assert read_expected(tmp_path / "a") == first
    assert_same_stats(read_stats(tmp_path / "a"), read_stats(tmp_path / "b"))
    other_seed = make("linear_lr_10-s2", tmp_path / "c")
    assert not read_stats(tmp_path / "c")["norm"].equals(read_stats(tmp_path / "a")["norm"])
    assert other_seed.seed == 2


def test_truth_comes_from_the_injection(tmp_path):
    truth = make("lr_spike-mlp-s1", tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert truth.verdict == "diverged" and truth.onset_step is not None and 40 <= truth.onset_step <= 100
    assert "lr_spike" not in json.dumps(manifest)  # the recorded run never names its fault
    # The recorded lr of the culprit's param group (one group per layer) jumps ×300 exactly at t0.
    group = ["fc1", "fc2", "fc3"].index(truth.culprit)
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    lr = scalars[scalars["name"] == f"hp.optimizer.{group}.lr"].set_index("step")["value"]
    assert lr[truth.onset_step] == pytest.approx(300 * lr[truth.onset_step - 1])
    # t0 and the target layer are drawn per seed, so nothing can be tuned to one step or layer.
    other = make("lr_spike-mlp-s2", tmp_path / "other")
    assert (other.onset_step, other.culprit) != (truth.onset_step, truth.culprit)


def test_a_cut_off_layer_is_judged_against_the_fault_free_twin(tmp_path):
    # fc2 frozen at t0 while fc1 and fc3 keep learning: the run ends below its healthy twin
    # (same model, seed and batches), so the truth is what the losses say, not the construction.
    truth = make("frozen_layer-mlp-s2", tmp_path / "run")
    assert truth.verdict == "healthy" and truth.tolerated == ["no_gradient"] and truth.labels == []
    assert truth.culprit is None and "fault-free twin" in truth.notes
    twin = scenarios._zoo_train(None, "healthy", "mlp", 2, {})[0].losses
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    loss = scalars[scalars["name"] == "loss"].sort_values("step")["value"].to_numpy()
    first = scenarios.T0_RANGE[0]  # no fault is injected before this step
    assert loss[:first] == pytest.approx(twin[:first])


def test_expected_json_schema(tmp_path):
    truth = make("linear_no_step-s0", tmp_path / "run")
    raw = json.loads((tmp_path / "run" / "expected.json").read_text())
    assert set(raw) == {f.name for f in fields(Expected)}
    assert raw["verdict"] in VERDICTS and raw["labels"] == ["no_update"] and raw["held_out"] is False
    assert Expected(**raw) == truth
    with pytest.raises(ValueError):
        Expected(**{**raw, "verdict": "exploded"})


def test_cli_lists_and_rejects_unknown_names(tmp_path):
    run = subprocess.run([sys.executable, "-m", "sample_runs", "list"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and "cnn_domain_shift-s0" in run.stdout and "held_out" in run.stdout
    bad = subprocess.run([sys.executable, "-m", "sample_runs", "make", "nope", "--out", str(tmp_path / "x")],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr and "Traceback" not in bad.stderr

    bad_arch = subprocess.run([sys.executable, "-m", "sample_runs", "make-all", "--arch", "mlp,nope",
                               "--out", str(tmp_path / "y")], cwd=ROOT, capture_output=True, text=True)
    assert bad_arch.returncode == 2 and "unknown arch nope" in bad_arch.stderr and not (tmp_path / "y").exists()


def test_make_all_trains_only_the_named_archs(tmp_path):
    from sample_runs.__main__ import main

    assert main(["make-all", "--arch", "linear", "--subset", "small", "--out", str(tmp_path)]) == 0
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(n for n in scenario_names("small") if SCENARIOS[n].arch == "linear") and made
