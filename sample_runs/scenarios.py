"""The catalogue of sample runs: seed cases, injected faults and healthy runs, each with its ground truth.

Every scenario is deterministic in its seed: the same name always trains the same model on the same
batches and writes the same `expected.json`. Injection steps t0 and target layers are drawn per
(family, arch, seed) so that nothing can be tuned to one step number or one layer.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import faults
from .data import (
    Dataset,
    batch_sampler,
    digits,
    domain_b,
    gan_real_points,
    linear_data,
    time_on_page_data,
)
from .expected import EXPECTED_FILE, Expected, write_expected
from .field import FIELD_ARCHS, field_families, field_run
from .models import CNN, DeepMLP, Discriminator, Generator, LinearRegressor, build_classifier, weight_layers
from .training import STEPS_AFTER_NONFINITE, broke_after, first_nonfinite, stalled_against, train

__all__ = [
    "COMMITTED_SAMPLES",
    "HELD_OUT_ARCHS",
    "HELD_OUT_FAMILIES",
    "SCENARIOS",
    "SAMPLES_DIR",
    "Scenario",
    "ScenarioError",
    "get",
    "make",
    "make_committed_samples",
    "scenario_names",
]

SEEDS = (0, 1, 2)
ARCHS = ("mlp", "cnn", "lstm")
HELD_OUT_FAMILIES = ("adam_eps", "fp16_overflow", "label_shuffle")
HELD_OUT_ARCHS = FIELD_ARCHS
"""The field-like architectures (`field.py`) are held out whole: no analyzer default was chosen on them."""


class ScenarioError(RuntimeError):
    """A scenario did not produce the failure it was built to produce: its ground truth would be wrong."""


@dataclass(frozen=True)
class Scenario:
    name: str
    family: str
    arch: str
    seed: int
    held_out: bool
    small: bool
    """Part of `--subset small` (seed 0 of every family)."""
    run: Callable[[Path, "Scenario", dict], Expected]
    """Trains into a run directory with the given extra Recorder options; returns the truth."""


# ---------------------------------------------------------------- injected faults and healthy runs

@dataclass(frozen=True)
class ArchSettings:
    layout: str
    lr: float
    batch: int
    steps: int


ZOO = {
    "mlp": ArchSettings(layout="flat", lr=0.05, batch=32, steps=150),
    "cnn": ArchSettings(layout="image", lr=0.05, batch=32, steps=150),
    "lstm": ArchSettings(layout="rows", lr=0.5, batch=32, steps=150),
}
T0_RANGE = (40, 100)


def _layer_groups(model: nn.Module, lr: float) -> list[dict]:
    """One SGD param group per layer, tagged with its layer name, so one layer's lr can be changed."""
    groups = []
    for layer in weight_layers(model):
        params = list(model.get_submodule(layer).parameters(recurse=False))
        groups.append({"params": params, "lr": lr, "layer": layer})
    return groups


def _truth(scenario: Scenario, **fields) -> Expected:
    return Expected(
        scenario=scenario.name, family=scenario.family, arch=scenario.arch,
        seed=scenario.seed, held_out=scenario.held_out, **fields,
    )


def _require(condition: bool, scenario: Scenario, what: str) -> None:
    if not condition:
        raise ScenarioError(f"{scenario.name}: {what}")


def _zoo_train(run_dir: Path | None, family: str, arch: str, seed: int, recorder_options: dict):
    """Trains one zoo scenario (unrecorded when `run_dir` is None); returns (losses' outcome,
    t0, the fault's layer or None, the model's weight layers)."""
    settings = ZOO[arch]
    rng = random.Random(f"{family}/{arch}/{seed}")
    t0 = rng.randint(*T0_RANGE)
    torch.manual_seed(seed)
    model = build_classifier(arch)
    layers = weight_layers(model)
    layer = rng.choice(layers)
    linear_layers = [n for n in layers if isinstance(model.get_submodule(n), nn.Linear)]
    batch = settings.batch
    lr_at = None
    if family in ("adam_eps", "healthy_warmup"):
        # float16 Adam needs an eps float16 can hold (1e-8 rounds to 0 there): see faults.AdamEps.
        eps = 1e-4 if family == "adam_eps" else 1e-8
        optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, eps=eps)
        if family == "healthy_warmup":
            warmup = rng.randint(20, 60)
            lr_at = lambda step: 3e-3 * min(1.0, (step + 1) / warmup)  # noqa: E731
    else:
        lr = settings.lr / 5 if family == "healthy_small_batch" else settings.lr
        optimizer = torch.optim.SGD(_layer_groups(model, lr), lr=lr, momentum=0.9)
    if family == "healthy_small_batch":
        batch = 4

    spec = _FAMILIES[family]
    fault = spec.fault(
        t0=t0, layer=layer, inner_layer=rng.choice(layers[:-1]), linear_layer=rng.choice(linear_layers), seed=seed
    )
    culprit = getattr(fault, "layer", None) or None
    draw = batch_sampler(digits(settings.layout), batch, seed)
    # What a user would log; never the scenario or the fault (the analyzer must not see the answer).
    config = {"arch": arch, "seed": seed, "batch_size": batch, "steps": settings.steps}
    outcome = train(run_dir, model, optimizer, draw, steps=settings.steps, fault=fault, lr_at=lr_at, config=config,
                    recorder_options=recorder_options)
    return outcome, t0, culprit, layers


