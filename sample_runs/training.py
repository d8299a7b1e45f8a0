"""Training loops shared by the scenarios, each recorded with `recorders.Recorder`."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .faults import Fault, Optimizers

__all__ = ["Outcome", "TrainingDiverged", "train", "train_field", "train_sam", "train_ppo", "train_pix2pix", "train_sngan", "train_muon_gpt", "train_sac", "ContinuousReplayBuffer", "train_policy_gradient", "train_dqn", "ReplayBuffer", "first_nonfinite", "broke_after", "broke_against",
           "stalled_against", "token_cross_entropy"]

STEPS_AFTER_NONFINITE = 3


class TrainingDiverged(FloatingPointError):
    """Raised by a loop after a few non-finite losses, as a user's NaN check would."""


@dataclass
class Outcome:
    losses: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    """Per-step metrics the loop measured beside its loss (an agent's reward), step by step."""

    @property
    def first_nonfinite_loss_step(self) -> int | None:
        return first_nonfinite(self.losses)

    def log(self, step: int, loss: float, **metrics: float) -> None:
        """Keeps the step's loss and metrics; raises TrainingDiverged a few steps after the first
        non-finite loss."""
        self.losses.append(loss)
        for name, value in metrics.items():
            self.metrics.setdefault(name, []).append(value)
        nan_at = self.first_nonfinite_loss_step
        if nan_at is not None and step >= nan_at + STEPS_AFTER_NONFINITE - 1:
            raise TrainingDiverged(f"loss is {loss} at step {step}")


def first_nonfinite(values: list[float]) -> int | None:
    return next((i for i, v in enumerate(values) if not math.isfinite(v)), None)


def broke_after(losses: list[float], t0: int, *, chance: float) -> bool:
    """Whether training broke at t0 rather than shrugging the fault off.

    Broken: a non-finite loss from t0 on, or a loss spike of at least ×3 over the mean of the 10
    steps before t0 (within 10 steps of t0) after which the run does not recover: the mean of its
    last 10 losses stays ≥ 1.5× the pre-t0 mean or ≥ 90 % of the chance-level loss `chance`.
    """
    after = losses[t0:]
    if any(not math.isfinite(v) for v in after):
        return True
    before = sum(losses[t0 - 10 : t0]) / 10
    last = sum(losses[-10:]) / 10
    return max(after[:10]) >= 3 * before and (last >= 1.5 * before or last >= 0.9 * chance)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def broke_against(losses: list[float], twin: list[float], t0: int) -> bool:
    """Whether a fault at t0 broke training, judged against its fault-free twin (same model, seed,
    batches): a non-finite loss from t0 on, or a jump (a loss within 10 steps of t0 ≥ 1.2× the mean
    of the 10 before) after which the run ends ≥ 1.25× the twin's final loss (means of the last 10).
    For losses bounded near chance (an LM's ln(vocab)) a ×3 spike is impossible; this is the test."""
    if any(not math.isfinite(v) for v in losses[t0:]):
        return True
    jumped = max(losses[t0 : t0 + 10]) >= 1.2 * _mean(losses[max(0, t0 - 10) : max(t0, 1)])
    return jumped and _mean(losses[-10:]) >= 1.25 * _mean(twin[-10:])


def stalled_against(losses: list[float], twin: list[float], t0: int) -> bool:
    """Whether training stopped learning from t0, against its fault-free twin: it ends ≥ 1.15× the
    twin's final loss and improved since t0 by at most half of what the twin improved since t0."""
    if any(not math.isfinite(v) for v in losses):
        return False
    window = slice(max(0, t0 - 10), max(t0, 10))
    gained = _mean(losses[window]) - _mean(losses[-10:])
    twin_gained = _mean(twin[window]) - _mean(twin[-10:])
    return _mean(losses[-10:]) >= 1.15 * _mean(twin[-10:]) and gained <= 0.5 * twin_gained


