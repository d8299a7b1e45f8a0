"""Recorder behaviour: what is recorded, for which loops, and how bad input is refused."""

import signal
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from recorder_helpers import read_manifest, read_table
from recorders import (Recorder, RecorderMeasureError, RecorderWarning, RecorderWriteError,
                       RunDirectoryError)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(8, 3)
        self.unused = nn.Linear(3, 3)  # never called: its grads stay None

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g))
            for _ in range(n)]


def train(rec, model, opt, steps):
    """`steps` classification steps of `model`, each recorded by `rec`."""
    for x, y in batches(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        rec.step()


def series(stats, role, name, column, key=None):
    rows = stats[(stats.role == role) & (stats.name == name)]
    if key is not None:
        rows = rows[rows.key == key]
    return rows.sort_values("step")[column].to_numpy()


def test_values_match_a_hand_computed_loop(tmp_path, backend):
    """Param, grad, update and ratio against values the test computes itself, with a loop
    that zeroes gradients right after optimizer.step() (grads must still be captured)."""
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    expected = []
    with Recorder(tmp_path / "run", model, opt) as rec:
        for x, y in batches(4):
            before = model.fc1.weight.detach().clone()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            grad = model.fc1.weight.grad.detach().clone()
            opt.step()
            opt.zero_grad(set_to_none=True)  # gone before rec.step sees it
            after = model.fc1.weight.detach()
            expected.append((grad.norm().item(), grad.abs().max().item(), after.norm().item(),
                             (after - before).norm().item(),
                             ((after - before).norm() / before.norm()).item(),
                             opt.state[model.fc1.weight]["momentum_buffer"].norm().item()))
            rec.step(loss=loss)
    stats = read_table(tmp_path / "run", "stats")
    g_norm, g_max, p_norm, u_norm, ratio, m_norm = map(np.array, zip(*expected))
    np.testing.assert_allclose(series(stats, "grad", "fc1.weight", "norm"), g_norm, rtol=1e-5)
    np.testing.assert_allclose(series(stats, "grad", "fc1.weight", "max_abs"), g_max, rtol=1e-6)
    np.testing.assert_allclose(series(stats, "param", "fc1.weight", "norm"), p_norm, rtol=1e-5)
    np.testing.assert_allclose(series(stats, "update", "fc1.weight", "norm"), u_norm, rtol=1e-4)
    np.testing.assert_allclose(series(stats, "update", "fc1.weight", "ratio"), ratio, rtol=1e-4)
    np.testing.assert_allclose(series(stats, "state", "fc1.weight", "norm", "momentum_buffer"),
                               m_norm, rtol=1e-5)
    # the unused layer's gradient stays None; tanh saturation is measured
    assert series(stats, "grad", "unused.weight", "grad_none").all()
    assert np.isnan(series(stats, "grad", "unused.weight", "norm").astype(float)).all()
    assert not np.isnan(series(stats, "activation", "act", "sat_frac")).any()
    assert np.isnan(series(stats, "activation", "fc1", "sat_frac")).all()
    scalars = read_table(tmp_path / "run", "scalars")
    gn = scalars[scalars.name == "grad_norm"].sort_values("step").value.to_numpy()
    assert (gn > 0).all()


def test_adam_state_and_frozen_parameters(tmp_path):
    model = Net()
    model.fc2.bias.requires_grad_(False)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3,
                           betas=(0.8, 0.99), weight_decay=0.01)
    with Recorder(tmp_path / "run", model, opt) as rec:
        train(rec, model, opt, 3)
    stats = read_table(tmp_path / "run", "stats")
    state = stats[stats.role == "state"]
    assert set(state.key) == {"exp_avg", "exp_avg_sq"}  # the scalar 'step' is not a tensor stat
    assert set(state.name) == {"fc1.weight", "fc1.bias", "fc2.weight"}
    assert series(stats, "grad", "fc2.bias", "grad_none").all()
    assert (series(stats, "update", "fc2.bias", "norm") == 0).all()
    assert (series(stats, "state", "fc1.weight", "norm", "exp_avg_sq") > 0).all()
    scalars = read_table(tmp_path / "run", "scalars")
    names = set(scalars.name)
    assert {"hp.optimizer.0.beta1", "hp.optimizer.0.beta2", "hp.optimizer.0.eps",
            "hp.optimizer.0.weight_decay", "lr"} <= names
    assert scalars[scalars.name == "hp.optimizer.0.beta1"].value.iloc[0] == pytest.approx(0.8)


