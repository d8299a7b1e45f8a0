"""Each registered rule on its small typed input, built by hand: one case where it fires and
one where it must not."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from postmortem.detectors import REGISTRY, Outcome, Thresholds, measure_outcome
from postmortem.detectors.base import adaptive_optimizer, metric_improved_since
from postmortem.detectors.activations import (
    ActivationShare,
    ActivationShares,
    SigmoidBounds,
    dead_units,
    log_of_zero,
    saturated_units,
)
from postmortem.detectors.divergence import (
    Clipping,
    Incident,
    LossSpike,
    _gradients_died_after,
    clipping,
    culprit_group_lr,
    diverged,
    exploding_gradient,
    lr_too_high,
    recovered_incident,
)
from postmortem.detectors.gradients import (
    GradientHistory,
    LayerGradients,
    SilentGradients,
    accumulation_broke,
    loss_jumped,
    no_gradient,
    stale_gradients,
    vanishing_gradient,
)
from postmortem.detectors.init import InitialWeight, InitialWeights, poor_init
from postmortem.detectors.inputs import InputFeatures, InputSeries, NonfiniteBatches, nonfinite_input, unscaled_inputs
from postmortem.detectors.outcome import (
    LossOutcome,
    learning_stopped,
    loss_came_back,
    loss_plateau,
    loss_rose_back,
    knocked_back,
    loss_spikes,
    metric_came_back,
    objective_settled,
)
from postmortem.detectors.root_causes import (
    OnsetWindow,
    Series,
    batch_out_of_range,
    batches_out_of_range,
    hyperparameter_changed,
    optimizer_state_changed,
    weights_changed_outside_optimizer,
)
from postmortem.detectors.updates import LossPace, UpdateActivity, UpdateRatios, lr_too_low, no_update
from postmortem.findings import LABELS, Finding, Onset
from postmortem.onset import SeriesBreak
from postmortem.ranking import TensorBreak, diverging

TH = Thresholds()
LEARNS = Outcome(True, 0.8, 0.01)
FLAT = Outcome(False, 0.0, 0.01)
N = 100
STEPS = np.arange(N)


def _noisy(level: float, seed: int, sigma: float = 0.02) -> np.ndarray:
    return level * 10 ** np.random.default_rng(seed).normal(0, sigma, N)


def test_every_label_has_one_rule_and_every_rule_its_thresholds():
    assert set(REGISTRY) | {"healthy"} == set(LABELS)
    for label, rule in REGISTRY.items():
        assert rule.label == label
        assert rule.family is None or hasattr(TH, rule.family)


# ---------------------------------------------------------------- outcome


def test_outcome_learns_from_a_falling_loss_and_not_from_noise():
    falling = 2.0 * np.exp(-STEPS / 30) + 0.1 + np.random.default_rng(0).normal(0, 0.01, N)
    flat = 2.3 + np.random.default_rng(1).normal(0, 0.05, N)
    assert measure_outcome(STEPS, falling, {}, TH.outcome).learns is True
    assert measure_outcome(STEPS, flat, {}, TH.outcome).learns is False
    rising_accuracy = np.linspace(0.1, 0.9, N)
    assert measure_outcome(STEPS, flat, {"accuracy": (rising_accuracy, True)}, TH.outcome).learns is True
    assert measure_outcome(STEPS[:5], flat[:5], {}, TH.outcome).learns is None
    # Blown up from the first step, then back where it began: learned nothing (nbeats at lr ×100).
    back = np.where(STEPS < N // 2, 200.0, 20.0) + np.random.default_rng(2).normal(0, 0.01, N)
    back[0] = 20.0
    outcome = measure_outcome(STEPS, back, {}, TH.outcome)
    assert outcome.learns is False and abs(outcome.improvement) < 0.01
    back[0] = 60.0  # ...while from a start above where it ends, the same run learned
    assert measure_outcome(STEPS, back, {}, TH.outcome).learns is True


def test_adaptive_optimizer_is_read_from_an_eps_hyperparameter():
    adam = pd.DataFrame({"step": [0, 0], "name": ["loss", "hp.0.eps"], "value": [1.0, 1e-8]})
    sgd = pd.DataFrame({"step": [0, 0], "name": ["loss", "hp.0.momentum"], "value": [1.0, 0.9]})
    assert adaptive_optimizer(adam) and not adaptive_optimizer(sgd)


def test_loss_plateau():
    flat = 2.3 + np.random.default_rng(1).normal(0, 0.05, N)
    outcome = measure_outcome(STEPS, flat, {}, TH.outcome)
    assert [f.label for f in loss_plateau(LossOutcome(STEPS, flat, outcome, False), TH.outcome)] == ["loss_plateau"]
    assert loss_plateau(LossOutcome(STEPS, flat, LEARNS, False), TH.outcome) == []


def _fell_and_rose(end: float) -> np.ndarray:
    """BYOL's shape: 1.8 for 6 steps, down to 0.8 by step 12, then a climb to `end`."""
    loss = np.concatenate([np.full(6, 1.8), np.linspace(1.8, 0.8, 6), np.linspace(0.8, end, N - 12)])
    return loss + np.random.default_rng(2).normal(0, 0.02, N)


def test_loss_rose_back_instead_of_a_plateau():
    rose = _fell_and_rose(1.1)  # back up, still below where it began: a warning, not a plateau
    outcome = measure_outcome(STEPS, rose, {}, TH.outcome)
    assert outcome.learns is False  # by the quarters, the run lost ground
    found = loss_rose_back(LossOutcome(STEPS, rose, outcome, False), TH.outcome)
    assert [(f.label, f.severity) for f in found] == [("loss_rose_back", "warning")]
    assert found[0].evidence["start"] == pytest.approx(1.8, abs=0.05)
    assert loss_plateau(LossOutcome(STEPS, rose, outcome, False), TH.outcome) == []
    for end in (0.8, 2.0):  # stayed down; or climbed back above where it began (a plateau)
        loss = _fell_and_rose(end)
        assert loss_rose_back(LossOutcome(STEPS, loss, measure_outcome(STEPS, loss, {}, TH.outcome), False), TH.outcome) == []
    above = LossOutcome(STEPS, loss, measure_outcome(STEPS, loss, {}, TH.outcome), False)
    assert [f.label for f in loss_plateau(above, TH.outcome)] == ["loss_plateau"]
    assert loss_rose_back(LossOutcome(STEPS, rose, outcome, True), TH.outcome) == []  # a divergence says it


def _knocked_back(spike_at: int, back_to: float) -> np.ndarray:
    """A fast learner: 2.0 down to 0.05 by step 30, flat there, then ×30 at `spike_at` and a fall
    to `back_to` by the end."""
    rng = np.random.default_rng(3)
    loss = np.concatenate([np.geomspace(2.0, 0.05, 30), np.full(spike_at - 30, 0.05)])
    after = np.geomspace(1.5, back_to, N - spike_at)
    return np.concatenate([loss, after]) * np.exp(rng.normal(0, 0.05, N))


def test_a_spike_never_come_back_from_after_learning_is_no_plateau():
    knocked = _knocked_back(70, 0.3)  # ends ×6 above where it was before the spike
    outcome = measure_outcome(STEPS, knocked, {}, TH.outcome)
    assert outcome.learns is False  # by the quarters, the run lost ground
    assert loss_plateau(LossOutcome(STEPS, knocked, outcome, False), TH.outcome) == []
    found = loss_rose_back(LossOutcome(STEPS + 5, knocked, outcome, False), TH.outcome)
    assert [(f.label, f.severity, f.step) for f in found] == [("loss_rose_back", "warning", 75)]
    assert found[0].evidence["level_before_spike"] == pytest.approx(0.05, rel=0.1)
    assert knocked_back(_knocked_back(70, 0.06), TH.outcome) is None  # back below ×2 of its level: recovered
    never_learned = np.concatenate([np.full(70, 0.05), knocked[70:]])  # the spike in a run flat until then
    assert knocked_back(never_learned, TH.outcome) is None


def _queue_filling(first: float, rise_at: int = 1) -> np.ndarray:
    """MoCo's shape: a first loss against a random queue, 4.8 once it holds real keys (by
    `rise_at`, 4.1 a step before), then learning down to 3.2."""
    loss = np.concatenate([np.full(rise_at, first), [4.1, 4.8], np.geomspace(4.8, 3.2, N - rise_at - 2)])
    return loss * np.exp(np.random.default_rng(5).normal(0, 0.01, N))


def test_a_loss_that_rose_while_the_weights_stood_still_settles_where_it_stopped_rising():
    still = tuple(np.full(64, 1e-4) for _ in range(6))  # every weight moved 1e-4 of its norm a step
    assert objective_settled(_queue_filling(0.9), still, TH.outcome) == 2
    assert objective_settled(_queue_filling(0.9, rise_at=2), still, TH.outcome) == 3
    # The same rise after steps that moved the weights ×1 of their norm is the step size's doing.
    moved = tuple(np.full(64, 1.0) for _ in range(6))
    assert objective_settled(_queue_filling(0.9), moved, TH.outcome) is None
    # A rise that came back soon to the first loss, one too small, one too late, one from a first loss
    # at or below 0 (a log-likelihood), none without update ratios: no settling.
    back = _queue_filling(0.9)
    back[60:] = 0.95  # learned back to the first loss: the rise was still no spike
    assert objective_settled(back, still, TH.outcome) == 2
    back[8:] = 0.95  # back within 10 losses: a spike, not a new objective
    assert objective_settled(back, still, TH.outcome) is None
    assert objective_settled(_queue_filling(3.5), still, TH.outcome) is None  # 4.1 is ×1.17
    assert objective_settled(_queue_filling(0.9, rise_at=4), still, TH.outcome) is None
    assert objective_settled(_queue_filling(0.9) - 5.0, still, TH.outcome) is None
    assert objective_settled(_queue_filling(0.9), (), TH.outcome) is None


