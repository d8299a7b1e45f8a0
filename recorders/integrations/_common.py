"""What the framework callbacks share: the error for a missing framework, recorder options
checked when the callback is built, and a step's micro-batches pooled into what one
``Recorder.step()`` call records."""

from __future__ import annotations

import importlib
import inspect
import json
import warnings
from numbers import Real
from types import ModuleType
from typing import Any, Mapping

import torch

from ..errors import RecorderWarning
from ..recorder import Recorder

# Batch keys read as targets; every other entry of a dict batch is an input.
_TARGET_KEYS = ("labels", "label", "targets", "target", "y")


def require(integration: str, module: str, extra: str) -> ModuleType:
    """Import a framework, or fail with one line that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{integration} needs {module.split('.')[0]}: "
                          f"pip install 'postmortem[{extra}]'") from None


def checked_options(run_dir: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The Recorder keyword options, refused now (TypeError) if the Recorder has no such option,
    rather than when training starts."""
    signature = inspect.signature(Recorder)
    taken = [name for name in ("run_dir", "model", "optimizer") if name in options]
    if taken:
        raise TypeError(f"the callback passes {', '.join(taken)} to the Recorder itself")
    signature.bind(run_dir, None, **options)
    if "config" in options and not isinstance(options["config"], Mapping):
        raise TypeError(f"config must be a dict, got {type(options['config']).__name__}")
    return dict(options)


def json_safe(value: Any) -> Any:
    """A JSON round trip of `value`, anything JSON cannot hold written as its str()."""
    return json.loads(json.dumps(value, default=str))


def split_batch(batch: Any) -> tuple[Any, Any]:
    """(inputs, targets) of a batch: a dict's label entries are its targets; a pair is
    (inputs, targets); anything else is all inputs."""
    if isinstance(batch, Mapping):
        targets = {k: v for k, v in batch.items() if k in _TARGET_KEYS}
        inputs = {k: v for k, v in batch.items() if k not in _TARGET_KEYS}
        return inputs, targets or None
    if isinstance(batch, (tuple, list)) and len(batch) == 2:
        return batch[0], batch[1]
    return batch, None


def _pooled(parts: list[Any]) -> Any:
    """One batch from a step's micro-batches: tensors concatenated along the batch dimension
    (flattened first where their other dimensions differ), dicts and sequences entry by entry."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if all(isinstance(p, torch.Tensor) for p in parts):
        if first.dim() > 0 and all(p.shape[1:] == first.shape[1:] for p in parts):
            return torch.cat(parts)
        return torch.cat([p.reshape(-1) for p in parts])
    if all(isinstance(p, Mapping) for p in parts):
        keys = [k for k in first if all(k in p for p in parts)]
        return {k: _pooled([p[k] for p in parts]) for k in keys}
    if all(isinstance(p, (tuple, list)) and len(p) == len(first) for p in parts):
        return [_pooled([p[i] for p in parts]) for i in range(len(first))]
    return parts[-1]


class StepBatches:
    """The micro-batches and scalars seen since the last recorded step."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []
        self.targets: list[Any] = []
        self.scalars: dict[str, list[Any]] = {}

    def __bool__(self) -> bool:
        return bool(self.inputs or self.scalars)

    def add_batch(self, batch: Any) -> None:
        inputs, targets = split_batch(batch)
        if inputs is not None:
            self.inputs.append(inputs)
        if targets is not None:
            self.targets.append(targets)

    def add_scalar(self, name: str, value: Any) -> None:
        """A micro-batch's scalar (a one-element tensor, detached, or a number)."""
        if name in ("inputs", "targets"):  # Recorder.step()'s own keywords
            return
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            self.scalars.setdefault(name, []).append(value.detach().reshape(()))
        elif isinstance(value, Real) and not isinstance(value, bool):
            self.scalars.setdefault(name, []).append(float(value))

    def take(self, summed: frozenset[str] = frozenset()) -> dict[str, Any]:
        """``Recorder.step()`` keywords for the step, and start the next one. Scalars in
        `summed` are added over the micro-batches (a loss already divided by their number),
        the others averaged."""
        out: dict[str, Any] = {}
        if self.inputs:
            out["inputs"] = _pooled(self.inputs)
        if self.targets:
            out["targets"] = _pooled(self.targets)
        for name, values in self.scalars.items():
            total = sum(values)  # a tensor where the values are tensors, read with the step
            out[name] = total if name in summed else total / len(values)
        self.__init__()
        return out


def numeric(metrics: Mapping[str, Any] | None, skip: tuple[str, ...] = ()) -> dict[str, float]:
    """The finite-or-not numbers among a framework's metrics (one-element tensors included)."""
    out = {}
    for name, value in (metrics or {}).items():
        if name in skip or not isinstance(name, str):
            continue
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, Real) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def warn_once(owner: Any, message: str) -> None:
    """One RecorderWarning per callback: the callback never breaks training."""
    if not getattr(owner, "_warned", False):
        owner._warned = True
        warnings.warn(f"postmortem callback: {message}", RecorderWarning, stacklevel=3)