def test_two_models_two_optimizers_gan_style(tmp_path):
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
    D = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-3)
    opt_d = torch.optim.SGD(D.parameters(), lr=1e-2, momentum=0.5)
    bce = nn.BCEWithLogitsLoss()
    with Recorder(tmp_path / "run", {"G": G, "D": D}, {"opt_g": opt_g, "opt_d": opt_d}) as rec:
        for _ in range(3):
            real, z = torch.randn(8, 6), torch.randn(8, 4)
            opt_d.zero_grad()
            fake = G(z)
            loss_d = bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
            loss_d.backward()
            opt_d.step()
            opt_g.zero_grad()
            loss_g = bce(D(fake), torch.ones(8, 1))
            loss_g.backward()
            opt_g.step()
            rec.step(loss_d=loss_d, loss_g=loss_g)
    stats = read_table(tmp_path / "run", "stats")
    params = set(stats[stats.role == "param"].name)
    assert params == {"G.0.weight", "G.0.bias", "G.2.weight", "G.2.bias",
                      "D.0.weight", "D.0.bias", "D.2.weight", "D.2.bias"}
    assert {"G.1", "D.1"} <= set(stats[stats.role == "activation"].name)
    # D's grads are captured at opt_d.step(), before loss_g.backward() adds to them
    assert not stats[stats.role == "grad"].grad_none.any()
    scalars = read_table(tmp_path / "run", "scalars")
    assert {"loss_d", "loss_g", "grad_norm", "grad_norm.G", "grad_norm.D",
            "hp.opt_g.0.lr", "hp.opt_d.0.momentum"} <= set(scalars.name)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["optimizers"]["opt_d"]["models"] == ["D"]
    assert set(manifest["models"]) == {"G", "D"}


def test_forgotten_step_and_zero_grad_are_recorded_faithfully(tmp_path):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    with Recorder(tmp_path / "no_step", model, opt) as rec:
        for _ in range(3):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            rec.step()  # optimizer.step() forgotten
    stats = read_table(tmp_path / "no_step", "stats")
    assert (series(stats, "update", "fc1.weight", "norm") == 0).all()
    assert (series(stats, "grad", "fc1.weight", "norm") > 0).all()

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0 keeps the gradient identical
    with Recorder(tmp_path / "no_zero", model, opt) as rec:
        for _ in range(3):
            nn.functional.cross_entropy(model(x), y).backward()  # zero_grad() forgotten
            opt.step()
            rec.step()
    norms = series(read_table(tmp_path / "no_zero", "stats"), "grad", "fc1.weight", "norm")
    np.testing.assert_allclose(norms / norms[0], [1, 2, 3], rtol=1e-5)


