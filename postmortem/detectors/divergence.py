"""Findings about a run that blew up: diverged, exploding_gradient, lr_too_high, and the
incident a run came back from (recovered_incident)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..findings import Finding, FirstNonfinite, Onset
from ..manifest import is_weight, lookup_tables, optimizer_groups, parameter_shapes
from ..ranking import TensorBreak, clips_recorded
from ..scalars import is_loss
from ..series import SeriesTable
from .base import (ERROR, NOTE, WARNING, Evidence, adaptive_optimizer, finding, loss_curve, main_loss,
                   register, role)
from .gradients import grad_norm_series
from .outcome import recovered_spike
from .root_causes import CAUSES
from .thresholds import DivergenceThresholds, OutcomeThresholds

__all__ = [
    "Clipping",
    "Incident",
    "LossSpike",
    "clipping",
    "diverged",
    "exploding_gradient",
    "lr_at",
    "lr_too_high",
    "recovered_incident",
    "weight_update_ratios",
]


@dataclass(frozen=True)
class Clipping:
    """Does the run already clip its gradients, and how we know."""

    clips: bool
    how: str  # "clip_coef recorded" | "grad_norm capped" | ""


def clipping(scalars: pd.DataFrame, grad_norm: np.ndarray) -> Clipping:
    """`clip_coef` / `grad_norm_clipped` recorded (schema 2, `clips_recorded`), or a grad norm
    that piles up at one maximum (a recorder that reads gradients after clip_grad_norm_ sees
    max_norm often)."""
    if clips_recorded(scalars):
        return Clipping(True, "clip_coef recorded")
    finite = grad_norm[np.isfinite(grad_norm) & (grad_norm > 0)]
    if len(finite) >= 20:
        top = float(np.max(finite))
        capped = int(np.sum(finite >= top * (1 - 1e-3)))
        if capped >= max(5, len(finite) // 10):
            return Clipping(True, "grad_norm capped")
    return Clipping(False, "")


def lr_at(scalars: pd.DataFrame, step: int | None, name: str = "lr") -> float | None:
    """The recorded lr (or another scalar `name`) at `step` (the last one before it when
    missing), else the first."""
    rows = scalars[scalars["name"] == name]
    values = rows["value"].to_numpy(np.float64)
    steps = rows["step"].to_numpy(np.int64)
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    if not len(values):
        return None
    if step is None:
        return float(values[0])
    i = int(np.searchsorted(steps, step, side="right")) - 1
    return float(values[max(i, 0)])


@dataclass(frozen=True)
class Incident:
    """A divergence as the ranking saw it, and whether the run came back from it."""

    diverged: bool
    recovered: bool
    onset: Onset | None
    first_nonfinite: FirstNonfinite | None
    culprits: list[str]  # amplified tensors, earliest first
    grad_breaks: list[TensorBreak]  # amplified gradient series (none before a direct cause that dates the onset)
    update_breaks: list[TensorBreak]
    healthy_max_grad_norm: float | None
    lr: float | None  # at the onset: the first culprit's param group's where the groups' lrs differ
    first_update_ratio: float | None  # median over the weights (as `weight_update_ratios`) of their first update/param ratio
    weight_update_ratios: tuple[np.ndarray, ...]  # each weight's (`is_weight`: an init has a scale) first update/param ratios
    steps_from_start: int | None  # onset step − the run's first recorded step
    loss_first_alone: bool  # the loss was the first NaN while no tensor amplified
    clipping: Clipping
    causes: list[Finding]  # root causes found at the onset
    nonfinite_input: Finding | None
    log_of_zero: Finding | None
    inputs_unscaled: bool = False
    """unscaled_inputs fired under an optimizer whose step follows the gradient (SGD): huge first
    updates are the data's doing. An adaptive one's step follows the lr whatever the inputs'
    scale (N-BEATS on raw series, mean 11.5, at Adam lr 0.1: updates 0.5× the weights; round 13)."""
    gradients_died_after: int | None = None
    """Steps after its first one by which every gradient had gone to exactly 0 for the rest of the
    run, each having been non-zero at first (None: some gradient lives on, or none ever did)."""
    loss_improvement: float | None = None
    """The run's relative loss decrease by its own yardstick (`Outcome.improvement`)."""
    learned_by: str | None = None
    """The outcome metric that judged the run as learning where its loss did not
    (`Outcome.judged_by` of an Outcome that learns), None otherwise."""
    lr_group: str | None = None
    """The param group whose lr `lr` is, where the groups' lrs differ at the onset (`culprit_group_lr`)."""
    finite_shift: dict[str, float | str] | None = None
    """Of a run that stayed finite while diverging, what judges it (`judging_curve`: the loss, or
    the outcome metric) before the onset, after it and at the end: the outcome the verdict follows."""


