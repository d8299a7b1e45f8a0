"""The field-like zoo (sample_runs/field.py): its catalogue, and on a few cheap scenarios that each
fault did to the loss what the truth says, with the recorded tensors showing it at t0."""
import math
import re

import numpy as np
import pyarrow.dataset as ds
import pytest
import torch
from sample_run_helpers import read_stats

from sample_runs import HELD_OUT_ARCHS, SCENARIOS, make
from sample_runs import faults
from sample_runs.data import (CAPTIONS, CARTPOLE, CLOUDS, GRAPH, MLM, PATTERNS, RING, SIGNAL, SORT, SPEECH, T5_SORT,
                               TABLE, CartPole, captioned_digits, ctc_batch_sampler, masked_lm_sampler,
                               pattern_images, point_clouds, ring_points, sbm_graph, signal_pixels, sort_batch_sampler,
                               t5_collate, t5_rows, table_data)
from sample_runs.field import (FIELD_FAMILIES, LEFT_OUT, RECIPES, _ctc_chance, _mlm_chance, _param_groups, _schedule,
                               _twin_losses, _untrained_level, _verdict)
from sample_runs.field_models import (FIELD_ARCHS, build_field_model, clip_loss, ctc_loss, ddpm_loss,
                                      gradient_penalty, info_nce_loss, mixup_cutmix, moe_lm_loss, pointnet_loss,
                                      selective_scan, sequential_scan, seq2seq_loss, sliced_wasserstein,
                                      smoothed_cross_entropy, soft_target_cross_entropy, vae_loss)
from sample_runs.framework_loops import train_hf_trainer, train_lightning
from sample_runs.training import broke_against, stalled_against, train_field


def _losses(run):
    scalars = ds.dataset(str(run / "scalars"), format="parquet").to_table().to_pandas()
    return scalars[scalars["name"] == "loss"].sort_values("step")["value"].tolist()


def _mean(values):
    return sum(values) / len(values)


def _healthy_recorded(name, run_dir):
    """The scalars by name of a healthy scenario recorded into `run_dir`, once its truth is
    healthy over 150 steps and its loss passed the zoo's healthy check (< 0.8× its start)."""
    truth = make(name, run_dir)
    by_name = _scalars_by_name(run_dir)
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[-10:]) < 0.8 * _mean(loss[:10])
    return by_name


def _t0(truth):
    """The injection step, as the truth's notes say it."""
    return int(re.search(r"step (\d+)", truth.notes).group(1))


def test_catalogue_looks_like_the_field():
    field = [s for s in SCENARIOS.values() if s.arch in HELD_OUT_ARCHS]
    assert {s.arch for s in field} == {"gpt", "transformer", "resnet", "gru", "vit", "lstm_lm", "mixer", "tcn",
                                       "llama", "autoencoder", "recsys", "moe", "vae", "unet", "seq2seq", "gnn",
                                       "simclr", "ddpm", "ctc", "mamba", "fttransformer", "convnext", "bert_mlm",
                                       "siren", "pointnet", "t5", "clip", "densenet", "reinforce",
                                       "wgan_gp", "swin", "dqn", "distil", "byol", "realnvp", "transe", "kws",
                                       "lora", "vqvae", "nbeats", "word2vec", "triplet", "sam", "ppo", "detector",
                                       "efficientnet", "pinn", "maml", "pix2pix", "bilstm_crf", "pixelcnn",
                                       "neural_ode", "nerf", "capsnet", "sac", "mae", "rwkv", "tabnet",
                                       "perceiver", "wavenet", "set_transformer", "conformer", "gat",
                                       "neural_process", "kan", "hypernetwork", "dit", "sae", "sngan",
                                       "electra_ft", "muon_gpt", "deeplab", "decision_transformer", "patchtst",
                                       "timm_mixup", "gradual_pruning", "qat", "albert", "deq", "ddp_wrn", "moco", "swa_gc",
                                       "tacotron", "link_pred", "dino", "detr", "deepar"}
    assert all(s.held_out for s in field)  # never used for choosing the analyzer's defaults
    for family in ("lr_spike", "weight_scale", "batch_scale", "batch_nan", "adam_state", "missing_zero_grad",
                   "missing_step", "detach", "lr_too_high", "lr_too_low", "healthy_accum", "healthy_bf16",
                   "healthy_spike"):
        assert family in FIELD_FAMILIES and any(s.family == family for s in field)
    for arch, families in LEFT_OUT.items():  # what a framework's loop cannot express is not in the catalogue
        assert not any(s.arch == arch and s.family in families for s in field)
    healthy = [s for s in SCENARIOS.values() if s.family.startswith("healthy") or s.family in ("gan_healthy", "deep_kaiming")]
    assert len(healthy) >= 40 and len({s.arch for s in healthy}) >= 6


@pytest.mark.parametrize("arch", FIELD_ARCHS)
def test_units_partition_the_parameters_and_exposed_layers_exist(arch):
    model = build_field_model(arch, 27)
    in_units = {id(p) for unit in model.units for p in model.get_submodule(unit).parameters()}
    loose = getattr(model, "loose", ())
    assert {id(p) for n, p in model.named_parameters() if n != "pos" and n not in loose} <= in_units
    for layer in model.exposed:
        assert any(n.startswith("weight") for n, _ in model.get_submodule(layer).named_parameters())


def test_llama_has_no_biases_and_a_scaled_output_head_breaks_it(tmp_path):
    model = build_field_model("llama", 27)
    assert not any(n.endswith("bias") for n, _ in model.named_parameters())
    assert model.output.weight is not model.tok_embeddings.weight  # LLaMA's head is untied
    truth = make("weight_scale-llama-s0", tmp_path / "run")
    assert truth.verdict == "diverged" and truth.culprit == "output"
    stats = read_stats(tmp_path / "run")
    norm = stats[(stats["role"] == "param") & (stats["name"] == "output.weight")].set_index("step")["norm"]
    assert norm[truth.onset_step] / norm[truth.onset_step - 1] > 50
    losses, twin = _losses(tmp_path / "run"), _twin_losses("llama", 0)
    assert losses[: truth.onset_step] == pytest.approx(list(twin[: truth.onset_step]), rel=1e-5)
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])  # the healthy recipe learns


def test_autoencoder_reconstructs_its_input_with_mse_and_recovers_from_flipped_targets(tmp_path):
    truth = make("healthy_spike-autoencoder-s0", tmp_path / "run")
    assert truth.verdict == "healthy" and truth.labels == []
    t0 = int(truth.notes.split("from step ")[1].split(":")[0])
    losses = _losses(tmp_path / "run")
    assert all(0 < v < 1 for v in losses)  # a mean squared error of pixels in [0, 1]
    assert losses[t0] > 2 * _mean(losses[t0 - 10 : t0]) and _mean(losses[-10:]) < 0.5 * _mean(losses[:10])
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == io.loc["target", "shape"] == "32x1x8x8"
    assert io.loc["input", "kind"] == io.loc["target", "kind"] == "float"


def test_recsys_bad_batch_scales_the_dense_features_only_and_the_twin_decides(tmp_path):
    truth = make("batch_scale-recsys-s0", tmp_path / "run")
    t0 = int(truth.notes.split("batch at step ")[1].split(" ")[0])
    stats = read_stats(tmp_path / "run")
    inputs = stats[stats["role"] == "input"]
    assert set(inputs["name"]) == {"input.sparse", "input.history", "input.dense"}
    assert set(inputs[inputs["name"] != "input.dense"]["kind"]) == {"index"}
    for name, factor in (("input.dense", 1e3), ("input.sparse", 1.0)):
        std = inputs[inputs["name"] == name].set_index("step")["std"]
        assert std[t0] / std[t0 - 1] == pytest.approx(factor, rel=0.5)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("recsys", 0))
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.8 * _mean(twin[:10])  # BCE on the clicks falls from ln 2


def test_moe_routes_each_token_to_two_experts_and_an_unchosen_expert_gets_no_gradient():
    model = build_field_model("moe", 27)
    tokens = torch.randint(0, 27, (2, 8))
    logits, aux = model(tokens)
    assert logits.shape == (2, 8, 27) and aux.item() > 0
    moe = model.layers[0].moe
    with torch.no_grad():  # a router that sends every (positive) token to experts 0 and 1
        moe.gate.weight.zero_()
        moe.gate.weight[:2] = 1.0
    out, aux = moe(torch.rand(2, 8, 32))
    assert aux.item() == pytest.approx(2.0, rel=1e-3)  # 4 · (½·½ + ½·½); balanced routing gives 1
    (out.sum() + aux).backward()
    assert moe.experts[2][0].weight.grad is None and moe.experts[0][0].weight.grad is not None
    assert moe.gate.weight.grad.abs().sum() > 0  # the router learns through the gates and the aux loss
    assert moe_lm_loss((logits, torch.tensor(0.0)), tokens).item() == pytest.approx(math.log(27), rel=0.2)


def test_moe_lr_spike_hits_a_block_and_its_healthy_recipe_learns(tmp_path):
    truth = make("lr_spike-moe-s0", tmp_path / "run")
    assert truth.culprit in (None, "layers.0", "layers.1")
    t0 = int(truth.notes.split("at step ")[1].split(";")[0])
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("moe", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.7 * _mean(twin[:10])  # from ln 27 (+ the router's aux loss)


def test_vae_loss_is_bce_plus_kl_per_sample_and_a_nan_batch_breaks_it(tmp_path):
    model = build_field_model("vae", 10).eval()
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        logits, mu, logvar = model(x)
    assert logits.shape == x.shape and mu.shape == logvar.shape == (4, 8)
    bce = torch.nn.functional.binary_cross_entropy(torch.sigmoid(logits), x, reduction="sum") / 4
    kl = float(-0.5 * (1 + logvar - mu ** 2 - logvar.exp()).sum() / 4)
    assert float(vae_loss((logits, mu, logvar), x)) == pytest.approx(float(bce) + kl, rel=1e-4)
    truth = make("batch_nan-vae-s0", tmp_path / "run")
    assert truth.verdict == "diverged" and "nonfinite_input" in truth.labels
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("vae", 0))
    assert losses[: truth.onset_step] == pytest.approx(twin[: truth.onset_step], rel=1e-5)
    assert not math.isfinite(losses[truth.onset_step])
    assert _mean(twin[-10:]) < 0.8 * _mean(twin[:10])  # the healthy recipe learns


def test_unet_segments_with_per_pixel_cross_entropy_and_recovers_from_wrong_masks(tmp_path):
    model = build_field_model("unet", 3)
    assert model(torch.rand(2, 1, 16, 16)).shape == (2, 3, 16, 16)
    truth = make("healthy_spike-unet-s0", tmp_path / "run")
    assert truth.verdict == "healthy"
    t0 = _t0(truth)
    losses = _losses(tmp_path / "run")
    assert losses[t0] > 2 * _mean(losses[t0 - 10 : t0]) and _mean(losses[-10:]) < 0.5 * _mean(losses[:10])
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "16x1x16x16" and io.loc["input", "kind"] == "float"
    assert io.loc["target", "shape"] == "16x16x16" and io.loc["target", "kind"] == "index"


def test_seq2seq_masks_padding_and_ignores_padded_labels(tmp_path):
    batch, labels = sort_batch_sampler(8, 0)()
    lengths = batch["attention_mask"].sum(1)
    assert ((labels != -100).sum(1) == lengths + 1).all()  # the sorted source and EOS
    assert (labels[torch.arange(8), lengths] == SORT.eos).all()
    for row, n in zip(range(8), lengths.tolist()):
        assert labels[row, :n].tolist() == sorted(batch["input_ids"][row, :n].tolist())
    symbols = (labels[:, :-1] != -100) & (labels[:, :-1] != SORT.eos)
    assert (batch["decoder_input_ids"][:, 1:][symbols] == labels[:, :-1][symbols]).all()  # teacher forcing
    model = build_field_model("seq2seq", SORT.vocab).eval()
    with torch.no_grad():
        logits = model(batch)
        other = dict(batch, input_ids=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, 5))
        assert torch.allclose(model(other), logits, atol=1e-5)  # padded source tokens are masked out
    assert logits.shape == (*labels.shape, SORT.vocab)
    noisy = logits.masked_fill((labels == -100).unsqueeze(-1), 7.0)
    assert seq2seq_loss(noisy, labels) == pytest.approx(float(seq2seq_loss(logits, labels)))
    truth = make("missing_zero_grad-seq2seq-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("seq2seq", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)
    assert (truth.verdict == "healthy") == (not broke_against(losses, twin, t0) and not stalled_against(losses, twin, t0))
    assert _mean(twin[-10:]) < 0.8 * _mean(twin[:10])  # the healthy recipe learns
    inputs = read_stats(tmp_path / "run").query("role == 'input'")
    assert set(inputs["name"]) == {"input.input_ids", "input.attention_mask", "input.decoder_input_ids"}


def test_gcn_index_add_is_the_normalised_adjacency_and_a_detached_layer_is_judged_by_its_twin(tmp_path):
    graph, labels, train, val = sbm_graph()
    assert graph["x"].shape == (GRAPH.nodes, GRAPH.features) and int(train.sum()) == 4 * GRAPH.train_per_block
    assert not (train & val).any()
    conv = build_field_model("gnn", 4).convs[0]
    adjacency = torch.eye(GRAPH.nodes)
    adjacency[graph["edge_index"][0], graph["edge_index"][1]] = 1.0
    d = adjacency.sum(1).rsqrt()
    dense = (d[:, None] * adjacency * d[None, :]) @ graph["x"] @ conv.weight + conv.bias
    assert torch.allclose(conv(graph["x"], graph["edge_index"]), dense, atol=1e-5)
    truth = make("detach-gnn-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("gnn", 0))
    assert truth.verdict == ("not_learning" if stalled_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])  # the healthy recipe learns
    grads = read_stats(tmp_path / "run").query("role == 'grad' and name == 'convs.0.weight'").set_index("step")["norm"]
    assert grads[t0 - 1] > 0 and grads[t0:].fillna(0).max() == 0  # no gradient reaches the detached layer


def test_simclr_info_nce_is_low_for_matched_views_and_its_runs_have_no_targets(tmp_path):
    z = torch.randn(16, 8)
    assert float(info_nce_loss(torch.cat([z, z]))) < 0.5 * float(info_nce_loss(torch.randn(32, 8)))
    assert float(info_nce_loss(torch.ones(32, 8))) == pytest.approx(math.log(31), rel=1e-4)  # chance
    truth = make("batch_scale-simclr-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("simclr", 0))
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.8 * _mean(twin[:10])
    stats = read_stats(tmp_path / "run")
    assert set(stats["role"]) >= {"input", "param", "grad"} and "target" not in set(stats["role"])
    assert stats.query("role == 'input' and step == 0")["shape"].tolist() == ["64x1x8x8"]  # two views of 32


def test_ddpm_predicts_the_noise_of_x_t_at_a_random_timestep_and_its_runs_have_no_targets(tmp_path):
    diffusion = build_field_model("ddpm", 10)
    assert not any(n.startswith("sqrt") for n, _ in diffusion.named_parameters())  # the schedule is buffers
    x0 = 2 * torch.rand(4, 1, 8, 8) - 1
    torch.manual_seed(0)
    prediction, noise = diffusion(x0)
    torch.manual_seed(0)
    t = torch.randint(0, diffusion.timesteps, (4,))
    assert torch.equal(noise, torch.randn_like(x0))
    signal, spread = (v[t].view(-1, 1, 1, 1) for v in (diffusion.sqrt_alphas_cumprod,
                                                       diffusion.sqrt_one_minus_alphas_cumprod))
    assert torch.allclose(signal ** 2 + spread ** 2, torch.ones_like(signal))
    assert torch.allclose(prediction, diffusion.model(signal * x0 + spread * noise, t), atol=1e-6)
    assert float(ddpm_loss((noise, noise))) == 0.0
    truth = make("weight_scale-ddpm-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("ddpm", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)  # same noise and timesteps until the fault
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])  # the healthy recipe learns
    stats = read_stats(tmp_path / "run")
    assert "target" not in set(stats["role"])
    assert stats.query("role == 'input' and step == 0")["shape"].tolist() == ["32x1x8x8"]


def test_after_step_follows_each_optimizer_step_taken():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    calls = []
    train_field(None, model, optimizer, lambda: (torch.randn(4, 2), torch.randn(4, 1)), steps=5, lr_at=lambda _: 1.0,
                fault=faults.MissingStep(t0=3), loss_fn=torch.nn.functional.mse_loss,
                after_step=lambda: calls.append(model.weight.detach().clone()))
    assert len(calls) == 3  # the EMA update of steps 0-2; none once the loop stops stepping


def test_ctc_reads_variable_length_frames_and_a_detached_lstm_is_judged_by_its_twin(tmp_path):
    batch, labels = ctc_batch_sampler(8, 0)()
    targets = (labels >= 0).sum(1)
    assert ((labels[labels >= 0] >= 1) & (labels[labels >= 0] <= SPEECH.symbols)).all()  # never the blank
    assert SPEECH.shortest <= targets.min() and targets.max() <= SPEECH.longest and len(set(targets.tolist())) > 1
    assert torch.equal(labels == -100, torch.arange(labels.shape[1]) >= targets.unsqueeze(1))  # padded at the end
    assert torch.equal(batch["attention_mask"].sum(1) > 0, torch.ones(8, dtype=torch.bool))
    model = build_field_model("ctc", SPEECH.classes).eval()
    with torch.no_grad():
        log_probs, lengths = model(batch)
    assert log_probs.shape == (int(lengths.max()), 8, SPEECH.classes)  # (T, N, C)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]), atol=1e-5)
    assert lengths.dtype == torch.int64 and len(set(lengths.tolist())) > 1 and (lengths >= 2 * targets - 1).all()
    assert math.isfinite(float(ctc_loss((log_probs, lengths), labels)))
    uniform = torch.full_like(log_probs, -math.log(SPEECH.classes))
    assert _ctc_chance() < float(ctc_loss((uniform, lengths), labels))  # the marginal beats knowing nothing
    truth = make("detach-ctc-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("ctc", 0))
    assert truth.verdict == ("not_learning" if stalled_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10]) and _mean(twin[-10:]) < 0.5 * _ctc_chance()
    stats = read_stats(tmp_path / "run")
    grads = stats.query("role == 'grad' and name == 'rnn.weight_ih_l0'").set_index("step")["norm"]
    assert grads[t0 - 1] > 0 and grads[t0:].fillna(0).max() == 0  # no gradient reaches the detached LSTM
    assert set(stats.query("role == 'input'")["name"]) == {"input.input_features", "input.attention_mask"}
    assert set(stats.query("role == 'target'")["kind"]) == {"index"}


def _decay_of(model, arch):
    """Each parameter's weight decay in the optimizer's groups, by name."""
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: group["weight_decay"] for group in _param_groups(model, RECIPES[arch], 1e-3)
            for p in group["params"]}


def test_mamba_scans_selectively_and_causally_and_a_scaled_tied_head_breaks_it(tmp_path):
    u, delta = torch.randn(2, 32, 6), torch.nn.functional.softplus(torch.randn(2, 32, 6))
    A, B, C, D = -torch.rand(6, 4) * 4, torch.randn(2, 32, 4), torch.randn(2, 32, 4), torch.randn(6)
    assert torch.allclose(selective_scan(u, delta, A, B, C, D), sequential_scan(u, delta, A, B, C, D), atol=1e-5)
    model = build_field_model("mamba", 27).eval()
    assert model.lm_head.weight is model.embedding.weight
    assert (-torch.exp(model.layers[0].mixer.A_log) < 0).all()
    tokens = torch.randint(0, 27, (2, 32))
    changed = tokens.clone()
    changed[:, 20] = (changed[:, 20] + 1) % 27
    with torch.no_grad():
        logits, other = model(tokens), model(changed)
    assert torch.allclose(logits[:, :20], other[:, :20], atol=1e-5) and not torch.allclose(logits[:, 20], other[:, 20])
    decay = _decay_of(model, "mamba")
    assert decay["layers.0.mixer.A_log"] == decay["layers.0.mixer.D"] == 0.0  # mamba's _no_weight_decay
    assert decay["layers.0.mixer.in_proj.weight"] == 0.1 and decay["layers.0.mixer.dt_proj.bias"] == 0.0
    truth = make("weight_scale-mamba-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("mamba", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])  # the healthy recipe learns
    inputs = read_stats(tmp_path / "run").query("role == 'input'")
    assert set(inputs["kind"]) == {"index"}


def test_fttransformer_tokenizes_each_feature_and_a_scaled_batch_scales_its_numeric_columns_only(tmp_path):
    x, y = table_data()
    assert x["x_num"].dtype == torch.float32 and x["x_cat"].dtype == torch.int64 and y.dtype == torch.int64
    assert x["x_num"].shape[1] == TABLE.numeric and (x["x_cat"].max(0).values < torch.tensor(TABLE.cardinalities)).all()
    assert torch.bincount(y).min() > 0.3 * len(y)  # balanced terciles
    model = build_field_model("fttransformer", TABLE.classes).eval()
    batch = {k: v[:4] for k, v in x.items()}
    tokens = torch.cat([model.num_tokenizer(batch["x_num"]), model.cat_tokenizer(batch["x_cat"])], dim=1)
    assert tokens.shape == (4, TABLE.numeric + len(TABLE.cardinalities), 32)
    assert torch.allclose(model.cls_token(tokens)[:, -1], model.cls_token.weight.expand(4, -1))  # [CLS] last
    with torch.no_grad():
        assert model(batch).shape == (4, TABLE.classes)
    decay = _decay_of(model, "fttransformer")
    assert {n for n, d in decay.items() if d > 0} == {n for n in decay if n.startswith("blocks.") and
                                                       n.endswith("weight") and "normalization" not in n} | {
        "head.2.weight"}  # no decay on tokenizers, [CLS], norms, biases
    truth = make("batch_scale-fttransformer-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("fttransformer", 0))
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.6 * _mean(twin[:10])
    inputs = read_stats(tmp_path / "run").query("role == 'input'")
    assert set(inputs.query("name == 'input.x_cat'")["kind"]) == {"index"}
    std = inputs.query("name == 'input.x_num'").set_index("step")["std"]
    assert std[t0] / std[t0 - 1] == pytest.approx(1e3, rel=0.5)


def test_convnext_scales_its_residual_branches_and_an_lr_spike_hits_one_stage(tmp_path):
    images = pattern_images()
    assert images.x.shape == (PATTERNS.images, 3, PATTERNS.size, PATTERNS.size)
    assert torch.bincount(images.y).min() > 0.2 * PATTERNS.images
    model = build_field_model("convnext", PATTERNS.classes)
    gammas = [float(block.gamma.detach().abs().max()) for stage in model.stages for block in stage]
    assert gammas == pytest.approx([1e-6] * 4)
    x = images.x[:4]
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), model(x))  # stochastic depth only while training
        block = model.stages[1][1]
        h = model.downsample_layers[1](model.stages[0](model.downsample_layers[0](x)))
        assert torch.allclose(block(h), h, atol=1e-4)  # a branch scaled by γ = 1e-6
    logits, targets = torch.randn(8, 4), torch.randint(0, 4, (8,))
    log_p = torch.log_softmax(logits, -1)
    smoothed = 0.9 * torch.nn.functional.nll_loss(log_p, targets) - 0.1 * log_p.mean(-1).mean()
    assert float(smoothed_cross_entropy(logits, targets)) == pytest.approx(float(smoothed), rel=1e-5)
    truth = make("lr_spike-convnext-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("convnext", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    factor = float(truth.notes.split("multiplied by ")[1].split(" ")[0])
    layer = truth.notes.split("param groups of ")[1].split(" ")[0]
    for i, group in enumerate(_param_groups(model, RECIPES["convnext"], 1e-3)):
        lr = scalars[scalars["name"] == f"hp.optimizer.{i}.lr"].set_index("step")["value"]
        assert lr[t0] / lr[t0 - 1] == pytest.approx(factor if group["layer"] == layer else 1.0, rel=0.05)


def _assert_cut_off(stats, t0, silent, tied):
    """`silent`'s gradient stops at t0 (a detached later block); `tied`'s does not (fed by the tied head)."""
    grads = stats.query("role == 'grad'")
    before = grads.query(f"name == '{silent}'").set_index("step")["norm"]
    embeddings = grads.query(f"name == '{tied}'").set_index("step")["norm"]
    assert before[t0 - 1] > 0 and before[t0:].fillna(0).max() == 0 and embeddings[t0:].min() > 0


def test_bert_masks_words_80_10_10_ignores_padding_and_a_detached_encoder_leaves_the_tied_embeddings_learning(
        tmp_path):
    batch, labels = masked_lm_sampler(256, 0)()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape == labels.shape and ids.shape[1] <= MLM.longest and len(set(mask.sum(1).tolist())) > 1
    assert (ids[mask == 0] == MLM.pad).all() and (ids[:, 0] == MLM.cls).all()
    chosen = labels != -100
    assert (labels[chosen] >= 5).all() and not chosen[mask == 0].any()  # words only: no special token, no padding
    assert 0.1 < chosen.sum() / (mask.sum() - 2 * len(ids)) < 0.2
    masked, kept = (ids[chosen] == MLM.mask).float().mean(), (ids[chosen] == labels[chosen]).float().mean()
    assert 0.75 < masked < 0.85 and 0.07 < kept < 0.15  # 80 % [MASK]; 10 % random (a few hit the word), 10 % kept
    assert (ids[~chosen & (mask == 1)] != MLM.mask).all()
    model = build_field_model("bert_mlm", MLM.vocab).eval()
    assert model.mlm.cls.predictions.decoder.weight is model.mlm.bert.embeddings.word_embeddings.weight
    short = {k: v[:4] for k, v in batch.items()}
    with torch.no_grad():
        logits = model(short)
        padded = dict(short, input_ids=short["input_ids"].masked_fill(short["attention_mask"] == 0, 7))
        real = short["attention_mask"].bool()
        assert torch.allclose(model(padded)[real], logits[real], atol=1e-5)  # padding is masked out
    assert logits.shape == (4, ids.shape[1], MLM.vocab)
    decay = _decay_of(model, "bert_mlm")
    assert all(d == 0.0 for n, d in decay.items() if "LayerNorm" in n or n.endswith("bias"))
    assert decay["mlm.bert.encoder.layer.0.attention.self.query.weight"] == 0.01
    assert _mlm_chance() < math.log(MLM.vocab)  # the words' marginal beats knowing nothing
    truth = make("detach-bert_mlm-s0", tmp_path / "run")
    t0 = _t0(truth)
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("bert_mlm", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)
    assert truth.verdict == ("not_learning" if stalled_against(losses, twin, t0) else "healthy")
    if truth.culprit:
        assert truth.culprit == "mlm.bert.encoder.layer.1" and "mlm.bert.embeddings" not in truth.culprit_alternatives
    assert _mean(twin[-10:]) < 0.7 * _mean(twin[:10]) and _mean(twin[-10:]) < 0.8 * _mlm_chance()
    stats = read_stats(tmp_path / "run")
    _assert_cut_off(stats, t0, "mlm.bert.encoder.layer.0.attention.self.query.weight",
                    "mlm.bert.embeddings.word_embeddings.weight")
    assert set(stats.query("role == 'input'")["name"]) == {"input.input_ids", "input.attention_mask"}
    assert set(stats.query("role == 'target'")["kind"]) == {"index"}


def test_siren_is_a_sine_net_with_its_init_and_a_nan_coordinate_breaks_it(tmp_path):
    grid, between = signal_pixels()
    assert grid.x.shape == (SIGNAL.size ** 2, 2) and grid.x.abs().max() == 1 and between.x.abs().max() < 1
    assert grid.y.shape == (SIGNAL.size ** 2, 1) and grid.y.abs().max() <= 1 and grid.y.std() > 0.1
    model = build_field_model("siren", 1)
    first, hidden = model.net[0].linear.weight, model.net[1].linear.weight
    assert first.abs().max() <= 1 / 2 and first.abs().max() > 0.4  # ±1/in
    bound = math.sqrt(6 / 64) / 30
    assert bound * 0.9 < hidden.abs().max() <= bound and model.net[-1].weight.abs().max() <= bound
    x = grid.x[:16]
    with torch.no_grad():
        assert torch.allclose(model.net[0](x), torch.sin(30 * model.net[0].linear(x)))
        assert model(x).shape == (16, 1)
    truth = make("batch_nan-siren-s0", tmp_path / "run")
    t0 = int(truth.notes.split("batch at step ")[1].split(" ")[0])
    assert truth.verdict == "diverged" and truth.first_nonfinite_loss_step == t0 and "nonfinite_input" in truth.labels
    twin = list(_twin_losses("siren", 0))
    chance = float(grid.y.var(unbiased=False))
    assert _mean(twin[-10:]) < 0.1 * _mean(twin[:10]) and _mean(twin[-10:]) < 0.1 * chance  # it fits the image
    inputs = read_stats(tmp_path / "run").query("role == 'input'").set_index("step")
    assert inputs.loc[t0, "nonfinite"] > 0 and inputs.loc[t0 - 1, "nonfinite"] == 0


def test_pointnet_starts_from_the_identity_transform_pools_symmetrically_and_a_scaled_batch_is_judged_by_its_twin(
        tmp_path):
    clouds = point_clouds()
    assert clouds.x.shape == (CLOUDS.clouds, CLOUDS.points, 3) and torch.bincount(clouds.y).min() > 0.15 * CLOUDS.clouds
    assert clouds.x.norm(dim=-1).max(dim=1).values == pytest.approx(torch.ones(CLOUDS.clouds))  # in the unit ball
    model = build_field_model("pointnet", CLOUDS.classes)
    points, labels = clouds.x[:8], clouds.y[:8]
    with torch.no_grad():
        logits, transform = model(points)
    assert torch.allclose(transform, torch.eye(3).expand(8, 3, 3))  # the T-net starts as no transform
    cross_entropy = torch.nn.functional.cross_entropy(logits, labels)
    assert float(pointnet_loss((logits, transform), labels)) == pytest.approx(float(cross_entropy))
    skewed = transform * 2
    assert float(pointnet_loss((logits, skewed), labels)) == pytest.approx(float(cross_entropy) + 0.001 * 3 ** 0.5 * 3)
    model.eval()
    with torch.no_grad():
        shuffled = points[:, torch.randperm(CLOUDS.points)]
        assert torch.allclose(model(shuffled)[0], model(points)[0], atol=1e-5)  # the max-pool ignores point order
    truth = make("batch_scale-pointnet-s0", tmp_path / "run")
    t0 = int(truth.notes.split("batch at step ")[1].split(" ")[0])
    losses, twin = _losses(tmp_path / "run"), list(_twin_losses("pointnet", 0))
    assert losses[:t0] == pytest.approx(twin[:t0], rel=1e-5)
    assert truth.verdict == ("diverged" if broke_against(losses, twin, t0) else "healthy")
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])
    std = read_stats(tmp_path / "run").query("role == 'input'").set_index("step")["std"]
    assert std[t0] / std[t0 - 1] == pytest.approx(1e3, rel=0.5)


def test_lr_spike_raises_the_groups_lr_at_t0_and_the_run_does_not_come_back(tmp_path):
    truth = make("lr_spike-gru-s0", tmp_path / "run")
    assert truth.verdict == "diverged" and truth.culprit == "rnn" and "lr_too_high" in truth.labels
    t0 = truth.onset_step
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    factor = float(truth.notes.split("multiplied by ")[1].split(" ")[0])
    # Groups: embed (matrices; no biases), rnn's matrices, rnn's biases, decoder's two.
    for group, jumped in ((0, False), (1, True), (2, True), (3, False)):
        lr = scalars[scalars["name"] == f"hp.optimizer.{group}.lr"].set_index("step")["value"]
        # the cosine moves the lr by < 1 % per step
        assert lr[t0] / lr[t0 - 1] == pytest.approx(factor if jumped else 1.0, rel=0.05)
    losses, twin = _losses(tmp_path / "run"), _twin_losses("gru", 0)
    assert losses[:t0] == pytest.approx(list(twin[:t0]), rel=1e-5)  # the same run until the fault
    assert _mean(losses[-10:]) >= 1.25 * _mean(twin[-10:])


def test_weight_scale_multiplies_the_culprits_norm_at_t0(tmp_path):
    truth = make("weight_scale-gru-s0", tmp_path / "run")
    assert truth.verdict == "diverged" and truth.culprit == "decoder"
    stats = read_stats(tmp_path / "run")
    norm = stats[(stats["role"] == "param") & (stats["name"] == "decoder.weight")].set_index("step")["norm"]
    assert norm[truth.onset_step] / norm[truth.onset_step - 1] > 50  # ×100 before the step's own update
    losses = _losses(tmp_path / "run")
    assert max(losses[truth.onset_step:]) > 3 * _mean(losses[truth.onset_step - 10 : truth.onset_step])


def test_missing_step_and_lr_too_low_leave_the_loss_flat(tmp_path):
    for name, label in (("missing_step-gru-s0", "no_update"), ("lr_too_low-resnet-s0", "lr_too_low")):
        truth = make(name, tmp_path / name)
        assert truth.verdict == "not_learning" and truth.labels == [label]
        losses = _losses(tmp_path / name)
        assert _mean(losses[-10:]) >= 0.9 * _mean(losses[:10])
    # The untrained reference (lr 0) is the run that never steps: same init, same batches.
    assert _untrained_level("gru", 0) == pytest.approx(_mean(_losses(tmp_path / "missing_step-gru-s0")[:10]))


def test_a_wrong_setting_from_step_0_ran_away_when_it_ended_worse_than_learning_nothing():
    # bilstm_crf at lr ×100 (round 17): 18 -> 785 by step 3, ending at 117, below its first-10 mean
    # (438) but ×6 the untrained model's 18.
    blown = [18.5, 320.0, 632.0, 785.0, 570.0, 440.0, 445.0, 458.0, 462.0, 241.0] + [117.0] * 140
    twin = [18.0 - 0.1 * i for i in range(150)]
    assert _verdict("from_start", blown, twin, 0, 2.3, untrained=18.0) == ("diverged", None)
    # A flat run whose first batch was a lucky one (0.05 against 0.08) did not run away.
    flat = [0.05] + [0.08] * 149
    assert _verdict("from_start", flat, [0.03] * 150, 0, 1.0, untrained=0.084) == ("not_learning", None)
    # A policy that never moves wanders by one episode's luck: single values ×1.24 above the start
    # are no rise, a stretch of 10 that high is.
    wandering = [17.75] * 10 + [22.0, 17.0, 16.0, 18.0] * 35
    assert _verdict("from_start", wandering, [6.5] * 150, 0, 17.0, untrained=17.75) == ("not_learning", None)
    risen = [17.75] * 10 + [22.0] * 10 + [17.8] * 130
    assert _verdict("from_start", risen, [6.5] * 150, 0, 17.0, untrained=17.75) == ("diverged", None)
    # A run that overflowed within its first 10 steps (the VAE at lr ×100) has no 10-step mean to read.
    overflowed = [545.0, 1e9, float("nan")]
    assert _verdict("from_start", overflowed, [540.0 - i for i in range(150)], 0, 545.0, untrained=545.0) == ("diverged", None)


def test_a_fault_the_run_shrugs_off_is_healthy_in_the_truth(tmp_path):
    # Behind BatchNorm a batch ×1e3 is normalised away: the run ends where its fault-free twin does.
    truth = make("batch_scale-resnet-s0", tmp_path / "run")
    assert truth.verdict == "healthy" and truth.labels == [] and truth.onset_step is None
    assert "did not break" in truth.notes
    # The analyzer may still say what happened (a warning): the batch the recorder saw.
    assert truth.tolerated == ["batch_out_of_range"]
    losses, twin = _losses(tmp_path / "run"), _twin_losses("resnet", 0)
    assert all(math.isfinite(v) for v in losses) and _mean(losses[-10:]) < 1.25 * _mean(twin[-10:])


def test_seed_003_gan_generator_gets_no_gradient_from_its_init_and_kaiming_fixes_it(tmp_path):
    bad, fixed = make("gan_bad_init-s0", tmp_path / "bad"), make("gan_kaiming-s0", tmp_path / "fixed")
    assert bad.verdict == "not_learning" and bad.labels == ["vanishing_gradient"] and bad.culprit == "G.fc0"
    assert fixed.verdict == "healthy"

    def first_layer_grad(run):
        stats = read_stats(run)
        return stats[(stats["role"] == "grad") & (stats["name"] == "G.fc0.weight")]["norm"].median()

    assert first_layer_grad(tmp_path / "bad") < 1e-4 * first_layer_grad(tmp_path / "fixed")


def test_seed_001_truth_names_the_sigmoid_and_log_of_zero(tmp_path):
    truth = make("gan_log0-s1", tmp_path / "run")
    assert truth.culprit == "D.sigmoid" and truth.labels == ["diverged", "log_of_zero"]
    assert truth.first_nonfinite_loss_step is not None


class _Spy(faults.Fault):
    """Records the step of every `before_step`, `batch`, `zero_grad` and `take_step` call."""

    def __init__(self):
        super().__init__(t0=0)
        self.began, self.batches, self.zeroed, self.stepped = [], [], [], []

    def before_step(self, step, model, optimizer):
        self.began.append(step)

    def batch(self, step, x, y):
        self.batches.append(step)
        return x, y

    def zero_grad(self, step):
        self.zeroed.append(step)
        return True

    def take_step(self, step):
        self.stepped.append(step)
        return True


def _adamw(model, arch, lr):
    return torch.optim.AdamW(_param_groups(model, RECIPES[arch], lr), lr=lr)


def test_the_hf_trainer_loop_calls_the_fault_once_per_step_and_once_per_micro_batch_across_evaluations():
    torch.manual_seed(0)
    model = build_field_model("t5", T5_SORT.vocab)
    spy = _Spy()
    # 8 steps of 2 micro-batches, an evaluation every 3 steps: the collator's count stays on the step.
    outcome = train_hf_trainer(None, model, _adamw(model, "t5", 1e-3), t5_rows(64, 0), t5_rows(16, 1), t5_collate,
                               steps=8, lr_at=lambda step: 1.0, fault=spy, micro_batch=4, accumulation=2, clip=1.0,
                               bf16=False, seed=0, eval_every=3)
    assert spy.began == list(range(8)) and spy.batches == [s for s in range(8) for _ in range(2)]
    assert len(outcome.losses) == 8 and all(0 < v < 10 for v in outcome.losses)


def test_t5_sorts_with_its_own_loss_and_a_detached_decoder_block_leaves_the_tied_embeddings_learning(tmp_path):
    rows = t5_rows(4, 0)
    assert all(r["labels"].tolist() == sorted(r["input_ids"][:-1].tolist()) + [T5_SORT.eos] for r in rows)
    batch = t5_collate(rows)
    assert ((batch["labels"] == -100) == (batch["attention_mask"] == 0)).all()
    model = build_field_model("t5", T5_SORT.vocab).eval()
    assert model.lm_head.weight is model.shared.weight
    with torch.no_grad():
        output = model(**batch)
    logits = output.logits.flatten(0, 1)
    assert float(output.loss) == pytest.approx(float(torch.nn.functional.cross_entropy(
        logits, batch["labels"].flatten(), ignore_index=-100)), rel=1e-5)
    truth = make("detach-t5-s0", tmp_path / "run")
    t0 = _t0(truth)
    twin = list(_twin_losses("t5", 0))
    assert _mean(twin[-10:]) < 0.5 * _mean(twin[:10])  # the Trainer's run learns to sort
    if truth.culprit:
        assert truth.culprit == "decoder.block.1" and "shared" not in truth.culprit_alternatives
        assert "encoder.block.0" in truth.culprit_alternatives
    stats = read_stats(tmp_path / "run")
    _assert_cut_off(stats, t0, "encoder.block.0.layer.0.SelfAttention.q.weight", "shared.weight")
    assert set(stats.query("role == 'input'")["name"]) == {"input.input_ids", "input.attention_mask"}


def test_the_lightning_loop_calls_the_fault_once_per_step_and_once_per_micro_batch():
    torch.manual_seed(0)
    model = build_field_model("clip", CAPTIONS.vocab)
    images, captions, _ = captioned_digits()
    pairs = [{"pixel_values": i, "input_ids": c} for i, c in zip(images[:64], captions[:64])]
    loader = torch.utils.data.DataLoader(pairs, batch_size=8, drop_last=True)
    spy = _Spy()
    outcome = train_lightning(None, model, _adamw(model, "clip", 1e-3), loader, loader, steps=6,
                              lr_at=lambda step: 1.0, fault=spy, loss_fn=clip_loss, accumulation=2, clip=1.0,
                              bf16=False, eval_every=2)
    assert spy.began == list(range(6)) and spy.batches == [s for s in range(6) for _ in range(2)]
    assert spy.zeroed == list(range(6))  # the module's optimizer_zero_grad decides, once per step
    assert spy.stepped == list(range(6))  # and its optimizer_step override
    assert len(outcome.losses) == 6


def test_a_lightning_module_that_never_steps_is_recorded_as_not_updating(tmp_path):
    """missing_step under Lightning: an optimizer_step override that runs only the closure. The
    callback still records every step, each with optimizer_stepped 0."""
    truth = make("missing_step-clip-s0", tmp_path / "run")
    assert truth.verdict == "not_learning" and truth.labels == ["no_update"]
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    stepped = scalars[scalars["name"] == "optimizer_stepped.optimizer"].sort_values("step")
    assert len(stepped) == len(_losses(tmp_path / "run")) > 10 and (stepped["value"] == 0).all()


def test_clip_contrasts_pairs_symmetrically_clamps_its_logit_scale_and_an_lr_spike_hits_one_group(tmp_path):
    images, captions, classes = captioned_digits()
    assert captions.shape == (len(classes), CAPTIONS.length) and (captions[:, : CAPTIONS.shortest] > 0).all()
    word = 1 + classes * CAPTIONS.synonyms
    assert ((captions >= word.unsqueeze(1)) & (captions < word.unsqueeze(1) + CAPTIONS.synonyms)).any(1).all()
    model = build_field_model("clip", CAPTIONS.vocab)
    assert float(model.logit_scale.exp()) == pytest.approx(1 / 0.07)
    batch = {"pixel_values": images[:8], "input_ids": captions[:8]}
    image, text, scale = model(batch)
    assert torch.allclose(image.norm(dim=-1), torch.ones(8)) and torch.allclose(text.norm(dim=-1), torch.ones(8))
    logits = scale * image @ text.T
    by_image = torch.nn.functional.cross_entropy(logits, torch.arange(8))
    by_text = torch.nn.functional.cross_entropy(logits.T, torch.arange(8))
    assert float(clip_loss((image, text, scale))) == pytest.approx(float(by_image + by_text) / 2)
    with torch.no_grad():
        model.logit_scale.fill_(10.0)
    model.clamp_logit_scale()
    assert float(model.logit_scale) == pytest.approx(math.log(100))
    groups = _param_groups(model, RECIPES["clip"], 1e-3)
    assert [g["weight_decay"] for g in groups if g["layer"] == "logit_scale"] == [0.0]
    truth = make("lr_spike-clip-s0", tmp_path / "run")
    t0 = _t0(truth)
    twin = list(_twin_losses("clip", 0))
    assert _mean(twin[-10:]) < 0.8 * _mean(twin[:10])  # the Lightning run learns to pair
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    factor = float(truth.notes.split("multiplied by ")[1].split(" ")[0])
    layer = truth.notes.split("param groups of ")[1].split(" ")[0]
    for i, group in enumerate(groups):
        lr = scalars[scalars["name"] == f"hp.optimizer.{i}.lr"].set_index("step")["value"]
        assert lr[t0] / lr[t0 - 1] == pytest.approx(factor if group["layer"] == layer else 1.0, rel=0.05)
        assert lr[t0 + 5] / lr[t0 - 1] == pytest.approx(factor if group["layer"] == layer else 1.0, rel=0.1)


def test_densenet_concatenates_features_steps_its_lr_down_and_learns_with_nesterov_sgd(tmp_path):
    model = build_field_model("densenet", 10)
    x = torch.randn(4, 1, 8, 8)
    first = model.block1[0]
    assert first(model.stem(x)).shape[1] == model.stem.out_channels + first.conv2.out_channels
    assert torch.equal(first(model.stem(x))[:, : model.stem.out_channels], model.stem(x))  # the input is kept
    schedule = _schedule(RECIPES["densenet"], 100)
    assert [schedule(s) for s in (0, 49, 50, 74, 75, 99)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])
    truth = make("missing_step-densenet-s0", tmp_path / "run")
    assert truth.verdict == "not_learning" and truth.labels == ["no_update"]
    twin = list(_twin_losses("densenet", 0))
    assert _mean(twin[-10:]) < 0.2 * _mean(twin[:10])
    config = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    momentum = config[config["name"] == "hp.optimizer.0.momentum"]["value"]
    assert (momentum == 0.9).all()


def test_a_family_judged_on_a_metric_reads_its_distance_to_the_best_and_nan_where_the_loss_broke():
    from sample_runs.field import OUTCOME_METRICS, _judged
    from sample_runs.training import Outcome

    outcome = Outcome(losses=[1.0, 0.5, float("nan")], metrics={"reward": [20.0, 150.0, 180.0]})
    best = OUTCOME_METRICS["reinforce"].best
    assert OUTCOME_METRICS["reinforce"].higher_is_better and best == CARTPOLE.max_steps
    judged = _judged("reinforce", outcome)
    assert judged[:2] == [best - 20.0, best - 150.0] and math.isnan(judged[2])
    outcome = Outcome(losses=[0.0, -1.0], metrics={"sliced_wasserstein": [1.2, 0.4]})
    assert _judged("wgan_gp", outcome) == [1.2, 0.4]  # lower is better, 0 at best
    assert _judged("mlp", outcome) == [0.0, -1.0]  # every other family: its loss


def test_cartpole_falls_under_a_random_policy_and_the_agent_updates_once_per_step_from_its_episodes(tmp_path):
    from sample_runs.field import _random_policy_shortfall
    from sample_runs.training import _returns_to_go, train_policy_gradient

    env = CartPole(0, envs=4)
    obs = env.reset()
    assert obs.shape == (4, CARTPOLE.observations) and obs.abs().max() <= 0.05
    for _ in range(60):  # always pushing right: every pole falls within a second or so
        obs, done = env.step(np.ones(4, dtype=np.int64))
        if done.all():
            break
    assert done.all() and (obs[:, 2].abs() > CARTPOLE.theta_limit).all()
    assert 150 < _random_policy_shortfall() < 190  # a random policy lasts ~22 steps of CartPole's 200
    alive = torch.tensor([[True, True], [True, False], [False, False]])
    assert torch.allclose(_returns_to_go(alive, 0.5), torch.tensor([[1.5, 1.0], [1.0, 0.0], [0.0, 0.0]]))
    model = build_field_model("reinforce", CARTPOLE.actions)
    x = torch.randn(5, CARTPOLE.observations)
    logits, values = model(x)
    assert logits.shape == (5, 2) and values.shape == (5,) and torch.equal(model.policy(x), logits)
    spy = _Spy()
    optimizer = torch.optim.Adam(_param_groups(model, RECIPES["reinforce"], 1e-3), lr=1e-3)
    outcome = train_policy_gradient(tmp_path / "run", model, optimizer, CartPole, steps=3, lr_at=lambda step: 1.0,
                                    seed=0, max_steps=CARTPOLE.max_steps, fault=spy, accumulation=2, eval_every=2)
    assert spy.began == [0, 1, 2] and spy.batches == [0, 0, 1, 1, 2, 2] and spy.stepped == [0, 1, 2]
    assert len(outcome.losses) == 3 and all(1 <= r <= CARTPOLE.max_steps for r in outcome.metrics["reward"])
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    rewards = scalars[scalars["name"] == "reward"].sort_values("step")["value"].tolist()
    assert rewards == pytest.approx(outcome.metrics["reward"])
    assert scalars[scalars["name"] == "eval_reward"]["step"].tolist() == [0, 2]
    io = read_stats(tmp_path / "run").query("role in ('input', 'target') and step == 0").set_index("role")
    assert io.loc["input", "kind"] == "float" and io.loc["target", "kind"] == "index"


def test_wgan_gp_penalises_the_critic_gradient_norm_and_steps_its_critic_n_times_per_generator_step(tmp_path):
    from sample_runs.field import GRADIENT_PENALTY, N_CRITIC, _directions
    from sample_runs.framework_loops import train_lightning_wgan

    model = build_field_model("wgan_gp", 2)
    linear = torch.nn.Linear(2, 1)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([[3.0, 4.0]]))  # ‖∇‖ = 5 everywhere: penalty (5 − 1)²
    penalty = gradient_penalty(linear, torch.randn(8, 2), torch.randn(8, 2))
    assert float(penalty) == pytest.approx(16.0) and penalty.requires_grad  # create_graph: the critic learns from it
    real, directions = ring_points(1, 256, 0), _directions(0)
    assert sliced_wasserstein(real, real, directions) == 0.0
    assert sliced_wasserstein(real + torch.tensor([0.5, 0.0]), real, directions) == pytest.approx(
        float(0.5 * directions[:, 0].abs().mean()), rel=1e-4)
    assert (real.norm(dim=1) - RING.radius).abs().mean() < 0.2 * RING.radius
    groups = _param_groups(model, RECIPES["wgan_gp"], 1e-3)
    optimizers = tuple(torch.optim.Adam([g for g in groups if g["layer"].startswith(net)], lr=1e-3, betas=(0.0, 0.9))
                       for net in ("generator", "critic"))
    loader = torch.utils.data.DataLoader(ring_points(3, N_CRITIC * 16, 0), batch_size=N_CRITIC * 16)
    spy = _Spy()
    outcome = train_lightning_wgan(tmp_path / "run", model, optimizers, loader, ring_points(1, 64, 1),
                                   directions=directions, fault=spy, lr_at=lambda step: 1 - step / 3, n_critic=N_CRITIC,
                                   batch=16, noise=RING.noise, penalty=GRADIENT_PENALTY, bf16=False, seed=0)
    assert spy.began == [0, 1, 2] and spy.batches == [0, 1, 2]
    assert spy.zeroed == spy.stepped == [s for s in range(3) for _ in range(N_CRITIC + 1)]
    assert len(outcome.metrics["sliced_wasserstein"]) == 3
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    for name in ("loss_d", "loss_g", "sliced_wasserstein"):
        assert scalars[scalars["name"] == name]["step"].tolist() == [0, 1, 2]  # one recorded step per generator step
    lrs = scalars[scalars["name"] == "hp.optimizer_0.0.lr"].sort_values("step")["value"].tolist()
    assert lrs == pytest.approx([1e-3, 2e-3 / 3, 1e-3 / 3])  # the linear decay, set at each step's start


def test_swin_shifts_every_second_window_mixes_batches_to_soft_targets_and_keeps_its_ema_unrecorded(tmp_path):
    model = build_field_model("swin", 10)
    stage = model.swin.encoder.layers[0]
    assert [block.shift_size for block in stage.blocks] == [0, 1]  # shifted windows in the second block
    table = stage.blocks[0].attention.relative_position_bias.relative_position_bias_table
    assert table.shape == ((2 * 2 - 1) ** 2, 2)  # (2M − 1)² offsets of a 2×2 window, one bias per head
    assert model(torch.rand(3, 1, 8, 8)).shape == (3, 10)
    mix = mixup_cutmix(10, 0)
    x, y = torch.rand(32, 1, 8, 8), torch.arange(32) % 10
    mixed, soft = mix(x, y)
    assert mixed.shape == x.shape and soft.shape == (32, 10)
    assert torch.allclose(soft.sum(1), torch.ones(32)) and soft.min() >= 0.01 - 1e-6  # smoothing 0.1 over 10
    again = mixup_cutmix(10, 0)(x, y)
    assert torch.equal(again[0], mixed) and torch.equal(again[1], soft)  # a seed's own draws
    logits = torch.randn(4, 10)
    one_hot = torch.nn.functional.one_hot(torch.arange(4), 10).float()
    assert float(soft_target_cross_entropy(logits, one_hot)) == pytest.approx(
        float(soft_target_cross_entropy(logits, torch.arange(4))))
    ema = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(RECIPES["swin"].ema))
    optimizer = _adamw(model, "swin", 2e-3)
    draw = lambda: (torch.rand(16, 1, 8, 8), torch.randint(0, 10, (16,)))  # noqa: E731
    outcome = train_field(tmp_path / "run", model, optimizer, draw, steps=3, lr_at=lambda step: 1.0, clip=5.0,
                          bf16=True, loss_fn=soft_target_cross_entropy, after_step=lambda: ema.update_parameters(model),
                          mix=mixup_cutmix(10, 0))
    assert len(outcome.losses) == 3 and all(math.isfinite(v) for v in outcome.losses)
    assert not torch.equal(ema.module.classifier.weight, model.classifier.weight)  # the EMA lags the model
    stats = read_stats(tmp_path / "run")
    assert "classifier.weight" in set(stats["name"]) and not any(n.startswith("module.") for n in stats["name"])
    assert stats.query("role == 'target' and step == 0")["kind"].tolist() == ["float"]  # soft targets


def test_dqn_acts_epsilon_greedily_into_its_replay_buffer_updates_on_huber_td_targets_and_syncs_its_target(
        tmp_path):
    from sample_runs.field import DQN_GRADIENT_STEPS, LEFT_OUT, OUTCOME_METRICS, _judged
    from sample_runs.training import Outcome, ReplayBuffer, _epsilon_greedy_episodes, train_dqn

    assert OUTCOME_METRICS["dqn"].name == "reward" and OUTCOME_METRICS["dqn"].best == CARTPOLE.max_steps
    assert _judged("dqn", Outcome(losses=[0.1, 0.2], metrics={"reward": [20.0, 120.0]})) == [180.0, 80.0]
    assert "adam_state" in LEFT_OUT["dqn"] and RECIPES["dqn"].amsgrad  # AMSGrad's running max outlives the fault
    assert not any(s.arch == "dqn" and s.family == "healthy_spike" for s in SCENARIOS.values())  # no targets
    model = build_field_model("dqn", CARTPOLE.actions)
    assert model(torch.randn(5, CARTPOLE.observations)).shape == (5, CARTPOLE.actions)
    memory = ReplayBuffer(64, CARTPOLE.observations)
    reward = _epsilon_greedy_episodes(model, CartPole(0, envs=4), CARTPOLE.max_steps, 1.0, np.random.default_rng(0),
                                      memory)
    assert memory.size == min(64, round(reward * 4)) and 1 <= reward < 60  # one transition a step alive; random acts
    obs, actions, rewards, next_obs, done = memory.sample(16, np.random.default_rng(1))
    assert obs.shape == next_obs.shape == (16, CARTPOLE.observations) and actions.dtype == torch.int64
    assert (rewards == 1).all() and set(done.tolist()) <= {0.0, 1.0}
    spy = _Spy()
    optimizer = torch.optim.AdamW(_param_groups(model, RECIPES["dqn"], 1e-3), lr=1e-3, amsgrad=True)
    outcome = train_dqn(tmp_path / "run", model, optimizer, CartPole, steps=3, lr_at=lambda step: 1.0, seed=0,
                        max_steps=CARTPOLE.max_steps, observations=CARTPOLE.observations, fault=spy, accumulation=2,
                        batch=32, gradient_steps=DQN_GRADIENT_STEPS, target_every=2, eval_every=2)
    updates = [s for s in range(3) for _ in range(DQN_GRADIENT_STEPS)]
    assert spy.began == [0, 1, 2] and spy.zeroed == spy.stepped == updates
    assert spy.batches == [s for s in updates for _ in range(2)]  # two micro-batches an update
    assert len(outcome.losses) == 3 and all(1 <= r <= CARTPOLE.max_steps for r in outcome.metrics["reward"])
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    rewards = scalars[scalars["name"] == "reward"].sort_values("step")["value"].tolist()
    assert rewards == pytest.approx(outcome.metrics["reward"])
    epsilon = scalars[scalars["name"] == "epsilon"].sort_values("step")["value"].tolist()
    assert epsilon[0] == pytest.approx(0.9) and epsilon[0] > epsilon[1] > epsilon[2] > 0.05  # exponential decay
    assert scalars[scalars["name"] == "eval_reward"]["step"].tolist() == [0, 2]
    stats = read_stats(tmp_path / "run")
    assert set(stats.query("role == 'param'")["name"]) == {n for n, _ in model.named_parameters()}  # no target net
    io = stats.query("role in ('input', 'target') and step == 0").set_index("role")
    assert io.loc["input", "kind"] == "float" and io.loc["target", "kind"] == "index"


def test_the_distilled_student_learns_from_a_frozen_teacher_that_sees_its_batches(tmp_path):
    from sample_runs.field import _uniform_student_loss, distillation_teacher
    from sample_runs.field_models import KDStudent, KDTeacher, distillation_loss

    teacher = distillation_teacher(0)
    assert distillation_teacher(0) is teacher and not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())
    student = build_field_model("distil", 10)
    assert isinstance(student, KDStudent) and isinstance(teacher, KDTeacher)
    assert sum(p.numel() for p in student.parameters()) < sum(p.numel() for p in teacher.parameters()) / 5
    logits, labels = torch.randn(6, 10), torch.arange(6)
    ce = torch.nn.functional.cross_entropy(logits, labels)
    assert float(distillation_loss(logits, labels, logits)) == pytest.approx(0.5 * float(ce), rel=1e-5)  # KL 0
    hotter = distillation_loss(logits, labels, 3 * logits, alpha=1.0)
    kl = torch.nn.functional.kl_div(torch.log_softmax(logits / 2, -1), torch.softmax(3 * logits / 2, -1),
                                    reduction="batchmean")
    assert float(hotter) == pytest.approx(4 * float(kl), rel=1e-5)  # T² · KL(teacher ‖ student)
    assert 4.0 < _uniform_student_loss(0) < 7.0  # a confident teacher: far from a uniform student
    seen = []
    teacher_spy = lambda module, args, output: seen.append(args[0].clone())  # noqa: E731
    handle = teacher.register_forward_hook(teacher_spy)
    nan = faults.BatchNaN(t0=1)
    draw = lambda: (torch.rand(8, 1, 8, 8), torch.randint(0, 10, (8,)))  # noqa: E731
    try:
        outcome = train_field(tmp_path / "run", student, _adamw(student, "distil", 1e-3), draw, steps=2,
                              lr_at=lambda step: 1.0, clip=1.0, loss_fn=distillation_loss, teacher=teacher, fault=nan)
    finally:
        handle.remove()
    assert len(seen) == 2 and not seen[0].isnan().any() and seen[1].isnan().any()  # the same bad batch
    assert math.isfinite(outcome.losses[0]) and not math.isfinite(outcome.losses[1])
    stats = read_stats(tmp_path / "run")
    assert {n for n in stats.query("role == 'param'")["name"]} == {n for n, _ in student.named_parameters()}


def test_byol_predicts_the_other_views_target_projection_and_moves_its_target_by_ema_unrecorded(tmp_path):
    from sample_runs.field import BYOL_TAU
    from sample_runs.field_models import byol_ema_update, byol_loss, byol_target

    torch.manual_seed(0)
    model = build_field_model("byol", 10)
    target = byol_target(model)
    assert not any(p.requires_grad for p in target.parameters())
    views = torch.rand(8, 1, 8, 8)
    assert model(views).shape == target(views).shape == (8, 16)
    z = torch.randn(4, 16)
    assert float(byol_loss(torch.cat([z, 3 * z]), None, torch.cat([z, z]))) == pytest.approx(0.0, abs=1e-6)
    assert float(byol_loss(torch.cat([z, z]), None, torch.cat([-z, -z]))) == pytest.approx(4.0)  # 2 − 2·(−1)
    assert not any(s.arch == "byol" and s.family == "healthy_spike" for s in SCENARIOS.values())  # no labels
    before = [p.clone() for p in target.parameters()]
    draw = lambda: (torch.rand(16, 1, 8, 8), None)  # noqa: E731
    outcome = train_field(tmp_path / "run", model, _adamw(model, "byol", 1e-2), draw, steps=2, lr_at=lambda step: 1.0,
                          loss_fn=byol_loss, teacher=target, after_step=lambda: byol_ema_update(target, model, BYOL_TAU))
    assert len(outcome.losses) == 2 and all(0 <= v <= 4 for v in outcome.losses)
    online = [*model.encoder.parameters(), *model.projector.parameters()]
    for old, new, ours in zip(before, target.parameters(), online):
        assert not torch.equal(old, new) or torch.equal(old, ours)  # the target moved toward the online weights
        assert (new - old).abs().max() <= (ours - old).abs().max() * (1 - BYOL_TAU) * 2 + 1e-6
    stats = read_stats(tmp_path / "run")
    assert {n for n in stats.query("role == 'param'")["name"]} == {n for n, _ in model.named_parameters()}
    assert stats.query("role == 'target'").empty  # self-supervised: the recorder sees no targets


def test_realnvp_couplings_give_the_exact_log_determinant_and_its_nll_goes_below_zero_judged_above_its_floor(tmp_path):
    from sample_runs.data import DENSITY, density_points
    from sample_runs.field import OUTCOME_METRICS, _judged
    from sample_runs.field_models import flow_nll
    from sample_runs.training import Outcome

    torch.manual_seed(0)
    model = build_field_model("realnvp", DENSITY.dims).double()
    x = torch.randn(3, DENSITY.dims, dtype=torch.float64)
    log_det = model(x)[1].detach()
    for i in range(3):  # log|det| of the Jacobian, against autograd's
        jacobian = torch.autograd.functional.jacobian(lambda v: model(v.unsqueeze(0))[0][0], x[i])
        assert float(log_det[i]) == pytest.approx(float(torch.linalg.slogdet(jacobian)[1]), abs=1e-8)
    z = torch.randn(64, DENSITY.dims)
    standard_normal = 0.5 * math.log(2 * math.pi) + 0.5 * float((z ** 2).mean())
    assert float(flow_nll((z, torch.zeros(64)))) == pytest.approx(standard_normal)
    train, held_out, entropy = density_points()
    covariance = torch.cov(train.T.double())
    gaussian = 0.5 * math.log(2 * math.pi * math.e) + 0.5 * float(torch.logdet(covariance)) / DENSITY.dims
    assert entropy < gaussian < 0  # a Gaussian has the most entropy for its covariance; the data is concentrated
    assert float(train.std(0).mean()) == pytest.approx(1.0, abs=1e-3) and held_out.shape[1] == DENSITY.dims
    assert _judged("realnvp", Outcome([-0.5, math.nan])) == pytest.approx([-0.5 - entropy, math.nan], nan_ok=True)
    assert OUTCOME_METRICS["realnvp"].name == "loss"
    detach = faults.DetachedLayer(t0=0, layer="couplings.3")
    model = build_field_model("realnvp", DENSITY.dims)
    detach.install(model)
    detach.before_step(0, model, None)
    flow_nll(model(train[:32])).backward()  # the running log|det| is detached with the coupling's output
    assert all(p.grad is None for unit in model.units[:4] for p in model.get_submodule(unit).parameters())
    assert all(p.grad is not None for unit in model.units[4:] for p in model.get_submodule(unit).parameters())


def test_transe_margin_loss_renormalised_entities_and_hits_at_10_recorded_with_index_inputs(tmp_path):
    from sample_runs.data import KNOWLEDGE_GRAPH, corrupted_triples_sampler, knowledge_graph
    from sample_runs.field_models import TRANSE_MARGIN, hits_at_k, transe_margin_loss

    d = torch.tensor([1.0, 1.0, 1.0])
    assert float(transe_margin_loss((d, d + TRANSE_MARGIN + 0.5))) == 0.0  # every negative already γ farther
    assert float(transe_margin_loss((d, d))) == pytest.approx(TRANSE_MARGIN)  # nothing learned: d⁺ = d⁻
    train, held_out = knowledge_graph()
    assert len(train) + len(held_out) == KNOWLEDGE_GRAPH.entities * KNOWLEDGE_GRAPH.relations
    batch, targets = corrupted_triples_sampler(train, 64, 0)()
    assert targets is None and torch.equal(batch["positive"][:, 1], batch["negative"][:, 1])
    assert ((batch["positive"] != batch["negative"]).sum(1) <= 1).all()  # the head or the tail replaced
    torch.manual_seed(0)
    model = build_field_model("transe", KNOWLEDGE_GRAPH.relations)
    transe_margin_loss(model(batch)).backward()
    named = torch.unique(torch.cat([batch["positive"][:, [0, 2]], batch["negative"][:, [0, 2]]]))
    rows = model.ent_embeddings.weight.grad.abs().sum(1) > 0
    assert set(torch.nonzero(rows).flatten().tolist()) <= set(named.tolist()) and rows.sum() < KNOWLEDGE_GRAPH.entities
    optimizer = torch.optim.SGD(_param_groups(model, RECIPES["transe"], 1.0), lr=1.0)
    train_field(tmp_path / "run", model, optimizer, corrupted_triples_sampler(train, 64, 0), steps=3,
                lr_at=lambda s: 1.0, loss_fn=transe_margin_loss, after_step=model.normalize_entities,
                eval_draw=corrupted_triples_sampler(held_out, 32, 1), eval_every=2,
                eval_metrics=lambda: {"hits_at_10": hits_at_k(model, held_out)})
    assert torch.allclose(model.ent_embeddings.weight.norm(dim=1), torch.ones(KNOWLEDGE_GRAPH.entities), atol=1e-5)
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    assert sorted(scalars[scalars["name"] == "hits_at_10"]["step"]) == [0, 2]
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "input"]["kind"]) == {"index"}
    with torch.no_grad():  # entities placed so that h + r lands on t: every held-out tail ranks first
        model.rel_embeddings.weight.zero_()
        model.ent_embeddings.weight.copy_(torch.eye(KNOWLEDGE_GRAPH.entities, 32))
    assert hits_at_k(model, torch.tensor([[5, 0, 5], [7, 1, 7]])) == 1.0
    assert {"adam_state", "healthy_bf16"} <= set(LEFT_OUT["transe"])


def test_kws_trains_under_fp16_autocast_and_the_recorded_scaler_skips_an_overflowing_step(tmp_path):
    from sample_runs.data import KEYWORDS, keyword_clips
    from sample_runs.field_models import keyword_nll_loss

    train, _ = keyword_clips()
    assert train.x.shape[1:] == (1, KEYWORDS.rate) and int(train.y.max()) == KEYWORDS.classes - 1
    torch.manual_seed(0)
    model = build_field_model("kws", KEYWORDS.classes)
    log_probs = model(train.x[:4])
    assert log_probs.shape == (4, 1, KEYWORDS.classes)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(4, 1), atol=1e-5)
    batches = iter([(train.x[:8], train.y[:8]), (train.x[:8] * 1e5, train.y[:8]), (train.x[8:16], train.y[8:16])])
    scaler = torch.amp.GradScaler("cpu")
    seen = []
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    train_field(tmp_path / "run", model, optimizer, lambda: next(batches), steps=3, lr_at=lambda s: 1.0,
                loss_fn=keyword_nll_loss, clip=1.0, scaler=scaler,
                after_step=lambda: seen.append(model.fc1.weight.detach().clone()))
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    skipped = scalars[scalars["name"] == "scaler_skipped"].set_index("step")["value"]
    scale = scalars[scalars["name"] == "grad_scale"].set_index("step")["value"]
    assert skipped.tolist() == [0.0, 1.0, 0.0] and scale[1] == scale[0] / 2  # the scaler skipped and backed off
    assert torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])  # no update from the skipped step
    stats = read_stats(tmp_path / "run")
    assert stats.query("role == 'grad'")["norm"].dropna().lt(1e3).all()  # recorded unscaled, not ×65536


def test_lora_trains_only_its_low_rank_matrices_on_a_pretrained_base_and_starts_where_the_base_is(tmp_path):
    from sample_runs.data import KITCHEN_WORDS, char_corpus, lm_batch_sampler
    from sample_runs.field import CORPUS_CHARS, lora_base
    from sample_runs.field_models import CONTEXT, LoRALinear
    from sample_runs.models import TinyGPT
    from sample_runs.training import token_cross_entropy

    layer = LoRALinear(6, 4, r=2, lora_alpha=4)
    with torch.no_grad():
        layer.lora_B.normal_()
    x = torch.randn(3, 6)
    reference = x @ layer.weight.T + layer.bias + (x @ layer.lora_A.T @ layer.lora_B.T) * 2.0
    assert torch.allclose(layer(x), reference, atol=1e-6)  # W x + b + B A x · alpha / r
    default, vocab = char_corpus(CORPUS_CHARS, 0)
    kitchen, same_vocab = char_corpus(CORPUS_CHARS, 0, KITCHEN_WORDS)
    assert same_vocab == vocab and not torch.equal(default[:200], kitchen[:200])  # one alphabet, other words
    base = TinyGPT(vocab=vocab, context=CONTEXT, width=32, heads=4, layers=2)
    base.load_state_dict(lora_base(0))
    torch.manual_seed(0)
    model = build_field_model("lora", vocab)
    model.load_state_dict(lora_base(0), strict=False)
    assert {n for n, p in model.named_parameters() if p.requires_grad} == \
        {n for n, _ in model.named_parameters() if "lora_" in n}
    batch = lm_batch_sampler(kitchen, 8, CONTEXT, 0)()
    with torch.no_grad():  # B = 0: the fine-tune starts as the pretrained base
        assert torch.allclose(model(batch[0]), base(batch[0]), atol=1e-5)
        pretrained = token_cross_entropy(base(lm_batch_sampler(default, 64, CONTEXT, 1)()[0][:, :-1]),
                                         lm_batch_sampler(default, 64, CONTEXT, 1)()[1][:, :-1])
    assert float(pretrained) < 0.6 * math.log(vocab)  # the base learned its own corpus
    groups = _param_groups(model, RECIPES["lora"], 1e-3)
    assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in model.parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    train_field(tmp_path / "run", model, optimizer, lm_batch_sampler(kitchen, 8, CONTEXT, 0), steps=3,
                lr_at=lambda s: 1.0, clip=1.0)
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert not torch.equal(model.blocks[0].c_fc.lora_B, torch.zeros_like(model.blocks[0].c_fc.lora_B))
    stats = read_stats(tmp_path / "run")
    grads = stats.query("role == 'grad'")
    assert set(grads[~grads["grad_none"].astype(bool)]["name"]) == \
        {n for n, _ in model.named_parameters() if "lora_" in n}  # gradients only on the LoRA matrices
    assert "wte.weight" in set(stats.query("role == 'param'")["name"])  # the frozen base is recorded
    detach = faults.DetachedLayer(t0=0, layer=model.hidden[-1])
    detach.install(model)
    detach.before_step(0, model, None)
    model.zero_grad(set_to_none=True)
    token_cross_entropy(model(batch[0]), batch[1]).backward()  # a later block's LoRA matrices keep a graph
    assert model.hidden[-1] == "blocks.0" and model.blocks[0].c_fc.lora_A.grad is None
    assert model.blocks[1].c_fc.lora_A.grad is not None


def test_vqvae_quantises_to_the_nearest_code_passes_gradients_straight_through_and_moves_codes_by_ema(tmp_path):
    from sample_runs.data import Dataset, batch_sampler
    from sample_runs.field_models import VectorQuantizerEMA, codebook_perplexity, vqvae_loss

    torch.manual_seed(0)
    quantiser = VectorQuantizerEMA(4, 2)
    codes = quantiser._embedding.weight.detach().clone()
    z = codes[:3].T.reshape(1, 2, 1, 3) + 0.01  # (B, C, H, W): position i next to code i; code 3 unused
    z.requires_grad_(True)
    quantiser.eval()
    loss, quantized, perplexity, encodings = quantiser(z)
    nearest = ((z.detach().permute(0, 2, 3, 1).reshape(-1, 1, 2) - codes) ** 2).sum(-1).argmin(1)
    assert torch.equal(encodings.argmax(1), nearest)
    assert torch.allclose(quantized.permute(0, 2, 3, 1).reshape(-1, 2), codes[nearest], atol=1e-6)
    assert float(perplexity) == pytest.approx(len(set(nearest.tolist())), rel=1e-4)  # codes in equal use
    quantized.sum().backward()
    assert torch.equal(z.grad, torch.ones_like(z))  # straight through
    assert torch.equal(quantiser._embedding.weight, codes)  # eval mode: no EMA step
    assert loss.item() == pytest.approx(0.25 * float(((quantized - z).detach() ** 2).mean()), rel=1e-4)
    quantiser.train()
    quantiser(z.detach())
    moved = quantiser._embedding.weight.detach()
    used = sorted(set(nearest.tolist()))
    assert not torch.equal(moved[used], codes[used]) and quantiser._embedding.weight.grad is None
    unused = [i for i in range(4) if i not in used]
    assert unused
    assert torch.allclose(moved[unused], codes[unused], atol=1e-4)  # a code no input chose stays put
    images = pattern_images().x
    torch.manual_seed(0)
    model = build_field_model("vqvae", 3)
    with torch.no_grad():
        vq_loss, recon, _ = model(images[:4])
    assert recon.shape == images[:4].shape
    assert float(vqvae_loss((vq_loss, recon, None), images[:4])) == pytest.approx(
        float(((recon - images[:4]) ** 2).mean() + vq_loss), rel=1e-5)
    before = model._vq_vae._embedding.weight.detach().clone()
    assert 1 <= codebook_perplexity(model, images[:64]) <= 64 and model.training
    assert torch.equal(model._vq_vae._embedding.weight, before)  # the metric's forward is no EMA step
    optimizer = torch.optim.Adam(_param_groups(model, RECIPES["vqvae"], 1e-3), lr=1e-3)
    train_field(tmp_path / "run", model, optimizer, batch_sampler(Dataset(images[:64], images[:64]), 8, 0), steps=3,
                lr_at=lambda s: 1.0, loss_fn=vqvae_loss, eval_draw=batch_sampler(Dataset(images, images), 8, 1),
                eval_every=2, eval_metrics=lambda: {"codebook_perplexity": codebook_perplexity(model, images[:64])})
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    assert sorted(scalars[scalars["name"] == "codebook_perplexity"]["step"]) == [0, 2]
    stats = read_stats(tmp_path / "run")
    codebook = stats[(stats["role"] == "param") & (stats["name"] == "_vq_vae._embedding.weight")]
    assert codebook["norm"].nunique() > 1  # moved outside the optimizer
    grads = stats.query("role == 'grad'")
    assert grads[grads["name"] == "_vq_vae._embedding.weight"]["grad_none"].astype(bool).all()


def test_nbeats_forecasts_from_the_last_value_on_smape_and_a_detached_stack_cuts_every_stack_before_it(tmp_path):
    from sample_runs.data import SERIES, forecast_windows_sampler, seasonal_series
    from sample_runs.field import _data, _held_out_smape
    from sample_runs.field_models import smape_2_loss

    f, y = torch.tensor([[1.0, 3.0]], requires_grad=True), torch.tensor([[2.0, 1.0]])
    loss = smape_2_loss(f, y)
    assert float(loss) == pytest.approx(100 * (1 / 3 + 2 / 4))
    loss.backward()  # the denominator is detached, as ElementAI's `.data`
    assert f.grad[0].tolist() == pytest.approx([100 * -1 / 3, 100 * 1 / 4])
    values = seasonal_series()
    assert values.shape == (SERIES.series, SERIES.length) and float(values.min()) > 0
    x, y = forecast_windows_sampler(64, 0)()
    assert x.shape == (64, SERIES.inputs) and y.shape == (64, SERIES.horizon)
    train_part = values[:, : -SERIES.horizon]
    assert all(any(torch.equal(y[i], train_part[r, c: c + SERIES.horizon]) for r in range(len(values))
                   for c in range(train_part.shape[1] - SERIES.horizon + 1)) for i in range(3))
    held_x, held_y = forecast_windows_sampler(SERIES.series, 0, held_out=True)()
    assert torch.equal(torch.sort(held_y, 0)[0], torch.sort(values[:, -SERIES.horizon:], 0)[0])
    torch.manual_seed(0)
    model = build_field_model("nbeats", SERIES.horizon)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    assert torch.equal(model(held_x), held_x[:, -1:].expand_as(held_y))  # no block output: the naive forecast
    *_, chance = _data("nbeats", RECIPES["nbeats"], 0, 1)
    assert chance == pytest.approx(_held_out_smape(model), rel=1e-5)
    assert [_schedule(RECIPES["nbeats"], 150)(s) for s in (0, 49, 50, 100, 149)] == [1, 1, 0.5, 0.25, 0.25]
    torch.manual_seed(0)
    model = build_field_model("nbeats", SERIES.horizon)
    detach = faults.DetachedLayer(t0=0, layer="stacks.1")
    detach.install(model)
    detach.before_step(0, model, None)
    smape_2_loss(model(x), y).backward()
    assert all(p.grad is None for unit in model.units[:2] for p in model.get_submodule(unit).parameters())
    assert all(p.grad is not None for p in model.stacks[2].parameters())
    assert model.hidden[-1] == "stacks.1"


def test_word2vec_scores_pairs_against_unigram_negatives_and_its_sparse_gradients_are_recorded_as_if_dense(tmp_path):
    from sample_runs.data import TOPICS, related_word_pairs, skipgram_pairs, skipgram_sampler, topic_corpus
    from sample_runs.field import OUTCOME_METRICS, _data
    from sample_runs.field_models import sgns_loss, word_similarity_spearman

    score, negatives = torch.tensor([2.0, -1.0]), torch.tensor([[0.5, -3.0], [1.0, 0.0]])
    expected = -torch.log(torch.sigmoid(score)) - torch.log(torch.sigmoid(-negatives)).sum(1)
    assert float(sgns_loss((score, negatives))) == pytest.approx(float(expected.mean()), rel=1e-6)
    docs = topic_corpus()
    pairs = skipgram_pairs()
    first = docs[0]
    in_window = {(int(first[i]), int(first[j])) for i in range(TOPICS.length) for j in range(TOPICS.length)
                 if 0 < abs(i - j) <= TOPICS.window}
    assert in_window <= {tuple(p) for p in pairs.tolist()}
    assert len(pairs) == 2 * TOPICS.window * (TOPICS.documents - TOPICS.held_out) * TOPICS.length \
        - TOPICS.window * (TOPICS.window + 1) * (TOPICS.documents - TOPICS.held_out)
    batch, targets = skipgram_sampler(4096, 0)()
    assert targets is None and batch["neg_v"].shape == (4096, TOPICS.negatives)
    counts = torch.bincount(docs[: -TOPICS.held_out].flatten(), minlength=TOPICS.vocab).double()
    drawn = torch.bincount(batch["neg_v"].flatten(), minlength=TOPICS.vocab).double()
    table = counts ** 0.75 / (counts ** 0.75).sum()
    assert float((drawn / drawn.sum() - table).abs().max()) < 0.01  # unigram^0.75, not the unigram
    torch.manual_seed(0)
    model = build_field_model("word2vec", TOPICS.vocab)
    assert model.u_embeddings.sparse and model.v_embeddings.sparse
    assert not model.v_embeddings.weight.any() and model.u_embeddings.weight.abs().max() <= 1 / 32
    optimizer = torch.optim.SparseAdam(_param_groups(model, RECIPES["word2vec"], 0.03), lr=0.03)
    train_field(tmp_path / "run", model, optimizer, skipgram_sampler(64, 0), steps=4, lr_at=lambda s: 1.0,
                loss_fn=sgns_loss, eval_draw=skipgram_sampler(256, 1, held_out=True), eval_every=2,
                eval_metrics=lambda: {"wordsim_spearman": word_similarity_spearman(model, *related_word_pairs())})
    stats = read_stats(tmp_path / "run")
    grads = stats[(stats["role"] == "grad") & (stats["name"] == "v_embeddings.weight")].set_index("step")
    centres = stats[(stats["role"] == "grad") & (stats["name"] == "u_embeddings.weight")].set_index("step")
    assert centres.loc[0, "norm"] == 0.0  # v starts at 0: no gradient reaches u on the first step
    assert 0.5 < centres.loc[3, "zero_frac"] < 1  # rows of the words outside the batch: zeros, counted
    assert set(stats[(stats["role"] == "state")]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert set(stats[stats["role"] == "input"]["kind"]) == {"index"}
    torch.manual_seed(0)  # the same first step by hand: the recorded norm is the dense gradient's
    again = build_field_model("word2vec", TOPICS.vocab)
    sgns_loss(again(skipgram_sampler(64, 0)()[0])).backward()
    reference = again.v_embeddings.weight.grad.to_dense()
    assert grads.loc[0, "norm"] == pytest.approx(float(reference.norm()), rel=1e-5)
    assert grads.loc[0, "zero_frac"] == pytest.approx(float((reference == 0).double().mean()))
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    assert sorted(scalars[scalars["name"] == "wordsim_spearman"]["step"]) == [0, 2]
    pairs, scores = related_word_pairs()
    assert all(min(abs(v - 10 * (1 - d / 6)) for d in range(7)) < 1e-5 for v in scores.tolist())  # ring distance
    assert (pairs[:, 0] != pairs[:, 1]).all()
    *_, chance = _data("word2vec", RECIPES["word2vec"], 0, 1)
    assert chance == pytest.approx(float(sgns_loss((torch.full((1,), -math.log(5)), torch.full((1, 5), -math.log(5))))))
    twin = _twin_losses("word2vec", 0)
    assert twin[0] == pytest.approx((1 + TOPICS.negatives) * math.log(2), rel=1e-4)  # v starts at 0
    assert _mean(twin[-10:]) < 0.9 * chance and "word2vec" not in OUTCOME_METRICS  # judged on its loss
    assert "detach" in LEFT_OUT["word2vec"]


def test_triplet_mines_the_hardest_pairs_of_p_by_k_batches_and_is_judged_on_its_recall_every_step(tmp_path):
    from sample_runs.data import class_balanced_sampler, noisy_digits
    from sample_runs.field import OUTCOME_METRICS
    from sample_runs.field_models import TRIPLET_MARGIN, batch_hard_triplet_loss, recall_at_1

    images = noisy_digits()
    x, y = class_balanced_sampler(images, 32, 4, 0)()
    assert x.shape == (32, 1, 8, 8) and all((y[4 * i: 4 * i + 4] == y[4 * i]).all() for i in range(8))
    assert len(set(y.tolist())) == 8
    torch.manual_seed(0)
    embeddings = torch.nn.functional.normalize(torch.randn(12, 5), dim=1).requires_grad_(True)
    labels = torch.arange(3).repeat_interleave(4)
    brute = []
    d = torch.cdist(embeddings.detach(), embeddings.detach())
    for a in range(12):
        hardest_p = max((float(d[a, p]), p) for p in range(12) if labels[p] == labels[a] and p != a)
        hardest_n = min((float(d[a, n]), n) for n in range(12) if labels[n] != labels[a])
        brute.append(max(0.0, float(torch.norm(embeddings[a] - embeddings[hardest_p[1]] + 1e-6))
                         - float(torch.norm(embeddings[a] - embeddings[hardest_n[1]] + 1e-6)) + TRIPLET_MARGIN))
    loss = batch_hard_triplet_loss(embeddings, labels)
    assert float(loss) == pytest.approx(sum(brute) / 12, rel=1e-4)  # nn.TripletMarginLoss's eps inside the norm
    apart = torch.eye(3).repeat_interleave(4, 0)  # each class at its own corner: every margin met
    assert float(batch_hard_triplet_loss(apart, labels)) == 0.0
    assert float(batch_hard_triplet_loss(torch.ones(12, 3) / 3 ** 0.5, labels)) == pytest.approx(TRIPLET_MARGIN)
    torch.manual_seed(0)
    model = build_field_model("triplet", 10)
    out = model(x)
    assert torch.allclose(out.norm(dim=1), torch.ones(32), atol=1e-5)
    identity = torch.nn.Identity()
    points = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
    assert recall_at_1(identity, points, torch.tensor([0, 0, 1, 1])) == 1.0
    assert recall_at_1(identity, points, torch.tensor([0, 1, 0, 1])) == 0.0
    truth = make("healthy-triplet-s0", tmp_path / "run")
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    recall = scalars[scalars["name"] == "val_recall_at_1"].sort_values("step")
    assert recall["step"].tolist() == list(range(150))  # evaluated every step: the truth reads it
    assert _mean(recall["value"].tolist()[-10:]) > _mean(recall["value"].tolist()[:10]) + 0.03
    assert OUTCOME_METRICS["triplet"].distance(0.75) == pytest.approx(0.25)
    twin = _twin_losses("triplet", 0)
    assert twin == pytest.approx([1 - v for v in recall["value"]], abs=1e-6)  # the twin is the healthy run
    losses = _losses(tmp_path / "run")
    assert min(losses[-20:]) > 0.9 * TRIPLET_MARGIN  # the loss sits near the margin while recall climbs
    stats = read_stats(tmp_path / "run")
    assert stats[stats["role"] == "input"]["shape"].iloc[0] == "32x1x8x8" and truth.verdict == "healthy"
    assert {"healthy_spike", "healthy_accum"} <= set(LEFT_OUT["triplet"])


def test_sam_climbs_by_rho_steps_from_the_restored_weights_and_is_recorded_as_its_base_optimizer(tmp_path):
    from sample_runs.data import pattern_images
    from sample_runs.field import SAM_RHO, _data
    from sample_runs.field_models import SAM, smooth_crossentropy
    from sample_runs.training import train_sam

    pred, gold = torch.randn(5, 4), torch.tensor([0, 3, 1, 1, 2])
    target = torch.full((5, 4), 0.1 / 3).scatter_(1, gold.unsqueeze(1), 0.9)
    kl = (target * (target.log() - torch.log_softmax(pred, 1))).sum(1).mean()
    assert float(smooth_crossentropy(pred, gold)) == pytest.approx(float(kl), rel=1e-5)
    *_, chance = _data("sam", RECIPES["sam"], 0, 1)
    assert chance == pytest.approx(float(smooth_crossentropy(torch.zeros(1, 4), torch.tensor([0]))), rel=1e-6)
    assert [_schedule(RECIPES["sam"], 150)(s) for s in (0, 44, 45, 90, 120, 149)] == \
        pytest.approx([1, 1, 0.2, 0.04, 0.008, 0.008])
    torch.manual_seed(0)
    model = build_field_model("sam", 4)
    assert not model.f[-1].weight.any()  # the repository's zero-initialised classifier
    images = pattern_images()
    x, y = images.x[:16], images.y[:16]
    optimizer = SAM(_param_groups(model, RECIPES["sam"], 0.1), torch.optim.SGD, rho=SAM_RHO, lr=0.1, momentum=0.9)
    assert optimizer.param_groups is optimizer.base_optimizer.param_groups
    w = [p.detach().clone() for p in model.parameters()]
    smooth_crossentropy(model(x), y).backward()
    g = [p.grad.clone() for p in model.parameters()]
    optimizer.first_step(zero_grad=True)
    climbed = torch.sqrt(sum(((p.detach() - w0) ** 2).sum() for p, w0 in zip(model.parameters(), w)))
    assert float(climbed) == pytest.approx(SAM_RHO, rel=1e-4) and all(p.grad is None for p in model.parameters())
    assert float(sum((p.detach() - w0).flatten() @ g0.flatten() for p, w0, g0 in zip(model.parameters(), w, g))) > 0
    smooth_crossentropy(model(x), y).backward()
    at_climbed = [p.grad.clone() for p in model.parameters()]
    optimizer.second_step(zero_grad=True)
    for p, w0, g1 in zip(model.parameters(), w, at_climbed):
        decay = next(gr["weight_decay"] for gr in optimizer.param_groups if any(q is p for q in gr["params"]))
        assert torch.allclose(p.detach(), w0 - 0.1 * (g1 + decay * w0), atol=1e-6)  # SGD's step from w
    torch.manual_seed(0)
    model = build_field_model("sam", 4)
    optimizer = SAM(_param_groups(model, RECIPES["sam"], 0.1), torch.optim.SGD, rho=SAM_RHO, lr=0.1, momentum=0.9)
    draw = lambda: (x, y)  # noqa: E731
    train_sam(tmp_path / "run", model, optimizer, draw, steps=4, lr_at=lambda s: 1.0, loss_fn=smooth_crossentropy,
              fault=faults.MissingZeroGrad(t0=2))
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    stepped = scalars[scalars["name"] == "optimizer_stepped.optimizer"].sort_values("step")["value"].tolist()
    assert stepped == [1.0] * 4  # second_step's base SGD step, recorded through the SAM optimizer
    carried = scalars[scalars["name"] == "grad_carried_over"].sort_values("step")["value"].tolist()
    assert carried[:2] == [0.0, 0.0] and carried[3] > 0.5  # no zero_grad=True from step 2: gradients pile up
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"momentum_buffer"}  # not SAM's old_p copies
    assert {"adam_state", "missing_step"} <= set(LEFT_OUT["sam"])


def test_ppo_updates_on_minibatches_of_gae_rollouts_with_clipped_losses_and_is_judged_on_its_return(tmp_path):
    from sample_runs.field import OUTCOME_METRICS, PPO_ENVS, _data
    from sample_runs.training import _gae, _ppo_losses, train_ppo

    rewards, values = torch.ones(3, 1), torch.tensor([[0.5], [0.2], [0.4]])
    dones = torch.tensor([[0.0], [0.0], [1.0]])  # the episode ends after step 1; step 2 starts a new one
    advantages = _gae(rewards, values, dones, torch.tensor([0.3]), torch.tensor([0.0]), 0.9, 0.5)
    d2 = 1 + 0.9 * 0.3 - 0.4
    d1 = 1 - 0.2  # no bootstrap across the episode's end
    d0 = 1 + 0.9 * 0.2 - 0.5
    assert advantages.flatten().tolist() == pytest.approx([d0 + 0.45 * d1, d1, d2])
    old = {"logprobs": torch.log(torch.tensor([0.5, 0.5])), "values": torch.tensor([0.0, 0.0]),
           "returns": torch.tensor([1.0, 1.0])}
    logits = torch.log(torch.tensor([[0.9, 0.1], [0.5, 0.5]]))  # ratio 1.8 on the first, 1 on the second
    losses = _ppo_losses(logits, torch.tensor([0.5, -1.0]), torch.tensor([0, 0]), torch.tensor([1.0, -1.0]), old, 0.2)
    assert float(losses["policy_loss"]) == pytest.approx((-1.2 + 1.0) / 2)  # clipped at 1 + 0.2
    # unclipped (0.5 − 1)² against clipped (0.2 − 1)²; (−1 − 1)² against (−0.2 − 1)²
    assert float(losses["value_loss"]) == pytest.approx(0.5 * (0.64 + 4.0) / 2)
    assert float(losses["clipfrac"]) == 0.5
    torch.manual_seed(0)
    model = build_field_model("ppo", CARTPOLE.actions)
    assert model.actor[4].weight.norm(dim=1).max() < 0.02 and not model.critic[0].bias.any()  # CleanRL's layer_init
    w = model.critic[2].weight.detach()
    assert torch.allclose(w @ w.T, 2 * torch.eye(64), atol=1e-4)  # orthogonal, gain √2
    draw, eval_draw, classes, chance = _data("ppo", RECIPES["ppo"], 0, 1)
    assert eval_draw is None and draw(0).envs == PPO_ENVS and 150 < chance < 190
    spy = _Spy()
    optimizer = torch.optim.Adam(_param_groups(model, RECIPES["ppo"], 1e-3), lr=1e-3, eps=1e-5)
    outcome = train_ppo(tmp_path / "run", model, optimizer, draw, steps=20, lr_at=lambda step: 1 - step / 20, seed=0,
                        max_steps=CARTPOLE.max_steps, fault=spy, accumulation=2, num_steps=16)
    assert spy.began == spy.zeroed == spy.stepped == list(range(20))  # one optimizer step a recorded step
    assert spy.batches == [s for s in range(20) for _ in range(2)]
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    lrs = scalars[scalars["name"] == "hp.optimizer.0.lr"].sort_values("step")["value"].tolist()
    assert lrs == pytest.approx([1e-3] * 16 + [1e-3 * (1 - 16 / 20)] * 4)  # annealed once a rollout of 16 updates
    stats = read_stats(tmp_path / "run")
    # a minibatch of a quarter of the rollout, the last of its two micro-batches recorded
    assert stats.query("role == 'input' and step == 0")["shape"].tolist() == [f"{16 * PPO_ENVS // 4 // 2}x4"]
    for name in ("reward", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac"):
        assert scalars[scalars["name"] == name]["step"].tolist() == list(range(20))
    rewards = outcome.metrics["reward"]
    assert len(set(rewards[:16])) == 1 and 8 <= rewards[0] <= 60  # the episodes that ended in the first rollout
    assert OUTCOME_METRICS["ppo"].name == "reward"
    twin = _twin_losses("ppo", 0)
    assert _mean(twin[-10:]) < 0.8 * _mean(twin[:10])  # the healthy agent's return climbs
    env = CartPole(0, envs=3)
    env.reset()
    kept = env.state.copy()
    obs = env.reset_done(np.array([True, False, False]))
    assert np.array_equal(env.state[1:], kept[1:]) and not np.array_equal(env.state[0], kept[0])
    assert obs.shape == (3, 4) and obs.abs().max() <= 0.05


def test_detector_assigns_locations_inside_boxes_and_sums_focal_and_giou_losses_as_torchvision_does(tmp_path):
    from sample_runs.data import BOXES, box_images
    from sample_runs.field import _data, _detection_chance
    from sample_runs.field_models import (TinyFCOS, detection_iou, fcos_loss, fcos_targets,
                                          generalized_box_iou_loss, sigmoid_focal_loss)

    logits, targets = torch.tensor([2.0, -1.0, 0.0]), torch.tensor([1.0, 0.0, 0.0])
    p = torch.sigmoid(logits)
    expected = [-0.25 * (1 - p[0]) ** 2 * torch.log(p[0]), -0.75 * p[1] ** 2 * torch.log(1 - p[1]),
                -0.75 * p[2] ** 2 * torch.log(1 - p[2])]
    assert float(sigmoid_focal_loss(logits, targets)) == pytest.approx(float(sum(expected)), rel=1e-5)
    box, truth = torch.tensor([[0.0, 0.0, 2.0, 2.0]]), torch.tensor([[1.0, 1.0, 3.0, 3.0]])
    iou, hull = 1 / 7, 9.0  # intersection 1, union 7, enclosing box 3 × 3
    assert float(generalized_box_iou_loss(box, truth)) == pytest.approx(1 - iou + (hull - 7) / hull, rel=1e-5)
    assert float(generalized_box_iou_loss(truth, truth)) == pytest.approx(0.0, abs=1e-6)
    rows = torch.tensor([[[1, 0, 0, 8, 8], [0, 4, 4, 16, 16], [-1, -1, -1, -1, -1]]])
    labels, boxes = fcos_targets(rows, (4, 4), 4)
    grid = labels.view(4, 4)
    assert grid[0, 0] == 1 and grid[0, 1] == 1 and grid[1, 1] == 1  # inside both: the smaller box's
    assert grid.tolist() == [[1, 1, -1, -1], [1, 1, 0, 0], [-1, 0, 0, 0], [-1, 0, 0, 0]]  # -1: in no box
    assert boxes[0, 5].tolist() == [0.0, 0.0, 8.0, 8.0]
    images = box_images()
    assert images.x.shape == (BOXES.images, 1, BOXES.size, BOXES.size)
    for row in images.y[:50]:
        kinds = row[row[:, 0] >= 0, 0].tolist()
        assert 1 <= len(kinds) == len(set(kinds))  # distinct classes in an image: detection_iou's matching
    torch.manual_seed(0)
    model = build_field_model("detector", BOXES.classes)
    cls, ltrb = model(images.x[:2])
    assert cls.shape == (2, 3, 8, 8) and ltrb.shape == (2, 4, 8, 8) and (ltrb >= 0).all()
    assert float(torch.sigmoid(cls.detach()).mean()) == pytest.approx(0.01, abs=0.005)  # the 0.01 prior
    loss = fcos_loss((cls, ltrb), images.y[:2])
    assert set(loss) == {"loss_cls", "loss_box"}
    *_, chance = _data("detector", RECIPES["detector"], 0, 1)
    assert chance == _detection_chance() and 1.0 < chance < 2.5
    perfect, exact = torch.full((1, 3, 8, 8), -20.0), torch.zeros(1, 4, 8, 8)
    for kind, x1, y1, x2, y2 in rows[0, :2].tolist():  # every location inside a box: its class, its exact ltrb
        for i in range(8):
            for j in range(8):
                cx, cy = (j + 0.5) * TinyFCOS.stride, (i + 0.5) * TinyFCOS.stride
                if x1 < cx < x2 and y1 < cy < y2:
                    exact[0, :, i, j] = torch.tensor([cx - x1, cy - y1, x2 - cx, y2 - cy]) / TinyFCOS.stride
                    perfect[0, :, i, j] = -20.0
                    perfect[0, kind, i, j] = 20.0
    stub = lambda x: (perfect, exact)  # noqa: E731
    stub.eval, stub.train = (lambda: None), (lambda: None)
    assert detection_iou(stub, torch.zeros(1, 1, 32, 32), rows) == pytest.approx(1.0)
    truth = make("healthy-detector-s0", tmp_path / "run")
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    by_name = {name: frame.sort_values("step")["value"].tolist() for name, frame in scalars.groupby("name")}
    assert by_name["loss"] == pytest.approx([c + b for c, b in zip(by_name["loss_cls"], by_name["loss_box"])], rel=1e-5)
    assert by_name["val_iou"][-1] > by_name["val_iou"][0] + 0.3 and truth.verdict == "healthy"
    lrs = by_name["hp.optimizer.0.lr"]
    assert lrs[0] == pytest.approx(1e-5) and max(lrs) == pytest.approx(0.01) and lrs[-1] == pytest.approx(1e-4)
    assert {"adam_state", "healthy_spike"} <= set(LEFT_OUT["detector"])


def test_efficientnet_stacks_mbconv_blocks_with_se_and_drop_path_and_keeps_a_timm_ema_unrecorded(tmp_path):
    from sample_runs.field import EFFICIENTNET_LR, MODEL_EMA_DECAY
    from sample_runs.field_models import InvertedResidual, ModelEmaV2

    torch.manual_seed(0)
    model = build_field_model("efficientnet", PATTERNS.classes)
    blocks = [b for stage in model.blocks for b in stage]
    assert [b.residual for b in blocks] == [True, False, True, False, True]  # a skip where the shape is kept
    assert [round(b.drop, 3) for b in blocks] == [0.0, 0.04, 0.08, 0.12, 0.16]  # timm: rate × index / blocks
    assert isinstance(blocks[0].conv_pw, torch.nn.Identity) and blocks[1].conv_pw[0].out_channels == 64
    assert blocks[1].conv_dw[0].groups == 64 and blocks[3].conv_dw[0].kernel_size == (5, 5)  # depthwise
    assert blocks[1].se.conv_reduce.out_channels == 4  # reduced from the block's input (16 × 0.25)
    assert all(isinstance(m, InvertedResidual) for m in blocks)
    assert any(isinstance(m, torch.nn.SiLU) for m in model.modules())
    x = pattern_images().x[:8]
    assert model(x).shape == (8, PATTERNS.classes)
    assert _schedule(RECIPES["efficientnet"], 150)(0) == pytest.approx(1 / 16)
    assert _schedule(RECIPES["efficientnet"], 150)(15) == pytest.approx(0.97)
    assert _schedule(RECIPES["efficientnet"], 150)(149) == pytest.approx(0.97 ** 14)
    assert EFFICIENTNET_LR == pytest.approx(0.048 * 32 / 1536)
    ema = ModelEmaV2(model, MODEL_EMA_DECAY)
    assert not ema.module.training and not any(p.requires_grad for p in ema.module.parameters())
    before = {k: v.clone() for k, v in ema.module.state_dict().items()}
    groups = _param_groups(model, RECIPES["efficientnet"], 1e-3)
    optimizer = torch.optim.RMSprop(groups, lr=1e-3, alpha=0.9, eps=1e-3, momentum=0.9)
    draw = lambda: (x, pattern_images().y[:8])  # noqa: E731
    train_field(tmp_path / "run", model, optimizer, draw, steps=3, lr_at=lambda s: 1.0, loss_fn=smoothed_cross_entropy,
                after_step=lambda: ema.update(model))
    moved = ema.module.state_dict()["conv_stem.1.running_mean"] - before["conv_stem.1.running_mean"]
    assert moved.abs().max() > 0  # BatchNorm's running stats averaged too (ModelEmaV2 walks the state dict)
    assert ema.module.conv_stem[1].num_batches_tracked == model.conv_stem[1].num_batches_tracked == 4  # copied
    stats = read_stats(tmp_path / "run")
    assert "classifier.weight" in set(stats["name"]) and not any(n.startswith("module.") for n in stats["name"])
    assert set(stats[stats["role"] == "state"]["key"]) == {"square_avg", "momentum_buffer"}
    assert "adam_state" in LEFT_OUT["efficientnet"]
    linear = torch.nn.Linear(2, 1)
    average = ModelEmaV2(linear, 0.9)
    start = linear.weight.detach().clone()
    with torch.no_grad():
        linear.weight.add_(1.0)
    average.update(linear)
    assert torch.allclose(average.module.weight, 0.9 * start + 0.1 * (start + 1))


def test_pinn_trains_on_its_pde_residual_by_autograd_on_the_inputs_and_is_judged_on_its_held_out_error(tmp_path):
    from sample_runs.data import POISSON
    from sample_runs.field import OUTCOME_METRICS, PINN_LR
    from sample_runs.field_models import PoissonPINN, _derivative, l2_relative_error, pinn_loss

    x = torch.linspace(-1, 1, 5).unsqueeze(1).requires_grad_(True)
    assert torch.allclose(_derivative(_derivative(x ** 3, x), x), 6 * x)
    assert not _derivative(torch.ones(5, 1), x).any()  # a u that does not depend on x (a detached network)
    torch.manual_seed(0)
    model = build_field_model("pinn", 1)
    assert all(not layer.bias.any() for layer in model.linears) and model.hidden == ["linears.1", "linears.2"]
    exact = PoissonPINN()
    exact.u = lambda points: torch.sin(math.pi * points)  # the solution: no residual, u(±1) = 0
    points = {"domain": torch.rand(16, 1) * 2 - 1, "boundary": torch.tensor([[-1.0], [1.0]])}
    losses = pinn_loss(exact(points), torch.zeros(2, 1))
    assert set(losses) == {"loss_pde", "loss_bc"} and float(sum(losses.values())) == pytest.approx(0.0, abs=1e-8)
    assert l2_relative_error(exact, POISSON.grid) == pytest.approx(0.0, abs=1e-7)
    with torch.no_grad():  # an eval loop measures the residual too
        residual, _ = model(points)
    assert residual.shape == (16, 1) and residual.grad_fn is None
    truth = make("healthy-pinn-s0", tmp_path / "run")
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    by_name = {name: frame.sort_values("step")["value"].tolist() for name, frame in scalars.groupby("name")}
    assert by_name["loss"] == pytest.approx([p + b for p, b in zip(by_name["loss_pde"], by_name["loss_bc"])], rel=1e-5)
    error = by_name["val_l2_relative_error"]
    assert len(error) == 150 and _mean(error[-10:]) < 0.5 * _mean(error[:10]) and truth.verdict == "healthy"
    assert OUTCOME_METRICS["pinn"].higher_is_better is False and RECIPES["pinn"].lr == PINN_LR
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert stats[stats["role"] == "grad"]["step"].nunique() == 150


def test_maml_adapts_fast_weights_by_second_order_inner_steps_and_is_judged_on_held_out_tasks(tmp_path):
    from sample_runs.data import SINUSOIDS, sinusoid_tasks_sampler
    from sample_runs.field import OUTCOME_METRICS, _data

    torch.manual_seed(0)
    model = build_field_model("maml", 1)
    tasks, query_y = sinusoid_tasks_sampler(2, 0)()
    assert tasks["support_x"].shape == (2, SINUSOIDS.shots, 1) and query_y.shape == (2, SINUSOIDS.queries, 1)
    params = dict(model.net.named_parameters())
    loss = torch.nn.functional.mse_loss(model.net(tasks["support_x"][0]), tasks["support_y"][0])
    grads = torch.autograd.grad(loss, list(params.values()))
    fast = model.adapt(tasks["support_x"][0], tasks["support_y"][0])
    for (name, p), g in zip(params.items(), grads):
        assert torch.allclose(fast[name], p - model.inner_lr * g, atol=1e-6)
    assert fast["out.weight"].grad_fn is not None  # differentiable: the outer loss reaches the params through it
    outer = torch.nn.functional.mse_loss(model(tasks), query_y)
    second = torch.autograd.grad(outer, list(params.values()))
    model.eval()  # first order: the same loss, another gradient (no path through the inner gradient)
    first = torch.autograd.grad(torch.nn.functional.mse_loss(model(tasks), query_y), list(params.values()))
    model.train()
    assert not all(torch.allclose(a, b) for a, b in zip(first, second))
    draw, eval_draw, _, chance = _data("maml", RECIPES["maml"], 0, 1)
    assert torch.equal(eval_draw()[1], eval_draw()[1]) and chance == pytest.approx(float((eval_draw()[1] ** 2).mean()))
    assert OUTCOME_METRICS["maml"].name == "val_loss"
    spy, meta_grads = _Spy(), []
    optimizer = torch.optim.Adam(_param_groups(model, RECIPES["maml"], 1e-3), lr=1e-3)
    outcome = train_field(tmp_path / "run", model, optimizer, draw, steps=3, lr_at=lambda step: 1.0, fault=spy,
                          eval_draw=eval_draw, eval_every=1, loss_fn=torch.nn.functional.mse_loss,
                          after_step=lambda: meta_grads.append({n: float(p.grad.norm())
                                                                for n, p in model.named_parameters()}))
    assert spy.stepped == [0, 1, 2] and len(outcome.metrics["val_loss"]) == 3
    stats = read_stats(tmp_path / "run")
    recorded = stats[(stats["role"] == "grad") & (stats["step"] == 2)].set_index("name")["norm"]
    # the meta-gradient the optimizer stepped on, not the inner loop's torch.autograd.grad results
    assert recorded.to_dict() == pytest.approx(meta_grads[2], rel=1e-5)
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}


def test_pix2pix_steps_its_discriminator_then_its_generator_each_iteration_as_junyanz_writes_it(tmp_path):
    from sample_runs.data import EDGES, edge_photo_pairs
    from sample_runs.field import OUTCOME_METRICS, _data
    from sample_runs.training import train_pix2pix

    pairs = edge_photo_pairs()
    assert pairs.x.shape == (EDGES.images, 1, EDGES.size, EDGES.size) and pairs.y.shape[1] == 3
    assert pairs.x.min() == -1 and pairs.x.max() == 1 and pairs.y.abs().max() <= 1
    torch.manual_seed(0)
    model = build_field_model("pix2pix", 3)
    fake = model.netG(pairs.x[:4])
    assert fake.shape == (4, 3, EDGES.size, EDGES.size) and fake.abs().max() <= 1  # tanh
    assert model.netD(torch.cat([pairs.x[:4], fake], 1)).shape == (4, 1, 2, 2)  # one logit a patch
    assert float(model.netD.model[0].weight.std()) == pytest.approx(0.02, rel=0.1)  # init_weights normal 0.02
    groups = _param_groups(model, RECIPES["pix2pix"], 2e-4)
    optimizers = tuple(torch.optim.Adam([g for g in groups if g["layer"].startswith(net + ".")], lr=2e-4,
                                        betas=(0.5, 0.999)) for net in ("netG", "netD"))
    draw, eval_draw, _, _ = _data("pix2pix", RECIPES["pix2pix"], 0, 1)
    spy = _Spy()
    outcome = train_pix2pix(tmp_path / "run", model, optimizers, draw, steps=3, lr_at=lambda step: 1.0, fault=spy,
                            eval_metrics=lambda: {"val_l1_error": 0.5})
    assert spy.stepped == spy.zeroed == [0, 0, 1, 1, 2, 2] and eval_draw is None  # D's, then G's
    assert outcome.metrics["val_l1_error"] == [0.5] * 3 and OUTCOME_METRICS["pix2pix"].name == "val_l1_error"
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    assert {"loss_G_GAN", "loss_G_L1", "loss_D_real", "loss_D_fake"} <= set(scalars["name"])
    stats = read_stats(tmp_path / "run")
    grads = set(stats[stats["role"] == "grad"]["name"])
    assert "netG.down.0.1.weight" in grads and "netD.model.0.weight" in grads
    assert _schedule(RECIPES["pix2pix"], 150)(74) == 1.0 and _schedule(RECIPES["pix2pix"], 150)(149) == pytest.approx(
        2 / 150)
    assert "healthy_accum" in LEFT_OUT["pix2pix"]


def _scalars_by_name(run):
    scalars = ds.dataset(str(run / "scalars"), format="parquet").to_table().to_pandas()
    return {name: frame.sort_values("step")["value"].tolist() for name, frame in scalars.groupby("name")}


def test_bilstm_crf_scores_every_tag_path_by_the_forward_algorithm_and_decodes_the_best_by_viterbi(tmp_path):
    import itertools

    from sample_runs.data import TAGGING, TAGS, tagged_sentences
    from sample_runs.field import _data
    from sample_runs.field_models import (START_TAG, STOP_TAG, _entity_spans, crf_log_partition, crf_nll,
                                          crf_path_score, viterbi_decode)

    torch.manual_seed(0)
    tags = len(TAGS) + 2
    feats, transitions = torch.randn(2, 3, tags), torch.randn(tags, tags)
    mask = torch.tensor([[True, True, True], [True, True, False]])  # the second sentence is padded
    gold = torch.tensor([[1, 2, 0], [3, 4, -100]])
    by_hand = transitions[1, START_TAG] + feats[0, 0, 1] + transitions[2, 1] + feats[0, 1, 2] + \
        transitions[0, 2] + feats[0, 2, 0] + transitions[STOP_TAG, 0]
    assert crf_path_score(feats, transitions, mask, gold)[0] == pytest.approx(float(by_hand), abs=1e-5)
    for b, length in enumerate((3, 2)):  # brute force: every tag path of the sentence's words
        paths = torch.tensor(list(itertools.product(range(tags), repeat=length)))
        one = (feats[b: b + 1, :length].expand(len(paths), -1, -1), transitions, mask[b: b + 1, :length].expand(
            len(paths), -1))
        scores = crf_path_score(*one, paths)
        assert crf_log_partition(feats, transitions, mask)[b] == pytest.approx(float(torch.logsumexp(scores, 0)),
                                                                               abs=1e-4)
        best_score, best_paths = viterbi_decode(feats, transitions, mask)
        assert best_paths[b] == paths[scores.argmax()].tolist()
        assert best_score[b] == pytest.approx(float(scores.max()), abs=1e-4)
    nll = crf_nll((feats, transitions, mask), gold)
    assert nll == pytest.approx(float((crf_log_partition(feats, transitions, mask) -
                                       crf_path_score(feats, transitions, mask, gold)).mean()))
    assert _entity_spans([1, 2, 0, 3, 4, 4, 0, 2]) == {(0, 2, 0), (3, 6, 1), (7, 8, 0)}

    sentences = tagged_sentences()
    assert sentences.x.shape == (TAGGING.sentences, TAGGING.longest) and int(sentences.x.max()) < TAGGING.vocab
    assert bool(((sentences.x == 0) == (sentences.y == -100)).all())  # padding on both sides alike
    model = build_field_model("bilstm_crf", len(TAGS))
    assert model.transitions.shape == (tags, tags) and bool((model.transitions[START_TAG] == -10000).all())
    assert bool((model.transitions[:, STOP_TAG] == -10000).all())
    first, second = model(sentences.x[:4])[0], model(sentences.x[:4])[0]
    assert not torch.equal(first, second)  # the tutorial's init_hidden: a randn initial state at every call

    truth = make("healthy-bilstm_crf-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    assert _mean(by_name["loss"][-10:]) < 0.2 * _mean(by_name["loss"][:10]) and truth.verdict == "healthy"
    assert by_name["val_f1"][0] < 0.2 and by_name["val_f1"][-1] > 0.7
    assert "adam_state" in LEFT_OUT["bilstm_crf"] and RECIPES["bilstm_crf"].optimizer == "plain_sgd"

    draw, _, classes, chance = _data("bilstm_crf", RECIPES["bilstm_crf"], 0, 1)
    assert 0 < chance < by_name["loss"][0]
    torch.manual_seed(0)
    model = build_field_model("bilstm_crf", classes)
    optimizer = torch.optim.SGD(_param_groups(model, RECIPES["bilstm_crf"], 0.1), lr=0.1)
    stepped = []
    train_field(tmp_path / "steps", model, optimizer, draw, steps=3, lr_at=lambda step: 1.0, loss_fn=crf_nll,
                after_step=lambda: stepped.append({n: float(p.grad.norm()) for n, p in model.named_parameters()}))
    stats = read_stats(tmp_path / "steps")
    recorded = stats[(stats["role"] == "grad") & (stats["step"] == 2)].set_index("name")["norm"]
    assert recorded.to_dict() == pytest.approx(stepped[2], rel=1e-5) and "transitions" in recorded


def test_pixelcnn_masks_make_each_pixel_depend_only_on_the_pixels_before_it_and_its_healthy_run_learns(tmp_path):
    from sample_runs.data import digit_levels
    from sample_runs.field import DIGIT_LEVELS, _data
    from sample_runs.field_models import MaskedConv2d

    levels = digit_levels()
    assert levels.y.min() == 0 and levels.y.max() == DIGIT_LEVELS - 1
    assert torch.equal((levels.x * 16).round().long().squeeze(1), levels.y)
    torch.manual_seed(0)
    model = build_field_model("pixelcnn", DIGIT_LEVELS)
    x = torch.rand(1, 1, 8, 8, requires_grad=True)
    logits = model(x)
    assert logits.shape == (1, DIGIT_LEVELS, 8, 8)
    order = torch.arange(64).reshape(8, 8)
    for pixel in range(64):
        (grad,) = torch.autograd.grad(logits[0, :, pixel // 8, pixel % 8].sum(), x, retain_graph=True)
        assert not grad[0, 0][order >= pixel].any()  # nothing from the pixel itself nor after it
        row, column = divmod(pixel, 8)
        assert column == 0 or grad[0, 0, row, column - 1] != 0  # its left neighbour is seen
        assert row == 0 or grad[0, 0, row - 1, column] != 0  # and the pixel above it
    conv = MaskedConv2d("B", 1, 1, 3, padding=1)
    with torch.no_grad():
        conv.weight.fill_(1.0)
    conv(torch.zeros(1, 1, 4, 4))  # common PyTorch code masks weight.data in place at every forward
    assert conv.weight[0, 0].tolist() == [[1, 1, 1], [1, 1, 0], [0, 0, 0]]
    assert model.conv_in.mask[0, 0, 3].tolist() == [1, 1, 1, 0, 0, 0, 0]  # type A: not even the centre

    truth = make("healthy-pixelcnn-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    chance = _data("pixelcnn", RECIPES["pixelcnn"], 0, 1)[3]
    assert by_name["loss"][0] > chance > 1.2 * _mean(by_name["loss"][-10:]) and truth.verdict == "healthy"
    assert by_name["val_loss"][-1] < 0.7 * by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}


def test_neural_ode_integrates_by_hand_written_rk4_and_fits_the_spiral_from_random_windows(tmp_path):
    from sample_runs.data import SPIRAL, SPIRAL_A, spiral_trajectory, spiral_windows_sampler
    from sample_runs.field_models import odeint_rk4, trajectory_error

    t = torch.linspace(0, 2, 21)
    decay = odeint_rk4(lambda _, y: -y, torch.ones(3), t)
    assert decay.shape == (21, 3) and torch.allclose(decay[:, 0], torch.exp(-t), atol=1e-5)
    times, true_y = spiral_trajectory()
    assert true_y.shape == (SPIRAL.data_size, 1, 2) and true_y[0].tolist() == [[2.0, 0.0]]
    coarse = odeint_rk4(lambda _, y: y ** 3 @ SPIRAL_A, true_y[0], times)  # one step an interval, as the model's
    assert float((coarse - true_y).abs().max()) < 1e-3
    y0, windows = spiral_windows_sampler(5, 0)()
    assert windows.shape == (SPIRAL.batch_time, 5, 1, 2) and torch.equal(windows[0], y0)
    torch.manual_seed(0)
    model = build_field_model("neural_ode", 2)
    assert model(y0).shape == windows.shape and model(y0).grad_fn is not None
    exact = build_field_model("neural_ode", 2)
    del exact.func
    exact.func = lambda _, y: y ** 3 @ SPIRAL_A  # the true dynamics: the demo's test loss is the solver's error
    assert trajectory_error(exact) < 1e-4

    truth = make("healthy-neural_ode-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    assert _mean(by_name["loss"][-10:]) < 0.3 * _mean(by_name["loss"][:10]) and truth.verdict == "healthy"
    assert by_name["val_trajectory_error"][-1] < 0.5 * by_name["val_trajectory_error"][0]
    assert RECIPES["neural_ode"].optimizer == "rmsprop" and RECIPES["neural_ode"].lr == 1e-3
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"square_avg"} and "adam_state" in LEFT_OUT["neural_ode"]
    assert stats[stats["role"] == "grad"]["step"].nunique() == 150


def test_nerf_renders_its_rays_by_tiny_nerfs_volume_rendering_and_its_healthy_run_learns_the_held_out_view(tmp_path):
    from sample_runs.data import NERF_SCENE, get_rays, nerf_views, pose_spherical
    from sample_runs.field import OUTCOME_METRICS, _data
    from sample_runs.field_models import positional_encoding

    points = torch.randn(5, 3)
    encoded = positional_encoding(points, 6)
    assert encoded.shape == (5, 3 + 3 * 2 * 6) and torch.equal(encoded[:, :3], points)
    assert torch.allclose(encoded[:, 3 + 6 * 5: 3 + 6 * 5 + 3], torch.sin(32 * points))  # the last sin: 2^5 x
    assert torch.allclose(encoded[:, -3:], torch.cos(32 * points))

    c2w = pose_spherical(30.0, -30.0, NERF_SCENE.radius)
    rays_o, rays_d = get_rays(NERF_SCENE.size, NERF_SCENE.focal, c2w)
    assert rays_o.shape == rays_d.shape == (NERF_SCENE.size, NERF_SCENE.size, 3)
    assert float(rays_o[0, 0].norm()) == pytest.approx(NERF_SCENE.radius, rel=1e-5)
    centre = rays_d[NERF_SCENE.size // 2, NERF_SCENE.size // 2]  # the centre pixel's ray looks at the origin
    assert torch.allclose(torch.nn.functional.normalize(centre, dim=0), -rays_o[0, 0] / NERF_SCENE.radius, atol=1e-5)
    train, held = nerf_views()
    assert train.x.shape == (NERF_SCENE.views, NERF_SCENE.size ** 2, 6) and held.y.shape == (1, NERF_SCENE.size ** 2, 3)
    hit = held.y.sum(-1) > 0
    assert 0.1 < float(hit.float().mean()) < 0.5 and float(held.y.max()) <= 1.0  # spheres on a black background

    torch.manual_seed(0)
    model = build_field_model("nerf", 3)
    assert model.layers[5].in_features == 64 + 39 and model.layers[4].in_features == 64  # the skip after layer 4
    for layer in (*model.layers, model.output):  # Keras's Dense: glorot uniform, zero bias
        bound = math.sqrt(6 / (layer.in_features + layer.out_features))
        largest = float(layer.weight.detach().abs().max())
        assert 0.9 * bound < largest <= bound
        assert not layer.bias.any()
    rays = held.x[0, :8]
    first, second = model(rays), model(rays)
    assert first.shape == (8, 3) and not torch.equal(first, second)  # stratified depths in training
    model.eval()
    assert torch.equal(model(rays), model(rays))  # the evenly spaced depths in eval (rand=False)
    model.network = lambda pts: torch.zeros(*pts.shape[:-1], 4)  # no density anywhere: nothing is drawn
    assert not model(rays).any()
    model.network = lambda pts: torch.cat([torch.zeros(*pts.shape[:-1], 3), torch.ones(*pts.shape[:-1], 1)], -1)
    assert torch.allclose(model(rays), torch.full((8, 3), 0.5))  # weights sum to 1 (the last bin 1e10 long)

    truth = make("healthy-nerf-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    chance = _data("nerf", RECIPES["nerf"], 0, 1)[3]
    val = by_name["val_loss"]
    assert len(val) == 150 and val[0] > chance > 1.2 * _mean(val[-10:]) and truth.verdict == "healthy"
    assert OUTCOME_METRICS["nerf"].name == "val_loss" and "judged on val_loss" in truth.notes
    assert _mean(by_name["loss"][-10:]) < 0.5 * _mean(by_name["loss"][:10])
    assert RECIPES["nerf"].lr == 5e-4 and RECIPES["nerf"].batch == NERF_SCENE.size ** 2  # one image's rays
    assert not LEFT_OUT.get("nerf")


def _xifengguo_dense_capsule(weight, u, routings):
    """XifengGuo/CapsNet-Pytorch's `DenseCapsule.forward`, as written there (matmul, squeeze)."""
    from sample_runs.field_models import squash

    x_hat = torch.squeeze(torch.matmul(weight, u[:, None, :, :, None]), dim=-1)
    x_hat_detached = x_hat.detach()
    b = torch.zeros(u.size(0), weight.shape[0], weight.shape[1])
    for i in range(routings):
        c = torch.softmax(b, dim=1)
        if i == routings - 1:
            outputs = squash(torch.sum(c[:, :, :, None] * x_hat, dim=-2, keepdim=True))
        else:
            outputs = squash(torch.sum(c[:, :, :, None] * x_hat_detached, dim=-2, keepdim=True))
            b = b + torch.sum(outputs * x_hat_detached, dim=-1)
    return torch.squeeze(outputs, dim=-2)


def test_capsnet_routes_by_agreement_masks_its_decoder_by_the_true_class_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import _data
    from sample_runs.field_models import CAPSNET_RECONSTRUCTION, DenseCapsule, caps_loss, margin_loss, squash

    s = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    assert squash(s)[0].tolist() == pytest.approx([25 / 26 * 0.6, 25 / 26 * 0.8]) and not squash(s)[1].any()
    torch.manual_seed(0)
    capsule = DenseCapsule(12, 8, 4, 16, routings=3)
    u = squash(torch.randn(2, 12, 8))
    ours, theirs = capsule(u), _xifengguo_dense_capsule(capsule.weight, u, 3)
    assert torch.allclose(ours, theirs, atol=1e-6)
    (grad_ours,) = torch.autograd.grad(ours.sum(), capsule.weight)
    (grad_theirs,) = torch.autograd.grad(theirs.sum(), capsule.weight)
    assert torch.allclose(grad_ours, grad_theirs, atol=1e-6)  # û detached in the first two iterations alike
    one = DenseCapsule(12, 8, 4, 16, routings=1)  # no routing: equal coupling 1/4 to every output capsule
    u_hat = torch.einsum("jiop,bip->bjio", one.weight, u)
    assert torch.allclose(one(u), squash(u_hat.sum(2) / 4), atol=1e-6)

    length = torch.tensor([[0.95, 0.3, 0.05], [0.5, 0.2, 0.0]])
    labels = torch.tensor([0, 1])
    by_hand = [0.5 * 0.2 ** 2, 0.7 ** 2 + 0.5 * 0.4 ** 2]
    assert margin_loss(length, labels).tolist() == pytest.approx(by_hand)
    images, reconstruction = torch.rand(2, 784), torch.rand(2, 784)
    expected = sum(by_hand) / 2 + CAPSNET_RECONSTRUCTION * float(((reconstruction - images) ** 2).sum(1).mean())
    assert float(caps_loss((length, reconstruction, images), labels)) == pytest.approx(expected, rel=1e-5)

    model = build_field_model("capsnet", 10)
    assert model.digitcaps.weight.shape == (10, 8 * 6 * 6, 16, 8) and model.digitcaps.routings == 3
    decoded = []
    model.decoder.register_forward_hook(lambda module, args, output: decoded.append(args[0].view(-1, 10, 16)))
    x = torch.rand(3, 1, 28, 28)
    length, reconstruction, target = model(x, torch.tensor([1, 2, 3]))
    assert length.shape == (3, 10) and reconstruction.shape == (3, 784) and torch.equal(target, x.flatten(1))
    kept = decoded[0].abs().sum(-1) > 0  # the decoder sees the given class's capsule only
    assert kept.tolist() == [[k == label for k in range(10)] for label in (1, 2, 3)]
    model(x)
    assert (decoded[1].abs().sum(-1) > 0).nonzero()[:, 1].tolist() == length.argmax(1).tolist()  # no label: the longest

    seen = []

    class Spy(torch.nn.Module):  # what the loop hands the model's forward, in training and in eval
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x, y=None):
            seen.append((self.training, y))
            return self.linear(x)

    spy = Spy()
    batch = (torch.randn(4, 2), torch.tensor([0, 1, 0, 1]))
    train_field(None, spy, torch.optim.Adam(spy.parameters()), lambda: batch, steps=1, lr_at=lambda _: 1.0,
                eval_draw=lambda: batch, labels_to_model=True,
                fault=faults.MislabeledBatch(t0=0, length=1, classes=2))
    assert [(training, y is None) for training, y in seen] == [(False, True), (False, True), (True, False)]
    assert seen[2][1].tolist() == [1, 0, 1, 0]  # a batch with wrong labels reaches the decoder's mask too

    truth = make("healthy-capsnet-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    chance = _data("capsnet", RECIPES["capsnet"], 0, 1)[3]
    assert by_name["loss"][0] > chance > 3 * _mean(by_name["loss"][-10:]) and truth.verdict == "healthy"
    assert by_name["val_accuracy"][0] < 0.3 and by_name["val_accuracy"][-1] > 0.7
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert stats[stats["role"] == "grad"]["step"].nunique() == 150 and not LEFT_OUT.get("capsnet")


def _pranz24_sample(policy, state):
    """pranz24/pytorch-soft-actor-critic's `GaussianPolicy.sample`, as written there (action_scale 1, bias 0)."""
    mean, log_std = policy.forward(state)
    std = log_std.exp()
    normal = torch.distributions.Normal(mean, std)
    x_t = normal.rsample()
    y_t = torch.tanh(x_t)
    action = y_t * 1.0 + 0.0
    log_prob = normal.log_prob(x_t)
    log_prob -= torch.log(1.0 * (1 - y_t.pow(2)) + 1e-6)
    log_prob = log_prob.sum(1, keepdim=True)
    mean = torch.tanh(mean) * 1.0 + 0.0
    return action, log_prob, mean


def test_sac_samples_squashed_gaussians_averages_its_target_critic_and_its_healthy_run_learns_to_reach_the_goal(
        tmp_path):
    from sample_runs.data import POINT_MASS, PointMass
    from sample_runs.field import NETWORKS, OUTCOME_METRICS, SAC_LR, _data
    from sample_runs.field_models import SoftActorCritic
    from sample_runs.training import ContinuousReplayBuffer, soft_update, train_sac

    env = PointMass(0, envs=3)
    obs = env.reset()
    assert obs.shape == (3, POINT_MASS.observations) and torch.equal(PointMass(0, envs=3).reset(), obs)
    point, goal = obs[:, :2].double().numpy(), obs[:, 2:].double().numpy()
    actions = np.array([[1.0, 0.0], [-3.0, 0.5], [0.0, 0.0]])
    moved, reward = env.step(actions)
    expected = np.clip(point + POINT_MASS.dt * POINT_MASS.speed * np.clip(actions, -1, 1), -2, 2)
    assert np.allclose(moved[:, :2].numpy(), expected, atol=1e-6) and torch.equal(moved[:, 2:], obs[:, 2:])
    assert reward == pytest.approx(-np.linalg.norm(expected - goal, axis=1), abs=1e-6)  # the action clipped to ±1

    torch.manual_seed(0)
    model = build_field_model("sac", POINT_MASS.actions)
    assert isinstance(model, SoftActorCritic) and float(model.log_alpha) == 0.0
    state = torch.randn(5, POINT_MASS.observations)
    torch.manual_seed(1)
    ours = model.policy.sample(state)
    torch.manual_seed(1)
    theirs = _pranz24_sample(model.policy, state)
    for a, b in zip(ours, theirs):
        assert torch.allclose(a, b, atol=1e-6)
    action, log_prob, mean = ours
    assert action.abs().max() < 1 and log_prob.shape == (5, 1) and torch.allclose(mean, torch.tanh(model.policy(state)[0]))
    with torch.no_grad():
        model.policy.log_std_linear.bias.fill_(50.0)
    assert torch.equal(model.policy(state)[1], torch.full((5, 2), 2.0))  # log-std clamped at LOG_SIG_MAX
    q1, q2 = model(state, action)
    assert q1.shape == q2.shape == (5, 1) and not torch.equal(q1, q2)  # two Q heads, initialised apart
    for layer in (model.policy.linear1, model.critic.linear5):  # pranz24's weights_init_: xavier uniform, zero bias
        bound = math.sqrt(6 / (layer.in_features + layer.out_features))
        assert float(layer.weight.abs().max()) <= bound and not layer.bias.any()

    target = build_field_model("sac", 2).critic
    before = [p.detach().clone() for p in target.parameters()]
    soft_update(target, model.critic, 0.005)
    for old, new, source in zip(before, target.parameters(), model.critic.parameters()):
        assert torch.allclose(new, 0.995 * old + 0.005 * source.detach(), atol=1e-7)
    memory = ContinuousReplayBuffer(10, 4, 2)
    memory.push(np.ones((4, 4)), np.zeros((4, 2)), -np.arange(4.0), np.ones((4, 4)), np.ones(4))
    s, a, r, s2, m = memory.sample(4, np.random.default_rng(0))
    assert sorted(r.flatten().tolist()) == [-3.0, -2.0, -1.0, 0.0] and r.shape == m.shape == (4, 1)  # no repeats

    assert NETWORKS["sac"] == ("policy", "critic", "log_alpha") and RECIPES["sac"].lr == SAC_LR == 3e-4
    spy = _Spy()
    model = build_field_model("sac", 2)
    groups = _param_groups(model, RECIPES["sac"], 3e-4)
    optimizers = tuple(torch.optim.Adam([g for g in groups if g["layer"] == net or g["layer"].startswith(net + ".")])
                       for net in NETWORKS["sac"])
    outcome = train_sac(tmp_path / "spy", model, optimizers, PointMass, steps=2, lr_at=lambda step: 1.0, seed=0,
                        max_steps=POINT_MASS.max_steps, observations=4, actions=2, fault=spy, accumulation=2,
                        batch=256, eval_every=1)
    updates = [s for s in range(2) for _ in range(POINT_MASS.max_steps - (256 // POINT_MASS.envs if s == 0 else 0))]
    assert spy.began == [0, 1] and spy.zeroed == spy.stepped == [s for s in updates for _ in range(3)]
    assert spy.batches == [s for s in updates for _ in range(2)]  # two micro-batches an update
    stats = read_stats(tmp_path / "spy")
    assert set(stats.query("role == 'param'")["name"]) == {n for n, _ in model.named_parameters()}  # no target critic
    assert len(outcome.losses) == 2 and all(math.isfinite(v) for v in outcome.losses)

    truth = make("healthy-sac-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    chance = _data("sac", RECIPES["sac"], 0, 1)[3]
    shortfall = [-r for r in by_name["reward"]]
    assert OUTCOME_METRICS["sac"].name == "reward" and "judged on reward" in truth.notes and truth.verdict == "healthy"
    assert _mean(shortfall[:10]) > 0.9 * chance and _mean(shortfall[-10:]) < 0.5 * chance
    assert len(by_name["eval_reward"]) == 15 and by_name["eval_reward"][-1] > by_name["eval_reward"][0]
    assert by_name["alpha"][-1] < by_name["alpha"][0]  # the temperature falls towards the target entropy
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert stats[stats["role"] == "grad"]["step"].nunique() == 150 and not LEFT_OUT.get("sac")
    assert not any(s.arch == "sac" and s.family == "healthy_spike" for s in SCENARIOS.values())  # no targets


def test_mae_masks_three_quarters_of_each_images_patches_reconstructs_them_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import MAE_LR, _data
    from sample_runs.field_models import MAE_PATCH, get_2d_sincos_pos_embed, patchify

    emb = get_2d_sincos_pos_embed(64, 7, cls_token=True)
    assert emb.shape == (50, 64) and not emb[0].any()
    omega = 1 / 10000 ** (np.arange(16) / 16)
    i, j = 2, 5  # row 2, column 5: the first half encodes the column, the second the row (mae's meshgrid(w, h))
    assert np.allclose(emb[1 + 7 * i + j], np.concatenate([np.sin(j * omega), np.cos(j * omega),
                                                           np.sin(i * omega), np.cos(i * omega)]))
    imgs = torch.rand(2, 1, 28, 28)
    patches = patchify(imgs, MAE_PATCH)
    assert patches.shape == (2, 49, 16)
    assert torch.equal(patches[1, 7 * i + j], imgs[1, 0, 4 * i: 4 * i + 4, 4 * j: 4 * j + 4].flatten())

    torch.manual_seed(0)
    model = build_field_model("mae", 10)
    assert "pos_embed" not in dict(model.named_parameters()) and model.pos_embed.shape == (1, 50, 64)
    x = torch.randn(3, 49, 8)
    kept, mask, ids_restore = model.random_masking(x, 0.75)
    assert kept.shape == (3, 12, 8) and mask.sum(1).tolist() == [37.0] * 3
    for n in range(3):  # the kept tokens are the unmasked ones, each sample its own mask
        assert torch.equal(kept[n].sort(0).values, x[n][mask[n] == 0].sort(0).values)
    assert not torch.equal(mask[0], mask[1])
    assert torch.equal(torch.gather(torch.argsort(ids_restore, 1), 1, ids_restore), torch.arange(49).expand(3, -1))

    torch.manual_seed(3)
    loss, pred, mask = model(imgs)
    assert pred.shape == (2, 49, 16) and mask.sum(1).tolist() == [37.0, 37.0]
    target = patchify(imgs, MAE_PATCH)
    target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5  # norm_pix_loss
    by_hand = (((pred - target) ** 2).mean(-1) * mask).sum() / mask.sum()
    assert float(loss) == pytest.approx(float(by_hand), rel=1e-5)
    exact = torch.where(mask[..., None].bool(), target, pred + 5)  # right on every masked patch, wrong on the rest
    assert float(model.forward_loss(imgs, exact, mask)) == pytest.approx(0.0, abs=1e-10)
    changed = imgs.clone()
    hidden = int(mask[0].nonzero()[0])
    changed[0, 0, 4 * (hidden // 7): 4 * (hidden // 7) + 4, 4 * (hidden % 7): 4 * (hidden % 7) + 4] += 1.0
    torch.manual_seed(3)
    _, pred_changed, _ = model(changed)
    assert torch.equal(pred_changed, pred)  # the encoder never sees a masked patch

    recipe = RECIPES["mae"]
    assert recipe.betas == (0.9, 0.95) and recipe.weight_decay == 0.05 and recipe.lr == MAE_LR and recipe.clip is None
    schedule = _schedule(recipe, 150)
    assert schedule(0) == 0.0 and schedule(7) == pytest.approx(7 / 15)  # mae's lr_sched: warm-up from 0, per step
    assert schedule(15) == 1.0 and schedule(82) == pytest.approx(0.5 * (1 + math.cos(math.pi * 67 / 135)))
    decay = {}
    for group in _param_groups(model, recipe, 1.0):
        decay.setdefault(group["layer"], []).append(group["weight_decay"])
    assert decay["cls_token"] == decay["mask_token"] == [0.0]  # loose: no decay (mae decays them, 3-D)
    assert decay["blocks.0"] == [0.05, 0.0]  # timm's add_weight_decay: matrices, not biases and norms

    truth = make("healthy-mae-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    chance = _data("mae", recipe, 0, 1)[3]
    loss = by_name["loss"]
    assert loss[0] > chance > 1.2 * _mean(loss[-10:]) and truth.verdict == "healthy"
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.5 * by_name["val_loss"][0]
    assert not LEFT_OUT.get("mae") and not any(s.arch == "mae" and s.family == "healthy_spike"
                                               for s in SCENARIOS.values())  # mae's loop drops the labels


def _naive_wkv(time_decay, time_first, k, v):
    """RWKV-v4's WKV by its formula, without the running maximum: with w = exp(time_decay),
    y_t = (Σ_{i<t} e^{−(t−1−i)w + k_i} v_i + e^{u + k_t} v_t) / (the same with v = 1)."""
    w, u = torch.exp(time_decay.double()), time_first.double()
    k, v = k.double(), v.double()
    ys = []
    for t in range(k.shape[1]):
        weights = [torch.exp(-(t - 1 - i) * w + k[:, i]) for i in range(t)] + [torch.exp(u + k[:, t])]
        ys.append(sum(a * v[:, i] for i, a in enumerate(weights)) / sum(weights))
    return torch.stack(ys, dim=1)


def test_rwkv_mixes_time_by_its_wkv_recurrence_trains_with_its_lr_groups_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import RWKV_LR_FINAL_RATIO, RWKV_WARMUP
    from sample_runs.field_models import CONTEXT, RWKV_LR, L2Wrap, rwkv_loss, wkv

    torch.manual_seed(0)
    time_decay, time_first = torch.randn(5), torch.randn(5)
    k, v = 3 * torch.randn(2, 7, 5), torch.randn(2, 7, 5)
    assert torch.allclose(wkv(time_decay, time_first, k, v).double(), _naive_wkv(time_decay, time_first, k, v),
                          atol=1e-5)
    huge = wkv(time_decay, time_first, k + 200, v)  # e^{k} overflows float32: the running maximum keeps it finite
    assert torch.isfinite(huge).all() and torch.allclose(huge, wkv(time_decay, time_first, k, v), atol=1e-5)
    assert wkv(time_decay, time_first, k.bfloat16(), v.bfloat16()).dtype == torch.bfloat16

    model = build_field_model("rwkv", 27)
    att = model.blocks[1].att
    x = torch.randn(2, 4, 32)
    shifted = att.time_shift(x)
    assert torch.equal(shifted[:, 0], torch.zeros(2, 32)) and torch.equal(shifted[:, 1:], x[:, :-1])
    assert not hasattr(model.blocks[1], "ln0") and hasattr(model.blocks[0], "ln0")  # ln0 after the embedding only
    h = torch.arange(32) / 31
    assert torch.allclose(att.time_decay, -5 + 8 * h ** 2.0)  # layer 1 of 2: the exponent 0.7 + 1.3
    assert torch.allclose(att.time_first, math.log(0.3) + 0.5 * torch.tensor([(i + 1) % 3 - 1 for i in range(32)]))
    assert torch.allclose(att.time_mix_k.flatten(), (torch.arange(32) / 32) ** 0.5)
    for name, p in model.named_parameters():  # RWKV-v4neo's generate_init_weight
        if name.endswith(("att.key.weight", "att.receptance.weight", "att.output.weight", "ffn.value.weight",
                          "ffn.receptance.weight")):
            assert not p.any(), name
    assert float(model.emb.weight.detach().abs().max()) <= RWKV_LR
    head = model.head.weight.detach()  # 27 × 32: fewer rows than columns, so orthogonal at gain 0.5 alone
    assert torch.allclose(head @ head.T, 0.25 * torch.eye(27), atol=1e-5)
    key = model.blocks[0].ffn.key.weight.detach()  # 128 × 32: gain sqrt(128 / 32)
    assert torch.allclose(key.T @ key, 4 * torch.eye(32), atol=1e-5)

    logits = torch.randn(2, 3, 27, requires_grad=True)
    targets = torch.randint(0, 27, (2, 3))
    loss = rwkv_loss(logits, targets)
    plain = torch.nn.functional.cross_entropy(logits.detach().flatten(0, 1), targets.flatten())
    assert float(loss) == pytest.approx(float(plain))  # L2Wrap passes the loss through
    loss.backward()
    reference = logits.detach().clone().requires_grad_(True)
    torch.nn.functional.cross_entropy(reference.flatten(0, 1), targets.flatten()).backward()
    extra = logits.grad - reference.grad
    top = logits.detach().max(-1, keepdim=True)
    expected = torch.zeros_like(logits).scatter_(-1, top.indices, top.values * 1e-4 / 6)
    assert torch.allclose(extra, expected, atol=1e-8) and L2Wrap.apply is not None

    recipe = RECIPES["rwkv"]
    assert recipe.optimizer == "adam" and recipe.betas == (0.9, 0.99) and recipe.clip == 1.0
    assert recipe.weight_decay == 0.0 and recipe.lr == RWKV_LR
    groups = _param_groups(model, recipe, 1.0)
    scale = {id(p): g["my_lr_scale"] for g in groups for p in g["params"]}
    assert all(g["weight_decay"] == 0.0 and g["lr"] == g["my_lr_scale"] for g in groups)
    for name, p in model.named_parameters():  # v4neo's layerwise_lr: time_decay 2x, time_first 3x, the rest 1x
        assert scale[id(p)] == (2.0 if "time_decay" in name else 3.0 if "time_first" in name else 1.0), name
    optimizer = torch.optim.Adam(groups)
    assert optimizer.defaults["eps"] == 1e-8
    schedule = _schedule(recipe, 150)
    assert schedule(0) == 0.2 and schedule(5) == pytest.approx(0.6)  # v4neo: × (0.2 + 0.8 step / w_step), no decay yet
    assert schedule(RWKV_WARMUP) == pytest.approx(RWKV_LR_FINAL_RATIO ** (1 / 140))
    assert schedule(149) == pytest.approx(RWKV_LR_FINAL_RATIO)  # lr_init · exp(log(lr_final / lr_init) · progress)
    assert schedule(80) == pytest.approx(RWKV_LR_FINAL_RATIO ** (71 / 140))

    truth = make("healthy-rwkv-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and loss[0] == pytest.approx(math.log(27), rel=0.05)  # zero-init blocks: uniform
    assert _mean(loss[-10:]) < 0.4 * _mean(loss[:10])
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.5 * by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    io = stats[(stats["role"] == "input") & (stats["step"] == 0)]
    assert io["shape"].tolist() == [f"16x{CONTEXT}"] and io["kind"].tolist() == ["index"]
    assert not LEFT_OUT.get("rwkv")
    assert any(s.arch == "rwkv" and s.family == "healthy_spike" for s in SCENARIOS.values())  # next tokens: targets
    assert not any(s.arch == "rwkv" and s.family in ("batch_scale", "batch_nan") for s in SCENARIOS.values())


def _simplex_projection(z, iterations=200):
    """The Euclidean projection of a vector onto the simplex by bisection on τ: Σ max(z − τ, 0) = 1."""
    low, high = float(z.min()) - 1, float(z.max())
    for _ in range(iterations):
        tau = (low + high) / 2
        low, high = (tau, high) if float(torch.clamp(z - tau, min=0).sum()) > 1 else (low, tau)
    return torch.clamp(z - (low + high) / 2, min=0)


def test_tabnet_masks_by_sparsemax_normalises_ghost_batches_updates_its_prior_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import TABNET_LR_STEP
    from sample_runs.field_models import (TABNET_LAMBDA_SPARSE, TABNET_VIRTUAL_BATCH, GhostBatchNorm, sparsemax,
                                          tabnet_loss)

    out = sparsemax(torch.tensor([[1.0, 0.5, -1.0]]))  # k = 2: τ = (1 + 0.5 − 1) / 2
    assert torch.allclose(out, torch.tensor([[0.75, 0.25, 0.0]]))
    torch.manual_seed(0)
    z = 2 * torch.randn(6, 11, dtype=torch.float64, requires_grad=True)
    masks = sparsemax(z)
    assert torch.allclose(masks.sum(-1), torch.ones(6, dtype=torch.float64))
    for row, mask in zip(z.detach(), masks.detach()):
        assert torch.allclose(mask, _simplex_projection(row), atol=1e-9)
    assert (masks == 0).any() and (masks > 0).sum(-1).min() >= 1  # sparse: zeros outside the support
    assert torch.equal(sparsemax(torch.tensor([[5.0, 0.0, 0.0]])), torch.tensor([[1.0, 0.0, 0.0]]))
    with_nan = sparsemax(torch.tensor([[1.0, float("nan"), 0.0], [1.0, 0.5, -1.0]]))
    assert torch.isnan(with_nan[0]).all() and torch.allclose(with_nan[1], out[0])  # a NaN row stays NaN, alone
    weights = torch.randn(6, 11, dtype=torch.float64)
    (grad,) = torch.autograd.grad((masks * weights).sum(), z)
    support = masks.detach() > 0  # sparsemax's Jacobian: on the support, v − mean(v over the support)
    centred = torch.where(support, weights - (weights * support).sum(-1, keepdim=True) / support.sum(-1, keepdim=True),
                          torch.zeros_like(weights))
    assert torch.allclose(grad, centred)

    ghost = GhostBatchNorm(4, virtual_batch_size=32, momentum=0.02)
    x = 3 + torch.randn(64, 4)
    halves = [(part - part.mean(0)) / torch.sqrt(part.var(0, unbiased=False) + 1e-5) for part in x.chunk(2)]
    assert torch.allclose(ghost(x), torch.cat(halves), atol=1e-5)  # each virtual batch by its own statistics
    first, second = x[:32].mean(0), x[32:].mean(0)
    assert torch.allclose(ghost.bn.running_mean, 0.98 * 0.02 * first + 0.02 * second, atol=1e-6)

    model = build_field_model("tabnet", TABLE.classes)
    assert len(model.feat_transformers) == len(model.att_transformers) == 3 and model.gamma == 1.3
    fc = model.initial_splitter.shared.glu_layers[0].fc
    assert all(t.shared.glu_layers[0].fc is fc for t in model.feat_transformers)  # shared by every step
    assert fc.weight.shape == (32, TABLE.numeric + len(TABLE.cardinalities))  # 2 (n_d + n_a), cat_emb_dim 1
    assert model.initial_bn.momentum == 0.01 and model.att_transformers[0].bn.bn.momentum == 0.02
    assert model.att_transformers[0].bn.virtual_batch_size == TABNET_VIRTUAL_BATCH
    seen = []
    for attentive in model.att_transformers:
        attentive.register_forward_hook(lambda module, args, output: seen.append((args[0].detach(), output.detach())))
    x, y = table_data()
    batch = {"x_num": x["x_num"][:64], "x_cat": x["x_cat"][:64]}
    logits, m_loss = model(batch)
    assert logits.shape == (64, TABLE.classes)
    assert torch.equal(seen[0][0], torch.ones(64, 11))
    for (prior, mask), (next_prior, _) in zip(seen, seen[1:]):
        assert torch.allclose(next_prior, (1.3 - mask) * prior)  # P ← (γ − M) · P
    assert all(torch.allclose(mask.sum(-1), torch.ones(64)) for _, mask in seen)
    by_hand = sum(float((mask * torch.log(mask + 1e-15)).sum(1).mean()) for _, mask in seen) / 3
    assert float(m_loss.detach()) == pytest.approx(by_hand, rel=1e-5) and by_hand < 0  # −(the masks' mean entropy)
    loss = tabnet_loss((logits, m_loss), y[:64]).detach()
    plain = torch.nn.functional.cross_entropy(logits, y[:64]).detach()
    assert float(loss) == pytest.approx(float(plain) - TABNET_LAMBDA_SPARSE * by_hand, rel=1e-6)

    recipe = RECIPES["tabnet"]
    assert recipe.optimizer == "adam" and recipe.lr == 2e-2 and recipe.clip == 1.0 and recipe.weight_decay == 0.0
    schedule = _schedule(recipe, 150)
    assert schedule(TABNET_LR_STEP - 1) == 1.0 and schedule(TABNET_LR_STEP) == pytest.approx(0.9)
    assert schedule(149) == pytest.approx(0.9 ** (149 // TABNET_LR_STEP))

    truth = make("healthy-tabnet-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[-10:]) < 0.7 * _mean(loss[:10]) and _mean(loss[-10:]) < 0.8 * math.log(TABLE.classes)
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < math.log(TABLE.classes)
    assert by_name["lr"] == pytest.approx([2e-2 * 0.9 ** (step // TABNET_LR_STEP) for step in range(150)])
    assert not LEFT_OUT.get("tabnet")
    assert any(s.arch == "tabnet" and s.family == "healthy_spike" for s in SCENARIOS.values())  # class labels
    assert any(s.arch == "tabnet" and s.family == "batch_nan" for s in SCENARIOS.values())  # numeric columns


def test_perceiver_encodes_positions_cross_attends_its_latents_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import ONE_CYCLE_MOMENTUM, PERCEIVER_LR, PERCEIVER_WARMUP
    from sample_runs.field_models import (GEGLU, PERCEIVER_FREQ_BANDS, PERCEIVER_MAX_FREQ, PerceiverAttention,
                                          perceiver_fourier_encode)

    x = torch.linspace(-1, 1, 5)
    encoded = perceiver_fourier_encode(x, 10.0, 6)
    scales = torch.tensor([1.0, 1.8, 2.6, 3.4, 4.2, 5.0])  # linspace(1, max_freq / 2, bands)
    assert encoded.shape == (5, 13)
    assert torch.allclose(encoded[:, :6], torch.sin(math.pi * x[:, None] * scales))
    assert torch.allclose(encoded[:, 6:12], torch.cos(math.pi * x[:, None] * scales))
    assert torch.equal(encoded[:, 12], x)  # the raw position last

    model = build_field_model("perceiver", 10)
    positions = model.encode_positions((8, 8), "cpu", torch.float32)
    k = PERCEIVER_FREQ_BANDS
    assert positions.shape == (8, 8, 2 * (2 * k + 1)) and PERCEIVER_MAX_FREQ / 2 > 3.5  # past the 8-pixel Nyquist
    grid = torch.linspace(-1, 1, 8)
    assert torch.equal(positions[:, 3, 2 * k], grid) and torch.equal(positions[5, :, 4 * k + 1], grid)  # ij: rows, cols
    assert torch.allclose(positions[2, 6, 2 * k + 1:], perceiver_fourier_encode(grid[6], PERCEIVER_MAX_FREQ, k))

    gates = torch.randn(3, 8)
    assert torch.allclose(GEGLU()(gates), gates[:, :4] * 0.5 * gates[:, 4:] * (1 + torch.erf(gates[:, 4:] / 2 ** 0.5)),
                          atol=1e-6)

    layer = model.layers[0]
    cross = layer.cross_attn.fn
    assert model.latents.latents.shape == (16, 32) and len(model.layers) == 2 and len(layer.self_attns) == 2
    assert cross.to_q.weight.shape == (64, 32) and cross.to_q.bias is None  # 1 cross head of 64
    assert cross.to_kv.weight.shape == (128, 19) and cross.to_kv.bias is None  # 1 pixel + 2 axes × (2K + 1)
    assert cross.to_out.weight.shape == (32, 64) and cross.to_out.bias is not None
    assert layer.cross_attn.norm_context.normalized_shape == (19,) and layer.self_attns[0].attn.norm_context is None
    ff = layer.cross_ff.fn.net
    assert ff[0].weight.shape == (256, 32) and ff[2].weight.shape == (32, 128)  # dim · mult · 2, GEGLU halves it
    latent = layer.self_attns[0].attn.fn
    assert latent.heads == 4 and latent.to_q.weight.shape == (64, 32) and latent.scale == 16 ** -0.5

    attention = PerceiverAttention(6, 5, heads=2, dim_head=3)  # by hand, head by head
    q_in, context = torch.randn(2, 4, 6), torch.randn(2, 7, 5)
    out = attention(q_in, context=context)
    q = attention.to_q(q_in)
    k_all, v_all = attention.to_kv(context).chunk(2, dim=-1)
    heads = []
    for h in range(2):
        part = slice(3 * h, 3 * h + 3)
        weights = torch.softmax(q[..., part] @ k_all[..., part].transpose(1, 2) / math.sqrt(3), dim=-1)
        heads.append(weights @ v_all[..., part])
    assert torch.allclose(out, attention.to_out(torch.cat(heads, dim=-1)), atol=1e-6)

    model.eval()
    seen = []
    cross.register_forward_hook(lambda module, args, kwargs, output: seen.append(kwargs["context"]), with_kwargs=True)
    images = torch.rand(3, 1, 8, 8)
    logits = model(images)
    assert logits.shape == (3, 10) and cross.last_attention.shape == (3, 16, 64)  # 16 latents over 64 pixels
    assert latent.last_attention.shape == (3 * 4, 16, 16)
    raw = torch.cat((images.flatten(2).transpose(1, 2), positions.flatten(0, 1).expand(3, -1, -1)), dim=-1)
    assert torch.allclose(seen[0], layer.cross_attn.norm_context(raw), atol=1e-6)  # pixel, then its positions
    assert torch.allclose(model(images[:1]), logits[:1], atol=1e-5)  # the latents are the batch's, not per image
    model.train()

    assert model.units == ["latents", "layers.0", "layers.1", "to_logits"] and model.hidden == ["layers.0", "layers.1"]
    recipe = RECIPES["perceiver"]
    assert recipe.optimizer == "adamw" and recipe.lr == PERCEIVER_LR and recipe.clip == 1.0 and recipe.batch == 128
    groups = _param_groups(model, recipe, 1.0)
    assert [g["layer"] for g in groups] == model.units
    assert all(g["weight_decay"] == 1e-4 for g in groups)  # AdamW(model.parameters(), weight_decay=1e-4)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))

    for warmup in (PERCEIVER_WARMUP, 0):  # torch's OneCycleLR, and the lr_too_high family's no warm-up
        schedule = _assert_one_cycle_as_torchs(recipe, warmup, torch.optim.AdamW)
        assert schedule(0) == (pytest.approx(1 / 25) if warmup else 1.0)
    assert _schedule(recipe, 150)(PERCEIVER_WARMUP - 1) == 1.0 and recipe.betas[0] == ONE_CYCLE_MOMENTUM[1]

    truth = make("healthy-perceiver-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 0.95 * math.log(10) and _mean(loss[-10:]) < 0.2 * _mean(loss[:10])
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.3 * by_name["val_loss"][0]
    assert by_name["lr"] == pytest.approx([PERCEIVER_LR * _schedule(recipe, 150)(step) for step in range(150)])
    beta1 = by_name["hp.optimizer.0.beta1"]  # OneCycleLR's cycled momentum, as the recorder saw it
    assert max(beta1) == pytest.approx(0.95) and min(beta1) == pytest.approx(0.85) and beta1[-1] > 0.94
    stats = read_stats(tmp_path / "run")
    io = stats[(stats["role"] == "input") & (stats["step"] == 0)]
    assert io["shape"].tolist() == ["128x1x8x8"]
    assert not LEFT_OUT.get("perceiver")
    assert any(s.arch == "perceiver" and s.family == "healthy_spike" for s in SCENARIOS.values())  # class labels
    assert any(s.arch == "perceiver" and s.family == "batch_nan" for s in SCENARIOS.values())  # its pixels


def test_wavenet_mu_law_codes_its_audio_its_dilated_convs_are_causal_over_its_receptive_field_and_it_learns(tmp_path):
    from sample_runs.data import WAVEFORMS, mu_law_decode, mu_law_encode, waveform_clips, waveform_windows_sampler
    from sample_runs.field_models import WaveNet, gated_activation

    mu = WAVEFORMS.classes - 1
    levels = torch.arange(WAVEFORMS.classes)
    assert torch.equal(mu_law_encode(mu_law_decode(levels, WAVEFORMS.classes), WAVEFORMS.classes), levels)
    x = torch.linspace(-1, 1, 2001, dtype=torch.float64)
    q = mu_law_encode(x, WAVEFORMS.classes)
    assert int(q[0]) == 0 and int(q[-1]) == mu and int(mu_law_encode(torch.zeros(1), WAVEFORMS.classes)) == 32
    assert bool((q[1:] >= q[:-1]).all())  # monotone
    compand = lambda v: torch.sign(v) * torch.log1p(mu * v.abs()) / math.log1p(mu)  # noqa: E731
    back = mu_law_decode(q, WAVEFORMS.classes).double()
    assert float((compand(back) - compand(x)).abs().max()) <= 1 / mu + 1e-6  # half a level of the companded grid
    expected = math.floor((math.log1p(mu * 0.5) / math.log1p(mu) + 1) / 2 * mu + 0.5)  # by hand at x = 0.5
    assert int(mu_law_encode(torch.tensor([0.5]), WAVEFORMS.classes)) == expected
    train, held = waveform_clips()
    assert train.shape == (WAVEFORMS.clips, WAVEFORMS.length) and held.shape == (WAVEFORMS.held_out, WAVEFORMS.length)
    assert int(train.min()) >= 0 and int(train.max()) <= mu and len(train.unique()) > 40

    window, outputs = WAVEFORMS.window, WAVEFORMS.outputs
    xs, ys = waveform_windows_sampler(4, 0)()
    assert xs.shape == (4, WAVEFORMS.classes, window) and ys.shape == (4, outputs) and ys.dtype == torch.int64
    assert torch.equal(xs.sum(1), torch.ones(4, window))  # one-hot
    samples = xs.argmax(1)
    assert torch.equal(ys[:, :-1], samples[:, window - outputs + 1:])  # the next sample after each output position

    f, g = torch.randn(3, 5), torch.randn(3, 5)
    assert torch.allclose(gated_activation(f, g), torch.tanh(f) * torch.sigmoid(g))

    torch.manual_seed(0)
    model = build_field_model("wavenet", WAVEFORMS.classes)
    assert isinstance(model, WaveNet) and model.dilations == [1, 2, 4, 8, 16] * 2
    assert model.receptive_field == WAVEFORMS.receptive_field == 2 + 2 * 31
    block = model.blocks[3]  # dilation 8: an output reads its own sample and the one 8 before
    h = torch.randn(1, 32, 40, requires_grad=True)
    residual, skip = block(h, None)
    assert residual.shape == (1, 32, 32) and skip.shape == (1, 64, 32)
    gated = gated_activation(block.filter_conv(h), block.gate_conv(h))
    assert torch.allclose(residual, block.residual_conv(gated) + h[:, :, 8:], atol=1e-6)
    assert torch.allclose(skip, block.skip_conv(gated), atol=1e-6)
    (grad,) = torch.autograd.grad(residual[0, :, 20].sum(), h)
    assert set(torch.nonzero(grad[0].abs().sum(0)).flatten().tolist()) == {20, 28}
    _, summed = block(h, torch.ones(1, 64, 35))
    assert torch.allclose(summed, skip + 1, atol=1e-6)  # the running skip sum, cut to the newest samples

    x = xs[:1].clone().requires_grad_(True)
    logits = model(x)
    assert logits.shape == (1, outputs, WAVEFORMS.classes)
    for j in (0, 17, outputs - 1):  # output j sits at input position window - outputs + j
        (grad,) = torch.autograd.grad(logits[0, j].sum(), x, retain_graph=True)
        reads = torch.nonzero(grad[0].abs().sum(0)).flatten().tolist()
        assert reads == list(range(j, j + model.receptive_field))  # causal: none after its own sample

    detach = faults.DetachedLayer(t0=0, layer="blocks.9")  # the last block's output: its residual and the skip sum
    detach.install(model)
    detach.before_step(0, model, None)
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(xs).flatten(0, 1), ys.flatten()).backward()
    assert model.causal.weight.grad is None and model.blocks[0].skip_conv.weight.grad is None
    assert model.end_conv_1.weight.grad.abs().sum() > 0

    recipe = RECIPES["wavenet"]
    assert recipe.optimizer == "adam" and recipe.lr == 1e-3 and recipe.weight_decay == 0.0
    assert recipe.clip is None and recipe.schedule == "constant" and recipe.warmup == 0

    truth = make("healthy-wavenet-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    levels_seen = torch.bincount(train.flatten(), minlength=WAVEFORMS.classes).double() / train.numel()
    marginal = float(-(levels_seen[levels_seen > 0] * levels_seen[levels_seen > 0].log()).sum())
    assert truth.verdict == "healthy" and len(loss) == 150
    assert loss[0] == pytest.approx(math.log(WAVEFORMS.classes), rel=0.05)
    assert _mean(loss[-10:]) < 0.7 * _mean(loss[:10]) and _mean(loss[-10:]) < 0.75 * marginal
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.75 * by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == f"16x{WAVEFORMS.classes}x{window}" and io.loc["input", "kind"] == "float"
    assert io.loc["target", "shape"] == f"16x{outputs}" and io.loc["target", "kind"] == "index"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("wavenet")
    families = {s.family for s in SCENARIOS.values() if s.arch == "wavenet"}
    assert {"healthy_spike", "batch_scale", "batch_nan", "adam_state", "detach"} <= families  # one-hot floats in


def test_set_transformer_attends_by_its_formula_is_permutation_invariant_and_its_healthy_run_learns(tmp_path):
    from sample_runs.data import MAX_SETS, max_set_chance, max_set_sampler
    from sample_runs.field_models import ISAB, MAB, PMA, SAB, SetTransformer

    torch.manual_seed(0)
    mab = MAB(3, 5, 8, num_heads=2)  # by hand, head by head: the whole width's sqrt(dim_V) as there
    queries, keys = torch.randn(2, 4, 3), torch.randn(2, 7, 5)
    out = mab(queries, keys)
    q, k, v = mab.fc_q(queries), mab.fc_k(keys), mab.fc_v(keys)
    heads = []
    for h in range(2):
        part = slice(4 * h, 4 * h + 4)
        weights = torch.softmax(q[..., part] @ k[..., part].transpose(1, 2) / math.sqrt(8), dim=-1)
        heads.append(q[..., part] + weights @ v[..., part])
    by_hand = torch.cat(heads, dim=-1)
    assert out.shape == (2, 4, 8) and torch.allclose(out, by_hand + torch.relu(mab.fc_o(by_hand)), atol=1e-6)
    assert mab.last_attention.shape == (2 * 2, 4, 7)
    assert torch.allclose(mab.last_attention.sum(-1), torch.ones(4, 4))
    split = mab.heads(q)  # torch.cat(X.split(dim_split, 2), 0): head h's rows h·B … (h + 1)·B − 1
    assert torch.equal(split[2:], q[..., 4:]) and torch.equal(split[:2], q[..., :4])
    normed = MAB(3, 5, 8, num_heads=2, ln=True)
    q, k, v = normed.fc_q(queries), normed.fc_k(keys), normed.fc_v(keys)
    heads = [q[..., 4 * h:4 * h + 4] + torch.softmax(q[..., 4 * h:4 * h + 4] @ k[..., 4 * h:4 * h + 4].transpose(1, 2)
                                                    / math.sqrt(8), dim=-1) @ v[..., 4 * h:4 * h + 4] for h in range(2)]
    o = normed.ln0(torch.cat(heads, dim=-1))
    assert torch.allclose(normed(queries, keys), normed.ln1(o + torch.relu(normed.fc_o(o))), atol=1e-5)
    assert mab.ln0 is None and mab.ln1 is None

    x = torch.randn(3, 9, 4)
    order = torch.randperm(9)
    sab, isab = SAB(4, 8, 2), ISAB(4, 8, 2, num_inds=5)
    assert torch.allclose(sab(x[:, order]), sab(x)[:, order], atol=1e-5)  # equivariant
    assert torch.allclose(isab(x[:, order]), isab(x)[:, order], atol=1e-5)
    assert isab.I.shape == (1, 5, 8)
    assert float(isab.I.detach().abs().max()) <= math.sqrt(6 / (5 * 8 + 8))  # Xavier-uniform: fans 40 and 8
    h = isab.mab0(isab.I.expand(3, -1, -1), x)
    assert torch.allclose(isab(x), isab.mab1(x, h), atol=1e-6)  # H = MAB(I, X), then MAB(X, H)
    pma = PMA(8, 2, num_seeds=3)
    for n in (1, 9, 20):
        assert pma(torch.randn(2, n, 8)).shape == (2, 3, 8)
    y = torch.randn(2, 9, 8)
    assert torch.allclose(pma(y[:, order]), pma(y), atol=1e-5)  # invariant

    model = build_field_model("set_transformer", 1)
    assert isinstance(model, SetTransformer)
    assert [type(m) for m in model.enc] == [ISAB, ISAB] and [type(m) for m in model.dec][:3] == [PMA, SAB, SAB]
    assert model.dec[3].weight.shape == (1, 64) and model.enc[0].I.shape == (1, 16, 64)
    assert model.enc[0].mab0.fc_k.weight.shape == (64, 1) and model.dec[0].S.shape == (1, 1, 64)
    assert model.dec[1].mab.num_heads == 4 and model.dec[1].mab.ln0 is None
    sets = torch.randint(1, 100, (5, 7, 1)).float()
    predicted = model(sets)
    assert predicted.shape == (5, 1)
    assert torch.allclose(model(sets[:, torch.randperm(7)]), predicted, rtol=1e-5, atol=1e-4)  # a set function
    assert torch.allclose(model(sets[:2]), predicted[:2], rtol=1e-5, atol=1e-4)  # each set on its own
    owned = {id(p) for u in model.units for p in model.get_submodule(u).parameters()}
    assert len(owned) == len(list(model.parameters()))
    assert model.hidden == model.units[:-1] and "dec.3" in model.exposed

    detach = faults.DetachedLayer(t0=0, layer=model.hidden[-1])
    detach.install(model)
    detach.before_step(0, model, None)
    model.zero_grad()
    torch.nn.functional.l1_loss(model(sets), sets.amax(1)).backward()
    assert model.enc[0].I.grad is None and model.dec[2].mab.fc_o.weight.grad is None
    assert model.dec[3].weight.grad.abs().sum() > 0

    draw = max_set_sampler(64, 0)
    lengths = set()
    for _ in range(30):
        xs, ys = draw()
        assert xs.shape[0] == 64 and xs.shape[2] == 1 and ys.shape == (64, 1) and xs.dtype == torch.float32
        assert torch.equal(ys, xs.amax(1)) and int(xs.min()) >= MAX_SETS.low and int(xs.max()) <= MAX_SETS.high
        lengths.add(xs.shape[1])
    assert lengths <= set(range(1, MAX_SETS.max_length + 1)) and len(lengths) > 5
    held = max_set_sampler(32, 5, fixed=2)
    first, second, third = held(), held(), held()
    assert torch.equal(first[0], third[0]) and not torch.equal(first[1], second[1][:32])
    generator = torch.Generator().manual_seed(1)  # the chance level against a draw of many sets
    n = torch.randint(1, MAX_SETS.max_length + 1, (200_000,), generator=generator)
    values = torch.randint(MAX_SETS.low, MAX_SETS.high + 1, (200_000, MAX_SETS.max_length), generator=generator)
    maxima = torch.where(torch.arange(MAX_SETS.max_length) < n[:, None], values, 0).amax(1).double()
    assert max_set_chance() == pytest.approx(float((maxima - maxima.median()).abs().mean()), rel=0.02)

    recipe = RECIPES["set_transformer"]
    assert recipe.optimizer == "adam" and recipe.lr == 1e-4 and recipe.weight_decay == 0.0
    assert recipe.clip is None and recipe.schedule == "constant" and recipe.warmup == 0 and recipe.batch == 256

    truth = make("healthy-set_transformer-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 2 * max_set_chance() and _mean(loss[-10:]) < 0.25 * max_set_chance()
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.25 * by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert re.fullmatch(r"256x\d+x1", io.loc["input", "shape"]) and io.loc["input", "kind"] == "float"
    assert io.loc["target", "shape"] == "256x1"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("set_transformer")
    families = {s.family for s in SCENARIOS.values() if s.arch == "set_transformer"}
    assert {"healthy_spike", "batch_scale", "batch_nan", "adam_state", "detach"} <= families  # float sets, float maxima


def test_conformer_subsamples_its_frames_its_blocks_follow_their_formulas_and_its_healthy_run_learns(tmp_path):
    from sample_runs.data import MEL_SPEECH
    from sample_runs.field import CONFORMER_LR, CONFORMER_WARMUP, OPTIMIZERS, _conformer_chance, _mel_speech_data
    from sample_runs.field_models import (ConformerBlock, ConformerCTC, ConformerSubsampling, conformer_ctc_loss,
                                          relative_sinusoids, swish)

    draw, eval_draw, classes, chance = _mel_speech_data(8, 0)
    batch, labels = draw()
    assert classes == MEL_SPEECH.symbols and chance == _conformer_chance()
    tokens = labels[labels >= 0]
    assert tokens.min() >= 0 and tokens.max() < MEL_SPEECH.symbols  # token IDs; the head's 0 is the blank
    targets = (labels >= 0).sum(1)
    assert MEL_SPEECH.shortest <= targets.min() and targets.max() <= MEL_SPEECH.longest
    assert torch.equal(labels == -100, torch.arange(labels.shape[1]) >= targets.unsqueeze(1))
    frames = batch["input_features"]
    assert frames.shape[0] == 8 and frames.shape[2] == MEL_SPEECH.features == 40
    spike = faults.MislabeledBatch(t0=0, classes=classes).batch(0, batch, labels)[1]
    assert torch.equal(spike < 0, labels < 0) and spike[spike >= 0].max() < MEL_SPEECH.symbols
    assert not torch.equal(spike, labels)  # a wrong transcript, never the blank

    sub = ConformerSubsampling(4)  # two 3x3 convs of stride 2, unpadded: T' = ((T - 1) // 2 - 1) // 2
    for t in (36, 37, 38, 39, 44, 81):
        out, lengths = sub(torch.randn(2, t, 40), torch.tensor([t, t - 5]))
        assert out.shape == (2, ((t - 1) // 2 - 1) // 2, 4 * 9)  # 40 bands -> 19 -> 9, 4 channels each
        assert lengths.tolist() == [t // 4 - 1, (t - 5) // 4 - 1] and lengths[0] <= out.shape[1]
    image = torch.randn(1, 1, 20, 40)
    expected = sub.conv(image).permute(0, 2, 1, 3).flatten(2)  # (B, T', channels x bands), channel-major
    assert torch.equal(sub(image[:, 0], torch.tensor([20]))[0], expected)

    torch.manual_seed(0)
    model = build_field_model("conformer", classes)
    assert isinstance(model, ConformerCTC) and model.fc.out_features == MEL_SPEECH.classes and model.fc.bias is None
    assert model.input_projection[0].weight.shape == (32, 32 * 9) and len(model.layers) == 2
    assert model.units == ["conv_subsample", "input_projection", "layers.0", "layers.1", "fc"]
    assert model.hidden == ["layers.0", "layers.1"] and model.exposed == ["fc"]
    assert int(torch.count_nonzero(model.input_projection[0].bias)) == 0  # sooftware's Linear: Xavier, zero bias
    block = model.layers[0]
    ff = block.ff1.net
    assert ff[1].weight.shape == (128, 32) and ff[4].weight.shape == (32, 128)  # expansion 4
    x = torch.randn(2, 6, 3)
    assert torch.allclose(swish(x), x * torch.sigmoid(x)) and torch.allclose(ff[2](x), torch.nn.functional.silu(x))

    conv = block.conv
    assert conv.pointwise_in.weight.shape == (64, 32, 1)  # to 2d channels for the GLU
    assert conv.depthwise.weight.shape == (32, 1, 15) and conv.depthwise.groups == 32 and conv.depthwise.bias is None
    assert conv.pointwise_out.weight.shape == (32, 32, 1) and conv.batch_norm.num_features == 32
    model.eval()
    h = torch.randn(2, 20, 32, requires_grad=True)
    inner = conv.pointwise_in(conv.norm(h).transpose(1, 2))
    glu = inner[:, :32] * torch.sigmoid(inner[:, 32:])
    assert torch.allclose(conv.glu(inner), glu, atol=1e-6)
    by_hand = conv.pointwise_out(swish(conv.batch_norm(conv.depthwise(glu)))).transpose(1, 2)
    assert torch.allclose(conv(h), by_hand, atol=1e-5) and conv(h).shape == h.shape
    g = torch.randn(1, 32, 40, requires_grad=True)
    (grad,) = torch.autograd.grad(conv.depthwise(g)[0, 5, 20], g)
    reads = torch.nonzero(grad[0]).tolist()
    assert {c for c, _ in reads} == {5} and {t for _, t in reads} == set(range(13, 28))  # its channel, 'same' padding

    x = torch.randn(2, 11, 32)
    x1 = x + 0.5 * block.ff1(x)  # macaron: half-step FFN, attention, conv, half-step FFN, LayerNorm
    x2 = x1 + block.attn(x1)
    x3 = x2 + block.conv(x2)
    assert torch.allclose(block(x), block.norm(x3 + 0.5 * block.ff2(x3)), atol=1e-5)
    assert ConformerBlock(32, 4, 15).half_step == 0.5

    table = relative_sinusoids(5, 8)  # rows: relative positions 4 … -4
    assert table.shape == (9, 8) and torch.equal(table[4], torch.tensor([0.0, 1.0] * 4))
    freq = torch.exp(torch.arange(0, 8, 2) * (-math.log(10000.0) / 8))
    assert torch.allclose(table[0, 0::2], torch.sin(4 * freq)) and torch.allclose(table[8, 1::2], torch.cos(-4 * freq))
    attention = block.attn.attention
    assert attention.heads == 4 and attention.dim_head == 8 and attention.pos.bias is None
    q_in = torch.randn(2, 7, 32)
    out = attention(q_in)
    q, k, v = attention.query(q_in), attention.key(q_in), attention.value(q_in)
    r = attention.pos(relative_sinusoids(7, 32))
    heads = []
    for head in range(4):
        part = slice(8 * head, 8 * head + 8)
        content = (q[..., part] + attention.u_bias[head]) @ k[..., part].transpose(1, 2)
        by_offset = (q[..., part] + attention.v_bias[head]) @ r[:, part].T  # (B, 7, 13)
        padded = torch.cat([torch.zeros(2, 7, 1), by_offset], dim=-1).view(2, 14, 7)  # Transformer-XL's shift
        position = padded[:, 1:].reshape(2, 7, 13)[..., :7]
        weights = torch.softmax((content + position) / math.sqrt(8), dim=-1)
        for i, j in ((0, 0), (6, 1), (2, 5)):  # score (i, j) reads the sinusoid of offset i - j
            assert float(position[0, i, j].detach()) == pytest.approx(float(by_offset[0, i, 6 - i + j].detach()), abs=1e-5)
        heads.append(weights @ v[..., part])
    assert torch.allclose(out, attention.out(torch.cat(heads, dim=-1)), atol=1e-5)

    with torch.no_grad():
        log_probs, lengths = model(batch)
    assert log_probs.shape == (8, ((frames.shape[1] - 1) // 2 - 1) // 2, MEL_SPEECH.classes)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(log_probs.shape[:2]), atol=1e-5)
    assert torch.equal(lengths, batch["attention_mask"].sum(1) // 4 - 1) and lengths.max() <= log_probs.shape[1]
    assert (lengths >= 2 * targets - 1).all()  # room for every token and a blank between repeats
    ctc = torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), labels[labels >= 0] + 1, lengths, targets, blank=0)
    assert float(conformer_ctc_loss((log_probs, lengths), labels)) == pytest.approx(float(ctc), rel=1e-6)
    uniform = torch.full_like(log_probs, -math.log(MEL_SPEECH.classes))
    assert chance < float(conformer_ctc_loss((uniform, lengths), labels))  # the marginal beats knowing nothing
    model.train()

    recipe = RECIPES["conformer"]
    assert recipe.optimizer == "transformer_adam" and recipe.betas == (0.9, 0.98) and recipe.clip == 5.0
    assert recipe.lr == pytest.approx(0.05 / math.sqrt(32)) and recipe.batch == 32 and recipe.weight_decay == 1e-6
    optimizer = OPTIMIZERS[recipe.optimizer](_param_groups(model, recipe, recipe.lr), recipe.lr, recipe)
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["eps"] == 1e-9
    schedule = _schedule(recipe, 150)
    w = CONFORMER_WARMUP
    assert schedule(w - 1) == 1.0 and schedule(0) == pytest.approx(1 / w)
    assert schedule(99) == pytest.approx(math.sqrt(w / 100)) and schedule(10) == pytest.approx(11 / w)
    assert max(schedule(s) for s in range(150)) == 1.0
    no_warmup = _schedule(type(recipe)(**{**recipe.__dict__, "warmup": 0}), 150)  # lr_too_high's
    assert no_warmup(0) == 1.0 and no_warmup(3) == pytest.approx(0.5)

    truth = make("healthy-conformer-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > chance and _mean(loss[-10:]) < 0.05 * _mean(loss[:10])
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.1 * by_name["val_loss"][0]
    assert by_name["lr"] == pytest.approx([CONFORMER_LR * schedule(step) for step in range(150)])
    stats = read_stats(tmp_path / "run")
    assert set(stats.query("role == 'input'")["name"]) == {"input.input_features", "input.attention_mask"}
    assert set(stats.query("role == 'target'")["kind"]) == {"index"}
    assert not LEFT_OUT.get("conformer")
    families = {s.family for s in SCENARIOS.values() if s.arch == "conformer"}
    assert {"healthy_spike", "batch_scale", "batch_nan", "adam_state", "detach", "healthy_bf16"} <= families


def test_gat_attends_by_its_formula_over_neighbours_only_concatenates_its_heads_and_its_healthy_run_learns(tmp_path):
    from sample_runs.data import sbm_graph
    from sample_runs.field_models import GAT, GATHeads, GraphAttentionLayer, dense_adjacency

    torch.manual_seed(0)
    layer = GraphAttentionLayer(3, 2, dropout=0.0, alpha=0.2, concat=True)
    h = torch.randn(4, 3)
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])  # a path 0 - 1 - 2, node 3 alone
    adj = dense_adjacency(edges, 4)
    assert torch.equal(adj, torch.tensor([[1., 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 1]]))
    out = layer(h, adj)
    wh = h @ layer.weight
    a = layer.a.squeeze(1)
    by_hand = torch.zeros(4, 2)
    for i in range(4):  # e_ij = LeakyReLU(a^T [Wh_i || Wh_j]) over i's neighbours (itself in), softmax, sum
        neighbours = [j for j in range(4) if adj[i, j] > 0]
        raw = torch.stack([torch.dot(a, torch.cat([wh[i], wh[j]])) for j in neighbours])
        e = torch.where(raw > 0, raw, 0.2 * raw)
        weights = torch.softmax(e, 0)
        by_hand[i] = sum(w * wh[j] for w, j in zip(weights, neighbours))
        assert torch.allclose(layer.last_attention[i, neighbours], weights, atol=1e-6)
    assert torch.allclose(out, torch.nn.functional.elu(by_hand), atol=1e-5)
    assert torch.equal(layer.last_attention[0, 2:], torch.zeros(2))  # masked to neighbours: exactly 0
    assert float(layer.last_attention[3, 3]) == 1.0  # a node alone attends to itself
    assert torch.allclose(layer.last_attention.sum(1), torch.ones(4))
    raw = torch.tensor([[-1.0, 2.0]])  # the LeakyReLU's negative slope 0.2
    slope = GraphAttentionLayer(1, 1, dropout=0.0, alpha=0.2)
    with torch.no_grad():
        slope.a.copy_(torch.tensor([[1.0], [0.0]]))
    assert torch.allclose(slope.logits(raw.T), torch.tensor([[-0.2, -0.2], [2.0, 2.0]]))
    far = h.clone()
    far[2] += 100.0  # a node that is no neighbour changes nothing
    assert torch.allclose(layer(far, adj)[0], out[0])
    output = GraphAttentionLayer(3, 2, dropout=0.0, alpha=0.2, concat=False)
    assert torch.allclose(output(h, adj), output.last_attention @ (h @ output.weight))  # no ELU on the output layer
    assert float(layer.weight.detach().abs().max()) <= 1.414 * math.sqrt(6 / 5)  # Xavier-uniform, gain 1.414

    heads = GATHeads(3, 2, heads=4, dropout=0.0, alpha=0.2)
    both = heads(h, adj)
    assert both.shape == (4, 8)
    for k, head in enumerate(heads.children()):  # concatenated head by head along the features
        assert torch.allclose(both[:, 2 * k:2 * k + 2], head(h, adj), atol=1e-6)

    model = build_field_model("gat", 4)
    assert isinstance(model, GAT) and len(list(model.attentions.children())) == 8
    assert model.attentions.attention_0.weight.shape == (GRAPH.features, 8) and model.out_att.weight.shape == (64, 4)
    assert model.out_att.a.shape == (8, 1) and model.out_att.concat is False and model.dropout == model.out_att.dropout
    graph, labels, train, val = sbm_graph()
    model.eval()
    logp = model(graph)
    adj = dense_adjacency(graph["edge_index"], GRAPH.nodes)
    hidden = torch.cat([head(graph["x"], adj) for head in model.attentions.children()], dim=1)
    assert torch.allclose(logp, torch.log_softmax(torch.nn.functional.elu(model.out_att(hidden, adj)), 1), atol=1e-5)
    assert torch.allclose(logp.exp().sum(1), torch.ones(GRAPH.nodes), atol=1e-5)  # log_softmax
    owned = {id(p) for u in model.units for p in model.get_submodule(u).parameters()}
    assert len(owned) == len(list(model.parameters())) and model.hidden == ["attentions"]
    groups = _param_groups(model, RECIPES["gat"], 5e-3)
    assert all(g["weight_decay"] == 5e-4 for g in groups)  # Adam's L2 on every parameter, a's too
    model.train()
    detach = faults.DetachedLayer(t0=0, layer="attentions")
    detach.install(model)
    detach.before_step(0, model, None)
    model.zero_grad()
    torch.nn.functional.nll_loss(model(graph), labels.masked_fill(~train, -100)).backward()
    assert all(p.grad is None for p in model.attentions.parameters()) and model.out_att.weight.grad.abs().sum() > 0

    recipe = RECIPES["gat"]
    assert recipe.optimizer == "adam" and recipe.lr == 5e-3 and recipe.weight_decay == 5e-4
    assert recipe.clip is None and recipe.schedule == "constant" and recipe.warmup == 0
    truth = make("healthy-gat-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[-10:]) < 0.5 * _mean(loss[:10]) and _mean(loss[-10:]) < 0.7 * math.log(4)
    assert by_name["val_loss"][-1] < 0.7 * math.log(4)
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("gat")
    families = {s.family for s in SCENARIOS.values() if s.arch == "gat"}
    assert {"healthy_spike", "batch_scale", "batch_nan", "adam_state", "detach", "healthy_bf16"} <= families


def test_neural_process_aggregates_its_context_bounds_sigma_scores_the_gaussian_nll_and_its_healthy_run_learns(tmp_path):
    from sample_runs.data import GP_CURVES, gp_curves_chance, gp_curves_floor, gp_curves_sampler, gp_kernel
    from sample_runs.field import OUTCOME_METRICS
    from sample_runs.field_models import CNP_SIGMA_FLOOR, ConditionalNeuralProcess, cnp_nll

    torch.manual_seed(0)
    model = build_field_model("neural_process", 1)
    assert isinstance(model, ConditionalNeuralProcess)
    widths = [(m.in_features, m.out_features) for m in model.encoder if isinstance(m, torch.nn.Linear)]
    assert widths == [(2, 128), (128, 128), (128, 128), (128, 128)]  # the notebook's [128] * 4 over (x, y)
    widths = [(m.in_features, m.out_features) for m in model.decoder if isinstance(m, torch.nn.Linear)]
    assert widths == [(129, 128), (128, 128), (128, 2)]  # over (r, x_target): mu and log sigma
    assert not isinstance(model.encoder[-1], torch.nn.ReLU) and not isinstance(model.decoder[-1], torch.nn.ReLU)
    batch = {"context_x": torch.rand(3, 6, 1) * 4 - 2, "context_y": torch.randn(3, 6, 1),
             "target_x": torch.rand(3, 11, 1) * 4 - 2}
    mu, sigma = model(batch)
    assert mu.shape == sigma.shape == (3, 11, 1)
    order = torch.randperm(6)  # the mean over context points: the context's order does not matter
    shuffled = {**batch, "context_x": batch["context_x"][:, order], "context_y": batch["context_y"][:, order]}
    r = model.represent(batch["context_x"], batch["context_y"])
    assert torch.allclose(model.represent(shuffled["context_x"], shuffled["context_y"]), r, atol=1e-6)
    assert torch.allclose(model(shuffled)[0], mu, atol=1e-5) and torch.allclose(model(shuffled)[1], sigma, atol=1e-5)
    pairs = torch.cat([batch["context_x"], batch["context_y"]], -1)
    assert torch.allclose(r[1], model.encoder(pairs[1]).mean(0), atol=1e-6)  # each point alone, then the mean
    assert torch.allclose(model(batch)[0][:1], model({k: v[:1] for k, v in batch.items()})[0], atol=1e-6)
    targets = batch["target_x"]  # each target on its own: the decoder reads (r, x) at one point
    assert torch.allclose(model({**batch, "target_x": targets[:, 4:5]})[0], mu[:, 4:5], atol=1e-6)
    hidden = model.decoder(torch.cat([r[:, None].expand(-1, 11, -1), targets], -1))
    assert torch.allclose(sigma, 0.1 + 0.9 * torch.nn.functional.softplus(hidden[..., 1:]), atol=1e-6)
    assert torch.allclose(mu, hidden[..., :1], atol=1e-6)
    with torch.no_grad():  # sigma's lower bound holds however negative its pre-activation
        model.decoder[-1].bias[1] = -1e4
    assert CNP_SIGMA_FLOOR == 0.1 and torch.allclose(model(batch)[1], torch.full((3, 11, 1), 0.1))

    y = torch.randn(3, 11, 1)
    expected = -torch.distributions.Normal(mu, sigma).log_prob(y).mean()
    assert torch.allclose(cnp_nll((mu, sigma), y), expected, atol=1e-6)
    bound = math.log(0.1) + 0.5 * math.log(2 * math.pi)  # the NLL's floor: sigma at 0.1, mu exact
    assert float(cnp_nll((y, torch.full_like(y, 0.1)), y)) == pytest.approx(bound, abs=1e-6) and bound < 0

    draw = gp_curves_sampler(64, 0)
    counts = set()
    for _ in range(20):
        x, target_y = draw()
        assert set(x) == {"context_x", "context_y", "target_x"} and all(v.dtype == torch.float32 for v in x.values())
        n, total = x["context_x"].shape[1], x["target_x"].shape[1]
        assert 3 <= n < GP_CURVES.max_context and 2 <= total - n < GP_CURVES.max_context
        assert target_y.shape == (64, total, 1) and x["context_y"].shape == (64, n, 1)
        assert torch.equal(x["target_x"][:, :n], x["context_x"]) and torch.equal(target_y[:, :n], x["context_y"])
        assert float(x["target_x"].min()) >= -2 and float(x["target_x"].max()) <= 2
        counts.add(n)
    assert len(counts) > 3
    held = gp_curves_sampler(64, 5, fixed=2)
    first, second, third = held(), held(), held()
    assert torch.equal(first[1], third[1]) and torch.equal(first[0]["context_x"], third[0]["context_x"])
    assert first[1].shape != second[1].shape or not torch.equal(first[1], second[1])
    points = torch.tensor([[[-1.0], [-0.6], [0.3]]])  # the kernel on a few points, by its formula
    kernel = gp_kernel(points, torch.tensor([0.5]), torch.tensor([0.7]))
    assert kernel[0, 0, 1] == pytest.approx(0.49 * math.exp(-0.5 * (0.4 / 0.5) ** 2), rel=1e-6)
    assert kernel[0, 2, 0] == pytest.approx(0.49 * math.exp(-0.5 * (1.3 / 0.5) ** 2), rel=1e-6)
    assert kernel[0, 1, 1] == pytest.approx(0.49 + 0.02 ** 2, rel=1e-6)
    # The sampler's curves have that covariance: a fixed x, many functions of one l and sigma_f.
    cholesky = torch.linalg.cholesky(kernel)
    samples = cholesky @ torch.randn(40_000, 3, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(torch.cov(samples[..., 0].T), kernel[0], atol=0.02)
    many = gp_curves_sampler(64, 7)
    ys = torch.cat([many()[1].flatten() for _ in range(300)]).double()
    assert float((ys ** 2).mean()) == pytest.approx((1 - 0.1 ** 3) / (3 * 0.9) + 0.02 ** 2, rel=0.05)  # E[sigma_f^2]
    assert gp_curves_chance() == pytest.approx(0.5 * math.log(2 * math.pi * float((ys ** 2).mean())) + 0.5, abs=0.05)
    floor = gp_curves_floor()
    assert bound < floor < 0 < gp_curves_chance()
    metric = OUTCOME_METRICS["neural_process"]
    assert metric.name == "val_loss" and metric.distance(floor) == 0

    recipe = RECIPES["neural_process"]
    assert recipe.optimizer == "adam" and recipe.lr == 1e-3 and recipe.weight_decay == 0.0 and recipe.batch == 64
    assert recipe.clip is None and recipe.schedule == "constant" and recipe.warmup == 0
    assert LEFT_OUT["neural_process"] == ("healthy_spike",)
    families = {s.family for s in SCENARIOS.values() if s.arch == "neural_process"}
    assert {"batch_scale", "batch_nan", "adam_state", "detach"} <= families and "healthy_spike" not in families

    truth = make("healthy-neural_process-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss, val = by_name["loss"], by_name["val_loss"]
    assert truth.verdict == "healthy" and len(loss) == 150 and len(val) == 150
    assert _mean(loss[:10]) > 0.85 and _mean(loss[-10:]) < 0.65  # chance 0.92
    assert _mean(val[-10:]) - floor < 0.8 * (_mean(val[:10]) - floor)
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)]
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert (io["role"] == "target").any() and (io["role"] == "input").any()


def test_kan_splines_by_cox_de_boor_its_layer_is_base_plus_spline_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import KAN_EPOCH_STEPS, KAN_LR
    from sample_runs.field_models import KAN, KANLinear, kan_b_splines, kan_uniform_grid

    grid = kan_uniform_grid(2, grid_size=5, spline_order=3)  # [-1, 1] in 5 steps of 0.4, 3 more knots each side
    assert grid.shape == (2, 12) and torch.allclose(grid[0], torch.arange(-3, 9) * 0.4 - 1.0)
    assert torch.equal(grid[0], grid[1])

    def by_hand(x, knots, order):  # Cox–de Boor written out on one scalar
        def basis(j, k):
            if k == 0:
                return 1.0 if knots[j] <= x < knots[j + 1] else 0.0
            left = (x - knots[j]) / (knots[j + k] - knots[j]) * basis(j, k - 1)
            right = (knots[j + k + 1] - x) / (knots[j + k + 1] - knots[j + 1]) * basis(j + 1, k - 1)
            return left + right
        return [basis(j, order) for j in range(len(knots) - 1 - order)]

    knots = grid[0].tolist()
    xs = torch.tensor([[-1.0, 0.0], [-0.73, 0.31], [0.999, -0.5], [-1.9, 1.7], [-2.2, 2.2], [5.0, -7.0]])
    bases = kan_b_splines(xs, grid, 3)
    assert bases.shape == (6, 2, 8)  # grid_size + spline_order bases an input
    for row in range(len(xs)):
        for feature in range(2):
            expected = torch.tensor(by_hand(float(xs[row, feature]), knots, 3))
            assert torch.allclose(bases[row, feature], expected, atol=1e-6)
    inside = torch.linspace(-1.0, 0.9999, 101).unsqueeze(1)
    assert torch.allclose(kan_b_splines(inside, grid[:1], 3).sum(-1), torch.ones(101, 1), atol=1e-6)  # sum to 1
    assert (kan_b_splines(inside, grid[:1], 3) >= 0).all()
    outside = torch.tensor([[-2.2001], [2.2], [3.0], [-10.0]])  # at or past the extended grid's ends
    assert torch.equal(kan_b_splines(outside, grid[:1], 3), torch.zeros(4, 1, 8))
    edge = kan_b_splines(torch.tensor([[-1.9]]), grid[:1], 3)  # in the first extended interval: the first basis alone
    assert edge[0, 0, 0] > 0 and torch.equal(edge[0, 0, 1:], torch.zeros(7)) and float(edge.sum()) < 1

    torch.manual_seed(0)
    layer = KANLinear(4, 3)
    assert layer.base_weight.shape == (3, 4) and layer.spline_weight.shape == (3, 4, 8)
    assert layer.spline_scaler.shape == (3, 4) and layer.grid.shape == (4, 12)
    assert {n for n, _ in layer.named_parameters()} == {"weight.base", "weight.spline", "spline_scaler"}
    bound = math.sqrt(6 / ((1 + 5) * 4))  # kaiming_uniform_ with a = sqrt(5): gain sqrt(2 / (1 + a^2)), fan_in 4
    assert float(layer.base_weight.detach().abs().max()) <= bound
    assert float(layer.spline_scaler.detach().abs().max()) <= bound
    interior = layer.grid.T[3:-3]  # curve2coeff of noise within ±0.1 / 2 / 5 at the 6 interior knots
    curves = torch.einsum("nik,oik->nio", layer.b_splines(interior), layer.spline_weight)
    assert float(curves.detach().abs().max()) <= 0.01 + 1e-6 and float(layer.spline_weight.detach().abs().max()) < 0.1
    x = torch.rand(5, 4) * 2 - 1
    base = torch.nn.functional.silu(x) @ layer.base_weight.T
    spline = torch.zeros(5, 3)
    for b in range(5):
        for o in range(3):
            for i in range(4):
                coefficients = layer.spline_weight[o, i] * layer.spline_scaler[o, i]
                spline[b, o] += (torch.tensor(by_hand(float(x[b, i]), layer.grid[i].tolist(), 3)) * coefficients).sum()
    assert torch.allclose(layer(x), base + spline, atol=1e-5)  # base branch + spline branch
    assert layer(torch.rand(2, 7, 4)).shape == (2, 7, 3)
    l1 = layer.spline_weight.abs().mean(-1)
    share = l1 / l1.sum()
    assert torch.allclose(layer.regularization_loss(), l1.sum() - (share * share.log()).sum())

    model = build_field_model("kan", 10)
    assert isinstance(model, KAN) and [type(m) for m in model.layers] == [KANLinear, KANLinear]
    assert [(m.in_features, m.out_features, m.grid_size, m.spline_order) for m in model.layers] == \
        [(64, 32, 5, 3), (32, 10, 5, 3)]
    images = torch.rand(3, 8, 8) * 2 - 1
    logits = model(images)
    assert logits.shape == (3, 10) and torch.allclose(model(images.reshape(3, 64)), logits)
    assert torch.allclose(model(images[:1]), logits[:1], atol=1e-6)
    assert model.units == ["layers.0", "layers.1"] and model.hidden == ["layers.0"] and model.exposed == model.units
    scaled = faults.WeightScale(t0=0, layer="layers.1", factor=100.0)  # both branches' weights, so the layer's output
    hidden = model.layers[0](images.reshape(3, 64))
    before = model.layers[1](hidden)
    scaled.before_step(0, model, None)
    assert torch.allclose(model.layers[1](hidden), 100 * before, rtol=1e-4, atol=1e-4)

    recipe = RECIPES["kan"]
    assert recipe.optimizer == "adamw" and recipe.lr == KAN_LR == 3e-3 and recipe.weight_decay == 1e-4
    assert recipe.clip is None and recipe.warmup == 0 and recipe.batch == 64 and recipe.schedule == "exp_x0.8"
    groups = _param_groups(model, recipe, 1.0)
    assert [g["layer"] for g in groups] == model.units and all(g["weight_decay"] == 1e-4 for g in groups)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    p = torch.nn.Parameter(torch.zeros(1))
    reference = torch.optim.AdamW([p], lr=1.0)
    exponential = torch.optim.lr_scheduler.ExponentialLR(reference, gamma=0.8)
    schedule = _schedule(recipe, 150)
    for step in range(150):  # ExponentialLR stepped once an epoch of ceil(1500 / 64) batches
        assert schedule(step) == pytest.approx(reference.param_groups[0]["lr"])
        reference.step()
        if (step + 1) % KAN_EPOCH_STEPS == 0:
            exponential.step()
    assert KAN_EPOCH_STEPS == math.ceil(1500 / 64) and schedule(149) == pytest.approx(0.8 ** 6)

    truth = make("healthy-kan-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 0.95 * math.log(10) and _mean(loss[-10:]) < 0.15 * _mean(loss[:10])
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.3 * by_name["val_loss"][0]
    assert by_name["lr"] == pytest.approx([KAN_LR * schedule(step) for step in range(150)])
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "kind"] == "float" and io.loc["target", "shape"] == "64"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("kan")
    families = {s.family for s in SCENARIOS.values() if s.arch == "kan"}


def test_hypernetwork_generates_its_kernels_from_the_layer_embeddings_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field_models import HyperConvBlock, HyperEmbedding, HyperNetCNN, HyperNetwork

    torch.manual_seed(0)
    hyper = HyperNetwork(f_size=3, z_dim=5, out_size=4, in_size=2)
    assert {n: tuple(p.shape) for n, p in hyper.named_parameters()} == {
        "w1": (5, 36), "b1": (36,), "w2": (5, 10), "b2": (10,)}
    assert all(float(p.detach().abs().max()) < 2 for p in hyper.parameters())  # fmod(randn, 2)
    z = torch.randn(5)
    kernel = hyper(z).detach()
    assert kernel.shape == (4, 2, 3, 3)
    w1, b1, w2, b2 = (t.detach().double() for t in (hyper.w1, hyper.b1, hyper.w2, hyper.b2))
    zd = z.double()
    for i in range(2):  # by hand: h_in row i = z · w2[:, i·z_dim … (i + 1)·z_dim] + b2; its row · w1 + b1
        h_in = [sum(zd[a] * w2[a, i * 5 + d] for a in range(5)) + b2[i * 5 + d] for d in range(5)]
        flat = [sum(h_in[d] * w1[d, c] for d in range(5)) + b1[c] for c in range(36)]
        for c in range(36):  # the flat (in_size, out·f·f) product viewed as (out, in, f, f), not transposed
            index = i * 36 + c
            o, rest = divmod(index, 2 * 9)
            j, rest = divmod(rest, 9)
            assert float(kernel[o, j, rest // 3, rest % 3]) == pytest.approx(float(flat[c]), rel=1e-4, abs=1e-4)

    grid = HyperEmbedding((2, 3), 5)
    tiled = grid(hyper)
    assert tiled.shape == (8, 6, 3, 3) and len(grid.z_list) == 6
    assert torch.allclose(tiled[4:, 2:4], hyper(grid.z_list[4]))  # row 1, column 1: z 1·3 + 1

    model = build_field_model("hypernetwork", 10)
    assert isinstance(model, HyperNetCNN) and len(model.blocks) == 3
    assert all(isinstance(b, HyperConvBlock) for b in model.blocks)
    assert model.hope.w2.shape == (64, 16 * 64) and model.hope.w1.shape == (64, 16 * 9)
    assert [tuple(z.z_list[0].shape) for z in model.zs] == [(64,)] * 3
    for block in model.blocks:  # no convolution weight of its own: only its BatchNorm
        assert {n for n, _ in block.named_parameters()} == {"bn.weight", "bn.bias"}
        assert not any(isinstance(m, torch.nn.Conv2d) for m in block.modules())
    model.eval()
    x = torch.randn(5, 1, 8, 8)
    out = model(x)
    assert out.shape == (5, 10)
    by_hand = model.stem(x)
    for z, block in zip(model.zs, model.blocks):
        k = model.hope(z.z_list[0])
        assert k.shape == (16, 16, 3, 3)
        by_hand = torch.relu(block.bn(torch.nn.functional.conv2d(by_hand, k, padding=1)) + by_hand)
    assert torch.allclose(out, model.final(by_hand.mean(dim=(2, 3))), atol=1e-5)
    before = [k.detach().clone() for k in model.kernels()]
    with torch.no_grad():  # the kernels follow the hypernetwork's weights (and each z)
        model.hope.w1.add_(0.1)
    after = model.kernels()
    assert all(not torch.allclose(a, b) for a, b in zip(after, before))
    with torch.no_grad():
        model.zs[1].z_list[0].mul_(-1)
    moved = model.kernels()
    assert torch.equal(moved[0], after[0]) and not torch.allclose(moved[1], after[1])
    assert not torch.allclose(model(x), out)

    model.train()
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))  # the units partition them
    assert model.exposed == ["final"] and model.hidden[-1] == "blocks.2" and model.decay_everything
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), torch.arange(5)).backward()
    assert float(model.hope.w2.grad.abs().sum()) > 0 and float(model.zs[0].z_list[0].grad.abs().sum()) > 0
    detach = faults.DetachedLayer(t0=0, layer=model.hidden[-1])
    detach.install(model)
    detach.before_step(0, model, None)
    model.zero_grad(set_to_none=True)
    torch.nn.functional.cross_entropy(model(x), torch.arange(5)).backward()
    assert model.hope.w1.grad is None and model.zs[2].z_list[0].grad is None and model.stem[0].weight.grad is None
    assert model.final.weight.grad.abs().sum() > 0

    recipe = RECIPES["hypernetwork"]
    assert recipe.optimizer == "adam" and recipe.lr == 2e-3 and recipe.weight_decay == 5e-4 and recipe.batch == 128
    assert recipe.clip is None and recipe.schedule == "constant" and recipe.warmup == 0

    truth = make("healthy-hypernetwork-s0", tmp_path / "run")
    loss = _scalars_by_name(tmp_path / "run")["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 0.9 * math.log(10) and _mean(loss[-10:]) < 0.5 * math.log(10)
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "128x1x8x8" and io.loc["input", "kind"] == "float"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("hypernetwork")
    families = {s.family for s in SCENARIOS.values() if s.arch == "hypernetwork"}
    assert {"healthy_spike", "batch_scale", "batch_nan", "adam_state", "detach", "weight_scale"} <= families


def test_dit_modulates_by_adaln_zero_noises_by_the_linear_schedule_and_its_healthy_run_learns(tmp_path):
    import copy

    from sample_runs.field import DIT_BATCH, DIT_LR, TIED, _data
    from sample_runs.field_models import (DiT, DiTBlock, DiTDiffusion, DiTFinalLayer, DiTLabelEmbedder, dit_linear_betas,
                                          dit_loss, dit_modulate, dit_timestep_embedding, dit_update_ema,
                                          get_2d_sincos_pos_embed)

    betas = dit_linear_betas(1000)  # Ho et al.'s 1e-4 -> 0.02 over 1000 steps, stretched for fewer
    assert betas.dtype == np.float64 and betas[0] == pytest.approx(1e-4) and betas[-1] == pytest.approx(0.02)
    assert np.allclose(np.diff(betas), (0.02 - 1e-4) / 999)
    assert dit_linear_betas(250)[0] == pytest.approx(4e-4) and dit_linear_betas(250)[-1] == pytest.approx(0.08)

    t = torch.tensor([0, 3, 999])
    emb = dit_timestep_embedding(t, 6)  # half 3: f_i = 10000^(-i/3), [cos, sin]
    freqs = [10000 ** (-i / 3) for i in range(3)]
    for row, step in enumerate(t.tolist()):
        expected = [math.cos(step * f) for f in freqs] + [math.sin(step * f) for f in freqs]
        assert torch.allclose(emb[row], torch.tensor(expected), atol=1e-5)
    assert dit_timestep_embedding(t, 7).shape == (3, 7) and torch.equal(dit_timestep_embedding(t, 7)[:, -1], torch.zeros(3))
    x, shift, scale = torch.randn(2, 5, 4), torch.randn(2, 4), torch.randn(2, 4)
    assert torch.allclose(dit_modulate(x, shift, scale), x * (1 + scale[:, None]) + shift[:, None])

    labels = DiTLabelEmbedder(10, 8, 0.1)
    assert labels.embedding_table.num_embeddings == 11  # the null class of classifier-free guidance
    y = torch.arange(10)
    assert torch.equal(labels.token_drop(y, torch.tensor([1, 0] * 5)), torch.where(torch.arange(10) % 2 == 0, 10, y))
    torch.manual_seed(0)
    dropped = labels.token_drop(torch.zeros(20000, dtype=torch.long))
    assert set(dropped.unique().tolist()) == {0, 10} and 0.09 < float((dropped == 10).float().mean()) < 0.11
    assert torch.equal(labels(y, train=False), labels.embedding_table(y))  # no dropout in eval
    assert DiTLabelEmbedder(10, 8, 0.0).embedding_table.num_embeddings == 10

    torch.manual_seed(0)
    dit = DiT()
    assert dit.x_embedder.num_patches == 16 and dit.out_channels == 1 and len(dit.blocks) == 3
    assert not dit.pos_embed.requires_grad  # fixed, as there
    assert torch.allclose(dit.pos_embed[0], torch.from_numpy(get_2d_sincos_pos_embed(32, 4)).float())
    for module in (*dit.blocks, dit.final_layer):  # adaLN-Zero: every modulation zero
        assert not module.adaLN_modulation[-1].weight.any() and not module.adaLN_modulation[-1].bias.any()
    assert not dit.final_layer.linear.weight.any() and not dit.final_layer.linear.bias.any()
    assert dit.blocks[0].attn.qkv.bias is not None and not dit.blocks[0].attn.qkv.bias.any()
    bound = math.sqrt(6 / (32 + 96))  # xavier-uniform qkv
    assert float(dit.blocks[0].attn.qkv.weight.detach().abs().max()) <= bound
    assert 0.01 < float(dit.t_embedder.mlp[0].weight.std()) < 0.03 and dit.t_embedder.mlp[0].in_features == 256
    assert 0.01 < float(dit.y_embedder.embedding_table.weight.std()) < 0.03
    images, steps, classes = torch.randn(5, 1, 8, 8), torch.randint(0, 1000, (5,)), torch.randint(0, 10, (5,))
    assert torch.equal(dit(images, steps, classes), torch.zeros(5, 1, 8, 8))  # the untrained model predicts 0
    block = dit.blocks[0]
    tokens, c = torch.randn(5, 16, 32), torch.randn(5, 32)
    assert torch.equal(block(tokens, c), tokens)  # zero gates: every block starts as the identity

    torch.manual_seed(1)
    for module in dit.modules():  # every tensor random: the formulas, not the zeros, under test
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.normal_(module.weight, std=0.2)
            torch.nn.init.normal_(module.bias, std=0.2)
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = block.adaLN_modulation[1](
        torch.nn.functional.silu(c)).chunk(6, dim=1)
    norm = lambda v: torch.nn.functional.layer_norm(v, (32,), eps=1e-6)  # noqa: E731
    h = tokens + gate_msa[:, None] * block.attn(norm(tokens) * (1 + scale_msa[:, None]) + shift_msa[:, None])
    h = h + gate_mlp[:, None] * block.mlp.fc2(torch.nn.functional.gelu(
        block.mlp.fc1(norm(h) * (1 + scale_mlp[:, None]) + shift_mlp[:, None]), approximate="tanh"))
    assert torch.allclose(block(tokens, c), h, atol=1e-5)
    final = dit.final_layer
    shift, scale = final.adaLN_modulation[1](torch.nn.functional.silu(c)).chunk(2, dim=1)
    assert torch.allclose(final(tokens, c), final.linear(norm(tokens) * (1 + scale[:, None]) + shift[:, None]), atol=1e-5)
    dit.eval()
    patches = torch.randn(2, 16, 4)  # unpatchify: token (row, col)'s 2x2 values row by row
    unpatched = dit.unpatchify(patches)
    assert unpatched.shape == (2, 1, 8, 8)
    assert torch.equal(unpatched[1, 0, 2:4, 4:6].flatten(), patches[1, 1 * 4 + 2])
    tokens = dit.x_embedder(images) + dit.pos_embed
    c = dit.t_embedder.mlp(dit_timestep_embedding(steps, 256)) + dit.y_embedder.embedding_table(classes)
    for each in dit.blocks:
        tokens = each(tokens, c)
    assert torch.allclose(dit(images, steps, classes), dit.unpatchify(final(tokens, c)), atol=1e-5)
    null = dit.y_embedder.embedding_table.weight[10]
    c = dit.t_embedder.mlp(dit_timestep_embedding(steps, 256)) + null
    tokens = dit.x_embedder(images) + dit.pos_embed
    for each in dit.blocks:
        tokens = each(tokens, c)
    assert torch.allclose(dit(images, steps), dit.unpatchify(final(tokens, c)), atol=1e-5)  # no labels: the null class

    torch.manual_seed(2)
    model = build_field_model("dit", 10)
    assert isinstance(model, DiTDiffusion) and model.num_timesteps == 1000
    alphas_cumprod = np.cumprod(1 - betas)
    x0, t, noise = torch.randn(4, 1, 8, 8), torch.tensor([0, 10, 500, 999]), torch.randn(4, 1, 8, 8)
    expected = torch.from_numpy(np.sqrt(alphas_cumprod)[t.numpy()]).float().view(-1, 1, 1, 1) * x0 + \
        torch.from_numpy(np.sqrt(1 - alphas_cumprod)[t.numpy()]).float().view(-1, 1, 1, 1) * noise
    assert torch.allclose(model.q_sample(x0, t, noise), expected)
    prediction, noise = torch.randn(3, 1, 8, 8), torch.randn(3, 1, 8, 8)
    per_sample = [float(((noise[i] - prediction[i]) ** 2).mean()) for i in range(3)]
    assert float(dit_loss((prediction, noise))) == pytest.approx(sum(per_sample) / 3, rel=1e-5)

    assert model.units == ["model.x_embedder", "model.t_embedder", "model.y_embedder", "model.blocks.0",
                           "model.blocks.1", "model.blocks.2", "model.final_layer"]
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters())) - 1  # every parameter but pos_embed
    assert model.loose == ("model.pos_embed",) and model.get_parameter("model.pos_embed") is model.model.pos_embed
    assert model.hidden == ["model.blocks.0", "model.blocks.1", "model.blocks.2"] and model.decay_everything
    assert TIED["dit"] == ("model.t_embedder", "model.y_embedder")
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(std=0.2)
    labels = torch.arange(4)
    model.eval()  # no label dropout: train.py's step, t then ε drawn, the model's ε prediction at (x_t, t, y)
    torch.manual_seed(3)
    prediction, drawn = model(x0, labels)
    torch.manual_seed(3)
    drawn_t = torch.randint(0, 1000, (4,))
    assert torch.equal(drawn, torch.randn_like(x0))
    assert torch.allclose(prediction, model.model(model.q_sample(x0, drawn_t, drawn), drawn_t, labels), atol=1e-6)
    assert prediction.abs().sum() > 0
    model.train()
    detach = faults.DetachedLayer(t0=0, layer=model.hidden[-1])
    detach.install(model)
    detach.before_step(0, model, None)
    dit_loss(model(x0, labels)).backward()
    inner = model.model
    assert inner.x_embedder.proj.weight.grad is None and all(p.grad is None for p in inner.blocks.parameters())
    assert inner.pos_embed.grad is None
    assert float(inner.t_embedder.mlp[0].weight.grad.abs().sum()) > 0  # c still reaches the final layer's adaLN
    assert float(inner.y_embedder.embedding_table.weight.grad.abs().sum()) > 0
    assert float(inner.final_layer.linear.weight.grad.abs().sum()) > 0
    head = inner.final_layer.linear
    scaled = faults.WeightScale(t0=0, layer="model.final_layer.linear", factor=100.0)
    before = head.weight.detach().clone()
    scaled.before_step(0, model, None)
    assert torch.allclose(head.weight, 100 * before)

    ema = copy.deepcopy(model).requires_grad_(False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    kept = {n: p.detach().clone() for n, p in ema.named_parameters()}
    dit_update_ema(ema, model, decay=0.9)
    for name, param in model.named_parameters():
        assert torch.allclose(dict(ema.named_parameters())[name], 0.9 * kept[name] + 0.1 * param)
    dit_update_ema(ema, model, decay=0)
    assert all(torch.equal(a, b) for a, b in zip(ema.parameters(), model.parameters()))

    recipe = RECIPES["dit"]
    assert recipe.optimizer == "adamw" and recipe.lr == DIT_LR == 1e-3 and recipe.weight_decay == 0.0
    assert recipe.batch == DIT_BATCH == 64 and recipe.clip is None and recipe.warmup == 0
    assert recipe.schedule == "constant" and recipe.betas == (0.9, 0.999) and recipe.ema is None
    groups = _param_groups(build_field_model("dit", 10), recipe, 1e-3)
    assert [g["layer"] for g in groups] == [*model.units, "model.pos_embed"]
    assert all(g["weight_decay"] == 0.0 for g in groups)
    draw, _, classes, chance = _data("dit", recipe, 0, 1)
    images, labels = draw()
    assert images.shape == (64, 1, 8, 8) and images.min() >= -1 and images.max() <= 1 and images.min() == -1
    assert labels.dtype == torch.long and classes == 10 and chance == 1.0

    truth = make("healthy-dit-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 0.9 and _mean(loss[-10:]) < 0.25 * _mean(loss[:10])
    assert len(by_name["val_loss"]) == 6 and by_name["val_loss"][-1] < 0.4 * by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "64x1x8x8" and io.loc["input", "kind"] == "float"
    assert io.loc["target", "shape"] == "64"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("dit")
    families = {s.family for s in SCENARIOS.values() if s.arch == "dit"}
    assert families == set(FIELD_FAMILIES)


def test_sae_subtracts_its_pre_bias_keeps_unit_norm_decoder_columns_and_its_healthy_run_learns(tmp_path):
    from sample_runs.field import SAE_BATCH, SAE_LR, TIED, _data, _train
    from sample_runs.field_models import (SAE_FEATURES, SAE_INPUTS, SAE_L1_COEF, SAE_LATENTS, SparseAutoencoder,
                                          sae_activation_mean, sae_loss, sae_toy_activations, sae_unit_norm_decoder_,
                                          sae_unit_norm_decoder_grad_adjustment_)

    torch.manual_seed(0)
    sae = SparseAutoencoder()
    assert sae.encoder.weight.shape == (SAE_LATENTS, SAE_INPUTS) and sae.decoder.weight.shape == (SAE_INPUTS, SAE_LATENTS)
    assert sae.decoder.bias is None and not sae.pre_bias.bias.any() and not sae.encoder.bias.any()
    assert torch.allclose(sae.decoder.weight.norm(dim=0), torch.ones(SAE_LATENTS), atol=1e-6)  # unit columns at init
    direction = sae.encoder.weight.T / sae.encoder.weight.T.norm(dim=0, keepdim=True)
    assert torch.allclose(sae.decoder.weight, direction, atol=1e-6)  # the tied init, normalised

    torch.manual_seed(1)
    with torch.no_grad():  # every tensor random: the formula, not the zeros, under test
        sae.pre_bias.bias.normal_()
        sae.encoder.bias.normal_()
    x = torch.randn(5, SAE_INPUTS)
    reconstruction, latents, seen = sae(x)
    assert reconstruction.shape == (5, SAE_INPUTS) and latents.shape == (5, SAE_LATENTS) and seen is x
    w_enc, b_enc = sae.encoder.weight.detach(), sae.encoder.bias.detach()
    w_dec, b_pre = sae.decoder.weight.detach(), sae.pre_bias.bias.detach()
    for i in range(5):  # by hand: ReLU(W_enc (x - b_pre) + b_enc), then W_dec f + b_pre
        f = [max(0.0, sum(float(w_enc[j, k]) * (float(x[i, k]) - float(b_pre[k])) for k in range(SAE_INPUTS))
                 + float(b_enc[j])) for j in range(SAE_LATENTS)]
        assert torch.allclose(latents[i], torch.tensor(f), atol=1e-4)
        r = [sum(float(w_dec[k, j]) * f[j] for j in range(SAE_LATENTS)) + float(b_pre[k]) for k in range(SAE_INPUTS)]
        assert torch.allclose(reconstruction[i], torch.tensor(r), atol=1e-4)
    assert (latents >= 0).all() and (latents == 0).any()
    # b_pre's round trip: with the encoder and decoder zero, the reconstruction is b_pre itself
    zeroed = SparseAutoencoder()
    with torch.no_grad():
        zeroed.pre_bias.bias.copy_(b_pre)
        zeroed.encoder.weight.zero_()
        zeroed.decoder.weight.zero_()
    assert torch.allclose(zeroed(x)[0], b_pre.expand(5, -1)) and not zeroed(x)[1].any()
    # ... and shifting the input and b_pre alike shifts the reconstruction by as much (b_pre is subtracted, then added)
    shift = torch.randn(SAE_INPUTS)
    moved = SparseAutoencoder()
    moved.load_state_dict(sae.state_dict())
    with torch.no_grad():
        moved.pre_bias.bias.add_(shift)
    assert torch.allclose(moved(x + shift)[0], reconstruction + shift, atol=1e-5)
    assert torch.allclose(moved(x + shift)[1], latents, atol=1e-5)

    # the loss: normalised MSE + λ · normalised L1, by formula
    nmse = sum(float(((reconstruction[i] - x[i]) ** 2).mean() / (x[i] ** 2).mean()) for i in range(5)) / 5
    l1 = sum(float(latents[i].abs().sum() / x[i].norm()) for i in range(5)) / 5
    assert float(sae_loss((reconstruction, latents, x))) == pytest.approx(nmse + SAE_L1_COEF * l1, rel=1e-5)
    assert float(sae_loss((reconstruction, latents, x), l1_coef=0.0)) == pytest.approx(nmse, rel=1e-5)
    assert float(sae_loss((x, torch.zeros_like(latents), x))) == 0.0  # a perfect, silent reconstruction

    # the gradient's parallel component removed, then a step, then unit norm again
    sae.zero_grad()
    sae_loss(sae(x)).backward()
    grad = sae.decoder.weight.grad.clone()
    sae_unit_norm_decoder_grad_adjustment_(sae)
    w = sae.decoder.weight.detach()
    assert torch.allclose(sae.decoder.weight.grad, grad - (grad * w).sum(0, keepdim=True) * w, atol=1e-6)
    assert torch.allclose((sae.decoder.weight.grad * w).sum(0), torch.zeros(SAE_LATENTS), atol=1e-6)
    optimizer = torch.optim.Adam(sae.parameters(), lr=0.1)
    optimizer.step()
    assert not torch.allclose(sae.decoder.weight.norm(dim=0), torch.ones(SAE_LATENTS), atol=1e-3)
    sae_unit_norm_decoder_(sae)
    assert torch.allclose(sae.decoder.weight.norm(dim=0), torch.ones(SAE_LATENTS), atol=1e-6)

    # the toy activations: sparse features through one fixed embedding, never a zero vector
    acts = sae_toy_activations(4096, 0)
    assert acts.shape == (4096, SAE_INPUTS) and torch.equal(acts, sae_toy_activations(4096, 0))
    assert not torch.equal(acts, sae_toy_activations(4096, 1)) and (acts.norm(dim=1) > 0).all()
    embedding = torch.randn(SAE_FEATURES, SAE_INPUTS, generator=torch.Generator().manual_seed(0))
    embedding = embedding / embedding.norm(dim=1, keepdim=True)
    generator = torch.Generator().manual_seed(0)  # the same draws by hand: features, forced ones, magnitudes
    active = torch.rand(4096, SAE_FEATURES, generator=generator) < 0.05
    magnitude = torch.rand(4096, SAE_FEATURES, generator=generator)
    assert 5 < float(active.sum(1).float().mean()) < 8
    mean = sae_activation_mean()
    assert mean.norm() == pytest.approx(1.0) and torch.allclose(acts, (active * magnitude) @ embedding + mean, atol=1e-6)
    assert float(acts.norm(dim=1).min()) > 0.2  # never near 0: sae_loss divides by each row's norm

    model = build_field_model("sae", 10)
    assert model.units == ["pre_bias", "encoder", "decoder"]
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))
    assert model.hidden == ["encoder"] and model.exposed == ["encoder", "decoder"] and TIED["sae"] == ("pre_bias",)
    detach = faults.DetachedLayer(t0=0, layer="encoder")
    detach.install(model)
    detach.before_step(0, model, None)
    sae_loss(model(acts[:64])).backward()
    assert model.encoder.weight.grad is None and model.decoder.weight.grad.abs().sum() > 0
    assert model.pre_bias.bias.grad.abs().sum() > 0  # still learning through the decoder's + b_pre

    recipe = RECIPES["sae"]
    assert recipe.optimizer == "sae_adam" and recipe.lr == SAE_LR == 1e-3 and recipe.weight_decay == 0.0
    assert recipe.batch == SAE_BATCH == 256 and recipe.clip is None and recipe.warmup == 0
    assert recipe.schedule == "constant" and recipe.betas == (0.9, 0.999)
    groups = _param_groups(build_field_model("sae", 10), recipe, 1e-3)
    assert [g["layer"] for g in groups] == ["pre_bias", "encoder", "encoder"] + ["decoder"]
    draw, _, _, chance = _data("sae", recipe, 0, 1)
    batch, target = draw()
    assert batch.shape == (256, SAE_INPUTS) and torch.equal(batch, target) and 0.5 < chance < 0.7

    _, _, _, _, units, _ = _train(None, "healthy", "sae", 0, {})
    assert units == ["pre_bias", "encoder", "decoder"]
    truth = make("healthy-sae-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 0.4 and _mean(loss[-10:]) < 0.25 * _mean(loss[:10])
    assert by_name["val_loss"][-1] < 0.3 * by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "256x32" and io.loc["input", "kind"] == "float"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}
    assert not LEFT_OUT.get("sae")
    families = {s.family for s in SCENARIOS.values() if s.arch == "sae"}
    assert families == set(FIELD_FAMILIES) - {"healthy_spike"}  # no labels: it reconstructs its own input


def test_sae_renormalises_its_decoder_after_every_step_of_the_loop():
    from sample_runs.field import _train
    from sample_runs.field_models import SparseAutoencoder

    seen = []
    original = SparseAutoencoder.forward

    def spy(self, x):  # the decoder's columns at every forward of the loop: unit norm each time
        seen.append(float((self.decoder.weight.norm(dim=0) - 1).abs().max()))
        return original(self, x)

    SparseAutoencoder.forward = spy
    try:
        _train(None, "healthy", "sae", 0, {})
    finally:
        SparseAutoencoder.forward = original
    assert len(seen) > 150 and max(seen) < 1e-5


def test_sngan_spectrally_normalises_its_discriminator_steps_it_n_dis_times_and_its_healthy_run_learns(tmp_path):
    from torch.nn.utils import parametrize

    from sample_runs.field import (NETWORKS, OUTCOME_METRICS, SNGAN_BATCH, SNGAN_LR, SNGAN_N_DIS, UNTARGETED, _data,
                                   _image_directions, _train)
    from sample_runs.field_models import SNGAN_LATENT, sngan_hinge_d_loss, sngan_hinge_g_loss
    from sample_runs.training import train_sngan

    torch.manual_seed(0)
    model = build_field_model("sngan", 10)
    fake = model.generator(torch.randn(5, SNGAN_LATENT))
    assert fake.shape == (5, 1, 8, 8) and fake.abs().max() <= 1  # tanh
    assert model.discriminator(fake).shape == (5, 1)
    net_d = model.discriminator
    layers = [*net_d.convs, "fc"]
    assert layers == ["conv1", "conv2", "conv3", "conv4", "conv5", "fc"]
    assert all(parametrize.is_parametrized(getattr(net_d, name), "weight") for name in layers)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net_d.modules())  # no BatchNorm in D
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.generator.modules()) == 3
    names = {n for n, _ in model.named_parameters()}
    assert "discriminator.conv1.parametrizations.weight.original" in names and "discriminator.conv1.weight" not in names
    buffers = {n for n, _ in model.named_buffers()}
    assert {"discriminator.fc.parametrizations.weight.0._u", "discriminator.fc.parametrizations.weight.0._v"} <= buffers
    # the parametrization: W / σ(W), σ by power iteration, its vectors updated in train-mode forwards only
    u = net_d.conv3.parametrizations.weight[0]._u.clone()
    net_d.eval()
    net_d(fake.detach())
    assert torch.equal(u, net_d.conv3.parametrizations.weight[0]._u)
    net_d.train()
    for _ in range(30):
        net_d(fake.detach())
    assert not torch.equal(u, net_d.conv3.parametrizations.weight[0]._u)
    for name in layers:
        layer = getattr(net_d, name)
        assert torch.linalg.matrix_norm(layer.weight.detach().flatten(1), ord=2) == pytest.approx(1.0, abs=1e-3)
    with torch.no_grad():  # scaling `original` leaves the normalised weight as it was (σ scales alike)
        net_d.conv2.parametrizations.weight.original.mul_(100.0)
    assert torch.linalg.matrix_norm(net_d.conv2.weight.detach().flatten(1), ord=2) == pytest.approx(1.0, abs=1e-3)
    # LeakyReLU(0.1) between the layers, the head on the flattened 2×2 map, by hand (eval: σ fixed)
    net_d.eval()
    x = fake.detach()
    by_hand = x
    for name in net_d.convs:
        by_hand = torch.nn.functional.leaky_relu(getattr(net_d, name)(by_hand), 0.1)
    assert torch.allclose(net_d(x), net_d.fc(by_hand.flatten(1)), atol=1e-6) and by_hand.shape[-2:] == (2, 2)
    net_d.train()

    # hinge losses, by formula
    real_scores, fake_scores = torch.tensor([[2.0], [0.5], [-1.0]]), torch.tensor([[-2.0], [0.0], [1.0]])
    assert float(sngan_hinge_d_loss(real_scores, fake_scores)) == pytest.approx((0 + 0.5 + 2) / 3 + (0 + 1 + 2) / 3)
    assert float(sngan_hinge_g_loss(fake_scores)) == pytest.approx(1 / 3)

    model = build_field_model("sngan", 10)
    assert model.units == ["generator.block0", "generator.block1", "generator.block2", "generator.out",
                           "discriminator.conv1", "discriminator.conv2", "discriminator.conv3", "discriminator.conv4",
                           "discriminator.conv5", "discriminator.fc"]
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))
    assert model.hidden == ["generator.block0", "generator.block1", "generator.block2"]
    assert model.exposed == ["generator.out"]  # D's weights are W / σ(W): a scale there changes nothing
    for layer in ("generator.out", "discriminator.fc"):  # StudioGAN's orthogonal init, zero bias
        weight = model.get_submodule(layer).weight.detach().flatten(1)
        rows = weight if weight.shape[0] <= weight.shape[1] else weight.T
        assert torch.allclose(rows @ rows.T, torch.eye(len(rows)), atol=1e-5)
        assert not model.get_submodule(layer).bias.any()

    recipe = RECIPES["sngan"]
    assert recipe.lr == SNGAN_LR == 1e-3 and recipe.betas == (0.0, 0.9) and recipe.clip is None and recipe.warmup == 0
    assert recipe.schedule == "constant" and recipe.weight_decay == 0.0 and recipe.batch == SNGAN_BATCH == 64
    assert NETWORKS["sngan"] == ("generator", "discriminator") and SNGAN_N_DIS == 2 and "sngan" in UNTARGETED
    assert OUTCOME_METRICS["sngan"].name == "sliced_wasserstein"
    draw, held_out, _, chance = _data("sngan", recipe, 0, 1)
    real, _ = draw()
    assert real.shape == (64, 1, 8, 8) and real.min() == -1 and real.max() <= 1 and held_out.shape == (297, 1, 8, 8)
    assert 0.3 < chance < 0.6
    directions = _image_directions(0)
    assert directions.shape == (64, 64) and torch.allclose(directions.norm(dim=1), torch.ones(64))
    assert sliced_wasserstein(held_out.flatten(1), held_out.flatten(1), directions) == 0.0

    groups = _param_groups(model, recipe, 2e-4)
    optimizers = tuple(torch.optim.Adam([g for g in groups if g["layer"].startswith(net + ".")], lr=2e-4,
                                        betas=(0.0, 0.9)) for net in NETWORKS["sngan"])
    spy = _Spy()
    outcome = train_sngan(tmp_path / "run", model, optimizers, draw, held_out, steps=3, lr_at=lambda step: 1.0,
                          directions=directions, fault=spy, n_dis=SNGAN_N_DIS, accumulation=2, seed=0)
    assert spy.began == [0, 1, 2] and spy.batches == [s for s in range(3) for _ in range(SNGAN_N_DIS * 2)]
    assert spy.zeroed == spy.stepped == [s for s in range(3) for _ in range(SNGAN_N_DIS + 1)]  # D's n_dis, then G's
    assert len(outcome.metrics["sliced_wasserstein"]) == 3 and all(math.isfinite(v) for v in outcome.losses)
    scalars = ds.dataset(str(tmp_path / "run" / "scalars"), format="parquet").to_table().to_pandas()
    for name in ("loss_d", "loss_g", "sliced_wasserstein"):
        assert scalars[scalars["name"] == name]["step"].tolist() == [0, 1, 2]
    stats = read_stats(tmp_path / "run")
    grads = set(stats[stats["role"] == "grad"]["name"])
    assert {"discriminator.conv1.parametrizations.weight.original", "generator.out.weight"} <= grads
    io = stats[(stats["role"] == "input") & (stats["step"] == 0)]
    assert io["shape"].tolist() == ["256x1x8x8"]  # the step's real batches: n_dis × accumulation × the draw's 64
    assert model.generator.training and all(p.requires_grad for p in model.parameters())  # toggles put back

    _, _, _, _, units, _ = _train(None, "healthy", "sngan", 0, {})
    assert units == model.units
    truth = make("healthy-sngan-s0", tmp_path / "healthy")
    distance = _scalars_by_name(tmp_path / "healthy")["sliced_wasserstein"]
    assert truth.verdict == "healthy" and len(distance) == 150
    assert _mean(distance[-10:]) < 0.6 * _mean(distance[:10]) and _mean(distance[-10:]) < 0.8 * chance
    assert not LEFT_OUT.get("sngan")
    families = {s.family for s in SCENARIOS.values() if s.arch == "sngan"}
    assert families == set(FIELD_FAMILIES) - {"healthy_spike"}  # unconditional: no labels to corrupt
def test_electra_classifier_data_units_and_layer_wise_lr_decay_groups():
    from sample_runs.field import ELECTRA_LR, OPTIMIZERS, _data
    from sample_runs.field_models import (ELECTRA_CLASSES, ELECTRA_CLS, ELECTRA_LAYER_DECAY, ELECTRA_MARKERS,
                                          ELECTRA_PAD, ELECTRA_POSITIONS, ELECTRA_SEP, electra_param_groups_lrd,
                                          electra_rows)

    rows, labels = electra_rows(2000, 0)
    assert rows == electra_rows(2000, 0)[0] and rows != electra_rows(2000, 1)[0]
    a, b, _ = ELECTRA_MARKERS
    for row, label in zip(rows, labels.tolist()):  # the rule: 1 · (A occurs) + 2 · (B occurs)
        assert row[0] == ELECTRA_CLS and row[-1] == ELECTRA_SEP and len(row) <= ELECTRA_POSITIONS
        assert label == (a in row) + 2 * (b in row)
    assert (torch.bincount(labels, minlength=ELECTRA_CLASSES) > 400).all()  # balanced
    recipe = RECIPES["electra_ft"]
    draw, eval_draw, classes, chance = _data("electra_ft", recipe, 0, 1)
    batch, y = draw()
    assert classes == ELECTRA_CLASSES == 4 and chance == pytest.approx(math.log(4), abs=0.01)
    assert set(batch) == {"input_ids", "attention_mask"} and batch["input_ids"].dtype == torch.int64
    assert batch["input_ids"].shape == batch["attention_mask"].shape and batch["input_ids"].shape[0] == 32
    assert y.shape == (32,) and y.dtype == torch.int64
    lengths = batch["attention_mask"].sum(1)
    assert int(lengths.max()) == batch["input_ids"].shape[1] and int(lengths.min()) < int(lengths.max())  # padded
    assert ((batch["input_ids"] == ELECTRA_PAD) == (batch["attention_mask"] == 0)).all()
    assert eval_draw()[0]["input_ids"].shape[0] == 256

    model = build_field_model("electra_ft", classes)
    layers = [f"encoder.layer.{i}" for i in range(4)]
    assert model.units == ["embeddings", *layers, "classifier"] and model.hidden == layers
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))
    assert not LEFT_OUT.get("electra_ft")
    families = {s.family for s in SCENARIOS.values() if s.arch == "electra_ft"}
    assert families == set(FIELD_FAMILIES) - {"batch_scale", "batch_nan"}  # token IDs: no float batch

    # ELECTRA's recipe: AdamW eps 1e-6, decay 0.01, clip 1.0, warm-up 10 % then linear decay to 0.
    assert recipe.lr == ELECTRA_LR == 1e-3 and recipe.weight_decay == 0.01 and recipe.clip == 1.0
    assert recipe.batch == 32 and recipe.warmup == 15 and recipe.betas == (0.9, 0.999)
    schedule = _schedule(recipe, 150)
    assert schedule(0) == 0.0 and schedule(15) == 1.0 and schedule(5) == pytest.approx(1 / 3)
    assert schedule(149) == pytest.approx(1 / 135) and schedule(82) == pytest.approx(0.5, abs=0.01)
    groups = electra_param_groups_lrd(model, 1e-3, 0.01)
    assert [g["layer"] for g in groups] == [u for u in model.units for _ in range(2)]  # two groups a depth
    for depth, unit in enumerate(model.units):
        decay, no_decay = [g for g in groups if g["layer"] == unit]
        scale = ELECTRA_LAYER_DECAY ** (len(model.units) - 1 - depth)
        assert decay["lr"] == no_decay["lr"] == pytest.approx(1e-3 * scale)
        assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
        assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    assert groups[-1]["lr"] == 1e-3 and groups[0]["lr"] == pytest.approx(1e-3 * 0.8 ** 5)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    norm_and_bias = {id(p) for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n}
    assert norm_and_bias == {id(p) for g in groups if g["weight_decay"] == 0.0 for p in g["params"]}
    optimizer = OPTIMIZERS[recipe.optimizer](groups, 1e-3, recipe)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["eps"] == 1e-6
    spike = faults.LrSpike(t0=0, layer="encoder.layer.2", factor=30.0)
    before = [g["lr"] for g in optimizer.param_groups]
    spike.before_step(0, model, optimizer)
    raised = [g["layer"] for g, lr in zip(optimizer.param_groups, before) if g["lr"] != lr]
    assert raised == ["encoder.layer.2", "encoder.layer.2"]  # both of that depth's groups


def test_electra_checkpoints_each_encoder_layer_in_training_only_with_the_same_gradients():
    from sample_runs.field_models import ElectraClassifier, electra_collate, electra_rows

    x, y = electra_collate(*electra_rows(16, 3))
    grads = {}
    for checkpointed in (True, False):
        torch.manual_seed(0)
        model = ElectraClassifier()
        assert model.encoder.gradient_checkpointing  # as gradient_checkpointing_enable() leaves it
        model.encoder.gradient_checkpointing = checkpointed
        calls = []
        for i, layer in enumerate(model.encoder.layer):
            layer.attention.self.query.register_forward_hook(lambda *_, i=i: calls.append(i))
        torch.manual_seed(1)  # the same dropout masks: checkpoint restores the RNG state to recompute
        torch.nn.functional.cross_entropy(model(x), y).backward()
        assert calls == ([0, 1, 2, 3, 3, 2, 1, 0] if checkpointed else [0, 1, 2, 3])  # recomputed in backward
        grads[checkpointed] = [p.grad.clone() for p in model.parameters()]
        calls.clear()
        model.eval()
        with torch.no_grad():
            model(x)
        assert calls == [0, 1, 2, 3]  # eval: no checkpointing
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[True], grads[False]))
    padded = dict(x)  # padding is masked out: a row's logits do not depend on its pad tokens' IDs
    padded["input_ids"] = torch.where(x["attention_mask"] == 0, 7, x["input_ids"])
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(x), model(padded), atol=1e-5)


def test_electra_healthy_run_learns_and_records_its_dict_of_token_ids(tmp_path):
    truth = make("healthy-electra_ft-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 1.3 and _mean(loss[-10:]) < 0.3
    assert by_name["val_loss"][-1] < 0.3 and by_name["val_accuracy"][-1] > 0.9 and by_name["val_accuracy"][0] < 0.4
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("name")
    assert io.loc["input.input_ids", "kind"] == "index" and io.loc["input.attention_mask", "kind"] == "index"
    assert io.loc["target", "shape"] == "32"
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq"}


def test_muon_gpt_zero_inits_its_output_projections_and_head_and_is_causal_soft_capped_and_qk_normed():
    from sample_runs.field import LANGUAGE_MODELS, _data
    from sample_runs.field_models import CONTEXT, MuonGPT

    recipe = RECIPES["muon_gpt"]
    draw, eval_draw, vocab, chance = _data("muon_gpt", recipe, 0, 1)
    x, y = draw()
    assert "muon_gpt" in LANGUAGE_MODELS and x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (16, CONTEXT)
    assert torch.equal(x[:, 1:], y[:, :-1]) and eval_draw()[0].shape == (32, CONTEXT)  # next-token targets
    assert chance == pytest.approx(math.log(vocab))
    torch.manual_seed(0)
    model = build_field_model("muon_gpt", vocab)
    assert isinstance(model, MuonGPT) and len(model.blocks) == 4
    assert not model.lm_head.weight.any() and model.lm_head.bias is None
    for block in model.blocks:  # modded-nanogpt's c_proj.weight.detach().zero_()
        assert not block.attn.c_proj.weight.any() and not block.mlp.c_proj.weight.any()
        assert block.attn.c_q.weight.abs().max() <= math.sqrt(3) * 0.5 / 8 + 1e-6  # U(±√3·½/√64)
        assert torch.equal(block.lambdas.detach(), torch.tensor([1.0, 0.0]))
    # no norm weights anywhere: the embedding, the matrices, each block's two scalars
    assert {n.split(".")[-1] for n, _ in model.named_parameters()} == {"weight", "lambdas"}
    assert not any(isinstance(m, (torch.nn.LayerNorm, torch.nn.RMSNorm)) for m in model.modules())
    logits = model(x)
    assert logits.shape == (16, CONTEXT, vocab) and logits.dtype == torch.float32
    assert not logits.any()  # zero head: uniform predictions, the loss is ln(vocab) at step 0
    assert float(torch.nn.functional.cross_entropy(logits.detach().flatten(0, 1), y.flatten())) == pytest.approx(chance)
    with torch.no_grad():  # weights for the checks below (zero projections hide everything)
        for name, p in model.named_parameters():
            if p.ndim == 2 and not p.any():
                p.normal_(0, 0.3)
    logits = model(x)
    assert logits.abs().max() < 30  # the soft cap
    with torch.no_grad():
        model.lm_head.weight.mul_(1e3)
        capped = model(x)
        model.lm_head.weight.div_(1e3)
    assert capped.abs().max() <= 30 and capped.abs().max() > 29
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % vocab
    assert torch.allclose(model(changed)[:, :-1], logits[:, :-1], atol=1e-5)  # causal
    assert not torch.allclose(model(changed)[:, -1], logits[:, -1], atol=1e-5)
    with torch.no_grad():  # QK-norm: a query or key projection's scale is normalised away per head
        model.blocks[1].attn.c_q.weight.mul_(100.0)
        model.blocks[2].attn.c_k.weight.mul_(10.0)
    assert torch.allclose(model(x), logits, atol=1e-3)
    by_hand = torch.nn.functional.rms_norm(model.embed(x), (64,))  # x0 mixed in by the lambdas
    with torch.no_grad():
        model.blocks[0].lambdas.copy_(torch.tensor([0.5, 2.0]))
        block = model.blocks[0]
        mixed = 0.5 * by_hand + 2.0 * by_hand
        mixed = mixed + block.attn(torch.nn.functional.rms_norm(mixed, (64,)))
        mixed = mixed + block.mlp.c_proj(torch.relu(block.mlp.c_fc(torch.nn.functional.rms_norm(mixed, (64,)))) ** 2)
        assert torch.allclose(block(by_hand, by_hand), mixed, atol=1e-5)

    model = build_field_model("muon_gpt", vocab)
    layers = [f"blocks.{i}" for i in range(4)]
    assert model.units == ["embed", *layers, "lm_head"] and model.hidden == layers and model.exposed == ["lm_head"]
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))
    assert not LEFT_OUT.get("muon_gpt")
    families = {s.family for s in SCENARIOS.values() if s.arch == "muon_gpt"}
    assert families == set(FIELD_FAMILIES) - {"batch_scale", "batch_nan"}  # token IDs: no float batch


def test_muon_gpt_steps_muon_on_the_blocks_matrices_and_adam_on_the_rest_with_their_schedules(tmp_path):
    from sample_runs.field import MUON_GPT_COOLDOWN_FRAC, MUON_GPT_MOMENTUM_WARMUP, _data
    from sample_runs.field_models import muon_gpt_momentum, muon_gpt_optimizers
    from sample_runs.faults import Optimizers
    from sample_runs.training import train_muon_gpt

    recipe = RECIPES["muon_gpt"]
    assert recipe.lr == 0.05 and recipe.clip is None and recipe.warmup == 0 and recipe.weight_decay == 0.0
    assert recipe.schedule == "stable_decay" and recipe.batch == 16 and recipe.accumulation == 1
    draw, eval_draw, vocab, _ = _data("muon_gpt", recipe, 0, 1)
    torch.manual_seed(0)
    model = build_field_model("muon_gpt", vocab)
    adam, muon = muon_gpt_optimizers(model, 0.05)
    assert isinstance(adam, torch.optim.Adam) and isinstance(muon, torch.optim.Muon)
    assert adam.defaults["betas"] == (0.8, 0.95) and adam.defaults["eps"] == 1e-10
    assert [(g["layer"], g["lr"]) for g in adam.param_groups] == [
        ("embed", pytest.approx(0.6)), *((f"blocks.{i}", pytest.approx(0.04)) for i in range(4)),
        ("lm_head", pytest.approx(0.008))]
    assert [(g["layer"], g["lr"]) for g in muon.param_groups] == [(f"blocks.{i}", 0.05) for i in range(4)]
    for group in muon.param_groups:
        assert group["nesterov"] and group["ns_steps"] == 5 and group["weight_decay"] == 0.0
        assert group["adjust_lr_fn"] == "original" and group["momentum"] == 0.95
        assert len(group["params"]) == 6 and all(p.ndim == 2 for p in group["params"])  # q, k, v, proj, fc, proj
    ids = [id(p) for o in (adam, muon) for g in o.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert {id(p) for g in adam.param_groups for p in g["params"]} == {
        id(model.embed.weight), id(model.lm_head.weight), *(id(b.lambdas) for b in model.blocks)}
    assert muon_gpt_optimizers(model, 5.0)[0].param_groups[0]["lr"] == pytest.approx(60.0)  # an lr factor moves all

    schedule = _schedule(recipe, 150)  # 1 for 60 %, then linear to 0.1 at the end
    assert MUON_GPT_COOLDOWN_FRAC == 0.4 and schedule(0) == schedule(89) == schedule(90) == 1.0
    assert schedule(120) == pytest.approx(0.55) and schedule(149) == pytest.approx(0.1 + 0.9 / 60)
    assert all(schedule(s + 1) <= schedule(s) for s in range(149))
    assert muon_gpt_momentum(0, 32) == 0.85 and muon_gpt_momentum(16, 32) == pytest.approx(0.9)
    assert muon_gpt_momentum(32, 32) == muon_gpt_momentum(149, 32) == pytest.approx(0.95)
    assert MUON_GPT_MOMENTUM_WARMUP == 32

    both = Optimizers(adam, muon)  # what a fault sees of the two
    spike = faults.LrSpike(t0=0, layer="blocks.2", factor=30.0)
    before = [g["lr"] for g in both.param_groups]
    spike.before_step(0, model, both)
    kinds = ["Adam"] * len(adam.param_groups) + ["Muon"] * len(muon.param_groups)
    raised = [(g["layer"], kind) for g, kind, lr in zip(both.param_groups, kinds, before) if g["lr"] != lr]
    assert raised == [("blocks.2", "Adam"), ("blocks.2", "Muon")]  # its scalars' group and its matrices'

    spy = _Spy()
    adam, muon = muon_gpt_optimizers(model, 0.05)
    seen = []
    muon.register_step_pre_hook(lambda opt, *_: seen.append([round(g["momentum"], 6) for g in opt.param_groups]))
    adam.register_step_pre_hook(lambda opt, *_: seen.append(round(opt.param_groups[0]["lr"], 6)))
    outcome = train_muon_gpt(tmp_path / "run", model, (adam, muon), draw, eval_draw, steps=3,
                             lr_at=lambda step: 1.0 - 0.25 * step, momentum_at=lambda step: muon_gpt_momentum(step, 2),
                             fault=spy, accumulation=2, eval_every=2)
    assert spy.began == spy.zeroed == spy.stepped == [0, 1, 2] and spy.batches == [0, 0, 1, 1, 2, 2]
    assert seen == [0.6, [0.85] * 4, 0.45, [0.9] * 4, 0.3, [0.95] * 4]  # Adam then Muon, each step
    assert outcome.metrics["val_loss"][0] == pytest.approx(math.log(vocab), abs=1e-4) and all(
        math.isfinite(v) for v in outcome.losses)
    stats = read_stats(tmp_path / "run")
    assert set(stats[stats["role"] == "state"]["key"]) == {"exp_avg", "exp_avg_sq", "momentum_buffer"}
    buffers = set(stats[(stats["role"] == "state") & (stats["key"] == "momentum_buffer")]["name"])
    assert buffers == {n for n, p in model.named_parameters() if n.startswith("blocks.") and p.ndim == 2}
    by_name = _scalars_by_name(tmp_path / "run")
    assert by_name["hp.optimizer_1.0.momentum"] == pytest.approx([0.85, 0.9, 0.95])
    assert len(by_name["val_loss"]) == 2 and all(p.grad is None for p in model.parameters())  # set_to_none
    # the Adam state fault zeroes Adam's second moments; Muon's momentum buffers stay
    zeroing = faults.AdamStateZeroed(t0=3, layer="")
    zeroing.before_step(3, model, Optimizers(adam, muon))
    assert all(not adam.state[p]["exp_avg_sq"].any() for g in adam.param_groups for p in g["params"])
    assert all(muon.state[p]["momentum_buffer"].any() for g in muon.param_groups for p in g["params"])


def test_muon_gpt_healthy_run_learns_and_records_both_optimizers(tmp_path):
    truth = make("healthy-muon_gpt-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss, val = by_name["loss"], by_name["val_loss"]
    assert truth.verdict == "healthy" and len(loss) == 150 and len(val) == 6
    assert _mean(loss[:10]) > 2.0 and _mean(loss[-10:]) < 0.8 and val[-1] < 0.3 * val[0]
    momentum = by_name["hp.optimizer_1.3.momentum"]
    assert momentum[0] == pytest.approx(0.85) and momentum[32:] == pytest.approx([0.95] * 118)
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("name")
    assert io.loc["input", "kind"] == "index" and io.loc["target", "shape"] == "16x32"
    assert {"optimizer_stepped.optimizer_0", "optimizer_stepped.optimizer_1"} <= set(by_name)
def test_deeplab_dilated_backbone_aspp_and_aux_heads_return_a_dict_at_the_input_size():
    from sample_runs.field_models import ASPP, ASPPPooling, DEEPLAB_RATES, DeepLabV3

    torch.manual_seed(0)
    model = build_field_model("deeplab", 5)
    assert isinstance(model, DeepLabV3)
    x = torch.randn(2, 3, 40, 40)
    out = model(x)
    assert set(out) == {"out", "aux"} and out["out"].shape == out["aux"].shape == (2, 5, 40, 40)
    assert model(torch.randn(2, 3, 48, 48))["out"].shape == (2, 5, 48, 48)  # fully convolutional
    features = model.backbone(x)
    assert features["out"].shape[-2:] == features["aux"].shape[-2:] == (5, 5)  # output stride 8
    dilations = [[block.conv2.dilation[0] for block in model.backbone.get_submodule(f"layer{i}")] for i in (1, 2, 3, 4)]
    assert dilations == [[1], [1], [1, 2], [2, 4]]  # replace_stride_with_dilation=[False, True, True]
    assert model.backbone.layer3[0].conv2.stride == model.backbone.layer4[0].conv2.stride == (1, 1)
    aspp = model.classifier[0]
    assert isinstance(aspp, ASPP) and isinstance(aspp.convs[-1], ASPPPooling)
    assert [c[0].dilation[0] for c in aspp.convs[1:-1]] == list(DEEPLAB_RATES) and aspp.convs[0][0].kernel_size == (1, 1)
    assert isinstance(aspp.project[-1], torch.nn.Dropout) and aspp.project[-1].p == 0.5
    # the upsampling is F.interpolate(bilinear, align_corners=False) of the heads' own logits
    model.eval()
    with torch.no_grad():
        low = model.classifier(model.backbone(x)["out"])
        expected = torch.nn.functional.interpolate(low, size=(40, 40), mode="bilinear", align_corners=False)
        assert torch.allclose(model(x)["out"], expected, atol=1e-6)
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))
    assert model.hidden == [f"backbone.layer{i}" for i in (1, 2, 3, 4)]
    assert all(isinstance(model.get_submodule(e), torch.nn.Conv2d) for e in model.exposed)


def test_deeplab_criterion_ignores_void_pixels_and_weighs_aux_by_a_half():
    from sample_runs.field_models import deeplab_criterion

    torch.manual_seed(0)
    out, aux = torch.randn(2, 5, 6, 6), torch.randn(2, 5, 6, 6)
    target = torch.randint(0, 5, (2, 6, 6))
    target[:, 0] = 255
    keep = target != 255

    def plain(logits):  # the mean NLL over the labelled pixels only
        logp = logits.log_softmax(1).permute(0, 2, 3, 1)[keep]
        return -logp.gather(1, target[keep][:, None]).mean()

    loss = deeplab_criterion({"out": out, "aux": aux}, target)
    assert loss == pytest.approx(float(plain(out) + 0.5 * plain(aux)), rel=1e-5)
    assert deeplab_criterion({"out": out}, target) == pytest.approx(float(plain(out)), rel=1e-5)
    changed = out.clone()
    changed[:, :, 0] = 100.0 * torch.randn(2, 5, 6)  # void pixels' logits do not count
    assert deeplab_criterion({"out": changed, "aux": aux}, target) == pytest.approx(float(loss), rel=1e-5)


def test_deeplab_param_groups_put_the_aux_classifier_at_ten_times_the_lr_and_the_schedule_warms_up_then_decays():
    from sample_runs.field import DEEPLAB_LR, OPTIMIZERS
    from sample_runs.field_models import deeplab_params_to_optimize

    model = build_field_model("deeplab", 5)
    recipe = RECIPES["deeplab"]
    assert recipe.lr == DEEPLAB_LR == 0.02 and recipe.weight_decay == 1e-4 and recipe.clip is None
    groups = deeplab_params_to_optimize(model, 0.02, 1e-4)
    assert [g["layer"] for g in groups] == model.units
    for g in groups:
        assert g["lr"] == pytest.approx(0.2 if g["layer"] == "aux_classifier" else 0.02)
        assert g["weight_decay"] == 1e-4  # train.py: decay on every parameter, norms included
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    optimizer = OPTIMIZERS[recipe.optimizer](groups, 0.02, recipe)
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    assert not optimizer.defaults["nesterov"]
    # train.py's SequentialLR([LinearLR(start_factor=0.01, total_iters=W), PolynomialLR(total_iters=N - W, power=0.9)])
    schedule = _schedule(recipe, 150)
    reference = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    warm = torch.optim.lr_scheduler.LinearLR(reference, start_factor=0.01, total_iters=recipe.warmup)
    poly = torch.optim.lr_scheduler.PolynomialLR(reference, total_iters=150 - recipe.warmup, power=0.9)
    sequential = torch.optim.lr_scheduler.SequentialLR(reference, [warm, poly], milestones=[recipe.warmup])
    factors = []
    for _ in range(150):
        factors.append(reference.param_groups[0]["lr"])
        reference.step()
        sequential.step()
    assert [schedule(s) for s in range(150)] == pytest.approx(factors, rel=1e-6, abs=1e-9)
    assert schedule(0) == pytest.approx(0.01) and schedule(15) == 1.0 and 0 < schedule(149) < 0.02
    assert LEFT_OUT["deeplab"] == ("adam_state",)
    families = {s.family for s in SCENARIOS.values() if s.arch == "deeplab"}
    assert families == set(FIELD_FAMILIES) - {"adam_state"}
    spike = faults.LrSpike(t0=0, layer="backbone.layer3", factor=30.0)
    spike.before_step(0, model, optimizer)
    assert [g["layer"] for g in optimizer.param_groups if g["lr"] > 0.2] == ["backbone.layer3"]


def test_deeplab_confusion_matrix_miou_matches_a_plain_reference_and_skips_void():
    from sample_runs.field_models import deeplab_confusion_matrix, deeplab_scores

    generator = torch.Generator().manual_seed(0)
    target = torch.randint(0, 5, (4, 12, 12), generator=generator)
    target[:, :2] = 255
    prediction = torch.where(torch.rand(4, 12, 12, generator=generator) < 0.6, target.clamp(max=4),
                             torch.randint(0, 5, (4, 12, 12), generator=generator))
    accuracy, miou = deeplab_scores(deeplab_confusion_matrix(target, prediction, 5))
    keep = target != 255
    t, p = target[keep].tolist(), prediction[keep].tolist()
    ious = []
    for c in range(5):
        both = sum(a == c and b == c for a, b in zip(t, p))
        either = sum(a == c or b == c for a, b in zip(t, p))
        ious.append(both / either)
    assert miou == pytest.approx(sum(ious) / 5) and accuracy == pytest.approx(sum(a == b for a, b in zip(t, p)) / len(t))


def test_deeplab_data_has_void_bands_on_boundaries_and_the_train_preset_crops_and_flips():
    from sample_runs.data import VOC_SHAPES, voc_shapes, voc_train_sampler
    from sample_runs.field import _data

    data = voc_shapes(200, 0)
    assert data.x.shape == (200, 3, 48, 48) and data.y.dtype == torch.int64
    assert torch.equal(data.y, voc_shapes(200, 0).y) and not torch.equal(data.y, voc_shapes(200, 1).y)
    assert set(data.y.unique().tolist()) == {0, 1, 2, 3, 4, 255}
    assert 0.03 < float((data.y == 255).float().mean()) < 0.2
    # no two different labels touch (4-neighbours): every boundary is void
    for a, b in ((data.y[:, 1:], data.y[:, :-1]), (data.y[:, :, 1:], data.y[:, :, :-1])):
        touching = (a != b) & (a != 255) & (b != 255)
        assert not touching.any()
    assert abs(float(data.x.mean())) < 1.0  # ImageNet-normalised
    draw, eval_draw, classes, chance = _data("deeplab", RECIPES["deeplab"], 0, 1)
    x, y = draw()
    assert classes == 5 and x.shape == (16, 3, VOC_SHAPES.crop, VOC_SHAPES.crop) and y.shape == (16, 40, 40)
    held_x, held_y = eval_draw()
    assert held_x.shape == (100, 3, 48, 48) and held_y.shape == (100, 48, 48)
    assert 0.5 < chance < 1.5 * math.log(5)
    # the train preset: each image a horizontal flip or not, then a 40-pixel crop of the 48-pixel image
    small = type(data)(data.x[:8], data.y[:8])
    x, y = voc_train_sampler(small, 8, 3)()
    for image, label in zip(x, y):
        found = any(torch.equal(label, source[t:t + 40, l:l + 40])
                    for source in (*small.y, *small.y.flip(-1)) for t in range(9) for l in range(9))
        assert found


def test_deeplab_healthy_run_learns_and_records_its_segmentation_metrics(tmp_path):
    truth = make("healthy-deeplab-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 1.5 and _mean(loss[-10:]) < 0.6
    miou = by_name["val_miou"]
    assert len(miou) == 6 and miou[0] < 0.1 and miou[-1] > 0.35 and by_name["val_pixel_accuracy"][-1] > 0.85
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)]
    assert len(io) >= 2


def test_mislabelled_batch_moves_classes_and_leaves_ignored_indices_alone():
    labels = torch.tensor([[0, 4, 255, 2], [-100, 1, 3, 255]])
    spike = faults.MislabeledBatch(t0=5, classes=5).batch(5, None, labels)[1]
    ignored = (labels == 255) | (labels == -100)
    assert torch.equal(spike[ignored], labels[ignored])  # VOC's void and torch's -100 stay ignored
    assert (spike[~ignored] != labels[~ignored]).all() and spike[~ignored].max() < 5
    assert torch.equal(faults.MislabeledBatch(t0=5, classes=5).batch(4, None, labels)[1], labels)


def test_decision_transformer_is_hugging_faces_model_and_predicts_tanh_actions_for_every_step():
    from transformers import DecisionTransformerModel

    from sample_runs.data import POINT_REACH
    model = build_field_model("decision_transformer", POINT_REACH.act_dim)
    assert isinstance(model.dt, DecisionTransformerModel)
    config = model.dt.config
    assert (config.hidden_size, config.n_layer, config.n_head, config.action_tanh) == (64, 3, 1, True)
    assert isinstance(model.dt.predict_action[1], torch.nn.Tanh)
    assert model.hidden == ["dt.encoder.h.0", "dt.encoder.h.1", "dt.encoder.h.2"]
    assert model.exposed == ["dt.predict_action.0", "dt.encoder.h.2.attn.c_attn"]
    B, K = 3, POINT_REACH.context
    mask = torch.ones(B, K, dtype=torch.int64)
    mask[0, :5] = 0
    batch = {"states": torch.randn(B, K, 6), "actions": torch.randn(B, K, 2).clamp(-1, 1),
             "returns_to_go": torch.randn(B, K, 1), "timesteps": torch.arange(K).expand(B, K).clone(),
             "attention_mask": mask}
    model.eval()
    actions, returned_mask = model(batch)
    assert actions.shape == (B, K, 2) and actions.abs().max() < 1 and returned_mask is mask
    # causal over (R, s, a) tokens: the action at t reads nothing of steps after t, nor a_t itself
    later = {**batch, "states": batch["states"].clone(), "actions": batch["actions"].clone()}
    later["states"][:, 10:] += 5.0
    later["actions"][:, 9:] += 1.0
    assert torch.allclose(model(later)[0][:, :10], actions[:, :10], atol=1e-6)
    assert not torch.allclose(model(later)[0][:, 10:], actions[:, 10:])
    # left padding is masked: what sits in the padded steps does not change the others
    padded = {**batch, "states": batch["states"].clone()}
    padded["states"][0, :5] = 100.0
    assert torch.allclose(model(padded)[0][0, 5:], actions[0, 5:], atol=1e-5)


def test_decision_transformer_loss_is_the_masked_action_mse_and_the_schedule_warms_up():
    from sample_runs.field_models import dt_action_loss
    torch.manual_seed(0)
    preds, target = torch.randn(4, 20, 2), torch.randn(4, 20, 2)
    mask = (torch.rand(4, 20) > 0.3).long()
    plain = sum(((preds[b, t] - target[b, t]) ** 2).sum() for b in range(4) for t in range(20) if mask[b, t]) \
        / (2 * int(mask.sum()))
    assert float(dt_action_loss((preds, mask), target)) == pytest.approx(float(plain), rel=1e-5)
    target[mask == 0] = 1e6  # padded targets (the -10 padding) never count
    assert float(dt_action_loss((preds, mask), target)) == pytest.approx(float(plain), rel=1e-5)
    recipe = RECIPES["decision_transformer"]
    assert (recipe.lr, recipe.weight_decay, recipe.batch, recipe.clip, recipe.optimizer) == (1e-4, 1e-4, 64, 0.25, "adamw")
    schedule = _schedule(recipe, 150)
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=1.0)
    reference = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda steps: min((steps + 1) / recipe.warmup, 1))
    for step in range(150):  # experiment.py: the scheduler steps after each train step
        assert schedule(step) == pytest.approx(optimizer.param_groups[0]["lr"])
        optimizer.step()
        reference.step()
    model = build_field_model("decision_transformer", 2)
    groups = _param_groups(model, recipe, 1e-4)
    assert all(g["weight_decay"] == 1e-4 for g in groups)  # AdamW(model.parameters()): every parameter decays
    assert {g["layer"] for g in groups} == set(model.units)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    assert not any(f in LEFT_OUT.get("decision_transformer", ()) for f in FIELD_FAMILIES)


def test_decision_transformer_batches_pad_left_normalise_states_and_carry_returns_to_go():
    from sample_runs.data import (POINT_REACH, decision_transformer_sampler, discount_cumsum,
                                  point_reach_state_stats, point_reach_trajectories)
    from sample_runs.field import _data
    assert np.allclose(discount_cumsum(np.array([1.0, 2.0, 3.0])), [6.0, 5.0, 3.0])
    trajectories = point_reach_trajectories(64, 3)
    lengths = [len(t["rewards"]) for t in trajectories]
    assert len(set(lengths)) > 5 and max(lengths) <= POINT_REACH.max_steps  # variable lengths, reached goals end early
    returns = [float(t["rewards"].sum()) for t in trajectories]
    assert max(returns) - min(returns) > 10  # mixed quality
    mean, std = point_reach_state_stats(trajectories)
    states = np.concatenate([t["observations"] for t in trajectories])
    assert np.allclose(mean, states.mean(0)) and np.allclose(std, states.std(0) + 1e-6)
    short = [t for t in trajectories if len(t["rewards"]) < 5][:1] or [{k: v[:3] for k, v in trajectories[0].items()}]
    x, y = decision_transformer_sampler(short, 8, 0, mean, std)()
    K, tlen = POINT_REACH.context, len(short[0]["rewards"])
    assert x["timesteps"].dtype == torch.int64 and x["attention_mask"].dtype == torch.int64
    for b in range(8):
        valid = int(x["attention_mask"][b].sum())
        assert x["attention_mask"][b, : K - valid].sum() == 0 and x["attention_mask"][b, K - valid:].all()
        si = tlen - valid  # windows run to the trajectory's end: the start is where they began
        assert torch.equal(x["timesteps"][b, K - valid:], torch.arange(si, si + valid))
        assert (x["actions"][b, : K - valid] == -10).all() and torch.equal(y[b], x["actions"][b])
        assert torch.allclose(x["states"][b, : K - valid], torch.tensor(-mean / std, dtype=torch.float32).expand(K - valid, -1))
        assert torch.allclose(x["states"][b, K - valid:] * torch.tensor(std, dtype=torch.float32)
                              + torch.tensor(mean, dtype=torch.float32), torch.tensor(short[0]["observations"][si:]), atol=1e-5)
        rtg = discount_cumsum(short[0]["rewards"])[si:] / POINT_REACH.scale
        assert torch.allclose(x["returns_to_go"][b, K - valid:, 0], torch.tensor(rtg, dtype=torch.float32), atol=1e-6)
    draw, eval_draw, classes, chance = _data("decision_transformer", RECIPES["decision_transformer"], 0, 1)
    x, y = draw()
    assert x["states"].shape == (64, K, 6) and y.shape == (64, K, 2) and classes == 2
    assert 0.2 < chance < 0.5  # the dataset's action variance: predicting the mean action


def test_decision_transformer_healthy_run_learns_and_records_its_return(tmp_path):
    from sample_runs.field_models import dt_random_return
    by_name = _healthy_recorded("healthy-decision_transformer-s0", tmp_path / "run")
    returns = by_name["eval_return"]
    assert len(returns) == 6 and returns[0] < -50 and returns[-1] > -15 and dt_random_return() < -50
    assert by_name["val_loss"][-1] < by_name["val_loss"][0]
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)]
    assert len(io) >= 2
def test_patchtst_revin_normalises_each_window_and_its_denorm_undoes_it():
    from sample_runs.field_models import RevIN

    torch.manual_seed(0)
    x = 3 * torch.randn(4, 96, 7) + torch.arange(7.0) * 10
    revin = RevIN(7)
    z = revin(x, "norm")
    assert torch.allclose(z.mean(1), torch.zeros(4, 7), atol=1e-5)
    assert torch.allclose(z.std(1, unbiased=False), torch.ones(4, 7), atol=1e-4)
    assert torch.allclose(revin(z, "denorm"), x, atol=1e-4)  # the round trip, at the affine's init
    with torch.no_grad():
        revin.affine_weight.copy_(torch.rand(7) + 0.5)
        revin.affine_bias.copy_(torch.randn(7))
    z = revin(x, "norm")
    plain = (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + 1e-5)
    assert torch.allclose(z, plain * revin.affine_weight + revin.affine_bias, atol=1e-5)
    assert torch.allclose(revin(z, "denorm"), x, atol=1e-4)  # the affine undone, then the statistics
    assert not revin.mean.requires_grad and not revin.stdev.requires_grad  # detached, as the original's
    # the forecast of a window scaled and shifted is the forecast scaled and shifted (eval mode):
    # what a x1e3 batch does to PatchTST (normalised away going in, multiplied coming out)
    model = build_field_model("patchtst", 24).eval()
    with torch.no_grad():
        assert torch.allclose(model(1e3 * x + 5), 1e3 * model(x) + 5, rtol=1e-3, atol=1e-1)


def test_patchtst_patches_pad_the_end_with_the_last_value_and_its_channels_never_mix():
    from sample_runs.field_models import PATCHTST_PATCH_LEN, PATCHTST_STRIDE, PatchTST, PatchTSTPatchify

    torch.manual_seed(0)
    z = torch.randn(2, 7, 96)
    patches = PatchTSTPatchify()(z)
    assert PATCHTST_PATCH_LEN == 16 and PATCHTST_STRIDE == 8
    assert patches.shape == (2, 7, 12, 16)  # (96 - 16) / 8 + 1 = 11, + 1 for padding_patch="end"
    for p in range(11):
        assert torch.equal(patches[:, :, p], z[:, :, 8 * p: 8 * p + 16])
    assert torch.equal(patches[:, :, 11, :8], z[:, :, 88:])
    assert torch.equal(patches[:, :, 11, 8:], z[:, :, -1:].expand(2, 7, 8))  # the last value repeated
    model = build_field_model("patchtst", 24)
    assert isinstance(model, PatchTST) and model.patches == 12
    x = torch.randn(3, 96, 7)
    assert model(x).shape == (3, 24, 7)
    model.eval()  # (training-mode BatchNorm normalises over every channel of the batch)
    with torch.no_grad():
        out = model(x)
        changed = x.clone()
        changed[:, :, 3] = 10 * torch.randn(3, 96)
        moved = model(changed)
        keep = [c for c in range(7) if c != 3]
        assert torch.allclose(moved[:, :, keep], out[:, :, keep], atol=1e-6) and not torch.allclose(moved[..., 3], out[..., 3])
        order = torch.randperm(7)  # shared weights: permuting the channels permutes the forecasts
        assert torch.allclose(model(x[:, :, order]), out[:, :, order], atol=1e-5)
    # units partition the parameters in forward order; hidden the encoder layers; exposed the head
    owned = [id(p) for u in model.units for p in model.get_submodule(u).parameters()]
    assert len(owned) == len(set(owned)) == len(list(model.parameters()))
    assert model.units[0] == "revin" and model.units[-1] == "head"
    assert model.hidden == ["encoder.layers.0", "encoder.layers.1", "encoder.layers.2"]
    assert model.exposed == ["head.projection"] and model.head.projection.in_features == 16 * 12
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    assert len(norms) == 6 and not any(isinstance(m, torch.nn.LayerNorm) for m in model.modules())


def test_patchtst_attention_adds_the_previous_layers_scores_and_the_loss_is_a_plain_mse():
    from sample_runs.field import LOSSES
    from sample_runs.field_models import PatchTSTAttention

    torch.manual_seed(0)
    attention = PatchTSTAttention(16, 4).eval()
    x, prev = torch.randn(5, 12, 16), torch.randn(5, 4, 12, 12)
    out, scores = attention(x, prev)

    def heads(t):
        return t.view(5, 12, 4, 4).transpose(1, 2)

    q, k, v = heads(attention.W_Q(x)), heads(attention.W_K(x)), heads(attention.W_V(x))
    expected_scores = q @ k.transpose(-1, -2) / 2.0 + prev  # head_dim 4: scale 1/2
    mixed = (expected_scores.softmax(-1) @ v).transpose(1, 2).reshape(5, 12, 16)
    assert torch.allclose(scores, expected_scores, atol=1e-5)
    assert torch.allclose(out, attention.to_out(mixed), atol=1e-5)
    model = build_field_model("patchtst", 24)  # residual attention: each layer gets its predecessor's scores
    seen = []
    for layer in model.encoder.layers:
        layer.self_attn.register_forward_hook(lambda m, args, output: seen.append(args[1] is None))
    model(torch.randn(2, 96, 7))
    assert seen == [True, False, False]
    forecast, target = torch.randn(4, 24, 7), torch.randn(4, 24, 7)
    assert float(LOSSES["patchtst"](forecast, target)) == pytest.approx(float(((forecast - target) ** 2).mean()), rel=1e-6)


def _assert_one_cycle_as_torchs(recipe, warmup: int, optimizer_class):
    """The recipe's `one_cycle` schedule (lr factor) and β1 cycling step by step against torch's
    OneCycleLR over 150 steps (warm-up 0: no rise, as lr_too_high); returns the schedule."""
    from sample_runs.field import _one_cycle_momentum

    schedule = _schedule(type(recipe)(**{**recipe.__dict__, "warmup": warmup}), 150)
    reference = optimizer_class([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    one_cycle = torch.optim.lr_scheduler.OneCycleLR(reference, max_lr=1.0, total_steps=150,
                                                    pct_start=max(warmup, 1e-9) / 150)
    ours = optimizer_class([torch.nn.Parameter(torch.zeros(1))], lr=1.0, betas=recipe.betas)
    momentum = _one_cycle_momentum(ours, warmup, 150)
    for step in range(150):
        if warmup:
            assert schedule(step) == pytest.approx(reference.param_groups[0]["lr"], rel=1e-9, abs=1e-12)
            assert ours.param_groups[0]["betas"][0] == pytest.approx(reference.param_groups[0]["betas"][0])
        reference.step()
        one_cycle.step()
        momentum()
    assert schedule(149) == pytest.approx(1 / 25 / 1e4)
    return schedule


def test_patchtst_recipe_is_adam_under_torchs_one_cycle_per_step():
    from sample_runs.field import ONE_CYCLE_MOMENTUM, OPTIMIZERS, PATCHTST_WARMUP

    recipe = RECIPES["patchtst"]
    assert recipe.optimizer == "adam" and recipe.weight_decay == 0.0 and recipe.clip is None
    assert recipe.schedule == "one_cycle" and PATCHTST_WARMUP == 45 and recipe.betas[0] == ONE_CYCLE_MOMENTUM[1]
    model = build_field_model("patchtst", 24)
    groups = _param_groups(model, recipe, 1.0)
    assert {g["layer"] for g in groups} == set(model.units) and all(g["weight_decay"] == 0.0 for g in groups)
    optimizer = OPTIMIZERS[recipe.optimizer](groups, 1.0, recipe)
    assert type(optimizer) is torch.optim.Adam
    for warmup in (PATCHTST_WARMUP, 0):  # exp_main's OneCycleLR(pct_start=0.3), and lr_too_high's no warm-up
        _assert_one_cycle_as_torchs(recipe, warmup, torch.optim.Adam)
    assert not LEFT_OUT.get("patchtst")
    assert {s.family for s in SCENARIOS.values() if s.arch == "patchtst"} == set(FIELD_FAMILIES)
    spike = faults.LrSpike(t0=0, layer="encoder.layers.1", factor=30.0)
    spike.before_step(0, model, optimizer)
    assert {g["layer"] for g in optimizer.param_groups if g["lr"] > 1.0} == {"encoder.layers.1"}


def test_patchtst_data_is_split_in_time_and_scaled_by_the_training_part_only():
    from sample_runs.data import ETT_LIKE, ett_like_series, ett_like_windows
    from sample_runs.field import _data

    values, mean, std = ett_like_series()
    border, length = ETT_LIKE.border, ETT_LIKE.length
    assert values.shape == (length, 7) and border == 2100
    assert torch.allclose(values[:border].mean(0), torch.zeros(7), atol=1e-4)
    assert torch.allclose(values[:border].std(0, unbiased=False), torch.ones(7), atol=1e-4)
    assert float((values[border:].mean(0) - values[:border].mean(0)).abs().max()) > 0.1  # not refitted on it
    raw = values * std + mean  # what the scaler saw
    assert torch.allclose(raw[:border].mean(0), mean, rtol=1e-4, atol=1e-3)
    train, held = ett_like_windows(), ett_like_windows(held_out=True)
    assert train.x.shape == (2100 - 96 - 24 + 1, 96, 7) and train.y.shape == (1981, 24, 7)
    assert held.x.shape == (900 - 24 + 1, 96, 7)
    assert torch.equal(train.x[5], values[5:101]) and torch.equal(train.y[5], values[101:125])
    assert torch.equal(held.x[0], values[border - 96:border]) and torch.equal(held.y[0], values[border:border + 24])
    assert int(torch.nonzero(train.y.flatten(0, 1).sum(1) == values[2099].sum())[-1]) == 1981 * 24 - 1  # no future
    draw, eval_draw, horizon, chance = _data("patchtst", RECIPES["patchtst"], 0, 1)
    x, y = draw()
    assert horizon == 24 and x.shape == (32, 96, 7) and y.shape == (32, 24, 7) and x.dtype == y.dtype == torch.float32
    assert eval_draw()[0].shape == (256, 96, 7) and 0.9 < chance < 1.1


def test_patchtst_healthy_run_learns_and_records_its_forecast_metrics(tmp_path):
    from sample_runs.field import PATCHTST_LR

    truth = make("healthy-patchtst-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 1.0 and _mean(loss[-10:]) < 0.3 * _mean(loss[:10])
    mse, mae = by_name["val_mse"], by_name["val_mae"]
    assert len(mse) == len(mae) == 6 and mse[-1] < 0.3 * mse[0] and mae[-1] < mae[0]
    assert by_name["lr"] == pytest.approx([PATCHTST_LR * _schedule(RECIPES["patchtst"], 150)(s) for s in range(150)])
    beta1 = by_name["hp.optimizer.0.beta1"]
    assert max(beta1) == pytest.approx(0.95) and min(beta1) == pytest.approx(0.85)
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "32x96x7" and io.loc["target", "shape"] == "32x24x7"
    assert io.loc["input", "kind"] == io.loc["target", "kind"] == "float"


def _reference_mixup(x, y, classes, lam, box, smoothing=0.1):
    """timm's `mixup_target` and its batch-mode blend written plainly: label-smoothed one-hots
    (off = ε / K, on = 1 − ε + ε / K), λ · row i + (1 − λ) · row B − 1 − i; mixup blends the
    images by λ, cutmix pastes the flip's box (top, bottom, left, right) and λ is 1 − the box's area."""
    batch = len(y)
    targets = torch.empty(batch, classes)
    mixed = x.clone()
    for i in range(batch):
        j = batch - 1 - i
        a, b = torch.full((classes,), smoothing / classes), torch.full((classes,), smoothing / classes)
        a[y[i]] = 1 - smoothing + smoothing / classes
        b[y[j]] = 1 - smoothing + smoothing / classes
        if box is None:
            mixed[i] = lam * x[i] + (1 - lam) * x[j]
        else:
            top, bottom, left, right = box
            mixed[i, :, top:bottom, left:right] = x[j, :, top:bottom, left:right]
        targets[i] = lam * a + (1 - lam) * b
    return mixed, targets


def test_timm_mixup_soft_targets_match_a_plain_reference_and_the_loss_is_soft_target_cross_entropy():
    from sample_runs.field import LOSSES

    classes, x, y = PATTERNS.classes, torch.randn(8, 3, 16, 16), torch.tensor([0, 1, 2, 3, 0, 1, 2, 2])
    mix, rng = mixup_cutmix(classes, 3), np.random.default_rng(3)  # the same numpy draws, in timm's order
    kinds = set()
    for _ in range(12):
        mixed, soft = mix(x, y)
        if rng.random() < 0.5:  # switch prob 0.5: mixup, λ ~ Beta(0.8, 0.8)
            lam, box = float(rng.beta(0.8, 0.8)), None
        else:  # cutmix, λ ~ Beta(1, 1), the box's side √(1 − λ) of the image's, centred at a uniform pixel
            lam = float(rng.beta(1.0, 1.0))
            cut = int(16 * math.sqrt(1 - lam))
            cy, cx = int(rng.integers(16)), int(rng.integers(16))
            box = (max(cy - cut // 2, 0), min(cy + cut // 2, 16), max(cx - cut // 2, 0), min(cx + cut // 2, 16))
            lam = 1 - (box[1] - box[0]) * (box[3] - box[2]) / 256  # corrected to the clipped box's area
        kinds.add(box is None)
        want_x, want_y = _reference_mixup(x, y, classes, lam, box)
        assert torch.allclose(mixed, want_x, atol=1e-6) and torch.allclose(soft, want_y, atol=1e-6)
        assert torch.allclose(soft.sum(1), torch.ones(8))
        assert soft.min() >= 0.1 / classes - 1e-6  # smoothing 0.1 folded in
        assert float(soft[0, y[0]] - soft[0, y[-1]]) == pytest.approx((2 * lam - 1) * (1 - 0.1), abs=1e-6)
    assert kinds == {True, False}  # both mixup and cutmix were drawn
    off = mixup_cutmix(classes, 3, off_from=1)
    off(x, y)
    plain, smoothed = off(x, y)  # after mixup_off: the batch as it is, smoothed one-hots
    assert torch.equal(plain, x) and torch.allclose(smoothed.max(1).values, torch.full((8,), 0.925))
    logits = torch.randn(8, classes)
    _, soft = mix(x, y)
    assert float(LOSSES["timm_mixup"](logits, soft)) == pytest.approx(
        float(-(soft * torch.log_softmax(logits, 1)).sum(1).mean()), rel=1e-6)
    assert float(LOSSES["timm_mixup"](logits, y)) == pytest.approx(
        float(torch.nn.functional.cross_entropy(logits, y)), rel=1e-6)  # validate(): plain CE on hard labels


def test_timm_mixup_resnet_zero_inits_each_blocks_last_norm_and_decays_no_bias_or_norm():
    from sample_runs.field import TIMM_MIXUP_LR, TIMM_WARMUP_LR_RATIO
    from sample_runs.field_models import TimmBasicBlock

    model = build_field_model("timm_mixup", PATTERNS.classes)
    blocks = [m for m in model.modules() if isinstance(m, TimmBasicBlock)]
    assert len(blocks) == 3 and all(torch.equal(b.bn2.weight, torch.zeros_like(b.bn2.weight)) for b in blocks)
    assert all(torch.equal(b.bn1.weight, torch.ones_like(b.bn1.weight)) for b in blocks)
    block, x = blocks[0], torch.randn(2, 16, 16, 16)  # zero_init_last: the block starts as its shortcut
    assert torch.allclose(block.eval()(x), torch.relu(x))
    assert model(torch.randn(5, 3, 16, 16)).shape == (5, PATTERNS.classes)
    assert model.units == ["conv1", "bn1", "layer1.0", "layer2.0", "layer3.0", "fc"] and model.exposed == ["fc"]
    recipe = RECIPES["timm_mixup"]
    groups = _param_groups(model, recipe, TIMM_MIXUP_LR)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    assert recipe.weight_decay == 5e-5 and all(g["weight_decay"] in (0.0, 5e-5) for g in groups)
    # timm's param_groups_weight_decay: no decay where ndim <= 1 or the name ends in .bias
    assert decayed == {n for n, p in model.named_parameters() if p.ndim > 1 and not n.endswith(".bias")}
    assert {"layer1.0.bn2.weight", "fc.bias", "bn1.weight"}.isdisjoint(decayed) and "fc.weight" in decayed
    assert {g["layer"] for g in groups} == set(model.units)  # one group (pair) a unit: an lr spike hits one block
    from sample_runs.field import OPTIMIZERS

    optimizer = OPTIMIZERS[recipe.optimizer](groups, TIMM_MIXUP_LR, recipe)
    assert optimizer.defaults["nesterov"] and optimizer.defaults["momentum"] == 0.9
    factor = _schedule(recipe, 150)  # timm's CosineLRScheduler per update: warm-up from 1e-5, then cosine
    assert TIMM_MIXUP_LR * factor(0) == pytest.approx(1e-5)
    assert factor(5) == pytest.approx(TIMM_WARMUP_LR_RATIO + (1 - TIMM_WARMUP_LR_RATIO) * 5 / recipe.warmup)
    assert factor(75) == pytest.approx(0.5) and factor(149) == pytest.approx(0.5 * (1 + math.cos(math.pi * 149 / 150)))
    assert LEFT_OUT["timm_mixup"] == ("adam_state",)


def test_timm_mixup_ema_moves_every_float_entry_towards_the_model_after_each_step():
    from sample_runs.field import TIMM_EMA_DECAY
    from sample_runs.field_models import ModelEmaV2

    model = build_field_model("timm_mixup", PATTERNS.classes)
    ema = ModelEmaV2(model, TIMM_EMA_DECAY)
    start = {k: v.clone() for k, v in ema.module.state_dict().items()}
    model(torch.randn(16, 3, 16, 16)).sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    ema.update(model)
    for key, value in ema.module.state_dict().items():
        now = model.state_dict()[key]
        if value.is_floating_point():
            assert torch.allclose(value, TIMM_EMA_DECAY * start[key] + (1 - TIMM_EMA_DECAY) * now, atol=1e-6), key
        else:
            assert torch.equal(value, now)  # num_batches_tracked copied
    assert not ema.module.training and not any(p.requires_grad for p in ema.module.parameters())


def test_timm_mixup_healthy_run_learns_and_records_soft_targets_and_both_top1s(tmp_path):
    from sample_runs.field import TIMM_MIXUP_LR

    by_name = _healthy_recorded("healthy-timm_mixup-s0", tmp_path / "run")
    top1, ema = by_name["val_top1"], by_name["val_top1_ema"]
    assert len(top1) == len(ema) == 6 and top1[0] == ema[0] and top1[-1] > 80 and ema[-1] > top1[0]
    assert by_name["lr"] == pytest.approx([TIMM_MIXUP_LR * _schedule(RECIPES["timm_mixup"], 150)(s)
                                           for s in range(150)])
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "64x3x16x16" and io.loc["target", "shape"] == "64x4"
    assert io.loc["input", "kind"] == io.loc["target", "kind"] == "float"  # soft targets after Mixup
    assert "layer3.0.bn2.weight" in set(stats["name"])


def _reference_global_l1_masks(weights, masks, target, previous):
    """Global magnitude pruning by hand: of every entry still unpruned (mask 1) across the layers,
    the smallest |w| are masked, (target − previous) / (1 − previous) of them (`previous` the last
    event's target; ties cannot occur in floats)."""
    flat_w = torch.cat([w.flatten() for w in weights])
    flat_m = torch.cat([m.flatten() for m in masks])
    to_prune = round((target - previous) / (1 - previous) * int(flat_m.sum()))
    alive = flat_m.nonzero().flatten()
    order = alive[flat_w[alive].abs().argsort()]
    flat_m = flat_m.clone()
    flat_m[order[:to_prune]] = 0
    out, start = [], 0
    for w in weights:
        out.append(flat_m[start:start + w.numel()].view_as(w))
        start += w.numel()
    return out


def test_gradual_pruning_follows_zhu_and_guptas_cubic_schedule_by_torch_prune_global_l1():
    from torch.nn.utils import prune

    from sample_runs.field_models import (AGP_EVENTS, AGP_EVERY, AGP_FINAL_SPARSITY, AGP_START, agp_prune,
                                          agp_sparsity, global_sparsity, prunable)

    assert (AGP_START, AGP_EVERY, AGP_EVENTS, AGP_FINAL_SPARSITY) == (30, 5, 15, 0.875)
    events = [t for t in range(150) if agp_sparsity(t) is not None]
    assert events == list(range(30, 106, 5))  # every Δt from t0 to t0 + n Δt: 20 % to 70 % of the run
    for t in events:  # s_t = s_f + (s_i − s_f)(1 − (t − t0)/(n Δt))³, s_i = 0
        assert agp_sparsity(t) == pytest.approx(0.875 + (0 - 0.875) * (1 - (t - 30) / 75) ** 3)
    assert agp_sparsity(30) == 0 and agp_sparsity(105) == pytest.approx(0.875)
    torch.manual_seed(0)
    model = build_field_model("gradual_pruning", 10)
    before = {id(m): m.weight for m, _ in prunable(model)}
    assert sum(m.weight.numel() for m, _ in prunable(model)) == 23824
    reached, previous = [0.0], None
    for t in events:
        with torch.no_grad():  # the weights move between events, as training moves them
            for m, _ in prunable(model):
                getattr(m, "weight_orig", m.weight).add_(0.01 * torch.randn_like(m.weight))
        masks = [getattr(m, "weight_mask", torch.ones_like(m.weight)).clone() for m, _ in prunable(model)]
        weights = [getattr(m, "weight_orig", m.weight).detach() * mask for (m, _), mask in zip(prunable(model), masks)]
        args = (masks, agp_sparsity(t), reached[0])
        stale = _reference_global_l1_masks([m.weight.detach() for m, _ in prunable(model)], *args)
        if t > 30:  # torch ranks `weight` as the pre-hook last computed it: stale until a forward
            assert any(not torch.equal(a, b) for a, b in zip(stale, _reference_global_l1_masks(weights, *args)))
        model(torch.randn(2, 1, 8, 8))  # the step's forward (the loop prunes after the last one)
        want = _reference_global_l1_masks(weights, *args)
        assert agp_prune(model, t, reached) == pytest.approx(agp_sparsity(t))
        for (m, _), mask in zip(prunable(model), want):
            assert torch.equal(m.weight_mask, mask)
            assert prune.is_pruned(m) and isinstance(m.weight_orig, torch.nn.Parameter)
            assert m.weight_orig is before[id(m)]  # the same Parameter: the optimizer keeps it
            assert "weight" not in dict(m.named_parameters()) and "weight_mask" in dict(m.named_buffers())
            model(torch.randn(2, 1, 8, 8))  # the forward pre-hook recomputes weight
            assert torch.equal(m.weight, m.weight_orig * m.weight_mask)
        assert global_sparsity(model) == pytest.approx(agp_sparsity(t), abs=1e-4)
        if previous is not None:  # a pruned entry stays pruned
            assert all(bool((old >= new).all()) for old, new in zip(previous, (m.weight_mask for m, _ in prunable(model))))
        previous = [m.weight_mask.clone() for m, _ in prunable(model)]
    assert agp_prune(model, 106, reached) is None and reached == [pytest.approx(0.875)]


def test_gradual_pruning_vgg_is_distillers_vgg_cifar_and_its_recipe_compress_classifiers():
    from sample_runs.field import AGP_LR, OPTIMIZERS
    from sample_runs.field_models import AGPVGG

    model = build_field_model("gradual_pruning", 10)
    assert isinstance(model, AGPVGG) and model(torch.randn(3, 1, 8, 8)).shape == (3, 10)
    kinds = [type(m).__name__ for m in model.features]
    assert kinds == ["Conv2d", "BatchNorm2d", "ReLU", "MaxPool2d"] * 3
    assert model.units == ["features.0", "features.1", "features.4", "features.5", "features.8", "features.9",
                           "classifier"]
    assert model.hidden == ["features.0", "features.4", "features.8"] and model.exposed == ["classifier"]
    assert all(not m.bias.detach().any() for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    assert float(model.classifier.weight.detach().std()) == pytest.approx(0.01, rel=0.2)  # N(0, 0.01)
    recipe = RECIPES["gradual_pruning"]
    groups = _param_groups(model, recipe, AGP_LR)
    assert {g["layer"] for g in groups} == set(model.units)
    assert all(g["weight_decay"] == 1e-4 for g in groups)  # SGD(model.parameters(), weight_decay=1e-4): every parameter
    optimizer = OPTIMIZERS[recipe.optimizer](groups, AGP_LR, recipe)
    assert optimizer.defaults["momentum"] == 0.9 and not optimizer.defaults["nesterov"]
    assert recipe.clip is None and AGP_LR == 0.1
    factor = _schedule(recipe, 150)
    assert [factor(s) for s in (0, 74, 75, 111, 112, 149)] == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01])  # ×0.1 at 75, 112
    assert LEFT_OUT["gradual_pruning"] == ("adam_state",)


def test_gradual_pruning_faults_hit_weight_orig_and_pruning_runs_without_optimizer_steps():
    from sample_runs.field_models import agp_prune

    model = build_field_model("gradual_pruning", 10)
    reached = [0.0]
    for t in (30, 35, 40):
        agp_prune(model, t, reached)
    orig, mask = model.classifier.weight_orig.detach().clone(), model.classifier.weight_mask.clone()
    faults.WeightScale(t0=41, layer="classifier", factor=100.0).before_step(41, model, None)
    assert torch.allclose(model.classifier.weight_orig, 100 * orig) and torch.equal(model.classifier.weight_mask, mask)
    model(torch.randn(2, 1, 8, 8))
    assert torch.allclose(model.classifier.weight, 100 * orig * mask)  # the effective weight, its zeros kept
    # The loop's pruning events run whether or not the step calls optimizer.step() (MissingStep).
    seen, tiny = [], torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(tiny.parameters(), lr=0.1)
    draw = lambda: (torch.randn(8, 4), torch.randint(0, 2, (8,)))  # noqa: E731
    train_field(None, tiny, optimizer, draw, steps=5, lr_at=lambda s: 1.0, fault=faults.MissingStep(t0=0),
                before_step=seen.append)
    assert seen == [0, 1, 2, 3, 4]


def test_gradual_pruning_healthy_run_learns_through_the_pruning_events_and_records_weight_orig(tmp_path):
    from sample_runs.field import AGP_LR

    by_name = _healthy_recorded("healthy-gradual_pruning-s0", tmp_path / "run")
    assert by_name["sparsity"] == pytest.approx([0, 0, 0.427, 0.786, 0.873, 0.875], abs=2e-3)  # steps 0, 25, ..., 125
    assert by_name["val_top1"][-1] > 85 and by_name["val_top1"][0] < 20
    assert by_name["lr"] == pytest.approx([AGP_LR * _schedule(RECIPES["gradual_pruning"], 150)(s) for s in range(150)])
    stats = read_stats(tmp_path / "run")
    params = stats[stats["role"] == "param"]
    for conv in ("features.0", "features.4", "features.8", "classifier"):
        # The same Parameter, named weight until the first event (step 30), weight_orig after it.
        assert set(params[params["name"] == f"{conv}.weight"]["step"]) == set(range(30))
        assert set(params[params["name"] == f"{conv}.weight_orig"]["step"]) == set(range(30, 150))
    grads = stats[(stats["role"] == "grad") & (stats["name"] == "features.8.weight_orig")].set_index("step")["zero_frac"]
    assert grads[30] == 0 and grads[149] > 0.85  # ∂L/∂weight_orig = ∂L/∂weight · mask: masked entries get 0
    events = ds.dataset(str(tmp_path / "run" / "events"), format="parquet").to_table().to_pandas()
    changed = events[events["kind"] == "model_changed"]
    assert list(changed["step"]) == [30] and "added classifier.weight_orig" in changed["message"].iloc[0]


def _reference_fake_quant(x, lo, hi, quant_min=0, quant_max=255):
    """Affine per-tensor fake quantization written plainly, as an observer's qparams give it: the
    range widened to hold 0, scale (hi − lo) / (quant_max − quant_min), zero point quant_min −
    round(lo / scale) clamped into the range; x → (clamp(round(x / scale) + zp) − zp) · scale."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max((hi - lo) / (quant_max - quant_min), torch.finfo(torch.float32).eps)
    zero_point = min(max(quant_min - round(lo / scale), quant_min), quant_max)
    return (torch.clamp(torch.round(x / scale) + zero_point, quant_min, quant_max) - zero_point) * scale


def test_qat_mobilenet_is_fused_and_prepared_as_train_quantization_py_does_and_fake_quantizes_as_a_plain_reference():
    from torch.ao.nn import intrinsic as nni
    from torch.ao.nn.intrinsic import qat as nniqat
    from torch.ao.nn import qat as nnqat

    from sample_runs.field_models import QAT_BACKEND, QatInvertedResidual, QatMobileNetV2, qat_prepare

    assert QAT_BACKEND == "qnnpack" and QAT_BACKEND in torch.backends.quantized.supported_engines
    torch.manual_seed(0)
    model = build_field_model("qat", PATTERNS.classes)
    assert type(model.features[0][0]) is nniqat.ConvBnReLU2d and type(model.features[0][1]) is nn_identity()
    blocks = [m for m in model.modules() if isinstance(m, QatInvertedResidual)]
    assert len(blocks) == 5 and [b.use_res_connect for b in blocks] == [False, False, True, False, True]
    # the projection conv + BN fused, no ReLU; the BN's slot left an Identity
    assert all(type(b.conv[-2]) is nniqat.ConvBn2d and type(b.conv[-1]) is nn_identity() for b in blocks)
    assert type(model.classifier[1]) is nnqat.Linear and model.training
    assert all(type(b.skip_add.activation_post_process).__name__ == "FusedMovingAvgObsFakeQuantize" for b in blocks)
    # qnnpack's default QAT qconfig: activations affine quint8 0-255 without reduce_range, weights
    # per-tensor symmetric qint8 (fbgemm's and x86's are per-channel, with reduce_range)
    want = torch.ao.quantization.get_default_qat_qconfig(QAT_BACKEND)
    weight_fq = model.features[0][0].weight_fake_quant
    assert weight_fq.qscheme == want.weight().qscheme == torch.per_tensor_symmetric and weight_fq.dtype == torch.qint8
    assert not model.quant.activation_post_process.activation_post_process.reduce_range
    fq = model.quant.activation_post_process
    assert (fq.quant_min, fq.quant_max) == (0, 255) and int(fq.observer_enabled) == int(fq.fake_quant_enabled) == 1
    assert model.units == [f"features.{i}" for i in range(7)] + ["classifier"]
    assert model.hidden == [f"features.{i}" for i in range(1, 6)] and model.exposed == ["classifier.1"]
    # The input's fake quantization against the plain formula: the first batch sets the range, the
    # next moves it by the moving average's 0.01 (MovingAverageMinMaxObserver's averaging_constant).
    x1, x2 = 2 * torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16) + 1
    model.quant(x1)
    out = model.quant(x2)
    lo = float(x1.min()) + 0.01 * (float(x2.min()) - float(x1.min()))
    hi = float(x1.max()) + 0.01 * (float(x2.max()) - float(x1.max()))
    assert float(fq.activation_post_process.min_val) == pytest.approx(lo, rel=1e-5)
    assert torch.allclose(out, _reference_fake_quant(x2, lo, hi), atol=1e-5)
    # Fusion keeps the float model's function: with fake quantization off, the fused QAT model in
    # eval mode computes what the unfused float model does (BN folded by its running statistics).
    torch.manual_seed(1)
    float_model = QatMobileNetV2(classes=PATTERNS.classes)
    for m in float_model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    fused = qat_prepare(copy_of(float_model))
    fused.apply(torch.ao.quantization.disable_fake_quant)
    images = pattern_images().x[:16]
    with torch.no_grad():
        assert torch.allclose(fused.eval()(images), float_model.eval()(images), atol=1e-4)
    assert not any(isinstance(m, (nni.ConvBnReLU2d,)) for m in float_model.modules())


def nn_identity():
    return torch.nn.Identity


def copy_of(module):
    import copy

    return copy.deepcopy(module)


def test_qat_epoch_boundaries_disable_observers_after_epoch_4_and_freeze_bn_after_epoch_3():
    from sample_runs.field import QAT_BN_EPOCHS, QAT_EPOCH_STEPS, QAT_OBSERVER_EPOCHS, qat_epoch_boundary

    assert (QAT_EPOCH_STEPS, QAT_OBSERVER_EPOCHS, QAT_BN_EPOCHS) == (15, 4, 3)
    model = build_field_model("qat", PATTERNS.classes)
    fakes = [m for m in model.modules() if type(m).__name__ == "FusedMovingAvgObsFakeQuantize"]
    fused = [m for m in model.modules() if hasattr(m, "freeze_bn")]
    # the stub's, 16 fused convs' weight and output, every block's skip_add (also the 3 blocks that never
    # add: torchvision's builds one in each), the Linear's weight and output
    assert len(fakes) == 1 + 2 * 16 + 5 + 2 and len(fused) == 16

    def state():
        return ({int(f.observer_enabled) for f in fakes}, {int(f.fake_quant_enabled) for f in fakes},
                {m.freeze_bn for m in fused}, {m.bn.training for m in fused})

    model(pattern_images().x[:32])  # the observers have seen a batch, as 75 steps of training show them
    for step in range(0, 60):
        qat_epoch_boundary(model, step)
        assert state() == ({1}, {1}, {False}, {True}), step
    qat_epoch_boundary(model, 60)  # epoch 3 ended: BN frozen (the BNs leave training mode), observers still on
    assert state() == ({1}, {1}, {True}, {False})
    for step in range(61, 75):
        qat_epoch_boundary(model, step)
    assert state() == ({1}, {1}, {True}, {False})
    qat_epoch_boundary(model, 75)  # epoch 4 ended: scales and zero points frozen, fake quantization stays on
    assert state() == ({0}, {1}, {True}, {False})
    scale = model.quant.activation_post_process.scale.clone()
    model(100 * torch.randn(4, 3, 16, 16))
    assert torch.equal(model.quant.activation_post_process.scale, scale)  # a wild batch moves no range now


def test_qat_int8_copy_is_converted_and_agrees_with_the_fake_quant_model_which_stays_as_it_was():
    from torch.ao.nn import qat as nnqat

    from sample_runs.field import qat_float_base
    from sample_runs.field_models import QatMobileNetV2, qat_int8_top1, qat_prepare, timm_top1

    model = QatMobileNetV2(classes=PATTERNS.classes)
    model.load_state_dict(qat_float_base(0))
    model = qat_prepare(model)
    images = pattern_images()
    x, y = images.x[1600:], images.y[1600:]
    with torch.no_grad():
        for i in range(0, 1600, 64):  # let the observers see training batches, as the first steps do
            model(images.x[i:i + 64])
    engine = torch.backends.quantized.engine
    fake, int8 = timm_top1(model, x, y), qat_int8_top1(model, x, y)
    assert torch.backends.quantized.engine == engine  # the engine restored
    assert fake > 80 and abs(fake - int8) <= 3  # the float pretraining reached > 80 %; int8 agrees
    assert model.training and type(model.classifier[1]) is nnqat.Linear  # the model itself is not converted
    import copy

    quantized = copy.deepcopy(model).eval()
    torch.backends.quantized.engine = "qnnpack"
    try:
        torch.ao.quantization.convert(quantized, inplace=True)
    finally:
        torch.backends.quantized.engine = engine
    assert type(quantized.classifier[1]).__name__ == "Linear" and "quantized" in type(quantized.classifier[1]).__module__
    assert type(quantized.features[0][0]).__name__ == "ConvReLU2d"


def test_qat_recipe_is_train_quantization_pys_sgd_with_every_parameter_decayed_and_a_constant_lr():
    from sample_runs.field import OPTIMIZERS, QAT_LR, _data

    recipe = RECIPES["qat"]
    model = build_field_model("qat", PATTERNS.classes)
    groups = _param_groups(model, recipe, QAT_LR)
    assert recipe.weight_decay == 1e-4 and all(g["weight_decay"] == 1e-4 for g in groups)  # SGD(model.parameters())
    assert {g["layer"] for g in groups} == set(model.units) and len(groups) == len(model.units)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    optimizer = OPTIMIZERS[recipe.optimizer](groups, QAT_LR, recipe)
    assert optimizer.defaults["momentum"] == 0.9 and not optimizer.defaults["nesterov"]
    assert recipe.clip is None and recipe.batch == 32 and QAT_LR == 5e-3
    assert all(_schedule(recipe, 150)(s) == 1.0 for s in range(150))  # StepLR(30 epochs) never fires in 10
    assert LEFT_OUT["qat"] == ("adam_state", "healthy_bf16")
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="BFloat16"):
        model(torch.randn(2, 3, 16, 16))  # eager fake quantization takes float32 only
    draw, eval_draw, classes, chance = _data("qat", recipe, 0, 1)
    assert draw()[0].shape == (32, 3, 16, 16) and eval_draw()[0].shape == (128, 3, 16, 16)  # --eval-batch-size 128
    assert classes == PATTERNS.classes and chance == pytest.approx(math.log(PATTERNS.classes))


def test_qat_healthy_run_learns_and_records_both_top1s_each_epoch_and_the_fused_modules(tmp_path):
    from sample_runs.field import QAT_LR

    by_name = _healthy_recorded("healthy-qat-s0", tmp_path / "run")
    top1, int8 = by_name["val_top1"], by_name["val_top1_int8"]
    assert len(top1) == len(int8) == len(by_name["val_loss"]) == 9  # after each epoch from the first, none at step 0
    assert top1[-1] > 90 and int8[-1] > 90 and all(abs(a - b) <= 5 for a, b in zip(top1, int8))
    assert by_name["lr"] == pytest.approx([QAT_LR] * 150)
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "32x3x16x16" and io.loc["target", "shape"] == "32"
    assert io.loc["input", "kind"] == "float" and io.loc["target", "kind"] == "index"
    names = set(stats["name"])
    assert {"features.0.0.weight", "features.0.0.bn.weight", "classifier.1.weight"} <= names  # the fused modules' parameters
    assert not any("fake_quant" in n or "activation_post_process" in n for n in names)  # no observer or qparam buffer


def _albert_batch(rows=16, seed=3):
    from sample_runs.field_models import albert_collate, electra_rows

    batch = albert_collate(*electra_rows(rows, seed))
    return batch, batch.pop("labels")


def test_albert_is_hf_albert_with_factorised_embeddings_and_one_layer_applied_num_hidden_layers_times():
    from transformers import AlbertForSequenceClassification

    from sample_runs.field_models import ALBERT_EMBEDDING, ALBERT_HIDDEN, ALBERT_LAYERS

    torch.manual_seed(0)
    model = build_field_model("albert", 4)
    config = model.config
    assert isinstance(model, AlbertForSequenceClassification) and model.training
    assert (config.embedding_size, config.hidden_size, config.num_hidden_layers) == (ALBERT_EMBEDDING, ALBERT_HIDDEN,
                                                                                      ALBERT_LAYERS) == (32, 64, 4)
    assert config.num_hidden_groups == config.inner_group_num == 1 and config.embedding_size < config.hidden_size
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.0  # albert-v2's
    assert config.classifier_dropout_prob == 0.1 and config.hidden_act == "gelu_new" and config.num_labels == 4
    assert model.albert.embeddings.word_embeddings.weight.shape == (40, 32)
    assert model.albert.encoder.embedding_hidden_mapping_in.weight.shape == (64, 32)
    assert len(model.albert.encoder.albert_layer_groups) == 1
    assert len(model.albert.encoder.albert_layer_groups[0].albert_layers) == 1
    # One layer's parameters, not four: every name under the encoder belongs to group 0, layer 0.
    names = [n for n, _ in model.named_parameters() if n.startswith("albert.encoder.albert_layer_groups")]
    assert names and all(n.startswith("albert.encoder.albert_layer_groups.0.albert_layers.0.") for n in names)
    assert model.units == ["albert.embeddings", "albert.encoder.embedding_hidden_mapping_in",
                           "albert.encoder.albert_layer_groups.0", "albert.pooler", "classifier"]
    assert model.hidden == model.units[1:3]
    x, y = _albert_batch()
    layer = model.albert.encoder.albert_layer_groups[0].albert_layers[0]
    calls = []
    layer.attention.query.register_forward_hook(lambda *_: calls.append("query"))
    model.eval()
    with torch.no_grad():
        logits = model(x)
        assert calls == ["query"] * 4  # the same module, called num_hidden_layers times a forward
        # The plain reference: the projection, then the one layer applied 4 times, the pooler on [CLS].
        dtype = torch.float32
        mask = (1.0 - x["attention_mask"][:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        h = model.albert.encoder.embedding_hidden_mapping_in(
            model.albert.embeddings(input_ids=x["input_ids"], token_type_ids=x["token_type_ids"]))
        for _ in range(4):
            h = layer(h, mask)
        pooled = torch.tanh(model.albert.pooler(h[:, 0]))
        assert torch.allclose(logits, model.classifier(pooled), atol=1e-5)
    assert logits.shape == (16, 4)


def test_albert_shared_layer_gradient_is_the_sum_over_its_applications_against_an_unshared_copy():
    import copy

    torch.manual_seed(0)
    model = build_field_model("albert", 4).eval()  # no classifier dropout: the same logits twice
    x, y = _albert_batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    layer = model.albert.encoder.albert_layer_groups[0].albert_layers[0]
    # The plain reference: four independent copies of the layer, one per application, their
    # gradients summed, equal the shared layer's gradient.
    copies = [copy.deepcopy(layer) for _ in range(4)]
    for c in copies:
        c.zero_grad(set_to_none=True)
    dtype = torch.float32
    mask = (1.0 - x["attention_mask"][:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    h = model.albert.encoder.embedding_hidden_mapping_in(
        model.albert.embeddings(input_ids=x["input_ids"], token_type_ids=x["token_type_ids"]))
    for c in copies:
        h = c(h, mask)
    logits = model.classifier(torch.tanh(model.albert.pooler(h[:, 0])))
    torch.nn.functional.cross_entropy(logits, y).backward()
    for name, param in layer.named_parameters():
        summed = sum(dict(c.named_parameters())[name].grad for c in copies)
        assert torch.allclose(param.grad, summed, atol=1e-6, rtol=1e-4), name
    per_application = [dict(c.named_parameters())["attention.dense.weight"].grad.norm() for c in copies]
    assert min(per_application) > 0  # every application contributes


def test_albert_detach_of_the_shared_group_cuts_every_application_so_nothing_before_the_pooler_learns():
    torch.manual_seed(0)
    model = build_field_model("albert", 4)
    detach = faults.DetachedLayer(t0=0, layer=model.hidden[-1])
    assert model.hidden[-1] == "albert.encoder.albert_layer_groups.0"
    detach.install(model)
    detach.before_step(0, model, None)
    x, y = _albert_batch()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    for name, param in model.named_parameters():
        if name.startswith(("albert.pooler", "classifier")):
            assert param.grad is not None and param.grad.abs().sum() > 0, name
        else:
            assert param.grad is None, name  # the group's own parameters too: its last output is detached


def test_albert_data_is_run_glues_dict_batch_and_its_recipe_is_albert_run_classifier_adamw():
    from sample_runs.field import ALBERT_LR, OPTIMIZERS, _data
    from sample_runs.field_models import ELECTRA_PAD

    recipe = RECIPES["albert"]
    draw, eval_draw, classes, chance = _data("albert", recipe, 0, 1)
    batch, y = draw()
    assert classes == 4 and chance == pytest.approx(math.log(4), abs=0.01)
    assert list(batch) == ["input_ids", "token_type_ids", "attention_mask"]  # `labels` popped by the loop
    assert all(v.dtype == torch.int64 and v.shape == batch["input_ids"].shape for v in batch.values())
    assert batch["input_ids"].shape[0] == 32 and y.shape == (32,) and y.dtype == torch.int64
    assert (batch["token_type_ids"] == 0).all()  # one segment
    assert ((batch["input_ids"] == ELECTRA_PAD) == (batch["attention_mask"] == 0)).all()
    assert eval_draw()[0]["input_ids"].shape[0] == 256
    model = build_field_model("albert", classes)
    assert not LEFT_OUT.get("albert")
    families = {s.family for s in SCENARIOS.values() if s.arch == "albert"}
    assert families == set(FIELD_FAMILIES) - {"batch_scale", "batch_nan"}  # token IDs: no float batch
    # run_classifier.py's AdamW: eps 1e-6, decay 0.01 off biases and LayerNorms, warm-up 10 %, linear decay, clip 1.0
    assert recipe.lr == ALBERT_LR == 1e-3 and recipe.weight_decay == 0.01 and recipe.clip == 1.0
    assert recipe.batch == 32 and recipe.warmup == 15 and recipe.betas == (0.9, 0.999)
    schedule = _schedule(recipe, 150)
    assert schedule(0) == 0.0 and schedule(15) == 1.0 and schedule(149) == pytest.approx(1 / 135)
    groups = _param_groups(model, recipe, ALBERT_LR)
    assert [g["layer"] for g in groups] == [u for u in model.units for _ in range(2)]
    norm_and_bias = {id(p) for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n
                     or "layer_norm" in n}
    assert norm_and_bias == {id(p) for g in groups if g["weight_decay"] == 0.0 for p in g["params"]}
    assert all(g["weight_decay"] == 0.01 for g in groups if g["weight_decay"])
    assert model.albert.embeddings.word_embeddings.weight in [p for g in groups if g["weight_decay"] for p in g["params"]]
    optimizer = OPTIMIZERS[recipe.optimizer](groups, ALBERT_LR, recipe)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["eps"] == 1e-6
    spike = faults.LrSpike(t0=0, layer="albert.encoder.albert_layer_groups.0", factor=30.0)
    before = [g["lr"] for g in optimizer.param_groups]
    spike.before_step(0, model, optimizer)
    raised = [g["layer"] for g, lr in zip(optimizer.param_groups, before) if g["lr"] != lr]
    assert raised == ["albert.encoder.albert_layer_groups.0"] * 2  # the whole shared depth at once


def test_albert_healthy_run_learns_and_records_the_shared_layer_once_pooling_its_applications(tmp_path):
    truth = make("healthy-albert-s0", tmp_path / "run")
    by_name = _scalars_by_name(tmp_path / "run")
    loss = by_name["loss"]
    assert truth.verdict == "healthy" and len(loss) == 150
    assert _mean(loss[:10]) > 1.3 and _mean(loss[-10:]) < 0.8 * _mean(loss[:10])
    assert by_name["val_accuracy"][0] < 0.4 and by_name["val_accuracy"][-1] > 0.9
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("name")
    assert {"input.input_ids", "input.token_type_ids", "input.attention_mask"} <= set(io.index)
    assert not any("labels" in n for n in io.index)
    assert (io.loc[["input.input_ids", "input.token_type_ids", "input.attention_mask"], "kind"] == "index").all()
    shape = io.loc["input.input_ids", "shape"]
    tokens = math.prod(int(d) for d in shape.split("x"))
    act = stats[(stats["role"] == "activation") & (stats["step"] == 0)].set_index("name")
    query = "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query"
    # One row a step for the shared query, pooling its 4 applications: 4 × tokens × H values.
    assert act.loc[query, "numel"] == 4 * tokens * 64
    assert act.loc["albert.encoder.embedding_hidden_mapping_in", "numel"] == tokens * 64  # called once
    params = stats[(stats["role"] == "param") & (stats["step"] == 0)]
    assert (params["name"] == f"{query}.weight").sum() == 1
    assert not any(".albert_layers.1." in n or "albert_layer_groups.1" in n for n in stats["name"])


def _deq_cell(channels=4, inner=4, groups=2, std=0.05, seed=0):
    """A small DEQ cell (the tutorial's `ResNetLayer`) with weights larger than its N(0, 0.01) init,
    so that its fixed point depends on z (a cell at init is almost a function of x alone)."""
    from sample_runs.field_models import DEQResNetLayer

    torch.manual_seed(seed)
    cell = DEQResNetLayer(channels, inner, kernel_size=3, num_groups=groups)
    with torch.no_grad():
        cell.conv1.weight.normal_(0, std)
        cell.conv2.weight.normal_(0, std)
    return cell


def test_deq_anderson_reaches_the_fixed_point_that_plain_iteration_reaches_in_fewer_cell_calls():
    from sample_runs.field_models import deq_anderson

    cell = _deq_cell()
    x = torch.randn(3, 4, 4, 4)
    calls = [0]

    def f(z):
        calls[0] += 1
        return cell(z, x)

    with torch.no_grad():
        plain = torch.zeros_like(x)
        for _ in range(300):
            plain = cell(plain, x)
        assert (cell(plain, x) - plain).norm() / plain.norm() < 1e-6  # a contraction: plain iteration converged
        z, res = deq_anderson(f, torch.zeros_like(x), tol=1e-5, max_iter=100)
    assert res[-1] < 1e-5 and calls[0] == len(res) + 2 < 100  # two seeding calls, one a mixing step
    assert (z - plain).norm() < 1e-4 * plain.norm()  # within what the residual 1e-5 and a contraction allow
    with torch.no_grad():  # the tutorial's settings stop at tol 1e-2, within 25 iterations
        _, res = deq_anderson(f, torch.zeros_like(x))
    assert len(res) <= 23 and res[-1] < 1e-2


def test_deq_implicit_backward_is_the_implicit_function_theorems_gradient_by_a_dense_jacobian():
    from sample_runs.field_models import DEQFixedPoint, deq_anderson

    cell = _deq_cell(seed=1)
    deq = DEQFixedPoint(cell, deq_anderson, tol=1e-7, max_iter=200, m=5)
    x = torch.randn(1, 4, 4, 4, requires_grad=True)
    weight = torch.randn(1, 4, 4, 4)
    z = deq(x)
    (z * weight).sum().backward()
    assert deq.backward_res[-1] < 1e-6
    # By hand: z* by plain iteration, J = ∂f/∂z at z*, g = (I − Jᵀ)⁻¹ ∂L/∂z*, then dL/dθ = (∂f/∂θ)ᵀ g.
    with torch.no_grad():
        star = torch.zeros_like(x)
        for _ in range(400):
            star = cell(star, x)
    assert torch.allclose(z.detach(), star, atol=1e-5)
    jacobian = torch.autograd.functional.jacobian(lambda v: cell(v.view_as(x), x.detach()).flatten(), star.flatten())
    g = torch.linalg.solve(torch.eye(64) - jacobian.T, weight.flatten()).view_as(x)
    assert (g - weight).norm() > 0.05 * weight.norm()  # the adjoint solve matters: not the one-step gradient
    leaf = x.detach().requires_grad_()
    params = [cell.conv1.weight, cell.conv2.weight, cell.norm3.weight]
    expected = torch.autograd.grad(cell(star, leaf), [leaf, *params], g)
    for got, want in zip([x.grad, *(p.grad for p in params)], expected):
        assert torch.allclose(got, want, rtol=1e-3, atol=1e-5)


def test_deq_model_is_the_tutorials_chapter_4_model_and_its_recipe_adam_with_cosine_annealing():
    from sample_runs.field import DEQ_BATCH, DEQ_LR, _data
    from sample_runs.field_models import DEQFixedPoint, DEQResNetLayer

    model = build_field_model("deq", 10)
    assert [n for n, _ in model.named_children()] == ["conv", "bn_in", "deq", "bn_out", "pool", "fc"]
    assert isinstance(model.deq, DEQFixedPoint) and isinstance(model.deq.f, DEQResNetLayer)
    assert model.deq.kwargs == {"tol": 1e-2, "max_iter": 25, "m": 5}
    assert model.conv.bias is not None and model.deq.f.conv1.bias is None and model.deq.f.conv2.bias is None
    assert all(isinstance(getattr(model.deq.f, f"norm{i}"), torch.nn.GroupNorm) for i in (1, 2, 3))
    assert 0.005 < float(model.deq.f.conv1.weight.detach().std()) < 0.015  # N(0, 0.01)
    assert model.hidden == ["conv", "deq"] and model.exposed == ["deq.f.conv2", "fc"]
    recipe = RECIPES["deq"]
    assert (recipe.lr, recipe.weight_decay, recipe.batch, recipe.clip, recipe.warmup, recipe.optimizer) == \
        (DEQ_LR, 0.0, DEQ_BATCH, None, 0, "adam") and DEQ_LR == 1e-3
    schedule = _schedule(recipe, 150)
    assert schedule(0) == 1.0 and schedule(75) == pytest.approx(0.5) and schedule(149) < 1e-3  # CosineAnnealingLR
    assert LEFT_OUT["deq"] == ("healthy_bf16",)  # Adam: adam_state stays in
    draw, eval_draw, classes, chance = _data("deq", recipe, 0, 1)
    x, y = draw()
    assert x.shape == (32, 1, 8, 8) and 0 <= float(x.min()) and float(x.max()) <= 1 and classes == 10
    assert chance == pytest.approx(math.log(10))
    model.eval()
    with torch.no_grad():  # an eval under no_grad: the solver runs, no hook is registered (no tape)
        assert model(x).shape == (32, 10)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)  # the forward solve runs (its buffers float32, as its start)
    # why healthy_bf16 is left out: the bfloat16 gradient at z* meets the adjoint solve's linalg.solve
    with pytest.raises(NotImplementedError, match="BFloat16"):
        out.float().sum().backward()


def test_deq_healthy_run_learns_and_records_only_the_two_differentiable_cell_calls_a_step(tmp_path):
    from sample_runs.field import DEQ_LR

    by_name = _healthy_recorded("healthy-deq-s0", tmp_path / "run")
    assert len(by_name["val_top1"]) == len(by_name["val_loss"]) == 6 and by_name["val_top1"][-1] > 80
    assert by_name["lr"] == pytest.approx([DEQ_LR * _schedule(RECIPES["deq"], 150)(s) for s in range(150)])
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "32x1x8x8" and io.loc["target", "shape"] == "32"
    assert io.loc["input", "kind"] == "float" and io.loc["target", "kind"] == "index"
    activations = stats[stats["role"] == "activation"]
    assert activations.groupby("step").size().eq(10).all()  # one row per leaf a step
    cell = activations[activations["name"] == "deq.f.conv1"]
    # z = f(z*, x) and f0 = f(z0, x) pooled; the solver's no_grad calls and the eval's are not recorded.
    assert cell["numel"].eq(2 * 32 * 16 * 8 * 8).all() and len(cell) == 150
    assert activations[activations["name"] == "conv"]["numel"].eq(32 * 8 * 8 * 8).all()
    assert {"deq.f.conv1.weight", "deq.f.conv2.weight", "deq.f.norm3.weight", "fc.weight"} <= set(stats["name"])


def _wrn_block_reference(block, x):
    """A pre-activation WRN BasicBlock by hand (F.batch_norm in train mode on copies of the running
    statistics, F.relu, F.conv2d): the shortcut is x where the shape holds, else the 1×1 conv of the
    pre-activated x (xternalz/WideResNet-pytorch's `equalInOut` rule)."""
    F = torch.nn.functional

    def bn(m, t):
        return F.batch_norm(t, m.running_mean.clone(), m.running_var.clone(), m.weight, m.bias, True, m.momentum, m.eps)

    pre = F.relu(bn(block.bn1, x))
    out = F.conv2d(F.relu(bn(block.bn2, F.conv2d(pre, block.conv1.weight, stride=block.conv1.stride, padding=1))),
                   block.conv2.weight, padding=1)
    shortcut = x if block.convShortcut is None else F.conv2d(pre, block.convShortcut.weight,
                                                             stride=block.convShortcut.stride)
    return shortcut + out


def test_ddp_wrn_is_a_pre_activation_wide_resnet_with_xternalz_names_and_init():
    from sample_runs.field_models import WideResNetDDP, WRNBasicBlock

    model = build_field_model("ddp_wrn", PATTERNS.classes)
    assert isinstance(model, WideResNetDDP) and model.units == ["conv1", "block1", "block2", "block3", "bn1", "fc"]
    assert model.hidden == ["block1", "block2", "block3"] and model.exposed == ["fc"] and model.decay_everything
    blocks = [m for m in model.modules() if isinstance(m, WRNBasicBlock)]
    assert len(blocks) == 3  # WRN-10: (10 - 4) / 6 = 1 block a group
    assert [b.conv1.out_channels for b in blocks] == [16, 32, 64] and model.fc.in_features == 64  # k = 1
    assert [b.convShortcut is None for b in blocks] == [True, False, False]
    assert [b.conv1.stride for b in blocks] == [(1, 1), (2, 2), (2, 2)]
    assert all(b.droprate == 0.0 for b in blocks)
    assert float(model.fc.bias.detach().abs().sum()) == 0 and all(float(m.weight.detach().mean()) == 1 for m in model.modules()
                                                         if isinstance(m, torch.nn.BatchNorm2d))
    conv = blocks[2].conv2  # N(0, sqrt(2 / (3·3·64)))
    assert float(conv.weight.std()) == pytest.approx(math.sqrt(2 / (9 * 64)), rel=0.05)
    torch.manual_seed(0)
    for block, planes in zip(blocks, (16, 16, 32)):
        x = torch.randn(8, planes, 8, 8)
        assert torch.allclose(block(x.clone()), _wrn_block_reference(block, x), atol=1e-5)
    assert model(torch.randn(8, 3, 16, 16)).shape == (8, PATTERNS.classes)


def test_ddp_wrn_recipe_is_nesterov_sgd_with_decay_on_every_parameter_and_plateau_settings():
    from sample_runs.field import DDP_WRN_PLATEAU, OPTIMIZERS

    recipe = RECIPES["ddp_wrn"]
    assert (recipe.lr, recipe.weight_decay, recipe.batch, recipe.clip, recipe.warmup) == (0.1, 5e-4, 64, None, 0)
    assert recipe.schedule == "constant" and _schedule(recipe, 150)(149) == 1.0
    model = build_field_model("ddp_wrn", PATTERNS.classes)
    groups = _param_groups(model, recipe, recipe.lr)
    assert [g["layer"] for g in groups] == model.units  # one group a unit, every parameter decayed
    assert all(g["weight_decay"] == 5e-4 for g in groups)
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))
    optimizer = OPTIMIZERS[recipe.optimizer](groups, recipe.lr, recipe)
    assert optimizer.defaults["nesterov"] and optimizer.defaults["momentum"] == 0.9
    assert DDP_WRN_PLATEAU == {"mode": "min", "factor": 0.2, "patience": 0}
    assert LEFT_OUT["ddp_wrn"] == ("adam_state", "detach")


def test_ddp_wrn_leaves_detach_out_because_ddp_raises_on_parameters_without_gradient():
    import torch.distributed as dist
    from sample_runs.field_models import ddp_wrap, gloo_process_group

    with gloo_process_group():
        model = ddp_wrap(build_field_model("ddp_wrn", PATTERNS.classes))
        fault = faults.DetachedLayer(t0=0, layer="module.block3")
        fault.install(model)
        fault.before_step(0, model, None)
        x, y = torch.randn(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
        torch.nn.functional.cross_entropy(model(x), y).backward()  # only bn1 and fc get gradients
        with pytest.raises(RuntimeError, match="Expected to have finished reduction in the prior iteration"):
            model(x)
    assert not dist.is_initialized()


def test_ddp_wrn_runs_in_a_real_gloo_group_that_is_destroyed_even_on_error_and_names_carry_module():
    import torch.distributed as dist
    from sample_runs.field_models import ddp_wrap, gloo_process_group

    assert not dist.is_initialized()
    with gloo_process_group():
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        assert dist.get_world_size() == 1 and dist.get_rank() == 0
        model = ddp_wrap(build_field_model("ddp_wrn", PATTERNS.classes))
        assert isinstance(model, torch.nn.parallel.DistributedDataParallel)
        assert all(n.startswith("module.") for n, _ in model.named_parameters())
        assert model.units[0] == "module.conv1" and model.hidden == ["module.block1", "module.block2", "module.block3"]
        assert model.exposed == ["module.fc"] and model.get_submodule("module.block2") is model.module.block2
        loss = torch.nn.functional.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.tensor([0, 1, 2, 3]))
        loss.backward()  # through DDP's reducer (an all-reduce over one rank)
        assert all(p.grad is not None for p in model.parameters())
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="boom"):
        with gloo_process_group():
            raise RuntimeError("boom")
    assert not dist.is_initialized()


def test_ddp_wrn_loader_is_a_distributed_sampler_shard_reshuffled_by_set_epoch():
    from sample_runs.field_models import WRNEpochLoader, gloo_process_group

    x, y = torch.arange(40.0).view(40, 1), torch.arange(40)
    with gloo_process_group():
        loader = WRNEpochLoader(x, y, 8, seed=3)
        epochs = [torch.cat([loader()[1] for _ in range(5)]) for _ in range(2)]
        assert loader.epoch == 1
        # DistributedSampler's rule, by hand: randperm under a generator seeded seed + epoch, one rank
        for epoch, seen in enumerate(epochs):
            assert seen.tolist() == torch.randperm(40, generator=torch.Generator().manual_seed(3 + epoch)).tolist()
        loader.start(1)  # a resume restarts the epoch from its first batch
        assert loader()[1].tolist() == epochs[1][:8].tolist()


def test_ddp_wrn_checkpoint_resume_keeps_every_value_and_replaces_the_optimizer_state_tensors():
    from sample_runs.field import DDP_WRN_RESUME_STEP, OPTIMIZERS, _ddp_wrn_epoch_hooks
    from sample_runs.field_models import WRNEpochLoader, ddp_wrap, gloo_process_group

    torch.manual_seed(0)
    images = pattern_images()
    with gloo_process_group():
        model = ddp_wrap(build_field_model("ddp_wrn", PATTERNS.classes))
        recipe = RECIPES["ddp_wrn"]
        optimizer = OPTIMIZERS[recipe.optimizer](_param_groups(model, recipe, recipe.lr), recipe.lr, recipe)
        loader = WRNEpochLoader(images.x[:1600], images.y[:1600], 64, seed=0)
        before_step, eval_metrics = _ddp_wrn_epoch_hooks(model, optimizer, loader, 0)
        for _ in range(2):
            x, y = loader()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        metrics = eval_metrics()
        assert set(metrics) == {"val_top1"} and all("base_lr" in g for g in optimizer.param_groups)
        values = {k: v.clone() for k, v in model.module.state_dict().items()}
        buffers = {p: optimizer.state[p]["momentum_buffer"] for p in model.parameters()}
        groups = optimizer.param_groups
        before_step(DDP_WRN_RESUME_STEP - 1)  # not the boundary: nothing happens
        assert all(optimizer.state[p]["momentum_buffer"] is buffers[p] for p in model.parameters())
        before_step(DDP_WRN_RESUME_STEP)
        assert all(torch.equal(v, model.module.state_dict()[k]) for k, v in values.items())
        for p in model.parameters():
            now = optimizer.state[p]["momentum_buffer"]
            assert now is not buffers[p] and torch.equal(now, buffers[p])  # the same values, new tensors
        assert optimizer.param_groups is not groups and [g["lr"] for g in optimizer.param_groups] == \
            [g["lr"] for g in groups] and [g["layer"] for g in optimizer.param_groups] == model.units
        assert loader.epoch == DDP_WRN_RESUME_STEP // 25  # checkpoint["epoch"] + 1


def test_ddp_wrn_healthy_run_learns_with_module_names_and_lr_from_a_plain_plateau_on_val_loss(tmp_path):
    from sample_runs.field import DDP_WRN_LR

    by_name = _healthy_recorded("healthy-ddp_wrn-s1", tmp_path / "run")
    val = by_name["val_loss"]
    assert len(val) == len(by_name["val_top1"]) == 5 and by_name["val_top1"][-1] > 90  # after epochs 1-5
    # ReduceLROnPlateau(factor 0.2, patience 0) by hand on the recorded val_loss (steps 25, 50, ..., 125)
    lr, best, expected = DDP_WRN_LR, math.inf, []
    for step in range(150):
        if step and step % 25 == 0:
            if val[step // 25 - 1] < best * (1 - 1e-4):
                best = val[step // 25 - 1]
            else:
                lr *= 0.2
        expected.append(lr)
    assert by_name["lr"] == pytest.approx(expected) and min(expected) < DDP_WRN_LR  # seed 1 drops once
    stats = read_stats(tmp_path / "run")
    names = set(stats[stats["role"] == "param"]["name"])
    assert names and all(n.startswith("module.") for n in names) and "module.block2.layer.0.convShortcut.weight" in names
    state = stats[(stats["role"] == "state") & (stats["name"] == "module.fc.weight")]
    assert set(state["key"]) == {"momentum_buffer"} and len(state) == 150  # recorded across the resume at step 75
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)].set_index("role")
    assert io.loc["input", "shape"] == "64x3x16x16" and io.loc["target", "shape"] == "64"


def test_moco_forward_is_builder_pys_momentum_update_keys_queue_and_logits_against_a_plain_reference():
    from sample_runs.field_models import MoCo, moco_loss

    torch.manual_seed(0)
    model = MoCo(K=16, m=0.9, splits=1)  # one split: BatchNorm over the whole batch, blind to the shuffle
    with torch.no_grad():
        for p in model.encoder_q.parameters():
            p.add_(0.05 * torch.randn_like(p))  # query and key encoders apart, as after some steps
    views = torch.randn(16, 3, 16, 16)
    old_k = {n: p.clone() for n, p in model.encoder_k.named_parameters()}
    q_params = dict(model.encoder_q.named_parameters())
    old_queue, old_ptr = model.queue.clone(), int(model.queue_ptr)
    assert all(not p.requires_grad for p in model.encoder_k.parameters())
    logits = model(views)
    # the momentum update: each key parameter m * key + (1 - m) * query, before the keys are computed
    for name, p in model.encoder_k.named_parameters():
        assert torch.allclose(p, 0.9 * old_k[name] + 0.1 * q_params[name], atol=1e-6), name
    q = torch.nn.functional.normalize(model.encoder_q(views[:8]), dim=1)
    with torch.no_grad():
        k = torch.nn.functional.normalize(model.encoder_k(views[8:]), dim=1)  # unshuffled: the same keys
    want = torch.cat([(q * k).sum(1, keepdim=True), q @ old_queue], dim=1) / 0.2
    assert logits.shape == (8, 17) and torch.allclose(logits, want, atol=1e-4)
    # _dequeue_and_enqueue: the keys written at the pointer, the pointer moved by B mod K
    assert torch.allclose(model.queue[:, old_ptr:old_ptr + 8], k.T, atol=1e-5)
    assert torch.equal(model.queue[:, 8:], old_queue[:, 8:]) and int(model.queue_ptr) == 8
    model(views)
    assert int(model.queue_ptr) == 0  # wrapped around
    assert torch.allclose(model.queue.norm(dim=0), torch.ones(16), atol=1e-5)  # every column a unit key
    assert float(moco_loss(logits.detach())) == pytest.approx(float(-torch.log_softmax(logits.detach(), 1)[:, 0].mean()),
                                                     rel=1e-6)
    logits.sum().backward()  # only the query encoder gets gradients
    assert all(p.grad is None for p in model.encoder_k.parameters())
    assert all(p.grad is not None for p in model.encoder_q.parameters())
    model.eval()  # the loop's val_loss forward: no momentum update, no enqueue
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model(views)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())


def test_moco_split_batchnorm_is_the_demos_per_split_statistics_and_the_shuffle_moves_the_keys_split():
    from sample_runs.field_models import MocoSplitBatchNorm

    torch.manual_seed(0)
    bn = MocoSplitBatchNorm(3, 4)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
        bn.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    x = 3 + 2 * torch.randn(16, 3, 4, 4)
    out = bn(x)
    means, variances = [], []
    for split in range(4):  # the (N / S, C·S, H, W) view: split s holds samples s, s + S, ...
        part = x[split::4]
        mean, var = part.mean((0, 2, 3)), part.var((0, 2, 3), unbiased=False)
        want = (part - mean[:, None, None]) / (var[:, None, None] + bn.eps).sqrt()
        want = want * bn.weight[:, None, None] + bn.bias[:, None, None]
        assert torch.allclose(out[split::4], want, atol=1e-5)
        means.append(0.1 * mean)  # running stats start at 0 / 1, momentum 0.1
        variances.append(0.9 + 0.1 * part.var((0, 2, 3), unbiased=True))
    assert torch.allclose(bn.running_mean, torch.stack(means).mean(0), atol=1e-5)
    assert torch.allclose(bn.running_var, torch.stack(variances).mean(0), atol=1e-5)
    bn.eval()  # eval: an ordinary BatchNorm on the running statistics
    want = (x - bn.running_mean[:, None, None]) / (bn.running_var[:, None, None] + bn.eps).sqrt()
    assert torch.allclose(bn(x), want * bn.weight[:, None, None] + bn.bias[:, None, None], atol=1e-5)



def _plain_knn_top1(bank, bank_y, feats, y, k: int, t: float, classes: int = 4) -> float:
    """Top-1 (%) of the weighted kNN by hand: each feature's k most cosine-similar bank rows vote
    exp(sim / t) for their labels."""
    bank, feats = torch.nn.functional.normalize(bank, dim=1), torch.nn.functional.normalize(feats, dim=1)
    hits = 0
    for f, label in zip(feats, y):
        sims = bank @ f
        votes = torch.zeros(classes)
        for i in sims.argsort(descending=True)[:k]:
            votes[bank_y[i]] += math.exp(float(sims[i]) / t)
        hits += int(votes.argmax() == label)
    return 100.0 * hits / len(y)

def test_moco_knn_monitor_is_the_demos_weighted_vote_against_a_plain_loop():
    from sample_runs.field_models import MoCo, moco_knn_top1

    torch.manual_seed(0)
    model = MoCo()
    memory, memory_y = torch.randn(60, 3, 16, 16), torch.randint(0, 4, (60,))
    x, y = torch.randn(12, 3, 16, 16), torch.randint(0, 4, (12,))
    top1 = moco_knn_top1(model, memory, memory_y, x, y, k=5, t=0.1)
    assert model.training  # the mode restored
    model.eval()
    with torch.no_grad():
        assert top1 == pytest.approx(_plain_knn_top1(model.encoder_q(memory), memory_y, model.encoder_q(x), y, k=5, t=0.1))


def test_moco_recipe_is_main_moco_pys_sgd_on_the_query_encoder_only_with_cosine_and_the_queue_fills_in_two_steps():
    from sample_runs.field import MOCO_BATCH, MOCO_LR, OPTIMIZERS, _data
    from sample_runs.field_models import MOCO_K, MOCO_M, MOCO_T

    model = build_field_model("moco", 4)
    recipe = RECIPES["moco"]
    groups = _param_groups(model, recipe, MOCO_LR)
    in_groups = {id(p) for g in groups for p in g["params"]}
    assert in_groups == {id(p) for p in model.encoder_q.parameters()}  # not one key-encoder parameter
    assert all(g["weight_decay"] == 1e-4 for g in groups)  # main_moco.py decays every parameter
    assert {g["layer"] for g in groups} == set(model.units) - {"encoder_k"}
    optimizer = OPTIMIZERS[recipe.optimizer](groups, MOCO_LR, recipe)
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    assert not optimizer.defaults["nesterov"] and recipe.clip is None and recipe.warmup == 0
    factor = _schedule(recipe, 150)  # adjust_learning_rate's cosine, per step here
    assert factor(0) == 1.0 and factor(75) == pytest.approx(0.5) and factor(150) == pytest.approx(0.0, abs=1e-12)
    assert (MOCO_LR, MOCO_M, MOCO_T, MOCO_K % MOCO_BATCH, MOCO_K // MOCO_BATCH) == (0.03, 0.99, 0.2, 0, 2)
    assert model.hidden == ["encoder_q.conv1", "encoder_q.layer1", "encoder_q.layer2"]
    assert model.exposed == ["encoder_q.fc.0", "encoder_q.fc.2"]
    assert LEFT_OUT["moco"] == ("adam_state",)
    draw, eval_draw, classes, chance = _data("moco", recipe, 0, 1)
    views, targets = draw()
    assert views.shape == (2 * MOCO_BATCH, 3, 16, 16) and targets is None and classes == 4
    assert chance == pytest.approx(math.log(1 + MOCO_K))
    quarter, _ = _data("moco", recipe, 0, 4)[0]()  # healthy_accum's micro-batch still divides K
    assert len(quarter) == 2 * MOCO_BATCH // 4 and MOCO_K % (MOCO_BATCH // 4) == 0


def test_moco_healthy_run_learns_and_records_the_key_encoder_moving_outside_the_optimizer(tmp_path):
    from sample_runs.field import MOCO_LR

    by_name = _healthy_recorded("healthy-moco-s0", tmp_path / "run")
    knn = by_name["val_knn_top1"]
    assert len(knn) == len(by_name["val_loss"]) == 6 and knn[-1] > 85 and knn[-1] > knn[0]
    assert by_name["val_loss"][0] < 1.5 < by_name["val_loss"][1]  # the random queue at step 0, real keys after
    assert by_name["lr"] == pytest.approx([MOCO_LR * _schedule(RECIPES["moco"], 150)(s) for s in range(150)])
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)]
    assert list(io["role"]) == ["input"] and io["shape"].iloc[0] == "128x3x16x16"  # no targets
    key = stats[stats["name"] == "encoder_k.fc.2.weight"]
    assert set(key["role"]) == {"param", "grad", "update"}  # recorded, though in no param group
    assert key[key["role"] == "grad"]["grad_none"].all()
    moved = key[(key["role"] == "update") & (key["step"] > 0)]["ratio"]
    assert len(moved) == 149 and (moved > 0).all()  # the momentum update, outside any optimizer step
    assert not stats["name"].str.contains("queue").any()  # the queue buffers are not recorded
    activations = stats[stats["role"] == "activation"]
    assert not activations["name"].str.startswith("encoder_k").any()  # the key encoder runs under no_grad


def _swa_gc_plain_forward(model, x):
    """SwaGcResNet's training forward written out in F ops (train-mode batch statistics, no
    checkpointing): timm's stem, each BasicBlock with its 1×1 downsample, global pooling, fc."""
    F = torch.nn.functional

    def bn(m, h):
        return F.batch_norm(h, None, None, m.weight, m.bias, training=True, eps=m.eps)

    h = F.relu(bn(model.bn1, F.conv2d(x, model.conv1.weight, padding=1)))
    for i in (1, 2, 3):
        block = getattr(model, f"layer{i}")[0]
        stride = block.conv1.stride
        shortcut = h if block.downsample is None else \
            bn(block.downsample[1], F.conv2d(h, block.downsample[0].weight, stride=stride))
        out = F.relu(bn(block.bn1, F.conv2d(h, block.conv1.weight, stride=stride, padding=1)))
        out = bn(block.bn2, F.conv2d(out, block.conv2.weight, padding=1))
        h = F.relu(out + shortcut)
    return F.linear(h.mean((2, 3)), model.fc.weight, model.fc.bias)


def test_swa_gc_model_is_timms_resnet_layout_whose_checkpointed_stages_match_a_plain_forward_and_rerun_in_backward():
    from sample_runs.field_models import SwaGcResNet

    torch.manual_seed(0)
    model = build_field_model("swa_gc", PATTERNS.classes)
    assert isinstance(model, SwaGcResNet) and model.grad_checkpointing and model.decay_everything
    assert 50_000 < sum(p.numel() for p in model.parameters()) < 100_000
    names = {n for n, _ in model.named_parameters()}
    assert {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
            "layer3.0.bn2.bias", "fc.weight"} <= names
    assert model.units == ["conv1", "bn1", "layer1.0", "layer2.0", "layer3.0", "fc"]
    assert model.hidden == ["layer1.0", "layer2.0", "layer3.0"] and model.exposed == ["fc"]
    assert all(float(model.get_submodule(f"layer{i}.0").bn2.weight.detach().abs().sum()) == 0 for i in (1, 2, 3))  # zero_init_last
    with torch.no_grad():  # break zero_init_last so the residual branches matter
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))
    calls = {}
    for name, module in model.named_modules():
        if not list(module.children()):
            module.register_forward_hook(lambda m, i, o, name=name: calls.__setitem__(name, calls.get(name, 0) + 1))
    out = model(x)
    assert all(count == 1 for count in calls.values())
    torch.nn.functional.cross_entropy(out, y).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    # Inside each checkpointed stage the forward ran again in backward, up to the last saved tensor
    # (non-reentrant checkpointing stops its recomputation there: each block's final act2 is not rerun).
    for name, count in calls.items():
        staged = name.startswith("layer")
        assert count == (2 if staged and not name.endswith("act2") else 1), name
    tracked = {n: int(b) for n, b in model.named_buffers() if n.endswith("num_batches_tracked")}
    assert tracked["bn1.num_batches_tracked"] == 1
    assert all(v == 2 for n, v in tracked.items() if n.startswith("layer"))  # running stats updated twice
    model.zero_grad()
    reference = _swa_gc_plain_forward(model, x)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    torch.nn.functional.cross_entropy(reference, y).backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-4, atol=1e-6, msg=n)
    calls.clear()
    model.eval()
    with torch.enable_grad():
        model(x).sum().backward()  # an eval-mode forward is not checkpointed: nothing reruns
    assert all(count == 1 for count in calls.values())


def test_swa_gc_averaged_model_is_the_plain_mean_of_its_snapshots_and_update_bn_the_loaders_cumulative_statistics():
    from torch.optim.swa_utils import AveragedModel

    from sample_runs.field_models import swa_gc_top1, timm_top1

    torch.manual_seed(0)
    model = build_field_model("swa_gc", PATTERNS.classes)
    swa = AveragedModel(model)
    images = pattern_images()
    held_x, held_y = images.x[1600:], images.y[1600:]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images.x[:1600], images.y[:1600]),
                                         batch_size=64)
    assert swa_gc_top1(model, swa, loader, held_x, held_y) == timm_top1(model, held_x, held_y)  # nothing averaged yet
    snapshots = []
    for _ in range(3):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})
        swa.update_parameters(model)
    assert int(swa.n_averaged) == 3
    for n, p in swa.module.named_parameters():
        torch.testing.assert_close(p, sum(s[n] for s in snapshots) / 3, msg=n)
    top1 = swa_gc_top1(model, swa, loader, held_x, held_y)
    # update_bn: the stem BN's running statistics are the mean over the 25 batches of each batch's
    # statistics (momentum None: a cumulative average), computed from the averaged weights.
    conv1 = swa.module.conv1.weight.detach()
    with torch.no_grad():
        batches = [torch.nn.functional.conv2d(x, conv1, padding=1) for x, _ in loader]
    means = torch.stack([b.mean((0, 2, 3)) for b in batches]).mean(0)
    variances = torch.stack([b.var((0, 2, 3), unbiased=True) for b in batches]).mean(0)
    torch.testing.assert_close(swa.module.bn1.running_mean, means, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(swa.module.bn1.running_var, variances, rtol=1e-4, atol=1e-5)
    assert int(swa.module.bn1.num_batches_tracked) == 25 and swa.module.bn1.momentum == 0.1  # restored
    assert top1 == timm_top1(swa, held_x, held_y) and swa.training  # update_bn and timm_top1 restore its mode


def test_swa_gc_recipe_is_the_swa_utils_docstrings_sgd_cosine_then_swalr_with_updates_once_an_epoch_from_swa_start():
    from sample_runs.field import (EVAL_EVERY, OPTIMIZERS, SWA_GC_ANNEAL_EPOCHS, SWA_GC_BATCH, SWA_GC_EPOCH_STEPS,
                                   SWA_GC_EPOCHS, SWA_GC_LR, SWA_GC_START, SWA_GC_SWA_LR, _data, _swa_gc_hooks)

    recipe = RECIPES["swa_gc"]
    model = build_field_model("swa_gc", PATTERNS.classes)
    groups = _param_groups(model, recipe, SWA_GC_LR)
    assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in model.parameters()}
    assert all(g["weight_decay"] == 5e-4 for g in groups)  # every parameter, BN and biases included
    optimizer = OPTIMIZERS[recipe.optimizer](groups, SWA_GC_LR, recipe)
    assert isinstance(optimizer, torch.optim.SGD) and optimizer.defaults["momentum"] == 0.9
    assert not optimizer.defaults["nesterov"] and recipe.clip is None and recipe.warmup == 0
    assert recipe.schedule == "constant" and recipe.batch == SWA_GC_BATCH == 64
    assert (SWA_GC_LR, SWA_GC_SWA_LR, SWA_GC_ANNEAL_EPOCHS, SWA_GC_EPOCH_STEPS, SWA_GC_EPOCHS, SWA_GC_START) == \
        (0.1, 0.05, 3, 5, 30, 21)
    assert EVAL_EVERY["swa_gc"] == SWA_GC_EPOCH_STEPS and LEFT_OUT["swa_gc"] == ("adam_state",)
    draw, _, classes, chance = _data("swa_gc", recipe, 0, 1)
    x, y = draw()
    assert x.shape == (64, 3, 16, 16) and classes == 4 and chance == pytest.approx(math.log(4))
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    swa_model, before_eval, _ = _swa_gc_hooks(model, optimizer, SWA_GC_SWA_LR)
    assert swa_model.module is not model and int(swa_model.n_averaged) == 0
    lrs, averaged = [], []
    for step in range(150):  # the loop: before_eval, then lr = base_lr × 1
        before_eval(step)
        for group in optimizer.param_groups:
            group["lr"] = group["base_lr"]
        lrs.append(optimizer.param_groups[0]["lr"])
        averaged.append(int(swa_model.n_averaged))
    # A plain reference: cosine over 30 epochs for the first 22 scheduler steps, then SWALR's cos
    # anneal from there to swa_lr over 3 epochs, held.
    cosine = [SWA_GC_LR * 0.5 * (1 + math.cos(math.pi * e / SWA_GC_EPOCHS)) for e in range(SWA_GC_START + 2)]
    start = cosine[SWA_GC_START + 1]
    expected = []
    for step in range(150):
        done = step // SWA_GC_EPOCH_STEPS  # epochs finished before this step
        if done <= SWA_GC_START + 1:
            expected.append(cosine[done])
        else:
            alpha = (1 - math.cos(math.pi * min(1.0, (done - SWA_GC_START - 1) / SWA_GC_ANNEAL_EPOCHS))) / 2
            expected.append(SWA_GC_SWA_LR * alpha + start * (1 - alpha))
    assert lrs == pytest.approx(expected, rel=1e-9)
    assert lrs[-1] == pytest.approx(SWA_GC_SWA_LR) and lrs[110] == pytest.approx(cosine[22])
    assert averaged[114] == 0 and averaged[115] == 1 and averaged[-1] == 7  # epochs 22-28, after each


def test_swa_gc_healthy_run_learns_and_records_one_activation_row_per_module_though_stages_rerun(tmp_path):
    from sample_runs.field import SWA_GC_EPOCH_STEPS

    by_name = _healthy_recorded("healthy-swa_gc-s0", tmp_path / "run")
    top1 = by_name["val_top1"]
    assert len(top1) == len(by_name["val_loss"]) == 150 // SWA_GC_EPOCH_STEPS
    assert top1[0] < 50 and top1[-1] >= 95
    assert by_name["lr"][0] == pytest.approx(0.1) and by_name["lr"][-1] == pytest.approx(0.05)
    stats = read_stats(tmp_path / "run")
    activations = stats[stats["role"] == "activation"]
    model = build_field_model("swa_gc", PATTERNS.classes)
    leaves = {n for n, m in model.named_modules() if not list(m.children())}
    assert set(activations["name"]) == leaves
    per_step = activations.groupby(["name", "step"]).size()
    assert (per_step == 1).all() and len(per_step) == len(leaves) * 150  # one row though the stages ran twice
    assert not stats["name"].str.startswith("module.").any()  # the AveragedModel's copy records nothing
    assert set(stats[stats["role"] == "state"]["name"]) == {n for n, _ in model.named_parameters()}
def _tacotron_no_dropout(monkeypatch):
    """Every functional dropout of the model off (the prenet's is on even in eval mode)."""
    from sample_runs import field_models

    monkeypatch.setattr(field_models.F, "dropout", lambda x, *args, **kwargs: x)


def test_tacotron_attention_is_location_sensitive_energies_masked_softmax_against_a_plain_reference():
    from sample_runs.field_models import TacotronAttention

    torch.manual_seed(0)
    attention = TacotronAttention(12, 10, 8, 4, 5)
    query, memory = torch.randn(3, 12), torch.randn(3, 7, 10)
    previous = torch.softmax(torch.randn(3, 7), dim=1)
    weights_cat = torch.stack([previous, 2 * previous], dim=1)  # (B, 2, T_in): previous, cumulative
    lengths = torch.tensor([7, 5, 3])
    mask = torch.arange(7)[None] >= lengths[:, None]
    processed_memory = attention.memory_layer(memory)
    context, weights = attention(query, memory, processed_memory, weights_cat, mask)
    W = attention.query_layer.linear_layer.weight
    V = attention.memory_layer.linear_layer.weight
    F_conv = attention.location_layer.location_conv.conv.weight  # (filters, 2, k), no bias
    U = attention.location_layer.location_dense.linear_layer.weight
    v = attention.v.linear_layer.weight[0]
    for b in range(3):
        energies = []
        for j in range(7):
            f = sum((F_conv[:, c, k] * weights_cat[b, c, j + k - 2]  # "same" padding (k - 1) / 2
                     for c in range(2) for k in range(5) if 0 <= j + k - 2 < 7), torch.zeros(4))
            energies.append(v @ torch.tanh(W @ query[b] + V @ memory[b, j] + U @ f))
        energies = torch.stack(energies)
        energies[lengths[b]:] = -float("inf")
        expected = torch.softmax(energies, 0)
        assert torch.allclose(weights[b], expected, atol=1e-6)
        assert torch.allclose(context[b], expected @ memory[b], atol=1e-6)
        assert (weights[b, lengths[b]:] == 0).all()


def test_tacotron_collate_is_textmelcollate_and_parse_batch():
    from sample_runs.field_models import tacotron_collate

    pairs = [(torch.tensor([3, 4, 5]), torch.ones(16, 4)), (torch.tensor([1, 2, 3, 4, 5]), 2 * torch.ones(16, 6)),
             (torch.tensor([7]), 3 * torch.ones(16, 2))]
    (text, text_lengths, mel, max_len, output_lengths), (mel_target, gate) = tacotron_collate(pairs)
    assert text_lengths.tolist() == [5, 3, 1] and max_len == 5 and output_lengths.tolist() == [6, 4, 2]
    assert text.dtype == torch.int64 and text.tolist() == [[1, 2, 3, 4, 5], [3, 4, 5, 0, 0], [7, 0, 0, 0, 0]]
    assert mel is mel_target and mel.shape == (3, 16, 6)  # the same tensor: teacher-forced input and target
    assert mel[1, :, 4:].abs().sum() == 0 and mel[2, :, 2:].abs().sum() == 0 and (mel[2, :, :2] == 3).all()
    assert gate.tolist() == [[0, 0, 0, 0, 0, 1], [0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]]  # 1 from the last frame on


def test_tacotron_forward_masks_padding_and_an_utterance_does_not_depend_on_its_batch(monkeypatch):
    from sample_runs.field import _tacotron_data
    from sample_runs.field_models import TACOTRON_MELS, Tacotron2, tacotron2_loss, tacotron_collate

    _tacotron_no_dropout(monkeypatch)
    torch.manual_seed(0)
    model = Tacotron2()
    for _ in range(3):  # non-trivial BatchNorm running statistics
        model(_tacotron_data(16, 0)[0]()[0])
    model.eval()
    draw = _tacotron_data(8, 3)[0]
    x, y = draw()
    mel_out, mel_post, gate_out, alignments = model(x)
    lengths, text_lengths = x[4], x[1]
    assert mel_out.shape == mel_post.shape == (8, TACOTRON_MELS, int(lengths.max()))
    assert alignments.shape == (8, int(lengths.max()), int(text_lengths.max()))
    for b in range(8):
        n, m = int(lengths[b]), int(text_lengths[b])
        assert (mel_out[b, :, n:] == 0).all() and (mel_post[b, :, n:] == 0).all() and (gate_out[b, n:] == 1e3).all()
        assert (alignments[b, :, m:] == 0).all()  # no attention on padded characters
        alone = model(tacotron_collate([(x[0][b, :m], x[2][b, :, :n])])[0])
        same = torch.allclose(alone[0][0], mel_out[b, :, :n], atol=1e-5) and \
            torch.allclose(alone[2][0], gate_out[b, :n], atol=1e-5) and \
            torch.allclose(alone[3][0], alignments[b, :n, :m], atol=1e-6)
        # Packing, the attention mask and the causal decoder keep the longest text's frames its own;
        # a shorter text's last characters read the pad symbol's embedding (non-zero: upstream's
        # nn.Embedding has no padding_idx) through the encoder's k5 convs, as upstream.
        assert same == (m == int(text_lengths.max()))
        if same:  # the postnet runs before parse_output masks: its five k5 convs read 10 frames past the length
            assert torch.allclose(alone[1][0][:, : max(0, n - 10)], mel_post[b, :, : max(0, n - 10)], atol=1e-5)
            assert torch.allclose(alone[1][0], mel_post[b, :, :n], atol=1e-5) == (n == int(lengths.max()))
    model.train()
    output = model(x)
    loss = tacotron2_loss(output, y)
    mel_target, gate_target = y
    expected = ((output[0] - mel_target) ** 2).mean() + ((output[1] - mel_target) ** 2).mean() + \
        torch.nn.functional.binary_cross_entropy_with_logits(output[2], gate_target)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    grads = torch.autograd.grad(loss, output[:3])
    pad = ~(torch.arange(mel_target.shape[2])[None] < lengths[:, None])
    # The loss teaches nothing past a length (its postnet output and gate; the decoder's padded frames
    # still get gradient through the postnet's convs into the valid frames, as upstream).
    assert (grads[1].permute(0, 2, 1)[pad] == 0).all() and (grads[2][pad] == 0).all()
    assert (grads[0].permute(0, 2, 1)[pad] != 0).any()


def test_tacotron_prenet_dropout_stays_on_in_eval_and_the_names_are_upstreams():
    from sample_runs.field import _tacotron_data

    torch.manual_seed(0)
    model = build_field_model("tacotron", 21).eval()
    x, _ = _tacotron_data(4, 0)[0]()
    with torch.no_grad():
        first, second = model(x)[1], model(x)[1]
    assert not torch.allclose(first, second)  # the prenet's dropout, on at eval as upstream
    names = dict(model.named_modules())
    for name in ("embedding", "encoder.convolutions.0", "encoder.convolutions.2", "encoder.lstm",
                 "decoder.prenet.layers.0", "decoder.prenet.layers.1", "decoder.attention_rnn",
                 "decoder.attention_layer.location_layer.location_conv", "decoder.attention_layer.query_layer",
                 "decoder.attention_layer.memory_layer", "decoder.attention_layer.v", "decoder.decoder_rnn",
                 "decoder.linear_projection", "decoder.gate_layer", "postnet.convolutions.0", "postnet.convolutions.4"):
        assert name in names
    assert isinstance(names["encoder.lstm"], torch.nn.LSTM) and names["encoder.lstm"].bidirectional
    assert isinstance(names["decoder.attention_rnn"], torch.nn.LSTMCell)
    assert isinstance(names["postnet.convolutions.4.1"], torch.nn.BatchNorm1d)
    bound = math.sqrt(3) * math.sqrt(2 / (21 + 64))
    assert model.embedding.weight.abs().max() <= bound and model.embedding.weight.abs().max() > 0.9 * bound


def test_tacotron_recipe_is_train_pys_adam_with_l2_on_every_parameter_clip_and_a_constant_lr():
    from sample_runs.field import FLOAT_INPUTS, OPTIMIZERS, TACOTRON_BATCH, TACOTRON_LR, UNTARGETED, _data

    model = build_field_model("tacotron", 21)
    recipe = RECIPES["tacotron"]
    groups = _param_groups(model, recipe, TACOTRON_LR)
    assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in model.parameters()}
    assert all(g["weight_decay"] == 1e-6 for g in groups)  # Adam(model.parameters(), weight_decay=1e-6)
    assert [g["layer"] for g in groups] == model.units
    optimizer = OPTIMIZERS[recipe.optimizer](groups, TACOTRON_LR, recipe)
    assert type(optimizer) is torch.optim.Adam and optimizer.defaults["eps"] == 1e-6
    assert optimizer.defaults["betas"] == (0.9, 0.999) and not optimizer.defaults["decoupled_weight_decay"]
    assert (recipe.clip, recipe.warmup, TACOTRON_LR, TACOTRON_BATCH) == (1.0, 0, 1e-2, 16)
    assert {_schedule(recipe, 150)(s) for s in range(150)} == {1.0}
    assert model.hidden[-1] == "encoder.convolutions.2"  # the one detach cuts
    assert set(model.hidden) <= set(model.units) and set(model.exposed) <= set(dict(model.named_modules()))
    assert LEFT_OUT["tacotron"] == ("healthy_spike",)
    assert "tacotron" not in FLOAT_INPUTS and "tacotron" not in UNTARGETED
    assert not any(s.arch == "tacotron" and s.family in ("batch_scale", "batch_nan", "healthy_spike")
                   for s in SCENARIOS.values())
    assert sum(s.arch == "tacotron" for s in SCENARIOS.values()) == 33
    draw, eval_draw, classes, chance = _data("tacotron", recipe, 0, 1)
    x, y = draw()
    assert len(x[0]) == 16 and classes == 21 and 1.0 < chance < 1.6
    assert len(_data("tacotron", recipe, 0, 4)[0]()[0][0]) == 4  # healthy_accum's quarter batches
    assert len(eval_draw()[0][0]) == 128


def test_tacotron_packed_encoder_output_is_detached_by_the_fault():
    from sample_runs.field import LOSSES, _tacotron_data

    model = build_field_model("tacotron", 21)
    fault = faults.DetachedLayer(t0=0, layer="encoder.lstm")
    fault.install(model)
    fault.before_step(0, model, None)
    x, y = _tacotron_data(4, 0)[0]()
    LOSSES["tacotron"](model(x), y).backward()
    assert all(p.grad is None for unit in ("embedding", "encoder") for p in model.get_submodule(unit).parameters())
    assert all(p.grad is not None for p in model.decoder.linear_projection.parameters())


def test_tacotron_healthy_run_learns_and_records_each_frame_loop_module_once_a_step(tmp_path):
    by_name = _healthy_recorded("healthy-tacotron-s1", tmp_path / "run")
    val = by_name["val_loss"]
    assert len(val) == 6 and val[-1] < 0.7 * val[0]
    assert by_name["lr"] == pytest.approx([1e-2] * 150)
    stats = read_stats(tmp_path / "run")
    step = stats[stats["step"] == 7]
    io = step[step["role"].isin(["input", "target"])].set_index("name")
    assert list(io.index) == ["input.0", "input.1", "input.2", "input.4", "target.0", "target.1"]  # max_len an int
    assert io.loc["input.0", "dtype"] == "int64" and io.loc["input.2", "hash"] == io.loc["target.0", "hash"]
    frames = int(io.loc["input.2", "shape"].split("x")[2])
    acts = step[step["role"] == "activation"].set_index("name")
    assert acts.loc["decoder.attention_rnn.0", "numel"] == 16 * 64 * frames  # every frame's call, one row
    assert "encoder.lstm.0.0" in acts.index  # the PackedSequence's data
    assert not acts.index.str.contains("dropout").any()


def test_link_pred_sageconv_is_pygs_mean_aggregation_and_the_predictor_scores_the_product():
    from sample_runs.field_models import LinkPredictor, SAGE, SAGEConv, SageLinkPredictor, link_pred_loss

    torch.manual_seed(0)
    conv = SAGEConv(3, 2)
    assert conv.lin_l.bias is not None and conv.lin_r.bias is None  # PyG's lin_l with a bias, lin_r without
    x = torch.randn(4, 3)
    edges = torch.tensor([[0, 1, 1, 2, 0, 2], [1, 0, 2, 1, 2, 0]])  # a triangle 0 - 1 - 2, node 3 alone
    out = conv(x, edges)
    for i in range(4):  # lin_l(mean of i's in-neighbours) + lin_r(x_i); nobody's neighbour aggregates 0
        sources = edges[0][edges[1] == i]
        mean = x[sources].mean(0) if len(sources) else torch.zeros(3)
        assert torch.allclose(out[i], conv.lin_l(mean) + conv.lin_r(x[i]), atol=1e-6)
    far = x.clone()
    far[3] += 100.0  # a node that is no neighbour changes nothing
    assert torch.allclose(conv(far, edges)[:3], out[:3])
    sage = SAGE(3, 5, 2, num_layers=3, dropout=0.0)
    assert [(c.lin_l.in_features, c.lin_l.out_features) for c in sage.convs] == [(3, 5), (5, 5), (5, 2)]
    h = x
    for k, layer in enumerate(sage.convs):  # ReLU between, none after the last
        h = layer(h, edges)
        h = torch.relu(h) if k < 2 else h
    assert torch.allclose(sage(x, edges), h, atol=1e-6)
    predictor = LinkPredictor(2, 4, 1, num_layers=3, dropout=0.0)
    a, b = torch.randn(6, 2), torch.randn(6, 2)
    z = a * b
    for k, lin in enumerate(predictor.lins):
        z = lin(z)
        z = torch.relu(z) if k < 2 else z
    assert torch.allclose(predictor(a, b), torch.sigmoid(z), atol=1e-6)  # a probability, gnn.py's sigmoid
    assert torch.allclose(predictor(a, b), predictor(b, a))  # h_i * h_j: symmetric
    model = build_field_model("link_pred", 2)
    assert isinstance(model, SageLinkPredictor) and len(model.encoder.convs) == len(model.predictor.lins) == 3
    assert model.encoder.convs[0].lin_l.weight.shape == (128, 32) and model.predictor.lins[2].weight.shape == (1, 128)
    assert model.encoder.dropout == model.predictor.dropout == 0.0  # gnn.py's --dropout default
    from sample_runs.data import sbm_link_split
    graph_x, edge_index, split_edge = sbm_link_split()
    pairs = split_edge["valid"]["edge"][:5].t()
    batch = {"x": graph_x, "edge_index": edge_index, "edge_label_index": pairs}
    h = model.encoder(graph_x, edge_index)  # the whole graph encoded, then the pairs scored
    assert torch.allclose(model(batch), model.predictor(h[pairs[0]], h[pairs[1]]).squeeze(-1))
    out, label = torch.tensor([0.9, 0.2, 0.3, 0.6]), torch.tensor([1.0, 1.0, 0.0, 0.0])
    by_hand = -(math.log(0.9 + 1e-15) + math.log(0.2 + 1e-15)) / 2 - (math.log(0.7 + 1e-15) + math.log(0.4 + 1e-15)) / 2
    assert float(link_pred_loss(out, label)) == pytest.approx(by_hand, rel=1e-6)
    saturated = link_pred_loss(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]))
    assert float(saturated) == pytest.approx(-2 * math.log(1e-15), rel=1e-6)  # the 1e-15 bounds log(0)


def test_link_pred_split_is_ogbs_split_edge_and_the_sampler_is_gnn_pys_train_loop():
    from sample_runs.data import LINK_GRAPH, sbm_link_split
    from sample_runs.field import LINK_PRED_BATCH, LINK_PRED_EPOCH_STEPS, _data

    x, edge_index, split_edge = sbm_link_split()
    assert x.shape == (LINK_GRAPH.nodes, LINK_GRAPH.features) and x.dtype == torch.float32
    as_set = lambda e: {tuple(p) for p in e.tolist()}  # noqa: E731
    train, valid, test = (as_set(split_edge[k]["edge"]) for k in ("train", "valid", "test"))
    assert all(i < j for i, j in train | valid | test) and not (train & valid or train & test or valid & test)
    total = len(train) + len(valid) + len(test)
    assert len(valid) == int(0.05 * total) and len(test) == int(0.1 * total)  # RandomLinkSplit(0.05, 0.1)
    assert as_set(edge_index.t()) == train | {(j, i) for i, j in train}  # message passing: training edges only
    negatives = as_set(split_edge["valid"]["edge_neg"]) | as_set(split_edge["test"]["edge_neg"])
    assert len(negatives) == 2 * LINK_GRAPH.negatives and not negatives & (train | valid | test)
    assert all(i < j for i, j in negatives)
    labels = torch.arange(LINK_GRAPH.nodes) % LINK_GRAPH.blocks
    intra = lambda e: float((labels[e[:, 0]] == labels[e[:, 1]]).float().mean())  # noqa: E731
    assert intra(split_edge["train"]["edge"]) > 0.7 and intra(split_edge["valid"]["edge_neg"]) < 0.05  # communities
    assert LINK_PRED_EPOCH_STEPS == math.ceil(len(train) / LINK_PRED_BATCH)

    draw, eval_draw, classes, chance = _data("link_pred", RECIPES["link_pred"], 0, 1)
    assert classes == 2 and chance == pytest.approx(2 * math.log(2))
    torch.manual_seed(5)
    seen, sizes = [], []
    for _ in range(LINK_PRED_EPOCH_STEPS):  # one epoch: every positive training edge once, the last batch short
        batch, y = draw()
        assert set(batch) == {"x", "edge_index", "edge_label_index"} and batch["x"] is x
        n = len(y) // 2
        assert torch.equal(y, torch.cat([torch.ones(n), torch.zeros(n)]))  # edge_label: positives, then negatives
        seen += [tuple(p) for p in batch["edge_label_index"][:, :n].t().tolist()]
        sizes.append(n)
    assert sorted(seen) == sorted(train) and sizes[:-1] == [LINK_PRED_BATCH] * (len(sizes) - 1)
    assert sizes[-1] == len(train) - LINK_PRED_BATCH * (LINK_PRED_EPOCH_STEPS - 1)
    torch.manual_seed(5)
    again, _ = _data("link_pred", RECIPES["link_pred"], 0, 1)[0]()
    first = _data("link_pred", RECIPES["link_pred"], 0, 1)[0]
    torch.manual_seed(5)
    batch, _ = first()
    edge = batch["edge_label_index"][:, :LINK_PRED_BATCH]
    torch.manual_seed(5)
    by_hand = torch.randint(0, LINK_GRAPH.nodes, edge.size(), dtype=torch.long)  # the negatives: gnn.py's randint
    assert torch.equal(batch["edge_label_index"][:, LINK_PRED_BATCH:], by_hand)
    assert torch.equal(again["edge_label_index"], batch["edge_label_index"])  # the shuffle seeded by the run's seed
    quarter, _ = _data("link_pred", RECIPES["link_pred"], 0, 4)[0]()  # healthy_accum's quarter batches
    assert quarter["edge_label_index"].shape == (2, 2 * LINK_PRED_BATCH // 4)
    held, held_y = eval_draw()
    pos, neg = split_edge["valid"]["edge"], split_edge["valid"]["edge_neg"]
    assert torch.equal(held["edge_label_index"], torch.cat([pos.t(), neg.t()], 1))
    assert float(held_y.sum()) == len(pos) and len(held_y) == len(pos) + len(neg)
    bad = faults.BatchScale(t0=0, factor=1e3).batch(0, batch, y)[0]  # the features scaled, the indices kept
    assert torch.equal(bad["x"], 1e3 * x) and bad["edge_index"] is edge_index
    assert torch.equal(bad["edge_label_index"], batch["edge_label_index"])
    flipped = faults.MislabeledBatch(t0=0, length=2, classes=2).batch(0, batch, y)[1]
    assert torch.equal(flipped, 1 - y)  # healthy_spike: the batch's pairs with their labels swapped


def test_link_pred_hits_is_ogbs_evaluator_against_a_plain_count():
    from sample_runs.field_models import link_pred_hits

    torch.manual_seed(1)
    model = build_field_model("link_pred", 2)
    from sample_runs.data import sbm_link_split
    x, edge_index, split_edge = sbm_link_split()
    pos, neg = split_edge["valid"]["edge"], split_edge["valid"]["edge_neg"]
    model.train()
    hits = link_pred_hits(model, x, edge_index, pos, neg, 50)
    assert model.training  # its mode restored
    with torch.no_grad():
        pos_score = model({"x": x, "edge_index": edge_index, "edge_label_index": pos.t()})
        neg_score = model({"x": x, "edge_index": edge_index, "edge_label_index": neg.t()})
    kth = sorted(neg_score.tolist(), reverse=True)[49]  # the 50th highest negative
    assert hits == pytest.approx(sum(s > kth for s in pos_score.tolist()) / len(pos))
    assert link_pred_hits(model, x, edge_index, pos, neg[:10], 50) == 1.0  # fewer negatives than K: ogb's 1.0


def test_link_pred_recipe_is_gnn_pys_adam_with_two_clips_and_every_fault_family():
    from sample_runs.field import (EVAL_EVERY, FLOAT_INPUTS, LINK_PRED_BATCH, LINK_PRED_EPOCH_STEPS, LINK_PRED_LR,
                                   OPTIMIZERS, UNTARGETED)
    from sample_runs.field_models import link_pred_clip_

    model = build_field_model("link_pred", 2)
    recipe = RECIPES["link_pred"]
    groups = _param_groups(model, recipe, LINK_PRED_LR)
    assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in model.parameters()}
    assert [g["layer"] for g in groups] == model.units and all(g["weight_decay"] == 0.0 for g in groups)
    optimizer = OPTIMIZERS[recipe.optimizer](groups, LINK_PRED_LR, recipe)
    assert type(optimizer) is torch.optim.Adam and optimizer.defaults["betas"] == (0.9, 0.999)
    assert (LINK_PRED_LR, LINK_PRED_BATCH, recipe.clip, recipe.warmup) == (1e-3, 256, None, 0)
    assert {_schedule(recipe, 150)(s) for s in range(150)} == {1.0}
    assert EVAL_EVERY["link_pred"] == LINK_PRED_EPOCH_STEPS  # test() once an epoch
    for p in model.parameters():  # the encoder's and the predictor's gradients clipped each on its own
        p.grad = torch.full_like(p, 3.0)
    link_pred_clip_(model, 1.0)
    norm = lambda ps: float(torch.sqrt(sum((p.grad ** 2).sum() for p in ps)))  # noqa: E731
    assert norm(model.encoder.parameters()) == pytest.approx(1.0, rel=1e-4)
    assert norm(model.predictor.parameters()) == pytest.approx(1.0, rel=1e-4)
    assert model.hidden == ["encoder.convs.0", "encoder.convs.1", "encoder.convs.2"]
    assert "link_pred" in FLOAT_INPUTS and "link_pred" not in UNTARGETED and "link_pred" not in LEFT_OUT
    assert sum(s.arch == "link_pred" for s in SCENARIOS.values()) == 42
    detach = faults.DetachedLayer(t0=0, layer="encoder.convs.2")  # h computed without gradient
    detach.install(model)
    detach.before_step(0, model, None)
    model.zero_grad()
    batch, y = _data_batch()
    torch.nn.functional.binary_cross_entropy(model(batch), y).backward()
    assert all(p.grad is None for p in model.encoder.parameters())
    assert all(p.grad.abs().sum() > 0 for p in model.predictor.parameters())


def _data_batch():
    from sample_runs.field import _data

    return _data("link_pred", RECIPES["link_pred"], 0, 1)[0]()


def test_link_pred_healthy_run_learns_raises_its_hits_and_clips_before_each_step(tmp_path):
    by_name = _healthy_recorded("healthy-link_pred-s1", tmp_path / "run")
    hits, val = by_name["val_hits"], by_name["val_loss"]
    assert len(hits) == len(val) == 11 and hits[0] < 0.1 and hits[-1] > 0.4  # Hits@50 once an epoch
    assert val[0] == pytest.approx(2 * math.log(2), abs=0.01) and min(val) < 0.85 * val[0]
    assert by_name["lr"] == pytest.approx([1e-3] * 150)
    stats = read_stats(tmp_path / "run")
    step = stats[stats["step"] == 7]
    io = step[step["role"].isin(["input", "target"])].set_index("name")
    assert io.loc["input.x", "shape"] == "1000x32" and io.loc["input.edge_label_index", "dtype"] == "int64"
    assert io.loc["target", "shape"] == "512"
    acts = step[step["role"] == "activation"]
    assert sorted(acts["name"]) == sorted([f"encoder.convs.{i}.{lin}" for i in range(3) for lin in ("lin_l", "lin_r")]
                                          + [f"predictor.lins.{i}" for i in range(3)])  # once a step each
def test_dino_loss_is_main_dinos_cross_entropy_over_crop_pairs_with_a_centered_sharpened_teacher():
    from sample_runs.field_models import DINOLoss

    torch.manual_seed(0)
    loss_fn = DINOLoss(8, ncrops=4, warmup_teacher_temp=0.04, teacher_temp=0.07, warmup_teacher_temp_epochs=3,
                       nepochs=5)
    assert loss_fn.teacher_temp_schedule == pytest.approx([0.04, 0.055, 0.07, 0.07, 0.07])
    loss_fn.center = torch.randn(1, 8)
    center = loss_fn.center.clone()
    student, teacher = torch.randn(4 * 3, 8, requires_grad=True), torch.randn(2 * 3, 8)
    loss = loss_fn(student, teacher, epoch=1)
    # a plain reference: every (teacher crop, student crop) pair but the same view's, averaged
    q = torch.softmax((teacher - center) / 0.055, dim=-1).chunk(2)
    s = torch.log_softmax(student.detach() / 0.1, dim=-1).chunk(4)
    terms = [(-q[i] * s[v]).sum(-1).mean() for i in range(2) for v in range(4) if v != i]
    assert len(terms) == 6 and float(loss.detach()) == pytest.approx(float(sum(terms) / 6), rel=1e-5)
    # update_center: an EMA (0.9) of the teacher's batch mean, under no_grad
    assert torch.allclose(loss_fn.center, 0.9 * center + 0.1 * teacher.mean(0, keepdim=True), atol=1e-6)
    assert not loss_fn.center.requires_grad
    loss.backward()
    assert student.grad is not None
    moved = loss_fn.center.clone()
    with torch.no_grad():  # the loop's held-out val_loss: the center stays
        loss_fn(student, teacher, epoch=4)
    assert torch.equal(loss_fn.center, moved)


def test_dino_head_is_dinohead_with_a_weight_normed_last_layer_whose_magnitude_is_frozen_at_one():
    from sample_runs.field_models import DINOHead

    torch.manual_seed(0)
    head = DINOHead(64, 256, use_bn=True, hidden_dim=128, bottleneck_dim=32)
    names = dict(head.named_parameters())
    assert {"last_layer.weight_g", "last_layer.weight_v"} <= set(names) and "last_layer.weight" not in names
    assert torch.equal(names["last_layer.weight_g"], torch.ones(256, 1))
    assert not names["last_layer.weight_g"].requires_grad and names["last_layer.weight_v"].requires_grad
    assert [type(m).__name__ for m in head.mlp] == ["Linear", "BatchNorm1d", "GELU", "Linear", "BatchNorm1d",
                                                      "GELU", "Linear"]
    head.eval()
    x = torch.randn(16, 64)
    out = head(x)
    assert out.shape == (16, 256) and float(out.abs().max()) <= 1 + 1e-5  # cosines: unit rows, L2-normed input
    with torch.no_grad():
        names["last_layer.weight_v"].mul_(7.0)  # weight_norm: the direction alone counts
    assert torch.allclose(head(x), out, atol=1e-6)


def test_dino_multicrop_wrapper_runs_the_backbone_once_per_resolution_and_the_teacher_sees_the_global_crops():
    from sample_runs.field import _data
    from sample_runs.field_models import dino_student, dino_teacher

    torch.manual_seed(0)
    student = dino_student()
    teacher = dino_teacher(student)
    crops, targets = _data("dino", RECIPES["dino"], 0, 1)[0]()
    assert targets is None and list(crops) == ["global_0", "global_1", "local_0", "local_1", "local_2", "local_3"]
    assert [tuple(c.shape) for c in crops.values()] == [(32, 3, 16, 16)] * 2 + [(32, 3, 8, 8)] * 4
    calls = []
    student.backbone.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[0]))
    student.eval()  # running statistics: batching by resolution must not change what each crop gets
    with torch.no_grad():
        out = student(crops)
        one_by_one = torch.cat([student.head(student.backbone(c)) for c in crops.values()])
    assert calls[:2] == [64, 128] and out.shape == (6 * 32, 256)
    assert torch.allclose(out, one_by_one, atol=1e-5)
    assert all(not p.requires_grad for p in teacher.parameters())
    assert all(torch.equal(p, q) for p, q in zip(student.parameters(), teacher.wrapper.parameters()))
    with torch.no_grad():
        assert teacher(crops).shape == (2 * 32, 256)  # images[:2]


def test_dino_recipe_is_main_dinos_adamw_schedules_per_parameter_clip_frozen_last_layer_and_ema_teacher():
    import numpy as np

    from sample_runs.field import (DINO_EPOCH_STEPS, DINO_LR, DINO_MIN_LR, OPTIMIZERS, _dino_hooks)
    from sample_runs.field_models import (dino_clip_gradients, dino_cosine_scheduler, dino_params_groups)

    # utils.cosine_scheduler against its formula: a linear warm-up, then a half cosine
    schedule = dino_cosine_scheduler(1.0, 0.1, 3, 4, warmup_epochs=1)
    assert schedule[:4] == pytest.approx(np.linspace(0, 1, 4))
    assert schedule[4:] == pytest.approx([0.1 + 0.45 * (1 + math.cos(math.pi * i / 8)) for i in range(8)])
    torch.manual_seed(0)
    model = build_field_model("dino", 4)
    recipe = RECIPES["dino"]
    groups = _param_groups(model, recipe, DINO_LR)
    # get_params_groups' partition: no decay on biases and 1-D parameters; weight_g (frozen) in no group
    regularized, not_regularized = dino_params_groups(model)
    assert {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]} == \
        {id(p) for p in regularized["params"]}
    assert {id(p) for g in groups if g["weight_decay"] == 0 for p in g["params"]} == \
        {id(p) for p in not_regularized["params"]}
    assert id(model.head.last_layer.weight_g) not in {id(p) for g in groups for p in g["params"]}
    optimizer = OPTIMIZERS[recipe.optimizer](groups, DINO_LR, recipe)
    assert isinstance(optimizer, torch.optim.AdamW) and recipe.clip is None
    factor = _schedule(recipe, 150)
    assert factor(0) == 0.0 and factor(10) == pytest.approx(1.0) and factor(149) > DINO_MIN_LR / DINO_LR
    teacher, loss_fn, before_step, after_step = _dino_hooks(model, optimizer)
    before_step(0)
    decayed = [g["weight_decay"] for g in optimizer.param_groups if g["params"][0].dim() > 1]
    assert decayed and all(w == pytest.approx(0.04) for w in decayed)
    before_step(149)
    assert all(0.39 < g["weight_decay"] <= 0.4 for g in optimizer.param_groups if g["params"][0].dim() > 1)
    assert all(g["weight_decay"] == 0.0 for g in optimizer.param_groups if g["params"][0].dim() == 1)
    # the step pre-hook: each gradient clipped to norm 3 on its own, the last layer's dropped in epoch 0
    for step in (DINO_EPOCH_STEPS - 1, DINO_EPOCH_STEPS):
        before_step(step)
        for p in model.parameters():
            p.grad = torch.full_like(p, 10.0) if p.requires_grad else None
        v_before = model.head.last_layer.weight_v.detach().clone()
        optimizer.step()
        if step < DINO_EPOCH_STEPS:  # cancel_gradients_last_layer
            assert model.head.last_layer.weight_v.grad is None
            assert torch.equal(model.head.last_layer.weight_v, v_before)  # AdamW skips a None grad
        else:
            assert model.head.last_layer.weight_v.grad is not None
        norms = [float(p.grad.norm()) for p in model.parameters() if p.grad is not None]
        assert norms and max(norms) <= 3.0 + 1e-3
    grads = [torch.randn(5) * 10, torch.randn(3) * 0.1]
    params = [torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.zeros(3))]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    holder = torch.nn.ParameterList(params)
    dino_clip_gradients(holder, 3.0)  # per parameter: the small one is left alone
    assert float(params[0].grad.norm()) == pytest.approx(3.0, rel=1e-4) and torch.equal(params[1].grad, grads[1])
    # the EMA update at momentum_schedule[step]: teacher <- m teacher + (1 - m) student
    old = [p.clone() for p in teacher.wrapper.parameters()]
    before_step(0)
    after_step()
    m = dino_cosine_scheduler(0.99, 1, 15, DINO_EPOCH_STEPS)[0]
    for p_t, p_s, p_old in zip(teacher.wrapper.parameters(), model.parameters(), old):
        assert torch.allclose(p_t, m * p_old + (1 - m) * p_s.detach(), atol=1e-6)


def test_dino_knn_is_eval_knns_weighted_vote_against_a_plain_loop():
    from sample_runs.field_models import dino_knn_top1, dino_student

    torch.manual_seed(0)
    backbone = dino_student().backbone
    bank, bank_y = torch.randn(40, 3, 16, 16), torch.randint(0, 4, (40,))
    x, y = torch.randn(12, 3, 16, 16), torch.randint(0, 4, (12,))
    top1 = dino_knn_top1(backbone, bank, bank_y, x, y, k=5, T=0.07)
    assert backbone.training  # the mode restored
    backbone.eval()
    with torch.no_grad():
        assert top1 == pytest.approx(_plain_knn_top1(backbone(bank), bank_y, backbone(x), y, k=5, t=0.07))


def test_dino_healthy_run_learns_by_its_teachers_knn_and_records_the_student_only(tmp_path):
    truth = make("healthy-dino-s0", tmp_path / "run")
    assert truth.verdict == "healthy"
    by_name = _scalars_by_name(tmp_path / "run")
    knn, loss = by_name["val_knn_top1"], by_name["loss"]
    assert len(knn) == len(loss) == 150  # judged on it: an eval every step
    assert sum(knn[-10:]) / 10 > sum(knn[:10]) / 10 + 8 and knn[-1] > 80
    assert sum(loss[-10:]) < 0.95 * sum(loss[:10]) and min(loss) > 0.5 * math.log(256)  # no one-hot collapse
    stats = read_stats(tmp_path / "run")
    names = set(stats["name"])
    assert {"head.last_layer.weight_g", "head.last_layer.weight_v"} <= names  # the old weight_norm's names
    assert not any(n.startswith(("wrapper.", "teacher")) for n in names)  # the teacher records nothing
    v = stats[stats["name"] == "head.last_layer.weight_v"]
    update = v[v["role"] == "update"].sort_values("step")
    assert (update["norm"].iloc[:10] == 0).all() and (update["norm"].iloc[10:] > 0).all()  # freeze_last_layer
    g = stats[(stats["name"] == "head.last_layer.weight_g") & (stats["role"] == "grad")]
    assert g["grad_none"].all()  # frozen at 1
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 0)]
    assert set(io["role"]) == {"input"} and len(io) == 6  # the six crops, no targets


def _detr_xyxy(boxes):
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)


def test_detr_matcher_is_the_cheapest_assignment_of_detrs_cost_and_the_criterion_weights_the_no_object_class():
    import itertools

    from sample_runs.field_models import DETR_EOS_COEF, HungarianMatcher, detr_criterion, detr_generalized_box_iou

    torch.manual_seed(0)
    queries, classes = 5, 4
    outputs = {"pred_logits": torch.randn(2, queries, classes + 1), "pred_boxes": 0.2 + 0.5 * torch.rand(2, queries, 4)}
    targets = [{"labels": torch.tensor([1, 3]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.6, 0.7, 0.3, 0.2]])},
               {"labels": torch.tensor([0]), "boxes": torch.tensor([[0.5, 0.5, 0.4, 0.3]])}]
    indices = HungarianMatcher(1, 5, 2)(outputs, targets)
    for b, (target, (src, tgt)) in enumerate(zip(targets, indices)):
        logits, boxes = outputs["pred_logits"][b], outputs["pred_boxes"][b]
        cost = (-logits.softmax(-1)[:, target["labels"]] + 5 * torch.cdist(boxes, target["boxes"], p=1)
                - 2 * detr_generalized_box_iou(_detr_xyxy(boxes), _detr_xyxy(target["boxes"])))
        best = min(itertools.permutations(range(queries), len(target["labels"])),  # brute force over assignments
                   key=lambda chosen: float(sum(cost[q, k] for k, q in enumerate(chosen))))
        assert dict(zip(tgt.tolist(), src.tolist())) == dict(enumerate(best))
    criterion = detr_criterion(classes)
    aux = {"pred_logits": torch.randn(2, queries, classes + 1), "pred_boxes": torch.rand(2, queries, 4) * 0.5 + 0.2}
    losses = criterion({**outputs, "aux_outputs": [aux]}, targets)
    assert set(losses) == {"loss_ce", "loss_bbox", "loss_giou", "loss_ce_0", "loss_bbox_0", "loss_giou_0"}
    wanted = torch.full((2, queries), classes)  # unmatched queries to the no-object class, weighted eos_coef
    for b, (target, (src, tgt)) in enumerate(zip(targets, indices)):
        wanted[b, src] = target["labels"][tgt]
    weight = torch.tensor([1.0] * classes + [DETR_EOS_COEF])
    nll = -outputs["pred_logits"].log_softmax(-1).gather(-1, wanted[..., None])[..., 0]
    assert float(losses["loss_ce"]) == pytest.approx(float((weight[wanted] * nll).sum() / weight[wanted].sum()), rel=1e-5)
    l1 = sum((outputs["pred_boxes"][b, src] - t["boxes"][tgt]).abs().sum() for b, (t, (src, tgt)) in
             enumerate(zip(targets, indices)))
    assert float(losses["loss_bbox"]) == pytest.approx(5 * float(l1) / 3, rel=1e-5)  # ×5 over num_boxes 3


def test_voc_ap50_is_the_area_under_the_precision_envelope_over_classes():
    from sample_runs.field_models import voc_ap50

    gt_labels = [np.array([0, 1]), np.array([0])]
    gt_boxes = [np.array([[0.1, 0.1, 0.3, 0.3], [0.5, 0.5, 0.9, 0.9]]), np.array([[0.2, 0.2, 0.6, 0.6]])]
    assert voc_ap50([np.ones(2), np.ones(1)], gt_labels, gt_boxes, gt_labels, gt_boxes, 2) == pytest.approx(1.0)
    # class 0: a false positive ranked first, then both boxes found (precision 1/2, 2/3): AP (1/2 · 2/3 + 1/2 · 2/3)
    scores = [np.array([0.9, 0.8, 0.7]), np.array([0.6])]
    labels = [np.array([0, 0, 1]), np.array([0])]
    boxes = [np.array([[0.6, 0.0, 0.9, 0.2], [0.1, 0.1, 0.3, 0.3], [0.5, 0.5, 0.9, 0.9]]), np.array([[0.2, 0.2, 0.6, 0.6]])]
    assert voc_ap50(scores, labels, boxes, gt_labels, gt_boxes, 2) == pytest.approx((2 / 3 + 1.0) / 2)
    shifted = [np.array([[0.5, 0.5, 0.9, 0.9]]) + 0.25, np.zeros((0, 4))]  # IoU < 0.5: no true positive
    assert voc_ap50([np.ones(1), np.ones(0)], [np.array([1]), np.array([], dtype=int)], shifted,
                    gt_labels, gt_boxes, 2) == pytest.approx(0.0)


def test_detr_recipe_is_mains_adamw_with_a_backbone_group_clip_and_step_lr_and_a_detach_cuts_the_memory():
    from sample_runs.field import (DETR_LR, DETR_LR_DROP, FLOAT_INPUTS, OPTIMIZERS, UNTARGETED, _data)
    from sample_runs.field_models import DETR_LR_BACKBONE_SCALE, detr_loss

    model = build_field_model("detr", 4)
    recipe = RECIPES["detr"]
    groups = _param_groups(model, recipe, DETR_LR)
    names = {id(p): n for n, p in model.named_parameters()}
    assert {id(p) for g in groups for p in g["params"]} == {id(p) for p in model.parameters()}
    for group in groups:  # main.py's param_dicts: "backbone" in the name at lr_backbone; AdamW's decay on all
        backbone = {"backbone" in names[id(p)] for p in group["params"]}
        assert len(backbone) == 1 and group["weight_decay"] == 1e-4
        assert group["lr"] == pytest.approx(DETR_LR * (DETR_LR_BACKBONE_SCALE if backbone.pop() else 1.0))
    assert type(OPTIMIZERS[recipe.optimizer](groups, DETR_LR, recipe)) is torch.optim.AdamW
    assert (DETR_LR, DETR_LR_BACKBONE_SCALE, recipe.clip, recipe.warmup, recipe.batch) == (1e-3, 0.1, 0.1, 0, 16)
    schedule = _schedule(recipe, 150)
    assert [schedule(s) for s in (0, DETR_LR_DROP - 1)] == [1.0, 1.0]
    assert [schedule(s) for s in (DETR_LR_DROP, 149)] == pytest.approx([0.1, 0.1])  # StepLR(lr_drop), gamma 0.1
    assert "detr" in FLOAT_INPUTS and "detr" not in UNTARGETED and LEFT_OUT["detr"] == ("healthy_spike",)
    assert sum(s.arch == "detr" for s in SCENARIOS.values()) == 39
    x, y = _data("detr", recipe, 0, 1)[0]()
    assert x.shape == (16, 3, 32, 32) and y["labels"].shape == (16, 2) and y["boxes"].shape == (16, 2, 4)
    assert ((y["labels"] >= 0).sum(1) >= 1).all() and (y["boxes"][y["labels"] >= 0] > 0).all()
    assert model.hidden[-1] == "transformer.encoder.layers.0"  # the memory: the detach's layer
    detach = faults.DetachedLayer(t0=0, layer=model.hidden[-1])
    detach.install(model)
    detach.before_step(0, model, None)
    sum(detr_loss(4)(model(x), y).values()).backward()
    for name, p in model.named_parameters():
        before = name.startswith(("backbone.", "input_proj.", "transformer.encoder."))
        assert (p.grad is None) == before, name  # the decoder, the queries and the heads still learn


def test_detr_healthy_run_learns_raises_its_ap50_and_records_each_weighted_loss(tmp_path):
    by_name = _healthy_recorded("healthy-detr-s0", tmp_path / "run")
    ap, val = by_name["val_ap50"], by_name["val_loss"]
    assert len(ap) == len(val) == 6 and ap[0] < 0.02 and max(ap[-2:]) > 0.1  # VOC AP50 every 25 steps
    assert min(val[-2:]) < 0.7 * val[0]
    parts = [by_name[k] for k in ("loss_ce", "loss_bbox", "loss_giou", "loss_ce_0", "loss_bbox_0", "loss_giou_0")]
    assert [sum(values) for values in zip(*parts)] == pytest.approx(by_name["loss"], rel=1e-5)
    assert by_name["lr"] == pytest.approx([1e-4] * 100 + [1e-5] * 50)  # param group 0's: the backbone's
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 7)].set_index("name")
    assert io.loc["input", "shape"] == "16x3x32x32" and io.loc["target.labels", "dtype"] == "int64"
    assert io.loc["target.boxes", "shape"] == "16x2x4"
def _deepar_batch(n=6, split=400, seed=0):
    from sample_runs.data import related_series
    from sample_runs.field import deepar_window

    series = torch.arange(n) * 7 % 48
    return deepar_window(related_series(), series, torch.full((n,), split) + torch.arange(n))


def test_deepar_scaler_is_gluonts_mean_scaler_and_the_windows_are_the_instance_splitters():
    from sample_runs.data import RELATED_SERIES, related_series
    from sample_runs.field import DEEPAR_BATCHES_PER_EPOCH, _data, _deepar_held_out, deepar_window
    from sample_runs.field_models import DEEPAR_LAGS, MeanScaler

    values = related_series()
    assert values.shape == (RELATED_SERIES.series, RELATED_SERIES.length) and (values >= 0).all()
    counts = values[RELATED_SERIES.continuous:]
    assert torch.equal(counts, counts.round()) and float((counts == 0).float().mean()) > 0.1  # intermittent counts
    levels = values.mean(1)
    assert float(levels.max() / levels.min()) > 100  # scales differ by orders of magnitude
    data = torch.tensor([[1.0, -3.0, 2.0], [0.0, 0.0, 0.0], [4.0, 4.0, 9.0]])
    observed = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    scaled, scale = MeanScaler()(data, observed)
    batch_mean = (6.0 + 0.0 + 8.0) / 8  # the batch's |sum| over its observed values
    assert scale.squeeze(1).tolist() == pytest.approx([2.0, batch_mean, 4.0])  # the all-zero context: the batch's
    assert torch.allclose(scaled, data / scale) and not scale.requires_grad
    assert float(MeanScaler()(torch.zeros(2, 3), torch.ones(2, 3))[1].min()) == pytest.approx(1e-10)  # the floor
    past = 24 + max(DEEPAR_LAGS)
    window = deepar_window(values, torch.tensor([3, 40]), torch.tensor([500, 100]))
    assert window["past_target"].shape == (2, past) and window["future_target"].shape == (2, 24)
    assert torch.equal(window["past_target"][0], values[3, 500 - past:500])
    assert torch.equal(window["future_target"][1], values[40, 100:124])
    pad = past - 100  # before the series began: pad_value 0, not observed
    assert (window["past_target"][1, :pad] == 0).all() and (window["past_observed_values"][1, :pad] == 0).all()
    assert (window["past_observed_values"][1, pad:] == 1).all() and (window["past_time_feat"][1, :pad] == 0).all()
    hour, day, age = window["future_time_feat"][0, 0]
    assert (float(hour), float(day), float(age)) == pytest.approx(((500 % 24) / 23 - 0.5, ((500 // 24) % 7) / 6 - 0.5,
                                                                   math.log10(2 + 500)))
    assert window["feat_static_cat"].tolist() == [[3], [40]] and (window["feat_static_real"] == 0).all()
    held = _deepar_held_out()
    assert torch.equal(held["future_target"], values[:, -24:])  # the test split: every series' last day
    draws, val, classes, chance = _data("deepar", RECIPES["deepar"], 0, 1)
    assert classes == RELATED_SERIES.series and len(draws) == DEEPAR_BATCHES_PER_EPOCH and 0 < chance < 1
    first = list(draws)
    assert len(first) == DEEPAR_BATCHES_PER_EPOCH and first[0]["past_target"].shape == (32, past)
    assert not torch.equal(list(draws)[0]["past_target"], first[0]["past_target"])  # the stream goes on across epochs
    train_part = values[:, :-24]  # no training window reaches into the held-out day
    for batch in first:
        ends = batch["future_target"]
        assert all(any(torch.equal(ends[i], train_part[s, t:t + 24]) for t in range(train_part.shape[1] - 23))
                   for i, s in enumerate(batch["feat_static_cat"][:2, 0].tolist()))
    assert len(_data("deepar", RECIPES["deepar"], 0, 4)[0]) == 4 * DEEPAR_BATCHES_PER_EPOCH  # whole steps an epoch


def test_deepar_unrolls_lagged_scaled_targets_teacher_forced_and_scores_the_scaled_t_nll():
    from sample_runs.field_models import DEEPAR_LAGS, DeepAR, deepar_loss, student_t_log_prob

    torch.manual_seed(0)
    model = DeepAR(48).eval()
    batch = _deepar_batch()
    seen = []
    model.rnn.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    with torch.no_grad():
        params, scale, target, observed = model(batch)
    steps = 24 - 1 + 24
    assert params.shape == (6, steps, 3) and target.shape == observed.shape == (6, steps)
    inputs = seen[0]
    assert inputs.shape == (6, steps, len(DEEPAR_LAGS) + 3 + 24 + 1 + 1)
    full = torch.cat([batch["past_target"], batch["future_target"]], dim=1) / scale
    start = batch["past_target"].shape[1] - 24 + 1
    for i, lag in enumerate(DEEPAR_LAGS):  # the scaled value l steps back, at every unrolled step
        assert torch.allclose(inputs[..., i], full[:, start - lag:start - lag + steps])
    context = batch["past_target"][:, -24:]
    assert torch.allclose(scale.squeeze(1), context.abs().mean(1))
    assert torch.allclose(inputs[:, 0, -1], scale.squeeze(1).log())  # log scale, a static feature
    assert torch.equal(target, torch.cat([batch["past_target"][:, -23:], batch["future_target"]], dim=1))
    later = dict(batch, future_target=batch["future_target"].clone())
    later["future_target"][:, 5] += 10 * scale.squeeze(1)  # teacher forcing: a target moves only what follows it
    with torch.no_grad():
        moved = model(later)[0]
    assert torch.allclose(moved[:, :23 + 6], params[:, :23 + 6], atol=1e-6)  # (a batched matmul's rounding)
    assert ((moved[:, 23 + 6] - params[:, 23 + 6]).abs() > 1e-3).any(dim=-1).all()  # the next step's t, everywhere
    df, loc, t_scale = params.unbind(-1)
    assert (df > 2).all() and (t_scale > 0).all()  # StudentTOutput's domain map
    reference = -torch.distributions.StudentT(df, loc, t_scale).log_prob(target / scale).mean()
    assert float(deepar_loss((params, scale, target, observed))) == pytest.approx(float(reference), rel=1e-5)
    # a sharp, right t: a positive log-likelihood, a negative NLL
    assert float(student_t_log_prob(torch.tensor(0.001), torch.tensor(3.0), torch.tensor(0.0), torch.tensor(0.01))) > 0
    half = observed.clone()
    half[:, ::2] = 0  # unobserved steps weigh nothing
    nll = -torch.distributions.StudentT(df, loc, t_scale).log_prob(target / scale)
    assert float(deepar_loss((params, scale, target, half))) == pytest.approx(float(nll[:, 1::2].mean()), rel=1e-5)


def test_deepar_forecasts_by_sampling_paths_fed_back_and_is_scored_by_the_mean_weighted_quantile_loss():
    from sample_runs.field_models import DeepAR, deepar_sample_paths, mean_weighted_quantile_loss

    torch.manual_seed(0)
    model = DeepAR(48).eval()
    batch = _deepar_batch(n=3)
    params_seen = []
    model.param_proj.register_forward_hook(lambda m, args, out: params_seen.append(out))
    with torch.no_grad():
        teacher = model(batch)[0]
        params_seen.clear()
        torch.manual_seed(1)
        paths = deepar_sample_paths(model, batch, 5)
    assert paths.shape == (3, 5, 24) and torch.isfinite(paths).all()
    first = torch.stack(params_seen[0], dim=-1)  # the context's last step: the first future value's t
    assert torch.allclose(first.view(3, 5, 3), teacher[:, 23].unsqueeze(1).expand(3, 5, 3), atol=1e-5)
    assert len(params_seen) == 24
    torch.manual_seed(1)
    with torch.no_grad():
        assert torch.equal(deepar_sample_paths(model, batch, 5), paths)
    # mean_wQuantileLoss against a plain numpy reference (np.quantile, linear interpolation)
    samples, target = torch.rand(4, 7, 5) * 10, torch.rand(4, 5) * 10
    s, y = samples.double().numpy(), target.double().numpy()
    expected = np.mean([2 * np.abs((y - np.quantile(s, q, axis=1)) * ((y <= np.quantile(s, q, axis=1)) - q)).sum()
                        / np.abs(y).sum() for q in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)])
    assert mean_weighted_quantile_loss(samples, target) == pytest.approx(expected, rel=1e-5)
    assert mean_weighted_quantile_loss(target.unsqueeze(1).expand(4, 7, 5), target) == 0.0  # a perfect forecast


def test_deepar_recipe_is_gluonts_adam_clip_10_and_a_plateau_on_the_epochs_train_loss():
    from sample_runs.field import (DEEPAR_BATCHES_PER_EPOCH, DEEPAR_PLATEAU, EVAL_EVERY, FLOAT_INPUTS,
                                   OPTIMIZERS, OUTCOME_METRICS, UNTARGETED, DeepARTrainingBatches)
    from sample_runs.field_models import DeepAR, deepar_loss

    model = build_field_model("deepar", 48)
    recipe = RECIPES["deepar"]
    groups = _param_groups(model, recipe, recipe.lr)
    assert [g["layer"] for g in groups] == model.units == ["embedder", "rnn", "param_proj"]
    assert all(g["weight_decay"] == 1e-8 for g in groups)  # Adam's L2 on every parameter
    optimizer = OPTIMIZERS[recipe.optimizer](groups, recipe.lr, recipe)
    assert type(optimizer) is torch.optim.Adam and (recipe.lr, recipe.batch, recipe.clip, recipe.warmup) == (
        1e-3, 32, 10.0, 0)
    assert DEEPAR_PLATEAU == {"mode": "min", "factor": 0.5, "patience": 3} and EVAL_EVERY["deepar"] == 1
    assert OUTCOME_METRICS["deepar"].name == "val_wql" and not OUTCOME_METRICS["deepar"].higher_is_better
    assert "deepar" in FLOAT_INPUTS and "deepar" in UNTARGETED and "deepar" not in LEFT_OUT
    assert sum(s.arch == "deepar" for s in SCENARIOS.values()) == 39
    assert isinstance(model.rnn, torch.nn.LSTM) and (model.rnn.num_layers, model.rnn.hidden_size,
                                                     model.rnn.dropout) == (2, 40, 0.1)
    detach = faults.DetachedLayer(t0=0, layer="rnn")  # the LSTM and the embedding cut off, the projection learns
    detach.install(model)
    detach.before_step(0, model, None)
    deepar_loss(model(_deepar_batch())).backward()
    assert all(p.grad is None for p in [*model.rnn.parameters(), *model.embedder.parameters()])
    assert all(p.grad.abs().sum() > 0 for p in model.param_proj.parameters())
    # The plateau: the same batch every step at a negligible lr, so no epoch's mean train_loss improves;
    # ReduceLROnPlateau halves the lr after patience + 1 such epochs, and the lr stays halved.
    torch.manual_seed(0)
    model = DeepAR(48)
    batch = _deepar_batch(n=4)

    class Same(DeepARTrainingBatches):
        def draw(self):
            return batch

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-12)
    lrs = []
    outcome = train_lightning(None, model, optimizer, Same(4, 0), [batch], steps=6 * DEEPAR_BATCHES_PER_EPOCH,
                              lr_at=lambda step: 1.0, fault=_LrSpy(lrs, optimizer), loss_fn=deepar_loss, accumulation=1,
                              clip=10.0, bf16=False, eval_every=100, plateau=DEEPAR_PLATEAU)
    assert len(outcome.losses) == 60
    assert lrs[:50] == pytest.approx([1e-12] * 50) and lrs[50:] == pytest.approx([5e-13] * 10)
    with pytest.raises(ValueError, match="constant"):
        train_lightning(None, model, optimizer, Same(4, 0), [batch], steps=2, lr_at=lambda step: 1.0 - step,
                        fault=faults.Fault(), loss_fn=deepar_loss, accumulation=1, clip=None, bf16=False,
                        plateau=DEEPAR_PLATEAU)


class _LrSpy(faults.Fault):
    def __init__(self, lrs, optimizer):
        super().__init__()
        self.lrs, self.optimizer = lrs, optimizer

    def before_step(self, step, model, optimizer):
        self.lrs.append(self.optimizer.param_groups[0]["lr"])


def test_deepar_healthy_run_learns_by_its_held_out_quantile_loss_each_step_under_lightning(tmp_path):
    truth = make("healthy-deepar-s1", tmp_path / "run")
    assert truth.verdict == "healthy" and "judged on val_wql" in truth.notes
    by_name = _scalars_by_name(tmp_path / "run")
    wql, val, loss = by_name["val_wql"], by_name["val_loss"], by_name["loss"]
    assert len(wql) == len(val) == len(loss) == 150  # a validation after every step
    assert _mean(wql[-10:]) < 0.3 * _mean(wql[:10]) and _mean(loss[-10:]) < 0.5 * _mean(loss[:10])
    assert by_name["lr"] == pytest.approx([1e-3] * 150)  # the plateau never fired
    manifest = (tmp_path / "run" / "manifest.json").read_text()
    assert '"gradient_clip_val": 10.0' in manifest
    stats = read_stats(tmp_path / "run")
    io = stats[stats["role"].isin(["input", "target"]) & (stats["step"] == 3)].set_index("name")
    assert set(io.index) == {f"input.{k}" for k in ("past_target", "past_observed_values", "past_time_feat",
                                                    "future_target", "future_observed_values", "future_time_feat",
                                                    "feat_static_cat", "feat_static_real")}
    assert io.loc["input.past_target", "shape"] == "32x193" and io.loc["input.feat_static_cat", "dtype"] == "int64"
