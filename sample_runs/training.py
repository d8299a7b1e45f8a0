"""Training loops shared by the scenarios, each recorded with `recorders.Recorder`."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .faults import Fault

__all__ = ["Outcome", "TrainingDiverged", "train", "first_nonfinite", "broke_after"]

STEPS_AFTER_NONFINITE = 3


class TrainingDiverged(FloatingPointError):
    """Raised by a loop after a few non-finite losses, as a user's NaN check would."""


@dataclass
class Outcome:
    losses: list[float] = field(default_factory=list)

    @property
    def first_nonfinite_loss_step(self) -> int | None:
        return first_nonfinite(self.losses)


def first_nonfinite(values: list[float]) -> int | None:
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def broke_after(losses: list[float], t0: int, *, chance: float) -> bool:
    """Whether training broke at t0 rather than shrugging the fault off.

    Broken: a non-finite loss from t0 on, or a loss spike of at least ×3 over the mean of the 10
    steps before t0 (within 10 steps of t0) after which the run does not recover: the mean of its
    last 10 losses stays ≥ 1.5× the pre-t0 mean or ≥ 90 % of the chance-level loss `chance`.
    """
    after = losses[t0:]
    if any(not math.isfinite(v) for v in after):
        return True
    before = sum(losses[t0 - 10 : t0]) / 10
    last = sum(losses[-10:]) / 10
    return max(after[:10]) >= 3 * before and (last >= 1.5 * before or last >= 0.9 * chance)


def train(
    run_dir: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    fault: Fault | None = None,
    lr_at: Callable[[int], float] | None = None,
    events: dict[int, tuple[str, str]] | None = None,
    take_step: bool = True,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """A plain supervised loop; `fault` decides what goes wrong and when.

    `lr_at(step)` sets every group's lr (warm-up); `events[step]` is recorded with `rec.event` just
    before that step; `take_step=False` is seed 002's loop that forgot `optimizer.step()`.
    The loop stops, like a user's NaN check, a few steps after the loss first becomes non-finite.
    """
    from recorders import Recorder

    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    params = [p for p in model.parameters()]
    try:
        with Recorder(run_dir, model, optimizer, config=config or {}, overwrite=True,
                      **(recorder_options or {})) as rec:
            for step in range(steps):
                if events and step in events:
                    rec.event(*events[step])
                fault.before_step(step, model, optimizer)
                if lr_at is not None:
                    for group in optimizer.param_groups:
                        group["lr"] = lr_at(step)
                x, y = fault.batch(step, *draw())
                if fault.zero_grad(step):
                    optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                scale = fault.loss_scale(step)
                (loss * scale).backward()
                if scale != 1.0:
                    for p in params:
                        if p.grad is not None:
                            p.grad.div_(scale)
                if take_step:
                    optimizer.step()
                rec.step(loss=loss, inputs=x, targets=y)
                outcome.losses.append(loss.item())
                nan_at = outcome.first_nonfinite_loss_step
                if nan_at is not None and step >= nan_at + STEPS_AFTER_NONFINITE - 1:
                    raise TrainingDiverged(f"loss is {loss.item()} at step {step}")
    except TrainingDiverged:
        pass
    return outcome
