"""docs/run-format.md stays true: its query examples run on a real recorded run, and every
column the doc lists is written with the documented type."""

import re
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.parquet as pq
import torch
from torch import nn

from recorders import Recorder

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"


def code_block(language: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, f"expected one {language} block in {DOC.name}"
    return blocks[0]


def record(run_dir: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with Recorder(run_dir, model, opt, flush_every=3) as rec:
        for _ in range(7):
            x = torch.randn(16, 4)
            opt.zero_grad()
            loss = (model(x) - x.sum(1, keepdim=True)).square().mean()
            loss.backward()
            opt.step()
            rec.step(loss=loss, inputs=x)


def test_pandas_example_runs(tmp_path, monkeypatch, capsys):
    record(tmp_path / "runs" / "exp1")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(code_block("python"), namespace)
    assert set(namespace["grads"].columns) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert list(namespace["grads"].index) == list(range(7))
    assert len(namespace["loss"]) == 7
    assert "0.weight" in capsys.readouterr().out


def test_duckdb_example_runs(tmp_path, monkeypatch):
    record(tmp_path / "runs" / "exp1")
    monkeypatch.chdir(tmp_path)
    result = duckdb.sql(code_block("sql")).df()
    assert set(result["name"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert result["max_grad_norm"].is_monotonic_decreasing
    assert result["step"].between(0, 6).all()


def test_documented_columns_and_types(tmp_path):
    run = tmp_path / "run"
    record(run)
    text = DOC.read_text()
    section = text.split("## `stats/part-*.parquet`")[1].split("Which columns")[0]
    documented = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", section, flags=re.M))
    schema = pq.read_schema(next((run / "stats").glob("part-*.parquet")))
    assert list(documented) == schema.names
    for name, kind in documented.items():
        arrow = str(schema.field(name).type)
        if "dictionary" in kind:
            assert arrow.startswith("dictionary<values=string")
        else:
            arrow_name = {"double": "float64", "float": "float32"}.get(arrow, arrow)
            assert arrow_name == kind.strip()
    frame = pd.read_parquet(next((run / "stats").glob("part-*.parquet")))
    assert list(frame.sort_values(["role", "name", "key", "step"]).index) == list(frame.index)
