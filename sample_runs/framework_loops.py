"""Field runs trained by loops we did not write: Hugging Face's `Trainer` and Lightning's `Trainer`,
each recorded through our own callback (`recorders.integrations`), faults injected through the
frameworks' own extension points (a `TrainerCallback`, the data collator, LightningModule hooks).

A fault's `before_step` runs at the start of an optimizer step (HF's `on_step_begin`, Lightning's
`on_train_batch_start` on the step's first micro-batch); where it changes a group's `base_lr`
(a per-group lr multiplier) the scheduler's `base_lrs` follow it, so that the change persists
under the schedule as it does in `training.train_field`. A loop stops a few steps after the
loss first goes non-finite, as a user's NaN check would, through the framework's own stop flag.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from .faults import Fault, Optimizers
from .training import Outcome, TrainingDiverged

__all__ = ["train_hf_trainer", "train_lightning", "train_lightning_wgan"]


def _before_step(fault: Fault, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> None:
    fault.before_step(step, model, optimizer)
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):  # a plateau scheduler keeps no base_lrs
        scheduler.base_lrs = [group["base_lr"] for group in optimizer.param_groups]


def _scheduler(optimizer: torch.optim.Optimizer, lr_at: Callable[[int], float]):
    for group in optimizer.param_groups:
        group["base_lr"] = group["lr"]
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)


def _logged(outcome: Outcome, step: int, losses: list[float], **metrics: float) -> bool:
    """Keeps the step's mean micro-batch loss (and its metrics); False where the loop should stop
    (non-finite for a while)."""
    try:
        outcome.log(step, sum(losses) / len(losses), **metrics)
    except TrainingDiverged:
        return False
    return True


def train_hf_trainer(run_dir: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer, train_rows: list,
                     eval_rows: list, collate: Callable, *, steps: int, lr_at: Callable[[int], float], fault: Fault,
                     micro_batch: int, accumulation: int, clip: float | None, bf16: bool, seed: int,
                     eval_every: int = 25, config: dict | None = None, recorder_options: dict | None = None) -> Outcome:
    """`transformers.Trainer` with our optimizer and a `LambdaLR` schedule (`optimizers=`),
    `max_grad_norm`, `gradient_accumulation_steps`, `eval_strategy="steps"`, on CPU; the model's own
    loss (`labels` in the batch). `fault.batch` runs in the data collator on each training
    micro-batch (the Trainer prefetches a step's micro-batches, so the collator counts them);
    the rest of the fault in a `TrainerCallback`. `train_rows` must be a multiple of
    micro_batch × accumulation (no short step at an epoch's end)."""
    from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

    fault.install(model)
    outcome = Outcome()
    scheduler = _scheduler(optimizer, lr_at)
    micro_losses: list[float] = []
    collated = 0

    held_out = {id(row) for row in eval_rows}

    def collator(rows):
        nonlocal collated
        batch = collate(rows)
        if id(rows[0]) in held_out:  # an evaluation batch (the model's mode says nothing: the Trainer
            return batch  # collates a step's micro-batches before its training_step calls model.train())
        step = collated // accumulation
        collated += 1
        labels = batch.pop("labels")
        inputs, labels = fault.batch(step, batch, labels)
        return {**inputs, "labels": labels}

    def keep_loss(module, args, output):
        if module.training and torch.is_grad_enabled():
            micro_losses.append(output.loss.detach().item())

    class Faults(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            _before_step(fault, state.global_step, model, optimizer, scheduler)

        def on_step_end(self, args, state, control, **kwargs):
            if not _logged(outcome, state.global_step - 1, micro_losses):
                control.should_training_stop = True
            micro_losses.clear()

    callbacks = [Faults()]
    if run_dir is not None:
        from recorders.integrations.transformers import PostmortemCallback

        callbacks.append(PostmortemCallback(run_dir, config=config or {}, overwrite=True, **(recorder_options or {})))
    hook = model.register_forward_hook(keep_loss)
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir, max_steps=steps, per_device_train_batch_size=micro_batch,
            per_device_eval_batch_size=64, gradient_accumulation_steps=accumulation,
            max_grad_norm=clip or 0.0, eval_strategy="steps", eval_steps=eval_every, logging_strategy="no",
            save_strategy="no", report_to=[], use_cpu=True, bf16=bf16, seed=seed, dataloader_drop_last=True,
            remove_unused_columns=False, disable_tqdm=True)
        trainer = Trainer(model=model, args=args, train_dataset=train_rows, eval_dataset=eval_rows,
                          data_collator=collator, optimizers=(optimizer, scheduler), callbacks=callbacks)
        trainer.remove_callback(PrinterCallback)  # it prints every evaluation's metrics
        trainer.train()
    hook.remove()
    return outcome


def train_lightning(run_dir: Path | None, model: nn.Module, optimizer: torch.optim.Optimizer, train_batches,
                    val_batches, *, steps: int, lr_at: Callable[[int], float], fault: Fault,
                    loss_fn: Callable, accumulation: int, clip: float | None, bf16: bool,
                    after_step: Callable[[], None] | None = None, eval_every: int = 25, config: dict | None = None,
                    recorder_options: dict | None = None,
                    eval_metrics: Callable[[], dict[str, float]] | None = None,
                    plateau: dict | None = None) -> Outcome:
    """`lightning.Trainer.fit` of a LightningModule that holds `model`'s modules under their own
    names (so the recorder and the faults see the same parameter names), automatic optimisation,
    `gradient_clip_val`, `accumulate_grad_batches`, `val_check_interval` (every `eval_every` optimizer
    steps, two validation batches), a step-interval `LambdaLR`, on CPU, with no logger, checkpoint
    or progress bar. `fault.batch` runs in `on_after_batch_transfer`, `fault.zero_grad` in an
    `optimizer_zero_grad` override, `fault.take_step` in an `optimizer_step` override, `after_step` (CLIP's logit-scale clamp) in
    `on_train_batch_end` after a step.

    `eval_metrics()` (GluonTS's DeepAR: the sample paths' weighted quantile loss on held-out windows)
    runs in each `validation_step` beside `val_loss` (Lightning's eval mode, inference mode), logged with it (so our callback records it at the step
    the validation followed) and kept in the outcome, one value a validation (a family judged on it
    validates after every step: `eval_every=1`). `plateau` (ReduceLROnPlateau's keywords:
    `DeepARLightningModule.configure_optimizers`) replaces the step `LambdaLR` by a
    `ReduceLROnPlateau` on the epoch's mean `train_loss` (`training_step` logs it `on_epoch`, as
    GluonTS's does), Lightning's default epoch interval; the lr is then `lr_at(0)` × each group's
    `base_lr` throughout (`lr_at` must be constant), apart from the plateau's cuts and the faults."""
    import lightning as L

    from .training import _float32

    fault.install(model)
    outcome = Outcome()
    if plateau is None:
        scheduler = _scheduler(optimizer, lr_at)
    else:
        if lr_at(steps - 1) != lr_at(0):
            raise ValueError("a plateau-scheduled loop takes a constant lr_at")
        for group in optimizer.param_groups:
            group["base_lr"] = group["lr"]
            group["lr"] = group["base_lr"] * lr_at(0)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **plateau)

    class FieldModule(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            for name, child in model.named_children():
                self.add_module(name, child)
            for name, param in model.named_parameters(recurse=False):
                self.register_parameter(name, param)
            self.micro_losses: list[float] = []

        def forward(self, batch):
            return model(batch)

        def training_step(self, batch, batch_idx):
            inputs, targets = batch if isinstance(batch, (tuple, list)) else (batch, None)
            loss = loss_fn(_float32(model(inputs)), targets)
            self.micro_losses.append(loss.detach().item())
            if plateau is not None:  # the monitor of the plateau scheduler, the epoch's mean
                self.log("train_loss", loss, on_epoch=True, on_step=False)
            return loss

        def validation_step(self, batch, batch_idx):
            inputs, targets = batch if isinstance(batch, (tuple, list)) else (batch, None)
            self.log("val_loss", loss_fn(_float32(model(inputs)), targets))
            if eval_metrics is not None:
                values = eval_metrics()
                self.eval_values.append(values)
                for name, value in values.items():
                    self.log(name, value)

        def on_validation_epoch_start(self):
            self.eval_values: list[dict[str, float]] = []

        def on_validation_epoch_end(self):
            for name in self.eval_values[0] if self.eval_values else ():  # the mean over batches, as logged
                outcome.metrics.setdefault(name, []).append(
                    sum(values[name] for values in self.eval_values) / len(self.eval_values))

        def on_after_batch_transfer(self, batch, dataloader_idx):
            if not self.trainer.training:
                return batch
            if isinstance(batch, (tuple, list)):
                return list(fault.batch(self.trainer.global_step, *batch))
            return fault.batch(self.trainer.global_step, batch, None)[0]

        def on_train_batch_start(self, batch, batch_idx):
            if batch_idx % accumulation == 0:
                _before_step(fault, self.trainer.global_step, self, optimizer, scheduler)

        def optimizer_zero_grad(self, epoch, batch_idx, optimizer_):
            if fault.zero_grad(self.trainer.global_step):
                optimizer_.zero_grad()

        def optimizer_step(self, epoch, batch_idx, optimizer_, optimizer_closure=None):
            if fault.take_step(self.trainer.global_step):
                optimizer_.step(closure=optimizer_closure)
            else:  # the bug: an override that runs the closure (forward, backward) and never steps
                optimizer_closure()

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if (batch_idx + 1) % accumulation:
                return
            if after_step is not None:
                after_step()
            if not _logged(outcome, self.trainer.global_step - 1, self.micro_losses):
                self.trainer.should_stop = True
            self.micro_losses = []

        def configure_optimizers(self):
            if plateau is not None:
                return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "train_loss"}}
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    callbacks = []
    if run_dir is not None:
        from recorders.integrations.lightning import PostmortemCallback

        callbacks.append(PostmortemCallback(run_dir, config=config or {}, overwrite=True, **(recorder_options or {})))
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, precision="bf16-mixed" if bf16 else
                            "32-true", gradient_clip_val=clip, accumulate_grad_batches=accumulation,
                            val_check_interval=eval_every * accumulation, check_val_every_n_epoch=None,
                            limit_val_batches=2, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=callbacks)
        trainer.fit(FieldModule(), train_batches, val_batches)
    return outcome