def test_sparse_gradients_are_recorded(tmp_path):
    """nn.EmbeddingBag(sparse=True) gives a sparse gradient: recorded as if dense, and the
    run goes on (the recorder must never take training down)."""
    model = nn.Sequential(nn.EmbeddingBag(50, 6, sparse=True), nn.Linear(6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = []
    with Recorder(tmp_path / "run", model, opt) as rec:
        for _ in range(3):
            x, y = torch.randint(0, 50, (4, 5)), torch.randint(0, 3, (4,))
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            dense = model[0].weight.grad.to_dense()
            expected.append((dense.norm().item(), (dense == 0).double().mean().item()))
            opt.step()
            rec.step(loss=loss, inputs=x)
    stats = read_table(tmp_path / "run", "stats")
    norms, zero_fracs = map(np.array, zip(*expected))
    np.testing.assert_allclose(series(stats, "grad", "0.weight", "norm"), norms, rtol=1e-5)
    np.testing.assert_allclose(series(stats, "grad", "0.weight", "zero_frac"), zero_fracs)


def test_hooks_are_removed_and_only_training_forwards_are_recorded(tmp_path):
    """Forwards under no_grad, inference_mode or model.eval() (an eval loop) are not the
    step's activations; rec.step() itself works under no_grad."""
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    previous = signal.getsignal(signal.SIGTERM)
    with Recorder(tmp_path / "run", model, opt) as rec:
        assert model.fc1._forward_hooks and model.fc1.weight._post_accumulate_grad_hooks
        out = model(torch.randn(4, 6))
        with torch.no_grad():
            model(torch.randn(5, 6))
        with torch.inference_mode():
            model(torch.randn(6, 6))
        model.eval()
        model(torch.randn(7, 6))
        model.train()
        with torch.no_grad():
            rec.step()
    assert all(not m._forward_hooks for m in model.modules())
    assert not any(p._post_accumulate_grad_hooks for p in model.parameters())
    assert not opt._optimizer_step_pre_hooks
    assert signal.getsignal(signal.SIGTERM) == previous
    assert not any(hasattr(m, "_recorder_name") for m in model.modules())
    stats = read_table(tmp_path / "run", "stats")
    activations = stats[stats.role == "activation"].set_index("name")
    assert set(activations.index) == {"fc1", "act", "fc2"}
    assert activations.loc["fc2", "numel"] == out.numel()
    model(torch.randn(4, 6))  # no hook left behind to fail or record


def test_activations_of_repeated_calls_are_pooled(tmp_path):
    layer = nn.Linear(3, 3)
    with Recorder(tmp_path / "run", nn.Sequential(layer)) as rec:
        a, b = torch.randn(5, 3), torch.randn(7, 3)
        out = torch.cat([layer(a), layer(b)]).detach()
        rec.step()
    stats = read_table(tmp_path / "run", "stats")
    row = stats[(stats.role == "activation")].iloc[0]
    assert row["numel"] == 36
    assert row["mean"] == pytest.approx(out.mean().item(), abs=1e-6)
    assert row["std"] == pytest.approx(out.std(unbiased=False).item(), rel=1e-4)


def test_inputs_targets_shape_and_hash(tmp_path):
    model = Net()
    x, y = batches(1)[0]
    with Recorder(tmp_path / "run", model) as rec:
        for _ in range(2):
            model(x)
            rec.step(inputs={"image": x}, targets=y)
        model(x + 1)
        # non-numeric parts of a batch (ids, captions) are passed over, not a crash
        rec.step(inputs={"image": x + 1, "ids": np.array(["a", "b"], dtype=object),
                         "captions": ["x", "y"]}, targets=y)
    stats = read_table(tmp_path / "run", "stats")
    inp = stats[stats.role == "input"].sort_values("step")
    assert set(inp.name) == {"input.image"}
    assert inp["shape"].tolist() == ["16x6"] * 3
    h = inp.hash.tolist()
    assert h[0] == h[1] != h[2]
    assert inp["mean"].iloc[0] == pytest.approx(x.mean().item(), abs=1e-6)
    assert inp["min"].iloc[0] == pytest.approx(x.min().item())
    tgt = stats[stats.role == "target"]
    assert tgt["max"].max() == y.max().item()


def test_first_nonfinite_dumps_the_flight_ring(tmp_path, backend):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    with Recorder(tmp_path / "run", model, opt, flight_every=2, flight_ring=3) as rec:
        for step in range(8):
            opt.zero_grad()
            inp = x.clone()
            if step >= 6:
                inp[0, 0] = float("nan")
            loss = nn.functional.cross_entropy(model(inp), y)
            loss.backward()
            opt.step()
            rec.step(loss=loss, inputs=inp)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["first_nonfinite_step"] == 6
    table = pq.read_table(tmp_path / "run" / "checkpoints" / "flight-00000006.parquet")
    assert table.schema.metadata[b"reason"] == b"first_nonfinite"
    # the ring's three samples plus the state at the first non-finite step
    assert sorted(set(table.column("step").to_pylist())) == [0, 2, 4, 6]
    stats = read_table(tmp_path / "run", "stats")
    assert series(stats, "input", "input", "nonfinite").tolist() == [0] * 6 + [1, 1]
    # raw bytes decode to the parameter without torch or pickle
    row = [r for r in table.to_pylist() if r["name"] == "fc1.bias" and r["step"] == 6][0]
    values = np.frombuffer(row["data"], dtype=row["dtype"]).reshape(row["shape"])
    np.testing.assert_array_equal(values, model.fc1.bias.detach().numpy())


def test_exception_sets_status_and_dumps_flight(tmp_path):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="boom"):
        with Recorder(tmp_path / "run", model, opt) as rec:
            train(rec, model, opt, 3)
            raise RuntimeError("boom")
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "exception"
    assert manifest["exception"]["type"] == "RuntimeError"
    assert "boom" in manifest["exception"]["traceback"]
    assert manifest["ended_at"] is not None
    flight = pq.read_table(tmp_path / "run" / "checkpoints" / "flight-00000002.parquet")
    assert flight.schema.metadata[b"reason"] == b"exception"
    assert len(read_table(tmp_path / "run", "scalars").step.unique()) == 3


def test_bad_input_is_refused(tmp_path):
    model, opt = Net(), None
    with pytest.raises(TypeError, match="nn.Module"):
        Recorder(tmp_path / "a", "not a model")
    with pytest.raises(TypeError, match="nn.Module"):
        Recorder(tmp_path / "a", {"G": model, "D": object()})
    with pytest.raises(TypeError, match="Optimizer"):
        Recorder(tmp_path / "a", model, optimizer="sgd")
    with pytest.raises(TypeError, match="flush_evry"):
        Recorder(tmp_path / "a", model, flush_evry=3)
    with pytest.raises(ValueError, match="flush_every"):
        Recorder(tmp_path / "a", model, flush_every=0)
    with pytest.raises(ValueError, match="exclude"):
        Recorder(tmp_path / "a", model, overwrite=True, append=True)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(RunDirectoryError, match="not empty"):
        Recorder(tmp_path / "full", model)
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirectoryError, match="not writable|not a directory"):
        Recorder(tmp_path / "file" / "run", model)
    with pytest.raises(RunDirectoryError, match="append"):
        Recorder(tmp_path / "full", model, append=True)
    with pytest.raises(TypeError, match="number"):  # without strict: left out, with a warning
        with Recorder(tmp_path / "b", model, strict=True) as rec:
            rec.step(loss="high")
    with pytest.raises(ValueError, match="scalar"):  # without strict: its mean, with a warning
        with Recorder(tmp_path / "c", model, strict=True) as rec:
            rec.step(loss=torch.ones(3))
    assert opt is None