def train(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    fault: Fault | None = None,
    lr_at: Callable[[int], float] | None = None,
    events: dict[int, tuple[str, str]] | None = None,
    take_step: bool = True,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """A plain supervised loop; `fault` decides what goes wrong and when.

    `lr_at(step)` sets every group's lr (warm-up); `events[step]` is recorded with `rec.event` just
    before that step; `take_step=False` is seed 002's loop that forgot `optimizer.step()`.
    The loop stops, like a user's NaN check, a few steps after the loss first becomes non-finite.
    `run_dir=None` trains without recording (the losses only: a fault-free twin).
    """
    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    params = [p for p in model.parameters()]
    try:
        with _recorder(run_dir, model, optimizer, config, recorder_options) as rec:
            for step in range(steps):
                if events and step in events:
                    rec.event(*events[step])
                fault.before_step(step, model, optimizer)
                if lr_at is not None:
                    for group in optimizer.param_groups:
                        group["lr"] = lr_at(step)
                x, y = fault.batch(step, *draw())
                if fault.zero_grad(step):
                    optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                scale = fault.loss_scale(step)
                (loss * scale).backward()
                if scale != 1.0:
                    for p in params:
                        if p.grad is not None:
                            p.grad.div_(scale)
                if take_step and fault.take_step(step):
                    optimizer.step()
                rec.step(loss=loss, inputs=x, targets=y)
                outcome.log(step, loss.item())
    except TrainingDiverged:
        pass
    return outcome


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over class indices; an LM's (B, T, V) logits are flattened for next-token targets."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten())


def _float32(output):
    """The model's output in float32; a tuple (logits and an auxiliary loss, a VAE's reconstruction
    logits, mu and logvar) element by element, integer elements (a CTC model's lengths) as they are;
    a dict (torchvision's segmentation models' {"out", "aux"}) value by value, a list (DETR's
    `aux_outputs`) element by element."""
    if isinstance(output, dict):
        return {key: _float32(value) for key, value in output.items()}
    if isinstance(output, list):  # DETR's `aux_outputs`: one dict a decoder layer
        return [_float32(value) for value in output]
    if isinstance(output, tuple):
        return tuple(o.float() if o.is_floating_point() else o for o in output)
    return output.float()


def _recorder(run_dir: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer, config: dict | None,
              recorder_options: dict | None, scaler: torch.amp.GradScaler | None = None):
    """The loop's `Recorder` (given the loop's GradScaler, if any), or `_Unrecorded` where
    `run_dir` is None (a fault-free twin)."""
    from recorders import Recorder

    if run_dir is None:
        return _Unrecorded()
    return Recorder(run_dir, model, optimizer, scaler=scaler, config=config or {}, overwrite=True,
                    **(recorder_options or {}))


class _Unrecorded:
    """Stands in for the Recorder where a loop runs only for its losses (a fault-free twin)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def step(self, **_):
        pass

    def event(self, *_):
        pass


def train_field(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    fault: Fault | None = None,
    accumulation: int = 1,
    clip: float | None = None,
    bf16: bool = False,
    eval_draw: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
    eval_every: int = 25,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = token_cross_entropy,
    config: dict | None = None,
    recorder_options: dict | None = None,
    after_step: Callable[[], None] | None = None,
    mix: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    teacher: nn.Module | None = None,
    scaler: torch.amp.GradScaler | None = None,
    eval_metrics: Callable[[], dict[str, float]] | None = None,
    labels_to_model: bool = False,
    before_step: Callable[[int], None] | None = None,
    before_eval: Callable[[int], None] | None = None,
    eval_start: int = 0,
) -> Outcome:
    """nanoGPT's loop: schedule → `accumulation` micro-batches of forward/backward (loss / accum),
    clip → `optimizer.step()` → `zero_grad(set_to_none=True)` → `rec.step`, an eval loop every
    `eval_every` steps (eval mode, no_grad) whose loss is recorded as `val_loss`.

    `lr_at(step)` is the schedule's factor on each group's `base_lr`; `bf16` runs forward and
    loss under CPU bf16 autocast. `loss_fn(output, targets)` gets the model's output in float32,
    a tuple output element by element (default: cross-entropy over class indices,
    `token_cross_entropy`; a regression's MSE, a click model's BCE-with-logits). The recorded `loss` is the step's mean micro-batch loss
    (unscaled), as nanoGPT logs it.
    `after_step()` runs right after each `optimizer.step()` (an EMA update of the weights).
    `mix(x, y)` runs on each training micro-batch after the fault's `batch` (timm's mixup/cutmix:
    the data was bad before the loop mixed it).
    `teacher` (knowledge distillation, as Hugging Face's distillation trainers compute it in
    `compute_loss`): a frozen model run without gradient on each micro-batch the student sees
    (the same bad batch, if one comes), its float32 logits passed as `loss_fn(output, targets,
    teacher_logits)`; the eval loop's `val_loss` is then the distillation loss on held-out batches.
    `scaler` (torch.amp's fp16 recipe): forward and loss under CPU float16 autocast,
    `scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)` before clipping,
    `scaler.step(optimizer)` (which skips a step whose gradients are not finite) and
    `scaler.update()`; the recorder is given the scaler. `eval_metrics()` runs beside the eval
    loop and its metrics are recorded with `val_loss` (a ranking model's hits@10), and kept in the
    outcome at every step they are measured (a family judged on a held-out metric evaluates every
    step: `eval_every=1`). A `loss_fn` may return torchvision's loss dict (a detector's
    `loss_cls` and `loss_box`): the loss is its sum, each part recorded beside it, averaged over
    the micro-batches. `labels_to_model`: the training forward is `model(x, y)` (a CapsNet's
    decoder masked by the true class, as XifengGuo/CapsNet-Pytorch's `model(x, y)`), so a batch
    with wrong labels reaches the model too; the eval loop's forward gets no labels (its `test`).
    `before_step(step)` runs at the top of each step, after the schedule set the lr and before the
    fault's `before_step`, whether or not the step will call `optimizer.step()` (a pruning
    scheduler's event: `torch.nn.utils.prune` called by the loop, not by the optimizer).
    `before_eval(step)` runs at the top of each step, before its eval loop (what a loop does at an
    epoch's boundary: train_quantization.py's `disable_observer` and `freeze_bn_stats`).
    `eval_start`: the first step whose top runs the eval loop (a loop that evaluates after each
    epoch, never before training: train_quantization.py's, whose eval-mode forwards move its observers).
    `run_dir=None` trains without recording (the losses only).
    """
    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()

    def loss_of(x: torch.Tensor, y: torch.Tensor, labelled: bool = labels_to_model) -> torch.Tensor:
        fp16 = scaler is not None
        with torch.autocast("cpu", dtype=torch.float16 if fp16 else torch.bfloat16, enabled=bf16 or fp16):
            inputs = (x, y) if labelled else (x,)
            if teacher is None:
                return loss_fn(_float32(model(*inputs)), y)
            with torch.no_grad():
                taught = teacher(x).float()
            return loss_fn(_float32(model(*inputs)), y, taught)

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            value = sum(_summed(loss_of(*eval_draw(), labelled=False))[0].item() for _ in range(2)) / 2
        model.train()
        return value

    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, optimizer, config, recorder_options, scaler) as rec:
            for step in range(steps):
                if before_eval is not None:
                    before_eval(step)
                extra = {"val_loss": evaluate()} if eval_draw is not None and step % eval_every == 0 \
                    and step >= eval_start else {}
                if extra and eval_metrics is not None:
                    extra.update(eval_metrics())
                for group in optimizer.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                if before_step is not None:
                    before_step(step)
                fault.before_step(step, model, optimizer)
                total, parts = 0.0, {}
                for _ in range(accumulation):
                    x, y = fault.batch(step, *draw())
                    if mix is not None:
                        x, y = mix(x, y)
                    loss, named = _summed(loss_of(x, y))
                    (loss / accumulation if scaler is None else scaler.scale(loss / accumulation)).backward()
                    total += loss.item() / accumulation
                    for name, value in named.items():
                        parts[name] = parts.get(name, 0.0) + value.item() / accumulation
                if scaler is not None:
                    scaler.unscale_(optimizer)
                if clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
                if fault.take_step(step):
                    if scaler is None:
                        optimizer.step()
                    else:
                        scaler.step(optimizer)
                    if after_step is not None:
                        after_step()
                if scaler is not None:
                    scaler.update()
                if fault.zero_grad(step):
                    optimizer.zero_grad(set_to_none=True)
                rec.step(loss=total, inputs=x, targets=y, **parts, **extra)
                outcome.log(step, total, **extra)
    except TrainingDiverged:
        pass
    return outcome


def _summed(loss: torch.Tensor | dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A loss, or torchvision's loss dict summed (the detection references' `sum(loss_dict.values())`)
    with its parts, which the loop logs beside the loss as the references' `MetricLogger` does."""
    if isinstance(loss, dict):
        return sum(loss.values()), loss
    return loss, {}


def train_sam(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    fault: Fault | None = None,
    accumulation: int = 1,
    bf16: bool = False,
    eval_draw: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None,
    eval_every: int = 25,
    config: dict | None = None,
    recorder_options: dict | None = None,
    eval_metrics: Callable[[], dict[str, float]] | None = None,
) -> Outcome:
    """davda54/sam's `example/train.py` step with its `SAM` optimizer: `enable_running_stats`,
    forward/backward at w, `optimizer.first_step(zero_grad=True)` (the weights moved to
    w + e(w) outside any optimizer step), `disable_running_stats` (BatchNorm's running stats
    left as the first pass set them), forward/backward at w + e(w) on the same batch,
    `optimizer.second_step(zero_grad=True)` (back to w, then the base optimizer's step), then
    `rec.step` with the first pass's loss, as the repository logs it. With `accumulation`, each
    pass runs over the same `accumulation` micro-batches (each loss / accumulation). A fault's
    `zero_grad(step)` False is a loop that calls both steps without `zero_grad=True` (their
    default). `lr_at` is the schedule's factor on each group's `base_lr` (the repository's
    `StepLR` sets each group's lr once per epoch); an eval loop every `eval_every` steps records
    `val_loss` and `eval_metrics()`; `bf16` runs both passes under CPU bf16 autocast."""
    from .field_models import disable_running_stats, enable_running_stats

    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return loss_fn(model(x).float(), y)

    def evaluate() -> dict[str, float]:
        model.eval()
        with torch.no_grad():
            values = {"val_loss": sum(loss_of(*eval_draw()).item() for _ in range(2)) / 2}
        model.train()
        return {**values, **(eval_metrics() if eval_metrics is not None else {})}

    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, optimizer, config, recorder_options) as rec:
            for step in range(steps):
                extra = evaluate() if eval_draw is not None and step % eval_every == 0 else {}
                for group in optimizer.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, optimizer)
                batches = [fault.batch(step, *draw()) for _ in range(accumulation)]
                enable_running_stats(model)
                total = 0.0
                for x, y in batches:
                    loss = loss_of(x, y)
                    (loss / accumulation).backward()
                    total += loss.item() / accumulation
                optimizer.first_step(zero_grad=fault.zero_grad(step))
                disable_running_stats(model)
                for x, y in batches:
                    (loss_of(x, y) / accumulation).backward()
                optimizer.second_step(zero_grad=fault.zero_grad(step))
                rec.step(loss=total, inputs=x, targets=y, **extra)
                outcome.log(step, total, **extra)
    except TrainingDiverged:
        pass
    return outcome


def _rollout(model: nn.Module, env, max_steps: int, rng: np.random.Generator | None):
    """One batch of episodes (every env from its reset until it ends or `max_steps`), actions
    sampled from the policy by `rng` (greedy where it is None), without gradient (the recorder
    sees only the update's forward; `model.policy` gives the logits). Returns (observations (T, N, 4), actions (T, N), alive (T, N):
    whether each env was still in its episode at t). Raises TrainingDiverged on non-finite logits,
    where sampling would fail (a user's run crashes there)."""
    observations, actions, alive = [], [], []
    obs, running = env.reset(), np.ones(env.envs, dtype=bool)
    with torch.no_grad():
        for _ in range(max_steps):
            logits = model.policy(obs)
            if not torch.isfinite(logits).all():
                raise TrainingDiverged("the policy's logits are not finite")
            if rng is None:
                action = logits.argmax(-1).numpy()
            else:
                cumulative = torch.softmax(logits, -1).cumsum(-1).numpy()
                action = (rng.random((len(cumulative), 1)) > cumulative[:, :-1]).sum(1)
            observations.append(obs)
            actions.append(action)
            alive.append(running.copy())
            obs, done = env.step(action)
            running &= ~done
            if not running.any():
                break
    return (torch.stack(observations), torch.from_numpy(np.stack(actions)).long(),
            torch.from_numpy(np.stack(alive)))


def _returns_to_go(alive: torch.Tensor, gamma: float) -> torch.Tensor:
    """Discounted reward-to-go of a reward of 1 for every step an episode is alive."""
    returns, running = torch.zeros_like(alive, dtype=torch.float32), torch.zeros(alive.shape[1])
    for t in reversed(range(len(alive))):
        running = alive[t].float() + gamma * running
        returns[t] = running * alive[t]
    return returns


def train_policy_gradient(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_env: Callable[[int], object],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    seed: int,
    max_steps: int,
    fault: Fault | None = None,
    accumulation: int = 1,
    clip: float | None = 0.5,
    bf16: bool = False,
    gamma: float = 0.99,
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
    eval_every: int = 25,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """REINFORCE with a learned baseline and an entropy bonus (the A2C / PPO family's loss without
    bootstrapping): each step samples a batch of episodes with the current policy, then one update:
    advantages (reward-to-go − V(s), normalised), loss = −log π(a|s)·A + `value_coef`·½(V − G)²
    − `entropy_coef`·H(π), over the batch's transitions split into `accumulation` micro-batches
    (each loss weighted by its share), `clip_grad_norm_`, `optimizer.step()`, `zero_grad`, then
    `rec.step(loss, inputs=observations, targets=actions, reward=mean episode reward)`. Every
    `eval_every` steps a greedy evaluation's mean reward is recorded as `eval_reward`. The fault's
    `batch` sees each micro-batch's observations and actions (a corrupted rollout buffer).
    `make_env(seed)` builds a batch of environments; `lr_at` is the schedule's factor on each
    group's `base_lr`; `bf16` runs the update's forward under CPU bf16 autocast."""
    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    env, eval_env = make_env(seed), make_env(seed + 1)
    sampler = np.random.default_rng(seed + 2)
    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, optimizer, config, recorder_options) as rec:
            for step in range(steps):
                extra = {}
                if step % eval_every == 0:
                    extra["eval_reward"] = float(_rollout(model, eval_env, max_steps, None)[2].sum(0).float().mean())
                for group in optimizer.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, optimizer)
                observations, actions, alive = _rollout(model, env, max_steps, sampler)
                reward = float(alive.sum(0).float().mean())
                returns = _returns_to_go(alive, gamma)[alive]
                observations, actions = observations[alive], actions[alive]
                chunks = torch.arange(len(actions)).chunk(accumulation)
                total = 0.0
                for index in chunks:
                    x, a = fault.batch(step, observations[index], actions[index])
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                        logits, values = model(x)
                    logits, values = logits.float(), values.float()
                    log_probs = torch.log_softmax(logits, -1)
                    advantages = returns[index] - values.detach()
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                    policy = -(log_probs.gather(1, a.unsqueeze(1)).squeeze(1) * advantages).mean()
                    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
                    loss = policy + value_coef * 0.5 * ((values - returns[index]) ** 2).mean() - entropy_coef * entropy
                    (loss * len(index) / len(actions)).backward()
                    total += loss.item() * len(index) / len(actions)
                if clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
                if fault.take_step(step):
                    optimizer.step()
                if fault.zero_grad(step):
                    optimizer.zero_grad(set_to_none=True)
                rec.step(loss=total, inputs=x, targets=a, reward=reward, **extra)
                outcome.log(step, total, reward=reward)
    except TrainingDiverged:
        pass
    return outcome


