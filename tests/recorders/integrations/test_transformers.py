"""The Hugging Face Trainer callback, proven on real Trainer runs of a tiny GPT-2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hf_runs import LearningRateBlowUp, train
from integration_checks import (assert_diverged_at, assert_exception_run, assert_healthy,
                                scalar_series)
from recorder_helpers import read_manifest, read_table

HERE = Path(__file__).parent
STEPS_PER_EPOCH = 8  # 128 examples, batches of 8, two micro-batches per optimizer step


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    run = tmp_path_factory.mktemp("hf") / "run"
    trainer = train(run)
    return run, trainer



def test_one_recorded_step_per_optimizer_step(healthy):
    run, trainer = healthy
    manifest = read_manifest(run)
    assert manifest["status"] == "completed"
    assert trainer.state.global_step == 2 * STEPS_PER_EPOCH
    assert manifest["last_step"] == trainer.state.global_step - 1
    steps, _ = scalar_series(run, "loss")
    assert steps.tolist() == list(range(trainer.state.global_step))


def test_loss_is_the_trainers_accumulated_loss(healthy):
    """The Trainer logs the mean of its per-step losses over each logging window (2 steps)."""
    run, trainer = healthy
    _, loss = scalar_series(run, "loss")
    logged = [(entry["step"], entry["loss"]) for entry in trainer.state.log_history
              if "loss" in entry and "step" in entry]
    assert len(logged) >= 6
    for step, value in logged:  # global step N is recorded step N - 1
        assert np.mean(loss[step - 2:step]) == pytest.approx(value, rel=1e-5)


def test_lr_is_the_rate_each_step_used(healthy):
    run, trainer = healthy
    _, lr = scalar_series(run, "lr")
    logged = [(entry["step"], entry["learning_rate"]) for entry in trainer.state.log_history
              if "learning_rate" in entry]
    assert logged
    for step, value in logged:
        assert lr[step - 1] == pytest.approx(value, rel=1e-6)
    assert lr[0] == pytest.approx(5e-3) and lr[-1] < lr[0] / 10  # linear decay to zero


def test_gradients_are_read_before_the_trainers_clipping(healthy):
    """max_grad_norm=1.0 clips every early step; the Trainer logs the pre-clip norm."""
    run, trainer = healthy
    _, grad_norm = scalar_series(run, "grad_norm")
    logged = [(entry["step"], entry["grad_norm"]) for entry in trainer.state.log_history
              if "grad_norm" in entry]
    assert any(value > 1.0 for _, value in logged)  # clipping acted
    for step, value in logged:
        assert grad_norm[step - 1] == pytest.approx(value, rel=1e-4)


def test_dict_batches_are_inputs_and_targets(healthy):
    run, _ = healthy
    stats = read_table(run, "stats")
    io = stats[stats["role"].isin(["input", "target"])]
    assert set(io["name"]) == {"input.input_ids", "input.attention_mask", "target.labels"}
    first = io[io["step"] == 0].set_index("name")
    assert first.loc["input.input_ids", "shape"] == "16x16"  # two micro-batches of 8 pooled
    assert first.loc["input.attention_mask", "mean"] == 1.0


def test_activations_come_from_training_forwards_only(healthy):
    """An evaluation after step 7 must not add its forwards to the activations of step 8."""
    run, _ = healthy
    stats = read_table(run, "stats")
    final_norm = stats[(stats["role"] == "activation") & (stats["name"] == "transformer.ln_f")]
    assert len(final_norm) == 2 * STEPS_PER_EPOCH
    assert set(final_norm["numel"]) == {16 * 16 * 64}


def test_epochs_and_evaluations_are_events_and_scalars(healthy):
    run, trainer = healthy
    events = read_table(run, "events")
    assert events[events["kind"] == "epoch"]["step"].tolist() == [0, STEPS_PER_EPOCH]
    evaluations = events[events["kind"] == "evaluation"]
    assert len(evaluations) == 2 and evaluations["message"].str.contains("eval_loss=").all()
    steps, eval_loss = scalar_series(run, "eval_loss")
    assert steps.tolist() == [STEPS_PER_EPOCH - 1, 2 * STEPS_PER_EPOCH - 1]
    logged = [entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry]
    assert eval_loss.tolist() == pytest.approx(logged)


def test_training_arguments_are_in_the_manifest(healthy):
    run, _ = healthy
    config = read_manifest(run)["config"]
    assert config["training_arguments"]["max_grad_norm"] == 1.0
    assert config["training_arguments"]["gradient_accumulation_steps"] == 2
    assert config["model_config"]["n_layer"] == 2
    json.dumps(config, allow_nan=False)


def test_healthy_run_is_healthy(healthy):
    run, _ = healthy
    assert_healthy(run)


def test_no_gradient_is_carried_over_between_accumulated_steps(healthy):
    run, _ = healthy
    steps, carried = scalar_series(run, "grad_carried_over")
    assert steps.tolist() == list(range(2 * STEPS_PER_EPOCH)) and not carried.any()


def test_lr_blow_up_is_diverged_at_its_step(tmp_path):
    """lr 5e-3 -> 1.0 from step 12 of 24 (AdamW: every weight moves by about 1 per step), early
    enough that the ordinary growth of the first steps' pre-clip gradients is still under way."""
    blow_up = 12
    run = tmp_path / "run"
    train(run, examples=24 * 8, epochs=1, accumulation=1,
          callbacks=(LearningRateBlowUp(blow_up, 1.0),))
    assert_diverged_at(run, blow_up)


def test_uncaught_exception_leaves_an_exception_run(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(HERE / "hf_runs.py"), str(run), "5"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "injected failure at global step 5" in done.stderr  # the usual traceback still shows
    assert_exception_run(run, "injected failure at global step 5", last_step=4)


def test_missing_transformers_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.delitem(sys.modules, "recorders.integrations.transformers")
    with pytest.raises(ImportError) as raised:
        import recorders.integrations.transformers  # noqa: F401
    message = str(raised.value)
    assert "\n" not in message and "pip install 'postmortem[transformers]'" in message
