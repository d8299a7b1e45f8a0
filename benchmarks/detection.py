"""Scores `postmortem.analyze` and today's baselines on sample runs whose truth is known.

    python benchmarks/detection.py --runs runs/all --generate [--subset small] [--write-docs]

Each run directory holds an `expected.json` written by `python -m sample_runs` from the
injection (never from the analyzer). The baselines read the run directory with pyarrow/pandas
only, exactly as the run format documents it; none of them uses postmortem code.

Methods
- postmortem: `postmortem.analyze(run)`.
- first_nonfinite: the first step at which any recorded value is NaN/inf (what a NaN check sees).
- zclip: ZClip (Kumar et al. 2025): z-score of the global grad norm against its EMA mean/variance,
  alpha 0.97, threshold z > 2.5, 25 warm-up steps; spikes update the EMA with the clipped value.
- megatron: Megatron-LM's spiky-loss check: loss > 10 × the max of the previous 100 losses, or
  a non-finite loss (its NaN check).
- pelt: ruptures PELT (model "l2", jump=1, min_size=2) on log10 of the global grad norm, penalty
  3·σ²·ln(n) with σ from the median absolute first difference; an alarm is the first change
  point after which the segment mean rises by ≥ 1 (×10) over the segment before.
- sagemaker_rules: ports of the SageMaker Debugger built-in rules at their documented defaults
  (docs.aws.amazon.com/sagemaker/latest/dg/debugger-built-in-rules.html), mapped to our labels;
  see `sagemaker_rules()` for each rule, threshold and the proxy used where our statistics differ.
- autotrainer_rules: AUTOTRAINER's checks at its default parameters; see `autotrainer_rules()`.

Leave one model family out (the headline)
- postmortem runs once per configuration of `threshold_grid()` (the defaults and the `VARIANTS`,
  each a `dataclasses.replace` of `postmortem.detectors.Thresholds`); the rows are cached.
- For each model family (`arch` in expected.json: mlp, cnn, lstm, gan, linear, deep_mlp, and the
  field families of sample_runs/field.py, `FIELD_ARCHS`), the configuration with the best `objective` on
  every OTHER family is chosen, and the family is scored with it.
- Headline: those scores on the families nobody has tuned on (`NEVER_SEEN_ARCHS`: added to the
  zoo before the detectors' last changes and not analysed until those changes were final),
  overall and per family. Every other family informed some default (`INFORMED_DEFAULTS`).

Scoring (one row per method; held-out families in their own rows)
- detection: share of runs whose truth is `diverged` that the method calls diverged, and the same
  for `not_learning` (methods that only watch for divergence cannot say "not learning").
- false alarms: share of healthy runs given any other verdict.
- onset error: |t̂ − t0| over injected divergences with a known t0; missed runs count as misses
  in the ±1 / ±5 shares.
- culprit top-1/top-3: over runs with a known culprit layer; a named tensor matches when it is the
  layer or one of its parameters/outputs (`fc2`, `fc2.weight`, `fc2.0`), or one of the layers the
  fault hit equally (every layer before a detach()). Diverged runs use the method's ranking;
  not-learning runs the tensors named by its findings, in order; in both, the tensors named by
  the findings of the truth's mechanism labels (other than `diverged`) come first.
- labels: every expected label is among the method's labels (its verdict counts as a label);
  for healthy runs, no label other than `healthy`/`recovered_incident` and the truth's `tolerated`
  ones (the mechanism of a fault the run survived), and verdict healthy.
  postmortem's findings of severity `note` are not counted (benign on any run).
- verdict right: the method's verdict is the truth's.
- lead time: first non-finite step − t̂, median over detected runs that reach a non-finite value
  ("median lead, all"); and the same over the runs whose first non-finite value comes AFTER the
  truth's onset ("median lead (steps)", the target's yardstick): a fault that is itself
  non-finite (a NaN batch) or that overflows on its own step has no lead to give.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: import this tree's packages
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Detection"
BENIGN_LABELS = {"healthy", "loss_spike_recovered", "recovered_incident"}
DEFAULT = "default"
GENERATED_FILE = ".generated.json"
NEVER_SEEN_ARCHS = ("detr", "deepar")
"""Model families added to the zoo before the detectors' last changes and never analysed while any
detector changed: the headline's runs."""
INFORMED_DEFAULTS = {
    "mlp, cnn, lstm, gan, linear, deep_mlp": "the original zoo's tuning set (issues 11-12 and before)",
    "gpt, transformer, resnet, gru and the fault families adam_eps, fp16_overflow, label_shuffle":
        "held out until issue 12's first scoring; their failures were read while changing detectors "
        "in issue 12's quality work, so they informed defaults since",
    "vit, lstm_lm": "added never-seen for round 1 of that work and scored once as its headline (see the "
                    "protocol); their failures were read afterwards and informed round 2",
    "mixer, tcn": "never-seen round 2, scored once in session 5; their failures were read in session 6",
    "llama, autoencoder, recsys": "never-seen round 3, scored once in session 6 (its headline); their failures "
                                  "were read afterwards",
    "moe, vae": "never-seen round 4, scored once in session 6 (its headline); their failures were read in "
                "session 7, when every family of rounds 1-4 informed the last changes (helper 12h)",
    "unet, seq2seq, gnn, simclr": "never-seen round 5, scored once in session 7 at 45084e2 (its headline); "
                                  "their failures were read afterwards in session 7 (helper 12j)",
    "ddpm, ctc": "never-seen round 6, scored once in session 7 at 0eb5e07 (its headline); their failures were "
                 "read in session 8 (helper 12m)",
    "mamba, fttransformer, convnext": "never-seen round 7, scored once in session 8 at 0c40f10; failures read in "
                                      "session 8 (lead)",
    "bert_mlm, siren, pointnet": "never-seen round 8, scored once in session 9 at 627b856; failures read in "
                                 "session 9 (lead)",
    "t5, clip, densenet": "never-seen round 9, scored once in session 10 at 7169af3; failures read in session 10 "
                          "(lead)",
    "reinforce, wgan_gp, swin": "never-seen round 10, scored once in session 12 at 710c12b; failures read in "
                                "session 12 (lead)",
    "dqn, distil, byol": "never-seen round 11, scored once in session 12 at 101cbed; failures read in session 12 "
                         "(lead)",
    "realnvp, transe, kws": "never-seen round 12, scored once in session 13 at 033fe4c; failures read in "
                            "session 13 (lead)",
    "lora, vqvae, nbeats": "never-seen round 13, scored once in session 13 at bef8d92; failures read in "
                           "session 13 (lead)",
    "word2vec, triplet, sam": "never-seen round 14, scored once in session 14 at 9f590b3; failures read in "
                              "session 14 (lead)",
    "ppo, detector, efficientnet": "never-seen round 15, scored once in session 14 at 8b0533e; failures read "
                                   "in session 14 (lead)",
    "pinn, maml, pix2pix": "never-seen round 16, scored once in session 15 at 04d38c0; failures read in session 16 "
                           "(lead)",
    "bilstm_crf, pixelcnn, neural_ode": "never-seen round 17, scored once in session 16 at 4e61d3a; failures read "
                                        "in session 16 (lead)",
    "nerf, capsnet": "never-seen round 18, scored once in session 17 at 8fab4b9; failures read in session 17-18 "
                     "(lead)",
    "sac, mae": "never-seen round 19, scored once in session 18 at fdb6c79; failures read in session 18 (lead)",
    "rwkv, tabnet": "never-seen round 20, scored once in session 19 at b756b18; failures read in session 19 (lead)",
    "perceiver, wavenet": "never-seen round 21, scored once in session 20 at e977226; failures read in session 20 "
                          "(lead)",
    "set_transformer, conformer": "never-seen round 22, scored once in session 20 at 780c2a4; failures read in "
                                  "session 20 (lead)",
    "gat, neural_process": "never-seen round 23, scored once in session 20 at 338f2d1; failures read in session "
                           "20 (lead)",
    "kan, hypernetwork": "never-seen round 24, scored once in session 20 at 0b0a3c5; failures read in sessions "
                         "20 and 22 (lead)",
    "dit": "never-seen round 25, scored once in session 23 at 6926bf2; failures read in session 23 (lead)",
    "sae": "never-seen round 26, scored once in session 24 at 4abb47e; failures read in sessions 24-25 (lead)",
    "sngan, electra_ft": "never-seen round 27, scored once in session 26 at f935512; failures read in session 26 "
                         "(lead)",
    "muon_gpt, deeplab": "never-seen round 28, scored once in session 27 at a17d81a; failures read in session 27 "
                         "(lead)",
    "decision_transformer": "never-seen round 29, scored once in session 28 at efa5279; failures read in session "
                            "28 (lead)",
    "patchtst": "never-seen round 30, scored once in session 28 at 4b2974a; failures read in session 28 (lead)",
    "timm_mixup": "never-seen round 31, scored once in session 28 at 44f7229; failures read in sessions 28-29 (lead)",
    "gradual_pruning, qat": "never-seen round 32, scored once in session 29 at 1971819; failures read in session 29 "
                            "(lead)",
    "albert, deq": "never-seen round 33, scored once in session 29 at 1e40de6; failures read in session 29 (lead)",
    "moco, ddp_wrn": "never-seen round 34, scored once in session 30 at d1e0aa5; failures read in session 30 (lead)",
    "tacotron, swa_gc": "never-seen round 35, scored once in session 31 at 3f28f5e; failures read in session 31 "
                        "(lead)",
    "dino, link_pred": "never-seen round 36, scored once in session 32 at 4938bc2; failures read in session 32 "
                       "(lead)",
}
"""Which families informed the defaults, and since when."""


# ---------------------------------------------------------------- reading a run (no postmortem code)

def _read(run: Path, kind: str, columns: list[str]) -> pd.DataFrame:
    files = sorted(p for p in (run / kind).glob("part-*.parquet"))
    if not files:
        return pd.DataFrame(columns=columns)
    return ds.dataset([str(f) for f in files], format="parquet").to_table(columns=columns).to_pandas()


@dataclass
class RunData:
    long_scalars: pd.DataFrame  # step, name, value
    scalars: pd.DataFrame  # step × name → value
    stats: pd.DataFrame

    def scalar(self, name: str) -> pd.Series:
        """One scalar by step, NaN and inf kept (they are what the detectors look for)."""
        rows = self.long_scalars[self.long_scalars["name"] == name]
        return rows.set_index("step")["value"].sort_index()

    def global_grad_norm(self) -> pd.Series:
        """The global grad norm as a training loop computes it (`clip_grad_norm_`): the recorder keeps
        the finite part, so steps with any non-finite gradient are put back to inf."""
        norms = self.scalar("grad_norm").copy()
        grads = self.stats[(self.stats["role"] == "grad") & (self.stats["nonfinite"] > 0)]
        norms[norms.index.isin(grads["step"].unique())] = np.inf
        return norms

    def loss(self) -> pd.Series:
        """The loss, or the sum of every `loss_*` scalar (a GAN's loss_d + loss_g); NaN stays NaN."""
        names = [c for c in self.scalars.columns if c == "loss" or c.startswith("loss_")]
        steps = self.long_scalars.loc[self.long_scalars["name"].isin(names), "step"].unique()
        return self.scalars.loc[sorted(steps), names].sum(axis=1, skipna=False)


