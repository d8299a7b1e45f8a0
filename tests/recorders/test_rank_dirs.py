"""Where a rank records: its own sub-directory under torch.distributed, the run directory itself
in a single process (the 2-process run is in tests/postmortem/test_ranks.py)."""
import json

import pytest
import torch
from torch import nn

from recorders import Recorder
from recorders.ranks import distributed_info, rank_dir

_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@pytest.fixture
def single_process(monkeypatch):
    for name in _LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _record(run_dir):
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(run_dir, model, optimizer) as rec:
        loss = model(torch.ones(2, 3)).sum()
        loss.backward()
        optimizer.step()
        rec.step(loss=loss)
    return rec.run_dir


def test_a_single_process_records_into_the_run_directory_itself(tmp_path, single_process):
    assert distributed_info() is None
    assert _record(tmp_path / "run") == tmp_path / "run"
    assert "distributed" not in json.loads((tmp_path / "run" / "manifest.json").read_text())


def test_a_torchrun_worker_records_into_its_rank_directory(tmp_path, monkeypatch):
    # The variables torchrun sets for every worker; the process group is not initialised here.
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    written = _record(tmp_path / "run")
    assert written == tmp_path / "run" / "rank-00003"
    manifest = json.loads((written / "manifest.json").read_text())
    assert manifest["distributed"] == {"rank": 3, "world_size": 4, "local_rank": 1, "backend": None}
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["rank-00003"]


@pytest.mark.parametrize("world_size", ["1", "", "two"])
def test_a_job_of_one_process_or_unreadable_variables_is_a_single_process(monkeypatch, tmp_path, world_size):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", world_size)
    assert distributed_info() is None
    assert rank_dir(tmp_path, None) == tmp_path