_EARLY_READ = 64  # recorded updates read per weight for the first steps (≥ any sane erases_init_within)


def weight_update_ratios(table: SeriesTable, manifest: dict) -> tuple[np.ndarray, ...]:
    """The finite update/param ratios of each weight (`is_weight`), its first ones.
    Lookup tables (`tables`) are left out: their rows start at whatever scale the model picks
    (word2vec's ±0.5/dim and zeros, whose first updates are 0.9× the rows at a healthy lr; round
    14), not at an init scaled to a fan-in that a step could erase."""
    tables, shapes = lookup_tables(manifest), parameter_shapes(manifest)
    found = []
    for index in table.indices("update"):
        name = table.keys[index].name
        if is_weight(name, int(table.numel[index]), shapes) and name not in tables:
            ratios = table.column(index, "ratio")[:_EARLY_READ]
            ratios = ratios[np.isfinite(ratios)]
            if len(ratios):
                found.append(ratios)
    return tuple(found)


def culprit_group_lr(scalars: pd.DataFrame, manifest: dict, culprits: list[str],
                     step: int | None) -> tuple[str, float] | None:
    """(which param group, its lr at `step`) of the group holding the first culprit that is one
    of its parameters (or a module of them), where the recorded per-group lrs differ at `step`:
    the run's `lr` scalar is group 0's (DETR's backbone, at a tenth of the transformer's), not
    the lr that drove the culprit (round 37)."""
    if not culprits:
        return None
    groups = optimizer_groups(manifest)
    recorded = scalars[scalars["name"].isin([f"hp.{key}.lr" for key in groups])]  # filtered once, not per group
    lrs = {}
    for key, params in groups.items():
        lr = lr_at(recorded, step, f"hp.{key}.lr")
        if lr is not None:
            lrs[key] = (lr, params)
    if len({lr for lr, _ in lrs.values()}) < 2:
        return None
    for culprit in culprits:
        for key, (lr, params) in lrs.items():
            if any(p == culprit or p.startswith(culprit + ".") for p in params):
                opt, group = key.rsplit(".", 1)
                return f"param group {group} of optimizer `{opt}`, which holds {culprit}", lr
    return None


