"""The Lightning callback, proven on real Lightning 2.x runs."""

import sys

import lightning.pytorch as pl
import numpy as np
import postmortem
import pytest

from integration_checks import (assert_diverged_at, assert_exception_run, assert_healthy,
                                scalar_series)
from lightning_runs import classification_data, fit, modules, real_points
from recorder_helpers import read_manifest, read_table
from recorders.integrations.lightning import PostmortemCallback

Classifier, GAN, LearningRateBlowUp, ClosureOnly = modules(pl)
BATCHES = 32  # per epoch: 512 examples in batches of 16
CLIP = 0.2  # gradient_clip_val, below every step's gradient norm



@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """Two epochs, gradient_clip_val, accumulate_grad_batches=2, a per-step StepLR."""
    run = tmp_path_factory.mktemp("lightning") / "run"
    module = fit(pl, PostmortemCallback, run, Classifier(), classification_data(),
                 classification_data(seed=1), gradient_clip_val=CLIP, accumulate_grad_batches=2)
    return run, module


def test_one_recorded_step_per_optimizer_step(healthy):
    run, _ = healthy
    manifest = read_manifest(run)
    assert manifest["status"] == "completed"
    assert manifest["last_step"] == BATCHES - 1  # 2 epochs of 8 optimizer steps
    assert manifest["config"]["trainer"]["accumulate_grad_batches"] == 2
    assert manifest["config"]["trainer"]["gradient_clip_val"] == CLIP
    assert manifest["config"]["hparams"]["lr"] == 0.2


def test_loss_is_the_mean_over_the_accumulated_batches(healthy):
    run, module = healthy
    _, loss = scalar_series(run, "loss")
    expected = np.asarray(module.batch_losses).reshape(-1, 2).mean(axis=1)
    assert loss == pytest.approx(expected, rel=1e-5)


