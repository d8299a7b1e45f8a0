"""Detectors on small synthetic stat frames: each label fires on its signature and not on a
healthy run. Magnitudes are drawn around levels on both sides of each threshold."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pm_runs import make_run, scalar_rows, series_rows
from postmortem import analyze, load_run
from postmortem.detectors import Outcome, Thresholds
from postmortem.detectors.onsets import came_back
from postmortem.findings import Onset
from postmortem.series import read_series

STEPS = 120


def _noise(seed: int, scale: float = 0.05) -> np.ndarray:
    return 10 ** np.random.default_rng(seed).normal(0, scale, STEPS)


def _layers(names=("fc1", "fc2"), grad=1.0, ratio=1e-3, update=None, zero_frac=0.3, seed=0,
            act_sat=None, param_std=0.05):
    frames = []
    for i, name in enumerate(names):
        weight = f"{name}.weight"
        g = grad[i] if isinstance(grad, (list, tuple)) else grad
        frames.append(series_rows("param", weight, 5.0 * _noise(seed + i), mean=0.0, std=param_std))
        frames.append(series_rows("grad", weight, g * _noise(seed + 10 + i), zero_frac=0.0,
                                  grad_none=False))
        upd = update if update is not None else 5.0 * ratio * _noise(seed + 20 + i)
        frames.append(series_rows("update", weight, upd, ratio=ratio if update is None else 0.0))
        frames.append(series_rows("activation", name, 2.0 * _noise(seed + 30 + i),
                                  zero_frac=zero_frac, sat_frac=act_sat))
    frames.append(series_rows("input", "input", 1.0 * _noise(seed + 40), mean=0.0, std=1.0))
    return pd.concat(frames, ignore_index=True)


def _manifest(names=("fc1", "fc2"), fan_in=64, requires_grad=None):
    requires_grad = requires_grad or {}
    return {
        "schema_version": 1,
        "models": {"model": {
            "modules": [{"name": n, "type": "Linear"} for n in names],
            "parameters": [{"name": f"{n}.weight", "shape": [32, fan_in], "dtype": "float32",
                            "requires_grad": requires_grad.get(n, True)} for n in names],
        }},
    }


def _loss(kind: str, seed: int = 0) -> np.ndarray:
    t = np.arange(STEPS)
    noise = _noise(seed + 50, 0.02)
    if kind == "learning":
        return (2.0 * np.exp(-t / 30) + 0.05) * noise
    return 2.3 * noise  # flat


def _labels(tmp_path, stats, loss, manifest=None, extra_scalars=()):
    scalars = pd.concat([scalar_rows("loss", loss), scalar_rows("lr", np.full(STEPS, 0.01)),
                         *extra_scalars], ignore_index=True)
    run = make_run(tmp_path / "run", stats, scalars, manifest or _manifest())
    analysis = analyze(run)
    return analysis, {f.label for f in analysis.findings}


@pytest.mark.parametrize("seed", [0, 1])
def test_healthy_run_is_healthy(tmp_path, seed):
    analysis, labels = _labels(tmp_path, _layers(seed=seed), _loss("learning", seed))
    assert analysis.verdict == "healthy" and labels == {"healthy"}
    assert analysis.to_json()["diagnoses"][0]["label"] == "healthy"


def test_no_update_when_grads_flow_but_updates_are_zero(tmp_path):
    stats = _layers(update=np.zeros(STEPS))
    analysis, labels = _labels(tmp_path, stats, _loss("flat"))
    assert "no_update" in labels and analysis.verdict == "not_learning"
    finding = next(f for f in analysis.findings if f.label == "no_update")
    assert "optimizer.step()" in finding.fix


def test_no_gradient_names_the_cut_off_layers(tmp_path):
    stats = _layers()
    cut = (stats["role"] == "grad") & (stats["name"] == "fc1.weight") & (stats["step"] >= 40)
    stats.loc[cut, "norm"] = 0.0
    stats.loc[cut, "grad_none"] = True
    analysis, labels = _labels(tmp_path, stats, _loss("learning"))
    finding = next(f for f in analysis.findings if f.label == "no_gradient")
    assert finding.tensors == ["fc1.weight"]
    assert "detach" in finding.fix


def test_frozen_parameters_are_not_reported(tmp_path):
    stats = _layers()
    cut = (stats["role"] == "grad") & (stats["name"] == "fc1.weight")
    stats.loc[cut, "grad_none"] = True
    manifest = _manifest(requires_grad={"fc1": False})
    _, labels = _labels(tmp_path, stats, _loss("learning"), manifest)
    assert "no_gradient" not in labels


def _accumulating(t0: int | None, seed: int, mean: float = 0.15) -> tuple[pd.DataFrame, np.ndarray]:
    """Layers whose recorded gradients are running sums from `t0` on (no zero_grad() there):
    G_t0 = g_{t0-1} + g_t0, and so on. Returns the stats and the global grad norm."""
    rng = np.random.default_rng(seed)
    stats = _layers(seed=seed)
    stats = stats[stats["role"] != "grad"]
    squares = np.zeros(STEPS)
    frames = [stats]
    for name, dims in (("fc1.weight", 40), ("fc2.weight", 10)):
        fresh = rng.normal(mean, 1.0, size=(STEPS, dims))
        recorded = fresh.copy()
        if t0 is not None:
            recorded[t0 - 1:] = np.cumsum(fresh[t0 - 1:], axis=0)
        norms = np.linalg.norm(recorded, axis=1)
        squares += norms**2
        frames.append(series_rows("grad", name, norms, zero_frac=0.0, grad_none=False))
    return pd.concat(frames, ignore_index=True), np.sqrt(squares)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_stale_gradients_from_a_random_step(tmp_path, seed):
    t0 = int(np.random.default_rng(100 + seed).integers(30, 90))
    stats, grad_norm = _accumulating(t0, seed)
    analysis, labels = _labels(tmp_path, stats, _loss("flat"),
                               extra_scalars=[scalar_rows("grad_norm", grad_norm)])
    assert "stale_gradients" in labels
    stale = next(f for f in analysis.findings if f.label == "stale_gradients")
    assert abs(stale.step - t0) <= 2  # a continuous bend fits a concave sum a step or two early
    low, high = stale.evidence["onset_interval"]
    assert low <= stale.step <= high


def test_no_stale_gradients_without_accumulation(tmp_path):
    stats, grad_norm = _accumulating(None, 4)
    _, labels = _labels(tmp_path, stats, _loss("flat"),
                        extra_scalars=[scalar_rows("grad_norm", grad_norm)])
    assert "stale_gradients" not in labels


def test_no_stale_gradients_when_the_norm_explodes(tmp_path):
    # Exponential growth moves by a growing multiple of the gradient each step, not by one.
    grad = np.ones(STEPS)
    grad[60:] = 1.5 ** np.arange(STEPS - 60)
    stats = _layers()
    stats = pd.concat([stats[stats["role"] != "grad"],
                       series_rows("grad", "fc1.weight", grad * _noise(3), zero_frac=0.0, grad_none=False),
                       series_rows("grad", "fc2.weight", grad * _noise(4), zero_frac=0.0, grad_none=False)],
                      ignore_index=True)
    _, labels = _labels(tmp_path, stats, _loss("flat"))
    assert "stale_gradients" not in labels


def test_accumulation_then_explosion_dates_the_divergence_at_the_accumulation(tmp_path):
    t0 = 50
    stats, grad_norm = _accumulating(t0, 5)
    blow = np.ones(STEPS)
    blow[100:] = 10.0 ** np.arange(1, STEPS - 99)  # the accumulated step finally explodes
    stats.loc[stats["role"] == "grad", "norm"] *= np.tile(blow, 2)
    loss = _loss("flat")
    loss[100:] *= blow[100:]
    analysis, labels = _labels(tmp_path, stats, loss,
                               extra_scalars=[scalar_rows("grad_norm", grad_norm * blow)])
    assert analysis.verdict == "diverged" and "stale_gradients" in labels
    assert abs(analysis.onset.step - t0) <= 2


def test_finite_accumulation_whose_loss_drifts_is_not_learning_not_diverged(tmp_path):
    # The accumulated gradient climbs ×100 (a running sum: the divergence machinery fires), the
    # loss only drifts up ×1.5 over the steps after: the run stopped learning, it did not break.
    t0 = 20
    stats, grad_norm = _accumulating(t0, 6, mean=10.0)
    loss = _loss("flat")
    loss[t0:] *= np.linspace(1.0, 1.5, STEPS - t0)
    analysis, labels = _labels(tmp_path, stats, loss, extra_scalars=[scalar_rows("grad_norm", grad_norm)])
    assert analysis.verdict == "not_learning" and "stale_gradients" in labels and "diverged" not in labels
    loss[t0 + 2:] *= 1.5  # the same run whose loss jumps at once broke
    analysis, labels = _labels(tmp_path / "jump", stats, loss, extra_scalars=[scalar_rows("grad_norm", grad_norm)])
    assert analysis.verdict == "diverged" and "stale_gradients" in labels


def _early_growth_then_rescale(learning: bool) -> tuple[pd.DataFrame, np.ndarray]:
    """fc1's gradient grows ×300 from step 15 (a credible break), fc2's weights are multiplied
    ×100 outside the optimizer at step 80, the loss ×50 from 81 (rising ×1.02 a step from 15 when not learning)."""
    stats = _layers()
    grow = np.ones(STEPS)
    grow[15:] = np.minimum(1.25 ** np.arange(STEPS - 15), 300.0)
    stats.loc[(stats["role"] == "grad") & (stats["name"] == "fc1.weight"), "norm"] *= grow
    scale = np.ones(STEPS)
    scale[80:] = 100.0
    stats.loc[(stats["role"] == "param") & (stats["name"] == "fc2.weight"), "norm"] *= scale
    update = (stats["role"] == "update") & (stats["name"] == "fc2.weight")
    jumped = stats.loc[update, "norm"].to_numpy().copy()
    jumped[80] = 99 * 5.0
    stats.loc[update, "norm"] = jumped
    loss = _loss("learning" if learning else "flat")
    if not learning:
        # The loss follows the gradient up (a gradient break the loss never feels is no onset).
        loss[15:] *= np.minimum(1.02 ** np.arange(STEPS - 15), 1.5)
    loss[81:] *= 50
    return stats, loss


def test_an_early_break_the_run_kept_learning_after_is_not_the_onset(tmp_path):
    # The loss fell far below its level at the early gradient break, then broke at the rescale.
    analysis, labels = _labels(tmp_path, *_early_growth_then_rescale(learning=True))
    assert analysis.onset.step == 80 and "weights_changed_outside_optimizer" in labels
    # A run that did not learn after the break keeps the break as its onset.
    analysis, labels = _labels(tmp_path / "flat", *_early_growth_then_rescale(learning=False))
    assert analysis.onset.step < 40 and "weights_changed_outside_optimizer" not in labels


def test_vanishing_gradient_in_the_first_layer(tmp_path):
    stats = _layers(names=("fc1", "fc2", "fc3"), grad=[1e-7, 1e-3, 1.0])
    analysis, labels = _labels(tmp_path, stats, _loss("flat"), _manifest(("fc1", "fc2", "fc3")))
    assert "vanishing_gradient" in labels
    finding = next(f for f in analysis.findings if f.label == "vanishing_gradient")
    assert finding.tensors[0] == "fc1.weight"


def test_vanishing_gradient_in_a_recurrent_net_reads_its_weights_by_shape(tmp_path):
    # torch.nn.LSTM names its matrices `weight_ih_l0` / `weight_hh_l0`: by shape they are the
    # layers the signal crosses; its biases (1-D), whose gradients stay large, are not.
    params = {"a": ("rnn.weight_ih_l0", [128, 32], 1e-7), "b": ("rnn.bias_ih_l0", [128], 1.0),
              "c": ("rnn.weight_ih_l1", [128, 32], 1e-5), "d": ("rnn.bias_ih_l1", [128], 1.0),
              "e": ("rnn.weight_hh_l1", [128, 32], 1e-3), "f": ("head.weight", [10, 32], 1.0)}
    stats = _layers(names=tuple(params), grad=[g for _, _, g in params.values()])
    stats["name"] = stats["name"].astype(str).map(lambda n: params[n.split(".")[0]][0] if n.endswith(".weight") else n)
    manifest = _manifest(tuple(params))
    manifest["models"]["model"]["parameters"] = [{"name": n, "shape": shape, "dtype": "float32", "requires_grad": True}
                                                 for n, shape, _ in params.values()]
    analysis, labels = _labels(tmp_path, stats, _loss("flat"), manifest)
    assert "vanishing_gradient" in labels
    assert next(f for f in analysis.findings if f.label == "vanishing_gradient").tensors[0] == "rnn.weight_ih_l0"


def test_dead_units(tmp_path):
    _, labels = _labels(tmp_path, _layers(zero_frac=0.97), _loss("flat"))
    assert "dead_units" in labels
    _, labels = _labels(tmp_path / "ok", _layers(zero_frac=0.5), _loss("learning"))
    assert "dead_units" not in labels


def test_saturated_units(tmp_path):
    _, labels = _labels(tmp_path, _layers(act_sat=0.8), _loss("flat"))
    assert "saturated_units" in labels


@pytest.mark.parametrize("ratio,label", [(1e-7, "lr_too_low"), (1e-3, None)])
def test_lr_too_low_from_update_ratio(tmp_path, ratio, label):
    _, labels = _labels(tmp_path, _layers(ratio=ratio), _loss("flat"))
    assert ("lr_too_low" in labels) == (label is not None)


def test_lr_too_low_reads_past_the_matrices_that_started_at_zero(tmp_path):
    # LoRA at a tiny lr: A (a normal init) barely moves; B starts at 0, so its norm grows ×10 and
    # its update/param ratio (1e-2) follows that start, not the step size.
    names = ("a1", "b1", "a2", "b2")
    stats = _layers(names=names, ratio=1e-7)
    for name in ("b1", "b2"):
        param = (stats["role"] == "param") & (stats["name"] == f"{name}.weight")
        stats.loc[param, "norm"] = np.linspace(1e-3, 1e-2, STEPS)
        stats.loc[(stats["role"] == "update") & (stats["name"] == f"{name}.weight"), "ratio"] = 1e-2
    _, labels = _labels(tmp_path, stats, _loss("flat"), _manifest(names))
    assert "lr_too_low" in labels


def test_unscaled_inputs(tmp_path):
    stats = _layers()
    inputs = stats["role"] == "input"
    stats.loc[inputs, "max_abs"] = 3600.0
    stats.loc[inputs, "mean"] = 1800.0
    _, labels = _labels(tmp_path, stats, _loss("learning"))
    assert "unscaled_inputs" in labels


@pytest.mark.parametrize("std,expected", [(0.0, True), (1e-4, True), (0.1, False)])
def test_poor_init_from_weight_scale(tmp_path, std, expected):
    # fan_in 64: std 0.1 → std·sqrt(fan_in) = 0.8, within the usual schemes.
    _, labels = _labels(tmp_path, _layers(param_std=std), _loss("learning"))
    assert ("poor_init" in labels) == expected


def test_loss_plateau(tmp_path):
    _, labels = _labels(tmp_path, _layers(), _loss("flat"))
    assert "loss_plateau" in labels


def test_recovered_loss_spike_is_informational(tmp_path):
    loss = _loss("learning")
    at = int(np.random.default_rng(3).integers(40, 90))
    loss[at] *= 50
    analysis, labels = _labels(tmp_path, _layers(), loss)
    assert analysis.verdict == "healthy"
    spike = next(f for f in analysis.findings if f.label == "recovered_incident")
    assert spike.step == at and spike.severity == "note"


def test_nonfinite_input(tmp_path):
    stats = _layers()
    at = 70
    bad = (stats["role"] == "input") & (stats["step"] == at)
    stats.loc[bad, "nonfinite"] = 5
    analysis, labels = _labels(tmp_path, stats, _loss("learning"))
    assert "nonfinite_input" in labels
    assert analysis.first_nonfinite.step == at and analysis.first_nonfinite.role == "input"
    # The loss stayed finite and fell: the run learned on, the NaN batch is a warning beside a healthy verdict.
    cause = next(f for f in analysis.findings if f.label == "nonfinite_input")
    assert analysis.verdict == "healthy" and cause.severity == "warning"
    # The same batch in a run that does not learn explains it.
    flat, _ = _labels(tmp_path / "flat", stats, _loss("flat"))
    assert flat.verdict == "not_learning"
    assert next(f for f in flat.findings if f.label == "nonfinite_input").severity == "error"


@pytest.mark.parametrize("t0", [37, 81])
def test_finite_divergence_is_found_without_any_nan(tmp_path, t0):
    # The grad of fc2.weight jumps ×53 at t0 and grows; everything else follows from t0 + 1.
    stats = _layers()
    step = stats["step"]
    culprit = (stats["role"] == "grad") & (stats["name"] == "fc2.weight")
    followers = stats["role"].isin(["grad", "param", "activation", "update"]) & ~culprit
    stats.loc[culprit & (step >= t0), "norm"] *= 53 * 10.0 ** (0.5 * (step - t0))
    later = followers & (step > t0)
    for column in ("norm", "max_abs"):
        stats.loc[later, column] *= 10.0 ** (0.5 * (step[later] - t0))
    loss = _loss("learning")
    loss[t0 + 1:] *= 10.0 ** (0.8 * np.arange(1, STEPS - t0))
    analysis, labels = _labels(tmp_path, stats, loss)
    assert analysis.verdict == "diverged" and analysis.first_nonfinite is None
    assert analysis.onset.step == t0
    assert (analysis.ranking[0].tensor, analysis.ranking[0].role) == ("fc2.weight", "grad")
    assert analysis.ranking[0].jump == pytest.approx(53, rel=0.3)
    assert {"diverged", "exploding_gradient"} <= labels
    diverged = next(f for f in analysis.findings if f.label == "diverged")
    assert "max_norm=" in diverged.fix
    assert any("fc2.weight" in sentence and f"step {t0}" in sentence for sentence in analysis.chain)


def _raised_lr(at: int, factor: float) -> list[pd.DataFrame]:
    lr = np.full(STEPS, 0.01)
    lr[at:] *= factor
    return [scalar_rows("hp.optimizer.0.lr", lr)]


def test_a_finite_run_whose_loss_rose_for_good_after_an_lr_change_diverged_there(tmp_path):
    loss = _loss("learning")
    at = int(np.random.default_rng(7).integers(50, 90))
    loss[at:] = 1.5 * np.median(loss[at - 10: at]) + 0.5  # up after the change, and stays there
    manifest = {**_manifest(), "optimizers": {"optimizer": {"param_groups": [{"params": ["fc1.weight", "fc2.weight"]}]}}}
    analysis, labels = _labels(tmp_path, _layers(), loss, manifest, extra_scalars=_raised_lr(at, 300.0))
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    assert {"hyperparameter_changed", "lr_too_high"} <= labels
    # The same change in a run that keeps learning is no incident.
    _, labels = _labels(tmp_path / "fine", _layers(), _loss("learning"), manifest, extra_scalars=_raised_lr(at, 300.0))
    assert labels == {"healthy"}


def test_a_finite_run_whose_loss_rose_for_good_after_a_weight_rescale_diverged_there(tmp_path):
    loss = _loss("learning")
    at = int(np.random.default_rng(10).integers(50, 90))
    # ×300 at the rescale, then down to where the run began, where it stays (SAM's head ×100)
    loss[at:] = loss[0] + 300 * np.median(loss[at - 10: at]) * np.exp(-np.arange(STEPS - at) / 3.0)
    stats = _layers()
    weight = (stats["name"] == "fc2.weight") & (stats["step"] >= at)
    stats.loc[weight & (stats["role"] == "param"), "norm"] *= 100.0
    stats.loc[weight & (stats["role"] == "update") & (stats["step"] == at), "norm"] = 500.0  # the whole new norm
    analysis, labels = _labels(tmp_path, stats, loss)
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    assert "weights_changed_outside_optimizer" in labels


def test_a_finite_loss_that_ends_twice_where_it_began_ran_away(tmp_path):
    at = int(np.random.default_rng(8).integers(1, 60))
    loss = _loss("flat")
    loss[at:] *= 3.0  # ×3 from `at` on, for good, with no cause recorded
    analysis, _ = _labels(tmp_path, _layers(), loss)
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    # A held-out accuracy logged beside it that did not improve either changes nothing (round 36's
    # link predictor); one that improved judges the run (it learns: no runaway).
    flat_accuracy = scalar_rows("val_accuracy", 0.1 + np.random.default_rng(3).normal(0, 0.01, STEPS))
    analysis, _ = _labels(tmp_path / "flat_metric", _layers(), loss, extra_scalars=[flat_accuracy])
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    rising_accuracy = scalar_rows("val_accuracy", np.linspace(0.1, 0.9, STEPS))
    analysis, _ = _labels(tmp_path / "rising_metric", _layers(), loss, extra_scalars=[rising_accuracy])
    assert analysis.verdict != "diverged" and analysis.outcome.judged_by == "val_accuracy"
    loss = _loss("flat")
    loss[at:] *= 1.5  # worse, not run away: a run that does not learn
    analysis, _ = _labels(tmp_path / "worse", _layers(), loss)
    assert analysis.verdict == "not_learning"


def test_lookup_tables_have_no_init_scale_for_their_first_updates_to_erase(tmp_path):
    names = ("u_embeddings", "v_embeddings")
    manifest = _manifest(names)
    first_updates_erase = _layers(names, ratio=0.9)
    _, labels = _labels(tmp_path, first_updates_erase, _loss("learning"), manifest)
    assert "lr_too_high" in labels  # weights of maps (Linear) that the first steps wiped
    for module in manifest["models"]["model"]["modules"]:
        module["type"] = "Embedding"
    _, labels = _labels(tmp_path / "tables", first_updates_erase, _loss("learning"), manifest)
    assert labels == {"healthy"}  # word2vec's tables: rows at ±0.5/dim and zeros


def test_a_weight_whose_first_updates_erase_it_is_told_by_its_shape_not_its_name(tmp_path):
    # efficient-kan's weights kept in a ParameterDict (`fc1.weight.base`), an LSTM's `weight_ih_l0`:
    # matrices by the manifest's shape, whatever their names end with.
    stats = _layers(ratio=0.9)
    stats["name"] = stats["name"].astype(str).str.replace(".weight", ".weight.base", regex=False)
    manifest = _manifest()
    for entry in manifest["models"]["model"]["parameters"]:
        entry["name"] += ".base"
    _, labels = _labels(tmp_path, stats, _loss("learning"), manifest)
    assert "lr_too_high" in labels
    # The same first updates on one-dimensional gains (a LayerNorm's weight) erase no fan-in init.
    for entry in manifest["models"]["model"]["parameters"]:
        entry["shape"] = [32]
    _, labels = _labels(tmp_path / "gains", stats, _loss("learning"), manifest)
    assert labels == {"healthy"}


def test_a_gan_whose_sample_distance_rose_for_good_after_an_lr_change_diverged_there(tmp_path):
    # Two adversarial losses and no single training loss: the sample distance judges the run.
    at = int(np.random.default_rng(11).integers(50, 90))
    distance = np.concatenate([np.linspace(1.2, 0.7, at), np.full(STEPS - at, 1.3)]) * _noise(4)
    manifest = {**_manifest(), "optimizers": {"optimizer": {"param_groups": [{"params": ["fc1.weight", "fc2.weight"]}]}}}

    def gan(root, distance):
        scalars = pd.concat([scalar_rows("loss_d", -0.1 * _noise(3)), scalar_rows("loss_g", 0.2 * _noise(5)),
                             scalar_rows("lr", np.full(STEPS, 0.01)), *_raised_lr(at, 300.0),
                             scalar_rows("sliced_wasserstein", distance)], ignore_index=True)
        analysis = analyze(make_run(root, _layers(), scalars, manifest))
        return analysis, {f.label for f in analysis.findings}

    analysis, labels = gan(tmp_path / "run", distance)
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    assert "hyperparameter_changed" in labels
    # The same change while the distance keeps falling is no incident.
    fine, labels = gan(tmp_path / "fine", np.linspace(1.2, 0.5, STEPS) * _noise(4))
    assert fine.verdict == "healthy" and "hyperparameter_changed" not in labels


def test_a_finite_run_whose_loss_rose_after_an_lr_change_and_came_back_recovered_from_it(tmp_path):
    loss = _loss("learning")
    at = int(np.random.default_rng(9).integers(50, 80))
    loss[at: at + 8] = 3 * np.median(loss[at - 10: at])  # up for 8 steps after the change, then back
    manifest = {**_manifest(), "optimizers": {"optimizer": {"param_groups": [{"params": ["fc1.weight", "fc2.weight"]}]}}}
    analysis, labels = _labels(tmp_path, _layers(), loss, manifest, extra_scalars=_raised_lr(at, 300.0))
    assert analysis.verdict == "healthy"
    incident = next(f for f in analysis.findings if f.label == "recovered_incident")
    assert incident.step == at and incident.severity == "warning"
    assert incident.evidence["causes"] == ["hyperparameter_changed"]
    # The same bump with no recorded cause names none and warns of nothing.
    bare, labels = _labels(tmp_path / "bare", _layers(), loss)
    assert bare.verdict == "healthy" and "hyperparameter_changed" not in labels
    assert not [f for f in bare.findings if f.label == "recovered_incident" and f.severity == "warning"]
    # A one-off batch out of range whose spike passed is a recovered loss spike that names the
    # batch as its cause (a warning), not an incident's onset: the run stays healthy.
    stats = _layers()
    stats.loc[(stats["role"] == "input") & (stats["step"] == at), "max_abs"] *= 1e3
    spiked = loss.copy()
    spiked[at] *= 400
    batch, labels = _labels(tmp_path / "batch", stats, spiked)
    assert batch.verdict == "healthy" and batch.onset is None
    spike = next(f for f in batch.findings if f.label == "recovered_incident")
    assert (spike.step, spike.severity, spike.evidence["causes"]) == (at, "warning", ["batch_out_of_range"])
    cause = next(f for f in batch.findings if f.label == "batch_out_of_range")
    assert cause.severity == "warning" and cause.step == at
    # The same spike with every batch in range names no cause: a note.
    plain, _ = _labels(tmp_path / "plain", _layers(), spiked)
    spike = next(f for f in plain.findings if f.label == "recovered_incident")
    assert (spike.severity, spike.evidence["causes"]) == ("note", [])
    # A batch out of range that the loss never felt is a warning of its own, beside a healthy
    # verdict; with a spike elsewhere it is still named at its own step.
    unfelt, labels = _labels(tmp_path / "unfelt", stats, loss)
    assert unfelt.verdict == "healthy" and unfelt.onset is None
    warned = next(f for f in unfelt.findings if f.label == "batch_out_of_range")
    assert (warned.step, warned.severity, warned.evidence["loss_felt_it"]) == (at, "warning", False)
    elsewhere = loss.copy()
    elsewhere[at + 20] *= 400
    both, _ = _labels(tmp_path / "both", stats, elsewhere)
    assert [(f.step, f.severity) for f in both.findings if f.label == "batch_out_of_range"] == [(at, "warning")]


def test_a_finite_run_whose_loss_a_batch_out_of_range_spiked_for_good_diverged_there(tmp_path):
    at = int(np.random.default_rng(8).integers(50, 90))
    stats = _layers()
    batch = (stats["role"] == "input") & (stats["step"] == at)
    stats.loc[batch, "max_abs"] *= 1e3  # a batch in other units (×1e3)
    loss = _loss("learning")
    level = np.median(loss[at - 10: at])
    loss[at] = 400 * level
    loss[at + 1:] = 1.4 * level  # the spike passes, the loss never comes back
    analysis, labels = _labels(tmp_path, stats, loss)
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    assert "batch_out_of_range" in labels and analysis.ranking[0].tensor == "input"
    # The same spike without an out-of-range batch (new data, seed 000's domain switch) is a note.
    analysis, labels = _labels(tmp_path / "data", _layers(), loss)
    assert analysis.verdict == "healthy" and "batch_out_of_range" not in labels
    # No spike at all: the batch went into BatchNorm's running statistics (round 16,
    # batch_scale-pix2pix), the loss rose ×1.4 at once and stayed there: diverged at the batch.
    unspiked = loss.copy()
    unspiked[at] = 1.4 * level
    analysis, labels = _labels(tmp_path / "unspiked", stats, unspiked)
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    assert "batch_out_of_range" in labels
    # The verdict follows the loss: what it was before the batch, after it and at the end.
    shift = next(f for f in analysis.findings if f.label == "diverged").evidence
    assert shift["judged_by"] == "loss" and shift["before_onset"] == pytest.approx(np.median(loss[at - 10: at]))
    assert shift["after_onset"] == pytest.approx(1.4 * level) and shift["at_end"] == pytest.approx(1.4 * level)


def test_a_loss_spike_after_which_the_loss_climbs_for_good_diverged_there_first_out_of_range_layer_first(tmp_path):
    # Round 26 (weight_scale-sae): a layer's weights ×200 for one forward, undone by the loop's
    # own renormalisation before the parameters were recorded: the loss ×3e5 for one step, back
    # at once, then climbing ×1.8 for good. No cause is recorded; the spike dates the divergence
    # and the layer whose output left its range first leads the ranking.
    at = int(np.random.default_rng(9).integers(50, 90))
    loss = _loss("learning")
    level = np.median(loss[at - 10: at])
    loss[at] = 3e5 * level
    loss[at + 1:] = level * np.linspace(1.0, 1.8, STEPS - at - 1)
    stats = _layers()
    spiked = (stats["role"] == "activation") & (stats["step"] == at)
    stats.loc[spiked & (stats["name"] == "fc2"), "max_abs"] *= 200
    stats.loc[spiked & (stats["name"] == "fc1"), "max_abs"] *= 1.5  # before it: in range
    analysis, _ = _labels(tmp_path, stats, loss)
    assert analysis.verdict == "diverged" and analysis.onset.step == at
    assert (analysis.ranking[0].tensor, analysis.ranking[0].role) == ("fc2", "activation")
    # A parameter that jumped at the onset is upstream of any activation out of range there (round
    # 16's maml: fc2 ×300, the inner steps' adapted fc1 then out of range): it stays first.
    moved = stats.copy()
    moved.loc[(moved["role"] == "activation") & (moved["step"] == at) & (moved["name"] == "fc1"), "max_abs"] *= 200
    moved.loc[(moved["role"] == "param") & (moved["step"] >= at) & (moved["name"] == "fc2.weight"),
              ["norm", "max_abs"]] *= 300
    upstream, _ = _labels(tmp_path / "param", moved, loss)
    assert upstream.verdict == "diverged" and upstream.ranking[0].role == "param"
    assert upstream.ranking[0].tensor == "fc2.weight"
    # The same spike, the loss left higher but flat after it (new data as often as a fault): a note.
    loss[at + 1:] = 1.4 * level
    flat, _ = _labels(tmp_path / "flat", stats, loss)
    assert flat.verdict == "healthy"
    assert next(f for f in flat.findings if f.label == "recovered_incident").severity == "note"


@pytest.mark.parametrize("jumps", [True, False])
def test_an_accumulation_whose_loss_jumps_diverged_there(tmp_path, jumps):
    # Issue 12j (missing_zero_grad-gnn-s2): a running sum of noisy gradients grows short of a
    # log-space break; when the loss jumps where the accumulation began and stays up, the run
    # broke there (diverged, onset at the accumulation), else it stalled (not learning).
    t0 = 60
    stats, grad_norm = _accumulating(t0, 5)
    loss = _loss("flat") if not jumps else np.where(np.arange(STEPS) >= t0, 1.6, 1.0) * _loss("flat")
    analysis, labels = _labels(tmp_path, stats, loss, extra_scalars=[scalar_rows("grad_norm", grad_norm)])
    assert "stale_gradients" in labels
    if jumps:
        assert analysis.verdict == "diverged"
        assert abs(analysis.onset.step - t0) <= 2
    else:
        assert analysis.verdict == "not_learning"


def test_a_run_whose_reward_rises_while_its_loss_rises_learns(tmp_path):
    rising = np.linspace(80, 800, STEPS) * _noise(51, 0.02)  # REINFORCE's value term grows with the returns
    reward = scalar_rows("reward", np.linspace(20, 180, STEPS) * _noise(52, 0.02))
    analysis, labels = _labels(tmp_path, _layers(), rising, extra_scalars=[reward])
    assert analysis.verdict == "healthy"
    assert next(f for f in analysis.findings if f.label == "healthy").evidence["judged_by"] == "reward"
    bare, _ = _labels(tmp_path / "bare", _layers(), rising)
    assert bare.verdict != "healthy"
    # A layer cut off at 40 while the reward kept rising: the agent learns on without it (a
    # warning), read on the reward that judges the run, not on the surrogate loss.
    stats = _layers()
    cut = (stats["role"] == "grad") & (stats["name"] == "fc1.weight") & (stats["step"] >= 40)
    stats.loc[cut, "norm"] = 0.0
    stats.loc[cut, "grad_none"] = True
    cut_off, _ = _labels(tmp_path / "cut", stats, rising, extra_scalars=[reward])
    assert cut_off.verdict == "healthy"
    assert next(f for f in cut_off.findings if f.label == "no_gradient").severity == "warning"


def test_adversarial_losses_and_a_flat_sample_distance_do_not_learn(tmp_path):
    def run(path, distance):
        scalars = [scalar_rows("loss_d", -1.0 * _noise(53)), scalar_rows("loss_g", 0.5 * _noise(54)),
                   scalar_rows("lr", np.full(STEPS, 1e-3)), scalar_rows("sliced_wasserstein", distance)]
        return analyze(make_run(path, _layers(), pd.concat(scalars, ignore_index=True), _manifest()))

    flat = run(tmp_path / "flat", np.full(STEPS, 1.19) * _noise(55, 1e-7))
    plateau = next(f for f in flat.findings if f.label == "loss_plateau")
    assert flat.verdict == "not_learning" and plateau.evidence["metric"] == "sliced_wasserstein"
    assert run(tmp_path / "falls", np.linspace(1.2, 0.5, STEPS) * _noise(56, 0.02)).verdict == "healthy"



@pytest.mark.parametrize("run_learns", [True, False])
def test_an_agent_whose_return_stood_at_its_level_from_an_incident_recovered_only_if_the_run_learns(tmp_path, run_learns):
    # Round 19, missing_zero_grad-sac-s0: its return rose until the fault, then stood at that
    # level to the end: back at its level, but the incident took the progress (the whole run
    # does not learn), so it did not recover; a run that learns overall did.
    t0, steps = 60, np.arange(STEPS)
    reward = np.where(steps < t0, np.linspace(10, 20, STEPS), 20.0) * _noise(57, 0.01)
    run = load_run(make_run(tmp_path / "run", _layers(), pd.concat(
        [scalar_rows("loss", _loss("flat")), scalar_rows("reward", reward)], ignore_index=True), _manifest()))
    outcome = Outcome(run_learns, None, None, "loss", "reward", True)
    onset = Onset(step=t0, interval=(t0, t0), series="grad_norm", growth_per_step=None, doubling_steps=None,
                  jump=None, lead_steps=None)
    back = came_back(read_series(run), run.scalars(), onset, Thresholds().outcome, ignore_grads=False,
                     run_outcome=outcome)
    assert back is run_learns