def _zoo_run(run_dir: Path, scenario: Scenario, recorder_options: dict) -> Expected:
    arch, family, seed = scenario.arch, scenario.family, scenario.seed
    spec = _FAMILIES[family]
    outcome, t0, culprit, layers = _zoo_train(run_dir, family, arch, seed, recorder_options)
    nan_at = outcome.first_nonfinite_loss_step
    verdict = spec.verdict
    recovered = False
    _require(nan_at is None or nan_at >= t0, scenario, f"loss non-finite at {nan_at}, before the fault at {t0}")
    if verdict == "diverged":
        # A fault that the run shrugs off is a recovered spike, not a divergence: say so, honestly.
        recovered = not broke_after(outcome.losses, t0, chance=math.log(10))
        verdict = "healthy" if recovered else "diverged"
    elif verdict == "diverged_or_not_learning":
        verdict = "diverged" if broke_after(outcome.losses, t0, chance=math.log(10)) else "not_learning"
    elif verdict == "stalled":
        # A layer cut off from the gradient: not learning only if the run then learns less than
        # its fault-free twin (same model, seed, batches) would have, as the field zoo judges it.
        _require(nan_at is None, scenario, f"designed not to diverge, loss non-finite at step {nan_at}")
        twin = _zoo_train(None, "healthy", arch, seed, {})[0].losses
        recovered = not stalled_against(outcome.losses, twin, t0)
        verdict = "healthy" if recovered else "not_learning"
    else:
        _require(nan_at is None, scenario, f"designed not to diverge, loss non-finite at step {nan_at}")
    labels = [] if recovered else list(spec.labels)
    if verdict == "diverged" and "diverged" not in labels:
        labels.insert(0, "diverged")
    alternatives = []
    if family == "detach" and not recovered:
        alternatives = [n for n in layers[: layers.index(culprit)]]
    return _truth(
        scenario,
        verdict=verdict,
        onset_step=t0 if spec.has_onset and not recovered else None,
        culprit=culprit if spec.has_culprit and not recovered else None,
        culprit_alternatives=alternatives,
        labels=labels,
        tolerated=[label for label in spec.labels if label != "diverged"] if recovered else [],
        first_nonfinite_loss_step=nan_at,
        notes=spec.notes.format(t0=t0, layer=culprit) + (
            "" if not recovered else "; the run recovered on its own" if spec.verdict == "diverged" else
            "; the run learned as well as its fault-free twin: the truth says healthy"),
    )


@dataclass(frozen=True)
class FamilySpec:
    fault: Callable[..., faults.Fault]
    verdict: str
    labels: tuple[str, ...] = ()
    has_onset: bool = True
    has_culprit: bool = False
    notes: str = ""


def _spec(fault_cls, **fault_kwargs):
    """Binds a fault class to the per-run draws it needs (t0, a layer, a non-output layer, a Linear layer, seed)."""

    def build(*, t0, layer, inner_layer, linear_layer, seed):
        kwargs = dict(fault_kwargs)
        fields = fault_cls.__dataclass_fields__
        if "layer" in fields:
            # A detach() on the output layer would cut the whole graph; fp16 casting needs a Linear.
            kwargs["layer"] = {faults.Fp16Overflow: linear_layer, faults.DetachedLayer: inner_layer}.get(
                fault_cls, layer
            )
        if "seed" in fields:
            kwargs["seed"] = seed
        return fault_cls(t0=t0, **kwargs)

    return build


