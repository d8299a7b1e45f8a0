"""optimizer.step(closure): the backward runs inside step() (Lightning, LBFGS); the recorded
gradients are the ones the closure's backward left, accumulated over earlier micro-batches."""

import math

import pytest
import torch
from torch import nn

from recorder_helpers import read_table
from recorders import Recorder


@pytest.mark.parametrize("as_keyword", [False, True])
def test_gradients_of_a_closure_step_are_the_closures(tmp_path, as_keyword):
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [torch.randn(8, 4) for _ in range(6)]
    norms = []
    with Recorder(tmp_path / "run", model, opt) as rec:
        for first, second in zip(batches[::2], batches[1::2]):
            opt.zero_grad()
            model(first).pow(2).mean().backward()  # an accumulated micro-batch

            def closure(x=second):
                model(x).pow(2).mean().backward()
                norms.append(math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters())))
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)  # clipped in the closure
                return None

            opt.step(closure=closure) if as_keyword else opt.step(closure)
            rec.step()
    scalars = read_table(tmp_path / "run", "scalars")
    recorded = scalars[scalars["name"] == "grad_norm"].sort_values("step")["value"].tolist()
    assert recorded == pytest.approx(norms, rel=1e-5)
    clipped = scalars[scalars["name"] == "grad_norm_clipped"]["value"]
    assert len(clipped) == 3 and clipped.to_numpy() == pytest.approx(1e-3, rel=1e-3)
