"""Detectors: small pure functions over tidy frames, each returning typed Findings.

Every threshold here is cited in docs/diagnoses.md; change both together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import linregress

from .accumulation import PRE, accumulation_onset
from .findings import Finding, FirstNonfinite, Onset
from .manifest import frozen_parameters, manifest_order, parameter_shapes
from .ranking import TensorBreak, is_loss
from .series import AUX_COLUMNS, SeriesTable

__all__ = [
    "Evidence",
    "summarize",
    "diagnose",
    "verdict",
    "DETECTORS",
    "INFORMATIONAL",
    "NOT_LEARNING",
]

# Thresholds (sources in docs/diagnoses.md).
UPDATE_RATIO_TARGET = 1e-3  # CS231n: update/param ratio ≈ 1e-3
UPDATE_RATIO_HIGH = 1e-1  # 100× the CS231n target
UPDATE_RATIO_LOW = 1e-4  # 10× below the CS231n target
SHARP_UPDATE_JUMP = 10.0  # an update ×10 in one step while its gradient stays put
VANISHING_GRAD_RMS = 1e-7  # SageMaker Debugger VanishingGradient threshold (mean |grad|)
VANISHING_LAYER_RATIO = 1e-3  # first/last layer grad RMS (AUTOTRAINER-style layer ratio)
DEAD_ZERO_FRAC = 0.9  # share of exactly-zero activations (SageMaker DeadRelu: most units inactive)
SATURATED_FRAC = 0.5  # SageMaker SaturatedActivation threshold_layer = 50 % of units
PLATEAU_IMPROVEMENT = 0.01  # loss improved < 1 % first → last quarter (LossNotDecreasing)
UNSCALED_MAX_ABS = 100.0  # inputs two orders of magnitude beyond [-1, 1] (seed 002: 0–3600 s)
UNSCALED_ABS_MEAN = 10.0  # seed 002: "si la media es 500.0 en lugar de cerca de 0.0"
SLOW_MIN_IMPROVEMENT = 0.02  # below this the loss is flat (loss_plateau)
SLOW_MAX_IMPROVEMENT = 0.5  # the loss did not even halve
SLOW_PACE_KEPT = 0.5  # late slope within ×2 of the early one: no sign of converging
SLOW_LINEAR_R2 = 0.9  # a steady straight descent, not noisy small-batch learning
INIT_SCALE_RANGE = (0.05, 10.0)  # std·sqrt(fan_in); PyTorch default 0.58, Kaiming 1.41
SILENT_MIN_STEPS = 5  # a final stretch of zero/missing values at least this long...
SILENT_MIN_SHARE = 0.1  # ...and at least this share of the run
STALE_GROWTH = 5.0  # the accumulated gradient ends ≥ 5× the healthy norm
STALE_RISING = 0.65  # share of climbing steps where the norm does not decrease
STALE_MAX_RATIO = 3.0  # a step multiplying the norm by more ends the accumulation (an explosion)
STALE_LOSS_IMPROVEMENT = 0.1  # the loss got no more than 10 % better meanwhile
STALE_STEP_SIZE = 2.0  # median |step change| of the climb ≤ 2× the norm before (one fresh gradient)
STALE_MIN_CLIMB = 5  # steps of climb before any explosion: enough to see a sum grow
STALE_EXPLODED = 100.0  # ×100 the calm norm: exploded (DIVERGENCE_DECADES), no longer a sum
SPIKE_FACTOR = 10.0  # Megatron-LM style: 10× the recent level
SPIKE_RECOVERED = 2.0
_MIN_STEPS = 10

INFORMATIONAL = frozenset({"loss_spike_recovered", "healthy"})
NOT_LEARNING = frozenset(
    {
        "no_update", "no_gradient", "stale_gradients", "vanishing_gradient", "dead_units",
        "saturated_units", "lr_too_low", "unscaled_inputs", "poor_init", "loss_plateau",
        "nonfinite_input",
    }
)


@dataclass(frozen=True)
class Evidence:
    """Everything the detectors may look at."""

    table: SeriesTable
    summary: pd.DataFrame  # one row per series (see summarize)
    scalars: pd.DataFrame
    events: pd.DataFrame
    manifest: dict
    first_nonfinite: FirstNonfinite | None
    onset: Onset | None
    diverged: bool
    breaks: list[TensorBreak]


_SUMMARY_POINTS = 4096  # medians of longer stretches are taken on an even subsample


def _median(values: np.ndarray) -> float:
    if len(values) == 0:
        return float("nan")
    stride = max(1, len(values) // _SUMMARY_POINTS)
    return float(np.median(values[::stride]))


def summarize(table: SeriesTable, before: int | None = None) -> pd.DataFrame:
    """One row per series: sizes, early/late/median magnitude, and per-role statistics.

    `before` limits the summary to the steps before it (the healthy phase of a diverged run).
    `silent_from` is the first step of a final stretch where the series is zero or missing
    (a gradient that stopped arriving, an update that stopped), `silent_share` its share.
    """
    rows = []
    for index, key in enumerate(table.keys):
        sl = table.rows(index)
        steps, mag = table.step[sl], table.magnitude[sl]
        if before is not None:
            keep = steps < before
            steps, mag = steps[keep], mag[keep]
        silent = (mag == 0) | (np.isnan(mag) & (table.nonfinite[sl][: len(mag)] == 0))
        live = np.flatnonzero(~silent)
        silent_start = int(live[-1]) + 1 if len(live) else 0
        finite = np.isfinite(mag) & (table.nonfinite[sl][: len(mag)] == 0)
        values = mag[finite]
        n = len(values)
        quarter = max(1, n // 4)
        row = {
            "role": key.role, "name": key.name, "key": key.key,
            "numel": int(table.numel[index]), "steps": int(len(steps)),
            "first_step": int(steps[0]) if len(steps) else None,
            "first": float(values[0]) if n else np.nan,
            "early": _median(values[:quarter]),
            "late": _median(values[-quarter:]),
            "median": _median(values),
            "zero_share": float(np.mean(values == 0)) if n else np.nan,
            "nonfinite_rows": int(np.sum(table.nonfinite[sl] > 0)),
            "silent_from": int(steps[silent_start]) if silent_start < len(steps) else None,
            "silent_share": (len(steps) - silent_start) / len(steps) if len(steps) else np.nan,
        }
        for column in AUX_COLUMNS.get(key.role, ()):
            aux = table.column(index, column)[: len(mag)]
            aux = aux[np.isfinite(aux)]
            row[f"{column}_median"] = _median(aux)
            row[f"{column}_first"] = float(aux[0]) if len(aux) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _role(summary: pd.DataFrame, role: str) -> pd.DataFrame:
    if summary.empty:
        return summary
    return summary[summary["role"] == role]


def _loss(scalars: pd.DataFrame) -> pd.Series | None:
    """The main loss series (`loss`, or the only loss-like name), finite values.

    Several losses and none called `loss` means adversarial training (loss_d, loss_g): those
    losses are not meant to go down, so no detector reads progress from them.
    """
    names = [n for n in scalars["name"].unique() if is_loss(str(n))]
    if "loss" in names:
        name = "loss"
    elif len(names) == 1:
        name = names[0]
    else:
        return None
    values = scalars.loc[scalars["name"] == name, "value"].to_numpy(np.float64)
    return pd.Series(values[np.isfinite(values)], name=name)


def _loss_improvement(scalars: pd.DataFrame) -> float | None:
    """Relative loss decrease from the first to the last quarter of the run."""
    loss = _loss(scalars)
    if loss is None or len(loss) < _MIN_STEPS:
        return None
    quarter = max(1, len(loss) // 4)
    early, late = float(loss.iloc[:quarter].median()), float(loss.iloc[-quarter:].median())
    if early == 0:
        return 0.0
    return (early - late) / abs(early)


def _scalar(scalars: pd.DataFrame, name: str) -> np.ndarray:
    return scalars.loc[scalars["name"] == name, "value"].to_numpy(np.float64)


def _healthy_grad_norm(ev: Evidence) -> float | None:
    """The clipping norm the seeds recommend: the largest global grad norm before the onset.

    Uses the recorded `grad_norm` scalar, else the global norm rebuilt from per-tensor norms.
    """
    grad_norm = ev.scalars[ev.scalars["name"] == "grad_norm"]
    steps = grad_norm["step"].to_numpy(np.int64)
    values = grad_norm["value"].to_numpy(np.float64)
    if len(values) == 0:
        steps, values = _global_grad_norm(ev.table)
    healthy = np.isfinite(values)
    if ev.onset is not None:
        healthy &= steps < ev.onset.step
    return float(np.max(values[healthy])) if healthy.any() else None


def _global_grad_norm(table: SeriesTable) -> tuple[np.ndarray, np.ndarray]:
    grads = table.indices("grad")
    if not grads:
        return np.zeros(0, np.int64), np.zeros(0)
    steps = np.concatenate([table.step[table.rows(i)] for i in grads])
    squares = np.concatenate([table.magnitude[table.rows(i)] ** 2 for i in grads])
    unique, inverse = np.unique(steps, return_inverse=True)
    return unique, np.sqrt(np.bincount(inverse, weights=np.nan_to_num(squares)))


def _lr(scalars: pd.DataFrame) -> float | None:
    values = _scalar(scalars, "lr")
    values = values[np.isfinite(values)]
    return float(values[0]) if len(values) else None


def detect_nonfinite_input(ev: Evidence) -> list[Finding]:
    table = ev.table
    steps: set[int] = set()
    tensors = []
    for index in [*table.indices("input"), *table.indices("target")]:
        rows = table.rows(index)
        bad = table.step[rows][table.nonfinite[rows] > 0]
        if len(bad):
            steps.update(bad.tolist())
            tensors.append(table.keys[index].name)
    if not steps:
        return []
    ordered = sorted(steps)
    return [Finding(
        label="nonfinite_input",
        step=ordered[0],
        tensors=sorted(tensors),
        evidence={"steps_with_nonfinite_batches": ordered[:20], "batches": len(ordered)},
        fix="Repair or drop the rows holding NaN/inf in the data pipeline (check "
            "torch.isnan(x).any() / torch.isinf(x).any() on each batch before the forward pass).",
    )]


def detect_divergence(ev: Evidence) -> list[Finding]:
    """diverged, plus exploding_gradient / lr_too_high when the numbers support them."""
    if not ev.diverged:
        return []
    findings = []
    clip = _healthy_grad_norm(ev)
    lr = _lr(ev.scalars)
    onset_step = ev.onset.step if ev.onset else None
    first = ev.first_nonfinite
    evidence = {
        "onset_step": onset_step,
        "first_nonfinite_step": first.step if first else None,
        "first_nonfinite_tensor": f"{first.role} {first.tensor}" if first else None,
        "lead_steps": ev.onset.lead_steps if ev.onset else None,
        "healthy_max_grad_norm": clip,
        "lr": lr,
    }
    fix_parts = []
    if clip is not None:
        fix_parts.append(
            f"clip gradients at the healthy-phase norm: torch.nn.utils.clip_grad_norm_("
            f"model.parameters(), max_norm={clip:.3g})"
        )
    if lr is not None:
        fix_parts.append(f"lower the learning rate ×10 (lr {lr:.3g} → {lr / 10:.3g})")
    loss_first = first is not None and first.role == "scalar" and is_loss(first.tensor)
    if loss_first and not any(b.fit.amplified for b in ev.breaks if b.role != "scalar"):
        fix_parts.insert(0, "the loss itself produced the first NaN while every tensor was finite "
                            "(log(0) in a hand-written BCE): use BCEWithLogitsLoss on raw logits "
                            "or add an epsilon inside the log")
    findings.append(Finding("diverged", onset_step, _culprits(ev), evidence,
                            "; ".join(fix_parts) or "lower the learning rate ×10"))

    grad_breaks = [b for b in ev.breaks if b.fit.amplified and (
        b.role == "grad" or (b.role == "scalar" and b.name.startswith("grad_norm")))]
    if grad_breaks:
        top = min(grad_breaks, key=lambda b: b.fit.onset_step)
        findings.append(Finding(
            "exploding_gradient", top.fit.onset_step,
            sorted({b.name for b in grad_breaks if b.role == "grad"}),
            {"series": top.fit.label, "stable_level": top.fit.stable_level,
             "final_level": top.fit.final_level, "jump": top.fit.jump,
             "growth_per_step": top.fit.growth_per_step, "healthy_max_grad_norm": clip},
            f"clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), "
            f"max_norm={clip:.3g}) (the largest norm of the healthy phase)" if clip is not None
            else "clip gradients with torch.nn.utils.clip_grad_norm_ at the healthy-phase norm",
        ))

    lr_finding = _lr_too_high(ev, onset_step, lr)
    if lr_finding is not None:
        findings.append(lr_finding)
    return findings


def _lr_too_high(ev: Evidence, onset_step: int | None, lr: float | None) -> Finding | None:
    """The step size, not the gradient, blew up: an update jumped while its gradient did not,
    the first updates were already ≫ the CS231n ratio, or the run diverged from its start."""
    updates = _role(ev.summary, "update")
    first_ratio = None
    if not updates.empty and updates["ratio_first"].notna().any():
        first_ratio = float(np.nanmedian(updates["ratio_first"]))
    start = int(ev.table.step.min()) if len(ev.table.step) else None
    from_start = onset_step is not None and start is not None and onset_step <= start + 3
    # Measured one-step ratios, not the fitted levels: after the blow-up the updates may well
    # shrink again while the run stays ruined.
    grad_jumps = {b.name: b.fit.onset_step for b in ev.breaks
                  if b.role == "grad" and b.fit.credible and b.fit.step_jump >= SHARP_UPDATE_JUMP / 3}
    lr_driven = [
        b for b in ev.breaks
        if b.role == "update" and b.fit.credible and b.fit.step_jump >= SHARP_UPDATE_JUMP
        and onset_step is not None and abs(b.fit.onset_step - onset_step) <= 1
        and grad_jumps.get(b.name, 10**12) > b.fit.onset_step
    ]
    if not (lr_driven or from_start or (first_ratio is not None and first_ratio >= UPDATE_RATIO_HIGH)):
        return None
    evidence = {
        "first_update_ratio_median": first_ratio, "cs231n_target_ratio": UPDATE_RATIO_TARGET,
        "diverged_from_start": bool(from_start), "lr": lr,
        "update_jumps_without_gradient_jump": {b.name: b.fit.step_jump for b in lr_driven},
    }
    fix = (f"lower the learning rate ×10 (lr {lr:.3g} → {lr / 10:.3g}) and retry; sweep 0.1, 0.01, 0.001"
           if lr is not None else "lower the learning rate ×10 and retry; sweep 0.1, 0.01, 0.001")
    if lr_driven:
        fix += ("; the update of " + ", ".join(sorted({b.name for b in lr_driven}))
                + " jumped while its gradient did not: check the LR schedule / param-group LR")
    return Finding("lr_too_high", onset_step, sorted({b.name for b in lr_driven}), evidence, fix)


def _culprits(ev: Evidence) -> list[str]:
    tensors = []
    for b in sorted((b for b in ev.breaks if b.fit.amplified and b.role != "scalar"),
                    key=lambda b: b.fit.onset_step):
        if b.name not in tensors:
            tensors.append(b.name)
    return tensors[:3]


def _silent(frame: pd.DataFrame) -> pd.Series:
    """Series that went silent (zero or missing) for a final stretch long enough to matter."""
    stretch = frame["silent_share"] * frame["steps"]
    return frame["silent_from"].notna() & (stretch >= SILENT_MIN_STEPS) & (frame["silent_share"] >= SILENT_MIN_SHARE)


def detect_no_gradient(ev: Evidence) -> list[Finding]:
    grads = _role(ev.summary, "grad")
    if grads.empty:
        return []
    silent = grads[_silent(grads)]
    # Parameters frozen on purpose from the first step (requires_grad=False) are not a fault.
    frozen = frozen_parameters(ev.manifest)
    silent = silent[~(silent["name"].isin(frozen) & (silent["silent_from"] == silent["first_step"]))]
    if silent.empty:
        return []
    order = manifest_order(ev.manifest)
    silent = silent.assign(pos=silent["name"].map(lambda n: order.get(n, 10**6)))
    silent = silent.sort_values(["silent_from", "pos", "name"], kind="stable")
    everything = len(silent) == len(grads)
    where = "the loss is not connected to any parameter" if everything else \
        "these parameters stopped receiving a gradient while the rest of the model still does"
    marked_frozen = sorted(set(silent["name"]) & frozen)
    fix = (f"{where}: remove the .detach() / torch.no_grad() / .item() that cuts the graph "
           "before these layers")
    if marked_frozen:
        fix += f"; {', '.join(marked_frozen)} have requires_grad=False: unfreeze them if they should learn"
    return [Finding(
        "no_gradient", int(silent["silent_from"].min()), silent["name"].tolist(),
        {"parameters_without_gradient": len(silent), "parameters": len(grads),
         "since_step": {n: int(v) for n, v in zip(silent["name"], silent["silent_from"])},
         "requires_grad_false": marked_frozen},
        fix,
    )]


def detect_no_update(ev: Evidence) -> list[Finding]:
    grads = _role(ev.summary, "grad")
    if grads.empty:
        return []
    # Gradients below the vanishing threshold may legitimately round to no change at all.
    rms = grads["median"] / np.sqrt(grads["numel"].clip(lower=1))
    live_grads = grads[~_silent(grads) & (rms >= VANISHING_GRAD_RMS)]
    updates = _role(ev.summary, "update")
    lr = _lr(ev.scalars)
    if not updates.empty:
        stuck = updates[_silent(updates) & updates["name"].isin(live_grads["name"])]
        if stuck.empty:
            return []
        since = int(stuck["silent_from"].min())
        evidence = {"parameters_not_updated": len(stuck), "parameters_with_gradients": len(live_grads),
                    "since_step": since, "lr": lr,
                    "grad_norm_median": float(live_grads["median"].median())}
        tensors = sorted(stuck["name"])
    else:
        params = _role(ev.summary, "param")
        if params.empty or (params["steps"] < _MIN_STEPS).any():
            return []
        if (np.abs(params["late"] - params["early"]) > 1e-7 * np.abs(params["early"])).any():
            return []
        since = int(params["first_step"].min())
        evidence = {"param_norm_change": 0.0, "lr": lr,
                    "grad_norm_median": float(live_grads["median"].median()) if len(live_grads) else None}
        tensors = sorted(params["name"])
    # Schema 2: whether the optimizers stepped at all since then (share of steps, 0.0 = never).
    stepped = ev.scalars[ev.scalars["name"].astype(str).str.startswith("optimizer_stepped.")
                         & (ev.scalars["step"] >= since)]
    if len(stepped):
        evidence["optimizer_stepped"] = float(stepped["value"].mean())
    fix = "set a learning rate above 0" if lr == 0 else \
        "call optimizer.step() after loss.backward() in every step"
    return [Finding("no_update", since, tensors[:10], evidence, fix)]


def detect_stale_gradients(ev: Evidence) -> list[Finding]:
    """Missing zero_grad(): each recorded gradient is the running sum of all the previous ones.

    t0 is the bend common to the per-parameter gradient norms (postmortem.accumulation). From
    t0 the global norm must then climb like a sum: step after step by about one healthy
    gradient, without the jumps or the constant-ratio growth of an explosion, to ≥ 5× its
    level before, while the loss gets no better.
    """
    steps, values = _grad_norm_series(ev)
    if len(values) < 2 * _MIN_STEPS:
        return []
    # What follows an explosion says nothing about where the accumulation began.
    calm_level = float(np.median(values[: len(values) // 2]))
    exploded = np.flatnonzero(values > STALE_EXPLODED * calm_level)
    end = int(steps[exploded[0]]) if len(exploded) else int(steps[-1]) + 1
    unexploded = values[steps < end]
    blocks = [np.median(unexploded[i: i + PRE]) for i in range(0, len(unexploded) - PRE + 1, PRE)]
    if not blocks or np.sum(unexploded >= STALE_GROWTH * min(blocks)) < 2:
        # The climb must end ≥ 5× its level (median of its last 3 points): without two points
        # 5× above the lowest stretch there is nothing to look for, and no scan to pay for.
        return []
    found = accumulation_onset(_grad_series(ev, end) or [(steps[steps < end], unexploded)])
    if found is None or found.mean_deviance <= 0:
        return []
    t0 = found.step
    before = values[steps < t0][-PRE:]
    climb = values[(steps >= t0) & (steps < end)]
    # An explosion may follow the accumulation: keep what comes before its first big jump (the
    # first step of the climb, t0 ± 1, may itself double the norm or more).
    jumps = np.flatnonzero(climb[1:] > STALE_MAX_RATIO * np.maximum(climb[:-1], 1e-300))
    jumps = jumps[jumps >= 1]
    if len(jumps):
        climb = climb[: jumps[0] + 1]
    if len(before) < _MIN_STEPS or len(climb) < STALE_MIN_CLIMB:
        return []
    level = float(np.median(before))
    growth = float(np.median(climb[-3:]) / max(level, 1e-300))
    increments = np.diff(climb)
    rising = float(np.mean(increments >= 0))
    # |Δ‖G‖| ≤ ‖g_t‖: a sum moves by about one fresh gradient per step, an explosion by a
    # growing multiple of it.
    step_size = float(np.median(np.abs(increments)) / max(level, 1e-300))
    improvement = _loss_change(ev.scalars, t0)
    if growth < STALE_GROWTH or rising < STALE_RISING or step_size > STALE_STEP_SIZE or \
            (improvement is not None and improvement > STALE_LOSS_IMPROVEMENT):
        return []
    return [Finding(
        "stale_gradients", t0, [],
        {"grad_norm_before": level, "grad_norm_at_end": float(climb[-1]), "growth": growth,
         "rising_share": rising, "median_step_over_level": step_size, "bend_deviance": found.mean_deviance,
         "gradient_series": found.series,
         "onset_interval": list(found.interval), "loss_change_since_start": improvement},
        f"gradients accumulate across steps from step {t0} on: call optimizer.zero_grad() at "
        "the start of every step",
    )]


def _grad_series(ev: Evidence, end: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per-parameter gradient norms before step `end`."""
    found = []
    for index in ev.table.indices("grad"):
        rows = ev.table.rows(index)
        steps, values = ev.table.step[rows], ev.table.magnitude[rows]
        found.append((steps[steps < end], values[steps < end]))
    return found


