"""Sample training runs with known ground truth: the seeds' failures, injected faults, healthy runs.

`python -m sample_runs list | make NAME --out DIR | make-all --out DIR [--subset small]`.
Each run directory gets an `expected.json` (see `sample_runs.expected.Expected`).
"""
from .expected import EXPECTED_FILE, VERDICTS, Expected, read_expected, write_expected
from .scenarios import HELD_OUT_FAMILIES, SCENARIOS, Scenario, ScenarioError, get, make, scenario_names

__all__ = [
    "EXPECTED_FILE",
    "Expected",
    "HELD_OUT_FAMILIES",
    "SCENARIOS",
    "Scenario",
    "ScenarioError",
    "VERDICTS",
    "get",
    "make",
    "read_expected",
    "scenario_names",
    "write_expected",
]