_FAMILIES: dict[str, FamilySpec] = {
    "lr_spike": FamilySpec(
        _spec(faults.LrSpike, factor=300.0), "diverged", ("diverged", "lr_too_high"), has_culprit=True,
        notes="lr of the param group of {layer} multiplied by 300 at step {t0}"),
    "weight_scale": FamilySpec(
        _spec(faults.WeightScale, factor=30.0), "diverged", ("diverged",), has_culprit=True,
        notes="weights of {layer} multiplied by 30 at step {t0}"),
    "batch_scale": FamilySpec(
        _spec(faults.BatchScale, factor=1e3), "diverged", ("diverged",),
        notes="batch at step {t0} multiplied by 1e3"),
    "batch_nan": FamilySpec(
        _spec(faults.BatchNaN), "diverged", ("diverged", "nonfinite_input"),
        notes="batch at step {t0} carries NaN"),
    "missing_zero_grad": FamilySpec(
        _spec(faults.MissingZeroGrad), "diverged_or_not_learning", ("stale_gradients",),
        notes="optimizer.zero_grad() no longer called from step {t0}"),
    "frozen_layer": FamilySpec(
        _spec(faults.FrozenLayer), "stalled", ("no_gradient",), has_culprit=True,
        notes="{layer} frozen (requires_grad=False) at step {t0}"),
    "detach": FamilySpec(
        _spec(faults.DetachedLayer), "stalled", ("no_gradient",), has_culprit=True,
        notes="output of {layer} detached from step {t0}: it and every layer before it get no gradient"),
    "adam_eps": FamilySpec(
        _spec(faults.AdamEps), "diverged", ("diverged",),
        notes="float16 Adam: eps 1e-4 set to 1e-15 (0 in float16) at step {t0}"),
    "fp16_overflow": FamilySpec(
        _spec(faults.Fp16Overflow), "diverged", ("diverged",), has_culprit=True,
        notes="{layer} in float16 with static loss scale 2**20 and no GradScaler from step {t0}"),
    "label_shuffle": FamilySpec(
        _spec(faults.LabelShuffle), "not_learning", ("loss_plateau",),
        notes="labels permuted within each batch from step {t0}"),
    "healthy": FamilySpec(_spec(faults.Fault), "healthy", has_onset=False),
    "healthy_small_batch": FamilySpec(
        _spec(faults.Fault), "healthy", has_onset=False, notes="batch size 4, lr / 5: noisy but learning"),
    "healthy_warmup": FamilySpec(
        _spec(faults.Fault), "healthy", has_onset=False, notes="Adam with a linear lr warm-up"),
    "healthy_spike": FamilySpec(
        _spec(faults.MislabeledBatch), "healthy", has_onset=False,
        notes="two mislabeled batches from step {t0}: a loss spike that recovers on its own"),
}


# ---------------------------------------------------------------- seed 000: the CNN after a domain switch

DOMAIN_A_STEPS = 120
DOMAIN_B_STEPS = 80


def _domain_shift_run(run_dir: Path, scenario: Scenario, recorder_options: dict) -> Expected:
    """Seed 000, unscripted: nothing is injected; whether a seed diverges is up to the training itself.

    Seed 000's CNN (two conv layers with LeakyReLU, ~0.42 M parameters), SGD lr 0.05 momentum 0.9,
    unnormalised [0, 1] inputs. Domain A: digits upsampled to 28×28 (the first 900 of a seeded
    permutation). Domain B: the other 897 digits rotated 90°, shifted 4 px and inverted, so the
    background jumps from 0 to 1. The verdict is what the loop saw: diverged iff the loss became
    non-finite. The onset is not known in advance, so it is left empty.
    """
    seed = scenario.seed
    torch.manual_seed(seed)
    model = CNN(channels=(32, 64), hidden=128)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = digits("image")
    perm = torch.randperm(len(images.x), generator=torch.Generator().manual_seed(seed))
    domain_a = Dataset(images.x[perm[:900]], images.y[perm[:900]])
    domain_b_data = Dataset(domain_b(images.x[perm[900:]]), images.y[perm[900:]])
    draw_a = batch_sampler(domain_a, 32, seed)
    draw_b = batch_sampler(domain_b_data, 32, seed + 100)

    def draw():
        nonlocal step
        step += 1
        return draw_a() if step <= DOMAIN_A_STEPS else draw_b()

    step = 0
    events = {DOMAIN_A_STEPS: ("domain_switch", "now training on domain B (rotated 90°, shifted, inverted)")}
    config = {"seed": seed, "lr": 0.05, "momentum": 0.9, "batch_size": 32,
              "domain_a_steps": DOMAIN_A_STEPS, "domain_b_steps": DOMAIN_B_STEPS}
    outcome = train(run_dir, model, optimizer, draw, steps=DOMAIN_A_STEPS + DOMAIN_B_STEPS,
                    events=events, config=config, recorder_options=recorder_options)
    nan_at = outcome.first_nonfinite_loss_step
    diverged = nan_at is not None
    return _truth(
        scenario,
        verdict="diverged" if diverged else "healthy",
        labels=["diverged"] if diverged else [],
        first_nonfinite_loss_step=nan_at,
        notes=f"unscripted; domain switch at step {DOMAIN_A_STEPS}",
    )