def _grad_norm_series(ev: Evidence) -> tuple[np.ndarray, np.ndarray]:
    grad_norm = ev.scalars[ev.scalars["name"] == "grad_norm"]
    steps = grad_norm["step"].to_numpy(np.int64)
    values = grad_norm["value"].to_numpy(np.float64)
    if len(values) == 0:
        steps, values = _global_grad_norm(ev.table)
    finite = np.isfinite(values)
    return steps[finite], values[finite]


def _loss_change(scalars: pd.DataFrame, step: int) -> float | None:
    """Relative loss decrease from just before `step` to the end (positive: it improved)."""
    loss = scalars[scalars["name"] == "loss"]
    before = loss.loc[loss["step"] < step, "value"].tail(10).to_numpy(np.float64)
    after = loss.loc[loss["step"] >= step, "value"].tail(10).to_numpy(np.float64)
    before, after = before[np.isfinite(before)], after[np.isfinite(after)]
    if len(before) == 0 or len(after) == 0 or np.median(before) == 0:
        return None
    return float((np.median(before) - np.median(after)) / abs(np.median(before)))


def detect_vanishing_gradient(ev: Evidence) -> list[Finding]:
    grads = _role(ev.summary, "grad")
    grads = grads[(grads["median"] > 0) & (grads["numel"] > 0)] if not grads.empty else grads
    if grads.empty:
        return []
    rms = grads["median"] / np.sqrt(grads["numel"])
    order = manifest_order(ev.manifest)
    ranked = grads.assign(rms=rms, pos=grads["name"].map(lambda n: order.get(n, 10**6)))
    ranked = ranked.sort_values("pos", kind="stable")
    tiny = ranked[ranked["rms"] < VANISHING_GRAD_RMS]
    first, last = ranked.iloc[0], ranked.iloc[-1]
    layer_ratio = float(first["rms"] / last["rms"]) if last["rms"] > 0 else None
    if tiny.empty and not (len(ranked) > 2 and layer_ratio is not None and layer_ratio < VANISHING_LAYER_RATIO):
        return []
    return [Finding(
        "vanishing_gradient", None, (tiny["name"].tolist() or [first["name"]])[:10],
        {"smallest_grad_rms": float(ranked["rms"].min()),
         "first_to_last_layer_grad_ratio": layer_ratio,
         "threshold_grad_rms": VANISHING_GRAD_RMS},
        "re-initialise with Kaiming init (torch.nn.init.kaiming_normal_, nonlinearity='relu' or "
        "'leaky_relu') and prefer ReLU-family activations or normalisation between layers",
    )]