class ReplayBuffer:
    """The DQN tutorial's `ReplayMemory` as preallocated arrays: the last `capacity` transitions
    (observation, action, reward, next observation, done), sampled uniformly with replacement."""

    def __init__(self, capacity: int, observations: int) -> None:
        self.obs = np.zeros((capacity, observations), dtype=np.float32)
        self.next_obs = np.zeros((capacity, observations), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.done = np.zeros(capacity, dtype=np.float32)
        self.capacity, self.size, self.position = capacity, 0, 0

    def push(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
             done: np.ndarray) -> None:
        where = (self.position + np.arange(len(actions))) % self.capacity
        self.obs[where], self.actions[where], self.rewards[where] = obs, actions, rewards
        self.next_obs[where], self.done[where] = next_obs, done
        self.position = int((self.position + len(actions)) % self.capacity)
        self.size = min(self.capacity, self.size + len(actions))

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        index = rng.integers(0, self.size, batch)
        return (torch.from_numpy(self.obs[index]), torch.from_numpy(self.actions[index]),
                torch.from_numpy(self.rewards[index]), torch.from_numpy(self.next_obs[index]),
                torch.from_numpy(self.done[index]))


def _epsilon_greedy_episodes(model: nn.Module, env, max_steps: int, epsilon: float, rng: np.random.Generator,
                             memory: ReplayBuffer | None) -> float:
    """One batch of episodes (every env from its reset until it ends or `max_steps`) acting
    ε-greedily on the Q-values (no gradient), each live env's transition pushed to `memory`;
    returns the episodes' mean reward (1 a step alive)."""
    obs, running = env.reset(), np.ones(env.envs, dtype=bool)
    alive = np.zeros(env.envs)
    with torch.no_grad():
        for _ in range(max_steps):
            action = model(obs).argmax(-1).numpy()
            explore = rng.random(env.envs) < epsilon
            action = np.where(explore, rng.integers(0, 2, env.envs), action)
            next_obs, done = env.step(action)
            if memory is not None:
                live = np.flatnonzero(running)
                memory.push(obs.numpy()[live], action[live], np.ones(len(live), dtype=np.float32),
                            next_obs.numpy()[live], done[live].astype(np.float32))
            alive += running
            running &= ~done
            obs = next_obs
            if not running.any():
                break
    return float(alive.mean())


def train_dqn(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_env: Callable[[int], object],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    seed: int,
    max_steps: int,
    observations: int,
    fault: Fault | None = None,
    accumulation: int = 1,
    clip: float | None = 100.0,
    bf16: bool = False,
    gamma: float = 0.99,
    batch: int = 128,
    gradient_steps: int = 4,
    capacity: int = 20_000,
    epsilon: tuple[float, float, float] = (0.9, 0.05, 30.0),
    target_every: int = 10,
    eval_every: int = 25,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """DQN as the PyTorch DQN tutorial writes it, on a batch of environments: each step plays one
    batch of episodes ε-greedily (ε = end + (start − end)·exp(−step / decay), `epsilon`),
    pushing every transition into a replay buffer, then `gradient_steps` updates (Stable-Baselines3's
    `gradient_steps`), each on `batch` transitions sampled uniformly: Q(s, a) against the TD target
    r + γ·(1 − done)·max_a' Q_target(s', a') (no gradient), Huber loss (`smooth_l1_loss`),
    `zero_grad()` before the backward, `clip_grad_value_` (`clip`), `optimizer.step()`. The batch
    splits into `accumulation` micro-batches (each loss weighted by its share); `bf16` runs the
    Q-network's forward under CPU bf16 autocast. The target network is a copy of the Q-network
    (made before the recorder, never recorded) loaded with its weights every `target_every` steps.
    `rec.step(loss = the updates' mean loss, inputs = the last micro-batch's observations,
    targets = its actions, reward = the episodes' mean reward, epsilon)`; every `eval_every`
    steps a greedy batch of episodes' mean reward is recorded as `eval_reward`. The fault's
    `batch` sees each micro-batch's observations and actions (a corrupted replay buffer)."""
    import copy

    fault = fault or Fault()
    target = copy.deepcopy(model)  # before the fault's hooks: the target only ever reads weights
    target.requires_grad_(False)
    fault.install(model)
    outcome = Outcome()
    env, eval_env = make_env(seed), make_env(seed + 1)
    rng = np.random.default_rng(seed + 2)
    memory = ReplayBuffer(capacity, observations)
    start, end, decay = epsilon
    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, optimizer, config, recorder_options) as rec:
            for step in range(steps):
                extra = {}
                if step % eval_every == 0:
                    extra["eval_reward"] = _epsilon_greedy_episodes(model, eval_env, max_steps, 0.0, rng, None)
                for group in optimizer.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, optimizer)
                explore = end + (start - end) * math.exp(-step / decay)
                reward = _epsilon_greedy_episodes(model, env, max_steps, explore, rng, memory)
                total = 0.0
                for _ in range(gradient_steps):
                    obs, actions, rewards, next_obs, done = memory.sample(batch, rng)
                    with torch.no_grad():
                        targets = rewards + gamma * (1 - done) * target(next_obs).max(1).values
                    if fault.zero_grad(step):
                        optimizer.zero_grad()
                    for index in torch.arange(batch).chunk(accumulation):
                        x, a = fault.batch(step, obs[index], actions[index])
                        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                            q = model(x)
                        q = q.float().gather(1, a.unsqueeze(1)).squeeze(1)
                        loss = F.smooth_l1_loss(q, targets[index])
                        (loss * len(index) / batch).backward()
                        total += loss.item() * len(index) / batch / gradient_steps
                    if clip is not None:
                        nn.utils.clip_grad_value_(model.parameters(), clip)
                    if fault.take_step(step):
                        optimizer.step()
                if (step + 1) % target_every == 0:
                    target.load_state_dict(model.state_dict())
                rec.step(loss=total, inputs=x, targets=a, reward=reward, epsilon=explore, **extra)
                outcome.log(step, total, reward=reward)
    except TrainingDiverged:
        pass
    return outcome