def _incident(ev: Evidence) -> Incident:
    onset_step = ev.onset.step if ev.onset is not None else None
    steps, norms = grad_norm_series(ev.table, ev.scalars)
    healthy = np.isfinite(norms) & ((steps < onset_step) if onset_step is not None else True)
    weights = weight_update_ratios(ev.table, ev.manifest)
    start = int(ev.table.step.min()) if len(ev.table.step) else None
    first = ev.first_nonfinite
    amplified = sorted((b for b in ev.breaks if b.fit.amplified and b.role != "scalar"),
                       key=lambda b: b.fit.onset_step)
    culprits = list(dict.fromkeys(b.name for b in amplified))[:3]
    # This divergence's gradients: none before the direct cause that dates it (exploding_gradient
    # also drops breaks long before the onset, by its precursor_steps).
    causes = [f for f in ev.found if f.label in CAUSES]
    dated_by_cause = any(f.step == onset_step for f in causes)
    near = [b for b in ev.breaks if b.fit.amplified
            and (onset_step is None or not dated_by_cause or b.fit.onset_step >= onset_step)]
    group_lr = culprit_group_lr(ev.scalars, ev.manifest, culprits, onset_step)
    return Incident(
        diverged=ev.diverged, recovered=ev.recovered, onset=ev.onset, first_nonfinite=first,
        culprits=culprits,
        grad_breaks=[b for b in near if b.role == "grad" or (b.role == "scalar" and b.name.startswith("grad_norm"))],
        update_breaks=[b for b in ev.breaks if b.role in ("update", "grad")],
        healthy_max_grad_norm=float(np.max(norms[healthy])) if healthy.any() else None,
        lr=group_lr[1] if group_lr else lr_at(ev.scalars, onset_step),
        lr_group=group_lr[0] if group_lr else None,
        first_update_ratio=float(np.median([r[0] for r in weights])) if weights else None,
        weight_update_ratios=weights,
        steps_from_start=onset_step - start if onset_step is not None and start is not None else None,
        loss_first_alone=(first is not None and first.role == "scalar" and is_loss(first.tensor)
                          and not any(b.fit.amplified for b in ev.breaks if b.role != "scalar")),
        clipping=clipping(ev.scalars, norms),
        causes=causes,
        nonfinite_input=next((f for f in ev.found if f.label == "nonfinite_input"), None),
        log_of_zero=next((f for f in ev.found if f.label == "log_of_zero"), None),
        inputs_unscaled=any(f.label == "unscaled_inputs" for f in ev.found) and not adaptive_optimizer(ev.scalars),
        loss_improvement=ev.outcome.improvement,
        learned_by=ev.outcome.judged_by if ev.outcome.learns else None,
        finite_shift=_finite_shift(ev) if first is None else None,
        gradients_died_after=_gradients_died_after(role(ev.summary, "grad")),
    )


def _gradients_died_after(grads: pd.DataFrame) -> int | None:
    """From the summary's grad rows: when the last gradient fell silent for good, counted from the
    run's first step, where every one of them fell silent after a first non-zero one."""
    if grads.empty or grads["silent_from"].isna().any():
        return None
    silent_from = grads["silent_from"].to_numpy(np.int64)
    first = grads["first_step"].to_numpy(np.int64)
    if (silent_from <= first).any():
        return None  # silent from its first step: a cut graph or a frozen tensor, not a death
    return int(silent_from.max() - first.min())


_SHIFT_POINTS = 10  # values read before the onset, after it and at the end (OutcomeThresholds.min_steps's count)


def _finite_shift(ev: Evidence) -> dict[str, float | str] | None:
    """Medians of what judges the run (the outcome metric, else the main loss: `judging_curve`'s
    choice) over the 10 values before the onset, the 10 after it and the last 10."""
    name = ev.outcome.judged_by or main_loss(ev.scalars)
    if ev.onset is None or name is None:
        return None
    rows = ev.scalars[ev.scalars["name"] == name]  # as logged: a reward is not negated here
    steps, values = rows["step"].to_numpy(np.int64), rows["value"].to_numpy(np.float64)
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    before, after = values[steps < ev.onset.step][-_SHIFT_POINTS:], values[steps > ev.onset.step]
    if not len(before) or not len(after):
        return None
    return {"judged_by": name, "before_onset": float(np.median(before)),
            "after_onset": float(np.median(after[:_SHIFT_POINTS])), "at_end": float(np.median(after[-_SHIFT_POINTS:]))}


def _clip_advice(incident: Incident) -> str | None:
    """Clip at the healthy-phase norm, unless the run clips already (then say so, not that)."""
    if incident.clipping.clips or incident.healthy_max_grad_norm is None:
        return None
    return (f"clip gradients at the healthy-phase norm: torch.nn.utils.clip_grad_norm_("
            f"model.parameters(), max_norm={incident.healthy_max_grad_norm:.3g})")


def _lr_advice(lr: float | None, group: str | None = None) -> str:
    if lr is None:
        return "lower the learning rate ×10"
    return f"lower the learning rate ×10 (lr {lr:.3g} at the onset → {lr / 10:.3g}{_in_group(group)})"


