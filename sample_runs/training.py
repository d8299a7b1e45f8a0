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

__all__ = ["Outcome", "TrainingDiverged", "train", "train_field", "first_nonfinite", "broke_after", "broke_against",
           "stalled_against", "token_cross_entropy"]

STEPS_AFTER_NONFINITE = 3


class TrainingDiverged(FloatingPointError):
    """Raised by a loop after a few non-finite losses, as a user's NaN check would."""


@dataclass
class Outcome:
    losses: list[float] = field(default_factory=list)

    @property
    def first_nonfinite_loss_step(self) -> int | None:
        return first_nonfinite(self.losses)

    def log(self, step: int, loss: float) -> None:
        """Keeps the step's loss; raises TrainingDiverged a few steps after the first non-finite one."""
        self.losses.append(loss)
        nan_at = self.first_nonfinite_loss_step
        if nan_at is not None and step >= nan_at + STEPS_AFTER_NONFINITE - 1:
            raise TrainingDiverged(f"loss is {loss} at step {step}")


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


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def broke_against(losses: list[float], twin: list[float], t0: int) -> bool:
    """Whether a fault at t0 broke training, judged against its fault-free twin (same model, seed,
    batches): a non-finite loss from t0 on, or a jump (a loss within 10 steps of t0 ≥ 1.2× the mean
    of the 10 before) after which the run ends ≥ 1.25× the twin's final loss (means of the last 10).
    For losses bounded near chance (an LM's ln(vocab)) a ×3 spike is impossible; this is the test."""
    if any(not math.isfinite(v) for v in losses[t0:]):
        return True
    jumped = max(losses[t0 : t0 + 10]) >= 1.2 * _mean(losses[max(0, t0 - 10) : max(t0, 1)])
    return jumped and _mean(losses[-10:]) >= 1.25 * _mean(twin[-10:])


def stalled_against(losses: list[float], twin: list[float], t0: int) -> bool:
    """Whether training stopped learning from t0, against its fault-free twin: it ends ≥ 1.15× the
    twin's final loss and improved since t0 by at most half of what the twin improved since t0."""
    if any(not math.isfinite(v) for v in losses):
        return False
    window = slice(max(0, t0 - 10), max(t0, 10))
    gained = _mean(losses[window]) - _mean(losses[-10:])
    twin_gained = _mean(twin[window]) - _mean(twin[-10:])
    return _mean(losses[-10:]) >= 1.15 * _mean(twin[-10:]) and gained <= 0.5 * twin_gained


def train(
    run_dir: Path | None,
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
    `run_dir=None` trains without recording (the losses only: a fault-free twin).
    """
    from recorders import Recorder

    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    params = [p for p in model.parameters()]
    try:
        recorder = _Unrecorded() if run_dir is None else Recorder(
            run_dir, model, optimizer, config=config or {}, overwrite=True, **(recorder_options or {}))
        with recorder as rec:
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
                if take_step and fault.take_step(step):
                    optimizer.step()
                rec.step(loss=loss, inputs=x, targets=y)
                outcome.log(step, loss.item())
    except TrainingDiverged:
        pass
    return outcome


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over class indices; an LM's (B, T, V) logits are flattened for next-token targets."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


def _float32(output):
    """The model's output in float32; a tuple (logits and an auxiliary loss, a VAE's reconstruction
    logits, mu and logvar) element by element, integer elements (a CTC model's lengths) as they are."""
    if isinstance(output, tuple):
        return tuple(o.float() if o.is_floating_point() else o for o in output)
    return output.float()


class _Unrecorded:
    """Stands in for the Recorder where a loop runs only for its losses (a fault-free twin)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self, **_):
        pass

    def event(self, *_):
        pass


def train_field(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    fault: Fault | None = None,
    accumulation: int = 1,
    clip: float | None = None,
    bf16: bool = False,
    eval_draw: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
    eval_every: int = 25,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = token_cross_entropy,
    config: dict | None = None,
    recorder_options: dict | None = None,
    after_step: Callable[[], None] | None = None,
) -> Outcome:
    """nanoGPT's loop: schedule → `accumulation` micro-batches of forward/backward (loss / accum),
    clip → `optimizer.step()` → `zero_grad(set_to_none=True)` → `rec.step`, an eval loop every
    `eval_every` steps (eval mode, no_grad) whose loss is recorded as `val_loss`.

    `lr_at(step)` is the schedule's factor on each group's `base_lr`; `bf16` runs forward and
    loss under CPU bf16 autocast. `loss_fn(output, targets)` gets the model's output in float32,
    a tuple output element by element (default: cross-entropy over class indices,
    `token_cross_entropy`; a regression's MSE, a click model's BCE-with-logits). The recorded `loss` is the step's mean micro-batch loss
    (unscaled), as nanoGPT logs it.
    `after_step()` runs right after each `optimizer.step()` (an EMA update of the weights).
    `run_dir=None` trains without recording (the losses only).
    """
    from recorders import Recorder

    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return loss_fn(_float32(model(x)), y)

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            value = sum(loss_of(*eval_draw()).item() for _ in range(2)) / 2
        model.train()
        return value

    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        recorder = _Unrecorded() if run_dir is None else Recorder(
            run_dir, model, optimizer, config=config or {}, overwrite=True, **(recorder_options or {}))
        with recorder as rec:
            for step in range(steps):
                extra = {"val_loss": evaluate()} if eval_draw is not None and step % eval_every == 0 else {}
                for group in optimizer.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, optimizer)
                total = 0.0
                for _ in range(accumulation):
                    x, y = fault.batch(step, *draw())
                    loss = loss_of(x, y)
                    (loss / accumulation).backward()
                    total += loss.item() / accumulation
                if clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
                if fault.take_step(step):
                    optimizer.step()
                    if after_step is not None:
                        after_step()
                if fault.zero_grad(step):
                    optimizer.zero_grad(set_to_none=True)
                rec.step(loss=total, inputs=x, targets=y, **extra)
                outcome.log(step, total)
    except TrainingDiverged:
        pass
    return outcome
