"""The recorder on real training loops (../shared/real-loops.md): nanoGPT's loop on a small GPT
(tied head, AdamW, warm-up + cosine, clip 1.0, accumulation 2, an eval loop), AMP with a
GradScaler, a loop that forgets optimizer.step(), a loop without any optimizer, saving and
copying the recorded model. Every expectation is computed by the test from the loop itself."""

import copy
import io

import numpy as np
import pytest
import torch
from torch import nn

from recorder_helpers import read_manifest, read_table
from recorders import Recorder, RecorderWarning
from sample_runs import nanogpt
from sample_runs.data import token_batches
from sample_runs.models import TinyGPT

CONFIG = nanogpt.LoopConfig(steps=24, eval_every=10)


def scalar(scalars, name):
    rows = scalars[scalars.name == name].sort_values("step")
    return rows.step.to_numpy(), rows.value.to_numpy()


def rows(stats, role, name):
    return stats[(stats.role == role) & (stats.name == name)].sort_values("step")


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory):
    """One recorded nanoGPT run and what the loop saw: pre-clip gradients per step, the
    norms clip_grad_norm_ returned, the activation sizes of the training forwards."""
    run_dir = tmp_path_factory.mktemp("gpt") / "run"
    torch.manual_seed(0)
    model = TinyGPT()
    opt = nanogpt.make_optimizer(model, CONFIG)
    pre_clip = []

    def before_clip(step, m):
        pre_clip.append({n: p.grad.detach().clone() for n, p in m.named_parameters()})

    saved = io.BytesIO()
    with Recorder(run_dir, model, opt, flush_every=7) as rec:
        logs = nanogpt.train(model, opt, CONFIG, rec=rec, before_clip=before_clip)
        torch.save(model, saved)  # pytorch/examples' word LM saves the whole module
        ema = copy.deepcopy(model)  # an EMA / eval copy
        x, y = token_batches(1, batch=3, context=CONFIG.context, vocab=CONFIG.vocab, seed=9)[0]
        nn.functional.cross_entropy(ema(x).flatten(0, 1), y.flatten()).backward()
        rec.step()  # the copy's forward and backward must not be in this step
    return {"dir": run_dir, "logs": logs, "pre_clip": pre_clip, "saved": saved,
            "model": model, "stats": read_table(run_dir, "stats"),
            "scalars": read_table(run_dir, "scalars"), "manifest": read_manifest(run_dir)}


def test_recorded_grad_norm_is_what_clip_grad_norm_returned(gpt_run):
    logs, scalars = gpt_run["logs"], gpt_run["scalars"]
    steps, recorded = scalar(scalars, "grad_norm")
    returned = np.array([log.grad_norm for log in logs])
    np.testing.assert_allclose(recorded[:CONFIG.steps], returned, rtol=1e-5)
    assert returned.max() > 1.0  # clipping acted at some steps: the test can tell pre from post
    # what the optimizer consumed: min(norm, 1) (clip_grad_norm_'s coefficient, eps 1e-6)
    coef = np.minimum(1.0, CONFIG.clip / (returned + 1e-6))
    _, clipped = scalar(scalars, "grad_norm_clipped")
    _, clip_coef = scalar(scalars, "clip_coef")
    np.testing.assert_allclose(clipped, returned * coef, rtol=1e-5)
    np.testing.assert_allclose(clip_coef, coef, rtol=1e-5)


def test_per_tensor_gradients_are_the_accumulated_pre_clip_ones(gpt_run):
    stats, pre_clip = gpt_run["stats"], gpt_run["pre_clip"]
    for name in ("wte.weight", "blocks.0.attn.c_attn.bias", "blocks.1.mlp_proj.weight"):
        expected = np.array([g[name].norm().item() for g in pre_clip])
        max_abs = np.array([g[name].abs().max().item() for g in pre_clip])
        got = rows(stats, "grad", name)
        np.testing.assert_allclose(got.norm.to_numpy()[:CONFIG.steps], expected, rtol=1e-5)
        np.testing.assert_allclose(got.max_abs.to_numpy()[:CONFIG.steps], max_abs, rtol=1e-6)


