"""Sample training runs with known ground truth: the seeds' failures, injected faults, healthy runs.

`python -m sample_runs list | make NAME --out DIR | make-all --out DIR [--subset small] [--arch A,B]`.
Each run directory gets an `expected.json` (see `sample_runs.expected.Expected`).
"""
from .expected import EXPECTED_FILE, VERDICTS, Expected, read_expected, write_expected
from .scenarios import (
    COMMITTED_SAMPLES,
    HELD_OUT_ARCHS,
    HELD_OUT_FAMILIES,
    SAMPLES_DIR,
    SCENARIOS,
    Scenario,
    ScenarioError,
    get,
    make,
    make_committed_samples,
    scenario_names,
)

__all__ = [
    "COMMITTED_SAMPLES",
    "EXPECTED_FILE",
    "Expected",
    "HELD_OUT_ARCHS",
    "HELD_OUT_FAMILIES",
    "SAMPLES_DIR",
    "SCENARIOS",
    "Scenario",
    "ScenarioError",
    "VERDICTS",
    "get",
    "make",
    "make_committed_samples",
    "read_expected",
    "scenario_names",
    "write_expected",
]