def test_lr_is_the_rate_each_step_used(healthy):
    """StepLR lowers the rate every 5 optimizer steps; Lightning steps it before the batch
    ends, and the recorded rate is still the one the step used."""
    run, _ = healthy
    _, lr = scalar_series(run, "lr")
    assert lr == pytest.approx([0.2 * 0.8 ** (step // 5) for step in range(BATCHES)])


def test_gradients_are_read_before_lightnings_clipping(tmp_path):
    """Lightning runs backward inside ``optimizer.step(closure)``, then clips."""
    run = tmp_path / "run"
    module = fit(pl, PostmortemCallback, run, Classifier(), classification_data(), epochs=1,
                 gradient_clip_val=CLIP)
    _, grad_norm = scalar_series(run, "grad_norm")
    assert (np.asarray(module.grad_norms) > CLIP).all()  # clipping acted at every step
    assert grad_norm == pytest.approx(module.grad_norms, rel=1e-4)


def test_accumulated_gradients_are_read_before_lightnings_clipping(healthy):
    run, module = healthy
    _, grad_norm = scalar_series(run, "grad_norm")
    assert (np.asarray(module.grad_norms) > CLIP).all()
    assert grad_norm == pytest.approx(module.grad_norms, rel=1e-4)


def test_batches_are_pooled_over_accumulation(healthy):
    run, _ = healthy
    stats = read_table(run, "stats")
    io = stats[stats["role"].isin(["input", "target"])]
    assert set(io["name"]) == {"input", "target"}
    assert set(io[io["name"] == "input"]["shape"]) == {"32x10"}


def test_epochs_and_validations_are_events_and_scalars(healthy):
    run, _ = healthy
    events = read_table(run, "events")
    assert events[events["kind"] == "epoch"]["step"].tolist() == [0, BATCHES // 2]
    assert events[events["kind"] == "validation"]["message"].str.contains("val_loss=").all()
    steps, _ = scalar_series(run, "val_loss")
    assert steps.tolist() == [BATCHES // 2 - 1, BATCHES - 1]


def test_healthy_run_is_healthy(healthy):
    run, _ = healthy
    assert_healthy(run)


def test_no_gradient_is_carried_over_between_accumulated_steps(healthy):
    run, _ = healthy
    steps, carried = scalar_series(run, "grad_carried_over")
    assert steps.tolist() == list(range(BATCHES)) and not carried.any()


def test_lr_blow_up_is_diverged_at_its_step(tmp_path):
    blow_up = 14
    run = tmp_path / "run"
    fit(pl, PostmortemCallback, run, Classifier(), classification_data(),
        callbacks=[LearningRateBlowUp(blow_up, 50.0)])
    assert_diverged_at(run, blow_up)


def test_exception_leaves_an_exception_run(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="injected failure at step 6"):
        fit(pl, PostmortemCallback, run, Classifier(fail_at=6), classification_data())
    assert_exception_run(run, "injected failure at step 6", last_step=5)


def test_gan_with_two_optimizers_in_manual_optimisation(tmp_path):
    run = tmp_path / "run"
    fit(pl, PostmortemCallback, run, GAN(), real_points())
    manifest = read_manifest(run)
    assert manifest["status"] == "completed" and manifest["last_step"] == 2 * BATCHES - 1
    assert set(manifest["optimizers"]) == {"optimizer_0", "optimizer_1"}
    for name in ("loss_d", "loss_g", "hp.optimizer_0.0.lr", "hp.optimizer_1.0.lr"):
        steps, _ = scalar_series(run, name)
        assert steps.tolist() == list(range(2 * BATCHES)), name
    grads = read_table(run, "stats").query("role == 'grad'")
    assert {n.split(".")[0] for n in grads["name"]} == {"generator", "discriminator"}
    assert not grads["norm"].isna().any()
    steps, carried = scalar_series(run, "grad_carried_over")  # both zero_grad() their own
    assert steps.tolist() == list(range(2 * BATCHES)) and not carried.any()
    assert_healthy(run)


def test_manual_loop_that_never_steps_is_recorded_and_not_learning(tmp_path):
    """A training_step that forgets both opt.step(): no optimizer step ever happens, yet every
    batch is a recorded step, each saying that no optimizer stepped."""
    run = tmp_path / "run"
    fit(pl, PostmortemCallback, run, GAN(forget_steps=True), real_points())
    assert read_manifest(run)["last_step"] == 2 * BATCHES - 1
    for name in ("optimizer_stepped.optimizer_0", "optimizer_stepped.optimizer_1"):
        steps, stepped = scalar_series(run, name)
        assert steps.tolist() == list(range(2 * BATCHES)) and not stepped.any(), name
    analysis = postmortem.analyze(run)
    assert analysis.verdict == "not_learning"
    assert "no_update" in {f.label for f in analysis.findings}


def test_optimizer_step_override_that_only_runs_the_closure(tmp_path):
    """Automatic optimisation whose optimizer_step never calls optimizer.step(): one recorded
    step per accumulate_grad_batches batches all the same, none of them stepped."""
    run = tmp_path / "run"
    fit(pl, PostmortemCallback, run, ClosureOnly(), classification_data(), accumulate_grad_batches=2)
    steps, stepped = scalar_series(run, "optimizer_stepped.optimizer")
    assert steps.tolist() == list(range(BATCHES)) and not stepped.any()
    analysis = postmortem.analyze(run)
    assert analysis.verdict == "not_learning"
    assert "no_update" in {f.label for f in analysis.findings}


def test_pytorch_lightning_package_has_the_same_callback(tmp_path):
    import pytorch_lightning

    from recorders.integrations.pytorch_lightning import PostmortemCallback as Callback

    Module, *_ = modules(pytorch_lightning)
    run = tmp_path / "run"
    fit(pytorch_lightning, Callback, run, Module(), classification_data(), epochs=1)
    manifest = read_manifest(run)
    assert manifest["status"] == "completed" and manifest["last_step"] == BATCHES - 1


def test_missing_lightning_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    monkeypatch.delitem(sys.modules, "recorders.integrations.lightning")
    with pytest.raises(ImportError) as raised:
        import recorders.integrations.lightning  # noqa: F401
    message = str(raised.value)
    assert "\n" not in message and "pip install 'postmortem[lightning]'" in message
