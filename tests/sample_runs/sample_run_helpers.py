"""Helpers shared by the sample-run tests: load a script, read a run's statistics, compare two runs."""
import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str):
    """The module of a file outside any package (a benchmark script, another suite's run writer),
    by its path from the repository root, registered under its stem: dataclasses look their
    module up while the file executes."""
    path = ROOT / relative
    if path.stem in sys.modules:
        return sys.modules[path.stem]
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def read_stats(run: Path) -> pd.DataFrame:
    table = ds.dataset(sorted(str(p) for p in (run / "stats").glob("part-*.parquet")), format="parquet").to_table()
    frame = table.to_pandas()
    for column in ("role", "name", "key"):
        frame[column] = frame[column].astype(object)
    return frame.sort_values(["step", "role", "name", "key"]).reset_index(drop=True)


def assert_same_stats(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for column in a.columns:
        if a[column].dtype.kind == "f":
            pd.testing.assert_series_equal(a[column], b[column], rtol=1e-4, atol=1e-7, check_names=False)
        else:
            assert a[column].astype(object).fillna("∅").equals(b[column].astype(object).fillna("∅")), column
