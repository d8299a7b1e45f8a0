"""Detectors: one module per family of findings, thresholds in `Thresholds`, rules by label."""

from .thresholds import (
    ActivationThresholds,
    DivergenceThresholds,
    GradientThresholds,
    InitThresholds,
    InputThresholds,
    OutcomeThresholds,
    RootCauseThresholds,
    Thresholds,
    UpdateThresholds,
)

__all__ = [
    "ActivationThresholds",
    "DivergenceThresholds",
    "GradientThresholds",
    "InitThresholds",
    "InputThresholds",
    "OutcomeThresholds",
    "RootCauseThresholds",
    "Thresholds",
    "UpdateThresholds",
]
