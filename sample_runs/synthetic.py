"""Synthetic run directories in the recorder's format (docs/run-format.md), without torch.

Used by the analyzer scale benchmark (100 000 steps × 200 tensors) and by loader tests that need
crash-shaped directories. Values are log-normal noise around per-series levels; an optional
divergence makes a chosen set of series jump at ``onset`` and grow exponentially afterwards,
ending in NaN if ``nan_at`` is given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from postmortem.loading import EVENTS_SCHEMA, SCALARS_SCHEMA, STATS_SCHEMA

__all__ = ["SyntheticSpec", "write_synthetic_run", "tensor_layout"]


@dataclass(frozen=True)
class SyntheticSpec:
    steps: int = 1000
    tensors: int = 200  # stat series per step
    onset: int | None = None  # first step of the divergence
    jump: float = 50.0  # factor at the onset on the culprit's grad
    growth: float = 3.0  # factor per step after the onset
    nan_at: int | None = None  # first step with NaN (the run ends there)
    noise: float = 0.05  # std of log10 noise
    steps_per_segment: int = 1000
    seed: int = 0


def tensor_layout(tensors: int) -> list[tuple[str, str, str | None]]:
    """(role, name, key) of each series: 4 roles per parameter, activations, one input."""
    layout: list[tuple[str, str, str | None]] = [("input", "input", None)]
    layers = max(1, (tensors - 1) // 5)
    for i in range(layers):
        name = f"layers.{i}.weight"
        layout += [("param", name, None), ("grad", name, None), ("update", name, None),
                   ("state", name, "momentum_buffer"), ("activation", f"layers.{i}", None)]
    while len(layout) < tensors:
        layout.append(("activation", f"extra.{len(layout)}", None))
    return layout[:tensors]


def write_synthetic_run(path: str | Path, spec: SyntheticSpec = SyntheticSpec()) -> Path:
    """Write a run directory; returns its path."""
    path = Path(path)
    for folder in ("stats", "scalars", "events", "checkpoints"):
        (path / folder).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    layout = tensor_layout(spec.tensors)
    last_step = spec.steps if spec.nan_at is None else min(spec.steps, spec.nan_at + 1)
    steps = np.arange(last_step, dtype=np.int64)
    levels = {"param": 1.0, "grad": 0.0, "update": -2.0, "state": 0.0, "activation": 0.5, "input": 0.0}
    log_growth = np.zeros(last_step)
    if spec.onset is not None and spec.onset < last_step:
        after = steps >= spec.onset
        log_growth[after] = np.log10(spec.jump) + np.log10(spec.growth) * (steps[after] - spec.onset)
    culprit_layer = 0
    series_values = []
    for role, name, _ in layout:
        log_values = levels[role] + rng.normal(0.0, spec.noise, last_step)
        if spec.onset is not None and role != "input":
            # The culprit's grad leads; the rest follow one step later, a bit weaker.
            lag = 0 if (role == "grad" and name == f"layers.{culprit_layer}.weight") else 1
            shifted = np.concatenate([np.zeros(lag), log_growth[: last_step - lag]])
            log_values = log_values + (shifted if lag == 0 else 0.8 * shifted)
        series_values.append(10.0**log_values)
    for segment, start in enumerate(range(0, last_step, spec.steps_per_segment)):
        stop = min(last_step, start + spec.steps_per_segment)
        _write_stats_segment(path / "stats" / f"part-{segment:06d}.parquet",
                             layout, series_values, start, stop, spec, rng)
    _write_scalars(path, steps, log_growth, spec, rng)
    _write_manifest(path, layout, last_step, spec)
    pq.write_table(pa.Table.from_pylist([], schema=EVENTS_SCHEMA),
                   path / "events" / "part-000000.parquet")
    return path


def _write_stats_segment(file, layout, series_values, start, stop, spec, rng) -> None:
    n = stop - start
    columns: dict[str, list] = {name: [] for name in STATS_SCHEMA.names}
    # Rows sorted by role, name, key, step, as the recorder writes them.
    order = sorted(range(len(layout)), key=lambda i: (layout[i][0], layout[i][1], layout[i][2] or ""))
    for i in order:
        role, name, key = layout[i]
        values = series_values[i][start:stop]
        nonfinite = np.zeros(n, np.int64)
        if spec.nan_at is not None and start <= spec.nan_at < stop and role != "input":
            nonfinite[spec.nan_at - start] = 7
        step = np.arange(start, stop, dtype=np.int64)
        columns["step"].append(step)
        columns["role"].append(np.full(n, role, object))
        columns["name"].append(np.full(n, name, object))
        columns["key"].append(np.full(n, key, object))
        columns["numel"].append(np.full(n, 4096, np.int64))
        columns["nonfinite"].append(nonfinite)
        filled = {c: np.full(n, np.nan) for c in
                  ("norm", "max_abs", "mean", "std", "min", "max", "zero_frac", "sat_frac", "ratio")}
        if role in ("param", "grad", "update", "state"):
            filled["norm"] = values
        if role in ("param", "grad", "state", "activation"):
            filled["max_abs"] = values / 8
        if role in ("param", "activation", "input"):
            filled["mean"] = rng.normal(0, 0.01, n)
            filled["std"] = values / 64
        if role in ("grad", "activation"):
            filled["zero_frac"] = np.full(n, 0.3 if role == "activation" else 0.0)
        if role == "update":
            filled["ratio"] = values / 10.0
        if role == "input":
            filled["min"], filled["max"] = -values, values
        for c, v in filled.items():
            columns[c].append(v)
        columns["grad_none"].append(np.full(n, False) if role == "grad" else np.full(n, None, object))
        columns["shape"].append(np.full(n, "64x64" if role == "input" else None, object))
        columns["hash"].append(
            np.array([f"{s:016x}" for s in step], object) if role == "input" else np.full(n, None, object)
        )
        columns["dtype"].append(np.full(n, "float32" if role == "input" else None, object))
        columns["kind"].append(np.full(n, "float" if role == "input" else None, object))
    arrays = []
    for field in STATS_SCHEMA:
        data = np.concatenate(columns[field.name])
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(data, pa.string()).dictionary_encode())
        elif pa.types.is_floating(field.type):
            arrays.append(pa.array(data.astype(np.float64), mask=np.isnan(data.astype(np.float64))).cast(field.type))
        else:
            arrays.append(pa.array(data, field.type))
    pq.write_table(pa.Table.from_arrays(arrays, schema=STATS_SCHEMA), file)


def _write_scalars(path, steps, log_growth, spec, rng) -> None:
    n = len(steps)
    loss = 2.0 * np.exp(-steps / max(1, spec.steps / 3)) + 0.1
    loss = loss * 10 ** (rng.normal(0, spec.noise, n) + np.concatenate([[0.0], log_growth[:-1]]))
    grad_norm = 10 ** (rng.normal(0, spec.noise, n) + log_growth)
    if spec.nan_at is not None and spec.nan_at < n:
        loss[spec.nan_at] = np.nan
    names = np.concatenate([np.full(n, "loss", object), np.full(n, "grad_norm", object), np.full(n, "lr", object)])
    table = pa.Table.from_arrays(
        [pa.array(np.concatenate([steps, steps, steps])),
         pa.array(names, pa.string()).dictionary_encode(),
         pa.array(np.concatenate([loss, grad_norm, np.full(n, 0.05)]))],
        schema=SCALARS_SCHEMA,
    )
    pq.write_table(table, path / "scalars" / "part-000000.parquet")


def _write_manifest(path, layout, last_step, spec) -> None:
    parameters = [{"name": name, "shape": [64, 64], "dtype": "float32", "requires_grad": True}
                  for role, name, _ in layout if role == "param"]
    modules = [{"name": name, "type": "Linear"} for role, name, _ in layout if role == "activation"]
    manifest = {
        "schema_version": 2, "run_id": f"synthetic-{spec.seed}", "status": "running",
        "last_step": last_step - 1, "models": {"model": {"class": "Synthetic", "modules": modules,
                                                         "parameters": parameters}},
        "optimizers": {}, "options": {"flush_every": spec.steps_per_segment}, "config": {},
    }
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