def _in_group(group: str | None) -> str:
    return f": the lr of {group}; the groups' lrs differ" if group else ""


@register("diverged", "divergence", _incident)
def diverged(incident: Incident, th: DivergenceThresholds) -> list[Finding]:
    if not incident.diverged or incident.recovered:
        return []
    onset, first = incident.onset, incident.first_nonfinite
    evidence = {
        "onset_step": onset.step if onset else None,
        "first_nonfinite_step": first.step if first else None,
        "first_nonfinite_tensor": f"{first.role} {first.tensor}" if first else None,
        "lead_steps": onset.lead_steps if onset else None,
        "healthy_max_grad_norm": incident.healthy_max_grad_norm,
        "lr_at_onset": incident.lr,
        "lr_group": incident.lr_group,
        "clips_already": incident.clipping.clips,
        "root_causes": [f.label for f in incident.causes],
        **(incident.finite_shift or {}),
    }
    parts = [f.fix for f in incident.causes]
    if incident.nonfinite_input is not None:
        parts.append("a batch held NaN/inf: " + incident.nonfinite_input.fix[0].lower() + incident.nonfinite_input.fix[1:])
    if incident.log_of_zero is not None:
        parts.append(incident.log_of_zero.fix)
    elif incident.loss_first_alone:
        parts.append("the loss itself produced the first NaN while every tensor was finite "
                     "(log(0) in a hand-written BCE): use BCEWithLogitsLoss on raw logits "
                     "or add an epsilon inside the log")
    clip = _clip_advice(incident)
    if clip:
        parts.append(clip)
    elif incident.clipping.clips:
        parts.append("the run already clips gradients (" + incident.clipping.how + "): clipping "
                     "bounds the step, not a cause; look at what changed at the onset")
    if not incident.causes and incident.nonfinite_input is None:
        parts.append(_lr_advice(incident.lr, incident.lr_group))  # no direct cause seen: the step size is the suspect
    return [finding("diverged", onset.step if onset else None, incident.culprits, evidence, "; ".join(parts))]


@register("exploding_gradient", "divergence", _incident)
def exploding_gradient(incident: Incident, th: DivergenceThresholds) -> list[Finding]:
    # This divergence's gradients: not a break long before the onset (another story).
    breaks = [b for b in incident.grad_breaks
              if incident.onset is None or b.fit.onset_step >= incident.onset.step - th.precursor_steps]
    if not incident.diverged or not breaks:
        return []
    top = min(breaks, key=lambda b: b.fit.onset_step)
    clip = incident.healthy_max_grad_norm
    if incident.clipping.clips:
        fix = ("the run already clips gradients: the clipped norm still grew, so the cause lies upstream "
               "(see the root causes and the learning rate at the onset)")
    else:  # no healthy phase to take a norm from: the gradients grew from the first steps
        fix = _clip_advice(incident) or (
            "the gradients grew from the first steps: lower the learning rate first (see lr_too_high), "
            "then clip gradients with torch.nn.utils.clip_grad_norm_")
    return [finding(
        "exploding_gradient", top.fit.onset_step,
        sorted({b.name for b in breaks if b.role == "grad"}),
        {"series": top.fit.label, "stable_level": top.fit.stable_level,
         "final_level": top.fit.final_level, "jump": top.fit.jump,
         "growth_per_step": top.fit.growth_per_step, "healthy_max_grad_norm": clip,
         "clips_already": incident.clipping.clips},
        fix, NOTE if incident.recovered else ERROR,
    )]


