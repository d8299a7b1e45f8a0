"""Faults injected into a training loop at a known step `t0`: the ground truth of the benchmark.

A fault is installed on the model before the recorder is created (so its forward hooks run first)
and is then consulted by the loop at every step. Each class states what it breaks and where.
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Fault",
    "Optimizers",
    "NoFault",
    "LrSpike",
    "WeightScale",
    "BatchScale",
    "BatchNaN",
    "MissingZeroGrad",
    "FrozenLayer",
    "DetachedLayer",
    "AdamEps",
    "Fp16Overflow",
    "LabelShuffle",
    "MislabeledBatch",
    "MissingStep",
    "AdamStateZeroed",
]


@dataclass
class Fault:
    """No-op base: every hook leaves training as it is."""

    t0: int = 0

    def install(self, model: nn.Module) -> None:
        """Called once before the recorder is attached."""

    def before_step(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Called before the batch of `step` is drawn into the forward pass."""

    def batch(self, step: int, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, y

    def zero_grad(self, step: int) -> bool:
        return True

    def take_step(self, step: int) -> bool:
        """Whether the loop calls `optimizer.step()` at `step`."""
        return True

    def loss_scale(self, step: int) -> float:
        return 1.0


class Optimizers:
    """What a fault's `before_step` reads of "the optimizer" in a loop with several (a GAN's two,
    Muon beside Adam): every param group (a group's lr, found by its `layer` tag) and every
    parameter's state."""

    def __init__(self, *optimizers: torch.optim.Optimizer) -> None:
        self.param_groups = [group for optimizer in optimizers for group in optimizer.param_groups]
        self.state = ChainMap(*(optimizer.state for optimizer in optimizers))


NoFault = Fault


@dataclass
class LrSpike(Fault):
    """The param groups holding `layer` get their learning rate multiplied by `factor` at t0.

    A group's `base_lr`, from which a loop's schedule sets `lr` every step, is multiplied too, so
    the change persists under warm-up and decay (a per-group lr multiplier applied twice).
    """

    layer: str = ""
    factor: float = 100.0

    def before_step(self, step, model, optimizer):
        if step == self.t0:
            for group in optimizer.param_groups:
                if group.get("layer") == self.layer:
                    group["lr"] *= self.factor
                    if "base_lr" in group:
                        group["base_lr"] *= self.factor


@dataclass
class WeightScale(Fault):
    """`layer`'s weights are multiplied by `factor` at t0 (a bad checkpoint merge, a broken re-init)."""

    layer: str = ""
    factor: float = 30.0

    def before_step(self, step, model, optimizer):
        if step == self.t0:
            with torch.no_grad():
                for name, param in model.get_submodule(self.layer).named_parameters():
                    if name.startswith("weight"):
                        param.mul_(self.factor)


def _on_floats(x, change):
    """`change` applied to a float tensor, or to each float tensor of a dict batch (integer IDs are
    left as they are: a corrupted record's features, not its keys)."""
    if isinstance(x, dict):
        return {key: _on_floats(value, change) for key, value in x.items()}
    return change(x) if x.is_floating_point() else x


def _first_sample_nan(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x.view(len(x), -1)[0, : max(1, x[0].numel() // 8)] = float("nan")
    return x


@dataclass
class BatchScale(Fault):
    """The batch at t0 arrives with its float inputs multiplied by `factor` (an unnormalised shard)."""

    factor: float = 1e3

    def batch(self, step, x, y):
        return (_on_floats(x, lambda v: v * self.factor), y) if step == self.t0 else (x, y)


@dataclass
class BatchNaN(Fault):
    """The batch at t0 carries NaN in one sample's float inputs (a corrupted record)."""

    def batch(self, step, x, y):
        return (_on_floats(x, _first_sample_nan), y) if step == self.t0 else (x, y)


@dataclass
class MissingZeroGrad(Fault):
    """From t0 on the loop no longer calls `optimizer.zero_grad()`: gradients accumulate."""

    def zero_grad(self, step):
        return step < self.t0


@dataclass
class MissingStep(Fault):
    """From t0 on the loop no longer calls `optimizer.step()` (seed 002's bug): nothing is updated."""

    def take_step(self, step):
        return step < self.t0


@dataclass
class AdamStateZeroed(Fault):
    """Adam's second moment `exp_avg_sq` of `layer`'s parameters is zeroed at t0 (a bad optimizer
    restore) while `exp_avg` is kept: m / (sqrt(v̂) + eps) jumps, most where the gradient is small."""

    layer: str = ""

    def before_step(self, step, model, optimizer):
        if step == self.t0:
            for param in model.get_submodule(self.layer).parameters():
                state = optimizer.state.get(param, {})
                if "exp_avg_sq" in state:
                    state["exp_avg_sq"].zero_()


@dataclass
class FrozenLayer(Fault):
    """`layer` stops requiring grad at t0 (a freeze meant for another module)."""

    layer: str = ""

    def before_step(self, step, model, optimizer):
        if step == self.t0:
            model.get_submodule(self.layer).requires_grad_(False)


@dataclass
class DetachedLayer(Fault):
    """From t0 the output of `layer` is `.detach()`ed: it and every layer before it get no gradient."""

    layer: str = ""
    active: bool = field(default=False, init=False)

    def install(self, model):
        def detach(module, args, output):
            if not self.active:
                return None
            if isinstance(output, tuple) and isinstance(module, nn.RNNBase):  # (sequence, h or (h, c))
                sequence = output[0]
                if isinstance(sequence, nn.utils.rnn.PackedSequence):  # a namedtuple: its data carries the graph
                    return (sequence._replace(data=sequence.data.detach()), output[1])
                return (sequence.detach(), output[1])
            if isinstance(output, tuple):  # every tensor the block returns (an MoE block's aux loss too; T5's None)
                return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in output)
            return output.detach()

        model.get_submodule(self.layer).register_forward_hook(detach, prepend=True)

    def before_step(self, step, model, optimizer):
        self.active = step >= self.t0


@dataclass
class AdamEps(Fault):
    """Pure float16 training with Adam; eps goes from 1e-4 (the usual float16 setting) to 1e-15 at t0.

    The model, its batches and Adam's state are float16 (`install` casts the model, `batch` the
    inputs). 1e-15, copied from a float32 config, rounds to 0 in float16, so wherever sqrt(v)
    underflows (gradients below ~2e-4, or exactly 0) Adam divides by zero at t0 and writes inf/NaN
    into the weights. The optimizer must be created with eps=1e-4.
    """

    eps: float = 1e-15

    def install(self, model):
        model.half()

    def batch(self, step, x, y):
        return x.half(), y

    def before_step(self, step, model, optimizer):
        if step == self.t0:
            for group in optimizer.param_groups:
                group["eps"] = self.eps


@dataclass
class Fp16Overflow(Fault):
    """From t0 `layer` (a Linear) runs in float16 with a hand-rolled static loss scale and no GradScaler.

    This is what mixed precision does on a GPU, done honestly on a CPU: the layer's input, weight and
    bias are cast to float16, so its forward and its backward matmuls run in float16. The loss is
    multiplied by `scale` (2**20; GradScaler starts at 2**16, which overflowed only the CNN) before
    backward and the gradients are divided by it afterwards, but nothing checks for inf and skips
    the step as GradScaler would:
    once the scaled gradient of the layer exceeds float16's 65504 it becomes inf and the optimizer
    writes it into the weights.
    """

    layer: str = ""
    scale: float = 2.0**20
    active: bool = field(default=False, init=False)

    def install(self, model):
        def half_forward(module, args, output):
            if not self.active:
                return None
            (x,) = args
            return F.linear(x.half(), module.weight.half(), module.bias.half()).float()

        module = model.get_submodule(self.layer)
        if not isinstance(module, nn.Linear):
            raise TypeError(f"Fp16Overflow needs a Linear layer, {self.layer!r} is {type(module).__name__}")
        module.register_forward_hook(half_forward, prepend=True)

    def before_step(self, step, model, optimizer):
        self.active = step >= self.t0

    def loss_scale(self, step):
        return self.scale if step >= self.t0 else 1.0


@dataclass
class LabelShuffle(Fault):
    """From t0 the labels are permuted within each batch (a join on the wrong key)."""

    seed: int = 0
    generator: torch.Generator = field(init=False)

    def __post_init__(self):
        self.generator = torch.Generator().manual_seed(self.seed)

    def batch(self, step, x, y):
        if step < self.t0:
            return x, y
        return x, y[torch.randperm(len(y), generator=self.generator)]


@dataclass
class MislabeledBatch(Fault):
    """Healthy-run noise: the `length` batches from t0 carry wrong labels, giving a loss spike that
    recovers. Class indices move to another class; an index outside 0 … classes − 1 is an ignored
    one and stays (-100, VOC's void 255: round 28's deeplab had its void band moved onto classes);
    float targets in [0, 1] (click labels, pixels to reconstruct) are flipped to 1 − y."""

    length: int = 2
    classes: int = 10

    def batch(self, step, x, y):
        if self.t0 <= step < self.t0 + self.length:
            if y.is_floating_point():
                return x, 1 - y
            ignored = (y < 0) | (y >= self.classes)
            return x, torch.where(ignored, y, (y + 1 + step % (self.classes - 1)) % self.classes)
        return x, y
