"""Helpers shared by the sample-run tests: read a run's statistics and compare two runs."""
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds


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