def _spiked_loss(back_after: int | None, end: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """150 steps: loss 1.0 until step 50, ×5 there, back to 1.0 `back_after` steps later (never:
    None), then falling to `end`."""
    steps = np.arange(150)
    loss = np.ones(150)
    loss[50:] = 5.0
    if back_after is not None:
        loss[50 + back_after:] = np.linspace(1.0, end, 150 - 50 - back_after)
    return steps, loss


def test_a_loss_that_came_back_soon_and_ends_there_came_back():
    assert loss_came_back(*_spiked_loss(10), 50, TH.outcome)
    # Back only after 60 of the 99 steps that follow: most of the run went to getting back.
    assert not loss_came_back(*_spiked_loss(60), 50, TH.outcome)
    # Back, but ends above its level before the incident; never back at all.
    assert not loss_came_back(*_spiked_loss(10, end=1.3), 50, TH.outcome)
    assert not loss_came_back(*_spiked_loss(None), 50, TH.outcome)


def test_a_negative_loss_comes_back_only_to_its_own_level():
    # A flow's NLL in nats per dimension: −0.45 before the spike at 50; ending at −0.26 it lost
    # what it had gained since −0.26, so it did not come back; ending at −0.47 it did.
    steps, loss = _spiked_loss(10, end=-0.26)
    loss[:50] = -0.45
    assert not loss_came_back(steps, loss, 50, TH.outcome)
    loss[60:] = np.linspace(-0.45, -0.47, 90)
    assert loss_came_back(steps, loss, 50, TH.outcome)


def test_a_loss_whose_median_came_back_but_whose_mean_did_not_did_not_come_back():
    steps, loss = _spiked_loss(10)
    loss[100:] = 0.0  # certain and right on two steps of three: the median is back at 0...
    loss[100::3] = 9.0  # ...certain and wrong on the third: a mean 3× the level before
    assert np.median(loss[-10:]) == 0.0 and np.mean(loss[-10:]) > 2.0
    assert not loss_came_back(steps, loss, 50, TH.outcome)
    loss[100::3] = 1.5  # a mean of 0.5: back
    assert loss_came_back(steps, loss, 50, TH.outcome)


def test_an_incident_that_stopped_a_learning_run_stopped_it():
    # Falling from 3.5 to 3.0 until step 60, a jump there, then back near where it was and flat
    # to the end: the last quarter is no better than the first.
    rng = np.random.default_rng(2)
    steps = np.arange(150)
    loss = np.concatenate([np.linspace(3.5, 3.0, 60), 3.35 + rng.normal(0, 0.1, 90)]) + rng.normal(0, 0.02, 150)
    whole = measure_outcome(steps, loss, {}, TH.outcome)
    assert whole.learns is False and learning_stopped(steps, loss, 60, whole, TH.outcome)
    # A run that learns over the whole run was not stopped, whatever its incident.
    assert not learning_stopped(steps, loss, 60, LEARNS, TH.outcome)
    # Flat before the incident too: it never learned, so the incident did not stop it.
    flat = 3.35 + rng.normal(0, 0.1, 150)
    assert not learning_stopped(steps, flat, 60, measure_outcome(steps, flat, {}, TH.outcome), TH.outcome)


def test_loss_spikes_are_ten_times_the_recent_level():
    steps, loss = _spiked_loss(1)
    spikes, level = loss_spikes(loss, TH.outcome)
    assert list(spikes) == [] and level[60] == 1.0  # ×5 is no spike
    loss[50] = 12.0
    assert list(loss_spikes(loss, TH.outcome)[0]) == [50]
    # A loss below 0 (a flow's NLL at −0.5) spikes as far above it: −0.5 + 9 × 0.5 = 4.
    negative = np.full(100, -0.5)
    negative[50], negative[70] = 3.0, 5.0
    assert list(loss_spikes(negative, TH.outcome)[0]) == [70]


# ---------------------------------------------------------------- inputs


def test_nonfinite_input():
    found = nonfinite_input(NonfiniteBatches({"input": [70, 71]}), TH.inputs)
    assert found[0].step == 70 and found[0].tensors == ["input"] and found[0].severity == "error"
    assert nonfinite_input(NonfiniteBatches({}), TH.inputs) == []
    # A run that learned on regardless (the batch made finite downstream): a warning, not a verdict.
    survived = nonfinite_input(NonfiniteBatches({"input": [70]}, survived=True), TH.inputs)
    assert survived[0].severity == "warning" and survived[0].evidence["run_survived"]


def test_unscaled_inputs_skip_index_inputs_and_are_notes_in_a_run_that_learns():
    seconds = InputSeries("input", "float", 3600.0, 1800.0, 1000.0)
    tokens = InputSeries("input.input_ids", "index", 64.0, 31.0, 18.0)
    found = unscaled_inputs(InputFeatures([seconds, tokens], FLAT), TH.inputs)
    assert found[0].tensors == ["input"] and found[0].severity == "error"
    assert unscaled_inputs(InputFeatures([tokens], FLAT), TH.inputs) == []
    assert unscaled_inputs(InputFeatures([seconds], LEARNS), TH.inputs)[0].severity == "note"


# ---------------------------------------------------------------- gradients


def _silent(since: dict, learns=LEARNS, called=None, frozen=(), loss=None):
    names = list(since)
    return SilentGradients({n: 0 for n in names}, since, {n: (1.0 if s == 0 else 0.5) if s is not None else 0.0
                                                        for n, s in since.items()},
                           {n: N for n in names}, frozenset(frozen), learns, called, loss=loss)


def test_no_gradient_on_a_layer_cut_mid_run():
    grads = _silent({"fc1.weight": 50, "fc1.bias": 50, "fc2.weight": None, "fc2.bias": None})
    found = no_gradient(grads, TH)
    assert found[0].tensors == ["fc1.weight", "fc1.bias"] and found[0].severity == "error"
    assert "detach" in found[0].fix
    assert no_gradient(_silent({"fc1.weight": None, "fc2.weight": None}), TH) == []


def test_every_gradient_gone_after_the_first_steps_is_a_model_gone_flat_not_a_cut_graph():
    flat = _silent({"fc1.weight": 2, "fc1.bias": 1, "out.weight": 2}, learns=FLAT)
    found = no_gradient(flat, TH)
    assert found[0].severity == "error" and "none from step 2 on" in found[0].fix and "detach" not in found[0].fix
    # Silent from the first step: the loss never reached a parameter.
    unconnected = _silent({"fc1.weight": 0, "out.weight": 0}, learns=FLAT)
    assert "not connected to any parameter" in no_gradient(unconnected, TH)[0].fix


def test_a_cut_names_the_deepest_silent_layer_first():
    # A .detach() after embed and fc1: both lose their gradient at step 50, fc2 keeps it. The cut
    # sits right after fc1, so fc1 is named first, its parameters in model order.
    cut = {"embed.weight": 50, "fc1.weight": 50, "fc1.bias": 50, "fc2.weight": None}
    assert no_gradient(_silent(cut), TH)[0].tensors == ["fc1.weight", "fc1.bias", "embed.weight"]
    # A layer silent from an earlier step still comes first: the first silence dates the finding.
    earlier = {"embed.weight": 30, "fc1.weight": 50, "fc1.bias": 50, "fc2.weight": None}
    assert no_gradient(_silent(earlier), TH)[0].tensors == ["embed.weight", "fc1.weight", "fc1.bias"]


def test_a_lone_bias_without_gradient_is_structure_whatever_the_outcome():
    # A WGAN critic's output bias cancels in E[D(fake)] - E[D(real)]: zero from the first step.
    lone = {"fc1.weight": None, "fc1.bias": None, "out.weight": None, "out.bias": 0}
    for outcome in (LEARNS, FLAT):
        assert no_gradient(_silent(lone, learns=outcome), TH)[0].severity == "note"
    # A weight whose bias still learns (the layer after dead units) is no structure where the run
    # does not learn, nor is a bias that went silent mid-run.
    dead_input = {"fc1.weight": None, "fc1.bias": None, "out.weight": 0, "out.bias": None}
    assert no_gradient(_silent(dead_input, learns=FLAT), TH)[0].severity == "error"
    late = {"fc1.weight": None, "fc1.bias": None, "out.weight": None, "out.bias": 40}
    assert no_gradient(_silent(late, learns=FLAT), TH)[0].severity == "error"


def test_a_layer_cut_off_in_a_run_that_keeps_learning_is_a_warning():
    steps = np.arange(100)
    cut = {"fc1.weight": 50, "fc1.bias": 50, "fc2.weight": None, "fc2.bias": None}
    # The head keeps learning on frozen features: the loss halves after the cut at step 50.
    learning = (steps, np.where(steps < 50, 2.0 - 0.02 * steps, 1.0 * 0.99 ** (steps - 50)))
    found = no_gradient(_silent(cut, loss=learning), TH)
    assert found[0].severity == "warning" and found[0].tensors == ["fc1.weight", "fc1.bias"]
    assert found[0].evidence["loss_gain_since"] > 0.2 and "step 50" in found[0].fix
    # The loss falls 5 % more after the cut: the run still learns, the cut warns.
    slower = (steps, np.where(steps < 50, 2.0 - 0.02 * steps, 1.0 - 0.001 * (steps - 50)))
    assert no_gradient(_silent(cut, loss=slower), TH)[0].severity == "warning"
    # Learning stops at the cut (the loss no lower than over the 10 steps before it): the cut
    # explains a run that does not learn.
    stalled = (steps, np.where(steps < 50, 2.0 - 0.02 * steps, 1.11 + 0.0001 * (steps - 50)))
    assert no_gradient(_silent(cut, loss=stalled), TH)[0].severity == "error"
    # ...and so it does in a run that does not learn by its own yardstick at all.
    assert no_gradient(_silent(cut, learns=FLAT, loss=learning), TH)[0].severity == "error"
    # An evaluation every 10 steps leaves too few points after the cut to measure a gain: the
    # outcome, a run that learns, says it alone (round 19: SAC's evaluation return).
    sparse = (steps[::10], learning[1][::10])
    found = no_gradient(_silent(cut, loss=sparse), TH)
    assert found[0].severity == "warning" and found[0].evidence["loss_gain_since"] is None
    assert no_gradient(_silent(cut, learns=FLAT, loss=sparse), TH)[0].severity == "error"


def _knn(steps: np.ndarray, rise_from: int, noise: float = 0.5) -> dict:
    """A held-out accuracy flat at 70 % with noise, rising by 15 points from `rise_from` on."""
    values = 70.0 + np.random.default_rng(0).normal(0, noise, len(steps)) + 15.0 * np.clip((steps - rise_from) / 40, 0, 1)
    return {"val_knn_top1": (steps, values, True)}


def test_metric_improved_since_reads_only_the_points_from_just_before_the_step():
    steps = np.arange(150)
    assert metric_improved_since(_knn(steps, 90), 80, TH.outcome) == "val_knn_top1"
    assert metric_improved_since(_knn(steps, 10), 80, TH.outcome) is None  # it rose before, flat since
    # Lower is better for an error; fewer than min_steps points since say nothing.
    error = {"val_error": (steps, 30.0 - 0.1 * steps, False)}
    assert metric_improved_since(error, 100, TH.outcome) == "val_error"
    assert metric_improved_since(error, 145, TH.outcome) is None
    # By a plain rule: the metric's points from the last one before the step, first quarter against last.
    knn = _knn(steps, 90)["val_knn_top1"][1][79:]
    quarter = len(knn) // 4
    assert np.median(knn[-quarter:]) - np.median(knn[:quarter]) > 10


def test_a_cut_in_a_run_whose_outcome_metric_improves_since_is_a_warning_whatever_the_loss_did():
    # Round 36's DINO: its loss (a cross-entropy to a moving teacher) rose after step 50 in healthy runs
    # too; the teacher's kNN accuracy, the outcome, rose after the cut.
    steps = np.arange(150)
    cut = {"backbone.weight": 80, "head.weight": None}
    rising = (steps, np.where(steps < 50, 6.0 - 0.02 * steps, 5.0 + 0.005 * (steps - 50)))
    found = no_gradient(replace(_silent(cut, loss=rising), metrics=_knn(steps, 90)), TH)
    assert found[0].severity == "warning" and found[0].evidence["metric_improved_since"] == "val_knn_top1"
    assert "val_knn_top1 better since" in found[0].fix
    assert no_gradient(replace(_silent(cut, loss=rising), metrics=_knn(steps, 10)), TH)[0].severity == "error"
    assert no_gradient(_silent(cut, loss=rising), TH)[0].severity == "error"
    # Carried-over gradients likewise, in a run that learns by its own yardstick.
    carrying = replace(_carrying([0.0] * 70 + [1.0] * 80, rising[1]), metrics=_knn(steps, 90), learns=True)
    found = stale_gradients(carrying, TH)
    assert found[0].severity == "note" and "val_knn_top1 still improved since" in found[0].fix
    assert stale_gradients(replace(carrying, learns=False), TH)[0].severity == "error"
    assert stale_gradients(replace(carrying, metrics=_knn(steps, 10)), TH)[0].severity == "error"


def test_zero_gradient_by_construction_is_a_note_naming_the_tensor():
    names = {"attn.k_proj.weight": None, "attn.k_proj.bias": 0, "attn.q_proj.weight": None,
             "attn.q_proj.bias": None, "head.weight": None}
    called = frozenset({"attn.k_proj", "attn.q_proj", "head"})
    found = no_gradient(_silent(names, called=called), TH)
    assert found[0].tensors == ["attn.k_proj.bias"] and found[0].severity == "note"
    # The same bias in a run that does not learn is still structure: the run has another reason.
    assert no_gradient(_silent(names, learns=FLAT, called=called), TH)[0].severity == "note"
    # A whole layer that runs and gets no gradient from the start is cut off, not structure.
    whole = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": None, "fc2.bias": None, "fc3.weight": None}
    cut = no_gradient(_silent(whole, called=frozenset({"fc1", "fc2", "fc3"})), TH)
    assert cut[0].severity == "error"


def test_one_module_silent_behind_layers_that_learn_is_a_dead_end_not_a_cut():
    # WaveNet's last block feeds only its skip: its residual conv runs, and no loss reads it.
    wavenet = {"start.weight": None, "blocks.0.filter.weight": None, "blocks.0.residual.weight": None,
               "blocks.1.filter.weight": None, "blocks.1.residual.weight": 0, "blocks.1.residual.bias": 0,
               "blocks.1.skip.weight": None, "end.weight": None}
    called = frozenset(n.rpartition(".")[0] for n in wavenet)
    found = no_gradient(_silent(wavenet, called=called), TH)
    assert found[0].tensors == ["blocks.1.residual.weight", "blocks.1.residual.bias"]
    assert found[0].severity == "note" and "no loss reads" in found[0].fix
    # The same dead end in a run that does not learn explains nothing away.
    assert no_gradient(_silent(wavenet, learns=FLAT, called=called), TH)[0].severity == "error"
    # A second silent module, top-level, with nothing of its own that learns: cut off...
    two = {**wavenet, "end.weight": 0}
    assert no_gradient(_silent(two, called=called), TH)[0].severity == "error"
    # ...and so is one that went silent mid-run.
    late = {**wavenet, "blocks.1.residual.weight": 40, "blocks.1.residual.bias": 40}
    assert no_gradient(_silent(late, called=called), TH)[0].severity == "error"


def test_layers_silent_beside_learning_siblings_behind_learning_layers_are_structure():
    # A Set Transformer's SABs after PMA with one seed attend over a set of one: softmax over one
    # key is 1, so their key projections never get a gradient while their queries and values do.
    sab = {"enc.0.fc_q.weight": None, "enc.0.fc_k.weight": None, "pma.fc_q.weight": None,
           "dec.1.fc_q.weight": None, "dec.1.fc_k.weight": 0, "dec.1.fc_k.bias": 0, "dec.1.fc_v.weight": None,
           "dec.2.fc_q.weight": None, "dec.2.fc_k.weight": 0, "dec.2.fc_k.bias": 0, "dec.2.fc_v.weight": None,
           "out.weight": None}
    called = frozenset(n.rpartition(".")[0] for n in sab)
    found = no_gradient(_silent(sab, called=called), TH)
    assert found[0].severity == "note" and len(found) == 1
    assert sorted(found[0].tensors) == ["dec.1.fc_k.bias", "dec.1.fc_k.weight", "dec.2.fc_k.bias", "dec.2.fc_k.weight"]
    # The first layers of a stack silent from the start, the next one learning: a cut (a
    # torch.no_grad() or .detach() after layers.1), however much their parent's others learn.
    prefix = {"layers.0.weight": 0, "layers.1.weight": 0, "layers.2.weight": None, "head.weight": None}
    found = no_gradient(_silent(prefix, called=frozenset({"layers.0", "layers.1", "layers.2", "head"})), TH)
    assert found[0].severity == "error"


def test_structure_silent_from_the_start_does_not_date_a_later_cut():
    # An attention key bias (silent from step 0) in a model whose blocks are cut off at step 50:
    # the cut is its own finding, dated and measured from step 50.
    steps = np.arange(100)
    since = {"embed.weight": 50, "attn.k_proj.weight": 50, "attn.k_proj.bias": 0, "head.weight": None}
    stalled = (steps, np.where(steps < 50, 2.0 - 0.02 * steps, 1.11 + 0.0001 * (steps - 50)))
    note, cut = no_gradient(_silent(since, called=frozenset({"embed", "attn.k_proj", "head"}), loss=stalled),
                            TH)
    assert (note.tensors, note.severity, note.step) == (["attn.k_proj.bias"], "note", 0)
    assert cut.tensors == ["attn.k_proj.weight", "embed.weight"] and cut.step == 50 and cut.severity == "error"
    assert cut.evidence["loss_gain_since"] < 0.01


def _accumulating(t0: int | None, seed: int = 0, n: int = 120) -> GradientHistory:
    rng = np.random.default_rng(seed)
    steps = np.arange(n)
    per_tensor, squares = [], np.zeros(n)
    for dims in (40, 10):
        fresh = rng.normal(0.15, 1.0, size=(n, dims))
        if t0 is not None:
            fresh[t0 - 1:] = np.cumsum(fresh[t0 - 1:], axis=0)
        norms = np.linalg.norm(fresh, axis=1)
        per_tensor.append((steps, norms))
        squares += norms**2
    return GradientHistory(steps, np.sqrt(squares), per_tensor, steps, np.full(n, 2.3))


def test_stale_gradients():
    found = stale_gradients(_accumulating(60), TH)
    assert found and abs(found[0].step - 60) <= 2
    assert stale_gradients(_accumulating(None), TH) == []


def test_stale_gradients_climb_ends_at_its_peak():
    # The sum stops growing and fades once fresh gradients turn against it: still a missing
    # zero_grad(), read over the climb up to its peak (rising on ≥ 65 % of those steps).
    history = _accumulating(40)
    fade = np.ones(120)
    fade[75:] = np.linspace(1.0, 0.4, 45)
    faded = GradientHistory(history.steps, history.norm * fade, [(s, v * fade) for s, v in history.per_tensor],
                            history.loss_steps, history.loss)
    found = stale_gradients(faded, TH)
    assert found and abs(found[0].step - 40) <= 2 and found[0].evidence["rising_share"] >= TH.gradients.stale_rising
    # A norm that only falls after the same start is no accumulation.
    falling = GradientHistory(history.steps, history.norm[::-1].copy(), [(s, v[::-1].copy()) for s, v in history.per_tensor],
                              history.loss_steps, history.loss)
    assert stale_gradients(falling, TH) == []


def test_stale_gradients_start_is_searched_before_a_sharper_later_bend():
    # The sum starts at 40; at 110 every gradient jumps ×4 (a step the sum ends in): that bend
    # outscores the start and its climb (one ×4 step, then flat) is no sum, so the start is
    # searched before it.
    history = _accumulating(40, n=140)
    jump = np.where(history.steps >= 110, 4.0, 1.0)
    jumped = GradientHistory(history.steps, history.norm * jump, [(s, v * jump) for s, v in history.per_tensor],
                             history.loss_steps, history.loss)
    found = stale_gradients(jumped, TH)
    assert found and abs(found[0].step - 40) <= 2
    assert stale_gradients(jumped, replace(TH, gradients=replace(TH.gradients, stale_earlier_bends=0))) == []
    # The same jump without an accumulation before it is no missing zero_grad().
    plain = _accumulating(None, n=140)
    plain = GradientHistory(plain.steps, plain.norm * jump, [(s, v * jump) for s, v in plain.per_tensor],
                            plain.loss_steps, plain.loss)
    assert stale_gradients(plain, TH) == []


def _carrying(shares, loss=None) -> GradientHistory:
    """A history whose recorder saw `grad_carried_over` = `shares`, a step each; no norm climb."""
    quiet = _accumulating(None, n=len(shares))
    loss = np.full(len(shares), 2.3) if loss is None else loss
    return replace(quiet, loss=loss, carried=(quiet.steps, np.asarray(shares, dtype=float)))


def test_stale_gradients_from_the_recorders_signal():
    found = stale_gradients(_carrying([0.0] * 47 + [1.0] * 73), TH)
    assert [f.step for f in found] == [47] and found[0].severity == "error"
    assert found[0].evidence["onset_interval"] == [47, 47]
    # A quarter of the parameters carried over (a GAN's generator alone) is enough...
    assert [f.step for f in stale_gradients(_carrying([0.0] * 60 + [0.3] * 60), TH)] == [60]
    # ...one parameter in twenty (one outside every optimizer) is not.
    assert stale_gradients(_carrying([0.0] * 60 + [0.05] * 60), TH) == []


def test_stale_gradients_needs_carrying_that_persists():
    accidents = [0.0] * 120
    for step in (20, 55, 56, 90):  # zero_grad skipped once here and there
        accidents[step] = 1.0
    assert stale_gradients(_carrying(accidents), TH) == []
    # An accident just before the fault does not date it early.
    early = [0.0] * 40 + [1.0, 0.0] + [0.0] * 8 + [1.0] * 70
    assert [f.step for f in stale_gradients(_carrying(early), TH)] == [50]
    # Carried over for a while, then zeroed again for good: no lasting fault.
    assert stale_gradients(_carrying([0.0] * 40 + [1.0] * 10 + [0.0] * 70), TH) == []


def test_stale_gradients_in_a_run_whose_loss_improves_is_a_note():
    falling = np.linspace(2.3, 0.5, 120)
    found = stale_gradients(_carrying([0.0] * 47 + [1.0] * 73, falling), TH)
    assert [(f.step, f.severity) for f in found] == [(47, "note")]
    # Carried from the first record on (accumulation across rec.step() calls on purpose).
    found = stale_gradients(_carrying([0.0] + [1.0] * 119, falling), TH)
    assert [(f.step, f.severity) for f in found] == [(1, "note")]
    # A loss that goes non-finite after the onset is no improvement.
    broke = falling.copy()
    broke[100:] = np.nan
    assert stale_gradients(_carrying([0.0] * 47 + [1.0] * 73, broke), TH)[0].severity == "error"
    # Nor does a loss that ends lower in a run whose summed gradients ran away: the run diverged,
    # and the carried-over gradients explain it.
    ran_away = replace(_carrying([0.0] * 47 + [1.0] * 73, falling), diverged=True)
    assert stale_gradients(ran_away, TH)[0].severity == "error"


def test_stale_gradients_with_the_signal_ignores_the_norm():
    """A run with the scalar is decided by it: a norm climbing like a sum with nothing carried
    over is not a missing zero_grad()."""
    climbing = _accumulating(60)
    assert stale_gradients(replace(climbing, carried=(climbing.steps, np.zeros(120))), TH) == []


def test_loss_jumped_tells_a_broken_accumulation_from_one_that_stopped_learning():
    drift = np.concatenate([np.full(50, 0.05), np.linspace(0.05, 0.09, 50)])  # ×1.8, slowly
    assert not loss_jumped(STEPS, drift, (50, 50), TH.gradients)
    jump = drift.copy()
    jump[53] = 0.07  # ×1.4 within 10 steps of the onset
    assert loss_jumped(STEPS, jump, (50, 50), TH.gradients)
    exploded = drift.copy()
    exploded[90:] = 10.0  # ×200 later on
    assert loss_jumped(STEPS, exploded, (50, 50), TH.gradients)


def test_loss_jumped_from_every_step_of_the_bends_interval():
    # The bend is dated within 48–52: the loss broke only if it jumped whichever of those steps
    # the accumulation began at. A jump 9 steps after 50 is within 10 steps of 50–52...
    late = np.concatenate([np.full(50, 0.05), np.linspace(0.05, 0.06, 50)])
    late[59] = 0.07
    assert loss_jumped(STEPS, late, (50, 52), TH.gradients)
    # ...but not of 48: from there the loss only drifted.
    assert not loss_jumped(STEPS, late, (48, 52), TH.gradients)


def test_accumulation_broke_reads_the_loss_from_where_the_accumulation_began():
    stale = [Finding("stale_gradients", 50, [], {"onset_interval": [50, 51]}, "")]
    jump = np.concatenate([np.full(50, 0.05), np.full(50, 0.08)])  # ×1.6 from the accumulation on
    assert accumulation_broke(stale, STEPS, jump, TH.gradients)
    drift = np.concatenate([np.full(50, 0.05), np.linspace(0.05, 0.09, 50)])
    assert not accumulation_broke(stale, STEPS, drift, TH.gradients)
    assert not accumulation_broke([], STEPS, jump, TH.gradients)  # no accumulation, nothing to say
    assert not accumulation_broke(stale, STEPS[:0], jump[:0], TH.gradients)  # no loss, no jump
    assert not accumulation_broke(stale, STEPS[48:], jump[48:], TH.gradients)  # 2 losses before: too few


def test_vanishing_gradient_needs_layers_shrinking_toward_the_input_and_no_learning():
    shrinking = LayerGradients([("fc1.weight", 1e-9), ("fc2.weight", 1e-6), ("fc3.weight", 1e-3),
                                ("fc4.weight", 1.0)], FLAT)
    assert vanishing_gradient(shrinking, TH.gradients)[0].tensors == ["fc1.weight"]
    assert vanishing_gradient(replace(shrinking, outcome=LEARNS), TH.gradients) == []
    # After an lr that erased the init, the vanished gradients follow from it: a note pointing at the lr.
    after = vanishing_gradient(replace(shrinking, lr_erased_init=True), TH.gradients)[0]
    assert after.severity == "note" and "learning rate" in after.fix and "re-initialise" not in after.fix
    assert vanishing_gradient(shrinking, TH.gradients)[0].severity == "error"
    # One tiny tensor among healthy ones (a key bias) is not a vanishing gradient.
    lone = LayerGradients([("emb.weight", 1e-2), ("attn.k_proj.weight", 3e-10), ("attn.v_proj.weight", 1e-2),
                           ("head.weight", 1e-2)], FLAT)
    assert vanishing_gradient(lone, TH.gradients) == []


# ---------------------------------------------------------------- updates


def _activity(update_since, stepped=None, lr=0.1):
    grads = _silent({"fc.weight": None, "fc.bias": None})
    updates = _silent({"fc.weight": update_since, "fc.bias": update_since})
    return UpdateActivity(grads, {"fc.weight": 0.1, "fc.bias": 0.1}, updates, None,
                          stepped or (np.zeros(0, np.int64), np.zeros(0)), lr)


def test_no_update():
    found = no_update(_activity(0, (STEPS, np.zeros(N))), TH)
    assert found[0].label == "no_update" and "optimizer.step()" in found[0].fix
    assert found[0].evidence["optimizer_stepped"] == 0.0
    assert no_update(_activity(None), TH) == []


def _ratios(*values, growth=None) -> UpdateRatios:
    """Weight matrices' update ratios in model order, each norm kept (×1) unless `growth` says."""
    return UpdateRatios(np.array(values), np.ones(len(values), bool),
                        np.array(growth if growth is not None else [1.0] * len(values)))


def test_lr_too_low():
    slow = 2.0 - 0.004 * STEPS  # a straight, slow descent: 20 % in the whole run
    outcome = measure_outcome(STEPS, slow, {}, TH.outcome)
    found = lr_too_low(LossPace(slow, _ratios(1e-3), 1e-3, outcome, False), TH.updates)
    assert found and "lr 0.001 → 0.01" in found[0].fix
    # Updates above the CS231n ratio are not said to be below it.
    assert "below" not in lr_too_low(LossPace(slow, _ratios(1e-2), 1e-3, outcome, False), TH.updates)[0].fix
    flat = np.full(N, 2.3)
    assert lr_too_low(LossPace(flat, _ratios(1e-7), 1e-7, FLAT, False), TH.updates)
    # Tiny updates from gradients that vanish toward the input are not a step size to raise: the
    # output-side half of the matrices (model order) moves at 1e-3.
    vanishing = _ratios(1e-7, 1e-7, 1e-7, 1e-3, 1e-3)
    assert lr_too_low(LossPace(flat, vanishing, 1e-3, FLAT, False, gradients_vanish=True), TH.updates) == []
    # ...unless an adaptive optimizer (its steps follow the lr) barely moves the layers near the loss either.
    assert lr_too_low(LossPace(flat, _ratios(1e-7, 1e-7, 1e-6), 1e-7, FLAT, False, gradients_vanish=True,
                               adaptive=True), TH.updates)
    # Under SGD the step is lr × gradient: a vanished signal makes the output side's steps tiny too (seed 003).
    assert lr_too_low(LossPace(flat, _ratios(1e-7, 1e-7, 1e-6), 1e-2, FLAT, False, gradients_vanish=True),
                      TH.updates) == []
    converging = 2.0 * np.exp(-STEPS / 20) + 0.1
    outcome = measure_outcome(STEPS, converging, {}, TH.outcome)
    assert lr_too_low(LossPace(converging, _ratios(1e-3), 0.1, outcome, False), TH.updates) == []
    # An optimizer that never stepped is no lr to raise (a VQ-VAE's codebook still moves by its EMA).
    assert lr_too_low(LossPace(flat, _ratios(1e-7), 1e-3, FLAT, False, stepless=True), TH.updates) == []
    # Nor a run in which no parameter gets a gradient: Adam's steps decay to 0 at any lr.
    assert lr_too_low(LossPace(flat, _ratios(5e-5), 0.05, FLAT, False, adaptive=True, gradientless=True),
                      TH.updates) == []
    # Nor a run whose first updates erased its init (lr_too_high), its units dead since.
    assert lr_too_low(LossPace(flat, _ratios(1e-7), 1e-1, FLAT, False, too_high=True), TH.updates) == []
    # A matrix that started at 0 (LoRA's B, norm ×10 by the end) moves by its start, not the lr: left out.
    lora = _ratios(1e-7, 1e-2, 1e-7, 1e-2, growth=[1.0, 10.0, 1.0, 10.0])
    assert lr_too_low(LossPace(flat, lora, 1e-7, FLAT, False), TH.updates)
    assert lr_too_low(LossPace(flat, _ratios(1e-7, 1e-2, 1e-7, 1e-2), 1e-7, FLAT, False), TH.updates) == []


# ---------------------------------------------------------------- activations and init


def test_dead_and_saturated_units_are_verdicts_only_in_a_run_that_does_not_learn():
    layers = [ActivationShare("fc1", 0.97, float("nan")), ActivationShare("sig", 0.0, 0.8),
              ActivationShare("fc2", 0.4, float("nan"))]
    dead = dead_units(ActivationShares(layers, FLAT), TH.activations)
    sat = saturated_units(ActivationShares(layers, FLAT), TH.activations)
    assert dead[0].tensors == ["fc1"] and sat[0].tensors == ["sig"]
    assert dead[0].severity == sat[0].severity == "error"
    assert dead_units(ActivationShares(layers, LEARNS), TH.activations)[0].severity == "note"
    healthy = [ActivationShare("fc1", 0.5, float("nan")), ActivationShare("sig", 0.0, 0.1)]
    assert dead_units(ActivationShares(healthy, FLAT), TH.activations) == []
    assert saturated_units(ActivationShares(healthy, FLAT), TH.activations) == []


def test_log_of_zero_names_the_sigmoid_whose_outputs_reached_a_bound_before_the_nan_loss():
    steps = np.arange(40)
    top = np.full(40, 0.97)
    top[30:] = 0.99999988  # 1 − 2 float32 ulps from step 30
    sigmoid = (steps, top, np.zeros(40), np.full(40, 0.25))
    found = log_of_zero(SigmoidBounds({"D.sigmoid": sigmoid}, ("loss_d", 40), 40), TH.activations)
    assert found[0].tensors == ["D.sigmoid"] and found[0].step == 30
    assert "BCEWithLogitsLoss" in found[0].fix
    # A tensor went non-finite before the loss: the loss only followed, not log(0).
    assert log_of_zero(SigmoidBounds({"D.sigmoid": sigmoid}, ("loss_d", 40), 35), TH.activations) == []
    far = (steps, np.full(40, 0.97), np.zeros(40), np.full(40, 0.25))
    assert log_of_zero(SigmoidBounds({"D.sigmoid": far}, ("loss_d", 40), 40), TH.activations) == []


def test_poor_init():
    zeros = InitialWeights([InitialWeight("fc.weight", 0.0, 0.0, 64, (8, 8))], FLAT)
    assert poor_init(zeros, TH.init)[0].tensors == ["fc.weight"]
    default = InitialWeights([InitialWeight("fc.weight", 0.58 / 8, 4.6, 64, (8, 8))], FLAT)
    assert poor_init(default, TH.init) == []
    # A LayerNorm's gain starts at ones: constant (std 0), not zero; a tiny lr keeps it there.
    gain = InitialWeights([InitialWeight("norm.weight", 0.0, 8.0, 64, (64,))], FLAT)
    assert poor_init(gain, TH.init) == []
    # One head scaled down on purpose (CleanRL's actor at gain 0.01) beside sane layers is a note...
    hidden = [InitialWeight(f"fc{i}.weight", 0.58 / 8, 4.6, 64, (8, 8)) for i in range(3)]
    head = InitialWeight("actor.weight", 0.01 / 8, 0.08, 64, (8, 8))
    assert poor_init(InitialWeights([*hidden, head], FLAT), TH.init)[0].severity == "note"
    # ...while most of the matrices started wrong explain a run that does not learn (seed 003).
    small = [replace(w, std=0.01 / 8) for w in hidden]
    assert poor_init(InitialWeights([*small, head], FLAT), TH.init)[0].severity == "error"


# ---------------------------------------------------------------- root causes


def _window(onset=60, **series) -> OnsetWindow:
    base = dict(hyperparameters={}, groups={"opt.0": ["fc1.weight"], "opt.1": ["fc2.weight"]},
                params={}, updates={}, grads={}, states={}, batches={})
    base.update(series)
    return OnsetWindow(onset, 0, severity="error", **base)


def _lr_series(change_at=None, factor=300.0, warmup=10):
    lr = np.minimum(1.0, (STEPS + 1) / warmup) * 1e-3
    if change_at is not None:
        lr[change_at:] *= factor
    return Series(STEPS, lr)


def test_hyperparameter_changed_names_the_group_and_both_values():
    window = _window(onset=70, hyperparameters={"hp.opt.1.lr": _lr_series(55), "hp.opt.0.lr": _lr_series()})
    found = hyperparameter_changed(window, TH.root_causes)
    assert found[0].step == 55 and found[0].tensors == ["fc2.weight"]
    assert found[0].evidence["before"] == pytest.approx(1e-3) and found[0].evidence["factor"] == pytest.approx(300)
    # A warm-up, and a decaying step schedule, are no cause.
    decay = _lr_series(55, factor=0.1)
    assert hyperparameter_changed(_window(hyperparameters={"hp.opt.0.lr": _lr_series(), "hp.opt.1.lr": decay}),
                                  TH.root_causes) == []


def test_a_change_still_in_force_at_the_onset_counts_however_long_before():
    # lr ×300 at 45 on a decaying schedule; the fitted onset at 110 is 65 steps later (lookback 40).
    decaying = _lr_series(45).values * np.linspace(1.0, 0.2, N)
    window = _window(onset=110, hyperparameters={"hp.opt.1.lr": Series(STEPS, decaying)})
    assert [f.step for f in hyperparameter_changed(window, TH.root_causes)] == [45]
    # Undone at 60 (÷300): no longer in force at the onset, and too far before it.
    undone = decaying.copy()
    undone[60:] /= 300
    window = _window(onset=110, hyperparameters={"hp.opt.1.lr": Series(STEPS, undone)})
    assert hyperparameter_changed(window, TH.root_causes) == []


def _param_case(scale_at=None, grad_jump=1.0):
    norm = _noisy(5.0, 1, 0.001)
    update = _noisy(5e-3, 2)
    grad = _noisy(1.0, 3)
    if scale_at is not None:
        norm[scale_at:] *= 100
        update[scale_at] = 99 * norm[scale_at - 1]
        grad[scale_at:] *= grad_jump
    return dict(params={"fc1.weight": Series(STEPS, norm)}, updates={"fc1.weight": Series(STEPS, update)},
                grads={"fc1.weight": Series(STEPS, grad)})


def test_weights_changed_outside_the_optimizer():
    found = weights_changed_outside_optimizer(_window(onset=62, **_param_case(60)), TH.root_causes)
    assert found[0].step == 60 and found[0].tensors == ["fc1.weight"]
    assert weights_changed_outside_optimizer(_window(**_param_case()), TH.root_causes) == []
    # Its group's lr raised at that step explains the update: that is hyperparameter_changed's.
    lr = _window(onset=62, hyperparameters={"hp.opt.0.lr": _lr_series(60, factor=1e4)}, **_param_case(60))
    assert weights_changed_outside_optimizer(lr, TH.root_causes) == []
    # A tensor no optimizer holds is the loop's to move (an EMA copy, MoCo's key encoder)...
    ema = _window(onset=62, groups={"opt.0": ["fc2.weight"]}, **_param_case(60))
    assert weights_changed_outside_optimizer(ema, TH.root_causes) == []
    # ...which only a manifest that lists the optimizers' parameters can say.
    assert weights_changed_outside_optimizer(_window(onset=62, groups={}, **_param_case(60)), TH.root_causes)[0].step == 60


def test_an_update_beyond_adams_largest_step_was_not_the_optimizers_whatever_its_gradient_did():
    # Weights ×100 before the forward at 60: the gradient read after it jumps ×1e8 too (round 37's
    # LSTM ×300), which would explain an SGD step; under Adam (its group has betas) a step is at
    # most lr·(1 − β1)/√(1 − β2) an element, 3.2e-3 × √100 here, and the update was 495.
    case = _param_case(60, grad_jump=1e8)
    sgd = _window(onset=62, hyperparameters={"hp.opt.0.lr": Series(STEPS, np.full(N, 1e-3))}, numel={"fc1.weight": 100},
                  **case)
    assert weights_changed_outside_optimizer(sgd, TH.root_causes) == []
    adam_hp = {"hp.opt.0.lr": Series(STEPS, np.full(N, 1e-3)), "hp.opt.0.eps": Series(STEPS, np.full(N, 1e-8)),
               "hp.opt.0.beta1": Series(STEPS, np.full(N, 0.9)), "hp.opt.0.beta2": Series(STEPS, np.full(N, 0.999))}
    adam = _window(onset=62, hyperparameters=adam_hp, numel={"fc1.weight": 100}, **case)
    found = weights_changed_outside_optimizer(adam, TH.root_causes)
    assert found[0].step == 60 and found[0].tensors == ["fc1.weight"]
    # At an lr whose step can be that large (10: up to 950 over the tensor) it may be the optimizer's.
    big_lr = {**adam_hp, "hp.opt.0.lr": Series(STEPS, np.full(N, 10.0))}
    assert weights_changed_outside_optimizer(_window(onset=62, hyperparameters=big_lr, numel={"fc1.weight": 100}, **case),
                                             TH.root_causes) == []
    # Without the tensor's size, or the betas (RMSprop's first steps reach lr/√(1 − α)), no bound is
    # known: the gradient's jump explains it, as for SGD.
    assert weights_changed_outside_optimizer(_window(onset=62, hyperparameters=adam_hp, **case), TH.root_causes) == []
    rmsprop = {k: v for k, v in adam_hp.items() if "beta" not in k}
    assert weights_changed_outside_optimizer(_window(onset=62, hyperparameters=rmsprop, numel={"fc1.weight": 100}, **case),
                                             TH.root_causes) == []


def test_sgds_momentum_buffer_explains_an_update_that_outlived_its_gradients_jump():
    # Gradients ×300 at 58-59, back down by 60: SGD's buffer still carries them, so the step at 60
    # (×110, the weights ×2.1) follows the buffer, not the gradient of that step.
    norm, update, grad, buffer = _noisy(5.0, 1, 0.001), _noisy(0.05, 2), _noisy(1.0, 3), _noisy(1.0, 4)
    norm[60:] *= 2.1
    update[60] = 5.5
    grad[58:60] *= 300
    buffer[58:] *= 300
    case = dict(params={"fc1.weight": Series(STEPS, norm)}, updates={"fc1.weight": Series(STEPS, update)},
                grads={"fc1.weight": Series(STEPS, grad)})
    assert weights_changed_outside_optimizer(_window(onset=62, **case), TH.root_causes)[0].step == 60  # unexplained
    states = {("fc1.weight", "momentum_buffer"): Series(STEPS, buffer)}
    assert weights_changed_outside_optimizer(_window(onset=62, states=states, **case), TH.root_causes) == []
    # Adam's first moment explains nothing (its step is divided by the second moment's root)...
    adam = {**states, ("fc1.weight", "exp_avg"): Series(STEPS, buffer)}
    del adam["fc1.weight", "momentum_buffer"]
    found = weights_changed_outside_optimizer(_window(onset=62, states=adam, **case), TH.root_causes)
    assert found[0].step == 60
    # ...nor a buffer of an optimizer whose group has an eps (Muon's step is orthogonalised).
    muon = _window(onset=62, states=states, hyperparameters={"hp.opt.0.eps": Series(STEPS, np.full(len(STEPS), 1e-7))},
                   **case)
    assert weights_changed_outside_optimizer(muon, TH.root_causes)[0].step == 60


def test_a_reset_second_moment_explains_its_tensors_update_jump():
    # Adam's exp_avg_sq zeroed at 60 and refilled by that step's g²: it fell only ÷3 (under the
    # ÷10 that names the cause), yet no EMA falls that fast, so the optimizer made the jump.
    exp_avg_sq = _noisy(1e-4, 7)
    exp_avg_sq[60:] /= 3
    reset = {("fc1.weight", "exp_avg_sq"): Series(STEPS, exp_avg_sq)}
    assert weights_changed_outside_optimizer(_window(onset=62, states=reset, **_param_case(60)), TH.root_causes) == []
    # A second moment that only decays as an EMA may (×0.99) explains nothing.
    decaying = {("fc1.weight", "exp_avg_sq"): Series(STEPS, _noisy(1e-4, 7) * 0.99 ** STEPS)}
    found = weights_changed_outside_optimizer(_window(onset=62, states=decaying, **_param_case(60)), TH.root_causes)
    assert found[0].step == 60 and found[0].tensors == ["fc1.weight"]


def test_optimizer_state_changed_when_a_second_moment_collapses():
    exp_avg_sq = _noisy(1e-4, 7)
    exp_avg_sq[60:] *= 0.05  # zeroed, then one step of (1 - β2)·g²
    found = optimizer_state_changed(_window(onset=62, states={("fc1.weight", "exp_avg_sq"): Series(STEPS, exp_avg_sq)}),
                                    TH.root_causes)
    assert found[0].step == 60 and found[0].tensors == ["fc1.weight"]
    # A signed state may cancel to ~0 when the gradient turns: not a cause.
    signed = optimizer_state_changed(_window(onset=62, states={("fc1.weight", "exp_avg"): Series(STEPS, exp_avg_sq)}),
                                     TH.root_causes)
    assert signed == []
    steady = {("fc1.weight", "exp_avg_sq"): Series(STEPS, _noisy(1e-4, 7))}
    assert optimizer_state_changed(_window(onset=62, states=steady), TH.root_causes) == []


def test_batch_out_of_range():
    batch = _noisy(3.0, 4)
    batch[60] *= 1e3
    found = batch_out_of_range(_window(onset=60, batches={"input": Series(STEPS, batch)}), TH.root_causes)
    assert found[0].step == 60 and found[0].tensors == ["input"]
    assert batch_out_of_range(_window(onset=60, batches={"input": Series(STEPS, _noisy(3.0, 4))}),
                              TH.root_causes) == []
    # Away from the onset it is no cause of that incident.
    assert batch_out_of_range(_window(onset=90, batches={"input": Series(STEPS, batch)}), TH.root_causes) == []


def test_a_batch_out_of_range_in_a_run_with_no_incident_is_a_warning_of_its_own():
    batch = _noisy(3.0, 4)
    batch[[60, 75]] *= 1e3
    found = batch_out_of_range(_window(onset=None, batches={"input": Series(STEPS, batch)}), TH.root_causes)
    assert [(f.step, f.tensors, f.severity) for f in found] == [(int(STEPS[60]), ["input"], "warning")]
    assert found[0].evidence["loss_felt_it"] is False and found[0].evidence["batches_out_of_range"] == 1
    assert "running statistics" in found[0].fix  # what a batch the loss did not feel may still have broken
    assert batch_out_of_range(_window(onset=None, batches={"input": Series(STEPS, _noisy(3.0, 4))}),
                              TH.root_causes) == []


def test_an_index_batch_is_out_of_range_only_above_every_id_before_it():
    labels = np.full(len(STEPS), 255.0)  # class maps with the ignore index 255 in every batch...
    labels[60] = 4.0  # ...but one: no fault
    window = _window(onset=None, batches={"target": Series(STEPS, labels)}, batch_kinds={"target": "index"})
    assert batches_out_of_range(window, TH.root_causes) == []
    labels[70] = 1e5  # an ID ×10 above every one before it
    assert batches_out_of_range(window, TH.root_causes) == [(int(STEPS[70]), "target")]
    # The same values as float features: ×64 below the range is out of it.
    floats = _window(onset=None, batches={"target": Series(STEPS, labels)}, batch_kinds={"target": "float"})
    assert batches_out_of_range(floats, TH.root_causes) == [(int(STEPS[60]), "target"), (int(STEPS[70]), "target")]


def test_batches_out_of_range_over_the_whole_run():
    batch, target = _noisy(3.0, 4), _noisy(1.0, 5)
    batch[[20, 70]] *= 1e3  # the second ×1e3 batch is in range of the first
    target[40] = 0.0  # a batch ×10 below every batch before it
    target[50] = np.nan  # non-finite: nonfinite_input's
    window = _window(onset=None, batches={"input": Series(STEPS, batch), "target": Series(STEPS, target)})
    assert batches_out_of_range(window, TH.root_causes) == [(int(STEPS[20]), "input"), (int(STEPS[40]), "target")]
    assert batches_out_of_range(_window(onset=None, batches={"input": Series(STEPS, _noisy(3.0, 4))}),
                                TH.root_causes) == []


# ---------------------------------------------------------------- divergence


def _break(role, name, onset, *, step_jump=50.0, amplified=True) -> TensorBreak:
    fit = SeriesBreak(f"{role} {name}", 0, onset, (onset, onset), 2.0, 1.0, step_jump, step_jump, 100.0,
                      1.0, 0.05, 1e6, True, True, amplified, 1.0)
    return TensorBreak(role, name, None, fit)


def _incident(**changes) -> Incident:
    onset = Onset(60, (60, 60), "grad fc2.weight", 2.0, 1.0, 50.0, 6)
    base = dict(diverged=True, recovered=False, onset=onset, first_nonfinite=None, culprits=["fc2.weight"],
                grad_breaks=[_break("grad", "fc2.weight", 60)], update_breaks=[], healthy_max_grad_norm=9.1,
                lr=0.05, first_update_ratio=1e-3, weight_update_ratios=(np.full(5, 1e-3),), steps_from_start=60,
                loss_first_alone=False,
                clipping=Clipping(False, ""), causes=[], nonfinite_input=None, log_of_zero=None)
    base.update(changes)
    return Incident(**base)


def test_diverged_quotes_the_lr_at_the_onset_and_never_says_clip_to_a_run_that_clips():
    found = diverged(_incident(), TH.divergence)
    assert "max_norm=9.1" in found[0].fix and "lr 0.05 at the onset" in found[0].fix
    clips = diverged(_incident(clipping=Clipping(True, "clip_coef recorded")), TH.divergence)
    assert "clip_grad_norm_" not in clips[0].fix
    assert diverged(_incident(recovered=True), TH.divergence) == []
    assert diverged(_incident(diverged=False), TH.divergence) == []


def test_exploding_gradient():
    assert exploding_gradient(_incident(), TH.divergence)[0].tensors == ["fc2.weight"]
    assert exploding_gradient(_incident(grad_breaks=[]), TH.divergence) == []
    clips = exploding_gradient(_incident(clipping=Clipping(True, "clip_coef recorded")), TH.divergence)
    assert "clip_grad_norm_" not in clips[0].fix


def test_lr_too_high():
    raised = Finding("hyperparameter_changed", 55, ["fc2.weight"],
                     {"hyperparameter": "hp.opt.1.lr", "before": 1e-3, "after": 0.3, "factor": 300.0,
                      "param_group": "1"}, "", "error")
    found = lr_too_high(_incident(causes=[raised]), TH.divergence)
    assert found[0].step == 55 and found[0].tensors == ["fc2.weight"] and "keep it at 0.001" in found[0].fix
    update_jump = _incident(update_breaks=[_break("update", "fc2.weight", 60)])
    assert lr_too_high(update_jump, TH.divergence)[0].tensors == ["fc2.weight"]
    assert lr_too_high(_incident(), TH.divergence) == []


def test_lr_too_high_dates_a_divergence_from_the_start_by_its_threshold():
    early = _incident(steps_from_start=2)
    found = lr_too_high(early, TH.divergence)
    assert found and found[0].evidence["diverged_from_start"] is True
    assert lr_too_high(early, replace(TH.divergence, from_start_steps=1)) == []


def test_lr_too_high_in_a_run_that_stayed_finite_reads_the_first_update_against_the_weights():
    erased = _incident(diverged=False, onset=None, weight_update_ratios=(np.full(5, 0.7), np.full(5, 0.9), np.full(5, 0.6)), lr=0.3)
    found = lr_too_high(erased, TH.divergence)
    assert found[0].severity == "error" and "0.7× their norm" in found[0].fix and "lr 0.3 → 0.03" in found[0].fix
    # A warm-up's (or any sane lr's) first updates are a small share of the weights.
    assert lr_too_high(_incident(diverged=False, onset=None, weight_update_ratios=(np.full(5, 0.02),)), TH.divergence) == []
    # Weights whose gradient wakes up (behind a layer scale of 1e-6) move little on the first step,
    # by their whole size within the first few: the largest of the first 5 counts, not later ones.
    waking = _incident(diverged=False, onset=None, weight_update_ratios=(np.array([0.05, 0.4, 6.0, 7.0, 7.0]),) * 3)
    assert lr_too_high(waking, TH.divergence)[0].evidence["early_update_ratio_median"] == 7.0
    assert lr_too_high(waking, replace(TH.divergence, erases_init_within=2)) == []
    late = _incident(diverged=False, onset=None, weight_update_ratios=(np.array([0.01] * 5 + [0.9] * 5),))
    assert lr_too_high(late, TH.divergence) == []
    assert lr_too_high(_incident(diverged=False, onset=None, first_update_ratio=0.7), TH.divergence) == []
    assert lr_too_high(replace(erased, inputs_unscaled=True), TH.divergence) == []  # the data's doing
    # A loss that fell 95 % learned regardless: a warning; one that fell 60 % is still not learning well.
    learned = lr_too_high(replace(erased, loss_improvement=0.95), TH.divergence)[0]
    assert learned.severity == "warning" and "fell 95% regardless" in learned.fix
    assert lr_too_high(replace(erased, loss_improvement=0.6), TH.divergence)[0].severity == "error"
    # An outcome metric that judged the run as learning where its loss rose: a warning too (round 36's DINO).
    judged = lr_too_high(replace(erased, loss_improvement=-0.7, learned_by="val_knn_top1"), TH.divergence)[0]
    assert judged.severity == "warning" and "val_knn_top1 improved regardless" in judged.fix


def test_lr_too_high_where_every_gradient_died_after_far_too_large_first_updates():
    # Round 18's NeRF at Adam lr 0.05: 0.4 of the weights on the first step, then every gradient 0.
    big = _incident(diverged=False, onset=None, weight_update_ratios=(np.full(5, 0.4),) * 3, lr=0.05)
    assert lr_too_high(big, TH.divergence) == []  # under the bar of an erased init, the units alive
    died = replace(big, gradients_died_after=2)
    found = lr_too_high(died, TH.divergence)
    assert found[0].severity == "error" and found[0].evidence["gradients_zero_after_steps"] == 2
    assert "the units died" in found[0].fix and "lr 0.05 → 0.005" in found[0].fix
    # Gradients that died long after the first updates, or updates a healthy run makes, are not the lr's doing.
    assert lr_too_high(replace(died, gradients_died_after=40), TH.divergence) == []
    assert lr_too_high(replace(died, weight_update_ratios=(np.full(5, 0.05),)), TH.divergence) == []


def test_gradients_died_after_reads_the_summary_of_gradients():
    rows = pd.DataFrame({"first_step": [0, 0], "silent_from": [1, 2]})
    assert _gradients_died_after(rows) == 2
    assert _gradients_died_after(rows.assign(silent_from=[1, None])) is None  # one gradient lives on
    assert _gradients_died_after(rows.assign(silent_from=[0, 2])) is None  # cut from the start: no death
    assert _gradients_died_after(rows.iloc[:0]) is None


def test_clipped_gradients_growing_in_a_finite_run_are_no_divergence():
    grows = [_break("grad", "G.head.weight", 16), _break("scalar", "grad_norm.G", 20)]
    clipped = pd.DataFrame({"step": [0, 1], "name": ["clip_coef", "clip_coef"], "value": [0.5, 0.5]})
    assert diverging(grows, clipped, stayed_finite=True) == []
    assert len(diverging(grows, clipped, stayed_finite=False)) == 2  # NaN followed: the growth is its story
    unclipped = pd.DataFrame({"step": [0], "name": ["loss"], "value": [1.0]})
    assert len(diverging(grows, unclipped, stayed_finite=True)) == 2


def test_a_parameter_still_growing_from_a_near_zero_init_is_no_divergence():
    # A param break: ×100 rise at 30, stable level 1.0 before it (`_break`), first level 1.0.
    weight = _break("param", "head.weight", 30)
    loss = pd.DataFrame({"step": [0], "name": ["loss"], "value": [1.0]})
    assert diverging([weight], loss, stayed_finite=True) == [weight]
    # A zero-initialised bias: 1e-2 at its first point, ×100 by its break, still growing from there.
    bias = TensorBreak("param", "head.bias", None, replace(weight.fit, first_level=1e-2))
    assert diverging([bias], loss, stayed_finite=True) == []


def test_a_parameter_that_grows_with_no_jump_while_the_loss_falls_is_no_divergence():
    # Round 30's patchtst: a zero-initialised BatchNorm bias grew ×190 over a OneCycle warm-up,
    # ×1.02 a step with no step over ×1.2, fitted as a ×34 break, while the loss kept falling.
    creeping = TensorBreak("param", "encoder.layers.1.norm_ffn.batchnorm.bias", None,
                           replace(_break("param", "x", 18).fit, jump=34.0, step_jump=1.19, growth_per_step=1.02))
    steps = np.arange(60)
    falling = pd.DataFrame({"step": steps, "name": "loss", "value": 1.4 * 0.99 ** steps})
    assert diverging([creeping], falling, stayed_finite=True, loss_must_feel=True) == []
    felt = falling.assign(value=np.where(steps >= 22, 3.0, falling["value"]))  # the loss rose 4 steps later
    assert diverging([creeping], felt, stayed_finite=True, loss_must_feel=True) == [creeping]
    # A parameter that jumped in one step counts whatever the loss did next (a bad restore).
    jumped = _break("param", "head.weight", 18)
    assert diverging([jumped], falling, stayed_finite=True, loss_must_feel=True) == [jumped]


def test_recovered_incident():
    found = recovered_incident(LossSpike(STEPS, np.full(N, 1.0), _incident(recovered=True)), TH.outcome)
    assert found[0].step == 60 and found[0].severity == "warning"
    loss = _noisy(1.0, 5)
    loss[50] *= 40
    spike = recovered_incident(LossSpike(STEPS, loss, _incident(diverged=False)), TH.outcome)
    assert spike[0].step == 50 and spike[0].severity == "note"
    assert recovered_incident(LossSpike(STEPS, _noisy(1.0, 5), _incident(diverged=False)), TH.outcome) == []


def test_clipping_from_a_capped_grad_norm_or_a_recorded_coefficient():
    import pandas as pd

    capped = np.minimum(_noisy(1.0, 6, 0.3), 1.0)
    none = pd.DataFrame({"step": [], "name": [], "value": []})
    assert clipping(none, capped).clips
    assert not clipping(none, _noisy(1.0, 6, 0.3)).clips
    coef = pd.DataFrame({"step": [3], "name": ["clip_coef"], "value": [0.5]})
    assert clipping(coef, _noisy(1.0, 6, 0.3)).clips
    # Clipping never grows a gradient: a coefficient above 1 is another rewrite (round 26's sae
    # projects its decoder's gradient off its unit columns), not clipping.
    rewritten = pd.DataFrame({"step": [3, 4], "name": ["clip_coef"] * 2, "value": [0.996, 26.4]})
    assert not clipping(rewritten, _noisy(1.0, 6, 0.3)).clips


def test_a_tensor_gradient_growing_while_the_loss_falls_is_no_divergence():
    grows = [_break("grad", "stages.0.1.dwconv.weight", 13)]
    steps = np.arange(60)
    falling = pd.DataFrame({"step": steps, "name": "loss", "value": 1.4 * 0.99 ** steps})
    assert diverging(grows, falling, stayed_finite=True, loss_must_feel=True) == []
    assert len(diverging(grows, falling, stayed_finite=True)) == 1  # an accumulation's running sum is its story
    felt = falling.assign(value=np.where(steps >= 20, 3.0, falling["value"]))  # the loss rose 7 steps later
    assert len(diverging(grows, felt, stayed_finite=True, loss_must_feel=True)) == 1
    assert len(diverging(grows, falling, loss_must_feel=True, nonfinite_at=25)) == 1  # a NaN 12 steps later felt it
    assert diverging(grows, falling, loss_must_feel=True, nonfinite_at=97) == []  # a NaN batch 84 steps later did not
    global_norm = [_break("scalar", "grad_norm", 13)]
    assert len(diverging(global_norm, falling, stayed_finite=True, loss_must_feel=True)) == 1
    # The window and factor are Thresholds.ranking's: a rise 7 steps later is not felt in 5 steps.
    short = replace(TH.ranking, felt_steps=5)
    assert diverging(grows, felt, stayed_finite=True, loss_must_feel=True, thresholds=short) == []
    assert diverging(grows, felt, stayed_finite=True, loss_must_feel=True,
                     thresholds=replace(TH.ranking, felt_factor=3.0)) == []


def test_metric_names_say_their_direction():
    from postmortem.scalars import metric_direction

    assert [metric_direction(n) for n in ("reward", "eval_reward", "val_accuracy", "sliced_wasserstein", "val_loss",
                                          "perplexity")] == [True, True, True, False, False, False]
    assert [metric_direction(n) for n in ("hits_at_10", "val_mrr", "recall@20", "ndcg", "mean_rank", "val_smape",
                                          "val_rmse")] == [True, True, True, True, False, False, False]
    assert [metric_direction(n) for n in ("top1", "val_top5", "eval_top_1")] == [True] * 3  # timm's train.py names
    # A detector's average precision (detectron2, torchmetrics, MMDetection) and a probabilistic
    # forecaster's errors (GluonTS's Evaluator): named outcomes, not scalars of unknown direction.
    assert [metric_direction(n) for n in ("bbox/AP50", "map_50", "bbox_mAP", "val_ap50", "val_wql", "crps", "MASE".lower(),
                                          "heatmap_sharpness")] == [True, True, True, True, False, False, False, None]
    assert [metric_direction(n) for n in ("loss", "loss_d", "grad_norm", "lr", "clip_coef", "epoch",
                                          "codebook_perplexity")] == [None] * 7


def test_an_outcome_metric_judges_a_run_whose_loss_cannot():
    rng = np.random.default_rng(3)
    steps = np.arange(N)
    rising = np.linspace(80, 800, N) * 10 ** rng.normal(0, 0.02, N)  # a policy-gradient surrogate as returns grow
    reward = np.linspace(20, 180, N) + rng.normal(0, 5, N)
    judged = measure_outcome(steps, rising, {"reward": (reward, True)}, TH.outcome)
    assert judged.learns and judged.judged_by == "reward" and judged.higher_is_better
    # Without the metric the same loss does not learn; with a loss that learns the loss judges...
    assert measure_outcome(steps, rising, {}, TH.outcome).learns is False
    accuracy = np.linspace(0.2, 0.9, N)
    assert measure_outcome(steps, rising[::-1].copy(), {"accuracy": (accuracy, True)}, TH.outcome).judged_by is None
    # ...but an agent's reward judges always: PPO's value loss falls while its policy stands still.
    flat_reward = 22.0 + rng.normal(0, 2, N)
    agent = measure_outcome(steps, rising[::-1].copy(), {"episodic_return": (flat_reward, True)}, TH.outcome)
    assert agent.learns is False and agent.judged_by == "episodic_return"
    # Of a training return every step and an evaluation return every 10th, the denser judges.
    sparse = np.full(N, np.nan)
    sparse[::10] = reward[::10]
    both = {"eval_reward": (sparse, True), "reward": (reward, True)}
    assert measure_outcome(steps, rising, both, TH.outcome).judged_by == "reward"
    # No single training loss (adversarial losses): the metric alone says, either way.
    flat = 1.19 + rng.normal(0, 1e-6, N)
    assert measure_outcome(steps[:0], rising[:0], {"distance": (flat, False)}, TH.outcome).learns is False
    falling = np.linspace(1.2, 0.5, N) + rng.normal(0, 0.05, N)
    assert measure_outcome(steps[:0], rising[:0], {"distance": (falling, False)}, TH.outcome).learns is True
    # A metric creeping by less than the loss's 1 % is no progress, however noiseless.
    creeping = 1.19326 - 3e-7 * steps
    assert measure_outcome(steps[:0], rising[:0], {"distance": (creeping, False)}, TH.outcome).learns is False
    # An error that blew up in its first quarter and came back to where it began did not improve: it
    # starts from the untrained model's value, as the loss does (round 16's PINN at lr x100).
    back = np.concatenate([[0.95], np.full(N // 8, 1.3), np.full(N - 1 - N // 8, 1.0)]) + rng.normal(0, 1e-3, N)
    assert measure_outcome(steps, rising, {"val_l2_relative_error": (back, False)}, TH.outcome).learns is False
    assert measure_outcome(steps, rising, {"val_l2_relative_error": (back[1:], False)}, TH.outcome).learns is True


def test_a_metric_that_ends_as_good_as_before_the_incident_came_back():
    steps = np.arange(N)
    reward = np.concatenate([np.linspace(20, 110, 50), np.full(10, 40.0), np.full(N - 60, 190.0)])
    # Higher-is-better metrics arrive negated, as base.judging_curve gives them.
    assert metric_came_back(steps, -reward, 50, TH.outcome)
    assert not metric_came_back(steps, -np.concatenate([reward[:50], np.full(N - 50, 60.0)]), 50, TH.outcome)
    distance = np.concatenate([np.full(50, 1.0), np.full(20, 3.0), np.full(N - 70, 1.05)])
    assert metric_came_back(steps, distance, 50, TH.outcome)
    assert not metric_came_back(steps, distance * np.where(steps >= 70, 1.5, 1.0), 50, TH.outcome)
    # Back within 10 % only in the last stretch of the run (67 of the 75 points that follow in round
    # 16's held-out error after BatchNorm's running statistics took a ×1e3 batch): not back.
    slow = np.concatenate([np.full(50, 1.0), np.linspace(1.4, 1.05, N - 50)])
    assert np.median(slow[-10:]) < 1.1  # it ends back...
    assert not metric_came_back(steps, slow, 50, TH.outcome)  # ...after 42 of its 50 points
    assert metric_came_back(steps, np.concatenate([np.full(50, 1.0), np.linspace(1.4, 1.09, 20), np.full(N - 70, 1.0)]),
                            50, TH.outcome)


def test_an_incident_came_back_only_where_every_held_out_metric_beside_the_loss_came_back():
    from postmortem.detectors.onsets import _metrics_came_back

    steps = np.arange(N)
    level = np.concatenate([np.linspace(0.8, 0.13, 50), np.full(N - 50, 0.13)])

    def scalars(**metrics):  # beside a training loss that came back
        return pd.DataFrame([{"step": int(s), "name": name, "value": float(v)}
                             for name, values in {"loss": level, **metrics}.items() for s, v in zip(steps, values)])

    stayed = level * np.where(steps >= 50, 1.8, 1.0)  # a held-out quantile loss ×1.8 for good
    back = level * np.where((steps >= 50) & (steps < 60), 3.0, 1.0)
    assert not _metrics_came_back(scalars(val_wql=stayed), 50, TH.outcome, judged_by=None)
    assert _metrics_came_back(scalars(val_wql=back), 50, TH.outcome, judged_by=None)
    # A higher-is-better one is read the right way up; one with too few points after says nothing.
    accuracy = np.minimum(0.9, np.linspace(0.1, 1.8, N))  # 0.9 from step 47
    assert not _metrics_came_back(scalars(val_accuracy=np.where(steps >= 50, 0.6, accuracy)), 50, TH.outcome,
                                  judged_by=None)
    assert _metrics_came_back(scalars(val_accuracy=np.where((steps >= 50) & (steps < 60), 0.6, accuracy)), 50,
                              TH.outcome, judged_by=None)
    assert _metrics_came_back(scalars(val_wql=stayed), N - 5, TH.outcome, judged_by=None)
    # The metric that judges the run is judged by came_back itself; names of no known direction are no outcome.
    assert _metrics_came_back(scalars(val_wql=stayed), 50, TH.outcome, judged_by="val_wql")
    assert _metrics_came_back(scalars(codebook_usage=stayed), 50, TH.outcome, judged_by=None)


def test_a_one_off_batch_acts_at_once_or_spikes_the_loss():
    from postmortem.detectors.onsets import _batch_acted

    at_once = np.array([1.4, 1.4, 1.5])  # the first value after the batch already ×1.4 the level
    swing = np.array([1.02, 1.2, 1.5])  # a GAN's distance rising on its own from the next steps
    no_spikes = np.zeros(0, np.int64)
    assert _batch_acted(60, at_once, 1.0, no_spikes, TH)
    assert not _batch_acted(60, swing, 1.0, no_spikes, TH)
    # The batch's own loss ×10 (a spike at its step) acted, whatever follows.
    assert _batch_acted(60, swing, 1.0, np.array([61]), TH)
    assert not _batch_acted(60, swing, 1.0, np.array([60 + TH.root_causes.window + 1]), TH)


def test_a_nan_batch_at_the_first_nonfinite_step_after_a_learning_phase_break_is_the_onset():
    from types import SimpleNamespace

    from postmortem.detectors.onsets import nonfinite_input_onset
    from postmortem.findings import FirstNonfinite

    at = 81
    steps = np.arange(N)
    learning = np.where(steps < at, 2.3 * np.exp(-steps / 40) + 0.5, np.nan)
    run = SimpleNamespace(scalars=pd.DataFrame({"step": steps, "name": "loss", "value": learning}))
    early = Onset(8, (7, 9), "state q_proj.bias[exp_avg_sq]", 1.14, 5.3, 36.8, at - 8)
    first = FirstNonfinite(at, "input", "input", None, [])
    nan_batch = Finding("nonfinite_input", at, ["input"], {}, "", "error")
    moved = nonfinite_input_onset(run, early, first, [nan_batch], TH)
    assert moved.step == at and moved.interval == (at, at)
    # The loss had stopped learning after the early break: that break stands.
    flat = SimpleNamespace(scalars=run.scalars.assign(value=np.where(steps < at, 2.3, np.nan)))
    assert nonfinite_input_onset(flat, early, first, [nan_batch], TH) is None
    # A NaN batch that is not the run's first non-finite value explains nothing about it.
    later = Finding("nonfinite_input", at + 5, ["input"], {}, "", "error")
    assert nonfinite_input_onset(run, early, first, [later], TH) is None


def test_the_lr_quoted_at_an_onset_is_the_culprits_param_groups_where_the_groups_differ():
    # DETR's recipe: the backbone's group (0, the run's `lr` scalar) at a tenth of the transformer's.
    manifest = {"optimizers": {"opt": {"param_groups": [{"params": ["backbone.conv.weight"]},
                                                        {"params": ["transformer.linear1.weight", "head.weight"]}]}}}
    rows = [{"step": s, "name": name, "value": v} for s in range(10)
            for name, v in (("lr", 1e-4), ("hp.opt.0.lr", 1e-4), ("hp.opt.1.lr", 1e-3 if s < 5 else 0.3))]
    scalars = pd.DataFrame(rows)
    assert culprit_group_lr(scalars, manifest, ["transformer.linear1"], 7) == (
        "param group 1 of optimizer `opt`, which holds transformer.linear1", 0.3)
    assert culprit_group_lr(scalars, manifest, ["backbone.conv.weight"], 3)[1] == pytest.approx(1e-4)
    # A culprit no group holds (an activation of a functional op) names none; equal lrs need no group.
    assert culprit_group_lr(scalars, manifest, ["act0"], 7) is None
    same = scalars.assign(value=np.where(scalars["name"].str.endswith("lr"), 1e-3, scalars["value"]))
    assert culprit_group_lr(same, manifest, ["transformer.linear1"], 7) is None