def _gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, next_value: torch.Tensor,
         next_done: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """CleanRL's generalized advantage estimate of a (T, N) rollout: δ_t = r_t + γ·V(s_t+1)·(1 − done_t+1)
    − V(s_t), A_t = δ_t + γλ·(1 − done_t+1)·A_t+1, bootstrapped by V of the observation after the rollout."""
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(next_value)
    for t in reversed(range(len(rewards))):
        nonterminal = 1.0 - (next_done if t == len(rewards) - 1 else dones[t + 1])
        following = next_value if t == len(rewards) - 1 else values[t + 1]
        delta = rewards[t] + gamma * following * nonterminal - values[t]
        advantages[t] = last = delta + gamma * lam * nonterminal * last
    return advantages


def train_ppo(
    run_dir: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_env: Callable[[int], object],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    seed: int,
    max_steps: int,
    fault: Fault | None = None,
    accumulation: int = 1,
    clip: float | None = 0.5,
    bf16: bool = False,
    num_steps: int = 32,
    update_epochs: int = 4,
    minibatches: int = 4,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    clip_coef: float = 0.2,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """CleanRL's `ppo.py`: rollouts of `num_steps` steps of every env (autoreset; an episode also
    ends at `max_steps`, counted as done, as CleanRL counts truncation), GAE(γ, λ), then
    `update_epochs` shuffled passes over `minibatches` minibatches, each one optimizer step and one
    recorded step: advantages normalised per minibatch, the clipped surrogate, the clipped value
    loss (`clip_vloss`), the entropy bonus, `zero_grad()` → backward → `clip_grad_norm_(clip)` →
    `optimizer.step()`. The lr is annealed linearly once per rollout (`lr_at` of the rollout's first
    step, a factor on each group's `base_lr`). `rec.step(loss, inputs = the minibatch's
    observations, targets = its actions, reward = the mean episodic return of the episodes that
    ended in the last rollout (the one before while none did), and CleanRL's losses/ scalars)`.
    The fault's `batch` sees each micro-batch's observations and actions (a corrupted rollout
    buffer); with `accumulation`, each minibatch splits into micro-batches (each loss weighted
    by its share) after its advantages are normalised; `bf16` runs the update's forward under CPU
    bf16 autocast."""
    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    env, sampler = make_env(seed), np.random.default_rng(seed + 2)
    obs, done, episode, reward = env.reset(), torch.zeros(env.envs), np.zeros(env.envs), 0.0
    for group in optimizer.param_groups:
        group.setdefault("base_lr", group["lr"])
    updates = update_epochs * minibatches
    try:
        with _recorder(run_dir, model, optimizer, config, recorder_options) as rec:
            for step in range(steps):
                if step % updates == 0:
                    for group in optimizer.param_groups:
                        group["lr"] = group["base_lr"] * lr_at(step)
                    rollout, obs, done, episode, reward = _ppo_rollout(model, env, obs, done, episode, reward,
                                                                       num_steps, max_steps, sampler, gamma, gae_lambda)
                    size = len(rollout["actions"])
                    order = [torch.from_numpy(sampler.permutation(size)) for _ in range(update_epochs)]
                fault.before_step(step, model, optimizer)
                index = order[(step % updates) // minibatches].chunk(minibatches)[step % minibatches]
                advantages = rollout["advantages"][index]
                advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
                if fault.zero_grad(step):
                    optimizer.zero_grad()
                parts, total = {}, 0.0
                for micro in torch.arange(len(index)).chunk(accumulation):
                    x, a = fault.batch(step, rollout["obs"][index[micro]], rollout["actions"][index[micro]])
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                        logits, values = model(x)
                    losses = _ppo_losses(logits.float(), values.float(), a, advantages[micro],
                                         {k: v[index[micro]] for k, v in rollout.items()}, clip_coef)
                    loss = losses["policy_loss"] - ent_coef * losses["entropy"] + vf_coef * losses["value_loss"]
                    (loss * len(micro) / len(index)).backward()
                    total += loss.item() * len(micro) / len(index)
                    for name, value in losses.items():
                        parts[name] = parts.get(name, 0.0) + value.item() * len(micro) / len(index)
                if clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip)
                if fault.take_step(step):
                    optimizer.step()
                rec.step(loss=total, inputs=x, targets=a, reward=reward, **parts)
                outcome.log(step, total, reward=reward)
    except TrainingDiverged:
        pass
    return outcome


def _ppo_losses(logits: torch.Tensor, values: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor,
                old: dict[str, torch.Tensor], clip_coef: float) -> dict[str, torch.Tensor]:
    """CleanRL's minibatch losses: the clipped surrogate, ½ the max of the unclipped and clipped
    squared value errors, the policy's entropy; `approx_kl` and `clipfrac` as it logs them."""
    log_probs = torch.log_softmax(logits, -1)
    logratio = log_probs.gather(1, actions.unsqueeze(1)).squeeze(1) - old["logprobs"]
    ratio = logratio.exp()
    policy = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_coef, 1 + clip_coef)).mean()
    clipped = old["values"] + torch.clamp(values - old["values"], -clip_coef, clip_coef)
    value = 0.5 * torch.max((values - old["returns"]) ** 2, (clipped - old["returns"]) ** 2).mean()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    return {"policy_loss": policy, "value_loss": value, "entropy": entropy, "approx_kl": approx_kl,
            "clipfrac": clipfrac}


