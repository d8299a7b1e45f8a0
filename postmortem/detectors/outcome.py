"""Findings about the outcome itself: a loss that does not improve."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..findings import Finding
from .base import Evidence, Outcome, finding, loss_curve, register
from .thresholds import OutcomeThresholds

__all__ = ["LossOutcome", "loss_plateau"]


@dataclass(frozen=True)
class LossOutcome:
    loss: np.ndarray  # finite training loss, step order
    outcome: Outcome
    diverged: bool  # and did not come back


def _loss_outcome(ev: Evidence) -> LossOutcome:
    return LossOutcome(loss_curve(ev.scalars)[1], ev.outcome, ev.diverged and not ev.recovered)


@register("loss_plateau", "outcome", _loss_outcome)
def loss_plateau(run: LossOutcome, th: OutcomeThresholds) -> list[Finding]:
    """The training loss (and every metric passed) failed to improve by the run's own yardstick."""
    if run.diverged or run.outcome.learns is not False or run.outcome.improvement is None:
        return []
    return [finding(
        "loss_plateau", None, [],
        {"loss_improvement": run.outcome.improvement, "threshold": th.plateau_improvement,
         "noise": run.outcome.noise, "first_loss": float(run.loss[0]), "last_loss": float(run.loss[-1])},
        "overfit one small batch first (5 rows, lr 0.1, 100 steps): if the loss does not reach "
        "~0, the training loop is broken (optimizer.step(), detach, wrong loss variable)",
    )]