def detect_dead_units(ev: Evidence) -> list[Finding]:
    acts = _role(ev.summary, "activation")
    if acts.empty:
        return []
    dead = acts[acts["zero_frac_median"] >= DEAD_ZERO_FRAC]
    if dead.empty:
        return []
    return [Finding(
        "dead_units", None, sorted(dead["name"].tolist()),
        {"zero_fraction": {n: float(v) for n, v in zip(dead["name"], dead["zero_frac_median"])},
         "threshold": DEAD_ZERO_FRAC},
        "most units output exactly 0: reset the large negative biases to 0, use LeakyReLU, "
        "Kaiming init, or a lower learning rate",
    )]


def detect_saturated_units(ev: Evidence) -> list[Finding]:
    acts = _role(ev.summary, "activation")
    if acts.empty or "sat_frac_median" not in acts:
        return []
    sat = acts[acts["sat_frac_median"] >= SATURATED_FRAC]
    if sat.empty:
        return []
    return [Finding(
        "saturated_units", None, sorted(sat["name"].tolist()),
        {"saturated_fraction": {n: float(v) for n, v in zip(sat["name"], sat["sat_frac_median"])},
         "threshold": SATURATED_FRAC},
        "sigmoid/tanh units sit at their bounds: normalise inputs, use Xavier init for tanh/sigmoid "
        "layers, or switch to ReLU-family activations; for a sigmoid output feeding a BCE, use "
        "BCEWithLogitsLoss on the raw logits",
    )]