@register("lr_too_high", "divergence", _incident)
def lr_too_high(incident: Incident, th: DivergenceThresholds) -> list[Finding]:
    """The step size, not the gradient, blew up: an update jumped while its gradient did not,
    a param group's lr was raised at the onset, the first updates were already ≫ the CS231n
    ratio, or the run diverged from its start."""
    if not incident.diverged or incident.onset is None:
        return _erased_init(incident, th)
    onset_step = incident.onset.step
    lr_raised = [f for f in incident.causes if f.label == "hyperparameter_changed"
              and f.evidence["hyperparameter"].endswith(".lr")]
    other_cause = any(f.label != "hyperparameter_changed" for f in incident.causes)
    # Measured one-step ratios, not the fitted levels: after the blow-up the updates may well
    # shrink again while the run stays ruined.
    grad_jumps = {b.name: b.fit.onset_step for b in incident.update_breaks
                  if b.role == "grad" and b.fit.credible and b.fit.step_jump >= th.sharp_update_jump * th.grad_jump_share}
    lr_driven = [
        b for b in incident.update_breaks
        if b.role == "update" and b.fit.credible and b.fit.step_jump >= th.sharp_update_jump
        and abs(b.fit.onset_step - onset_step) <= 1
        and grad_jumps.get(b.name, 10**12) > b.fit.onset_step
    ] if not other_cause else []
    big_first = incident.first_update_ratio is not None and incident.first_update_ratio >= th.update_ratio_high
    from_start = incident.steps_from_start is not None and incident.steps_from_start <= th.from_start_steps
    if not (lr_raised or lr_driven or from_start or big_first):
        return []
    lr = incident.lr
    # The group whose lr was raised, else the tensors whose update jumped without their gradient.
    tensors = list(lr_raised[0].tensors) if lr_raised else sorted({b.name for b in lr_driven})
    evidence = {
        "first_update_ratio_median": incident.first_update_ratio, "cs231n_target_ratio": 1e-3,
        "diverged_from_start": from_start, "lr_at_onset": lr,
        "update_jumps_without_gradient_jump": {b.name: b.fit.step_jump for b in lr_driven},
        "lr_raised": [f.evidence["hyperparameter"] for f in lr_raised],
    }
    if lr_raised:
        f = lr_raised[0]
        fix = (f"the lr of param group {f.evidence['param_group']} was raised ×{f.evidence['factor']:.3g} "
               f"at step {f.step} ({f.evidence['before']:.3g} → {f.evidence['after']:.3g}): keep it at "
               f"{f.evidence['before']:.3g} (check the scheduler / param_group['lr'] writes)")
    else:
        fix = _lr_advice(lr, incident.lr_group) + " and retry; sweep 0.1, 0.01, 0.001"
        if lr_driven:
            fix += ("; the update of " + ", ".join(sorted({b.name for b in lr_driven}))
                    + " jumped while its gradient did not: check the LR schedule / param-group LR")
    return [finding("lr_too_high", lr_raised[0].step if lr_raised else onset_step, tensors, evidence, fix,
                    NOTE if incident.recovered else ERROR)]


