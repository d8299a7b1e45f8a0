"""Findings about the outcome itself: a loss that does not improve."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..findings import Finding
from ..scalars import raised
from .base import WARNING, Evidence, Outcome, finding, loss_curve, measure_outcome, median_difference_sigma, register
from .thresholds import OutcomeThresholds

__all__ = ["LossOutcome", "knocked_back", "learning_stopped", "loss_came_back", "loss_plateau", "loss_rose_back",
           "loss_spikes", "metric_came_back", "objective_settled", "recovered_spike", "rose_back"]


@dataclass(frozen=True)
class LossOutcome:
    steps: np.ndarray
    loss: np.ndarray  # finite training loss, step order
    outcome: Outcome
    diverged: bool  # and did not come back


def _loss_outcome(ev: Evidence) -> LossOutcome:
    return LossOutcome(*loss_curve(ev.scalars), ev.outcome, ev.diverged and not ev.recovered)


@register("loss_plateau", "outcome", _loss_outcome)
def loss_plateau(run: LossOutcome, th: OutcomeThresholds) -> list[Finding]:
    """The training loss (and every metric passed) failed to improve by the run's own yardstick,
    or, in a run with no single training loss, the outcome metric that judges it did not."""
    if run.diverged or run.outcome.learns is not False or rose_back(run.loss, th) or _knocked_back(run, th):
        return []
    if run.outcome.improvement is None:
        if run.outcome.judged_by is None:
            return []
        return [finding(
            "loss_plateau", None, [], {"metric": run.outcome.judged_by, "higher_is_better": run.outcome.higher_is_better},
            f"`{run.outcome.judged_by}` did not improve beyond its own noise: overfit one small batch first "
            "(5 rows, 100 steps); if it does not, the training loop is broken (optimizer.step(), detach, wrong loss)",
        )]
    return [finding(
        "loss_plateau", None, [],
        {"loss_improvement": run.outcome.improvement, "threshold": th.plateau_improvement,
         "noise": run.outcome.noise, "first_loss": float(run.loss[0]), "last_loss": float(run.loss[-1])},
        "overfit one small batch first (5 rows, lr 0.1, 100 steps): if the loss does not reach "
        "~0, the training loop is broken (optimizer.step(), detach, wrong loss variable)",
    )]


@register("loss_rose_back", "outcome", _loss_outcome)
def loss_rose_back(run: LossOutcome, th: OutcomeThresholds) -> list[Finding]:
    """The loss fell from where it began, then climbed back over the rest of the run (`rose_back`),
    or was knocked back by a spike it never came back from (`knocked_back`): no plateau, and the
    loss alone cannot say why. A loss against a moving target does the first as the target
    improves (BYOL's EMA network: 1.64 → 0.88 → 1.06 on round 16's byol, healthy by its twins);
    so do stale gradients (their own rule judges them). A warning, never a verdict."""
    if run.diverged or run.outcome.learns is not False:
        return []
    knock = _knocked_back(run, th)
    if knock is not None:
        i, level, last = knock
        step = int(run.steps[i])
        return [finding(
            "loss_rose_back", step, [],
            {"start": float(np.median(run.loss[:th.start_steps])), "level_before_spike": level,
             "spike_loss": float(run.loss[i]), "last_quarter": last},
            f"the loss learned down to {level:.3g}, spiked ×{run.loss[i] / level:.3g} at step {step} and never came "
            f"back below ×{th.spike_recovered:g} of that level (last quarter {last:.3g}): look at the batch at step "
            f"{step} (wrong targets, a new data domain) and at what changed there",
            WARNING,
        )]
    shape = rose_back(run.loss, th)
    if shape is None:
        return []
    start, low, last = shape
    return [finding(
        "loss_rose_back", None, [], {"start": start, "first_quarter": low, "last_quarter": last},
        f"the loss fell from {start:.3g} to {low:.3g} in the first quarter, then rose back to {last:.3g}: "
        "expected of a loss against a moving target (an EMA teacher, a GAN's opponent, a KL weight warming up); "
        "on a fixed objective, look at the lr and the data order where the rise began",
        WARNING,
    )]


def _knocked_back(run: LossOutcome, th: OutcomeThresholds) -> tuple[int, float, float] | None:
    """`knocked_back` where the loss judges the run (an agent's reward, a GAN's distance does not)."""
    return knocked_back(run.loss, th) if run.outcome.judged_by is None else None


def knocked_back(loss: np.ndarray, th: OutcomeThresholds) -> tuple[int, float, float] | None:
    """(index, level before, last-quarter median) of the first loss spike (`loss_spikes`) that
    never fell back below ×2 of its recent level (`spike_recovered`), in a loss (finite, step
    order) that learned before it by the run's own yardstick (`measure_outcome` on the losses
    before the spike): the run learned, then lost ground at one step. The quarters read such a run
    as a plateau when it learned fast (round 32's healthy_spike on a QAT MobileNet and a pruned
    VGG: 0.23 → 0.018, wrong targets for two steps, ×50, then 0.10 and still falling)."""
    if len(loss) < 2 * th.min_steps:
        return None
    spikes, level = loss_spikes(loss, th)
    if not len(spikes) or spikes[0] < 2 * th.min_steps:  # quarters of 5 losses at least before it
        return None
    i = int(spikes[0])
    if np.any(loss[i + 1:] < raised(level[i], th.spike_recovered)):
        return None
    if not measure_outcome(np.arange(i), loss[:i], {}, th).learns:
        return None
    return i, float(level[i]), float(np.median(loss[-max(1, len(loss) // 4):]))


def objective_settled(loss: np.ndarray, weight_update_ratios: tuple[np.ndarray, ...],
                      th: OutcomeThresholds) -> int | None:
    """Index of the loss (finite, step order, from the run's first step) at which the objective the
    run trains on settled, or None: the loss rose ≥ ×1.5 (`settling_rise`) above its first value
    within `settling_steps` and did not come back within 10 % of it (`recovered_factor`) over the
    `min_steps` losses that follow (the index: where it stopped rising by more than 10 % a step,
    within those steps), while no weight had moved more than a healthy step (`settling_update_ratio`: the median over weights of
    each one's largest update/param ratio before the rise). The model barely changed, so the loss
    before that step measured another objective: MoCo's first keys scored against a random queue
    (0.9, then 4.8 once the queue holds real keys, then falling as the run learns, under
    accumulation back to where its first loss, of a half-filled queue, began; round 34)."""
    if not len(loss) or loss[0] <= 0 or not weight_update_ratios:
        return None
    for index in range(1, min(th.settling_steps, len(loss) - 1) + 1):
        if loss[index] < th.settling_rise * loss[0]:
            continue
        if len(loss) < index + th.min_steps or \
                np.any(loss[index:index + th.min_steps] <= raised(float(loss[0]), th.recovered_factor)):
            return None
        while index < min(th.settling_steps, len(loss) - 1) and \
                loss[index + 1] > raised(float(loss[index]), th.recovered_factor):
            index += 1  # still settling (beyond 10 % a step): the queue's second half of real keys
        moved = [float(np.max(r[:index])) for r in weight_update_ratios if len(r) >= index]
        return index if moved and float(np.median(moved)) <= th.settling_update_ratio else None
    return None


def rose_back(loss: np.ndarray, th: OutcomeThresholds) -> tuple[float, float, float] | None:
    """(start, first quarter, last quarter) medians of a loss (finite, step order) whose last
    quarter ended below its start (the median of its first `start_steps` losses: the untrained
    model) and above its first quarter, each beyond 2 σ of the loss's own noise and by the 1 % of
    `plateau_improvement`; None for any other shape."""
    if len(loss) < th.min_steps:
        return None
    quarter = max(1, len(loss) // 4)
    first = min(quarter, th.start_steps)
    start, low, last = (float(np.median(part)) for part in (loss[:first], loss[:quarter], loss[-quarter:]))
    fell = start - last > max(th.noise_sigmas * median_difference_sigma(loss, first, quarter),
                              th.plateau_improvement * abs(start))
    climbed = last - low > max(th.noise_sigmas * median_difference_sigma(loss, quarter, quarter),
                               th.plateau_improvement * abs(low))
    return (start, low, last) if fell and climbed else None


def loss_came_back(steps: np.ndarray, values: np.ndarray, onset: int, th: OutcomeThresholds) -> bool:
    """After an incident at `onset`, the training loss (finite, step order) came back to within
    10 % of its level before (median of the 10 losses before; a 5-step rolling median after),
    did so within the first half of the steps that follow, and ends there. A run that spends
    most of what is left getting back to where it was ends far behind where it was heading.
    Its last losses must also average below 2× that level: a median can sit at 0 while every
    other step is ×30 (a head rescaled ×100 makes logits that are right with certainty or wrong
    with certainty)."""
    before = values[steps < onset][-th.min_steps:]
    after = values[steps > onset]
    if len(before) < 3 or len(after) < th.min_steps:
        return False
    level = float(np.median(before))
    last = after[-th.min_steps:]
    return bool(_back_within(after, level, th) and np.median(last) <= raised(level, th.recovered_factor)
                and np.mean(last) <= raised(level, th.recovered_mean_factor))


def _back_within(after: np.ndarray, level: float, th: OutcomeThresholds) -> bool:
    """A 5-point rolling median of the values after an incident came back to within 10 % of
    `level` in the first half of them (`recovered_within`)."""
    rolling = pd.Series(after).rolling(5).median().to_numpy()[4:]
    back = np.flatnonzero(rolling <= raised(level, th.recovered_factor))
    return bool(len(back) and back[0] <= th.recovered_within * len(after))


def metric_came_back(steps: np.ndarray, values: np.ndarray, onset: int, th: OutcomeThresholds) -> bool:
    """After an incident at `onset`, an outcome metric (finite, step order, lower being better as
    `base.judging_curve` gives it: a reward negated) ends at least as good
    as its level before (median of the 10 values before), give or take the loss's 10 %
    (`recovered_factor`), and got back there within the first half of what follows, as the loss
    must (`loss_came_back`): the run got back what the incident cost it. An agent whose reward
    rose from 113 to 200 after its losses and gradients ran away did not fail (round 10,
    reinforce); a held-out error that needs 67 of the 75 steps left to creep back within 10 %
    of its level did (round 16, batch_scale-pix2pix-s0: BatchNorm's running statistics)."""
    before = values[steps < onset][-th.min_steps:]
    after = values[steps > onset]
    if len(before) < 3 or len(after) < th.min_steps:
        return False
    level = float(np.median(before))
    return bool(np.median(after[-th.min_steps:]) <= raised(level, th.recovered_factor)
                and _back_within(after, level, th))


def learning_stopped(steps: np.ndarray, values: np.ndarray, onset: int, run: Outcome,
                     th: OutcomeThresholds) -> bool:
    """The loss (finite, step order) learned until `onset` by the run's own yardstick, and the
    whole run does not: the incident took the progress and the run never made it again (an lr
    left ×100 on one group: the loss gets back near where it was and stays there), so it did not
    recover from it (session 9, read on round 8's lr_spike-bert_mlm-s2)."""
    if run.learns is not False:
        return False
    before = steps < onset
    return bool(measure_outcome(steps[before], values[before], {}, th).learns)


def recovered_spike(values: np.ndarray, th: OutcomeThresholds) -> tuple[int, int, float] | None:
    """The first loss spike (`loss_spikes`) that fell back below ×2 of its recent level
    (`spike_recovered`): (its index, the index it was back at, that level)."""
    if len(values) < 2 * th.min_steps:
        return None
    spikes, level = loss_spikes(values, th)
    for i in spikes[:1]:
        back = np.flatnonzero(values[i + 1:] < raised(level[i], th.spike_recovered))
        if len(back):
            return int(i), int(i + 1 + back[0]), float(level[i])
    return None


def loss_spikes(values: np.ndarray, th: OutcomeThresholds) -> tuple[np.ndarray, np.ndarray]:
    """Indices where the loss (step order) exceeds ×10 the rolling median of the 20 losses before
    it (Megatron-LM's spike check; for a loss below 0, a flow's NLL, as far above it: `raised`),
    and that recent level at every index."""
    level = pd.Series(values).rolling(th.spike_window, min_periods=5).median().shift(1).to_numpy()
    return np.flatnonzero(values > raised(level, th.spike_factor)), level
