"""Recorder.record_scalars: metrics measured after a step (evaluation) at that step."""

import pytest
import torch
from torch import nn

from recorder_helpers import read_table
from recorders import Recorder, RecorderError


def test_scalars_after_a_step_are_written_at_that_step(tmp_path):
    model = nn.Linear(3, 1)
    with Recorder(tmp_path / "run", model) as rec:
        with pytest.raises(RecorderError, match="call step"):
            rec.record_scalars(eval_loss=1.0)
        for _ in range(3):
            rec.step(loss=model(torch.randn(4, 3)).pow(2).mean().detach())
        assert rec.record_scalars(eval_loss=torch.tensor(0.5), eval_accuracy=0.75) == 2
        rec.step(loss=1.0)
    scalars = read_table(tmp_path / "run", "scalars").set_index("name")
    assert scalars.loc["eval_loss", "step"] == 2 and scalars.loc["eval_loss", "value"] == 0.5
    assert scalars.loc["eval_accuracy", "value"] == 0.75
    with pytest.raises(RecorderError, match="outside"):
        rec.record_scalars(eval_loss=1.0)
