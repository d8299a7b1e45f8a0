"""The parameters' fused call is made again while they keep their signatures, and built anew
when one changes: every step's param and update rows match values the test computes itself."""

import numpy as np
import pytest
import torch
from torch import nn

from recorder_helpers import read_table
from recorders import Recorder
from recorders.statistics import _fused


def _norm(t: torch.Tensor) -> float:
    return float(t.double().norm())


@pytest.mark.skipif(_fused is None, reason="the plan is the fused kernel's")
def test_a_parameter_replaced_reshaped_or_transposed_is_measured_from_its_new_value(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    changes = {
        3: lambda w: torch.randn(4, 4),  # new storage, same signature but the address
        5: lambda w: w.t(),  # the same storage transposed: not contiguous any more
        7: lambda w: w.contiguous(),  # contiguous again, a new address
        9: lambda w: w.reshape(2, 8),  # a new shape: no update this step
    }
    expected_param, expected_update = [], []
    with Recorder(tmp_path / "run", model, opt) as rec:
        previous = model.weight.detach().clone()
        for step in range(10):
            x = torch.randn(8, 4)
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            if step in changes:
                model.weight.data = changes[step](model.weight.data)
            now = model.weight.detach()
            expected_param.append(_norm(now))
            same = now.shape == previous.shape
            expected_update.append(_norm(now - previous) if same else np.nan)
            previous = now.clone()
            rec.step()
    stats = read_table(tmp_path / "run", "stats")
    rows = stats[stats.name == "weight"].sort_values("step")
    param = rows[rows.role == "param"].norm.to_numpy()
    update = rows[rows.role == "update"].norm.to_numpy()
    np.testing.assert_allclose(param, expected_param, rtol=1e-5)
    np.testing.assert_allclose(update, expected_update, rtol=1e-4, atol=1e-7)