def _ppo_rollout(model: nn.Module, env, obs: torch.Tensor, done: torch.Tensor, episode: np.ndarray, reward: float,
                 num_steps: int, max_steps: int, rng: np.random.Generator, gamma: float, lam: float):
    """`num_steps` steps of every env under the current policy (no gradient), autoreset, as CleanRL
    collects them; returns the flattened rollout (obs, actions, logprobs, values, advantages,
    returns), the carried-over obs, done and episode lengths, and the mean return of the episodes
    that ended (`reward` where none did). Raises TrainingDiverged on non-finite logits."""
    buffers = {name: [] for name in ("obs", "actions", "logprobs", "values", "dones", "rewards")}
    finished = []
    with torch.no_grad():
        for _ in range(num_steps):
            logits, value = model.policy(obs), model.value(obs)
            if not torch.isfinite(logits).all():
                raise TrainingDiverged("the policy's logits are not finite")
            cumulative = torch.softmax(logits, -1).cumsum(-1).numpy()
            action = (rng.random((len(cumulative), 1)) > cumulative[:, :-1]).sum(1)
            log_prob = torch.log_softmax(logits, -1)[torch.arange(len(action)), torch.from_numpy(action)]
            for name, item in (("obs", obs), ("actions", torch.from_numpy(action)), ("logprobs", log_prob),
                               ("values", value), ("dones", done), ("rewards", torch.ones(env.envs))):
                buffers[name].append(item)
            obs, ended = env.step(action)
            episode += 1
            ended |= episode >= max_steps
            finished.extend(episode[ended].tolist())
            episode[ended] = 0
            obs, done = env.reset_done(ended), torch.from_numpy(ended.astype(np.float32))
        stacked = {name: torch.stack(items) for name, items in buffers.items()}
        advantages = _gae(stacked["rewards"], stacked["values"], stacked["dones"], model.value(obs), done, gamma, lam)
    rollout = {"obs": stacked["obs"].flatten(0, 1), "actions": stacked["actions"].flatten().long(),
               "logprobs": stacked["logprobs"].flatten(), "values": stacked["values"].flatten(),
               "advantages": advantages.flatten(), "returns": (advantages + stacked["values"]).flatten()}
    return rollout, obs, done, episode, (float(np.mean(finished)) if finished else reward)