def test_eval_forwards_are_not_activations_and_micro_batches_are_pooled(gpt_run):
    stats = gpt_run["stats"]
    head = rows(stats, "activation", "lm_head")
    per_step = CONFIG.accumulation * CONFIG.batch * CONFIG.context * CONFIG.vocab
    # every training step, eval steps included, holds exactly its two micro-batches
    assert head.step.tolist() == list(range(CONFIG.steps))
    assert (head.numel == per_step).all()


def test_token_inputs_are_indices_and_steps_are_optimizer_steps(gpt_run):
    stats, scalars = gpt_run["stats"], gpt_run["scalars"]
    inputs = stats[stats.role.isin(["input", "target"])]
    assert set(inputs.name) == {"input", "target"}
    assert (inputs.dtype == "int64").all() and (inputs.kind == "index").all()
    assert stats[stats.role == "param"].kind.isna().all()
    steps, stepped = scalar(scalars, "optimizer_stepped.optimizer")
    assert steps.tolist() == list(range(CONFIG.steps + 1))
    assert stepped.tolist() == [1.0] * CONFIG.steps + [0.0]
    _, lr = scalar(scalars, "lr")
    np.testing.assert_allclose(lr[:CONFIG.steps], [log.lr for log in gpt_run["logs"]])


def test_a_tied_parameter_is_recorded_once(gpt_run):
    stats, manifest = gpt_run["stats"], gpt_run["manifest"]
    assert manifest["tied_parameters"] == {"wte.weight": ["lm_head.weight"]}
    params = stats[stats.role == "param"]
    assert "lm_head.weight" not in set(params.name)
    assert (params[params.name == "wte.weight"].groupby("step").size() == 1).all()
    assert manifest["schema_version"] == 2


def test_saving_and_copying_the_recorded_model(gpt_run):
    """torch.save(model) inside the Recorder worked; the loaded model and a deep copy carry no
    live hook, and the copy's forward and backward recorded nothing."""
    stats = gpt_run["stats"]
    last = stats[stats.step == CONFIG.steps]
    assert last[last.role == "activation"].empty  # the copy's training forward is not there
    assert last[last.role == "grad"].grad_none.astype(bool).all()  # nor its gradients
    gpt_run["saved"].seek(0)
    loaded = torch.load(gpt_run["saved"], weights_only=False)
    x = token_batches(1, batch=2, context=8, vocab=CONFIG.vocab, seed=3)[0][0]
    torch.testing.assert_close(loaded(x), gpt_run["model"](x))
    loaded(x).sum().backward()  # its hooks are inert


def test_grad_scaler_unscales_and_marks_skipped_steps(tmp_path):
    """A CPU GradScaler made to skip: an inf lands in a gradient after backward at two steps
    (as an fp16 overflow would); the loop sees the parameters unchanged there. Gradients are
    recorded unscaled."""
    config = nanogpt.LoopConfig(steps=8, eval_every=0)
    torch.manual_seed(0)
    model = TinyGPT()
    opt = nanogpt.make_optimizer(model, config)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=3)

    def overflow(step, micro):
        if step in (2, 5) and micro == 1:
            model.wpe.weight.grad[0, 0] = float("inf")

    with Recorder(tmp_path / "run", model, opt, scaler=scaler) as rec:
        logs = nanogpt.train(model, opt, config, rec=rec, scaler=scaler, after_backward=overflow)
    skipped = np.array([not log.stepped for log in logs], dtype=float)
    assert skipped.tolist() == [0, 0, 1, 0, 0, 1, 0, 0]
    scalars = read_table(tmp_path / "run", "scalars")
    _, recorded = scalar(scalars, "scaler_skipped")
    np.testing.assert_array_equal(recorded, skipped)
    _, stepped = scalar(scalars, "optimizer_stepped.optimizer")
    np.testing.assert_array_equal(stepped, 1 - skipped)
    _, norms = scalar(scalars, "grad_norm")
    ok = skipped == 0  # the unscaled pre-clip norm, as clip_grad_norm_ after unscale_ saw it
    np.testing.assert_allclose(norms[ok], np.array([log.grad_norm for log in logs])[ok],
                               rtol=1e-4)


