"""From measured moments to rows of the stats table.

A recorded step keeps its measurements as :class:`StatsBlock` s (one role, the names of its
tensors and their raw moments); they are summarized into the table's columns in one vectorized
pass per flush, so that a step costs a few array copies instead of a Python tuple per tensor.
"""

from __future__ import annotations

from itertools import chain
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from .statistics import summarize_rows
from .vocabulary import ROLE_STATISTICS

__all__ = ["StatsBlock", "stats_columns"]

_STATISTICS = ("norm", "max_abs", "mean", "std", "min", "max", "zero_frac", "sat_frac")
# Columns some blocks bring along as they are: float (NaN = null) or Python values.
_FLOAT_EXTRAS = ("ratio",)
_OBJECT_EXTRAS = ("grad_none", "shape", "hash", "dtype", "kind")


class StatsBlock(NamedTuple):
    """Rows of one role at one step, before they are summarized."""

    step: int
    role: str
    names: Sequence[str]
    moments: np.ndarray  # one row per name, see recorders.statistics.moments_rows
    keys: Sequence[str] | None = None  # optimizer state keys
    extra: Mapping[str, Sequence] = {}  # ratio, grad_none, shape, hash, dtype, kind


def stats_columns(blocks: Sequence[StatsBlock]) -> dict[str, np.ndarray | list]:
    """The stats table's columns for all `blocks` (NaN or None = null)."""
    by_role: dict[str, list[StatsBlock]] = {}
    for block in blocks:
        by_role.setdefault(block.role, []).append(block)
    parts = [_role_columns(role, group) for role, group in by_role.items()]
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) if isinstance(parts[0][name], np.ndarray)
            else list(chain.from_iterable(p[name] for p in parts)) for name in parts[0]}


def _role_columns(role: str, blocks: list[StatsBlock]) -> dict[str, np.ndarray | list]:
    counts = [len(b.names) for b in blocks]
    rows = sum(counts)
    stats = summarize_rows(np.concatenate([b.moments for b in blocks]))
    columns: dict[str, np.ndarray | list] = {
        "step": np.repeat(np.array([b.step for b in blocks], dtype=np.int64), counts),
        "role": [role] * rows,
        "name": list(chain.from_iterable(b.names for b in blocks)),
        "key": _joined(blocks, counts, lambda b: b.keys, rows),
        "numel": stats["numel"],
        "nonfinite": stats["nonfinite"],
    }
    for name in _STATISTICS:
        columns[name] = stats[name] if name in ROLE_STATISTICS[role] else np.full(rows, np.nan)
    for name in _FLOAT_EXTRAS:  # a role's blocks carry an extra column all or none (but rare)
        columns[name] = np.full(rows, np.nan) if not any(name in b.extra for b in blocks) \
            else np.concatenate([np.asarray(b.extra.get(name, np.full(n, np.nan)),
                                            dtype=np.float64) for b, n in zip(blocks, counts)])
    for name in _OBJECT_EXTRAS:
        columns[name] = _joined(blocks, counts, lambda b: b.extra.get(name), rows)
    return columns


def _joined(blocks: list[StatsBlock], counts: list[int], part, rows: int) -> list:
    """``part(block)`` of every block end to end, None for a block that has none."""
    parts = [part(b) for b in blocks]
    if not any(p is not None for p in parts):
        return [None] * rows
    return list(chain.from_iterable([None] * n if p is None else p
                                    for p, n in zip(parts, counts)))