def test_overwrite_and_append(tmp_path):
    model = Net()
    run = tmp_path / "run"
    for _ in range(2):
        with Recorder(run, model, overwrite=True) as rec:
            rec.step()
            rec.step()
    assert sorted(read_table(run, "stats").step.unique()) == [0, 1]
    first_id = read_manifest(run)["run_id"]
    with Recorder(run, model, append=True) as rec:
        assert rec.current_step == 2
        rec.step()
    assert sorted(read_table(run, "stats").step.unique()) == [0, 1, 2]
    assert read_manifest(run)["run_id"] == first_id


def test_write_errors_warn_once_and_training_continues(tmp_path, monkeypatch):
    import recorders.writer as writer

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(tmp_path / "run", model, opt, flush_every=2) as rec:
            monkeypatch.setattr(writer, "atomic_write_parquet", disk_full)
            train(rec, model, opt, 7)
    ours = [w for w in caught if issubclass(w.category, RecorderWarning)]
    assert len(ours) == 1 and "No space left" in str(ours[0].message)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "completed" and manifest["failed_writes"] >= 4
    assert manifest["last_step"] == 6

    with pytest.raises(RecorderWriteError):
        with Recorder(tmp_path / "strict", model, opt, flush_every=2, strict=True) as rec:
            for _ in range(3):
                rec.step()