def test_a_loop_without_optimizer_step_still_records_gradients(tmp_path):
    """The seeds' commonest bug: optimizer.step() forgotten, zero_grad(set_to_none=True)."""
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    norms = []
    with Recorder(tmp_path / "run", model, opt) as rec:
        for x, y in token_batches(3, batch=4, context=8, vocab=64, seed=1):
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            norms.append(model.blocks[0].c_fc.weight.grad.norm().item())
            opt.zero_grad(set_to_none=True)
            rec.step(loss=loss)
    stats = read_table(tmp_path / "run", "stats")
    got = rows(stats, "grad", "blocks.0.c_fc.weight")
    assert not got.grad_none.any()
    np.testing.assert_allclose(got.norm.to_numpy(), norms, rtol=1e-5)
    assert (rows(stats, "update", "blocks.0.c_fc.weight").norm == 0).all()
    _, stepped = scalar(read_table(tmp_path / "run", "scalars"), "optimizer_stepped.optimizer")
    assert stepped.tolist() == [0.0, 0.0, 0.0]


def test_a_loop_with_no_optimizer_records_gradients_updates_and_lr(tmp_path):
    """pytorch/examples' word LM: clip, then p.data.add_(p.grad, alpha=-lr) by hand."""
    model = TinyGPT()
    lr = 0.5
    expected = []
    with Recorder(tmp_path / "run", model) as rec:
        for x, y in token_batches(4, batch=4, context=8, vocab=64, seed=2):
            model.zero_grad()
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            grad = model.ln_f.weight.grad.norm().item()
            total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25).item()
            before = model.ln_f.weight.detach().clone()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            expected.append((grad, (model.ln_f.weight - before).norm().item(), total))
            rec.step(loss=loss, lr=lr)
            lr *= 0.9
    stats = read_table(tmp_path / "run", "stats")
    grad, update, total = map(np.array, zip(*expected))
    np.testing.assert_allclose(rows(stats, "grad", "ln_f.weight").norm, grad, rtol=1e-5)
    np.testing.assert_allclose(rows(stats, "update", "ln_f.weight").norm, update, rtol=1e-4)
    scalars = read_table(tmp_path / "run", "scalars")
    np.testing.assert_allclose(scalar(scalars, "grad_norm")[1], total, rtol=1e-5)
    np.testing.assert_allclose(scalar(scalars, "lr")[1], 0.5 * 0.9 ** np.arange(4))


def test_a_scheduler_stepped_before_rec_step_records_the_lr_each_step_used(tmp_path):
    """`optimizer.step(); scheduler.step(); rec.step()`: each step's lr and hp.* are the ones
    the optimizer stepped with, not the next step's; a step without optimizer.step() has the
    current ones. Two groups, two schedules; SGD's update is -lr * grad, which says which lr a
    step used."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 1))
    opt = torch.optim.SGD([{"params": model[0].parameters()},
                           {"params": model[1].parameters(), "momentum": 0.0}], lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 0.5 ** s, lambda s: 1.0 + s])
    used, skip = [], 3
    with Recorder(tmp_path / "run", model, opt) as rec:
        for step in range(6):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).square().mean()
            loss.backward()
            grad = model[1].weight.grad.clone()
            before = model[1].weight.detach().clone()
            if step != skip:
                opt.step()
            used.append([g["lr"] for g in opt.param_groups])
            if step != skip:  # the rate this step used, told by the update itself
                np.testing.assert_allclose(before - model[1].weight.detach(), used[-1][1] * grad,
                                           rtol=1e-5)
            scheduler.step()
            if step == skip:
                used[-1] = [g["lr"] for g in opt.param_groups]  # not stepped: as it is now
            rec.step(loss=loss)
    scalars = read_table(tmp_path / "run", "scalars")
    used = np.array(used)
    np.testing.assert_array_equal(scalar(scalars, "lr")[1], used[:, 0])
    np.testing.assert_array_equal(scalar(scalars, "hp.optimizer.0.lr")[1], used[:, 0])
    np.testing.assert_array_equal(scalar(scalars, "hp.optimizer.1.lr")[1], used[:, 1])
    assert scalar(scalars, "optimizer_stepped.optimizer")[1].tolist() == [1, 1, 1, 0, 1, 1]


def test_dict_batches_record_each_entry_with_its_kind(tmp_path):
    model = TinyGPT()
    batch = {"input_ids": torch.randint(0, 64, (2, 8)),
             "attention_mask": torch.ones(2, 8, dtype=torch.bool),
             "pixel_values": torch.rand(2, 3)}
    with Recorder(tmp_path / "run", model) as rec:
        rec.step(inputs=batch, targets={"labels": batch["input_ids"]})
    stats = read_table(tmp_path / "run", "stats").set_index("name")
    assert stats.loc["input.input_ids", ["dtype", "kind"]].tolist() == ["int64", "index"]
    assert stats.loc["input.attention_mask", ["dtype", "kind"]].tolist() == ["bool", "mask"]
    assert stats.loc["input.pixel_values", ["dtype", "kind"]].tolist() == ["float32", "float"]
    assert stats.loc["target.labels", "kind"] == "index"


@pytest.mark.parametrize("in_place", [False, True])
def test_a_compiled_model_is_recorded_without_activations(tmp_path, in_place):
    """torch.compile(model) / model.compile(): one warning and a manifest note say that its
    activations are not recorded; everything else is, under the model's own names."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = model if in_place else torch.compile(model, backend="aot_eager")
    if in_place:
        model.compile(backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    with pytest.warns(RecorderWarning, match="torch.compile") as caught:
        with Recorder(tmp_path / "run", compiled, opt) as rec:
            for _ in range(3):
                loss = compiled(torch.randn(5, 4)).square().mean()
                loss.backward()
                norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01).item())
                opt.step()
                opt.zero_grad()
                rec.step(loss=loss)
    assert len([w for w in caught if issubclass(w.category, RecorderWarning)]) == 1
    manifest = read_manifest(tmp_path / "run")
    assert any("torch.compile" in note for note in manifest["notes"])
    stats = read_table(tmp_path / "run", "stats")
    assert set(stats.role) == {"param", "grad", "update"}
    assert set(stats[stats.role == "grad"].name) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    scalars = read_table(tmp_path / "run", "scalars")
    np.testing.assert_allclose(scalar(scalars, "grad_norm")[1], norms, rtol=1e-5)