# ---------------------------------------------------------------- seed 001: GAN with log(0)

GAN_STEPS = 160
GAN_BATCH = 64


def _hand_written_bce(p: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Seed 001's bug: BCE on probabilities by hand; log(0) once the sigmoid saturates to exactly 0 or 1."""
    return -(target * torch.log(p) + (1 - target) * torch.log(1 - p)).mean()


GAN_INIT_DEPTH = 6
GAN_BAD_INIT_STD = 0.01
"""As seed 003's deep MLP: the signal shrinks ~×0.05 per layer. With SGD the generator's gradients
stay ~0; Adam's per-element step size would wake it up within ~100 steps (measured), so the
init families train both networks with SGD (lr 0.01, momentum 0.9)."""


def _at_bounds(p: torch.Tensor) -> bool:
    return bool(((p == 0) | (p == 1)).any())


def _gan_run(run_dir: Path, scenario: Scenario, recorder_options: dict) -> Expected:
    """Seed 001: a small GAN on a ring of 8 Gaussians of radius 30 (unnormalised), Adam lr 1e-3.

    `gan_log0`: the discriminator ends in a Sigmoid and the loss is a hand-written BCE: its logits
    grow until the sigmoid rounds to exactly 0 or 1 and log(0) = -inf makes the losses non-finite.
    `gan_healthy`: the same run with BCEWithLogitsLoss and gradient clipping at norm 1 (seed's fix).
    Seed 003's GAN: `gan_bad_init` has a deep generator (6 Linear + LeakyReLU(0.2) blocks) whose
    weights are N(0, GAN_BAD_INIT_STD²): activations shrink to ~0 layer by layer, its gradients
    vanish and it never spreads its samples out; `gan_kaiming` is the same run with the seed's
    fix, `kaiming_normal_(a=0.2, nonlinearity="leaky_relu")`. Both use the healthy loss and clipping,
    and SGD (see GAN_BAD_INIT_STD).
    """
    from recorders import Recorder

    family = scenario.family
    buggy = family == "gan_log0"
    deep = family in ("gan_bad_init", "gan_kaiming")
    seed = scenario.seed
    torch.manual_seed(seed)
    if deep:
        gen = DeepMLP(depth=GAN_INIT_DEPTH, width=64, activation=lambda: nn.LeakyReLU(0.2), features=8, outputs=2)
        with torch.no_grad():
            for i in range(GAN_INIT_DEPTH):
                layer = getattr(gen, f"fc{i}")
                if family == "gan_bad_init":
                    nn.init.normal_(layer.weight, 0.0, GAN_BAD_INIT_STD)
                else:
                    nn.init.kaiming_normal_(layer.weight, a=0.2, nonlinearity="leaky_relu")
                nn.init.zeros_(layer.bias)
    else:
        gen = Generator()
    disc = Discriminator(probabilities=buggy)
    if deep:
        opt_g = torch.optim.SGD(gen.parameters(), lr=0.01, momentum=0.9)
        opt_d = torch.optim.SGD(disc.parameters(), lr=0.01, momentum=0.9)
    else:
        opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3, betas=(0.5, 0.999))
    loss_fn = _hand_written_bce if buggy else F.binary_cross_entropy_with_logits
    real = gan_real_points(GAN_BATCH * GAN_STEPS, seed, scale=30.0)
    noise = torch.Generator().manual_seed(seed + 1)
    ones, zeros = torch.ones(GAN_BATCH, 1), torch.zeros(GAN_BATCH, 1)
    losses: list[float] = []
    bounds_at = None  # first step a sigmoid output of D was exactly 0 or 1 (what log(0) needs)
    config = {"seed": seed, "lr": 0.01 if deep else 1e-3, "batch_size": GAN_BATCH, "data_radius": 30.0}
    with Recorder(run_dir, {"G": gen, "D": disc}, {"opt_G": opt_g, "opt_D": opt_d},
                  config=config, overwrite=True, **recorder_options) as rec:
        for step in range(GAN_STEPS):
            x = real[step * GAN_BATCH : (step + 1) * GAN_BATCH]
            z = torch.randn(GAN_BATCH, 8, generator=noise)
            opt_d.zero_grad()
            fake = gen(z)
            real_out, fake_out = disc(x), disc(fake.detach())
            if buggy and bounds_at is None and (_at_bounds(real_out) or _at_bounds(fake_out)):
                bounds_at = step
            loss_d = loss_fn(real_out, ones) + loss_fn(fake_out, zeros)
            loss_d.backward()
            if not buggy:
                nn.utils.clip_grad_norm_(disc.parameters(), 1.0)
            opt_d.step()
            opt_g.zero_grad()
            loss_g = loss_fn(disc(fake), ones)
            loss_g.backward()
            if not buggy:
                nn.utils.clip_grad_norm_(gen.parameters(), 1.0)
            opt_g.step()
            rec.step(loss_d=loss_d, loss_g=loss_g, inputs=x)
            losses.append(loss_d.item() + loss_g.item())
            nan_at = first_nonfinite(losses)
            if nan_at is not None and step >= nan_at + STEPS_AFTER_NONFINITE - 1:
                break
    with torch.no_grad():  # after the recorded run: how far the generator spreads its samples
        spread = float(gen(torch.randn(512, 8, generator=noise)).std(dim=0).mean()) / float(real.std(dim=0).mean())
    nan_at = first_nonfinite(losses)
    _require((nan_at is not None) == buggy, scenario, f"log(0) run must reach NaN and its twin must not (NaN at {nan_at})")
    if buggy:
        _require(bounds_at is not None and bounds_at <= nan_at, scenario,
                 f"D.sigmoid must reach exactly 0/1 by the first non-finite loss ({bounds_at}, {nan_at})")
        return _truth(scenario, verdict="diverged", labels=["diverged", "log_of_zero"], culprit="D.sigmoid",
                      first_nonfinite_loss_step=nan_at,
                      notes=f"sigmoid + hand-written BCE: D.sigmoid's outputs exactly 0/1 from step {bounds_at}, "
                            f"log(0) makes the loss non-finite at step {nan_at}")
    if deep:
        # Outcome from the samples: a generator that learned spreads them out like the data.
        learned = spread > 0.1  # measured: bad init 0.000, Kaiming 0.28-0.78
        _require(learned == (family == "gan_kaiming"), scenario, f"sample spread / data spread = {spread:.3f}")
        if family == "gan_bad_init":
            layers = [f"G.fc{i}" for i in range(GAN_INIT_DEPTH)]
            return _truth(scenario, verdict="not_learning", labels=["vanishing_gradient"],
                          culprit=layers[0], culprit_alternatives=layers[1:],
                          notes=f"G's weights N(0, {GAN_BAD_INIT_STD:g}^2) in {GAN_INIT_DEPTH} LeakyReLU(0.2) layers: samples "
                                f"spread {spread:.3f} of the data's; fix kaiming_normal_(a=0.2)")
    return _truth(scenario, verdict="healthy", first_nonfinite_loss_step=nan_at,
                  notes=("kaiming_normal_(a=0.2): seed 003's fix" if deep else "BCEWithLogitsLoss + clip_grad_norm_(1.0)")
                  + f"; samples spread {spread:.3f} of the data's")