@pytest.mark.parametrize("broken", ["activation_row", "params_and_updates", "grads"])
def test_a_tensor_that_cannot_be_measured_never_stops_training(tmp_path, monkeypatch, broken):
    """A bug or an unsupported tensor inside the recorder's measuring (in a forward hook, the
    optimizer's pre-step hook or rec.step) warns once, names the place in the manifest and
    leaves training and the rest of the record alone; strict=True raises instead."""
    import recorders.measurer as measurer_module

    def fail(*args, **kwargs):
        raise RuntimeError("unsupported tensor")

    if broken == "grads":
        monkeypatch.setattr(measurer_module.StepMeasurer, "_measure_grads", fail)
    else:
        monkeypatch.setattr(measurer_module, broken, fail)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(tmp_path / "run", model, opt) as rec:
            for x, y in batches(3):
                opt.zero_grad()
                loss = nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                rec.step(loss=loss)
                losses.append(loss.item())
    ours = [w for w in caught if issubclass(w.category, RecorderWarning)]
    assert len(ours) == 1 and "unsupported tensor" in str(ours[0].message)
    manifest = read_manifest(tmp_path / "run")
    assert manifest["status"] == "completed" and manifest["last_step"] == 2
    assert any("unsupported tensor" in v for v in manifest["measure_errors"].values())
    scalars = read_table(tmp_path / "run", "scalars")
    recorded = scalars[scalars.name == "loss"].sort_values("step").value.tolist()
    np.testing.assert_allclose(recorded, losses, rtol=1e-6)

    with pytest.raises(RecorderMeasureError, match="unsupported tensor"):
        with Recorder(tmp_path / "strict", model, opt, strict=True) as rec:
            x, y = batches(1)[0]
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            rec.step()


def test_parameters_cast_or_reshaped_mid_run_start_their_updates_again(tmp_path):
    """model.double() halfway (or a weight replaced by one of another shape): that step has no
    update for them (null), the record goes on, and later updates are measured again."""
    model = nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = batches(1)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(tmp_path / "run", model, opt) as rec:
            for step in range(5):
                if step == 2:
                    model.double()
                    x = x.double()
                if step == 3:
                    model[1].bias.data = model[1].bias.data.reshape(1, 3)  # still broadcasts
                opt.zero_grad()
                out = model(x)
                nn.functional.cross_entropy(out.reshape(-1, 3), y).backward()
                opt.step()
                rec.step()
    assert not [w for w in caught if issubclass(w.category, RecorderWarning)]
    stats = read_table(tmp_path / "run", "stats")
    weight = series(stats, "update", "0.weight", "norm").astype(float)
    assert np.isnan(weight[2]) and (weight[[0, 1, 3, 4]] > 0).all()
    bias = series(stats, "update", "1.bias", "norm").astype(float)
    assert np.isnan(bias[[2, 3]]).all() and bias[4] > 0
    assert (series(stats, "param", "1.bias", "numel") == 3).all()


def test_activation_schedule(tmp_path):
    model = Net()
    with Recorder(tmp_path / "run", model, activation_every=3) as rec:
        for x, _ in batches(7):
            model(x)
            rec.step()
    stats = read_table(tmp_path / "run", "stats")
    assert sorted(stats[stats.role == "activation"].step.unique()) == [0, 3, 6]
    assert sorted(stats[stats.role == "param"].step.unique()) == list(range(7))


def test_grad_scale_and_threads(tmp_path):
    import threading

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    errors = []

    def train():
        try:
            with Recorder(tmp_path / "run", model, opt, scaler=scaler) as rec:
                for x, y in batches(2):
                    opt.zero_grad()
                    scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
                    scaler.step(opt)
                    scaler.update()
                    rec.step()
        except Exception as exc:  # surfaced below; a thread cannot install signal handlers
            errors.append(exc)

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    assert not errors
    scalars = read_table(tmp_path / "run", "scalars")
    assert scalars[scalars.name == "grad_scale"].value.tolist() == [1024.0, 1024.0]
    # gradients are unscaled by scaler.step() before the optimizer's pre-step hook reads them
    stats = read_table(tmp_path / "run", "stats")
    assert series(stats, "grad", "fc1.weight", "norm").max() < 100