def test_a_sam_loop_records_the_base_optimizers_steps_and_state_and_the_second_passs_gradients(tmp_path):
    """davda54/sam's loop: first_step moves the weights to w + e(w) outside any optimizer
    step, second_step puts them back (`p.data = old_p`) and steps the base SGD; SAM's own
    step() is never called. Given the SAM optimizer, as the README says, the recorder follows
    its base optimizer: it stepped every step, its momentum is the state (not SAM's `old_p`
    copies of the weights), the gradient is the one the base step consumed (at w + e(w)), the
    update is w before the step to w after it."""
    from sample_runs.field_models import SAM

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = SAM(model.parameters(), torch.optim.SGD, rho=0.05, lr=0.1, momentum=0.9)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    second_grads, updates = [], []
    with Recorder(tmp_path / "run", model, opt) as rec:
        for _ in range(3):
            before = model[0].weight.detach().clone()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.first_step(zero_grad=True)
            nn.functional.cross_entropy(model(x), y).backward()
            second_grads.append(model[0].weight.grad.norm().item())
            opt.second_step(zero_grad=True)
            updates.append((model[0].weight.detach() - before).norm().item())
            rec.step()
    scalars, stats = read_table(tmp_path / "run", "scalars"), read_table(tmp_path / "run", "stats")
    assert scalar(scalars, "optimizer_stepped.optimizer")[1].tolist() == [1.0, 1.0, 1.0]
    assert set(stats[stats.role == "state"]["key"]) == {"momentum_buffer"}
    np.testing.assert_allclose(rows(stats, "grad", "0.weight")["norm"], second_grads, rtol=1e-5)
    np.testing.assert_allclose(rows(stats, "update", "0.weight")["norm"], updates, rtol=1e-5)
    assert read_manifest(tmp_path / "run")["optimizers"]["optimizer"]["class"] == "SGD"