def detect_lr_too_low(ev: Evidence) -> list[Finding]:
    """Updates ≪ the CS231n ratio, or a loss still falling at its first, slow pace at the end."""
    if ev.diverged:
        return []
    updates = _role(ev.summary, "update")
    ratios = updates["ratio_median"].replace(0, np.nan).dropna() if not updates.empty else pd.Series([])
    ratio = float(ratios.median()) if len(ratios) else None
    improvement = _loss_improvement(ev.scalars)
    slow = _slow_steady_descent(ev.scalars)
    tiny_updates = ratio is not None and ratio <= UPDATE_RATIO_LOW and \
        (improvement is None or improvement <= SLOW_MAX_IMPROVEMENT)
    if not (tiny_updates or slow):
        return []
    lr = _lr(ev.scalars)
    fix = "raise the learning rate ×10"
    if lr is not None:
        fix += f" (lr {lr:.3g} → {lr * 10:.3g})"
    if ratio:
        fix += f"; updates are {UPDATE_RATIO_TARGET / ratio:.3g}× below the ~1e-3 update/parameter ratio"
    return [Finding(
        "lr_too_low", None, [],
        {"update_ratio_median": ratio, "cs231n_target_ratio": UPDATE_RATIO_TARGET, "lr": lr,
         "loss_improvement": improvement, "steady_slow_descent": slow},
        fix + "; sweep 0.1, 0.01, 0.001",
    )]


