"""End to end on synthetic runs in the recorder's format (sample_runs/synthetic.py)."""

from __future__ import annotations

import numpy as np
import pytest

from postmortem import analyze
from sample_runs.synthetic import SyntheticSpec, write_synthetic_run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_injected_divergence_onset_and_culprit(tmp_path, seed):
    rng = np.random.default_rng(seed)
    onset = int(rng.integers(150, 500))
    spec = SyntheticSpec(steps=600, tensors=40, onset=onset, nan_at=onset + 15, noise=0.1,
                         steps_per_segment=50, seed=seed)
    analysis = analyze(write_synthetic_run(tmp_path / "run", spec))
    assert analysis.verdict == "diverged"
    assert analysis.onset.step == onset
    assert analysis.onset.lead_steps == 15
    assert (analysis.ranking[0].tensor, analysis.ranking[0].role) == ("layers.0.weight", "grad")
    assert analysis.first_nonfinite.step == onset + 15


@pytest.mark.parametrize("seed", [0, 1])
def test_noisy_healthy_synthetic_run_is_healthy(tmp_path, seed):
    spec = SyntheticSpec(steps=800, tensors=40, noise=0.3, steps_per_segment=50, seed=seed)
    analysis = analyze(write_synthetic_run(tmp_path / "run", spec))
    assert analysis.verdict == "healthy"
    assert {f.label for f in analysis.findings} <= {"healthy", "recovered_incident"}