def read_run(run: Path) -> RunData:
    scalars = _read(run, "scalars", ["step", "name", "value"]).drop_duplicates(["step", "name"], keep="last")
    stats = _read(run, "stats", ["step", "role", "name", "key", "numel", "norm", "mean", "zero_frac",
                                 "sat_frac", "ratio", "nonfinite", "grad_none"])
    stats = stats.drop_duplicates(["step", "role", "name", "key"], keep="last")
    wide = scalars.pivot(index="step", columns="name", values="value").sort_index()
    return RunData(scalars, wide, stats)


def first_nonfinite_step(data: RunData) -> int | None:
    """First step with a NaN/inf in any statistic's non-finite count or in any scalar."""
    steps = []
    bad = data.stats[data.stats["nonfinite"] > 0]
    if len(bad):
        steps.append(int(bad["step"].min()))
    values = data.long_scalars["value"].to_numpy(dtype=float)
    bad_scalars = data.long_scalars[~np.isfinite(values)]
    if len(bad_scalars):
        steps.append(int(bad_scalars["step"].min()))
    return min(steps) if steps else None


# ---------------------------------------------------------------- predictions

@dataclass
class Prediction:
    verdict: str
    onset: int | None = None
    culprits: list[str] = field(default_factory=list)
    labels: set[str] = field(default_factory=set)
    """Labels of the findings that count: every one but those of severity `note` (structure, or a
    mechanism in a run that learns), which are benign on any run."""
    named: dict[str, list[str]] = field(default_factory=dict)
    """The tensors each counted label's findings name (a log_of_zero finding names its module)."""


def postmortem_method(run: Path, data: RunData, thresholds=None, loaded=None) -> Prediction:
    """`postmortem.analyze` with a `Thresholds` variant (None: the defaults) on the run, or on its
    already loaded `postmortem.Run` (`loaded`, so that a grid of variants loads it once)."""
    import postmortem

    target = loaded if loaded is not None else run
    analysis = postmortem.analyze(target) if thresholds is None else postmortem.analyze(target, thresholds=thresholds)
    counted = [f for f in analysis.findings if getattr(f, "severity", "error") != "note"]
    if analysis.verdict == "diverged":
        culprits = [r.tensor for r in analysis.ranking]
    else:
        culprits = [t for f in counted for t in f.tensors]
    named: dict[str, list[str]] = {}
    for f in counted:
        named.setdefault(f.label, []).extend(f.tensors)
    return Prediction(
        verdict=analysis.verdict,
        onset=analysis.onset.step if analysis.onset else None,
        culprits=culprits,
        labels={f.label for f in counted},
        named=named,
    )


# ---------------------------------------------------------------- threshold configurations

# The thresholds that decide most verdicts, each scaled one way from its default (so the grid
# follows the defaults when they move); every variant is `dataclasses.replace` of
# `postmortem.detectors.Thresholds()` on one family's frozen dataclass.
VARIANTS: dict[str, tuple[str, dict[str, float]]] = {
    "outcome_strict": ("outcome", {"noise_sigmas": 1.5, "plateau_improvement": 3.0}),
    "outcome_lenient": ("outcome", {"noise_sigmas": 0.5}),
    "recovery_loose": ("outcome", {"recovered_factor": 1.15, "spike_recovered": 0.75}),
    "jumps_sensitive": ("root_causes", {"param_jump_factor": 0.75, "hp_change_factor": 0.75}),
}


def threshold_grid(variants: bool = True) -> dict[str, object]:
    """{name: Thresholds} with the defaults first; only the defaults (as None) when the analyzer
    takes no `thresholds=` or `variants` is False."""
    import inspect
    from dataclasses import replace

    import postmortem

    if not variants or "thresholds" not in inspect.signature(postmortem.analyze).parameters:
        return {DEFAULT: None}
    from postmortem.detectors import Thresholds

    base = Thresholds()
    grid = {DEFAULT: base}
    for name, (family, scales) in VARIANTS.items():
        current = getattr(base, family)
        values = {f: type(getattr(current, f))(getattr(current, f) * k) for f, k in scales.items()}
        grid[name] = replace(base, **{family: replace(current, **values)})
    return grid


def describe(grid: dict[str, object]) -> str:
    """`name (family.field default → value, ...)` for every variant of the grid."""
    if len(grid) == 1:
        return DEFAULT
    base, parts = grid[DEFAULT], [DEFAULT]
    for name, (family, scales) in VARIANTS.items():
        changes = ", ".join(f"{family}.{f} {getattr(getattr(base, family), f):g} → "
                            f"{getattr(getattr(grid[name], family), f):g}" for f in scales)
        parts.append(f"{name} ({changes})")
    return "; ".join(parts)


def first_nonfinite_method(run: Path, data: RunData) -> Prediction:
    step = first_nonfinite_step(data)
    if step is None:
        return Prediction("healthy")
    at = data.stats[(data.stats["step"] == step) & (data.stats["nonfinite"] > 0)]
    at = at.assign(share=at["nonfinite"] / at["numel"].clip(lower=1)).sort_values("share", ascending=False)
    return Prediction("diverged", step, list(dict.fromkeys(at["name"])), {"diverged"})


def _alarm(step: int | None) -> Prediction:
    return Prediction("healthy") if step is None else Prediction("diverged", step, [], {"diverged"})


def _nonfinite_at(series: pd.Series) -> int | None:
    bad = series[~np.isfinite(series.to_numpy(dtype=float))]
    return int(bad.index[0]) if len(bad) else None


def zclip_method(run: Path, data: RunData, *, alpha=0.97, z_threshold=2.5, warmup=25) -> Prediction:
    norms = data.global_grad_norm()
    values = norms.to_numpy(dtype=float)
    nan_at = _nonfinite_at(norms)
    if len(values) <= warmup:
        return _alarm(nan_at)
    mean = float(np.mean(values[:warmup]))
    var = float(np.var(values[:warmup]))
    for step, g in zip(norms.index[warmup:], values[warmup:]):
        if not math.isfinite(g):
            return _alarm(int(step))
        std = math.sqrt(max(var, 1e-24))
        z = (g - mean) / std
        if z > z_threshold:
            return _alarm(int(step))
        mean = alpha * mean + (1 - alpha) * g
        var = alpha * var + (1 - alpha) * (g - mean) ** 2
    return _alarm(None)


def megatron_method(run: Path, data: RunData, *, factor=10.0, window=100) -> Prediction:
    loss = data.loss()
    values = loss.to_numpy(dtype=float)
    for i, (step, value) in enumerate(zip(loss.index, values)):
        if not math.isfinite(value):
            return _alarm(int(step))
        history = values[max(0, i - window) : i]
        if len(history) and value > factor * np.max(history):
            return _alarm(int(step))
    return _alarm(None)


def pelt_method(run: Path, data: RunData) -> Prediction:
    import ruptures as rpt

    norms = data.global_grad_norm()
    values = norms.to_numpy(dtype=float)
    nan_at = _nonfinite_at(norms)
    finite = values[: (list(norms.index).index(nan_at) if nan_at is not None else len(values))]
    signal = np.log10(np.maximum(finite, 1e-30))
    if len(signal) < 6:
        return _alarm(nan_at)
    sigma = np.median(np.abs(np.diff(signal))) / 0.6745 / math.sqrt(2) or 1e-3
    breaks = rpt.Pelt(model="l2", min_size=2, jump=1).fit(signal).predict(pen=3 * sigma**2 * math.log(len(signal)))
    edges = [0, *breaks]
    for k in range(1, len(edges) - 1):
        before = signal[edges[k - 1] : edges[k]].mean()
        after = signal[edges[k] : edges[k + 1]].mean()
        if after - before >= 1.0:
            return _alarm(int(norms.index[edges[k]]))
    return _alarm(nan_at)


def sagemaker_rules(run: Path, data: RunData) -> Prediction:
    """Ports of SageMaker Debugger built-in rules at their documented defaults."""
    stats, labels, culprits = data.stats, set(), []
    # ExplodingTensor (only_nan=False): any NaN/inf in a saved tensor.
    nan_at = first_nonfinite_step(data)
    if nan_at is not None:
        bad = stats[(stats["step"] == nan_at) & (stats["nonfinite"] > 0)]
        labels.add("nonfinite_input" if (bad["role"] == "input").any() else "diverged")
        labels.add("diverged")
        culprits += list(bad["name"])
        return Prediction("diverged", nan_at, culprits, labels)
    grads = stats[stats["role"] == "grad"]
    # AllZero (threshold 100 %) on gradients: every gradient value is zero (or the grad is None).
    dead = grads[(grads["zero_frac"] >= 1.0) | grads["grad_none"].fillna(False).astype(bool)]
    if len(dead):
        labels.add("no_gradient")
        culprits += list(dict.fromkeys(dead["name"]))
    # VanishingGradient (threshold 1e-7 on the mean |grad|): we record the L2 norm, so the RMS
    # norm/sqrt(numel), an upper bound of the mean |grad|, stands in for it.
    live = grads[(grads["zero_frac"] < 1.0) & ~grads["grad_none"].fillna(False).astype(bool)]
    rms = live["norm"] / np.sqrt(live["numel"].clip(lower=1))
    if (rms < 1e-7).any():
        labels.add("vanishing_gradient")
        culprits += list(dict.fromkeys(live.loc[rms < 1e-7, "name"]))
    # WeightUpdateRatio (large_threshold 10, small_threshold 1e-8) on the recorded update/param ratio.
    updates = stats[stats["role"] == "update"].dropna(subset=["ratio"])
    updates = updates[updates["step"] > 0]
    if (updates["ratio"] > 10.0).any():
        labels.add("lr_too_high")
    if (updates["ratio"] < 1e-8).any():
        labels.add("lr_too_low")
    # UnchangedTensor (num_steps 3, rtol 1e-5, atol 1e-8) on parameters: their recorded update norm
    # stays within atol + rtol·|param| for 3 consecutive steps, for every parameter.
    params = stats[stats["role"] == "param"].set_index(["name", "step"])["norm"]
    upd = stats[stats["role"] == "update"].set_index(["name", "step"])["norm"]
    joined = pd.concat([params.rename("param"), upd.rename("update")], axis=1).dropna()
    if len(joined):
        still = (joined["update"] <= 1e-8 + 1e-5 * joined["param"]).groupby(level="step").all()
        if still.rolling(3).sum().max() >= 3:
            labels.add("no_update")
    # DeadRelu (threshold_inactivity 1 %, threshold_layer 50 %): we record the per-step share of
    # exactly-zero outputs, not per-unit activity; >50 % dead units with the rest at a typical 50 %
    # activity give a zero share ≥ 0.75, the proxy used here (mean over the last 10 steps).
    acts = stats[stats["role"] == "activation"]
    last = acts[acts["step"] > acts["step"].max() - 10].groupby("name")["zero_frac"].mean()
    if (last >= 0.75).any():
        labels.add("dead_units")
        culprits += list(last[last >= 0.75].index)
    # SaturatedActivation (threshold_layer 50 %): recorded share of saturated tanh/sigmoid outputs.
    sat = acts.dropna(subset=["sat_frac"])
    if (sat["sat_frac"] > 0.5).any():
        labels.add("saturated_units")
    # CheckInputImages (threshold_mean 0.2, threshold_samples 500): |mean of the inputs| > 0.2.
    inputs = stats[stats["role"] == "input"]
    if len(inputs) and inputs["numel"].sum() >= 500 and abs(np.average(inputs["mean"], weights=inputs["numel"])) > 0.2:
        labels.add("unscaled_inputs")
    # LossNotDecreasing (num_steps 10, diff_percent 0.1 %): every 10 steps the loss must be at
    # least 0.1 % below the loss 10 steps earlier.
    loss = data.loss().to_numpy(dtype=float)
    checks = range(10, len(loss), 10)
    if any(loss[i] > loss[i - 10] * (1 - 0.001) for i in checks):
        labels.add("loss_plateau")
    return Prediction("not_learning" if labels else "healthy", None, culprits, labels)


