"""Record a Hugging Face ``Trainer`` run: ``Trainer(..., callbacks=[PostmortemCallback(dir)])``.

One recorded step per optimizer step, written right after ``optimizer.step()`` and before the
scheduler steps, so ``lr`` is the rate that step used. The loss is the one the Trainer trains
on: the model's ``loss`` output of each training forward, added over the micro-batches of a step
when the Trainer normalised it by the step's token count (``num_items_in_batch``), averaged
otherwise, as the Trainer's own loss accounting does. The batch is the dict the model received
(``input.input_ids``, ``input.attention_mask``, ``target.labels``), pooled over micro-batches.
Epochs and evaluations are events; evaluation metrics are scalars at the step they followed.
The manifest's config holds the TrainingArguments and the model's config. Only the main process
records (``state.is_world_process_zero``).

An exception that leaves the process (``sys.excepthook``) closes the run with status
``exception`` and its traceback; the Trainer has no exception callback, so an exception that the
caller catches leaves the run ``running`` until the next ``train()`` call closes it as an
exception, or the interpreter exits.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import torch

from ..recorder import Recorder
from ._common import StepBatches, checked_options, json_safe, numeric, require, warn_once

require(__name__, "transformers", "transformers")
from transformers import TrainerCallback  # noqa: E402 - after the one-line error above

__all__ = ["PostmortemCallback"]

# Forward keywords the Trainer adds that are not part of the batch.
_NOT_BATCH = ("num_items_in_batch",)


class PostmortemCallback(TrainerCallback):
    """Records the Trainer's run into `run_dir` with a :class:`recorders.Recorder`.

    Args:
        run_dir: the run directory (see docs/run-format.md).
        recorder_options: keyword options of :class:`recorders.Recorder` (``flush_every``,
            ``checkpoint_every``, ``config``, ``overwrite``, ...); ``config`` is stored next to
            the TrainingArguments.
    """

    def __init__(self, run_dir: str | os.PathLike, **recorder_options: Any) -> None:
        self._run_dir = run_dir
        self._options = checked_options(run_dir, recorder_options)
        self._recorder: Recorder | None = None
        self._forward_hook: Any = None
        self._step = StepBatches()
        self._loss_summed = False
        self._optimizer_step_called = False
        self._started = False
        self._previous_excepthook: Any = None

    # ----------------------------------------------------------------- training
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if not state.is_world_process_zero:
            return
        if self._recorder is not None:
            self._close(RuntimeError("trainer.train() ended without on_train_end: an exception "
                                     "was raised and caught by the caller"))
        options = dict(self._options)
        config = dict(options.pop("config", None) or {})
        config["training_arguments"] = json_safe(args.to_dict())
        if hasattr(getattr(model, "config", None), "to_dict"):
            config["model_config"] = json_safe(model.config.to_dict())
        scaler = getattr(optimizer, "scaler", None)  # accelerate's GradScaler under fp16
        if scaler is not None:
            options.setdefault("scaler", scaler)
        if self._started:  # a second train() call with this callback continues its run
            options.update(append=True, overwrite=False)
        recorder = Recorder(self._run_dir, model, optimizer, config=config, **options)
        recorder.__enter__()
        self._recorder, self._started = recorder, True
        self._step = StepBatches()
        self._forward_hook = model.register_forward_hook(self._on_forward, with_kwargs=True)
        self._previous_excepthook, sys.excepthook = sys.excepthook, self._excepthook

    def _on_forward(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any],
                    output: Any) -> None:
        """The batch and loss of a training forward (not evaluation: eval mode or no grad)."""
        if not (module.training and torch.is_grad_enabled()):
            return
        try:
            batch = {k: v for k, v in kwargs.items() if k not in _NOT_BATCH}
            self._step.add_batch(batch if batch or not args else args[0])
            loss = output.get("loss") if isinstance(output, Mapping) else None
            if isinstance(loss, torch.Tensor):
                self._step.add_scalar("loss", loss)
                self._loss_summed = kwargs.get("num_items_in_batch") is not None
        except Exception as exc:  # noqa: BLE001 - never break the user's forward
            warn_once(self, f"could not read a training batch ({type(exc).__name__}: {exc})")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._optimizer_step_called = True
        self._record()

    def on_step_end(self, args, state, control, **kwargs):
        if not self._optimizer_step_called:  # a Trainer without on_optimizer_step
            self._record()

    def _record(self) -> None:
        if self._recorder is None:
            return
        summed = frozenset({"loss"}) if self._loss_summed else frozenset()
        self._recorder.step(**self._step.take(summed))

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self._recorder is not None:
            self._recorder.event("epoch", f"epoch {round(state.epoch or 0)} begins at global "
                                          f"step {state.global_step}")

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if self._recorder is None:
            return
        values = numeric(metrics, skip=("epoch",))
        self._recorder.event("evaluation", f"at global step {state.global_step}: " + ", ".join(
            f"{name}={value:.6g}" for name, value in values.items()))
        if self._recorder.current_step > 0:  # an evaluation before the first step has no step
            self._recorder.record_scalars(**values)

    def on_train_end(self, args, state, control, **kwargs):
        if self._recorder is not None:
            self._close(None)

    # ----------------------------------------------------------------- closing
    def _excepthook(self, exc_type, exc, tb) -> None:
        if self._recorder is not None:
            self._close(exc)
        (self._previous_excepthook or sys.__excepthook__)(exc_type, exc, tb)

    def _close(self, exc: BaseException | None) -> None:
        recorder, self._recorder = self._recorder, None
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_excepthook
        if exc is None:
            recorder.__exit__(None, None, None)
        else:
            recorder.__exit__(type(exc), exc, exc.__traceback__)
