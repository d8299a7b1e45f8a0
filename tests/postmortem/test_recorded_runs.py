"""analyze() on small real runs recorded with recorders.Recorder (tiny torch models)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from postmortem import analyze  # noqa: E402
from recorders import Recorder  # noqa: E402

STEPS = 120


class Net(nn.Module):
    def __init__(self, detach_after_fc1: bool = False):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 1)
        self.detach_after_fc1 = detach_after_fc1

    def forward(self, x):
        h = self.act(self.fc1(x))
        if self.detach_after_fc1:
            h = h.detach()
        return self.fc3(self.act(self.fc2(h)))


def _train(path, *, seed=0, lr_boost_at=None, nan_batch_at=None, skip_step=False,
           detach=False, event_at=None, zero_after_step=False):
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = Net(detach_after_fc1=detach)
    groups = [{"params": list(m.parameters())} for m in (model.fc1, model.fc2, model.fc3)]
    optimizer = torch.optim.SGD(groups, lr=0.01, momentum=0.9)
    weights = torch.randn(8, 1)
    with Recorder(path, model, optimizer, flush_every=25) as rec:
        for step in range(STEPS):
            x = torch.randn(32, 8)
            y = x @ weights
            if step == nan_batch_at:
                x[0, 0] = float("nan")
            if event_at is not None and step == event_at:
                rec.event("domain_switch", "second task")
            if step == lr_boost_at:
                optimizer.param_groups[1]["lr"] *= 3000  # fc2 only
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            if not skip_step:
                optimizer.step()
            if zero_after_step:  # nanoGPT's order: gradients are gone before rec.step()
                optimizer.zero_grad(set_to_none=True)
            rec.step(loss=loss, inputs=x, targets=y)
            if not torch.isfinite(loss):
                break
    return path


def test_healthy_run(tmp_path):
    analysis = analyze(_train(tmp_path / "run"))
    assert analysis.verdict == "healthy"
    assert [f.label for f in analysis.findings] == ["healthy"]
    assert analysis.onset is None and analysis.ranking == []
    json.dumps(analysis.to_json(), allow_nan=False)


@pytest.mark.parametrize("seed", [1, 2])
def test_lr_spike_on_one_layer_is_found_with_its_layer(tmp_path, seed):
    t0 = int(np.random.default_rng(seed).integers(40, 80))
    analysis = analyze(_train(tmp_path / "run", seed=seed, lr_boost_at=t0, event_at=t0))
    assert analysis.verdict == "diverged"
    assert abs(analysis.onset.step - t0) <= 1
    assert analysis.onset.interval[0] <= analysis.onset.step <= analysis.onset.interval[1]
    assert analysis.ranking[0].tensor.startswith("fc2.")
    labels = {f.label for f in analysis.findings}
    assert {"diverged", "lr_too_high"} <= labels
    assert any("domain_switch" in sentence for sentence in analysis.chain)
    if analysis.first_nonfinite is not None:
        assert analysis.onset.lead_steps == analysis.first_nonfinite.step - analysis.onset.step >= 0
    payload = analysis.to_json()
    json.dumps(payload, allow_nan=False)
    assert payload["onset_step"] == analysis.onset.step
    assert payload["ranking"][0]["tensor"] == analysis.ranking[0].tensor


def test_nan_batch_is_the_first_nonfinite_value(tmp_path):
    t0 = int(np.random.default_rng(3).integers(30, 90))
    analysis = analyze(_train(tmp_path / "run", nan_batch_at=t0))
    first = analysis.first_nonfinite
    assert (first.step, first.role, first.tensor) == (t0, "input", "input")
    assert analysis.verdict == "diverged"
    labels = {f.label for f in analysis.findings}
    assert "nonfinite_input" in labels
    assert analysis.ranking[0].role == "input"
    assert first.spread and first.spread[0][0] == t0


@pytest.mark.parametrize("zero_after_step", [False, True])
def test_missing_optimizer_step_is_no_update(tmp_path, zero_after_step):
    """Also when the loop zeroes gradients with set_to_none=True before rec.step(): the
    gradients were computed, so the fix is the missing step, not a cut graph."""
    analysis = analyze(_train(tmp_path / "run", skip_step=True, zero_after_step=zero_after_step))
    assert analysis.verdict == "not_learning"
    finding = next(f for f in analysis.findings if f.label == "no_update")
    assert "optimizer.step()" in finding.fix
    assert finding.evidence["optimizer_stepped"] == 0.0
    assert "no_gradient" not in {f.label for f in analysis.findings}


def test_token_ids_are_never_unscaled_inputs(tmp_path):
    """nanoGPT's X is int64 token IDs up to the vocabulary size: indices, not features."""
    from sample_runs import nanogpt
    from sample_runs.models import TinyGPT

    config = nanogpt.LoopConfig(steps=40, vocab=512)
    torch.manual_seed(0)
    model = TinyGPT(vocab=config.vocab)
    opt = nanogpt.make_optimizer(model, config)
    with Recorder(tmp_path / "run", model, opt) as rec:
        nanogpt.train(model, opt, config, rec=rec)
    analysis = analyze(tmp_path / "run")
    inputs = [f for f in analysis.findings if f.label == "unscaled_inputs"]
    assert not inputs, inputs
    assert analysis.run.manifest["tied_parameters"] == {"wte.weight": ["lm_head.weight"]}


