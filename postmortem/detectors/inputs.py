"""Findings about the data fed to the model: non-finite batches, unscaled features."""

from __future__ import annotations

from dataclasses import dataclass

from ..findings import Finding
from .base import ERROR, NOTE, WARNING, Evidence, Outcome, finding, register, role
from .thresholds import InputThresholds

__all__ = ["InputFeatures", "InputSeries", "NOT_FEATURES", "NonfiniteBatches", "nonfinite_input", "unscaled_inputs"]

# Integer tensors (token IDs, class labels) and masks are indices, not features: their size
# says nothing about scaling (CONTRACT-11: the recorder's `kind` column).
NOT_FEATURES = ("index", "mask")

@dataclass(frozen=True)
class NonfiniteBatches:
    steps: dict[str, list[int]]  # input/target name → steps whose batch held NaN/inf
    survived: bool = False  # the run did not stay broken (no divergence, or one it came back from) and learns

def _nonfinite_batches(ev: Evidence) -> NonfiniteBatches:
    table = ev.table
    steps = {}
    for index in [*table.indices("input"), *table.indices("target")]:
        rows = table.rows(index)
        bad = table.step[rows][table.nonfinite[rows] > 0]
        if len(bad):
            steps[table.keys[index].name] = bad.tolist()
    return NonfiniteBatches(steps, (not ev.diverged or ev.recovered) and ev.outcome.learns is True)

@register("nonfinite_input", "inputs", _nonfinite_batches)
def nonfinite_input(batches: NonfiniteBatches, th: InputThresholds) -> list[Finding]:
    """Batches holding NaN/inf: the cause of a run they broke (an error), a warning in one that
    learns on regardless (round 32's batch_nan-qat: a quantization stub's clamp made the NaN batch
    finite once its observers were frozen, and the loss fell on 0.17 → 0.004)."""
    if not batches.steps:
        return []
    ordered = sorted({s for steps in batches.steps.values() for s in steps})
    return [finding(
        "nonfinite_input", ordered[0], sorted(batches.steps),
        {"steps_with_nonfinite_batches": ordered[:20], "batches": len(ordered), "run_survived": batches.survived},
        ("The run learned on regardless; repair" if batches.survived else "Repair") + " or drop the rows holding NaN/inf in the data pipeline (check "
        "torch.isnan(x).any() / torch.isinf(x).any() on each batch before the forward pass).",
        WARNING if batches.survived else ERROR,
    )]

@dataclass(frozen=True)
class InputSeries:
    """One input's typical batch: median of max |x|, of the mean and of the std."""

    name: str
    kind: str | None  # "float", "index", "mask" (None: not recorded, schema 1)
    max_abs: float
    mean: float
    std: float

@dataclass(frozen=True)
class InputFeatures:
    inputs: list[InputSeries]
    outcome: Outcome

def _input_features(ev: Evidence) -> InputFeatures:
    inputs = role(ev.summary, "input")
    series = [InputSeries(n, ev.table.input_kinds.get(("input", n)), float(m), float(mean), float(std))
              for n, m, mean, std in zip(inputs.get("name", []), inputs.get("median", []),
                                         inputs.get("mean_median", []), inputs.get("std_median", []))]
    return InputFeatures(series, ev.outcome)

@register("unscaled_inputs", "inputs", _input_features)
def unscaled_inputs(features: InputFeatures, th: InputThresholds) -> list[Finding]:
    big = [s for s in features.inputs if s.kind not in NOT_FEATURES
           and (s.max_abs >= th.unscaled_max_abs or abs(s.mean) >= th.unscaled_abs_mean)]
    if not big:
        return []
    return [finding(
        "unscaled_inputs", None, sorted(s.name for s in big),
        {"max_abs_median": {s.name: s.max_abs for s in big},
         "mean_median": {s.name: s.mean for s in big},
         "std_median": {s.name: s.std for s in big}},
        "normalise the inputs: subtract the mean and divide by the standard deviation of each "
        "feature (or scale to [0, 1]) before the forward pass",
        NOTE if features.outcome.learns else ERROR,
    )]


