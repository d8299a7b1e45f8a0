"""`grad_carried_over`: the share of the parameters a record's backwards reached whose `.grad`
still held a gradient (the previous step's) when the first of them reached it — a loop that no
longer calls zero_grad(). Accumulation within a record, zero_grad between forward and backward,
set_to_none either way, two optimizers, a closure optimizer and unused parameters read 0."""

import pytest
import torch
from torch import nn

from recorder_helpers import read_table
from recorders import Recorder

STEPS = 6


def carried_over(run_dir):
    scalars = read_table(run_dir, "scalars")
    rows = scalars[scalars["name"] == "grad_carried_over"].sort_values("step")
    return rows["step"].tolist(), rows["value"].tolist()


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def train(run_dir, *, zero_grad="top", accumulation=1, set_to_none=True, forget_from=STEPS):
    """A plain loop; `zero_grad`: "top" of the step, or "after_forward" (before backward);
    from step `forget_from` on it is not called."""
    model = net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Recorder(run_dir, model, opt) as rec:
        for step in range(STEPS):
            zeroes = step < forget_from
            if zeroes and zero_grad == "top":
                opt.zero_grad(set_to_none=set_to_none)
            for micro in range(accumulation):
                loss = model(torch.randn(16, 4)).pow(2).mean() / accumulation
                if zeroes and zero_grad == "after_forward" and micro == 0:
                    opt.zero_grad(set_to_none=set_to_none)
                loss.backward()
            opt.step()
            rec.step(loss=loss)
    return carried_over(run_dir)


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("zero_grad", ["top", "after_forward"])
@pytest.mark.parametrize("accumulation", [1, 4])
def test_a_loop_that_zeroes_gradients_carries_none_over(tmp_path, set_to_none, zero_grad,
                                                        accumulation):
    steps, values = train(tmp_path / "run", zero_grad=zero_grad, accumulation=accumulation,
                          set_to_none=set_to_none)
    assert steps == list(range(STEPS)) and values == [0.0] * STEPS


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("accumulation", [1, 4])
def test_from_the_step_zero_grad_is_forgotten_every_gradient_is_carried_over(
        tmp_path, set_to_none, accumulation):
    forget_from = 3
    _, values = train(tmp_path / "run", accumulation=accumulation, set_to_none=set_to_none,
                      forget_from=forget_from)
    # Step 3's backward finds step 2's gradients (set_to_none=False: not zeroed either).
    assert values == [0.0] * forget_from + [1.0] * (STEPS - forget_from)


def test_only_the_parameters_a_backward_reached_count(tmp_path):
    """An unused branch gets no gradient: it is neither carried over nor counted; a branch that
    never zeroes its gradient is."""
    torch.manual_seed(0)
    used, unused, stale = nn.Linear(4, 1), nn.Linear(4, 1), nn.Linear(4, 1)
    model = nn.ModuleDict({"used": used, "unused": unused, "stale": stale})
    opt = torch.optim.SGD([*used.parameters(), *unused.parameters()], lr=0.01)
    with Recorder(tmp_path / "run", model, opt) as rec:
        for _ in range(STEPS):
            opt.zero_grad()  # `stale` is in no optimizer: nothing zeroes it
            x = torch.randn(8, 4)
            (used(x) + stale(x)).pow(2).mean().backward()
            opt.step()
            rec.step()
    _, values = carried_over(tmp_path / "run")
    assert values == [0.0] + [0.5] * (STEPS - 1)  # stale's 2 of the 4 reached


def test_a_generator_reached_by_the_discriminators_backward_is_not_carried_over(tmp_path):
    """Two optimizers, two backwards a step: the discriminator's loss is not detached from the
    generator, whose gradients (last step's, then this loss's) are zeroed before its own
    backward. Zeroing the discriminator before the generator's backward is not needed."""
    torch.manual_seed(0)
    g, d = nn.Linear(2, 2), nn.Linear(2, 1)
    opt_g, opt_d = torch.optim.Adam(g.parameters()), torch.optim.Adam(d.parameters())
    with Recorder(tmp_path / "run", {"G": g, "D": d}, {"G": opt_g, "D": opt_d}) as rec:
        for _ in range(STEPS):
            fake = g(torch.randn(8, 2))
            opt_d.zero_grad()
            loss_d = d(fake).mean() - d(torch.randn(8, 2)).mean()
            loss_d.backward(retain_graph=True)
            opt_d.step()
            opt_g.zero_grad()
            loss_g = -d(fake).mean()
            loss_g.backward()
            opt_g.step()
            rec.step(loss_d=loss_d, loss_g=loss_g)
    assert carried_over(tmp_path / "run")[1] == [0.0] * STEPS


@pytest.mark.parametrize("zeroes", [True, False])
def test_a_closure_optimizer(tmp_path, zeroes):
    """LBFGS evaluates the closure several times a step; only the first backward counts."""
    model = net()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    x = torch.randn(16, 4)

    def closure():
        if zeroes:
            opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    with Recorder(tmp_path / "run", model, opt) as rec:
        for _ in range(STEPS):
            rec.step(loss=opt.step(closure))
    expected = [0.0] * STEPS if zeroes else [0.0] + [1.0] * (STEPS - 1)
    assert carried_over(tmp_path / "run")[1] == expected


def test_a_record_without_backward_has_no_value(tmp_path):
    model = net()
    with Recorder(tmp_path / "run", model) as rec:
        rec.step(lr=0.1)
        model(torch.randn(2, 4)).sum().backward()
        rec.step(lr=0.1)
    assert carried_over(tmp_path / "run") == ([1], [0.0])


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_carried_over_gradient_whose_first_element_is_zero_is_carried_over(tmp_path, set_to_none):
    """A dead first unit: every gradient of its row is exactly 0, so one element cannot tell
    a zeroed gradient from a carried one; the tensor the last record ended with can."""
    model = net()
    with torch.no_grad():
        model[0].bias[0] = -1e3  # unit 0 never fires
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with Recorder(tmp_path / "run", model, opt) as rec:
        for step in range(STEPS):
            if step < 3:
                opt.zero_grad(set_to_none=set_to_none)
            model(torch.randn(16, 4)).pow(2).mean().backward()
            opt.step()
            rec.step()
    assert model[0].weight.grad[0].eq(0).all()
    assert carried_over(tmp_path / "run")[1] == [0.0] * 3 + [1.0] * 3
