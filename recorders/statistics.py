"""What is measured: tensor moments computed with few passes and read back in one transfer.

Every tensor is reduced to :class:`Moments` (sums over its *finite* elements, counts of zeros,
saturated and non-finite elements). Float32 tensors in host memory (CPU training) go through
one fused pass of the ``_fused`` extension, which also measures a parameter's update and
refreshes its saved copy, and hashes a batch, in the same pass; host tensors whose values
float32 holds (half precision, integers, booleans) go through it as float32 copies. Many
tensors' moments travel as one float64 array, a row per tensor (:func:`moments_rows`).
Elsewhere (GPU, float64, or an install built without a C++ compiler) a handful of vectorised
torch kernels run in the tensor's own dtype and leave their results on the device;
:class:`MomentBatch` stacks all of a step's results and reads them with a single host transfer.
Only when a fast result cannot be trusted (a NaN/inf appeared, float32 squares overflowed, or
the variance cancels) is the tensor re-measured exactly in float64 — rare, and precisely when a
run is dying.
"""

from __future__ import annotations

import functools
import math
import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np
import torch

try:
    from . import _fused
except ImportError:  # installed without a C++ compiler: torch's kernels serve alone
    _fused = None

__all__ = [
    "Moments",
    "MomentBatch",
    "MomentColumn",
    "TensorStats",
    "combine",
    "combine_rows",
    "content_hash",
    "exact_moments",
    "FusedCall",
    "fused_call",
    "fused_pairs",
    "host_rows",
    "activation_moments",
    "activation_row",
    "kernel_rows",
    "measure_now",
    "moments_rows",
    "params_and_updates",
    "row_moments",
    "signature",
    "summarize",
    "summarize_rows",
    "update_moments",
]

# Below this, var = E[x^2] - mean^2 computed from float32 sums has lost too many digits
# (recorders/_fused.cpp has the same limit).
_CANCELLATION_LIMIT = 1e-3
_FAST_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Float32 elements per thread in a slice of a large activation: 1 MiB, within a core's L2
# cache (each thread reduces its own share of the slice, on its own core).
_SLICE_PER_THREAD = 1 << 18


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


class MomentColumn(IntEnum):
    """The columns of a moments array (:func:`moments_rows`), named as :class:`Moments`'
    fields: ``rows[:, MomentColumn.SUMSQ]`` is every tensor's sum of squares."""

    NUMEL = 0
    FINITE = 1
    SUM = 2
    SUMSQ = 3
    MIN = 4
    MAX = 5
    ZEROS = 6
    SATURATED = 7
    NONFINITE = 8


assert [c.name.lower() for c in MomentColumn] == list(Moments._fields)


class TensorStats(NamedTuple):
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


def moments_rows(moments: list[Moments]) -> np.ndarray:
    """Moments of many tensors as one float64 array, a row per tensor in the field order of
    :class:`Moments`, NaN where not measured (the form the fused kernel returns)."""
    return np.array(moments, dtype=np.float64).reshape(len(moments), len(Moments._fields))


def row_moments(row: np.ndarray) -> Moments:
    """One row of a moments array as :class:`Moments` (None where NaN)."""
    numel, finite, total, sumsq, lo, hi, zeros, saturated, nonfinite = row.tolist()

    def known(x):
        return None if math.isnan(x) else x

    def count(x):
        return None if math.isnan(x) else int(x)

    return Moments(int(numel), int(finite), known(total), sumsq, known(lo), known(hi),
                   count(zeros), count(saturated), int(nonfinite))


def summarize_rows(rows: np.ndarray) -> dict[str, np.ndarray]:
    """The statistics written to disk, column by column, for a moments array (see
    :func:`moments_rows`): float64 arrays named as :class:`TensorStats`, NaN = null."""
    numel, finite, total, sumsq, lo, hi, zeros, saturated, nonfinite = rows.T
    with np.errstate(divide="ignore", invalid="ignore"):
        has_finite = finite > 0
        mean = np.where(has_finite, total / finite, np.nan)  # NaN too where sums were not taken
        variance = np.where(np.isfinite(sumsq), np.maximum(sumsq / finite - mean * mean, 0.0),
                            np.inf)
        std = np.where(np.isnan(mean), np.nan, np.sqrt(variance))
        empty = numel == 0
        return {
            "numel": numel,
            "norm": np.sqrt(sumsq),
            "max_abs": np.where(has_finite, np.maximum(-lo, hi), np.nan),
            "mean": mean,
            "std": std,
            "min": np.where(has_finite, lo, np.nan),
            "max": np.where(has_finite, hi, np.nan),
            "zero_frac": np.where(empty, np.nan, zeros / numel),
            "sat_frac": np.where(empty, np.nan, saturated / numel),
            "nonfinite": nonfinite,
        }


