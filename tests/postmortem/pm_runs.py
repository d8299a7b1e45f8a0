"""Helpers that write small run directories straight from frames (no torch needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from postmortem.loading import SCALARS_SCHEMA, STATS_SCHEMA


def write_segment(path: Path, frame: pd.DataFrame, schema: pa.Schema) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {}
    for field in schema:
        if field.name in frame:
            values = frame[field.name].tolist()
            values = [None if isinstance(v, float) and np.isnan(v) and not pa.types.is_floating(field.type)
                      else v for v in values]
        else:
            values = [None] * len(frame)
        typ = pa.string() if pa.types.is_dictionary(field.type) else field.type
        array = pa.array(values, typ)
        columns[field.name] = array.dictionary_encode() if pa.types.is_dictionary(field.type) else array
    pq.write_table(pa.table(columns, schema=schema), path)


def series_rows(role: str, name: str, values, *, key=None, start: int = 0, **columns) -> pd.DataFrame:
    """Stat rows of one series: `values` is the magnitude (norm, or max_abs for activations)."""
    values = np.asarray(values, dtype=np.float64)
    frame = pd.DataFrame({"step": np.arange(start, start + len(values)), "role": role,
                          "name": name, "key": key, "numel": 100, "nonfinite": 0})
    frame["max_abs" if role in ("activation", "input") else "norm"] = values
    for column, value in columns.items():
        frame[column] = value
    return frame


def make_run(root: Path, stats: pd.DataFrame, scalars: pd.DataFrame | None = None,
             manifest: dict | None = None, segments: int = 1) -> Path:
    """A run directory with the given rows split into `segments` stats segments by step."""
    root.mkdir(parents=True, exist_ok=True)
    steps = np.array_split(np.sort(stats["step"].unique()), segments)
    for i, chunk in enumerate(steps):
        part = stats[stats["step"].isin(chunk)].sort_values(["role", "name", "step"], kind="stable")
        write_segment(root / "stats" / f"part-{i:06d}.parquet", part, STATS_SCHEMA)
    if scalars is not None:
        write_segment(root / "scalars" / "part-000000.parquet", scalars, SCALARS_SCHEMA)
    (root / "manifest.json").write_text(json.dumps(manifest if manifest is not None else {"schema_version": 1}))
    return root


def scalar_rows(name: str, values, start: int = 0) -> pd.DataFrame:
    values = np.asarray(values, dtype=np.float64)
    return pd.DataFrame({"step": np.arange(start, start + len(values)), "name": name, "value": values})

