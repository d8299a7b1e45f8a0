"""Findings about layer outputs: dead units, saturated units."""

from __future__ import annotations

from dataclasses import dataclass

from ..findings import Finding
from .base import ERROR, NOTE, Evidence, Outcome, finding, register, role
from .thresholds import ActivationThresholds

__all__ = ["ActivationShare", "ActivationShares", "dead_units", "saturated_units"]


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
    return [finding(
        "dead_units", None, sorted(a.name for a in dead),
        {"zero_fraction": {a.name: a.zero_frac for a in dead}, "threshold": th.dead_zero_frac},
        "most units output exactly 0: reset the large negative biases to 0, use LeakyReLU, "
        "Kaiming init, or a lower learning rate",
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