def train_lightning_wgan(run_dir: Path | None, model: nn.Module, optimizers: tuple[torch.optim.Optimizer, ...],
                         train_batches, held_out: torch.Tensor, *, directions: torch.Tensor, fault: Fault,
                         lr_at: Callable[[int], float], n_critic: int, batch: int, noise: int, penalty: float,
                         bf16: bool, seed: int,
                         config: dict | None = None,
                         recorder_options: dict | None = None) -> Outcome:
    """WGAN-GP (Gulrajani et al.'s algorithm 1) as a LightningModule under manual optimisation
    (`automatic_optimization = False`): each batch holds `n_critic` real batches; for each, the
    critic's step on critic(fake) − critic(real) + `penalty` · gradient penalty, then one
    generator step on −critic(G(z)), each with its own `zero_grad`, `manual_backward` and
    `step`, `(generator, critic)` optimizers, no clipping; `lr_at(step)` is the schedule's factor
    on each group's `base_lr`, set at each batch's start (the paper's linear decay). `training_step` returns
    both losses and the samples' sliced Wasserstein distance to `held_out` (fixed noise, the unit
    `directions`), which our Lightning callback records as scalars. One epoch of the loader's
    batches (Lightning counts every optimizer's step in `global_step`: the batch index is the step).
    `fault.before_step` runs at each batch's start with both optimizers, `fault.batch` on the real
    points in `on_after_batch_transfer` (the data pipeline, before the callback records them),
    `fault.zero_grad` / `fault.take_step` decide every `zero_grad` / `step` call."""
    import lightning as L

    from .field_models import gradient_penalty, sliced_wasserstein

    fault.install(model)
    outcome = Outcome()
    both = Optimizers(*optimizers)
    for group in both.param_groups:
        group.setdefault("base_lr", group["lr"])
    draws = torch.Generator().manual_seed(seed + 3)
    fixed_noise = torch.randn(len(held_out), noise, generator=torch.Generator().manual_seed(seed + 4))
    generator, critic = model.generator, model.critic

    class WGANModule(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            for name, child in model.named_children():
                self.add_module(name, child)

        def training_step(self, real_points, step):
            opt_g, opt_d = self.optimizers()
            for group in both.param_groups:
                group["lr"] = group["base_lr"] * lr_at(step)
            fault.before_step(step, model, both)
            for real in real_points.chunk(n_critic):
                fake = generator(torch.randn(batch, noise, generator=draws)).detach()
                if fault.zero_grad(step):
                    opt_d.zero_grad()
                loss_d = critic(fake).mean() - critic(real).mean() + penalty * gradient_penalty(
                    critic, real, fake.float(), draws)
                self.manual_backward(loss_d)
                if fault.take_step(step):
                    opt_d.step()
            if fault.zero_grad(step):
                opt_g.zero_grad()
            loss_g = -critic(generator(torch.randn(batch, noise, generator=draws))).mean()
            self.manual_backward(loss_g)
            if fault.take_step(step):
                opt_g.step()
            with torch.no_grad():
                distance = sliced_wasserstein(generator(fixed_noise), held_out, directions)
            if not _logged(outcome, step, [loss_d.detach().item() + loss_g.detach().item()],
                           sliced_wasserstein=distance):
                self.trainer.should_stop = True
            return {"loss_d": loss_d.detach(), "loss_g": loss_g.detach(), "sliced_wasserstein": distance}

        def on_after_batch_transfer(self, real_points, dataloader_idx):
            # The data pipeline's corruption, before the callback records the batch (as in
            # train_lightning); the batch index is the step, counted here.
            self.batches_seen = getattr(self, "batches_seen", -1) + 1
            return fault.batch(self.batches_seen, real_points, None)[0]

        def configure_optimizers(self):
            return list(optimizers)

    callbacks = []
    if run_dir is not None:
        from recorders.integrations.lightning import PostmortemCallback

        callbacks.append(PostmortemCallback(run_dir, config=config or {}, overwrite=True, **(recorder_options or {})))
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, precision="bf16-mixed" if bf16 else "32-true",
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=root, callbacks=callbacks)
        trainer.fit(WGANModule(), train_batches)
    return outcome