def train_pix2pix(
    run_dir: Path | None,
    model: nn.Module,
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    fault: Fault | None = None,
    bf16: bool = False,
    lambda_l1: float = 100.0,
    eval_metrics: Callable[[], dict[str, float]] | None = None,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """junyanz/pytorch-CycleGAN-and-pix2pix's `Pix2PixModel.optimize_parameters` each step:
    fake_B = netG(real_A); `set_requires_grad(netD, True)`, `optimizer_D.zero_grad()`, loss_D =
    ½ (GAN(netD(A, fake_B.detach()), False) + GAN(netD(A, B), True)) (vanilla GAN: BCE with
    logits), backward, `optimizer_D.step()`; `set_requires_grad(netD, False)`,
    `optimizer_G.zero_grad()`, loss_G = GAN(netD(A, fake_B), True) + `lambda_l1` · L1(fake_B, B),
    backward, `optimizer_G.step()`; its losses logged as `get_current_losses` names them (G_GAN,
    G_L1, D_real, D_fake) with the `loss_` prefix, beside `eval_metrics()` (a held-out error)
    every step. `optimizers` is (G's, D's); `lr_at(step)` the schedule's factor on each group's
    `base_lr`; `fault.before_step` sees both optimizers, `fault.zero_grad` / `fault.take_step`
    decide every `zero_grad` / `step` call; `bf16` runs the forwards under CPU bf16 autocast."""
    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    opt_g, opt_d = optimizers
    both = Optimizers(opt_g, opt_d)
    net_g, net_d = model.netG, model.netD
    gan = lambda logits, real: F.binary_cross_entropy_with_logits(  # noqa: E731 - pix2pix's GANLoss('vanilla')
        logits.float(), torch.full_like(logits.float(), float(real)))
    for group in both.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, list(optimizers), config, recorder_options) as rec:
            for step in range(steps):
                extra = eval_metrics() if eval_metrics is not None else {}
                for group in both.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, both)
                real_a, real_b = fault.batch(step, *draw())
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    fake_b = net_g(real_a)
                    net_d.requires_grad_(True)
                    if fault.zero_grad(step):
                        opt_d.zero_grad()
                    loss_d_fake = gan(net_d(torch.cat([real_a, fake_b.detach()], 1)), False)
                    loss_d_real = gan(net_d(torch.cat([real_a, real_b], 1)), True)
                    loss_d = 0.5 * (loss_d_fake + loss_d_real)
                loss_d.backward()
                if fault.take_step(step):
                    opt_d.step()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    net_d.requires_grad_(False)
                    if fault.zero_grad(step):
                        opt_g.zero_grad()
                    loss_g_gan = gan(net_d(torch.cat([real_a, fake_b], 1)), True)
                    loss_g_l1 = F.l1_loss(fake_b.float(), real_b) * lambda_l1
                    loss_g = loss_g_gan + loss_g_l1
                loss_g.backward()
                if fault.take_step(step):
                    opt_g.step()
                losses = {"loss_G_GAN": loss_g_gan.item(), "loss_G_L1": loss_g_l1.item(),
                          "loss_D_real": loss_d_real.item(), "loss_D_fake": loss_d_fake.item()}
                rec.step(inputs=real_a, targets=real_b, **losses, **extra)
                outcome.log(step, loss_d.item() + loss_g.item(), **extra)
    except TrainingDiverged:
        pass
    return outcome


def train_sngan(
    run_dir: Path | None,
    model: nn.Module,
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    held_out: torch.Tensor,
    *,
    steps: int,
    lr_at: Callable[[int], float],
    directions: torch.Tensor,
    fault: Fault | None = None,
    n_dis: int = 2,
    accumulation: int = 1,
    bf16: bool = False,
    seed: int = 0,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """An SN-GAN step as PyTorch-StudioGAN's worker writes `train_discriminator` / `train_generator`
    (written from memory): `n_dis` discriminator updates (`d_updates_per_step`), each
    `toggle_grad(D on, G off)`, `d_optimizer.zero_grad()`, `accumulation` micro-batches (`acml_steps`;
    a fresh real batch each, fresh z, fake = G(z) in train mode, hinge loss / accumulation, backward),
    `d_optimizer.step()`; then one generator update, `toggle_grad(D off, G on)`, `g_optimizer.zero_grad()`,
    `accumulation` micro-batches of −D(G(z)) / accumulation, `g_optimizer.step()`. `model` has
    `generator` (z of `generator.latent` → an image) and `discriminator`; `optimizers` is (G's, D's);
    `lr_at(step)` the schedule's factor on each group's `base_lr`. Recorded each step: `loss_d` (the last
    discriminator update's) and `loss_g` as StudioGAN logs them, and the outcome metric
    `sliced_wasserstein`: the sliced 1-Wasserstein distance of G(fixed z) (eval mode, StudioGAN's
    default for evaluation: BatchNorm's running statistics) to the `held_out` images, flattened, along
    the unit `directions`; the step's real images are the recorded inputs (no targets).
    `fault.before_step` sees both optimizers; `fault.batch` every real micro-batch of the step;
    `fault.zero_grad` / `fault.take_step` decide every `zero_grad` / `step` call; `bf16` runs the
    forwards and losses under CPU bf16 autocast."""
    from .field_models import sliced_wasserstein, sngan_hinge_d_loss, sngan_hinge_g_loss

    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    opt_g, opt_d = optimizers
    both = Optimizers(opt_g, opt_d)
    net_g, net_d = model.generator, model.discriminator
    draws = torch.Generator().manual_seed(seed + 3)
    fixed_z = torch.randn(len(held_out), net_g.latent, generator=torch.Generator().manual_seed(seed + 4))
    flat_held_out = held_out.flatten(1)

    def latents(rows: int) -> torch.Tensor:
        return torch.randn(rows, net_g.latent, generator=draws)

    for group in both.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, list(optimizers), config, recorder_options) as rec:
            for step in range(steps):
                for group in both.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, both)
                reals = []
                net_d.requires_grad_(True)
                net_g.requires_grad_(False)
                for _ in range(n_dis):
                    if fault.zero_grad(step):
                        opt_d.zero_grad()
                    loss_d = 0.0
                    for _ in range(accumulation):
                        real, _ = fault.batch(step, *draw())
                        reals.append(real)
                        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                            fake = net_g(latents(len(real)))
                            loss = sngan_hinge_d_loss(net_d(real).float(), net_d(fake).float()) / accumulation
                        loss.backward()
                        loss_d += loss.item()
                    if fault.take_step(step):
                        opt_d.step()
                net_d.requires_grad_(False)
                net_g.requires_grad_(True)
                if fault.zero_grad(step):
                    opt_g.zero_grad()
                loss_g = 0.0
                for _ in range(accumulation):
                    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                        loss = sngan_hinge_g_loss(net_d(net_g(latents(len(reals[-1])))).float()) / accumulation
                    loss.backward()
                    loss_g += loss.item()
                if fault.take_step(step):
                    opt_g.step()
                net_d.requires_grad_(True)
                net_g.eval()
                with torch.no_grad():
                    distance = sliced_wasserstein(net_g(fixed_z).flatten(1), flat_held_out, directions)
                net_g.train()
                rec.step(inputs=torch.cat(reals), loss_d=loss_d, loss_g=loss_g, sliced_wasserstein=distance)
                outcome.log(step, loss_d + loss_g, sliced_wasserstein=distance)
    except TrainingDiverged:
        pass
    return outcome