def _three_plain_steps(tmp_path, model, opt):
    """Three steps of the classic loop on random (5, 4) batches; the run's stats."""
    with Recorder(tmp_path / "run", model, opt) as rec:
        for _ in range(3):
            loss = model(torch.randn(5, 4)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.step(loss=loss)
    return read_table(tmp_path / "run", "stats")


def test_a_parametrized_layer_records_its_output_not_its_parametrization(tmp_path):
    """spectral_norm (torch.nn.utils.parametrizations) moves a layer's weight into a
    ParametrizationList child: the layer is still the leaf whose output is an activation; the
    parametrization's output (the normalised weight, W/σ) is no activation."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.utils.parametrizations.spectral_norm(nn.Linear(4, 8)), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    outputs = []
    model[0].register_forward_hook(lambda m, i, o: outputs.append(o.detach().abs().max().item()))
    stats = _three_plain_steps(tmp_path, model, opt)
    acts = stats[stats.role == "activation"]
    assert set(acts.name) == {"0", "1", "2"}
    np.testing.assert_allclose(rows(stats, "activation", "0").max_abs.to_numpy(), outputs, rtol=1e-5)
    assert "0.parametrizations.weight.original" in set(stats[stats.role == "grad"].name)


def test_a_quantization_aware_model_records_its_layers_outputs_not_its_fake_quantizers(tmp_path):
    """prepare_qat hangs a weight fake quantizer under each quantized layer and an output one
    under each quantized module: the layer is still the leaf (its output, fake-quantized, is the
    activation); the quantizers and their observers are not recorded (pytorch/vision's
    train_quantization.py; round 32's qat left its classifier unrecorded)."""
    from torch.ao import quantization as tq

    torch.manual_seed(0)
    model = nn.Sequential(tq.QuantStub(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), tq.DeQuantStub())
    model.qconfig = tq.get_default_qat_qconfig("qnnpack")
    model = tq.prepare_qat(model.train())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    outputs = []
    model[3].register_forward_hook(lambda m, i, o: outputs.append(o.detach().abs().max().item()))
    stats = _three_plain_steps(tmp_path, model, opt)
    acts = set(stats[stats.role == "activation"].name)
    assert {"1", "3"} <= acts and not any("fake_quant" in n or "activation_post_process" in n for n in acts)
    np.testing.assert_allclose(rows(stats, "activation", "3").max_abs.to_numpy(), outputs, rtol=1e-5)
    assert {"1.weight", "3.weight"} <= set(stats[stats.role == "grad"].name)


def test_an_attention_layer_records_its_output_though_its_out_proj_is_never_called(tmp_path):
    """nn.MultiheadAttention holds `out_proj` as a child but applies its weights functionally
    (F.multi_head_attention_forward): the attention module is the leaf whose output is recorded
    (every nn.Transformer* model's attention went unrecorded before; round 37's DETR)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)
    model = nn.Sequential(nn.Unflatten(1, (1, 4)), nn.TransformerEncoder(layer, 1, enable_nested_tensor=False),
                          nn.Flatten(), nn.Linear(4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    outputs = []
    attention = model[1].layers[0].self_attn
    attention.register_forward_hook(lambda m, i, o: outputs.append(o[0].detach().abs().max().item()))
    stats = _three_plain_steps(tmp_path, model, opt)
    acts = set(stats[stats.role == "activation"].name)
    assert "1.layers.0.self_attn.0" in acts and not any("out_proj" in n for n in acts)
    np.testing.assert_allclose(rows(stats, "activation", "1.layers.0.self_attn.0").max_abs.to_numpy(), outputs, rtol=1e-5)
    assert "1.layers.0.self_attn.out_proj.weight" in set(stats[stats.role == "grad"].name)


class _Checkpointed(nn.Module):
    """Two blocks, each through torch.utils.checkpoint in training mode (HF's
    gradient_checkpointing_enable): a backward runs each block's forward again."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.reentrant = reentrant
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(2))
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_records_each_forward_once(tmp_path, reentrant):
    """The recomputation inside backward is no second forward: every leaf's activation row
    holds one micro-batch's elements per micro-batch, as without checkpointing."""
    torch.manual_seed(0)
    model = _Checkpointed(reentrant)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Recorder(tmp_path / "run", model, opt) as rec:
        for _ in range(2):
            for _ in range(2):  # two micro-batches a step, each a forward and a backward
                x = torch.randn(5, 4, requires_grad=reentrant)  # the reentrant kind needs an input that wants grad
                model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    acts = read_table(tmp_path / "run", "stats").query("role == 'activation'")
    assert set(acts.name) == {"blocks.0.0", "blocks.0.1", "blocks.1.0", "blocks.1.1", "head"}
    assert set(acts[acts.name != "head"].numel) == {2 * 5 * 4} and set(acts[acts.name == "head"].numel) == {2 * 5}