def _weight_order(run: Path) -> list[str]:
    """Weight parameters (not biases) in model order, from the manifest."""
    manifest = json.loads((run / "manifest.json").read_text())
    several = len(manifest.get("models", {})) > 1
    names = []
    for model, info in manifest.get("models", {}).items():
        for param in info.get("parameters", []):
            if "weight" in param["name"].rsplit(".", 1)[-1]:
                names.append(f"{model}.{param['name']}" if several else param["name"])
    return names


def autotrainer_rules(run: Path, data: RunData) -> Prediction:
    """Ports of AUTOTRAINER's checks (Zhang et al., ICSE 2021; shiningrain/AUTOTRAINER utils/monitor.py)
    at its default parameters: beta_1 1e-3, beta_2 1e-4, beta_3 70, gamma 0.7, Theta 0.7, delta 0.01.

    - explode: NaN/inf in the loss, weights or gradients, or a loss ≥ 1e5.
    - vanish: |grad| of the first weight / |grad| of the last weight < beta_1 and |grad| of the first
      weight < beta_2; explode: that ratio > beta_3; relu: share of exactly-zero gradient values ≥ gamma.
    AUTOTRAINER reports vanish/explode/relu only when training does not converge (accuracy below
    Theta or not improving by delta); we record no accuracy, so "does not converge" is taken as the
    mean of the last 10 losses staying above 30 % of the first 10 (the loss fell by less than 70 %).
    """
    loss = data.loss().to_numpy(dtype=float)
    nan_at = first_nonfinite_step(data)
    big = np.where(np.nan_to_num(loss, nan=0.0) >= 1e5)[0]
    if nan_at is not None or len(big):
        steps = [s for s in (nan_at, int(data.loss().index[big[0]]) if len(big) else None) if s is not None]
        return Prediction("diverged", min(steps), [], {"diverged"})
    if len(loss) < 20 or loss[-10:].mean() <= 0.3 * loss[:10].mean():
        return Prediction("healthy")
    grads = data.stats[data.stats["role"] == "grad"]
    weights = [w for w in _weight_order(run) if w in set(grads["name"])]
    labels = set()
    norms = grads.pivot_table(index="step", columns="name", values="norm")
    weights = [w for w in weights if w in norms.columns]  # pivot_table drops all-NaN columns
    if len(weights) >= 2:
        first, last = norms[weights[0]], norms[weights[-1]]
        ratio = first / last.replace(0.0, np.nan)
        if ((ratio < 1e-3) & (first < 1e-4)).any():
            labels.add("vanishing_gradient")
        if (ratio > 70).any():
            labels.add("exploding_gradient")
    zeros = (grads["zero_frac"].fillna(1.0) * grads["numel"]).groupby(grads["step"]).sum()
    if ((zeros / grads.groupby("step")["numel"].sum()) >= 0.7).any():
        labels.add("dead_units")
    return Prediction("not_learning", None, [], labels or {"loss_plateau"})


METHODS: dict[str, Callable[[Path, RunData], Prediction]] = {
    "postmortem": postmortem_method,
    "first_nonfinite": first_nonfinite_method,
    "zclip": zclip_method,
    "megatron": megatron_method,
    "pelt": pelt_method,
    "sagemaker_rules": sagemaker_rules,
    "autotrainer_rules": autotrainer_rules,
}


# ---------------------------------------------------------------- scoring

def _matches(tensor: str, layers: list[str]) -> bool:
    return any(tensor == layer or tensor.startswith(layer + ".") for layer in layers)


def _labels_ok(expected: dict, pred: Prediction) -> bool:
    found = pred.labels | {pred.verdict}
    if expected["verdict"] == "healthy":
        return pred.verdict == "healthy" and not (found - BENIGN_LABELS - set(expected.get("tolerated", [])))
    return set(expected["labels"]) <= found


@dataclass
class Scored:
    run: str
    family: str
    arch: str
    held_out: bool
    method: str
    truth: str
    verdict: str
    onset_truth: int | None
    onset: int | None
    first_nonfinite: int | None
    culprit: str | None
    top1: bool | None
    top3: bool | None
    labels_ok: bool
    seconds: float
    config: str | None = None
    """The `Thresholds` variant postmortem ran with (None for the baselines)."""
    found: list[str] = field(default_factory=list)
    """The labels the method reported (its verdict aside), sorted: what a comparison of two
    analyzers reads when `labels_ok` alone cannot tell (an extra label on a faulty run)."""


def score(run: Path, expected: dict, method: str, pred: Prediction, nan_at: int | None, seconds: float,
          config: str | None = None) -> Scored:
    layers = [expected["culprit"], *expected.get("culprit_alternatives", [])] if expected["culprit"] else []
    top1 = top3 = None
    if layers:
        # The tensors the expected mechanism's findings name lead (seed 001: log_of_zero names D.sigmoid).
        mechanism = [t for label in expected["labels"] if label != "diverged" for t in pred.named.get(label, [])]
        culprits = list(dict.fromkeys([*mechanism, *pred.culprits]))
        top1 = any(_matches(t, layers) for t in culprits[:1])
        top3 = any(_matches(t, layers) for t in culprits[:3])
    return Scored(run.name, expected["family"], expected["arch"], expected["arch"] in NEVER_SEEN_ARCHS, method, expected["verdict"],
                  pred.verdict, expected["onset_step"], pred.onset, nan_at, expected["culprit"], top1, top3,
                  _labels_ok(expected, pred), seconds, config, sorted(pred.labels))


def _share(values: list[bool]) -> str:
    return f"{sum(values)}/{len(values)} ({100 * sum(values) / len(values):.0f} %)" if values else "—"


def summarize(rows: list[Scored]) -> dict[str, str]:
    diverged = [r for r in rows if r.truth == "diverged"]
    stuck = [r for r in rows if r.truth == "not_learning"]
    healthy = [r for r in rows if r.truth == "healthy"]
    timed = [r for r in diverged if r.onset_truth is not None]
    errors = [abs(r.onset - r.onset_truth) for r in timed if r.verdict == "diverged" and r.onset is not None]
    culprit = [r for r in rows if r.top1 is not None and r.truth != "healthy"]
    leads = [r.first_nonfinite - r.onset for r in diverged
             if r.verdict == "diverged" and r.onset is not None and r.first_nonfinite is not None]
    lead_room = [r.first_nonfinite - r.onset for r in diverged
                 if r.verdict == "diverged" and r.onset is not None and r.first_nonfinite is not None
                 and r.onset_truth is not None and r.first_nonfinite > r.onset_truth]
    return {
        "runs": str(len(rows)),
        "detected (diverged)": _share([r.verdict == "diverged" for r in diverged]),
        "detected (not learning)": _share([r.verdict == "not_learning" for r in stuck]),
        "false alarms (healthy)": _share([r.verdict != "healthy" for r in healthy]),
        "onset ±1": _share([r.verdict == "diverged" and r.onset is not None and abs(r.onset - r.onset_truth) <= 1 for r in timed]),
        "onset ±5": _share([r.verdict == "diverged" and r.onset is not None and abs(r.onset - r.onset_truth) <= 5 for r in timed]),
        "median onset error (steps)": f"{statistics.median(errors):g}" if errors else "—",
        "culprit top-1": _share([bool(r.top1) for r in culprit]),
        "culprit top-3": _share([bool(r.top3) for r in culprit]),
        "labels": _share([r.labels_ok for r in rows]),
        "median lead (steps)": f"{statistics.median(lead_room):g} ({len(lead_room)})" if lead_room else "—",
        "median lead, all": f"{statistics.median(leads):g} ({len(leads)})" if leads else "—",
    }