def test_detached_layer_gets_no_gradient(tmp_path):
    # fc2 and fc3 still learn the regression on fc1's random features: the verdict follows the
    # loss (healthy), the cut-off layer is a warning that names it.
    analysis = analyze(_train(tmp_path / "run", detach=True))
    finding = next(f for f in analysis.findings if f.label == "no_gradient")
    assert set(finding.tensors) == {"fc1.weight", "fc1.bias"}
    assert finding.severity == "warning" and finding.evidence["loss_gain_since"] >= 0.2
    assert analysis.verdict == "healthy" and finding in analysis.significant


def test_crashed_run_is_analysed(tmp_path):
    path = tmp_path / "run"
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(RuntimeError):
        with Recorder(path, model, optimizer, flush_every=10) as rec:
            for step in range(60):
                x = torch.randn(16, 8)
                loss = model(x).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                rec.step(loss=loss, inputs=x)
                if step == 45:
                    raise RuntimeError("killed")
    segments = sorted((path / "stats").glob("part-*.parquet"))
    segments[-1].write_bytes(segments[-1].read_bytes()[:100])  # torn last write
    analysis = analyze(path)
    assert any(segments[-1].name in w for w in analysis.warnings)
    assert analysis.run.manifest.get("status") == "exception"
    assert analysis.verdict in {"healthy", "not_learning"}


def test_a_schema_1_run_still_loads(tmp_path):
    """A run written before schema 2: no dtype/kind columns, no segment version, manifest 1."""
    import pyarrow.parquet as pq

    path = _train(tmp_path / "run", skip_step=True)
    for segment in (path / "stats").glob("part-*.parquet"):
        table = pq.read_table(segment).drop_columns(["dtype", "kind"])
        pq.write_table(table.replace_schema_metadata(None), segment)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 1}))
    analysis = analyze(path)
    assert "no_update" in {f.label for f in analysis.findings}
    assert analysis.run.manifest["schema_version"] == 1


