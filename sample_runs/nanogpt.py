"""karpathy/nanoGPT's training loop on :class:`~sample_runs.models.TinyGPT`, for the tests and the
overhead benchmark: AdamW with decay on matrices only, linear warm-up then cosine decay,
gradient accumulation, ``clip_grad_norm_(..., 1.0)`` (after ``scaler.unscale_`` when a scaler is
given), ``zero_grad(set_to_none=True)`` right after the step, and an eval loop under
``torch.no_grad()`` / ``model.eval()`` every ``eval_every`` steps."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from .data import token_batches
from .models import TinyGPT

__all__ = ["LoopConfig", "StepLog", "lr_at", "make_optimizer", "train"]


@dataclass(frozen=True)
class LoopConfig:
    steps: int = 40
    accumulation: int = 2
    batch: int = 8
    context: int = 16
    vocab: int = 64
    lr: float = 3e-3
    warmup: int = 5
    clip: float = 1.0
    eval_every: int = 20
    eval_batches: int = 4
    seed: int = 0


@dataclass
class StepLog:
    """What the loop itself saw at one optimizer step."""

    loss: float  # the last micro-batch's loss, unscaled by accumulation
    lr: float
    grad_norm: float  # what clip_grad_norm_ returned (pre-clip, unscaled)
    stepped: bool  # False where the scaler skipped the step
    eval_loss: float | None = None


def lr_at(step: int, config: LoopConfig) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def make_optimizer(model: nn.Module, config: LoopConfig) -> torch.optim.AdamW:
    """nanoGPT's configure_optimizers: weight decay on matrices, none on biases and norms."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW([
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ], lr=config.lr, betas=(0.9, 0.95))


def train(model: TinyGPT, opt: torch.optim.Optimizer, config: LoopConfig, *,
          rec: Any = None, scaler: Any = None,
          before_clip: Callable[[int, nn.Module], None] | None = None,
          after_backward: Callable[[int, int], None] | None = None) -> list[StepLog]:
    """Train for ``config.steps`` optimizer steps; ``rec.step(loss=..., inputs=X, targets=Y)``
    after ``zero_grad`` as nanoGPT users add it. ``before_clip(step, model)`` sees the
    accumulated gradients the loop is about to clip; ``after_backward(step, micro)`` runs after
    each micro-batch's backward."""
    data = token_batches(config.steps * config.accumulation + config.eval_batches,
                         batch=config.batch, context=config.context, vocab=config.vocab,
                         seed=config.seed)
    held_out = data[-config.eval_batches:]
    logs = []
    for step in range(config.steps):
        lr = lr_at(step, config)
        for group in opt.param_groups:
            group["lr"] = lr
        eval_loss = None
        if config.eval_every and step % config.eval_every == 0:
            model.eval()
            with torch.no_grad():
                eval_loss = sum(nn.functional.cross_entropy(
                    model(x).flatten(0, 1), y.flatten()).item() for x, y in held_out)
            model.train()
        for micro in range(config.accumulation):
            x, y = data[step * config.accumulation + micro]
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            scaled = loss / config.accumulation
            (scaler.scale(scaled) if scaler is not None else scaled).backward()
            if after_backward is not None:
                after_backward(step, micro)
        if scaler is not None:
            scaler.unscale_(opt)
        if before_clip is not None:
            before_clip(step, model)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip))
        before = model.wpe.weight.detach().clone()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        stepped = not torch.equal(before, model.wpe.weight)
        logs.append(StepLog(loss.item(), lr, grad_norm, stepped, eval_loss))
        if rec is not None:
            rec.step(loss=loss, inputs=x, targets=y)
    return logs
