"""What is measured: tensor moments computed with few passes and read back in one transfer.

Every tensor is reduced to :class:`Moments` (sums over its *finite* elements, counts of zeros,
saturated and non-finite elements). The fast path runs a handful of vectorised kernels in the
tensor's own dtype and leaves the results on the device; :class:`MomentBatch` stacks all of a
step's results and reads them with a single host transfer. Only when a fast result cannot be
trusted (a NaN/inf appeared, float32 squares overflowed, or the variance cancels) is the tensor
re-measured exactly in float64 — rare, and precisely when a run is dying.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

__all__ = [
    "Moments",
    "MomentBatch",
    "TensorStats",
    "combine",
    "exact_moments",
    "measure_now",
    "summarize",
]

# Below this, var = E[x^2] - mean^2 computed from float32 sums has lost too many digits.
_CANCELLATION_LIMIT = 1e-3
_FAST_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


class Moments(NamedTuple):
    """Sufficient statistics of one tensor; ``None`` where not measured."""

    numel: int
    finite: int
    sum: float | None
    sumsq: float
    min: float | None
    max: float | None
    zeros: int | None
    saturated: int | None
    nonfinite: int


@dataclass(frozen=True)
class TensorStats:
    """The per-tensor columns of the stats table (``None`` = null)."""

    numel: int
    norm: float
    max_abs: float | None
    mean: float | None
    std: float | None
    min: float | None
    max: float | None
    zero_frac: float | None
    sat_frac: float | None
    nonfinite: int


def summarize(m: Moments) -> TensorStats:
    """Turn moments into the statistics written to disk."""
    has_finite = m.finite > 0
    mean = std = None
    if m.sum is not None and has_finite:
        mean = m.sum / m.finite
        var = max(m.sumsq / m.finite - mean * mean, 0.0) if math.isfinite(m.sumsq) else math.inf
        std = math.sqrt(var)
    max_abs = max(-m.min, m.max) if has_finite and m.min is not None else None
    return TensorStats(
        numel=m.numel,
        norm=math.sqrt(m.sumsq),
        max_abs=max_abs,
        mean=mean,
        std=std,
        min=m.min if has_finite else None,
        max=m.max if has_finite else None,
        zero_frac=None if m.zeros is None or m.numel == 0 else m.zeros / m.numel,
        sat_frac=None if m.saturated is None or m.numel == 0 else m.saturated / m.numel,
        nonfinite=m.nonfinite,
    )


def combine(a: Moments, b: Moments) -> Moments:
    """Moments of the concatenation of two tensors measured with the same options."""

    def add(x, y):
        return None if x is None or y is None else x + y

    def pick(f, x, y):
        if x is None or y is None:
            return x if y is None else y
        return f(x, y)

    return Moments(
        numel=a.numel + b.numel,
        finite=a.finite + b.finite,
        sum=add(a.sum, b.sum),
        sumsq=a.sumsq + b.sumsq,
        min=pick(min, a.min, b.min),
        max=pick(max, a.max, b.max),
        zeros=add(a.zeros, b.zeros),
        saturated=add(a.saturated, b.saturated),
        nonfinite=a.nonfinite + b.nonfinite,
    )


def _saturated_mask(x: torch.Tensor, saturation: str) -> torch.Tensor:
    if saturation == "tanh":
        return x.abs() > 0.99
    if saturation == "sigmoid":
        return (x < 0.01) | (x > 0.99)
    raise ValueError(f"unknown saturation kind {saturation!r}")


def _exact_tensor(t: torch.Tensor, sums: bool, zeros: bool, saturation: str | None) -> torch.Tensor:
    """Float64 moments over finite elements, as one device tensor (no host transfer)."""
    x = t.detach().reshape(-1).to(torch.float64)
    finite = torch.isfinite(x)
    n_finite = finite.sum()
    xf = torch.where(finite, x, 0.0)
    nothing = torch.zeros((), dtype=torch.float64, device=x.device)
    out = [
        n_finite.to(torch.float64),
        xf.sum() if sums else nothing,
        xf.square().sum(),
        torch.where(finite, x, math.inf).amin() if x.numel() else nothing,
        torch.where(finite, x, -math.inf).amax() if x.numel() else nothing,
        (x == 0).sum().to(torch.float64) if zeros else nothing,
        _saturated_mask(x, saturation).sum().to(torch.float64) if saturation else nothing,
    ]
    return torch.stack(out)


def _moments_from_exact(values: list[float], numel: int, sums: bool, zeros: bool,
                        saturation: str | None) -> Moments:
    n_finite, s, ss, mn, mx, nz, sat = values
    n_finite = int(n_finite)
    return Moments(
        numel=numel,
        finite=n_finite,
        sum=s if sums else None,
        sumsq=ss,
        min=mn if n_finite else None,
        max=mx if n_finite else None,
        zeros=int(nz) if zeros else None,
        saturated=int(sat) if saturation else None,
        nonfinite=numel - n_finite,
    )


def exact_moments(t: torch.Tensor, *, sums: bool = True, zeros: bool = False,
                  saturation: str | None = None) -> Moments:
    """Reference-quality moments in float64 (slow; used when the fast path cannot be trusted)."""
    values = _exact_tensor(t, sums, zeros, saturation).tolist()
    return _moments_from_exact(values, t.numel(), sums, zeros, saturation)


@dataclass
class _Entry:
    tensor: torch.Tensor
    numel: int
    sums: bool
    zeros: bool
    saturation: str | None
    exact: bool
    start: int  # offset of this entry's values in the batch


class MomentBatch:
    """Queues moment kernels for many tensors and reads all results with one transfer.

    ``add`` returns an index into the list that ``read`` returns. Tensors must stay unchanged
    between ``add`` and ``read`` (the exact fallback re-reads them).
    """

    def __init__(self) -> None:
        self._values: list[torch.Tensor] = []
        self._entries: list[_Entry] = []
        self._width = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, t: torch.Tensor, *, sums: bool = False, zeros: bool = False,
            saturation: str | None = None, exact: bool = False) -> int:
        """Queue `t`; ``exact=True`` measures in float64 on the device right away (for tensors
        that will not outlive the step, on devices where reading back early would stall)."""
        x = t.detach()
        numel = x.numel()
        exact = exact or x.dtype not in _FAST_DTYPES or numel == 0
        entry = _Entry(x, numel, sums, zeros, saturation, exact, self._width)
        if exact:
            self._values.append(_exact_tensor(x, sums, zeros, saturation))
            self._width += 7
        else:
            v = x.reshape(-1)
            if v.dtype in (torch.float32, torch.float64):
                sumsq = torch.dot(v, v)
            else:
                sumsq = torch.linalg.vector_norm(v, dtype=torch.float32).square()
            lo, hi = torch.aminmax(v)
            parts = [sumsq, lo, hi]
            if sums:
                parts.append(v.sum(dtype=torch.float32 if v.dtype.itemsize < 4 else None))
            if zeros:
                parts.append(torch.count_nonzero(v))
            if saturation:
                parts.append(_saturated_mask(v, saturation).sum())
            self._values.extend(parts)
            self._width += len(parts)
        self._entries.append(entry)
        return len(self._entries) - 1

    def add_value(self, t: torch.Tensor) -> int:
        """Queue a one-element tensor (a loss) to be read with the rest; returns its offset."""
        self._values.append(t.detach().reshape(-1)[:1])
        self._width += 1
        return self._width - 1

    def read(self) -> tuple[list[Moments], list[float]]:
        """One host transfer for everything queued: (moments per tensor, the flat values from
        which `add_value` offsets index). Exact re-measurement where the fast path is unsure."""
        if not self._values:
            return [], []
        flat = torch.cat([v.reshape(-1).to(torch.float64) for v in self._values]).tolist()
        return [self._moments(e, flat) for e in self._entries], flat

    @staticmethod
    def _moments(e: _Entry, flat: list[float]) -> Moments:
        if e.exact:
            return _moments_from_exact(flat[e.start:e.start + 7], e.numel, e.sums, e.zeros,
                                       e.saturation)
        i = e.start
        sumsq, lo, hi = flat[i:i + 3]
        i += 3
        total = None
        if e.sums:
            total = flat[i]
            i += 1
        nonzero = None
        if e.zeros:
            nonzero = int(flat[i])
            i += 1
        sat = int(flat[i]) if e.saturation else None
        trusted = math.isfinite(sumsq) and math.isfinite(lo) and math.isfinite(hi)
        if trusted and total is not None:
            trusted = math.isfinite(total)
            if trusted and sumsq > 0:
                mean_sq = sumsq / e.numel
                mean = total / e.numel
                trusted = mean_sq - mean * mean > _CANCELLATION_LIMIT * mean_sq
        if not trusted:
            return exact_moments(e.tensor, sums=e.sums, zeros=e.zeros, saturation=e.saturation)
        return Moments(
            numel=e.numel,
            finite=e.numel,
            sum=total,
            sumsq=sumsq,
            min=lo,
            max=hi,
            zeros=None if nonzero is None else e.numel - nonzero,
            saturated=sat,
            nonfinite=0,
        )


def measure_now(t: torch.Tensor, *, sums: bool = True, zeros: bool = False,
                saturation: str | None = None) -> Moments:
    """Moments of one tensor right away (used where the tensor will not outlive the call)."""
    batch = MomentBatch()
    batch.add(t, sums=sums, zeros=zeros, saturation=saturation)
    return batch.read()[0][0]