def _slow_steady_descent(scalars: pd.DataFrame) -> bool:
    """The loss fell by less than half, along a straight line (r² ≥ 0.9) whose second half
    keeps the pace of the first: far from converged, each step just too small (seed 002)."""
    loss = _loss(scalars)
    improvement = _loss_improvement(scalars)
    if loss is None or improvement is None or not SLOW_MIN_IMPROVEMENT <= improvement <= SLOW_MAX_IMPROVEMENT:
        return False
    values = loss.to_numpy()
    half = len(values) // 2
    whole = linregress(np.arange(len(values)), values)
    early = linregress(np.arange(half), values[:half])
    late = linregress(np.arange(len(values) - half), values[half:])
    if not (early.slope < 0 and late.slope < 0 and whole.rvalue**2 >= SLOW_LINEAR_R2):
        return False
    return bool(SLOW_PACE_KEPT <= late.slope / early.slope <= 1 / SLOW_PACE_KEPT)


def detect_unscaled_inputs(ev: Evidence) -> list[Finding]:
    inputs = _role(ev.summary, "input")
    if inputs.empty:
        return []
    # Token IDs, class labels and masks are not features: only float inputs have a scale.
    inputs = inputs[[ev.table.input_kinds.get(("input", n), "float") == "float" for n in inputs["name"]]]
    big = inputs[(inputs["median"] >= UNSCALED_MAX_ABS) | (inputs["mean_median"].abs() >= UNSCALED_ABS_MEAN)]
    if big.empty:
        return []
    return [Finding(
        "unscaled_inputs", None, sorted(big["name"].tolist()),
        {"max_abs_median": {n: float(v) for n, v in zip(big["name"], big["median"])},
         "mean_median": {n: float(v) for n, v in zip(big["name"], big["mean_median"])},
         "std_median": {n: float(v) for n, v in zip(big["name"], big["std_median"])}},
        "normalise the inputs: subtract the mean and divide by the standard deviation of each "
        "feature (or scale to [0, 1]) before the forward pass",
    )]