def test_segments_are_compacted_and_no_row_is_lost(tmp_path):
    model = Net()
    with Recorder(tmp_path / "run", model, flush_every=1) as rec:
        for x, _ in batches(70):
            model(x)
            rec.step(loss=float(rec.current_step))
    files = list((tmp_path / "run" / "stats").glob("part-*.parquet"))
    assert len(files) < 20  # 70 flushes, merged 8 at a time
    stats = read_table(tmp_path / "run", "stats")
    assert not stats.duplicated(["step", "role", "name", "key"]).any()
    assert sorted(stats.step.unique()) == list(range(70))
    loss = read_table(tmp_path / "run", "scalars").query("name == 'loss'")
    assert sorted(loss.value) == [float(i) for i in range(70)]
    for f in files:  # each flush (one step here) sorted, merged ones after each other
        frame = pq.read_table(f).to_pandas()
        ordered = frame.sort_values(["step", "role", "name", "key"], kind="stable")
        assert list(ordered.index) == list(frame.index)


def test_a_module_assigned_mid_run_is_followed_from_its_first_forward(tmp_path):
    """A new head assigned into the model (its parameters added to the optimizer): from the
    next forward on, its outputs, parameters, gradients and updates are recorded under the
    model's names, the old head is no longer measured, and the step carries a
    `model_changed` event."""
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    old_head = model[2]
    with Recorder(tmp_path / "run", model, opt) as rec:
        for step, (x, y) in enumerate(batches(6)):
            if step == 3:
                model[2] = nn.Linear(8, 3)
                opt.add_param_group({"params": model[2].parameters()})
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            rec.step()
    stats = read_table(tmp_path / "run", "stats")
    assert list(series(stats, "activation", "2", "step")) == list(range(6))
    norms = series(stats, "param", "2.weight", "norm")
    assert norms[-1] == pytest.approx(model[2].weight.detach().norm().item(), rel=1e-5)
    assert norms[2] == pytest.approx(old_head.weight.detach().norm().item(), rel=1e-5)
    assert not series(stats, "grad", "2.weight", "grad_none")[3:].any()
    assert (series(stats, "update", "2.weight", "norm")[3:] > 0).all()
    assert (series(stats, "state", "2.weight", "norm", key="momentum_buffer")[3:] > 0).all()
    events = read_table(tmp_path / "run", "events")
    changed = events[events.kind == "model_changed"]
    assert changed.step.tolist() == [3] and "replaced 2.bias, 2.weight" in changed.message.iloc[0]
    manifest = read_manifest(tmp_path / "run")
    assert manifest["optimizers"]["optimizer"]["param_groups"][1]["params"] == ["2.weight",
                                                                               "2.bias"]


def test_lazy_modules_are_followed_once_their_first_forward_sets_their_parameters(tmp_path):
    """nn.LazyLinear has no shape until its first forward: the recorder starts without its
    parameters (no error), follows them from that step on (no update that step: nothing to
    compare with), and the manifest gets their shapes."""
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(tmp_path / "run", model, opt) as rec:
            train(rec, model, opt, 3)
    assert not [w for w in caught if issubclass(w.category, RecorderWarning)]
    stats = read_table(tmp_path / "run", "stats")
    assert list(series(stats, "param", "0.weight", "step")) == [0, 1, 2]
    updates = series(stats, "update", "0.weight", "norm")
    assert np.isnan(updates[0]) and (updates[1:] > 0).all()
    assert not series(stats, "grad", "0.weight", "grad_none").any()
    events = read_table(tmp_path / "run", "events")
    assert events.message.tolist() == ["initialized 0.bias, 0.weight"]
    structure = read_manifest(tmp_path / "run")["models"]["model"]
    shapes = {p["name"]: p["shape"] for p in structure["parameters"]}
    assert shapes["0.weight"] == [4, 6]
