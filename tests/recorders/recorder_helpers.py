"""Readers used by the recorder tests (plain pandas, as a user would read a run)."""

import glob
import json
from pathlib import Path

import pandas as pd


def read_table(run_dir: Path, table: str) -> pd.DataFrame:
    files = sorted(glob.glob(str(Path(run_dir) / table / "part-*.parquet")))
    if not files:
        return pd.DataFrame()
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    for col in frame.columns:
        if isinstance(frame[col].dtype, pd.CategoricalDtype):
            frame[col] = frame[col].astype(object)
    return frame


def read_manifest(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / "manifest.json").read_text())
