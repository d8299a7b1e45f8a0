"""Each injected fault does what it claims, at t0 and not before (no recorder needed)."""
import math

import pytest
import torch
import torch.nn.functional as F

from sample_runs import faults
from sample_runs.models import MLP, LSTMClassifier, build_classifier, weight_layers
from sample_runs.scenarios import _layer_groups
from sample_runs.training import broke_after, broke_against, stalled_against


def _step(model, optimizer, fault, step, x, y):
    fault.before_step(step, model, optimizer)
    x, y = fault.batch(step, x, y)
    if fault.zero_grad(step):
        optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    (loss * fault.loss_scale(step)).backward()
    return x, y


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    model = MLP()
    return model, torch.optim.SGD(_layer_groups(model, 0.1), lr=0.1, momentum=0.9)


def test_weight_layers_lists_every_layer_with_weights():
    assert weight_layers(MLP()) == ["fc1", "fc2", "fc3"]
    assert weight_layers(build_classifier("cnn")) == ["conv1", "conv2", "fc1", "fc2"]
    assert weight_layers(LSTMClassifier()) == ["lstm", "fc"]


def test_lr_spike_changes_only_the_target_group_at_t0(mlp):
    model, opt = mlp
    fault = faults.LrSpike(t0=2, layer="fc2", factor=100.0)
    for step in range(4):
        fault.before_step(step, model, opt)
        lrs = {g["layer"]: g["lr"] for g in opt.param_groups}
        assert lrs["fc1"] == lrs["fc3"] == 0.1
        assert lrs["fc2"] == pytest.approx(10.0 if step >= 2 else 0.1)


def test_weight_scale_multiplies_one_layer_once(mlp):
    model, opt = mlp
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    fault = faults.WeightScale(t0=1, layer="fc1", factor=30.0)
    fault.before_step(0, model, opt)
    assert torch.equal(model.fc1.weight, before["fc1.weight"])
    fault.before_step(1, model, opt)
    assert torch.allclose(model.fc1.weight, 30 * before["fc1.weight"])
    assert torch.equal(model.fc1.bias, before["fc1.bias"])
    assert torch.equal(model.fc2.weight, before["fc2.weight"])


def test_batch_faults_touch_only_the_batch_at_t0():
    x, y = torch.ones(4, 3), torch.arange(4)
    assert torch.equal(faults.BatchScale(t0=5).batch(4, x, y)[0], x)
    assert torch.equal(faults.BatchScale(t0=5).batch(5, x, y)[0], 1e3 * x)
    nan_x, _ = faults.BatchNaN(t0=5).batch(5, x, y)
    assert torch.isnan(nan_x[0]).any() and not torch.isnan(nan_x[1:]).any()
    assert not torch.isnan(x).any()  # the caller's batch is left alone


def test_missing_zero_grad_accumulates_from_t0(mlp):
    model, opt = mlp
    fault = faults.MissingZeroGrad(t0=1)
    x, y = torch.randn(8, 64), torch.arange(8)
    _step(model, opt, fault, 0, x, y)
    once = model.fc1.weight.grad.clone()
    _step(model, opt, fault, 1, x, y)
    assert torch.allclose(model.fc1.weight.grad, 2 * once)


def test_frozen_layer_gets_no_gradient_from_t0(mlp):
    model, opt = mlp
    fault = faults.FrozenLayer(t0=1, layer="fc2")
    x, y = torch.randn(8, 64), torch.arange(8)
    _step(model, opt, fault, 0, x, y)
    assert model.fc2.weight.grad is not None
    _step(model, opt, fault, 1, x, y)
    assert model.fc2.weight.grad is None and model.fc2.bias.grad is None
    assert model.fc1.weight.grad is not None and model.fc3.weight.grad is not None


def test_detach_cuts_the_graph_below_the_layer_from_t0():
    torch.manual_seed(0)
    model = LSTMClassifier()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    fault = faults.DetachedLayer(t0=1, layer="lstm")
    fault.install(model)
    x, y = torch.randn(8, 8, 8), torch.arange(8)
    _step(model, opt, fault, 0, x, y)
    assert model.lstm.weight_ih_l0.grad is not None
    _step(model, opt, fault, 1, x, y)
    assert model.lstm.weight_ih_l0.grad is None
    assert model.fc.weight.grad is not None


def test_detach_cuts_a_packed_sequence_as_an_rnn_returns_it():
    torch.manual_seed(0)
    lstm, head = torch.nn.LSTM(4, 6, batch_first=True), torch.nn.Linear(6, 1)
    fault = faults.DetachedLayer(t0=0, layer="lstm")
    model = torch.nn.ModuleDict({"lstm": lstm, "head": head})
    fault.install(model)
    fault.before_step(0, model, None)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.randn(3, 5, 4), [5, 3, 2], batch_first=True)
    sequence, _ = lstm(packed)
    assert isinstance(sequence, torch.nn.utils.rnn.PackedSequence) and not sequence.data.requires_grad
    padded, _ = torch.nn.utils.rnn.pad_packed_sequence(sequence, batch_first=True)
    head(padded).sum().backward()
    assert lstm.weight_ih_l0.grad is None and head.weight.grad is not None