# ---------------------------------------------------------------- seed 002: Linear(1, 1) learning y = 2x

@dataclass(frozen=True)
class LinearCase:
    lr: float
    verdict: str
    labels: tuple[str, ...]
    take_step: bool = True
    unscaled: bool = False
    onset_step: int | None = None
    culprit: str | None = None
    notes: str = ""


LINEAR_CASES = {
    "linear_lr_0.001": LinearCase(0.001, "not_learning", ("lr_too_low",), notes="seed 002's lr 0.001: flat"),
    "linear_no_step": LinearCase(0.1, "not_learning", ("no_update",), take_step=False,
                                 notes="the loop forgets optimizer.step()"),
    "linear_lr_10": LinearCase(10.0, "diverged", ("diverged", "lr_too_high"), onset_step=0, culprit="fc",
                               notes="lr 10: every step overshoots, NaN"),
    "linear_lr_1e-7": LinearCase(1e-7, "not_learning", ("lr_too_low",), notes="lr 1e-7: flat"),
    "linear_unscaled": LinearCase(1e-7, "not_learning", ("unscaled_inputs",), unscaled=True,
                                  notes="time on page in raw seconds (0-3600) beside a [0, 1] feature; "
                                        "1e-7 is about the largest lr that does not diverge"),
    "linear_overfit_batch": LinearCase(0.1, "healthy", (), notes="overfit one batch of 5 rows, lr 0.1"),
}
LINEAR_STEPS = 100