def train_muon_gpt(
    run_dir: Path | None,
    model: nn.Module,
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer],
    draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    eval_draw: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    momentum_at: Callable[[int], float],
    fault: Fault | None = None,
    accumulation: int = 1,
    bf16: bool = False,
    eval_every: int = 25,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """modded-nanogpt's `train_gpt.py` loop (written from memory, one process): every `eval_every`
    steps a held-out `val_loss` (eval mode, no_grad, two batches of `eval_draw`); then
    `accumulation` micro-batches of forward / next-token cross-entropy / backward (loss /
    accumulation); every group of both optimizers gets `base_lr · lr_at(step)` (its stable-then-decay
    `get_lr` on what it calls `initial_lr`; `base_lr` here, the key `faults.LrSpike` raises with `lr`) and each Muon group the momentum `momentum_at(step)` (its warm-up); both optimizers
    step (`for opt in optimizers: opt.step()`), then `model.zero_grad(set_to_none=True)`; no
    clipping. `optimizers` is (Adam, Muon); the recorder gets both (`optimizer_0`, `optimizer_1`).
    `fault.before_step` sees both optimizers' groups and state (after the schedules are set, as in
    `train_field`); `fault.batch` every micro-batch; `fault.take_step` / `fault.zero_grad` decide the
    steps and the zeroing; `bf16` runs forward and loss under CPU bf16 autocast. The recorded `loss`
    is the step's mean micro-batch loss. `run_dir=None` trains without recording."""
    fault = fault or Fault()
    fault.install(model)
    outcome = Outcome()
    adam, muon = optimizers
    both = Optimizers(adam, muon)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return token_cross_entropy(model(x).float(), y)

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            value = sum(loss_of(*eval_draw()).item() for _ in range(2)) / 2
        model.train()
        return value

    for group in both.param_groups:
        group.setdefault("base_lr", group["lr"])
    try:
        with _recorder(run_dir, model, [adam, muon], config, recorder_options) as rec:
            for step in range(steps):
                extra = {"val_loss": evaluate()} if step % eval_every == 0 else {}
                for group in both.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                for group in muon.param_groups:
                    group["momentum"] = momentum_at(step)
                fault.before_step(step, model, both)
                total = 0.0
                for _ in range(accumulation):
                    x, y = fault.batch(step, *draw())
                    loss = loss_of(x, y)
                    (loss / accumulation).backward()
                    total += loss.item() / accumulation
                if fault.take_step(step):
                    for optimizer in (adam, muon):
                        optimizer.step()
                if fault.zero_grad(step):
                    model.zero_grad(set_to_none=True)
                rec.step(loss=total, inputs=x, targets=y, **extra)
                outcome.log(step, total, **extra)
    except TrainingDiverged:
        pass
    return outcome


class ContinuousReplayBuffer:
    """pranz24's `ReplayMemory` as preallocated arrays: the last `capacity` transitions (state,
    action, reward, next state, mask), sampled uniformly (pranz24's `random.sample`: without
    replacement within a batch)."""

    def __init__(self, capacity: int, observations: int, actions: int) -> None:
        self.state = np.zeros((capacity, observations), dtype=np.float32)
        self.next_state = np.zeros((capacity, observations), dtype=np.float32)
        self.action = np.zeros((capacity, actions), dtype=np.float32)
        self.reward = np.zeros((capacity, 1), dtype=np.float32)
        self.mask = np.zeros((capacity, 1), dtype=np.float32)
        self.capacity, self.size, self.position = capacity, 0, 0

    def __len__(self) -> int:
        return self.size

    def push(self, state: np.ndarray, action: np.ndarray, reward: np.ndarray, next_state: np.ndarray,
             mask: np.ndarray) -> None:
        where = (self.position + np.arange(len(action))) % self.capacity
        self.state[where], self.action[where], self.reward[where, 0] = state, action, reward
        self.next_state[where], self.mask[where, 0] = next_state, mask
        self.position = int((self.position + len(action)) % self.capacity)
        self.size = min(self.capacity, self.size + len(action))

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        index = rng.choice(self.size, batch, replace=False)
        return tuple(torch.from_numpy(a[index]) for a in (self.state, self.action, self.reward, self.next_state,
                                                          self.mask))


def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """pranz24's `soft_update`: Polyak averaging in place, outside any optimizer."""
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(target_param.data * (1.0 - tau) + param.data * tau)