def test_fp16_overflow_runs_the_layer_in_half_precision_from_t0(mlp):
    model, opt = mlp
    fault = faults.Fp16Overflow(t0=1, layer="fc3")
    fault.install(model)
    seen = []
    model.fc3.register_forward_hook(lambda m, a, out: seen.append(out.clone()))
    x = torch.randn(2, 64)
    fault.before_step(0, model, opt)
    full = model(x)
    fault.before_step(1, model, opt)
    half = model(x)
    assert fault.loss_scale(0) == 1.0 and fault.loss_scale(1) == 2.0**20
    assert not torch.equal(full, half)  # rounded through float16
    assert torch.allclose(full, half, atol=1e-2)
    assert torch.equal(seen[1], half)  # what the recorder sees is what the model used
    with pytest.raises(TypeError):
        faults.Fp16Overflow(t0=0, layer="act1").install(model)


def test_adam_eps_breaks_float16_adam_at_t0():
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-4)
    fault = faults.AdamEps(t0=2)
    fault.install(model)
    assert model.fc1.weight.dtype == torch.float16
    x, y = torch.rand(16, 64), torch.arange(16) % 10
    for step in range(3):
        assert torch.isfinite(model.fc1.weight).all()
        xb, yb = _step(model, opt, fault, step, x, y)
        assert xb.dtype == torch.float16
        opt.step()
        assert opt.param_groups[0]["eps"] == (1e-15 if step >= 2 else 1e-4)
    # 1e-15 is 0 in float16: where sqrt(v) underflowed Adam divided by zero.
    assert not all(torch.isfinite(p).all() for p in model.parameters())


def test_label_shuffle_starts_at_t0():
    shuffle = faults.LabelShuffle(t0=3, seed=0)
    y = torch.arange(32)
    assert torch.equal(shuffle.batch(2, None, y)[1], y)
    shuffled = shuffle.batch(3, None, y)[1]
    assert not torch.equal(shuffled, y) and torch.equal(shuffled.sort().values, y)


def test_broke_after_tells_a_broken_run_from_a_recovered_spike():
    base = [1.0] * 20
    assert broke_after(base + [50.0] + [3.0] * 20, 20, chance=math.log(10))  # spike, then stuck high
    assert broke_after(base + [float("nan")] * 3, 20, chance=math.log(10))
    assert not broke_after(base + [50.0] + [1.0] * 20, 20, chance=math.log(10))  # recovered
    assert not broke_after(base + [1.2] + [2.0] * 20, 20, chance=math.log(10))  # no ×3 spike


def test_lr_spike_also_scales_the_base_lr_a_schedule_reads(mlp):
    model, opt = mlp
    for group in opt.param_groups:
        group["base_lr"] = 0.1
    faults.LrSpike(t0=0, layer="fc2", factor=30.0).before_step(0, model, opt)
    assert {g["layer"]: g["base_lr"] for g in opt.param_groups} == {"fc1": 0.1, "fc2": pytest.approx(3.0), "fc3": 0.1}


def test_missing_step_stops_stepping_from_t0():
    fault = faults.MissingStep(t0=3)
    assert [fault.take_step(s) for s in range(5)] == [True, True, True, False, False]
    assert faults.Fault().take_step(10)


def test_adam_state_zeroed_clears_the_second_moment_only_at_t0():
    torch.manual_seed(0)
    model = MLP()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fault = faults.AdamStateZeroed(t0=2, layer="fc2")
    x, y = torch.randn(8, 64), torch.arange(8)
    for step in range(3):
        _step(model, opt, fault, step, x, y)
        if step == 2:
            assert float(opt.state[model.fc2.weight]["exp_avg_sq"].abs().sum()) == 0.0
            assert float(opt.state[model.fc2.weight]["exp_avg"].abs().sum()) > 0.0
            assert float(opt.state[model.fc1.weight]["exp_avg_sq"].abs().sum()) > 0.0
        opt.step()


def test_broke_and_stalled_against_the_fault_free_twin():
    twin = [3.0 - 0.01 * i for i in range(150)]  # learning steadily: ends near 1.55
    jumped = twin[:60] + [3.2] * 90  # a jump at 60 (×1.3 over 2.45), then stuck
    assert broke_against(jumped, twin, 60) and not broke_against(twin, twin, 60)
    assert broke_against(twin[:60] + [float("nan")] * 3, twin, 60)
    bounced = twin[:60] + [3.2] + twin[61:]  # a spike it came back from
    assert not broke_against(bounced, twin, 60)
    flat = twin[:60] + [twin[59]] * 90  # stopped improving at 60
    assert stalled_against(flat, twin, 60) and not stalled_against(twin, twin, 60)