def _per_micro_batch(path, *, forget_zero_grad_from=None):
    """rec.step() once per micro-batch, the optimizer every 4th: gradients carried between its
    steps on purpose; zero_grad() after each optimizer step until `forget_zero_grad_from`."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    weights = torch.randn(8, 1)
    with Recorder(path, model, optimizer) as rec:
        for step in range(STEPS):
            x = torch.randn(32, 8)
            loss = nn.functional.mse_loss(model(x), x @ weights)
            (loss / 4).backward()
            if step % 4 == 3:
                optimizer.step()
                if forget_zero_grad_from is None or step < forget_zero_grad_from:
                    optimizer.zero_grad()
            rec.step(loss=loss)
    return path


def test_gradients_carried_between_optimizer_steps_on_purpose_are_no_stale_gradients(tmp_path):
    analysis = analyze(_per_micro_batch(tmp_path / "run"))
    assert "stale_gradients" not in [f.label for f in analysis.findings]
    assert analysis.verdict == "healthy"


def test_gradients_carried_past_an_optimizer_step_are_stale_gradients(tmp_path):
    analysis = analyze(_per_micro_batch(tmp_path / "run", forget_zero_grad_from=60))
    stale = [f for f in analysis.findings if f.label == "stale_gradients"]
    assert len(stale) == 1 and abs(stale[0].step - 64) <= 1


def _queue_run(path, *, prefilled: bool):
    """MoCo's loop in miniature: queries against the momentum encoder's key of the same sample and
    a queue of 64 negative keys, random at first (`prefilled`: the first batch's keys)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    encoder = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))
    key_encoder = copy.deepcopy(encoder).requires_grad_(False)
    optimizer = torch.optim.SGD(encoder.parameters(), lr=0.002, momentum=0.9)
    prototypes = torch.randn(10, 16) * 2

    def views():
        base = prototypes[torch.randint(0, 10, (32,))] + 0.5 * torch.randn(32, 16)
        return base + 0.3 * torch.randn(32, 16), base + 0.3 * torch.randn(32, 16)

    unit = torch.nn.functional.normalize
    with torch.no_grad():
        queue = unit(key_encoder(torch.cat([views()[1], views()[1]])), dim=1) if prefilled else \
            unit(torch.randn(64, 16), dim=1)
    with Recorder(path, encoder, optimizer, flush_every=25) as rec:
        for _ in range(STEPS):
            x_query, x_key = views()
            query = unit(encoder(x_query), dim=1)
            with torch.no_grad():
                for k, q in zip(key_encoder.parameters(), encoder.parameters()):
                    k.mul_(0.99).add_(q, alpha=0.01)
                key = unit(key_encoder(x_key), dim=1)
            logits = torch.cat([(query * key).sum(1, keepdim=True), query @ queue.T], 1) / 0.2
            loss = nn.functional.cross_entropy(logits, torch.zeros(32, dtype=torch.long))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            queue = torch.cat([key, queue])[:64]
            rec.step(loss=loss, inputs=x_query)


def test_a_loss_that_rose_while_a_queue_filled_is_read_from_where_it_settled(tmp_path):
    _queue_run(tmp_path / "random_queue", prefilled=False)
    analysis = analyze(tmp_path / "random_queue")
    assert analysis.verdict == "healthy"
    settled = [w for w in analysis.warnings if w.startswith("the analysis starts at step 2:")]
    assert len(settled) == 1 and settled[0] in analysis.to_json()["warnings"]
    assert analysis.data.losses[0].steps[0] == 0  # the report still shows every step
    _queue_run(tmp_path / "filled_queue", prefilled=True)
    assert not any("the analysis starts" in w for w in analyze(tmp_path / "filled_queue").warnings)


def _metric_run(path, lr: float):
    """`Net` on its regression, logging every 5 steps a held-out accuracy that rises 25 % → 35 %
    whatever the weights do (BatchNorm's running statistics can move one so, round 35)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    weights = torch.randn(8, 1)
    with Recorder(path, model, optimizer, flush_every=25) as rec:
        for step in range(STEPS):
            x = torch.randn(32, 8)
            loss = nn.functional.mse_loss(model(x), x @ weights)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            rec.step(loss=loss, inputs=x)
            if step % 5 == 4:
                rec.record_scalars(val_accuracy=0.25 + 0.1 * step / STEPS)


def test_a_metric_that_improves_while_no_weight_moves_judges_nothing(tmp_path):
    _metric_run(tmp_path / "still", lr=1e-8)
    analysis = analyze(tmp_path / "still")
    assert analysis.verdict == "not_learning"
    assert {"lr_too_low", "loss_plateau"} <= {f.label for f in analysis.significant}
    assert analysis.outcome.learns is False and analysis.outcome.judged_by is None  # the loss judged, not the metric
    # At a healthy lr the same metric, with the loss falling, is no reason for doubt.
    _metric_run(tmp_path / "learning", lr=0.01)
    learning = analyze(tmp_path / "learning")
    assert learning.verdict == "healthy" and learning.outcome.learns is True
