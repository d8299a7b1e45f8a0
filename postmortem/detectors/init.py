"""Findings about the weights a run started from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from ..manifest import lookup_tables, parameter_shapes
from .base import ERROR, NOTE, Evidence, Outcome, finding, register, role
from .thresholds import InitThresholds

__all__ = ["InitialWeight", "InitialWeights", "poor_init"]


@dataclass(frozen=True)
class InitialWeight:
    name: str
    std: float  # std of the weight at its first record
    norm: float  # its norm there
    numel: int
    shape: tuple[int, ...] | None


@dataclass(frozen=True)
class InitialWeights:
    weights: list[InitialWeight]  # lookup tables (`manifest.lookup_tables`) aside: no fan-in scales their rows
    outcome: Outcome


def _initial_weights(ev: Evidence) -> InitialWeights:
    params = role(ev.summary, "param")
    shapes = parameter_shapes(ev.manifest)
    tables = lookup_tables(ev.manifest)
    weights = []
    for name, std, norm, numel in zip(params.get("name", []), params.get("std_first", []), params.get("first", []),
                                      params.get("numel", [])):
        if name in tables:
            continue
        shape = shapes.get(name)
        weights.append(InitialWeight(name, float(std), float(norm), int(numel), tuple(shape) if shape is not None else None))
    return InitialWeights(weights, ev.outcome)


@register("poor_init", "init", _initial_weights)
def poor_init(initial: InitialWeights, th: InitThresholds) -> list[Finding]:
    """Weights started outside a sane std·sqrt(fan_in), or all zeros. It explains a run that does
    not learn (an error) only when it is a share of the model's matrices; one head scaled down
    on purpose is a note."""
    bad, matrices = {}, 0
    for w in initial.weights:
        if not w.name.endswith("weight") or w.numel <= 1 or not np.isfinite(w.std):
            continue
        matrices += w.shape is not None and len(w.shape) >= 2
        if w.std == 0:
            # All zeros, or a matrix of one value (every unit the same), is a poor init; a
            # constant vector (a norm layer's gain of ones) is the usual one.
            if w.norm == 0 or (w.shape is not None and len(w.shape) >= 2):
                bad[w.name] = 0.0
            continue
        if w.shape is None or len(w.shape) < 2 or w.shape[0] == 0:
            continue
        scale = float(w.std * np.sqrt(w.numel / w.shape[0]))  # std · sqrt(fan_in)
        if not th.scale_range[0] <= scale <= th.scale_range[1]:
            bad[w.name] = scale
    if not bad:
        return []
    return [finding(
        "poor_init", 0, sorted(bad),
        {"std_times_sqrt_fan_in": bad, "expected_range": list(th.scale_range),
         "kaiming_normal": float(np.sqrt(2.0))},
        "re-initialise the weights with torch.nn.init.kaiming_normal_ (ReLU family) or "
        "xavier_uniform_ (tanh/sigmoid); never all zeros",
        ERROR if not initial.outcome.learns and len(bad) >= th.model_share * max(matrices, 1) else NOTE,
    )]