def _erased_init(incident: Incident, th: DivergenceThresholds) -> list[Finding]:
    """A run that stayed finite although its first updates were as large as its weights, or far
    too large and every gradient then died: the lr wiped the initialisation out and the run
    learns, if at all, from a worse start than a smaller lr (or a warm-up) gives (issue 12: lr
    ×100 without warm-up ends 1.3–1.6× above its healthy twin, its loss still falling). Read on
    weights of more than one element: a scalar weight (seed 002's Linear(1, 1)) has no init
    scale to erase; inputs in the thousands (unscaled_inputs) make huge first updates at any lr,
    and their fix comes first."""
    within = th.erases_init_within
    ratios = [float(np.max(r[:within])) for r in incident.weight_update_ratios]
    ratio = float(np.median(ratios)) if ratios else None
    # Updates ≫ the CS231n ratio after which every gradient died (round 18: NeRF at Adam lr 0.05,
    # 0.39 of the weights on the first step, then its density relu'd to 0 everywhere) wiped the
    # model out with less than half its weights: no healthy run loses every gradient.
    died = incident.gradients_died_after is not None and incident.gradients_died_after <= within
    bar = th.update_ratio_high if died else th.update_ratio_erases_init
    if ratio is None or ratio < bar or incident.inputs_unscaled:
        return []
    lr = incident.lr
    effect = (f"after which every gradient was exactly 0 for good, {incident.gradients_died_after} step(s) into "
              "the run (the units died)" if died else "erasing the initialisation")
    # A verdict follows the outcome: a loss that fell that far learned, whatever its first steps did
    # (round 33's deq: Adam at ×100 its recipe's lr ended 8-14× lower than the recipe did).
    # So does an outcome metric that judged the run as learning where its loss could not (round 36's
    # DINO at lr ×100: its loss rose, the teacher's kNN top-1 went 56 → 94 %).
    fell = incident.loss_improvement is not None and incident.loss_improvement >= th.erased_init_still_learns
    learned = fell or incident.learned_by is not None
    if fell:
        regardless = (f"; the loss fell {incident.loss_improvement:.0%} regardless, but a smaller or warmed-up lr "
                      "may reach lower: ")
    elif learned:
        regardless = f"; {incident.learned_by} improved regardless, but a smaller or warmed-up lr may reach further: "
    else:
        regardless = ": "
    return [finding(
        "lr_too_high", None, [],
        {"early_update_ratio_median": ratio, "within_steps": within, "cs231n_target_ratio": 1e-3, "first_lr": lr,
         "gradients_zero_after_steps": incident.gradients_died_after if died else None,
         "loss_improvement": incident.loss_improvement},
        f"the first {within} updates moved the weights by up to {ratio:.2g}× their norm (CS231n: ~1e-3), {effect}"
        + regardless
        + (f"lower the learning rate ×10 (lr {lr:.3g} → {lr / 10:.3g}{_in_group(incident.lr_group)})" if lr
           else "lower the learning rate ×10")
        + " or warm it up from ~0 over the first "
        "hundreds of steps; sweep 0.1, 0.01, 0.001",
        WARNING if learned else ERROR,
    )]


@dataclass(frozen=True)
class LossSpike:
    """The training loss by step, and the incident (if the divergence machinery saw one)."""

    steps: np.ndarray
    loss: np.ndarray
    incident: Incident


def _loss_spike(ev: Evidence) -> LossSpike:
    steps, values = loss_curve(ev.scalars)
    return LossSpike(steps, values, _incident(ev))


@register("recovered_incident", "outcome", _loss_spike)
def recovered_incident(spike: LossSpike, th: OutcomeThresholds) -> list[Finding]:
    """A divergence the run came back from, or a loss spike ×10 over its recent level that
    fell back below ×2 of it: a warning with its onset and cause, not a verdict."""
    incident = spike.incident
    if incident.diverged and incident.recovered and incident.onset is not None:
        causes = incident.causes
        return [finding(
            "recovered_incident", incident.onset.step,
            [t for f in causes for t in f.tensors][:5] or incident.culprits,
            {"onset_step": incident.onset.step, "series": incident.onset.series,
             "causes": [f.label for f in causes], "first_nonfinite_step":
                 incident.first_nonfinite.step if incident.first_nonfinite else None},
            "the run came back on its own from an incident at step "
            f"{incident.onset.step}" + (": " + "; ".join(f.fix for f in causes) if causes else
                                        "; if incidents recur, clip gradients at the healthy-phase norm"),
            WARNING,
        )]
    values, steps = spike.loss, spike.steps
    if incident.diverged and not incident.recovered:
        return []  # the divergence is the story, not a spike on its way
    found = recovered_spike(values, th)
    if found is None:
        return []
    i, back, level = found
    # A run that did not diverge had its direct causes looked for at the spike (postmortem.analysis).
    causes = [f for f in incident.causes if f.step is not None and abs(f.step - int(steps[i])) <= 1]
    return [finding(
        "recovered_incident", int(steps[i]), [t for f in causes for t in f.tensors][:5],
        {"peak_loss": float(values[i]), "recent_level": level,
         "factor": float(values[i] / level) if level > 0 else None,
         "recovered_at_step": int(steps[back]), "causes": [f.label for f in causes]},
        "the loss spiked and recovered on its own" + ("; " + "; ".join(f.fix for f in causes) if causes else
                                                      "; if spikes recur, look at the batch at that step and "
                                                      "clip gradients at the healthy-phase norm"),
        WARNING if causes else NOTE,
    )]