def table(rows: list[Scored], held_out: bool) -> str:
    subset = [r for r in with_defaults(rows) if r.held_out == held_out]
    header = None
    lines = []
    for method in METHODS:
        summary = summarize([r for r in subset if r.method == method])
        if header is None:
            header = ["method", *summary]
            lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        lines.append("| " + " | ".join([method, *summary.values()]) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------- driver

def generate(runs_dir: Path, subset: str | None) -> tuple[int, float]:
    """Makes every missing run with the sample-run generator (`python -m sample_runs make`);
    returns how many it made and the seconds that took."""
    import warnings

    from sample_runs import make, scenario_names

    made, started = 0, time.perf_counter()
    for name in scenario_names(subset):
        if not (runs_dir / name / "expected.json").exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the recorder warns about the NaN runs, as it should
                make(name, runs_dir / name)
            made += 1
    seconds = time.perf_counter() - started
    if made:  # kept beside the runs, so that a later report (from the cache) still says it
        (runs_dir / GENERATED_FILE).write_text(json.dumps({"runs": made, "seconds": seconds}))
    return made, seconds


def generated(runs_dir: Path) -> tuple[int, float] | None:
    """How many runs the last `--generate` into `runs_dir` made, and in how many seconds."""
    try:
        record = json.loads((runs_dir / GENERATED_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record["runs"], record["seconds"]


class PredictionCache:
    """postmortem's predictions on disk (`RUNS/.postmortem-cache.json`), keyed by the analyzer's
    source, the configuration and the run's files, so that a rerun analyses only what changed."""

    def __init__(self, runs_dir: Path) -> None:
        import hashlib

        self.path = runs_dir / ".postmortem-cache.json"
        source = hashlib.sha256()
        for file in sorted((ROOT / "postmortem").rglob("*.py")):
            source.update(file.read_bytes())
        self.source = source.hexdigest()[:16]
        try:
            self.entries = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = {}

    def key(self, run: Path, config: str, thresholds) -> str:
        stamp = max(f.stat().st_mtime_ns for f in run.rglob("*") if f.is_file())
        return f"{self.source}|{config}|{thresholds!r}|{run.name}|{stamp}"

    def get(self, key: str) -> Prediction | None:
        entry = self.entries.get(key)
        return None if entry is None else Prediction(entry["verdict"], entry["onset"], entry["culprits"],
                                                      set(entry["labels"]), entry["named"])

    def put(self, key: str, pred: Prediction) -> None:
        self.entries[key] = {"verdict": pred.verdict, "onset": pred.onset, "culprits": pred.culprits,
                             "labels": sorted(pred.labels), "named": pred.named}

    def save(self) -> None:
        self.path.write_text(json.dumps(self.entries))


def evaluate(runs_dir: Path, names: list[str] | None = None, grid: dict[str, object] | None = None,
             cache: PredictionCache | None = None) -> list[Scored]:
    """Scores every method on every run; postmortem once per configuration of `grid` (default: the
    defaults only), on the run loaded once (and not at all where `cache` has the prediction). The
    rows are what the per-family choice reads."""
    from postmortem import load_run

    grid = grid if grid is not None else {DEFAULT: None}
    rows = []
    for run in sorted(p for p in runs_dir.iterdir() if (p / "expected.json").exists()):
        if names is not None and run.name not in names:
            continue
        expected = json.loads((run / "expected.json").read_text())
        data = read_run(run)
        nan_at = first_nonfinite_step(data)
        loaded = None
        for method, fn in METHODS.items():
            for config, thresholds in (grid.items() if method == "postmortem" else [(None, None)]):
                started = time.perf_counter()
                if method != "postmortem":
                    pred = fn(run, data)
                else:
                    key = cache.key(run, config, thresholds) if cache else None
                    pred = cache.get(key) if cache else None
                    if pred is None:
                        loaded = loaded or load_run(run)
                        pred = fn(run, data, thresholds, loaded)
                        if cache:
                            cache.put(key, pred)
                rows.append(score(run, expected, method, pred, nan_at, time.perf_counter() - started, config))
    if cache:
        cache.save()
    return rows


def with_defaults(rows: list[Scored]) -> list[Scored]:
    """The baselines and postmortem at its default thresholds."""
    return [r for r in rows if r.config in (None, DEFAULT)]


# ---------------------------------------------------------------- leave one model family out

def objective(rows: list[Scored]) -> float:
    """What a configuration is chosen by: the mean of the shares of verdicts right, onsets ±1,
    culprits top-1, labels right and healthy runs without a false alarm (each over the runs where
    it is defined)."""
    timed = [r for r in rows if r.truth == "diverged" and r.onset_truth is not None]
    named = [r for r in rows if r.top1 is not None and r.truth != "healthy"]
    healthy = [r for r in rows if r.truth == "healthy"]
    shares = [
        [r.verdict == r.truth for r in rows],
        [r.verdict == "diverged" and r.onset is not None and abs(r.onset - r.onset_truth) <= 1 for r in timed],
        [bool(r.top1) for r in named],
        [r.labels_ok for r in rows],
        [r.verdict == "healthy" for r in healthy],
    ]
    shares = [sum(s) / len(s) for s in shares if s]
    return sum(shares) / len(shares) if shares else 0.0


def choose_per_family(rows: list[Scored]) -> dict[str, str]:
    """For each model family (`arch`), the configuration that scores best on every OTHER family's
    runs (ties go to the defaults, then to the grid's order)."""
    mine = [r for r in rows if r.method == "postmortem"]
    configs = list(dict.fromkeys(r.config for r in mine))
    chosen = {}
    for family in sorted({r.arch for r in mine}):
        others = [r for r in mine if r.arch != family]
        chosen[family] = max(configs, key=lambda c: (objective([r for r in others if r.config == c]), -configs.index(c)))
    return chosen


def left_out_rows(rows: list[Scored], chosen: dict[str, str]) -> list[Scored]:
    """postmortem on each run with the configuration chosen without the run's model family."""
    return [r for r in rows if r.method == "postmortem" and r.config == chosen[r.arch]]


def family_table(rows: list[Scored], method: str = "postmortem") -> str:
    """Per scenario family, for one method: where it is right and where it is not."""
    lines = ["| family | runs | truth | verdict right | onset ±1 | culprit top-1 | labels |", "|" + " --- |" * 7]
    mine = [r for r in with_defaults(rows) if r.method == method]
    for family in sorted({r.family for r in mine}):
        group = [r for r in mine if r.family == family]
        truths = "/".join(sorted({r.truth for r in group}))
        timed = [r for r in group if r.truth == "diverged" and r.onset_truth is not None]
        named = [r for r in group if r.top1 is not None and r.truth != "healthy"]
        onset = [r.onset is not None and abs(r.onset - r.onset_truth) <= 1 for r in timed]
        lines.append(f"| {family}{' (never seen)' if group[0].held_out else ''} | {len(group)} | {truths} | "
                     f"{sum(r.verdict == r.truth for r in group)}/{len(group)} | "
                     f"{f'{sum(onset)}/{len(onset)}' if timed else '—'} | "
                     f"{f'{sum(bool(r.top1) for r in named)}/{len(named)}' if named else '—'} | "
                     f"{sum(r.labels_ok for r in group)}/{len(group)} |")
    return "\n".join(lines)


def visible_onset(data: RunData, switch: int, nonfinite: int) -> int | None:
    """Seed 000's onset as a person reads it off the curve (not used for scoring): the step after the
    last one, before the first non-finite value, whose global grad norm was within 10× the median of
    the grad norms since the domain switch."""
    norms = data.global_grad_norm()
    calm = None
    for step, value in norms.items():
        if switch <= step < nonfinite:
            history = norms[(norms.index >= switch) & (norms.index <= step)]
            if value <= 10 * float(np.median(history)):
                calm = int(step)
    return None if calm is None else calm + 1


def seed_000_section(rows: list[Scored], runs_dir: Path) -> str:
    runs = sorted((r for r in with_defaults(rows) if r.family == "cnn_domain_shift" and r.method == "postmortem"),
                  key=lambda r: r.run)
    if not runs:
        return ""
    diverged = [r for r in runs if r.truth == "diverged"]
    lines = [
        f"Seed 000, unscripted (nothing injected; SGD lr 0.05, momentum 0.9, LeakyReLU, domain switch at "
        f"step 120): {len(diverged)} of {len(runs)} seeds diverged on their own after the switch; postmortem "
        f"called {sum(r.verdict == 'diverged' for r in diverged)} of them diverged and "
        f"{sum(r.verdict == 'healthy' for r in runs if r.truth == 'healthy')} of the {len(runs) - len(diverged)} "
        "others healthy. Visible onset: the step after the last one whose global grad norm was within 10× "
        "the median since the switch (read off the data, not used for scoring).", "",
        "| run | first non-finite | visible onset | postmortem onset | postmortem verdict |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        seen = visible_onset(read_run(runs_dir / r.run), 120, r.first_nonfinite) if r.first_nonfinite else None
        lines.append(f"| {r.run} | {r.first_nonfinite if r.first_nonfinite is not None else '—'} | "
                     f"{seen if seen is not None else '—'} | {r.onset if r.onset is not None else '—'} | {r.verdict} |")
    return "\n".join(lines)


NOTES = """Notes on the method rows:
- ZClip, the Megatron-LM spike check and PELT are online guards (clip, skip, segment); used here as
  alarms, any trigger counts as "diverged". ZClip's z > 2.5 fires on ordinary noise of healthy runs.
- sagemaker_rules ports the documented defaults of ExplodingTensor, AllZero, VanishingGradient,
  WeightUpdateRatio, UnchangedTensor, DeadRelu, SaturatedActivation, CheckInputImages and
  LossNotDecreasing; where our statistics differ it uses a stated proxy (see `sagemaker_rules`).
  autotrainer_rules ports AUTOTRAINER's gradient and loss checks; it gates them on "does not
  converge", which it measures with accuracy and we approximate with the loss (see its docstring).
- Onset and culprit are scored only where the injection fixes them; seed-000 runs are unscripted
  and count for detection, false alarms and labels only.
- A fault the run shrugs off is scored as healthy (every LSTM `batch_scale` run recovers); the
  mechanism of such a fault (`tolerated` in expected.json) is not counted against a healthy run.
- Field families (sample_runs/field.py): a fault's truth is judged against the run's fault-free
  twin (same model, seed and batches): diverged when the loss jumps at t0 and ends ≥ 1.25× the
  twin's; not learning when it ends ≥ 1.15× the twin's having gained at most half of what the
  twin gained since t0 (from step 0 for a wrong lr or a loop that never steps). By that yardstick
  `lr_too_high` (×100, no warm-up) is "not learning" although its loss still falls by its own
  yardstick (it ends 1.3–1.6× the twin's); the analyzer, which sees no twin, reads the first
  update against the weights (`lr_too_high` on a finite run, docs/diagnoses.md). A wrong
  setting from step 0 diverged when its loss went non-finite, rose ×1.2 above its first 10 steps'
  mean and never got back below it, or ended (its last 10) ×1.2 worse than learning nothing: the
  same run at lr 0, its first 10 steps (since session 17; a blow-up from step 1 had inflated the
  first-10 mean, round 17's bilstm_crf at lr ×100). A shrugged
  fault tolerates its direct cause (`hyperparameter_changed`, `weights_changed_outside_optimizer`,
  `optimizer_state_changed`, `batch_out_of_range`): the analyzer rightly warns about it.
- A layer cut off from the gradient (`detach`, `frozen_layer`) is not learning only when the run
  then learns less than its fault-free twin (`training.stalled_against`, in both zoos); a run
  whose head still learns on the frozen features is healthy and tolerates `no_gradient`. The
  analyzer, which sees no twin, warns (`no_gradient`, severity warning) when the loss is
  ≥ 1 % lower since the cut (the run learns on) and calls the run not learning otherwise.
- postmortem's findings of severity `note` are not counted (benign on any run)."""


PROTOCOL = """Rounds (the first twenty-six listed here; round 27 on in docs/benchmarks.md's "## Detection
round N: scored once" sections), each: add never-seen model families to the zoo (field fault menu, healthy
variants, truths from fault-free twins), commit them and generate their runs without analysing
them; change detectors by reading the failures of the families already seen; then score once,
the never-seen families' scores being the headline, and change nothing after reading them.

1. Round 1 (issue 12's quality work): new `vit` (a timm-style ViT on digits) and `lstm_lm`
   (pytorch/examples' tied-embedding LSTM LM); detectors changed on every other family (the old
   field families gpt, transformer, resnet, gru and the fault families adam_eps, fp16_overflow,
   label_shuffle thus informed defaults too). Scored once at efa0efd (committed in 4eb8bfe): on
   the 78 never-seen runs verdict right 56/78 (72 %), false alarms 18/45 (40 %: every healthy
   `lstm_lm` run called not learning, `lr_too_low` reading its steady minibatch descent as a
   too-small step), onset ±1 9/13, culprit top-1 9/11, labels 56/78; on the 331 others verdict
   right 324/331 (98 %), false alarms 6/146, onset ±1 85/88, culprit top-1 75/77.
2. Round 2: new `mixer` (an MLP-Mixer on digit patches) and `tcn` (a dilated Conv1d residual net,
   no normalisation); vit and lstm_lm's failures were then read, and one default moved on them
   (`updates.slow_linear_r2` 0.9 → 0.99, docs/diagnoses.md). Scored once in session 5; mixer and
   tcn's failures were read in session 6, so they informed defaults since.
3. Round 3 (session 6): new `llama` (a LLaMA-style LM: RMSNorm, rotary embeddings, SwiGLU, no
   biases, untied head), `autoencoder` (a conv encoder-decoder trained on an MSE reconstruction
   loss, the zoo's first regression) and `recsys` (a DLRM-style click model: embeddings and an
   EmbeddingBag over sparse IDs plus dense features in a dict batch, BCE-with-logits), committed
   and generated before session 6's detector changes were final and analysed only for this
   scoring; detectors changed on every other family. Scored once in session 6 (its headline);
   llama, autoencoder and recsys's failures were read afterwards, so they informed defaults since.
4. Round 4 (session 6, second wave): new `moe` (a Mixtral/Switch-style sparse mixture-of-experts
   character LM: a router Linear, top-2 of 4 expert MLPs, experts that get no token in a step
   left uncalled, a load-balancing auxiliary loss added to the LM loss; the model returns a
   tuple) and `vae` (pytorch/examples' variational autoencoder on the digits: mu and logvar,
   the reparameterisation trick, loss = summed BCE + KL per sample, Adam: AdamW without decay), committed
   and generated before the second wave's detector changes were final and analysed only for this
   scoring; detectors changed on every other family. Scored once at the end of session 6 (its
   headline); moe and vae's misses were read afterwards, so they informed defaults since.
5. Round 5 (session 7): new `unet` (a milesial-style U-Net segmenting generated shapes: BatchNorm
   double convs, max-pool down, `ConvTranspose2d` up, skips by concatenation, per-pixel
   cross-entropy against int64 masks), `seq2seq` (the PyTorch tutorial's `nn.Transformer`
   encoder-decoder sorting token sequences: a dict batch with a padding mask, teacher forcing,
   labels padded with -100, label smoothing), `gnn` (Kipf's GCN written with `index_add_` on a
   stochastic block model: full batch, a train mask, dropout, weight decay) and `simclr` (a
   BatchNorm CNN and a projection head on two augmented views, InfoNCE with temperature 0.2, no
   targets), committed and generated before session 7's detector changes were final and
   analysed only for this scoring; detectors changed on every other family. Scored once in
   session 7 (its headline); unet, seq2seq, gnn and simclr's failures were read in session 7
   (helper 12j), so they informed defaults since.
6. Round 6 (session 7, second wave): new `ddpm` (a DDPM: a GaussianDiffusion wrapper with the
   linear β schedule as buffers around a small GroupNorm/SiLU U-Net denoiser with a sinusoidal
   timestep embedding, predicting the noise of x_t at a random t per sample, MSE, no targets,
   AdamW, clip 1.0, an EMA copy of the weights updated after each optimizer step) and `ctc` (a
   DeepSpeech2-style recogniser of generated audio-like frames: a strided Conv1d front-end with
   BatchNorm and Hardtanh, a 2-layer bidirectional LSTM, log_softmax (T, N, C),
   `nn.CTCLoss(blank=0, zero_infinity=True)` with variable input and target lengths, a dict
   batch with an attention mask, labels padded with -100, Adam), committed and generated before
   the second wave's detector changes were final and analysed only for this scoring; detectors
   changed on every other family. Scored once in session 7 at 0eb5e07 (its headline); ddpm and
   ctc's failures were read in session 8 (helper 12m), so they informed defaults since.
7. Round 7 (session 8): new `mamba` (a selective state-space character LM, mamba-minimal style:
   RMSNorm, in_proj to x and a gate z, a depthwise causal Conv1d, input-dependent Δ, B, C with
   softplus on Δ, A = −exp(A_log), a D skip, a sequential selective scan, y · SiLU(z), out_proj,
   a tied head; AdamW, warm-up + cosine, clip 1.0), `fttransformer` (an FT-Transformer on a
   generated table: per-feature linear tokens of the numeric columns, embeddings of the
   categorical ones, a [CLS] token, pre-norm blocks with a ReGLU feed-forward, a head on [CLS];
   a dict batch of `x_num` and `x_cat`; AdamW with no decay on the tokenizers, norms and biases)
   and `convnext` (a ConvNeXt classifier of generated colour patterns: patchify stem, depthwise
   7×7 conv, channels-last LayerNorm, inverted-bottleneck Linear ×4 with GELU, layer scale,
   stochastic depth, LayerNorm downsampling; AdamW, warm-up + cosine, label smoothing),
   committed and generated in session 8 before its detector changes were final and analysed
   only for this scoring; detectors changed on every other family. Scored once in session 8 at
   0c40f10 (its headline); mamba, fttransformer and convnext's failures were read in session 8
   (lead), so they informed defaults since.
8. Round 8 (session 9): new `bert_mlm` (Hugging Face's `BertForMaskedLM` from a small
   `BertConfig`, no download: masked-LM on word sequences of a generated grammar, a dict batch
   of `input_ids` padded per batch and an `attention_mask`, labels -100 off the masked
   positions, 80/10/10 masking, the decoder tied to the word embeddings; AdamW with no decay on
   LayerNorm and biases, warm-up + cosine, clip 1.0), `siren` (an implicit neural
   representation: sine layers with ω0 = 30 and SIREN's uniform init fitting a generated image
   from its pixel coordinates in [−1, 1]², the whole image per step, MSE, Adam at 1e-4) and
   `pointnet` (a PointNet classifier of generated point clouds: an input T-net initialised to
   the identity, a shared per-point MLP as Conv1d + BatchNorm1d, a symmetric max-pool over
   points, the T-net's orthogonality regulariser added to the cross-entropy, Adam), committed and generated in
   session 9 before its detector changes were final and analysed only for this scoring;
   detectors changed on every other family. Scored once in session 9 at 627b856; bert_mlm,
   siren and pointnet's failures were read in session 9 (lead), so they informed defaults since.
9. Round 9 (session 10), loops we did not write: new `t5` (Hugging Face's
   `T5ForConditionalGeneration` from a small `T5Config`, no download: relative position bias,
   RMS-norm pre-norm blocks, tied head; sorting generated token sequences, rows padded by a
   data collator with labels -100; trained by Hugging Face's `Trainer` with our AdamW and a
   warm-up + cosine `LambdaLR` passed as `optimizers=`, `max_grad_norm` 1.0,
   `gradient_accumulation_steps`, `eval_strategy="steps"`, recorded by our `TrainerCallback`,
   faults injected by a `TrainerCallback` and the data collator), `clip` (a CLIP-style two-tower
   contrastive model on digits and generated captions: conv image tower, Transformer text
   tower, L2-normalised projections, a learnable logit scale clamped to ln 100 after each step,
   symmetric cross-entropy; trained by Lightning with `gradient_clip_val`,
   `accumulate_grad_batches`, `val_check_interval`, a step-interval scheduler, recorded by our
   Lightning callback, faults injected by LightningModule hooks) and `densenet` (DenseNet-BC:
   concatenated features, BN-ReLU-Conv bottlenecks, transitions with compression; SGD with
   Nesterov momentum, weight decay and a ÷10 step schedule, the plain loop), committed and
   generated in session 10 before its detector changes were final and analysed only for this
   scoring; detectors changed on every other family. Scored once in session 10 at 7169af3; t5,
   clip and densenet's failures were read in session 10 (lead), so they informed defaults since.
10. Round 10 (session 11), training code we did not write: new `reinforce` (a REINFORCE agent
   on a CartPole written in numpy: a tanh MLP policy over two actions and a value baseline,
   normalised advantages, an entropy bonus, Adam, `clip_grad_norm_` 0.5; the mean episode
   reward passed to `rec.step()` as `reward`, the truth judged on it rather than on the
   surrogate loss), `wgan_gp` (WGAN-GP on a ring of 8 Gaussians under Lightning's manual
   optimisation: 5 critic steps per generator step, the gradient penalty by
   `torch.autograd.grad(create_graph=True)`, Adam betas (0, 0.9), linear lr decay, recorded by
   our Lightning callback; the truth judged on the samples' sliced Wasserstein distance) and
   `swin` (Hugging Face's `SwinForImageClassification` from a small `SwinConfig`: window
   attention, shifted windows, relative position bias tables, patch merging, stochastic depth;
   the plain loop with mixup/cutmix to label-smoothed soft targets, an EMA copy of the weights,
   AdamW with warm-up + cosine, bf16 autocast), committed in session 11 before its detector
   changes were final (`grad_carried_over`, 12z), generated in session 12 at 9381698 (the first
   attempt stopped at a healthy bf16 WGAN that did not learn; that variant is left out) and
   analysed only for this scoring; detectors changed on every other family. Scored once in
   session 12 at 710c12b; reinforce, wgan_gp and swin's failures were read in session 12 (lead),
   so they informed defaults since.
11. Round 11 (session 12), training code we did not write: new `dqn` (a DQN agent in the PyTorch
   DQN tutorial's style on the numpy CartPole: the tutorial's 128-128 Q-network, a replay
   buffer, ε-greedy exploration with exponential decay, a target network hard-synced every 10
   steps, Huber loss on the TD targets, AdamW with AMSGrad, `clip_grad_value_` 100, 4 updates
   per batch of episodes; the mean episode reward passed to `rec.step()` as `reward`, the truth
   judged on it rather than on the TD loss), `distil` (knowledge distillation, Hinton et
   al. in the PyTorch distillation tutorial's shape: a conv teacher trained in the generator and
   frozen, `requires_grad_(False)` and eval mode, its logits computed on each batch; a lighter
   conv student trained on α·T²·KL(teacher ‖ student at T) + (1 − α)·cross-entropy, T = 2,
   α = 0.5, by the plain loop: AdamW, warm-up + cosine, clip 1.0, `zero_grad(set_to_none=True)`
   after the step, an eval loop logging the distillation loss as `val_loss`) and `byol` (BYOL in
   byol-pytorch's layout: an online BatchNorm CNN encoder, projector and predictor, a target
   network of the encoder and projector updated as an EMA of the online weights after each
   step, not recorded; the symmetric 2 − 2·cos loss between each view's prediction and the
   other view's target projection, two augmented views of each digit, no labels; the plain loop,
   AdamW with warm-up + cosine), committed and generated in session 12 (helper 12u) before
   that session's detector changes were final and analysed only for this scoring; detectors
   changed on every other family. Scored once in session 12 at 101cbed; dqn, distil and byol's
   failures were read in session 12 (lead), so they informed defaults since.
12. Round 12 (session 13), training code we did not write: new `realnvp` (a RealNVP normalizing
   flow in the common PyTorch implementations' shape: 6 affine couplings with alternating
   checkerboard masks, LeakyReLU s- and t-nets on the masked half, s = scale·tanh(·), the running
   log|det| passed along the couplings; Adam, `clip_grad_norm_` 100, on an 8-D density of
   intrinsic dimension 2; the loss is the NLL in nats per dimension, below 0 once it fits, the
   truth judged on the NLL less the data's known entropy), `transe` (TransE in OpenKE's names:
   entity and relation `nn.Embedding`s, L1 distance, the margin ranking loss against one
   corrupted triple per positive, entity rows renormalised to unit norm after each step, plain
   SGD; held-out hits@10 logged as `hits_at_10` with `val_loss`; integer-ID batches only) and
   `kws` (the torchaudio tutorial's M5 keyword spotter on generated 4 kHz waveforms: Conv1d +
   BatchNorm1d + max-pool blocks, a global average pool, `log_softmax` and `nll_loss`; Adam,
   step schedule, fp16 autocast with `torch.amp.GradScaler("cpu")`: `scaler.scale(loss)
   .backward()`, `unscale_`, clip 1.0, `scaler.step`, `scaler.update`, the scaler given to the
   recorder), committed and generated in session 13 (helper 12w) before that session's detector
   changes were final and analysed only for this scoring; detectors changed on every other
   family. Scored once in session 13 at 033fe4c; realnvp, transe and kws's failures were read in
   session 13 (lead), so they informed defaults since.
13. Round 13 (session 13), training code we did not write: new `lora` (LoRA fine-tuning as
   loralib writes it: the GPT's block Linears as `lora.Linear`s, merge off, the frozen base W
   and bias plus trainable `lora_A` (kaiming) and `lora_B` (zeros) scaled by alpha / r,
   `mark_only_lora_as_trainable`: embeddings, norms and the tied head frozen, only the LoRA
   matrices in AdamW; the base pretrained in the generator on the default corpus, loaded with
   `strict=False` and fine-tuned on a shifted one; warm-up + cosine, clip 1.0), `vqvae` (a
   VQ-VAE in zalandoresearch/pytorch-vq-vae's names: conv encoder with a residual stack, the EMA
   quantiser (decay 0.99) whose codebook, a Parameter without gradient, is moved in the training
   forward pass outside the optimizer, commitment 0.25, the straight-through estimator, conv
   decoder; MSE / the data's variance + the VQ loss on generated colour images, Adam 1e-3; the
   held-out codebook perplexity logged as `codebook_perplexity`) and `nbeats` (N-BEATS generic in
   ElementAI's layout: fully connected blocks with backcast/forecast doubly residual links over
   the reversed input, the forecast started at the last observed value; ElementAI's sMAPE with a
   detached denominator, Adam 1e-3, clip 1.0, the lr halved every third of the run, on generated
   seasonal series; the held-out horizon's sMAPE logged as `val_smape`), committed and generated
   in session 13 (helper 12x) before that session's detector changes were final and analysed
   only for this scoring; detectors changed on every other family. Scored once in session 13 at
   bef8d92; lora, vqvae and nbeats's failures were read in session 13 (lead), so they informed
   defaults since.
14. Round 14 (session 14), training code we did not write: new `word2vec` (skip-gram with
   negative sampling as Andras7/word2vec-pytorch writes it: centre and context
   `nn.Embedding(sparse=True)` tables, u·v scores clamped to ±10, −log σ(u·v) − Σ log σ(−u·v_neg)
   with 5 negatives a pair from the unigram^0.75 distribution, `torch.optim.SparseAdam` on the
   sparse gradients, `CosineAnnealingLR`, on a generated topic corpus; gensim-style Spearman ρ
   on planted related word pairs logged as `wordsim_spearman`), `triplet` (metric learning as
   pytorch-metric-learning and FaceNet write it: pml's MNIST example net with L2-normalised
   embeddings, batch-hard mining in P × K batches (8 classes × 4) into
   `nn.TripletMarginLoss(margin=0.2)`, Adam 3e-3, on noisy digits; judged on held-out recall@1,
   `val_recall_at_1`, evaluated every step: the loss sits at the margin a collapsed embedding
   scores) and `sam` (a Wide ResNet trained with Sharpness-Aware Minimization as davda54/sam
   writes it: `SAM(params, SGD, rho=0.05, lr=0.1, momentum=0.9)`, `first_step` moving the
   weights to w + e(w) outside the base step, a second forward/backward, `second_step`
   restoring them and stepping SGD, BatchNorm running stats bypassed on the second pass,
   label smoothing 0.1, the ×0.2 step schedule, on generated colour patterns), committed and
   generated in session 14 (helper 14a) before that session's detector changes were final and
   analysed only for this scoring; detectors changed on every other family. Scored once in
   session 14 at 9f590b3; word2vec, triplet and sam's failures were read in session 14 (lead),
   so they informed defaults since.
15. Round 15 (session 14), training code we did not write: new `ppo` (PPO on CartPole as
   CleanRL's `ppo.py` writes it: separate tanh MLP actor and critic with orthogonal
   `layer_init`, 4 envs × 128-step rollouts with autoreset, GAE(γ 0.99, λ 0.95), 4 epochs of 4
   shuffled minibatches a rollout, each minibatch one optimizer step and one recorded step:
   advantages normalised per minibatch, the clipped surrogate (0.2), the clipped value loss,
   an entropy bonus 0.01, `clip_grad_norm_(0.5)`, Adam (eps 1e-5) at 2.5e-3 annealed linearly
   once a rollout; judged on the episodic return logged as `reward`), `detector` (a one-level
   FCOS detector as torchvision's `FCOSHead` writes it: conv-BN-ReLU backbone of stride 4,
   GroupNorm towers, a 0.01-prior classification bias, ReLU'd ltrb distances; locations inside
   a box positive, the smallest box's; the loss dict `loss_cls` (sigmoid focal loss) +
   `loss_box` (GIoU) over the positives, both logged beside `loss`; SGD momentum 0.9, the
   references' warm-up from 0.001× and ×0.1 steps, on generated images of shapes with boxes;
   the held-out IoU of each object's top-scoring box logged as `val_iou`) and `efficientnet`
   (timm's EfficientNet from B0's block strings, narrow: MBConv blocks with depthwise convs,
   squeeze-excitation, SiLU, BatchNorm and drop-path 0.2, timm's init; RMSprop with timm's
   rmsproptf settings (alpha 0.9, eps 1e-3, momentum 0.9), warm-up then ×0.97 steps, label
   smoothing 0.1, a `ModelEmaV2` (decay 0.999) updated after each step, on generated colour
   patterns; `val_accuracy` every 25 steps), committed and generated in session 14 (helper
   15a) before that session's detector changes were final and analysed only for this scoring;
   detectors changed on every other family. Scored once in session 14 at 8b0533e; ppo,
   detector and efficientnet's failures were read in session 14 (lead), so they informed
   defaults since.
16. Round 16 (session 15), training code we did not write: new `pinn` (a physics-informed
   network as DeepXDE's 1-D Poisson example writes it, Raissi et al.'s PINN: a tanh MLP
   with Glorot-normal weights, the PDE residual −u″ − π² sin(πx) by `torch.autograd.grad` on
   the collocation points with `create_graph=True`, `loss_pde` + `loss_bc` logged beside
   `loss`, collocation points resampled each batch, Adam at 3e-3; judged on the held-out
   `val_l2_relative_error` to the exact solution, every step), `maml` (MAML on Finn et al.'s
   sinusoid regression tasks as tristandeleu/pytorch-maml writes it, `torch.func.functional_call`
   for torchmeta's `params=`: one inner SGD step (0.01) per task with `create_graph=True`
   (second order), the query loss over a meta-batch of 16 tasks, Adam at 3e-3; judged on the
   post-adaptation `val_loss` of fixed held-out tasks, every step) and `pix2pix` (a conditional
   GAN as junyanz/pytorch-CycleGAN-and-pix2pix's `Pix2PixModel` writes it: a U-Net generator, a
   PatchGAN discriminator, normal(0.02) init, the vanilla GAN loss + 100 · L1, `set_requires_grad`
   on the discriminator, two Adams (2e-4, betas (0.5, 0.999)) each stepped every iteration, its
   constant-then-linear schedule, on generated edges → colour-shape pairs; `loss_G_GAN`,
   `loss_G_L1`, `loss_D_real`, `loss_D_fake` logged; judged on the held-out `val_l1_error`,
   every step), committed and generated in session 15 (helper 16a) at 05cf250 and never
   analysed before that scoring; detectors changed on every other family. Scored once in
   session 15 at 04d38c0; pinn, maml and pix2pix's failures were read in session 16 (lead), so
   they informed defaults since.
17. Round 17 (session 16), training code we did not write: new `bilstm_crf` (a named-entity
   tagger as the PyTorch tutorial "Advanced: Making Dynamic Decisions and the Bi-LSTM CRF"
   writes it: an embedding, a bidirectional LSTM whose initial state is drawn from randn at
   every call, emission scores over the tags and START/STOP, a learned transition matrix with
   −10000 into START and out of STOP; the NLL = forward algorithm (log-sum-exp) − gold path
   score, batched and masked over padded sentences; SGD (weight decay 1e-4) at 0.1, on
   sentences of a small grammar whose name words are persons or places by their left context;
   judged on its loss, the held-out entity `val_f1` of its Viterbi paths every 25 steps),
   `pixelcnn` (van den Oord et al.'s PixelCNN as common PyTorch code writes it: a
   `MaskedConv2d` that multiplies its mask into `weight.data` in place at every forward, a 7×7
   type-A conv, residual blocks around 3×3 type-B convs, a 17-way softmax per pixel over the
   digits' grey levels, cross-entropy in nats per dimension, Adam at 1e-3; judged on its loss)
   and `neural_ode` (torchdiffeq's `examples/ode_demo.py`: dy/dt = MLP(y³) fitting the spiral
   from random 10-point windows of its true trajectory, a hand-written fixed-grid RK4 (the 3/8
   rule of torchdiffeq's `rk4`) backpropagated through, L1 loss, RMSprop at 1e-3; judged on its
   loss, the demo's whole-trajectory `val_trajectory_error` every 25 steps), committed and
   generated in session 16 (helper 17a) at 8fa3978 and never analysed before that scoring;
   detectors changed on every other family. Scored once in session 16 at 4e61d3a; bilstm_crf,
   pixelcnn and neural_ode's failures were read in session 16 (lead), so they informed defaults
   since.
18. Round 18 (session 17, helper r18), training code we did not write: new `nerf` (bmild/nerf's
   `tiny_nerf.ipynb`: tiny_nerf's positional encoding (L = 6) of 3-D points, its 8-layer ReLU
   MLP (width 64 where it takes 256) with the encoded input concatenated back after the fifth
   layer, Keras's glorot-uniform weights and zero biases, a Dense of 4 to RGB (sigmoid) and
   density (relu); its `render_rays`: 24 stratified depths between 2 and 6 along each ray,
   α = 1 − exp(−σ · dist), the last bin 1e10 long, weights α · the exclusive cumprod of 1 − α;
   MSE on the rendered colours of one random view's 16 × 16 rays a step, Adam at the notebook's
   5e-4, on ray-cast views of coloured spheres from cameras on a sphere (its `pose_spherical`);
   judged on the held-out view's `val_loss`, every step) and `capsnet` (Sabour et al.'s
   dynamic-routing CapsNet as XifengGuo/CapsNet-Pytorch writes it, narrower: a 9×9 conv, a
   `PrimaryCapsule` 9×9 stride-2 conv viewed as 8-D capsules and squashed, a `DenseCapsule` of
   one 16-D capsule a class with 3 routing iterations (û detached in all but the last), the
   capsules' lengths as class scores; the margin loss + 0.0005 × the summed squared error of a
   decoder's reconstruction from the capsules masked by the true class (the labels given to the
   model's forward in training, the longest capsule's in eval); Adam at 1e-3, on the digits at
   28 × 28; judged on its loss, the held-out `val_accuracy` every 25 steps),
   committed by helper r18 at 0f3420d, generated at ebedfdd (main's from-start truth rule
   merged in) and never analysed before that scoring;
   detectors changed on every other family. Scored once in session 17 at 8fab4b9; nerf and
   capsnet's failures were read in sessions 17-18 (lead), so they informed defaults since.
19. Round 19 (session 18, helper r19), training code we did not write: new `sac` (Soft
   Actor-Critic as pranz24/pytorch-soft-actor-critic writes it, narrower: a `GaussianPolicy`
   (two ReLU layers of 64 where it takes 256, a mean and a log-std head, the log-std clamped to
   [−20, 2], a reparameterised tanh-squashed draw with its log-probability's tanh correction),
   a twin-headed `QNetwork`, a target critic moved by Polyak averaging (τ 0.005, in place,
   outside any optimizer, never recorded), the entropy temperature's `log_alpha` with its own
   Adam towards a target entropy of −2, three Adams at its 3e-4, batch 256 from a replay buffer,
   γ 0.99, one update per env step once the buffer holds a batch, uniformly random actions for the
   first 800 transitions; on 32 points steered to random goals on a plane (numpy, 15-step
   episodes, reward −distance); one recorded step an episode of its envs; judged on the episodes'
   return, pranz24's `reward/train`) and `mae` (He et al.'s masked autoencoder as
   facebookresearch/mae's `models_mae.py` writes it, small: 4 × 4 patches of the 28 × 28 digits,
   per-sample random masking of 75 % by argsort of noise, an encoder of 4 pre-norm blocks (width
   64) over the 12 visible patches and a cls token with fixed 2-D sin-cos positions, a decoder of
   2 blocks (width 32) with a shared mask token, the MSE on the masked patches with
   `norm_pix_loss`; AdamW betas (0.9, 0.95), weight decay 0.05, mae's per-step warm-up from 0 and
   half cosine to 0, at 1.5e-3; judged on its loss, `val_loss` every 25 steps), committed by
   helper r19 at 85fb476, generated at faea6f4 (its from-start runs again at fdb6c79, the
   from-start rule revised on reading the truths) and never analysed before this scoring;
   detectors changed on every other family. Scored once in session 18 at fdb6c79; sac and mae's
   failures were read in session 18 (lead), so they informed defaults since.
20. Round 20 (session 19, helper r20), training code we did not write: new `rwkv` (an RWKV-v4
   language model as BlinkDL/RWKV-LM's v4neo writes it, small: width 32, 2 layers; the token
   embedding and `ln0`, blocks of a time mix (a zero-padded time shift, `time_mix_k/v/r`
   interpolation, key, value and a sigmoid receptance, the WKV recurrence with `time_decay` and
   `time_first`, one step per token in plain PyTorch with the CUDA kernel's running maximum) and
   a channel mix (squared ReLU through a 4× value, a sigmoid receptance), `ln_out`, an untied
   head; its `generate_init_weight` (zero key, receptance and output matrices, the embedding
   uniform in ±lr_init, orthogonal gains) and its `time_*` init; the cross-entropy through
   `L2Wrap`; Adam (0.9, 0.99), eps 1e-8, no weight decay, its `layerwise_lr` groups (`time_decay`
   ×2, `time_first` ×3), a warm-up from 0.2× over 10 steps then exponential decay to 1/60, clip
   1.0, lr_init 3e-3; on the zoo's character corpus, 32 tokens, batch 16; judged on its loss,
   `val_loss` every 25 steps), committed by helper r20 at f937f51, generated at 2eff855, and new `tabnet` (TabNet as
   dreamquark-ai/tabnet's `tab_network.py` writes it, at pytorch-tabnet's default widths: n_d =
   n_a = 8, 3 decision steps, γ 1.3, 2 shared and 2 step-specific GLU layers behind ghost batch
   norm (momentum 0.02, virtual batch 32 at batch 256), an initial batch norm, attentive
   transformers drawing prior-scaled sparsemax masks, the prior × (γ − M), the steps' ReLU'd
   outputs summed into a bias-free Linear; categorical columns embedded in one number each; the
   cross-entropy plus 1e-3 × the masks' mean entropy; Adam at its 2e-2, clip_value 1, StepLR ×0.9
   every 15 steps; on the zoo's table, as the FT-Transformer; judged on its loss, `val_loss`
   every 25 steps), committed by helper r20b at 7e75f5c (sparsemax's NaN row fixed at 5ebb495),
   generated at 5ebb495; both never analysed before this
   scoring; detectors changed on every other family. A third family, `dino`, was
   left out: in 150 steps on the digits it collapsed under every setting tried (branch
   r20-dino). Scored once in session 19 at b756b18; rwkv and tabnet's failures were read in
   session 19 (lead), so they informed defaults since.
21. Round 21 (session 20, helpers r21a and r21b), training code we did not write: new `perceiver`
   (the Perceiver as lucidrains/perceiver-pytorch writes it, small: 16 × 32 learned latents
   cross-attending, one head of 64, to the 8 × 8 digits as 64 pixels with 2-D Fourier position
   features concatenated; PreNorm with the context's own LayerNorm, bias-free `to_q`/`to_kv`,
   GEGLU feed-forwards, two latent self-attention blocks per cross-attention, depth 2, dropout
   0.1, a mean-pooled LayerNorm → Linear head; its `train_cifar10.py` recipe: AdamW with weight
   decay 1e-4 on every parameter, `OneCycleLR` with its cycled β1, clip 1.0, batch 128, max_lr
   3e-3; judged on its loss, `val_loss` every 25 steps), committed by helper r21a at ec79536 and
   generated there, and new `wavenet` (WaveNet as vincentherrmann/pytorch-wavenet writes it, with
   golbin/WaveNet's causal input conv: one-hot mu-law audio of 64 levels, 2 stacks × 5 dilated
   causal layers (dilations 1–16) with separate filter and gate convs and the tanh · sigmoid gate,
   1×1 residual and skip convs, the skip sum → ReLU → 1×1 → ReLU → 1×1 → logits; its
   `WavenetTrainer` recipe: Adam at 1e-3, no weight decay, no clipping, no schedule, batch 16
   windows; on generated sums of sines, cross-entropy on the next sample, `val_loss` every 25
   steps), committed by helper r21b at 2d95790 and generated there; both never analysed before
   that scoring; detectors changed on every other family. Scored once in session 20 at e977226;
   perceiver and wavenet's failures were read in session 20 (lead), so they informed defaults
   since.
22. Round 22 (session 20, helpers r22a and r22b), training code we did not write: new
   `set_transformer` (the Set Transformer as juho-lee/set_transformer's `modules.py` and
   `models.py` write it, small: MAB with its batch-wise head split and O + relu(fc_o(O)), two
   ISABs of 16 inducing points, PMA with one seed, two SABs, a Linear; its `max_regression_demo`:
   the max of a set of 1–10 integers in 1–99, L1 loss, Adam at 1e-4, no clipping, no schedule,
   batch 256; judged on its loss, `val_loss` on two fixed held-out batches), committed by helper
   r22a at 71b8f6b and generated there, and new `conformer` (a Conformer encoder as
   sooftware/conformer writes it, with its README's CTC head, small: two stride-2 3×3 conv
   subsampling layers, 2 blocks of d 32 of half-step feed-forwards with Swish, self-attention
   with Transformer-XL relative positions and learned u/v biases, the conv module (pointwise →
   GLU, a depthwise conv of kernel 15, BatchNorm, Swish, pointwise), a final LayerNorm; CTC
   loss with blank 0; the paper's Adam (0.9, 0.98), eps 1e-9, L2 1e-6 and transformer warm-up
   schedule to 0.05/√d, openspeech's clip 5.0, batch 32; on the zoo's CTC utterances at 40 bands;
   judged on its loss, `val_loss` every 25 steps), committed by helper r22b at 41c4f22 and
   generated there; both never analysed before that scoring; detectors changed on every other
   family. Scored once in session 20 at 780c2a4; set_transformer and conformer's failures were
   read in session 20 (lead), so they informed defaults since.
23. Round 23 (session 20, helpers r23a and r23b), training code we did not write: new `gat` (the
   graph attention network as Diego999/pyGAT writes it: dense attention layers, e_ij =
   LeakyReLU(aᵀ[Wh_i ‖ Wh_j]) masked to the adjacency, 8 heads of 8 concatenated with ELU, one
   output head, log_softmax; its `train.py` recipe: Adam at 5e-3, L2 5e-4 on every parameter,
   NLL on the training nodes, full batch, dropout 0.3 where it takes 0.6 (at 0.6 it stays at
   chance here); on the GCN's generated graph; judged on its loss), committed and generated by
   helper r23a at 825e77b, and new `neural_process` (a Conditional Neural Process as
   deepmind/neural-processes' notebook writes it: an MLP encoder over context (x, y) pairs,
   mean-aggregated, an MLP decoder over (r, x) to μ and σ = 0.1 + 0.9 softplus; the Gaussian NLL
   of the targets; Adam at 1e-3, ten times its lr; on generated GP curves with random kernel
   parameters; judged on its held-out NLL less an oracle GP's floor, `OUTCOME_METRICS`;
   `healthy_spike` left out), committed and generated by helper r23b at c9974ba; both never
   analysed before that scoring; detectors changed on every other family. Scored once in
   session 20 at 338f2d1; gat and neural_process's failures were read in session 20 (lead), so
   they informed defaults since.
24. Round 24 (session 20, helpers r24a and r24b), training code we did not write: new `kan`
   (a Kolmogorov–Arnold Network as Blealtan/efficient-kan writes it: layers of a SiLU base branch plus cubic B-spline bases on a uniform extended grid by the Cox–de Boor recursion times scaled spline weights, [64, 32, 10] on the flattened digits; its MNIST example's AdamW with decay 1e-4 on every parameter and ×0.8 an epoch, at 3e-3 (its 1e-3 leaves lr ×100 the best run); judged on its loss), committed and generated by helper r24a at ce0daad, and new `hypernetwork` (Ha, Dai and Le's static hypernetwork as g1910/HyperNetworks writes it: one shared hypernetwork maps each block's learned embedding z through w2/b2 and w1/b1 to that block's 3×3 kernel every forward, a BatchNorm'd stem, three residual blocks with generated kernels, a Linear head; its train.py's Adam at 2e-3 with L2 5e-4; judged on its loss), committed and
   generated by helper r24b at 7ef65e7; both never analysed before that scoring; detectors changed
   on every other family. Scored once in session 20 at 0b0a3c5; kan and hypernetwork's failures
   were read in sessions 20 and 22 (lead), so they informed defaults since.
25. Round 25 (session 23, helper r25a), training code we did not write: new `dit` (a Diffusion
   Transformer as facebookresearch/DiT writes it: patchified 8×8 digits as 1-channel latents,
   fixed 2-D sin-cos positions, timestep and label embedders (a null class for classifier-free
   guidance), blocks with adaLN-Zero modulation and a zero-initialised final layer; its train.py's
   AdamW without weight decay on the noise-prediction MSE over 1000 linear-beta timesteps, an EMA
   copy the recorder does not see, at 1e-3 (its 1e-4 leaves lr ×100 the best run); judged on its
   loss), committed and generated by helper r25a at 1269b7b; never analysed before that scoring;
   detectors changed on every other family. Its sister family (`sae`, helper r25b) was not
   delivered in time. Scored once in session 23 at 6926bf2; dit's failures were read in session
   23 (lead), so it informed defaults since.
26. Round 26 (session 23, helper r26a), training code we did not write: new `sae` (a sparse
   autoencoder as openai/sparse_autoencoder's model.py and loss.py write one, ReLU variant:
   a pre-encoder bias subtracted before the encoder and added after the decoder, ReLU latents,
   a tied-init decoder whose columns are renormalised to unit norm outside the optimizer every
   step and whose gradient loses its component along them before each step, normalised MSE +
   1e-2 normalised L1, its train.py's Adam with eps 6.25e-10 at a constant 1e-3 (its 1e-4 leaves
   lr ×100 the best run); on toy-model superposition activations; no labels, so no
   `healthy_spike`; judged on its loss), committed and generated by helper r26a at 5fc52fc;
   never analysed before this scoring; detectors changed on every other family. A second sae
   (openai's TopK variant under fp16, helper r25b) was written too and is not in the zoo: one
   round, one family. This table is round 26's single scoring.
27. Lead time: "median lead (steps)" counts runs whose first non-finite value comes after the
   truth's onset (a NaN batch, or a run that overflows on the injection step, has no lead to
   give; the old all-runs median, "median lead, all", counted those as 0); `(n)` is how many runs
   it is over."""


HEADLINE_COLUMNS = ("runs", "verdict right", "false alarms (healthy)", "onset ±1", "culprit top-1", "culprit top-3",
                    "labels", "median lead (steps)", "median lead, all")


def _headline_row(name: str, rows: list[Scored], config: str = "") -> str:
    summary = {**summarize(rows), "verdict right": _share([r.verdict == r.truth for r in rows])}
    return "| " + " | ".join([name, *([config] if config else []), *(summary[c] for c in HEADLINE_COLUMNS)]) + " |"


def left_out_section(rows: list[Scored], grid_text: str = "") -> str:
    """The headline: postmortem on the runs not used for choosing defaults, each model family scored
    with the configuration chosen on the other families; then every family the same way."""
    chosen = choose_per_family(rows)
    left = left_out_rows(rows, chosen)
    defaults = [r for r in rows if r.method == "postmortem" and r.config == DEFAULT]
    configs = list(dict.fromkeys(r.config for r in rows if r.method == "postmortem"))
    held = [r for r in left if r.held_out]
    seen = [r for r in left if not r.held_out]
    informed = "; ".join(f"{families} ({why})" for families, why in INFORMED_DEFAULTS.items())
    lines = [
        f"Configurations ({len(configs)}): {grid_text or ', '.join(configs)}"
        + ("" if len(configs) > 1 else " (one configuration only)")
        + ". Each variant changes one family of `postmortem.detectors.Thresholds` (`VARIANTS` in the script). "
        "Every run is analysed once per configuration; for each model family (`arch`) the configuration "
        "with the best mean of verdict, onset ±1, culprit top-1, labels and no-false-alarm shares on all "
        "OTHER families is chosen and that family is scored with it.", "",
        f"Families that informed the defaults (`INFORMED_DEFAULTS`): {informed}. Never seen: "
        f"{', '.join(NEVER_SEEN_ARCHS)} (`NEVER_SEEN_ARCHS`), added to the zoo before the detectors' last "
        "changes and not analysed until they were final: the **headline** is the score on them. "
        "Leave-one-family-out guards the grid's choice only; a family that informed a default is "
        "not held out by it (docs/diagnoses.md says, per threshold, which families informed it).", "",
        "| runs (left-out choice) | " + " | ".join(HEADLINE_COLUMNS) + " |",
        "|" + " --- |" * (len(HEADLINE_COLUMNS) + 1),
        _headline_row(f"**never seen ({', '.join(NEVER_SEEN_ARCHS)}; {len({r.run for r in held})} runs)**", held),
        _headline_row("never seen, defaults", [r for r in defaults if r.held_out]),
        _headline_row(f"families that informed defaults ({len({r.run for r in seen})} runs)", seen), "",
        "Per model family, each with the configuration chosen without it:", "",
        "| family | configuration | " + " | ".join(HEADLINE_COLUMNS) + " |",
        "|" + " --- |" * (len(HEADLINE_COLUMNS) + 2),
    ]
    for arch in sorted(chosen):
        name = arch + (" (never seen)" if arch in NEVER_SEEN_ARCHS else "")
        lines.append(_headline_row(name, [r for r in left if r.arch == arch], chosen[arch]))
    mine = [r for r in rows if r.method == "postmortem"]
    lines += ["", "Each configuration's objective (what the choice maximises), for reference:", "",
              "| configuration | families that informed defaults | never seen |", "| --- | --- | --- |"]
    for config in configs:
        of = [r for r in mine if r.config == config]
        lines.append(f"| {config} | {objective([r for r in of if not r.held_out]):.3f} | "
                     f"{objective([r for r in of if r.held_out]):.3f} |")
    return "\n".join(lines)


def report(rows: list[Scored], command: str, runs_dir: Path, generated: tuple[int, float] | None = None,
           grid_text: str = "") -> str:
    plain = with_defaults(rows)
    tuned = [r for r in plain if not r.held_out]
    held = [r for r in plain if r.held_out]
    made = (f" Generating {generated[0]} of them (`--generate`, one process) took {generated[1] / 60:.1f} min on "
            "this machine (2 cores shared with other jobs)." if generated else "")
    return "\n".join([
        SECTION, "",
        f"Measured with `{command}` on {len({r.run for r in plain})} recorded runs "
        f"({len({r.run for r in tuned})} of families that informed defaults, {len({r.run for r in held})} never seen)."
        f"{made} Ground truth: `expected.json` from the injection "
        "(see benchmarks/detection.py for every method and how each column is scored). "
        "Methods that only watch for divergence cannot say \"not learning\" and score 0 there by design.", "",
        "### Protocol", "",
        PROTOCOL, "",
        "### Leave one model family out", "",
        left_out_section(rows, grid_text), "",
        "### Baselines and postmortem at its defaults", "",
        "Families that informed defaults:", "", table(rows, held_out=False), "",
        f"Never seen ({', '.join(NEVER_SEEN_ARCHS)}):", "",
        table(rows, held_out=True), "",
        NOTES, "",
        seed_000_section(rows, runs_dir), "",
        "postmortem per scenario family:", "", family_table(rows), "",
    ])


def write_section(text: str, path: Path = DOCS) -> None:
    """Replaces only the `## Detection` section of docs/benchmarks.md (other sections are not ours)."""
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = old.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        new = old.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "\n".join([*lines[:start], *text.rstrip("\n").splitlines(), "", *lines[end:]]).rstrip("\n") + "\n"
    path.write_text(new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "all", help="folder of run directories")
    parser.add_argument("--generate", action="store_true", help="make missing runs first")
    parser.add_argument("--subset", choices=["small"], help="only seed 0 of every family (for CI)")
    parser.add_argument("--json", type=Path, help="write every per-run score here")
    parser.add_argument("--write-docs", action="store_true", help=f"replace the '{SECTION}' section of {DOCS}")
    parser.add_argument("--defaults-only", action="store_true",
                        help="analyse with the default thresholds only (no grid, no left-out choice)")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    if args.generate:
        generate(args.runs, args.subset)
    names = None
    if args.subset:
        from sample_runs import scenario_names

        names = set(scenario_names(args.subset))
    grid = threshold_grid(not args.defaults_only)
    rows = evaluate(args.runs, names, grid, PredictionCache(args.runs))
    if not rows:
        print(f"error: no run with expected.json under {args.runs}", file=sys.stderr)
        return 2
    command = (f"python benchmarks/detection.py --runs {args.runs}" + (" --generate" if args.generate else "")
               + (f" --subset {args.subset}" if args.subset else "") + (" --write-docs" if args.write_docs else ""))
    text = report(rows, command, args.runs, generated(args.runs), describe(grid))
    print(text)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    if args.write_docs:
        write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