def summarize(m: Moments | np.ndarray) -> TensorStats:
    """The statistics written to disk for one tensor's moments (a :class:`Moments` or one row
    of a moments array)."""
    columns = summarize_rows(np.asarray(m, dtype=np.float64).reshape(1, -1))
    values = {name: column[0].item() for name, column in columns.items()}
    known = {name: None if math.isnan(v) else v for name, v in values.items()}
    return TensorStats(**{**known, "numel": int(values["numel"]),
                          "nonfinite": int(values["nonfinite"])})


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


def _sparse_moments(t: torch.Tensor, sums: bool, zeros: bool, saturation: str | None) -> Moments:
    """Moments of a sparse tensor as if dense, without densifying it: its stored values
    (duplicates summed) plus the zeros it does not store."""
    values = (t.coalesce() if t.layout is torch.sparse_coo else t).values()
    stored = exact_moments(values, sums=sums, zeros=zeros, saturation=saturation)
    implicit = t.numel() - values.numel()
    if implicit == 0:
        return stored
    unstored = Moments(numel=implicit, finite=implicit, sum=0.0 if sums else None, sumsq=0.0,
                       min=0.0, max=0.0, zeros=implicit if zeros else None,
                       saturated=int(saturation == "sigmoid") * implicit if saturation else None,
                       nonfinite=0)
    return combine(stored, unstored)


def _fusable(t: torch.Tensor) -> bool:
    """Whether the fused host kernel can measure `t` in place: float32 in host memory, every
    element stored once without gaps. The order does not matter to a reduction, so
    channels-last convolution tensors qualify too."""
    return (_fused is not None and t.dtype is torch.float32 and t.is_cpu
            and t.layout is torch.strided
            and (t.is_contiguous()
                 or t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)
                 or t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d)))


# Host dtypes whose values float32 holds exactly, integers up to 2**24 in magnitude (a larger
# one sends the tensor to the exact path): a float32 copy of them goes through the kernel too,
# instead of a handful of torch kernels whose dispatch costs more than the copy.
_WIDENED = (torch.float16, torch.bfloat16, torch.bool, torch.uint8, torch.int8, torch.int16,
            torch.int32, torch.int64)
_EXACT_INTEGERS = 2.0 ** 24


def _widened(t: torch.Tensor) -> torch.Tensor | None:
    """A float32 copy of host tensor `t` for the fused kernel, if float32 holds its values."""
    if _fused is not None and t.dtype in _WIDENED and t.is_cpu and t.layout is torch.strided:
        return t.to(torch.float32, memory_format=torch.contiguous_format)
    return None


# The kernel's row per tensor: its moments, those of its update, its CRC-32, its cancellation
# flag (see recorders/_fused.cpp).
_KERNEL_ROW = 2 * len(Moments._fields) + 2
_NOT_CANCELLED = bytes(8)  # the flag 0.0, the row's last eight bytes
_ROW_PADDING = np.full(_KERNEL_ROW - len(Moments._fields), np.nan).tobytes()


class _FusedRequest(NamedTuple):
    tensor: torch.Tensor  # contiguous float32 in host memory
    sums: bool
    zeros: bool
    saturation: str | None
    previous: torch.Tensor | None = None  # measure tensor - previous, then previous <- tensor
    hash: bool = False  # the CRC-32 of its bytes too (C order: the tensor must be contiguous)


