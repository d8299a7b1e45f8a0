"""Findings about layer outputs: dead units, saturated units."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from ..manifest import module_types
from ..scalars import is_loss
from .base import ERROR, NOTE, Evidence, Outcome, finding, layer_list, register, role
from .thresholds import ActivationThresholds

__all__ = ["ActivationShare", "ActivationShares", "SigmoidBounds", "dead_units", "log_of_zero", "saturated_units"]


@dataclass(frozen=True)
class ActivationShare:
    """A module's median share of outputs that are exactly zero / at a bounded activation's bounds."""

    name: str
    zero_frac: float
    sat_frac: float  # NaN for unbounded modules


@dataclass(frozen=True)
class ActivationShares:
    layers: list[ActivationShare]
    outcome: Outcome


def _activation_shares(ev: Evidence) -> ActivationShares:
    acts = role(ev.summary, "activation")
    layers = [ActivationShare(n, float(z), float(s)) for n, z, s in zip(
        acts.get("name", []), acts.get("zero_frac_median", []), acts.get("sat_frac_median", []))]
    return ActivationShares(layers, ev.outcome)


def _severity(outcome: Outcome) -> str:
    """Units that died or saturated explain a run that does not learn; in one that learns they
    are a note (a ReLU net keeps learning with some dead units)."""
    return NOTE if outcome.learns else ERROR


@register("dead_units", "activations", _activation_shares)
def dead_units(shares: ActivationShares, th: ActivationThresholds) -> list[Finding]:
    dead = [a for a in shares.layers if a.zero_frac >= th.dead_zero_frac]
    if not dead:
        return []
    names = sorted(a.name for a in dead)
    return [finding(
        "dead_units", None, names,
        {"zero_fraction": {a.name: a.zero_frac for a in dead}, "threshold": th.dead_zero_frac},
        f"most units of {layer_list(names)} output exactly 0 (dead ReLUs: no gradient flows back "
        "through them): reset the large negative biases to 0, use LeakyReLU(0.2), Kaiming init, "
        "or a lower learning rate",
        _severity(shares.outcome),
    )]


@register("saturated_units", "activations", _activation_shares)
def saturated_units(shares: ActivationShares, th: ActivationThresholds) -> list[Finding]:
    sat = [a for a in shares.layers if a.sat_frac >= th.saturated_frac]
    if not sat:
        return []
    return [finding(
        "saturated_units", None, sorted(a.name for a in sat),
        {"saturated_fraction": {a.name: a.sat_frac for a in sat}, "threshold": th.saturated_frac},
        "sigmoid/tanh units sit at their bounds: normalise inputs, use Xavier init for tanh/sigmoid "
        "layers, or switch to ReLU-family activations; for a sigmoid output feeding a BCE, use "
        "BCEWithLogitsLoss on the raw logits",
        _severity(shares.outcome),
    )]


@dataclass(frozen=True)
class SigmoidBounds:
    """Each Sigmoid module's output by step: max |y| (within a few float32 ulps of 1, log(1 − y)
    is one rounding from log 0), share of outputs exactly 0, share within 0.01 of a bound; and
    where the loss first went non-finite."""

    modules: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # steps, max_abs, zero_frac, sat_frac
    first_nonfinite_loss: tuple[str, int] | None  # (loss name, step)
    first_nonfinite_step: int | None  # of anything recorded


def _sigmoid_bounds(ev: Evidence) -> SigmoidBounds:
    types = module_types(ev.manifest)
    table = ev.table
    modules = {}
    for index in table.indices("activation"):
        name = table.keys[index].name
        if types.get(name) != "Sigmoid":
            continue
        rows = table.rows(index)
        finite = table.nonfinite[rows] == 0
        modules[name] = (table.step[rows][finite], table.magnitude[rows][finite],
                         table.column(index, "zero_frac")[finite], table.column(index, "sat_frac")[finite])
    names = ev.scalars["name"]  # a name per step: test each name once (100 000 steps: 1 s)
    is_a_loss = names.isin([n for n in names.unique() if is_loss(str(n))])
    losses = ev.scalars[is_a_loss & ~np.isfinite(ev.scalars["value"])]
    first_loss = None
    if len(losses):
        row = losses.sort_values("step", kind="stable").iloc[0]
        first_loss = (str(row["name"]), int(row["step"]))
    first = ev.first_nonfinite.step if ev.first_nonfinite is not None else None
    return SigmoidBounds(modules, first_loss, first)


@register("log_of_zero", "activations", _sigmoid_bounds)
def log_of_zero(bounds: SigmoidBounds, th: ActivationThresholds) -> list[Finding]:
    """A sigmoid's outputs reached 0 or 1 (to float32 precision) and the loss, first of all, went
    non-finite: log(0) in a hand-written BCE (seed 001)."""
    if bounds.first_nonfinite_loss is None:
        return []
    loss, step = bounds.first_nonfinite_loss
    if bounds.first_nonfinite_step is not None and bounds.first_nonfinite_step < step:
        return []  # something else broke first: the loss only followed
    hits = []
    for name, (steps, max_abs, zero_frac, sat_frac) in bounds.modules.items():
        at_bound = (max_abs >= 1.0 - th.log0_margin) | (zero_frac > 0)
        before = steps <= step
        if not np.any(at_bound & before):
            continue
        # From which step: the start of the last unbroken stretch at the bounds before the NaN.
        idx = np.flatnonzero(before)
        stretch = idx[-1]
        while stretch > idx[0] and at_bound[stretch - 1]:
            stretch -= 1
        if not at_bound[idx[-1]] and not at_bound[max(idx[-1] - 1, 0)]:
            continue
        hits.append((int(steps[stretch]), name, float(np.nanmax(sat_frac[stretch: idx[-1] + 1])) if
                     np.isfinite(sat_frac[stretch: idx[-1] + 1]).any() else None,
                     float(np.max(zero_frac[stretch: idx[-1] + 1]))))
    if not hits:
        return []
    since, name, near, zeros = min(hits)
    return [finding(
        "log_of_zero", since, [name],
        {"module": name, "at_bounds_from_step": since, "share_near_bounds": near,
         "share_exactly_zero": zeros, "first_nonfinite_loss": loss, "first_nonfinite_loss_step": step},
        # The mechanism and the fix first (a ticket shows the first 240 characters), the numbers after.
        f"log(0) in a hand-written BCE: `{name}` saturated to exactly 0 or 1 (from step {since}) and `{loss}` "
        f"went non-finite at step {step}. Feed the raw logits to torch.nn.BCEWithLogitsLoss (or use "
        f"torch.log(x + 1e-8)), then clip gradients; up to {(near or 0) * 100:.3g} % of its outputs were "
        "within 0.01 of a bound",
    )]