def _linear_run(run_dir: Path, scenario: Scenario, recorder_options: dict) -> Expected:
    """Seed 002: the BookSight stand-in trained on one fixed batch of 5 rows for 100 iterations."""
    case = LINEAR_CASES[scenario.family]
    seed = scenario.seed
    torch.manual_seed(seed)
    data = time_on_page_data(5, seed) if case.unscaled else linear_data(5, seed)
    model = LinearRegressor(features=data.x.shape[1])
    optimizer = torch.optim.SGD(model.parameters(), lr=case.lr)
    config = {"seed": seed, "lr": case.lr}
    outcome = train(run_dir, model, optimizer, lambda: (data.x, data.y), steps=LINEAR_STEPS,
                    loss_fn=F.mse_loss, take_step=case.take_step, config=config,
                    recorder_options=recorder_options)
    nan_at = outcome.first_nonfinite_loss_step
    _require((nan_at is not None) == (case.verdict == "diverged"), scenario, f"loss non-finite at {nan_at}")
    return _truth(scenario, verdict=case.verdict, labels=list(case.labels), onset_step=case.onset_step,
                  culprit=case.culprit, first_nonfinite_loss_step=nan_at, notes=case.notes)


# ---------------------------------------------------------------- seed 003: deep nets that do not learn

DEEP_STEPS = 150