def detect_poor_init(ev: Evidence) -> list[Finding]:
    params = _role(ev.summary, "param")
    if params.empty:
        return []
    shapes = parameter_shapes(ev.manifest)
    bad = {}
    for name, std, numel in zip(params["name"], params["std_first"], params["numel"]):
        shape = shapes.get(name)
        if not name.endswith("weight") or numel <= 1 or not np.isfinite(std):
            continue
        if std == 0:
            bad[name] = 0.0
            continue
        if shape is None or len(shape) < 2 or shape[0] == 0:
            continue
        scale = float(std * np.sqrt(numel / shape[0]))  # std · sqrt(fan_in)
        if not INIT_SCALE_RANGE[0] <= scale <= INIT_SCALE_RANGE[1]:
            bad[name] = scale
    if not bad:
        return []
    return [Finding(
        "poor_init", 0, sorted(bad),
        {"std_times_sqrt_fan_in": bad, "expected_range": list(INIT_SCALE_RANGE),
         "kaiming_normal": float(np.sqrt(2.0))},
        "re-initialise the weights with torch.nn.init.kaiming_normal_ (ReLU family) or "
        "xavier_uniform_ (tanh/sigmoid); never all zeros",
    )]




def detect_loss_plateau(ev: Evidence) -> list[Finding]:
    if ev.diverged:
        return []
    improvement = _loss_improvement(ev.scalars)
    if improvement is None or improvement >= PLATEAU_IMPROVEMENT:
        return []
    loss = _loss(ev.scalars)
    return [Finding(
        "loss_plateau", None, [],
        {"loss_improvement": improvement, "threshold": PLATEAU_IMPROVEMENT,
         "first_loss": float(loss.iloc[0]), "last_loss": float(loss.iloc[-1])},
        "overfit one small batch first (5 rows, lr 0.1, 100 steps): if the loss does not reach "
        "~0, the training loop is broken (optimizer.step(), detach, wrong loss variable)",
    )]