def train_sac(
    run_dir: Path | None,
    model: nn.Module,
    optimizers: tuple[torch.optim.Optimizer, torch.optim.Optimizer, torch.optim.Optimizer],
    make_env: Callable[[int], object],
    *,
    steps: int,
    lr_at: Callable[[int], float],
    seed: int,
    max_steps: int,
    observations: int,
    actions: int,
    fault: Fault | None = None,
    accumulation: int = 1,
    bf16: bool = False,
    batch: int = 256,
    gamma: float = 0.99,
    tau: float = 0.005,
    alpha: float = 0.2,
    updates_per_step: int = 1,
    start_steps: int = 800,
    capacity: int = 1_000_000,
    target_update_interval: int = 1,
    eval_every: int = 10,
    config: dict | None = None,
    recorder_options: dict | None = None,
) -> Outcome:
    """Soft Actor-Critic as pranz24/pytorch-soft-actor-critic's `main.py` and `sac.py` write it,
    on a batch of environments: each recorded step plays one episode of every env (`max_steps`
    env steps; uniformly random actions for the first `start_steps` transitions, then the policy's
    samples), every transition into the replay buffer (mask 1: the episodes end at their time
    limit only), and after each env step, once the buffer holds more than `batch`,
    `updates_per_step` times its `update_parameters`: the soft TD target r + γ · mask · (min of the
    target critic's Q1, Q2 at (s', a' ~ π) − α · log π(a'|s')) without gradient, the critic's
    MSE(Q1) + MSE(Q2) → `critic_optim`; the policy's mean(α · log π − min(Q1, Q2)) on fresh samples
    → `policy_optim`; the temperature's −mean(log_alpha · (log π + target entropy) detached) →
    `alpha_optim`, then α = exp(log_alpha) (the 0.2 of `alpha` until the first such step, as
    there); every `target_update_interval` updates `soft_update` of the target critic (a copy of
    the critic made before the fault's hooks, never recorded). The target entropy is
    −`actions`. `optimizers` is (policy's, critic's, temperature's); `lr_at(step)` their
    schedule's factor on each group's `base_lr`; `fault.before_step` sees all three,
    `fault.zero_grad` / `fault.take_step` decide every `zero_grad` / `step` call, `fault.batch`
    each (micro-)batch's states and actions sampled from the buffer (a corrupted buffer). With
    `accumulation`, each update's batch splits into micro-batches (each loss weighted by its
    share); `bf16` runs the networks' forwards under CPU bf16 autocast. `rec.step(loss = the
    step's mean critic loss, inputs / targets = the last micro-batch's states / actions, reward =
    the episodes' mean return (pranz24's `reward/train`), policy_loss, alpha_loss, alpha, and every
    `eval_every` steps `eval_reward`: a deterministic episode of the mean action on its own envs
    (pranz24's `evaluate=True` test)`."""
    import copy

    from .field_models import squashed_gaussian

    fault = fault or Fault()
    critic_target = copy.deepcopy(model.critic).requires_grad_(False)  # pranz24's hard_update at the start
    fault.install(model)
    outcome = Outcome()
    env, eval_env = make_env(seed), make_env(seed + 1)
    rng = np.random.default_rng(seed + 2)
    memory = ContinuousReplayBuffer(capacity, observations, actions)
    policy_optim, critic_optim, alpha_optim = optimizers
    every = Optimizers(*optimizers)
    target_entropy = -float(actions)
    temperature = torch.tensor(alpha)
    updates, total_numsteps, last = 0, 0, None
    for group in every.param_groups:
        group.setdefault("base_lr", group["lr"])

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16)

    def sample(state: torch.Tensor):
        with autocast():
            mean, log_std = model.policy(state)
        return squashed_gaussian(mean.float(), log_std.float())

    def critics(net: nn.Module, state: torch.Tensor, action: torch.Tensor):
        with autocast():
            q1, q2 = net(state, action)
        return q1.float(), q2.float()

    def update_parameters(step: int) -> dict[str, float]:
        nonlocal temperature, last
        state, action, reward, next_state, mask = memory.sample(batch, rng)
        with torch.no_grad():
            next_action, next_log_pi, _ = sample(next_state)
            q1_next, q2_next = critics(critic_target, next_state, next_action)
            next_q_value = reward + mask * gamma * (torch.min(q1_next, q2_next) - temperature * next_log_pi)
        chunks = [(index, *fault.batch(step, state[index], action[index]))
                  for index in torch.arange(batch).chunk(accumulation)]
        last = chunks[-1][1:]

        def accumulated(optimizer: torch.optim.Optimizer, chunk_loss) -> float:
            """zero_grad → one weighted backward per micro-batch → step; the batch's mean loss."""
            if fault.zero_grad(step):
                optimizer.zero_grad()
            total = 0.0
            for i, (index, x, a) in enumerate(chunks):
                loss = chunk_loss(i, index, x, a)
                (loss * len(index) / batch).backward()
                total += loss.item() * len(index) / batch
            if fault.take_step(step):
                optimizer.step()
            return total

        def critic_loss(i, index, x, a):
            q1, q2 = critics(model.critic, x, a)
            return F.mse_loss(q1, next_q_value[index]) + F.mse_loss(q2, next_q_value[index])

        log_pis = []

        def policy_loss_of(i, index, x, a):
            pi, log_pi, _ = sample(x)
            q1_pi, q2_pi = critics(model.critic, x, pi)
            log_pis.append(log_pi)
            return (temperature * log_pi - torch.min(q1_pi, q2_pi)).mean()

        def alpha_loss_of(i, index, x, a):
            return -(model.log_alpha * (log_pis[i] + target_entropy).detach()).mean()

        qf_loss = accumulated(critic_optim, critic_loss)
        policy_loss = accumulated(policy_optim, policy_loss_of)
        alpha_loss = accumulated(alpha_optim, alpha_loss_of)
        # pranz24 keeps exp(log_alpha)'s graph, so the next policy loss also sends a gradient to
        # log_alpha, which alpha_optim.zero_grad() clears before the temperature's own backward.
        temperature = model.log_alpha.exp().detach()
        if updates % target_update_interval == 0:
            soft_update(critic_target, model.critic, tau)
        return {"loss": qf_loss, "policy_loss": policy_loss, "alpha_loss": alpha_loss,
                "alpha": float(temperature)}

    def evaluate() -> float:
        state, returns = eval_env.reset(), np.zeros(eval_env.envs)
        with torch.no_grad():
            for _ in range(max_steps):
                state, reward = eval_env.step(sample(state)[2].numpy())
                returns += reward
        return float(returns.mean())

    try:
        with _recorder(run_dir, model, list(optimizers), config, recorder_options) as rec:
            for step in range(steps):
                extra = {"eval_reward": evaluate()} if step % eval_every == 0 else {}
                for group in every.param_groups:
                    group["lr"] = group["base_lr"] * lr_at(step)
                fault.before_step(step, model, every)
                state, returns, parts, done = env.reset(), np.zeros(env.envs), {}, 0
                for _ in range(max_steps):
                    if total_numsteps < start_steps:
                        action = rng.uniform(-1.0, 1.0, (env.envs, actions)).astype(np.float32)
                    else:
                        with torch.no_grad():
                            action = sample(state)[0].numpy()
                    next_state, reward = env.step(action)
                    memory.push(state.numpy(), action, reward, next_state.numpy(), np.ones(env.envs))
                    returns += reward
                    total_numsteps += env.envs
                    state = next_state
                    if len(memory) > batch:
                        for _ in range(updates_per_step):
                            for name, value in update_parameters(step).items():
                                parts[name] = parts.get(name, 0.0) + value
                            updates += 1
                            done += 1
                parts = {name: value / max(1, done) for name, value in parts.items()}
                loss = parts.pop("loss", math.nan)
                reward = float(returns.mean())
                x, a = last
                rec.step(loss=loss, inputs=x, targets=a, reward=reward, **parts, **extra)
                outcome.log(step, loss, reward=reward)
    except TrainingDiverged:
        pass
    return outcome