def _deep_run(run_dir: Path, scenario: Scenario, recorder_options: dict) -> Expected:
    """Seed 003: an 8-block LeakyReLU(0.2) MLP on digits, SGD lr 0.01 momentum 0.9.

    `deep_vanishing`: weights N(0, 0.01²): the signal shrinks ×0.08 per layer, gradients vanish.
    `deep_kaiming`: the same net with the seed's fix, kaiming_normal_(a=0.2).
    `deep_dead_relu`: ReLU blocks, Kaiming weights, every hidden bias set to -4: all units dead.
    """
    family, seed = scenario.family, scenario.seed
    torch.manual_seed(seed)
    activation = nn.ReLU if family == "deep_dead_relu" else (lambda: nn.LeakyReLU(0.2))
    model = DeepMLP(depth=8, width=64, activation=activation)
    with torch.no_grad():
        for i in range(model.depth):
            layer = getattr(model, f"fc{i}")
            if family == "deep_vanishing":
                nn.init.normal_(layer.weight, 0.0, 0.01)
            else:
                nn.init.kaiming_normal_(layer.weight, a=0.2 if family == "deep_kaiming" else 0.0)
            nn.init.constant_(layer.bias, -4.0 if family == "deep_dead_relu" else 0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    draw = batch_sampler(digits("flat"), 32, seed)
    outcome = train(run_dir, model, optimizer, draw, steps=DEEP_STEPS,
                    config={"seed": seed, "depth": 8, "lr": 0.01}, recorder_options=recorder_options)
    losses = outcome.losses
    _require(outcome.first_nonfinite_loss_step is None, scenario, "unexpected non-finite loss")
    learned = sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    _require(learned == (family == "deep_kaiming"), scenario, f"learned={learned}")
    truth = {
        "deep_vanishing": ("not_learning", ["vanishing_gradient"], "weights N(0, 0.01^2) in 8 layers"),
        "deep_kaiming": ("healthy", [], "kaiming_normal_(a=0.2): the seed's fix"),
        "deep_dead_relu": ("not_learning", ["dead_units"], "hidden biases -4: every ReLU dead"),
    }
    verdict, labels, notes = truth[family]
    return _truth(scenario, verdict=verdict, labels=labels, notes=notes)


# ---------------------------------------------------------------- field-like models and loops (field.py)

def _field_scenario(run_dir: Path, scenario: Scenario, recorder_options: dict) -> Expected:
    truth = field_run(run_dir, scenario.family, scenario.arch, scenario.seed, recorder_options)
    _require(truth.pop("learned") or not scenario.family.startswith("healthy"), scenario,
             "a healthy run must learn (its last 10 losses below 80 % of its first 10)")
    _require(truth["first_nonfinite_loss_step"] is None or truth["verdict"] == "diverged", scenario,
             f"loss non-finite at step {truth['first_nonfinite_loss_step']} in a run whose truth is {truth['verdict']}")
    return _truth(scenario, **truth)


# ---------------------------------------------------------------- the catalogue

def _catalogue() -> list[Scenario]:
    scenarios = []
    for family in _FAMILIES:
        for arch in ARCHS:
            for seed in SEEDS:
                scenarios.append(Scenario(f"{family}-{arch}-s{seed}", family, arch, seed,
                                          family in HELD_OUT_FAMILIES, seed == 0, _zoo_run))
    for family, arch in field_families():
        for seed in SEEDS:
            scenarios.append(Scenario(f"{family}-{arch}-s{seed}", family, arch, seed, True, seed == 0,
                                      _field_scenario))
    for seed in range(10):
        scenarios.append(Scenario(f"cnn_domain_shift-s{seed}", "cnn_domain_shift", "cnn", seed, False,
                                  seed == 0, _domain_shift_run))
    for family in ("gan_log0", "gan_healthy", "gan_bad_init", "gan_kaiming"):
        for seed in SEEDS:
            scenarios.append(Scenario(f"{family}-s{seed}", family, "gan", seed, False, seed == 0, _gan_run))
    for family in LINEAR_CASES:
        for seed in SEEDS:
            scenarios.append(Scenario(f"{family}-s{seed}", family, "linear", seed, False, seed == 0, _linear_run))
    for family in ("deep_vanishing", "deep_kaiming", "deep_dead_relu"):
        for seed in SEEDS:
            scenarios.append(Scenario(f"{family}-s{seed}", family, "deep_mlp", seed, False, seed == 0, _deep_run))
    return scenarios


SCENARIOS: dict[str, Scenario] = {s.name: s for s in _catalogue()}


def scenario_names(subset: str | None = None) -> list[str]:
    if subset not in (None, "small"):
        raise ValueError(f"unknown subset {subset!r} (known: small)")
    return [name for name, s in SCENARIOS.items() if subset is None or s.small]


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; `python -m sample_runs list` shows them") from None


def make(name: str, run_dir: Path, recorder_options: dict | None = None) -> Expected:
    """Trains scenario `name` with the recorder into `run_dir` and writes `expected.json` beside the run.

    `recorder_options` (Recorder keywords such as `checkpoint_every`) change what is stored, never
    the training, so the truth is the same whatever they are.
    """
    scenario = get(name)
    torch.set_num_threads(1)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / EXPECTED_FILE).unlink(missing_ok=True)  # never leave an old truth beside a new run
    expected = scenario.run(run_dir, scenario, recorder_options or {})
    write_expected(run_dir, expected)
    return expected


# ---------------------------------------------------------------- the runs committed in sample_runs/

SAMPLES_DIR = Path(__file__).resolve().parent
COMMITTED_SAMPLES = {
    "cnn_domain_shift": "cnn_domain_shift-s0",  # seed 000 diverging on its own: `make demo`
    "gan_log0": "gan_log0-s0",
    "linear_no_step": "linear_no_step-s0",
    "mlp_healthy": "healthy-mlp-s0",
}
# Full checkpoints of the 0.42 M-parameter CNN (parameters + momentum) cost ~3.4 MB each; the
# committed copies keep statistics, scalars and events only, so the repository stays small.
COMMITTED_RECORDER_OPTIONS = {"checkpoint_every": 0, "flight_ring": 0}


def make_committed_samples(folder: Path = SAMPLES_DIR) -> dict[str, Expected]:
    """Regenerates the runs committed in `sample_runs/<name>/` (deterministic: same truth, same statistics)."""
    return {
        name: make(scenario, Path(folder) / name, COMMITTED_RECORDER_OPTIONS)
        for name, scenario in COMMITTED_SAMPLES.items()
    }
