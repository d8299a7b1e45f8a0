"""Full-state snapshots as Parquet (raw bytes, dtype, shape per tensor; never pickle).

A :class:`StateSource` lists every tensor worth keeping (parameters and buffers of each model,
tensor state of each optimizer). :class:`FlightRing` keeps the last few sampled states as CPU
copies, reusing its buffers, so that they can be dumped when a run starts to die. A tensor
that cannot be stored as raw bytes (a sparse buffer, a meta tensor) is left out of both and named
in :class:`SkippedTensors`, which the manifest carries.
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import torch

from .errors import RecorderMeasureError, RecorderWarning
from .vocabulary import CHECKPOINT_SCHEMA
from .writer import visible

__all__ = ["StateSource", "FlightRing", "Snapshot", "SkippedTensors",
           "checkpoint_table", "tensor_bytes"]

TensorId = tuple[str, str, str, "str | None"]  # owner, kind, name, key


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw little-endian bytes in C order (works for dtypes numpy lacks, e.g. bfloat16)."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def _unstorable(t: torch.Tensor) -> str | None:
    """Why `t` has no raw bytes in C order to store, or None when it has."""
    if t.layout is not torch.strided:
        return f"{str(t.layout).removeprefix('torch.')} layout"
    if t.is_meta:
        return "a meta tensor holds no data"
    return None


class SkippedTensors(dict):
    """``owner.kind.name[.key]`` -> why that tensor is left out of checkpoints (the manifest's
    ``checkpoint_skipped``). The first one skipped warns; under ``strict`` it raises instead."""

    def __init__(self, *, strict: bool) -> None:
        super().__init__()
        self.strict = strict

    def add(self, tid: TensorId, why: str) -> None:
        label = ".".join(part for part in tid if part is not None)
        if self.strict:
            raise RecorderMeasureError(f"cannot checkpoint {label}: {why}")
        if not self:
            warnings.warn(f"postmortem recorder: {label} cannot be checkpointed ({why}); "
                          "checkpoints leave it out (the manifest lists every tensor left out)",
                          RecorderWarning, stacklevel=4)
        self.setdefault(label, why)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class StateSource:
    """Every tensor of the models and optimizers, named as in the run's stats table."""

    def __init__(self, models: dict[str, torch.nn.Module],
                 optimizers: dict[str, torch.optim.Optimizer],
                 param_names: dict[int, str]) -> None:
        self._models = models
        self._optimizers = optimizers
        self._param_names = param_names

    def tensors(self) -> Iterator[tuple[TensorId, torch.Tensor]]:
        for owner, model in self._models.items():
            for name, p in model.named_parameters():
                yield (owner, "param", name, None), p
            for name, b in model.named_buffers():
                yield (owner, "buffer", name, None), b
        for owner, opt in self._optimizers.items():
            for p, state in opt.state.items():
                name = self._param_names.get(id(p))
                if name is None:
                    continue
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        yield (owner, "optimizer_state", name, key), value


@dataclass
class Snapshot:
    step: int
    tensors: dict[TensorId, torch.Tensor]


def checkpoint_table(snapshots: list[Snapshot], skipped: SkippedTensors) -> pa.Table:
    rows = {name: [] for name in CHECKPOINT_SCHEMA.names}
    for snap in snapshots:
        for tid, t in snap.tensors.items():
            why = _unstorable(t)
            if why is None:
                try:
                    data = tensor_bytes(t)
                except Exception as exc:  # noqa: BLE001 - a tensor subclass, say: left out
                    why = f"{type(exc).__name__}: {exc}"
            if why is not None:
                skipped.add(tid, why)
                continue
            owner, kind, name, key = tid
            rows["step"].append(snap.step)
            rows["owner"].append(visible(owner))
            rows["kind"].append(kind)
            rows["name"].append(visible(name))
            rows["key"].append(visible(key))
            rows["dtype"].append(dtype_name(t.dtype))
            rows["shape"].append(list(t.shape))
            rows["data"].append(data)
    return pa.table(rows, schema=CHECKPOINT_SCHEMA)


def live_snapshot(step: int, source: StateSource) -> Snapshot:
    """The current state without copying (written out immediately)."""
    return Snapshot(step, {tid: t.detach() for tid, t in source.tensors()})


class FlightRing:
    """The last `size` sampled states, as CPU copies whose buffers are reused."""

    def __init__(self, size: int) -> None:
        self._ring: deque[Snapshot] = deque(maxlen=size) if size > 0 else deque(maxlen=0)
        self.size = size

    def sample(self, step: int, source: StateSource, skipped: SkippedTensors) -> None:
        if self.size == 0:
            return
        recycled = self._ring[0].tensors if len(self._ring) == self.size else {}
        copies: dict[TensorId, torch.Tensor] = {}
        refill: list[tuple[torch.Tensor, torch.Tensor]] = []  # (recycled buffer, tensor)
        with torch.no_grad():
            for tid, t in source.tensors():
                why = _unstorable(t)
                if why is not None:
                    skipped.add(tid, why)
                    continue
                old = recycled.get(tid)
                if old is not None and old.shape == t.shape and old.dtype == t.dtype:
                    copies[tid] = old
                    refill.append((old, t.detach()))
                else:
                    copies[tid] = t.detach().to("cpu", copy=True)
            if refill:  # one call for all: torch spreads the copies over its threads
                torch._foreach_copy_([old for old, _ in refill], [t for _, t in refill])
        self._ring.append(Snapshot(step, copies))

    def snapshots(self) -> list[Snapshot]:
        return list(self._ring)
