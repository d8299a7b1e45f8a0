"""benchmarks/sparse_metrics.py: which few-point outcome metrics improve, read at their own count."""

import numpy as np

from postmortem.detectors.thresholds import OutcomeThresholds

from sample_run_helpers import load_script


def _script():
    return load_script("benchmarks/sparse_metrics.py")


def test_only_few_point_outcome_metrics_that_improve_are_listed():
    script = _script()
    metrics = {
        "val_top1": (np.array([33.0, 68.0, 80.5, 88.0, 87.8, 88.5]), True),  # round 31's detach-s1: improves
        "val_mae": (np.array([0.90, 0.91, 0.89, 0.90, 0.91, 0.90]), False),  # flat: no
        "val_acc": (np.array([0.2, 0.5, 0.8, np.nan]), True),  # 3 finite points, under --min-points 5
        "eval_score": (np.linspace(0.1, 0.9, 12), True),  # 12 points: judged by the analyzer already
        "val_loss": (np.array([2.0, 1.5, 1.2, 1.0, 0.9, 0.8]), False),  # a loss never judges
    }
    assert script.sparse_improving(metrics, 5, OutcomeThresholds()) == ["val_top1"]
    assert script.sparse_improving(metrics, 3, OutcomeThresholds()) == ["val_acc", "val_top1"]