def detect_loss_spike_recovered(ev: Evidence) -> list[Finding]:
    loss = ev.scalars[ev.scalars["name"] == "loss"]
    values = loss["value"].to_numpy(np.float64)
    steps = loss["step"].to_numpy(np.int64)
    if len(values) < 2 * _MIN_STEPS or not np.all(np.isfinite(values)) or np.any(values <= 0):
        return []
    level = pd.Series(values).rolling(20, min_periods=5).median().shift(1).to_numpy()
    spikes = np.flatnonzero(values > SPIKE_FACTOR * level)
    findings = []
    for i in spikes[:1]:
        after = values[i + 1:]
        recovered = np.flatnonzero(after < SPIKE_RECOVERED * level[i])
        if len(recovered) == 0:
            continue
        findings.append(Finding(
            "loss_spike_recovered", int(steps[i]), [],
            {"peak_loss": float(values[i]), "recent_level": float(level[i]),
             "factor": float(values[i] / level[i]),
             "recovered_at_step": int(steps[i + 1 + recovered[0]])},
            "informational: the loss spiked and recovered on its own; if spikes recur, clip "
            "gradients at the healthy-phase norm",
        ))
    return findings


DETECTORS: tuple[Callable[[Evidence], list[Finding]], ...] = (
    detect_nonfinite_input,
    detect_divergence,
    detect_no_gradient,
    detect_no_update,
    detect_stale_gradients,
    detect_vanishing_gradient,
    detect_dead_units,
    detect_saturated_units,
    detect_lr_too_low,
    detect_unscaled_inputs,
    detect_poor_init,
    detect_loss_plateau,
    detect_loss_spike_recovered,
)


def diagnose(ev: Evidence) -> list[Finding]:
    findings = [f for detector in DETECTORS for f in detector(ev)]
    # Without tensor statistics most detectors saw nothing: health is not claimed then.
    if len(ev.table) and not any(f.label not in INFORMATIONAL for f in findings):
        improvement = _loss_improvement(ev.scalars)
        findings.append(Finding("healthy", None, [], {"loss_improvement": improvement},
                                "nothing to fix"))
    return findings


def verdict(findings: list[Finding]) -> str:
    labels = {f.label for f in findings}
    if "diverged" in labels:
        return "diverged"
    if labels & NOT_LEARNING:
        return "not_learning"
    return "healthy"