class FusedCall:
    """The requests of one call of the fused kernel, its arguments built as each comes in (the
    call then loops over them in C) and the requests that count saturated elements noted.

    A call can be made again, step after step, while its tensors keep their :func:`signature`
    (the kernel reads their addresses)."""

    __slots__ = ("requests", "args", "saturating")

    def __init__(self) -> None:
        self.requests: list[_FusedRequest] = []
        self.args: list[tuple[int, int, int, int]] = []
        self.saturating: list[int] = []

    def __len__(self) -> int:
        return len(self.requests)

    def add(self, r: _FusedRequest) -> None:
        if r.saturation:
            self.saturating.append(len(self.requests))
        self.requests.append(r)
        self.args.append(_kernel_arg(r))

    def measure(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """See :func:`_fused_measure`."""
        return _fused_measure(self)

    def extend(self, other: "FusedCall") -> None:
        self.saturating.extend(i + len(self.requests) for i in other.saturating)
        self.requests.extend(other.requests)
        self.args.extend(other.args)


def signature(t: torch.Tensor) -> tuple:
    """What a :class:`FusedCall` prepared for `t` relies on: where its elements are, their
    layout and type. The call holds `t`, so while it lives no other tensor takes the address.
    Such a call reads host memory only, so whether `t` is there stands for its device (and
    costs less to ask: this runs for every parameter and state tensor of every step)."""
    return t.data_ptr(), t.shape, t.stride(), t.dtype, t.is_cpu


def _kernel_arg(r: _FusedRequest) -> tuple[int, int, int, int]:
    return (r.tensor.data_ptr(), r.tensor.numel(),
            0 if r.previous is None else r.previous.data_ptr(),
            (1 if r.sums else 0) | (2 if r.zeros else 0) | (0 if r.previous is None else 4)
            | (8 if r.hash else 0))


def _fused_measure(call: FusedCall) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One call of the fused kernel for all `call`'s requests: a moments array of the tensors, one
    of ``tensor - previous`` where a `previous` is given (sum of squares and non-finite count,
    in float64; NaN rows elsewhere), after which `previous` holds a copy of the tensor, and the
    CRC-32 of each tensor asked to be hashed (NaN elsewhere, or where zlib could not be
    loaded)."""
    width, requests = len(Moments._fields), call.requests
    rows = np.frombuffer(_fused.moments_many(call.args), dtype=np.float64).reshape(
        len(requests), _KERNEL_ROW)
    moments = rows[:, :width]
    cancels = rows[:, 2 * width + 1]
    if cancels.any():  # those are measured again, exactly in float64
        finite = []  # only their sums need it
        for i in np.flatnonzero(cancels).tolist():
            r = requests[i]
            if moments[i, MomentColumn.NONFINITE] == 0:
                finite.append(i)
            else:
                moments[i] = exact_moments(r.tensor, sums=True, zeros=r.zeros)
        if finite:
            moments[np.ix_(finite, [MomentColumn.SUM, MomentColumn.SUMSQ])] = np.reshape(
                _exact_sums([requests[i].tensor for i in finite]), (len(finite), 2))
    for i in call.saturating:
        r = requests[i]
        row = moments[i]
        row[MomentColumn.SATURATED] = (
            _saturated_count(r.tensor, r.saturation, row[MomentColumn.MIN],
                             row[MomentColumn.MAX]) if row[MomentColumn.FINITE] else 0)
    return moments, rows[:, width:2 * width], rows[:, 2 * width]


def _exact_sums(tensors: list[torch.Tensor]) -> list[float]:
    """Sum and sum of squares of each tensor (none holds a NaN or an inf), in float64, one
    pair after the other: what :func:`exact_moments` computes for them, bit for bit, in 3
    kernels per tensor instead of 11 (its count, extremes and zeros are exact in the fused
    kernel already), read back together. LayerNorm weights, whose values sit near 1.0, take
    this path at every step."""
    sums = []
    for t in tensors:
        x = t.detach().reshape(-1).to(torch.float64)
        sums += (x.sum(), x.square().sum())
    return torch.stack(sums).tolist()


def _cancels(mean: float, mean_sq: float) -> bool:
    """Whether var = E[x^2] - mean^2 from float32-accumulated sums has lost too many digits
    (the fused kernel applies the same rule to its own sums)."""
    return mean_sq > 0 and not mean_sq - mean * mean > _CANCELLATION_LIMIT * mean_sq


def content_hash(t: torch.Tensor) -> str:
    """CRC-32 of the raw bytes in C order, as 8 hex digits: enough to tell batches apart, and
    several times faster than a cryptographic hash (it runs on every input of every step)."""
    t = t.detach().to("cpu")
    if t.layout is not torch.strided:  # sparse: its indices and values, duplicates summed
        t = t.coalesce() if t.layout is torch.sparse_coo else t.to_sparse_coo().coalesce()
        crc = zlib.crc32(t.indices().contiguous().view(torch.uint8).numpy())
        flat = t.values().contiguous().reshape(-1)
        return f"{zlib.crc32(flat.view(torch.uint8).numpy(), crc):08x}"
    flat = t.contiguous().reshape(-1)
    return f"{zlib.crc32(flat.view(torch.uint8).numpy()):08x}"


def _fused_one(r: _FusedRequest) -> Moments:
    """:func:`_fused_measure` for one tensor without an update, in plain Python: numpy's
    per-call overhead would cost more than the kernel on a small module output."""
    width = len(Moments._fields)
    row = memoryview(_fused.moments_many([_kernel_arg(r)])).cast("d").tolist()
    numel, finite, total, sumsq, lo, hi, zeros, _, nonfinite = row[:width]
    if row[2 * width + 1]:  # the variance cancels
        return exact_moments(r.tensor, sums=True, zeros=r.zeros, saturation=r.saturation)
    return Moments(
        numel=int(numel), finite=int(finite), sum=total if r.sums else None, sumsq=sumsq,
        min=lo if finite else None, max=hi if finite else None,
        zeros=int(zeros) if r.zeros else None,
        saturated=(_saturated_count(r.tensor, r.saturation, lo, hi) if finite else 0)
        if r.saturation else None,
        nonfinite=int(nonfinite))


def _pair_fusable(now: torch.Tensor, previous: torch.Tensor) -> bool:
    """Whether one fused pass measures `now` and its update since `previous`: element i of one
    is element i of the other."""
    return _fusable(now) and _fusable(previous) and previous.stride() == now.stride() \
        and previous.numel() == now.numel()


def fused_pairs(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> FusedCall | None:
    """The fused call that :func:`params_and_updates` makes for `pairs`, to make again while
    their tensors keep their :func:`signature`; None unless every pair goes through it."""
    call = FusedCall()
    for now, previous in pairs:
        if not _pair_fusable(now, previous):
            return None
        call.add(_FusedRequest(now.detach(), True, False, None, previous))
    return call


def fused_call(tensors: list[torch.Tensor]) -> FusedCall | None:
    """The fused call that :meth:`MomentBatch.add` (at defaults) makes for `tensors`, to queue
    again (:meth:`MomentBatch.add_call`) while they keep their :func:`signature`; None unless
    every tensor goes through it as it is."""
    call = FusedCall()
    for t in tensors:
        if not (_fusable(t) and t.is_contiguous()):
            return None
        call.add(_FusedRequest(t.detach(), False, False, None))
    return call


def host_rows(tensors: list[torch.Tensor], zeros: bool) -> np.ndarray | None:
    """The moments array that :meth:`MomentBatch.add` (``zeros=zeros``, without sums) of each
    tensor, then :meth:`MomentBatch.read`, gives when every tensor is contiguous float32 in
    host memory: the same kernel call over the same arguments, without a request object per
    tensor. None where one is not (or without the kernel). Nothing is measured again: the
    kernel checks whether the variance cancels only where it sums."""
    if _fused is None:
        return None
    flags, float32, strided = 2 if zeros else 0, torch.float32, torch.strided
    args = []
    for t in tensors:
        if t.dtype is not float32 or not t.is_cpu or t.layout is not strided \
                or not t.is_contiguous():
            return None
        args.append((t.data_ptr(), t.numel(), 0, flags))
    if not args:
        return np.empty((0, len(Moments._fields)))
    return np.frombuffer(_fused.moments_many(args), dtype=np.float64).reshape(
        len(args), _KERNEL_ROW)[:, :len(Moments._fields)]


def params_and_updates(pairs: list[tuple[torch.Tensor, torch.Tensor]]
                       ) -> tuple[np.ndarray, np.ndarray]:
    """For each (parameter, previous) in host memory: moments of the parameter and of its
    update since `previous` (its value at the last record), then ``previous <- parameter``;
    as two moments arrays, a row per pair. One fused pass over all of them where possible;
    four torch passes per pair elsewhere."""
    width = len(Moments._fields)
    params, updates = np.empty((len(pairs), width)), np.empty((len(pairs), width))
    fused, requests = [], FusedCall()
    for i, (now, previous) in enumerate(pairs):
        now = now.detach() if now.requires_grad else now
        if _pair_fusable(now, previous):
            fused.append(i)
            requests.add(_FusedRequest(now, True, False, None, previous))
            continue
        params[i] = measure_now(now, sums=True)
        previous.sub_(now)  # previous := previous - now = -update
        updates[i] = update_moments(previous)
        previous.copy_(now)
    if fused:
        params[fused], updates[fused], _ = _fused_measure(requests)
    return params, updates


_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64,
             torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _float32_max(lowest: float, highest: float) -> float:
    """The largest float32 element, from the extremes of the tensor's bits read as int32.

    Read as signed integers, non-negative floats keep their order and negative ones
    (sign bit set) sort by magnitude after INT32_MIN: the largest integer is the largest element
    when any element is non-negative; otherwise every element is negative and the smallest
    integer is the one nearest zero, the largest. A NaN shows as a NaN here or in the float
    minimum and the sum of squares, and sends the tensor to the exact path.
    """
    bits = int(highest) if highest >= 0 else int(lowest)
    return struct.unpack("<f", struct.pack("<i", bits))[0]


@dataclass(slots=True)
class _Entry:
    tensor: torch.Tensor
    numel: int
    sums: bool
    extremes: bool
    zeros: bool
    saturation: str | None
    exact: bool
    floats: int  # offset of this entry's float results (or of its exact vector)
    ints: int  # offset of this entry's integer results
    sparse: Moments | None = None  # a sparse tensor, measured at once


class MomentBatch:
    """Queues moment kernels for many tensors and reads all results with one transfer.

    ``add`` returns an index into the list that ``read`` returns. Tensors must stay unchanged
    between ``add`` and ``read`` (the exact fallback re-reads them). Host tensors the fused
    kernel can take are measured by one call of it at ``read``; the rest as follows.

    Kernels are chosen for speed on CPU and GPU alike: ``dot`` for the sum of squares, and zeros
    counted on the integer view of the bits (float comparisons are several times slower). For
    float32 the extremes are the float minimum plus one ``aminmax`` of the int32 bits (the
    largest element follows from it, see :func:`_float32_max`; integer reductions run ~3x
    faster than float ones, and the two together cost less than a float ``aminmax``); the
    integer minimum also tells whether a ``-0.0``, which the zero count misses, is present.
    """

    def __init__(self) -> None:
        self._floats: list[torch.Tensor] = []
        self._ints: list[torch.Tensor] = []
        self._exacts: list[torch.Tensor] = []
        self._fused = FusedCall()
        self._fused_rows: list[int] = []  # the index `add` returned for each fused request
        self._entries: list[_Entry | _FusedRequest] = []
        self._crcs: dict[int, int] = {}  # index -> CRC-32 from the fused kernel
        self._widened: dict[int, torch.Tensor] = {}  # index -> tensor measured as a float32 copy
        self._complex: dict[int, torch.Tensor] = {}  # index -> complex tensor measured as |z|

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, t: torch.Tensor, *, sums: bool = False, extremes: bool = True,
            zeros: bool = False, saturation: str | None = None, exact: bool = False,
            hashed: bool = False) -> int:
        """Queue `t`. ``exact=True`` measures in float64 on the device right away (for tensors
        that will not outlive the step, on devices where reading back early would stall).
        ``hashed=True``: :meth:`content_hash` will be asked for it (the fused kernel computes
        it in the same pass). A complex tensor is measured by its modulus |z|, hashed from
        its own bytes."""
        if t.dtype is torch.float32 and _fused is not None and t.is_cpu \
                and t.layout is torch.strided and t.is_contiguous():  # the common case, first
            x = t.detach() if t.requires_grad else t  # the kernel reads its data, nothing else
            return self._add_fused(_FusedRequest(x, sums, zeros, saturation, None, hashed))
        x = t.detach()
        if x.is_complex():  # torch would drop the imaginary part, with a warning
            index = self.add(x.abs(), sums=sums, extremes=extremes, zeros=zeros,
                             saturation=saturation, exact=exact)
            self._complex[index] = x
            return index
        if _fusable(x):  # host memory: one fused pass for all such tensors at `read`
            return self._add_fused(
                _FusedRequest(x, sums, zeros, saturation, hash=hashed and x.is_contiguous()))
        if not exact and (wide := _widened(x)) is not None:  # hashed from its own bytes
            self._widened[len(self._entries)] = x
            return self._add_fused(_FusedRequest(wide, sums, zeros, saturation))
        numel = x.numel()
        exact = exact or x.dtype not in _FAST_DTYPES or numel == 0
        if x.layout is not torch.strided:  # a sparse gradient (nn.Embedding(sparse=True))
            entry = _Entry(x, numel, sums, True, zeros, saturation, False, 0, 0,
                           sparse=_sparse_moments(x, sums, zeros, saturation))
        elif exact:
            entry = _Entry(x, numel, sums, True, zeros, saturation, True, len(self._exacts), 0)
            self._exacts.append(_exact_tensor(x, sums, zeros, saturation))
        else:
            entry = _Entry(x, numel, sums, extremes, zeros, saturation, False,
                           len(self._floats), len(self._ints))
            v = x.reshape(-1)
            if v.dtype in (torch.float32, torch.float64):
                self._floats.append(torch.dot(v, v))
            else:
                self._floats.append(torch.linalg.vector_norm(v, dtype=torch.float32).square())
            if extremes and v.dtype is torch.float32:
                bits = v.view(torch.int32)
                self._floats.append(v.amin())
                self._ints.extend(torch.aminmax(bits))
            elif extremes:
                self._floats.extend(torch.aminmax(v))
            if sums:
                self._floats.append(v.sum(dtype=torch.float32 if v.dtype.itemsize < 4 else None))
            if zeros:
                bits = v.view(_INT_VIEW[v.dtype])
                self._ints.append(torch.count_nonzero(bits))
                if not (extremes and v.dtype is torch.float32):
                    self._ints.append(bits.amin())
        self._entries.append(entry)
        return len(self._entries) - 1

    def add_call(self, call: FusedCall) -> range:
        """Queue a prepared call's requests (see :func:`fused_call`); their indices."""
        start = len(self._entries)
        self._fused.extend(call)
        self._fused_rows.extend(range(start, start + len(call)))
        self._entries.extend(call.requests)
        return range(start, len(self._entries))

    def _add_fused(self, request: _FusedRequest) -> int:
        self._fused.add(request)
        self._fused_rows.append(len(self._entries))
        self._entries.append(request)
        return len(self._entries) - 1

    def add_value(self, t: torch.Tensor) -> int:
        """Queue a one-element tensor (a loss) to be read with the rest; returns its offset in
        the float values that `read` returns."""
        self._floats.append(t.detach().reshape(-1)[0])
        return len(self._floats) - 1

    def read(self) -> tuple[np.ndarray, list[float]]:
        """One host transfer for everything queued: (a moments array, a row per tensor in `add`
        order; the float values that `add_value` offsets index). Exact re-measurement where
        the fast path is unsure."""
        if len(self._floats) == 1 and not self._ints and not self._exacts:
            flat = [self._floats[0].item()]  # a loss alone: no stacking
        else:
            groups = [torch.stack(g).to(torch.float64).reshape(-1)
                      for g in (self._floats, self._ints, self._exacts) if g]
            flat = torch.cat(groups).tolist() if groups else []
        floats = flat[:len(self._floats)]
        ints = flat[len(self._floats):len(self._floats) + len(self._ints)]
        exacts = flat[len(self._floats) + len(self._ints):]
        rows = np.empty((len(self._entries), len(Moments._fields)))
        if self._fused:
            rows[self._fused_rows], _, crcs = _fused_measure(self._fused)
            hashed = np.flatnonzero(~np.isnan(crcs)).tolist()
            self._crcs = dict(zip([self._fused_rows[i] for i in hashed],
                                  crcs[hashed].astype(np.int64).tolist()))
            for i, original in self._widened.items():
                lo, hi = rows[i, MomentColumn.MIN], rows[i, MomentColumn.MAX]
                if not original.is_floating_point() and max(-lo, hi) >= _EXACT_INTEGERS:
                    r = self._entries[i]
                    rows[i] = exact_moments(original, sums=r.sums, zeros=r.zeros,
                                            saturation=r.saturation)
        if len(self._fused) < len(self._entries):
            rereads = _Rereads()
            for i, e in enumerate(self._entries):
                if isinstance(e, _Entry):
                    rows[i] = e.sparse if e.sparse is not None \
                        else self._moments(e, floats, ints, exacts, rereads, i)
            rereads.apply(rows)
        return rows, floats

    def content_hash(self, index: int) -> str:
        """:func:`content_hash` of the tensor `add` returned `index` for, once `read`."""
        crc = self._crcs.get(index)
        if crc is not None:
            return f"{crc:08x}"
        original = self._complex.get(index, self._widened.get(index))
        return content_hash(self._entries[index].tensor if original is None else original)

    @staticmethod
    def _moments(e: _Entry, floats: list[float], ints: list[float], exacts: list[float],
                 rereads: _Rereads, row: int) -> Moments:
        if e.exact:
            return _moments_from_exact(exacts[7 * e.floats:7 * e.floats + 7], e.numel, e.sums,
                                       e.zeros, e.saturation)
        i, j = e.floats + 1, e.ints
        lo = hi = total = nonzero = lowest = None
        if e.extremes and e.tensor.dtype is torch.float32:
            lo = floats[i]
            lowest, highest = ints[j], ints[j + 1]
            hi = _float32_max(lowest, highest)
            i, j = i + 1, j + 2
        elif e.extremes:
            lo, hi = floats[i], floats[i + 1]
            i += 2
        if e.sums:
            total = floats[i]
        if e.zeros:
            nonzero = ints[j]
            if lowest is None:
                lowest = ints[j + 1]
        return _checked_moments(e.tensor, floats[e.floats], lo, hi, total, nonzero, lowest,
                                e.saturation, rereads, row)


class _Rereads:
    """What the fast path of a batch could not settle (exact float64 moments, a zero count
    with a -0.0 present, a saturation count), queued on each tensor's device and read back
    together: one transfer per device and batch, not one host sync per tensor on a GPU."""

    def __init__(self) -> None:
        self._exact: list[tuple[int, int, bool, bool, str | None]] = []  # row and options
        self._counts: list[tuple[int, int]] = []  # (row, column)
        self._exact_values: list[torch.Tensor] = []
        self._count_values: list[torch.Tensor] = []

    def exact(self, row: int, t: torch.Tensor, sums: bool, zeros: bool,
              saturation: str | None) -> None:
        self._exact.append((row, t.numel(), sums, zeros, saturation))
        self._exact_values.append(_exact_tensor(t, sums, zeros, saturation))

    def count(self, row: int, column: int, mask: torch.Tensor) -> None:
        self._counts.append((row, column))
        self._count_values.append(torch.count_nonzero(mask))

    def apply(self, rows: np.ndarray) -> None:
        """Fill the queued fields of `rows` in."""
        queued = self._exact_values + self._count_values
        by_device: dict[torch.device, list[int]] = {}
        for k, t in enumerate(queued):
            by_device.setdefault(t.device, []).append(k)
        values: dict[int, list[float]] = {}
        for ks in by_device.values():
            parts = [queued[k].reshape(-1).to(torch.float64) for k in ks]
            flat, at = torch.cat(parts).tolist(), 0
            for k, part in zip(ks, parts):
                values[k], at = flat[at:at + part.numel()], at + part.numel()
        for k, (row, numel, sums, zeros, saturation) in enumerate(self._exact):
            rows[row] = _moments_from_exact(values[k], numel, sums, zeros, saturation)
        for k, (row, column) in enumerate(self._counts, len(self._exact)):
            rows[row, column] = values[k][0]


def _checked_moments(t: torch.Tensor, sumsq: float, lo: float | None, hi: float | None,
                     total: float | None, nonzero: float | None, lowest: float | None,
                     saturation: str | None, rereads: _Rereads | None = None,
                     row: int = 0) -> Moments:
    """Fast-path results, or the exact float64 moments where they cannot be trusted. With
    `rereads`, what needs the tensor read again is queued there for `row` (and left None
    here) instead of read at once."""
    numel = t.numel()
    trusted = math.isfinite(sumsq)  # a NaN/inf element or float32 overflow shows here
    if trusted and lo is not None:
        trusted = math.isfinite(lo) and math.isfinite(hi)
    if trusted and total is not None:
        trusted = math.isfinite(total)
        trusted = trusted and not _cancels(total / numel, sumsq / numel)
    if not trusted:
        if rereads is None:
            return exact_moments(t, sums=total is not None, zeros=nonzero is not None,
                                 saturation=saturation)
        rereads.exact(row, t, total is not None, nonzero is not None, saturation)
        return Moments(numel, numel, None, sumsq, None, None, None, None, 0)
    zeros = saturated = None
    if nonzero is not None:
        if lowest == -2.0 ** (8 * t.element_size() - 1):  # a -0.0 is present
            if rereads is None:
                zeros = int(torch.count_nonzero(t.reshape(-1) == 0))
            else:
                rereads.count(row, MomentColumn.ZEROS, t.reshape(-1) == 0)
        else:
            zeros = numel - int(nonzero)
    if saturation and rereads is not None and _may_saturate(saturation, lo, hi):
        rereads.count(row, MomentColumn.SATURATED, _saturated_mask(t.reshape(-1), saturation))
    elif saturation:
        saturated = _saturated_count(t, saturation, lo, hi)
    return Moments(numel=numel, finite=numel, sum=total, sumsq=sumsq, min=lo, max=hi,
                   zeros=zeros, saturated=saturated, nonfinite=0)


def _saturated_count(t: torch.Tensor, saturation: str, lo: float, hi: float) -> int:
    """Counted only when the extremes say some element can be at a bound (often none is)."""
    if not _may_saturate(saturation, lo, hi):
        return 0
    return int(torch.count_nonzero(_saturated_mask(t.reshape(-1), saturation)))


def _may_saturate(saturation: str, lo: float, hi: float) -> bool:
    if saturation == "tanh":
        return max(-lo, hi) > 0.99
    if saturation == "sigmoid":
        return not (lo >= 0.01 and hi <= 0.99)
    return True  # an unknown kind: _saturated_mask says so


def measure_now(t: torch.Tensor, *, sums: bool = True, extremes: bool = True,
                zeros: bool = False, saturation: str | None = None) -> Moments:
    """Moments of one tensor right away (used where the tensor will not outlive the call)."""
    batch = MomentBatch()
    batch.add(t, sums=sums, extremes=extremes, zeros=zeros, saturation=saturation)
    return row_moments(batch.read()[0][0])


def activation_moments(t: torch.Tensor, saturation: str | None) -> Moments:
    """Moments of a module output, read at once: the next module may overwrite it in place.

    Contiguous float32 on the CPU: one pass of the fused kernel. Without the kernel, five torch
    kernels whose results are read with ``item()`` (cheaper on the host than stacking them),
    large outputs in slices that fit in a core's L2 cache, so that only the first of the five
    reads each slice from memory (a 6 MB output: 1.42 -> 1.12 ms with one thread, 0.70 -> 0.65
    with two). Anything else (GPU, other dtypes, sparse) goes through :func:`measure_now`.
    """
    if _fusable(t):
        return _fused_one(_FusedRequest(t.detach(), True, True, saturation))
    if t.is_floating_point() and (wide := _widened(t.detach())) is not None:
        return _fused_one(_FusedRequest(wide, True, True, saturation))
    if t.layout is not torch.strided:
        return measure_now(t, sums=True, zeros=True, saturation=saturation)
    v = t.detach().reshape(-1)
    if v.dtype is not torch.float32 or v.device.type != "cpu" or v.numel() == 0:
        return measure_now(t, sums=True, zeros=True, saturation=saturation)
    size = cache_slice()
    if v.numel() > 2 * size:
        return functools.reduce(combine, (_host_float32_moments(s, saturation)
                                          for s in v.split(size)))
    return _host_float32_moments(v, saturation)


def activation_row(t: torch.Tensor, saturation: str | None) -> bytes:
    """:func:`activation_moments` as one row of float64 bytes, ``KERNEL_ROW`` wide (its first
    ``len(Moments._fields)`` values are the moments; :func:`kernel_rows` reads many). The
    common case, a contiguous float32 host output of a module that does not saturate, is one
    call of the fused kernel and no Python object per statistic: it runs for every module
    output of every step."""
    if saturation is None and t.dtype is torch.float32 and _fused is not None and t.is_cpu \
            and t.layout is torch.strided and t.is_contiguous():
        row = _fused.moments_many([(t.data_ptr(), t.numel(), 0, 3)])  # sums, zeros
        if row[-8:] == _NOT_CANCELLED:
            return row
    return np.array(activation_moments(t, saturation), dtype=np.float64).tobytes() + _ROW_PADDING


def kernel_rows(rows: list[bytes]) -> np.ndarray:
    """A moments array from rows of :func:`activation_row`."""
    return np.frombuffer(b"".join(rows), dtype=np.float64).reshape(
        len(rows), _KERNEL_ROW)[:, :len(Moments._fields)]


def combine_rows(rows: np.ndarray, groups: list[int], count: int) -> np.ndarray:
    """Moments of `count` concatenations: row i of `rows` is one part of concatenation
    ``groups[i]``, each group's parts combined in their order as :func:`combine` does, bit for
    bit (NaN where it has None)."""
    groups_array = np.asarray(groups, dtype=np.intp)
    out = np.empty((count, rows.shape[1]))
    parts: dict[int, int] = {}  # group -> parts seen so far
    ranks = []  # each row's place in its group
    for g in groups:
        ranks.append(parts.get(g, 0))
        parts[g] = ranks[-1] + 1
    rank = np.array(ranks, dtype=np.intp)
    first = rank == 0
    out[groups_array[first]] = rows[first]
    for r in range(1, int(rank.max(initial=0)) + 1):
        part = rank == r
        at, b = groups_array[part], rows[part]
        a = out[at]
        total = a + b  # counts and sums; NaN (not measured) stays NaN
        lo, hi = a[:, MomentColumn.MIN], a[:, MomentColumn.MAX]
        b_lo, b_hi = b[:, MomentColumn.MIN], b[:, MomentColumn.MAX]
        # min(x, y) and max(x, y) keep x unless y is strictly beyond it; None yields
        total[:, MomentColumn.MIN] = np.where(np.isnan(lo), b_lo, np.where(b_lo < lo, b_lo, lo))
        total[:, MomentColumn.MAX] = np.where(np.isnan(hi), b_hi, np.where(b_hi > hi, b_hi, hi))
        out[at] = total
    return out


def cache_slice() -> int:
    """Elements per slice of a large activation: 1 MiB of float32 per intra-op thread."""
    return _SLICE_PER_THREAD * torch.get_num_threads()


def _host_float32_moments(v: torch.Tensor, saturation: str | None) -> Moments:
    bits = v.view(torch.int32)
    lowest, highest = torch.aminmax(bits)
    lowest, highest = lowest.item(), highest.item()
    return _checked_moments(v, torch.dot(v, v).item(), v.amin().item(),
                            _float32_max(lowest, highest), v.sum().item(),
                            torch.count_nonzero(bits).item(), lowest, saturation)


def update_moments(t: torch.Tensor) -> Moments:
    """Sum of squares (and non-finite count) of a host tensor, read at once: the recorder
    refills the update's buffer right after. Exact float64 moments when the float result is
    not finite (a NaN/inf element, or squares that overflow float32)."""
    v = t.detach().reshape(-1)
    if v.dtype not in (torch.float32, torch.float64) or v.numel() == 0:
        return measure_now(t, sums=False, extremes=False)
    sumsq = torch.dot(v, v).item()
    if not math.isfinite(sumsq):
        return exact_moments(t, sums=False)
    numel = v.numel()
    return Moments(numel=numel, finite=numel, sum=None, sumsq=sumsq, min=None, max=None,
                   zeros=None, saturated=None, nonfinite=0)
