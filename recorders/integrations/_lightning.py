"""The Lightning callback's behaviour, for both packages that ship Lightning 2.x
(``lightning.pytorch`` and ``pytorch_lightning``): each module mixes it into its own
``Callback`` class, since each Trainer accepts only callbacks of its own package."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any

from ..recorder import Recorder
from ._common import StepBatches, checked_options, json_safe, numeric, warn_once

# Trainer settings kept in the manifest's config.
_TRAINER_SETTINGS = ("max_epochs", "max_steps", "accumulate_grad_batches", "gradient_clip_val",
                     "gradient_clip_algorithm", "precision", "num_devices", "world_size")


class LightningRecording:
    """Records a Lightning ``Trainer.fit`` into `run_dir` with a :class:`recorders.Recorder`.

    One recorded step per optimizer step Lightning makes, written at the batch's end: under
    automatic optimisation every ``accumulate_grad_batches``-th batch and an epoch's last one;
    under manual optimisation every batch in which an optimizer stepped (every batch of a GAN
    whose two optimizers step in ``training_step``), and every batch until one first steps. So a
    loop that never steps (a ``training_step`` that forgets ``opt.step()``, an ``optimizer_step``
    override that runs only the closure) is recorded step by step with
    ``optimizer_stepped.<name>`` 0, while manual accumulation records its optimizer steps. Its scalars are what ``training_step``
    returned (a tensor is ``loss``, a dict's one-element entries under their keys): under
    automatic optimisation Lightning divides ``loss`` by ``accumulate_grad_batches``, so it is
    added over the step's batches and the others averaged. Its batch is the batches seen since
    the last recorded step, pooled (a pair is inputs and targets; a dict's ``labels``/``target``
    entries are targets). Hyper-parameters are the ones the step used: the values a scheduler
    set after the optimizer step are put back only while the step is written. Epochs and
    validations are events; validation metrics are scalars at the step they followed. An
    exception during ``fit`` closes the run with status ``exception`` and its traceback. Only
    global rank 0 records.

    Args:
        run_dir: the run directory (see docs/run-format.md).
        recorder_options: keyword options of :class:`recorders.Recorder`; ``config`` is stored
            next to the Trainer's settings and the module's ``hparams``.
    """

    def __init__(self, run_dir: str | os.PathLike, **recorder_options: Any) -> None:
        super().__init__()
        self._run_dir = run_dir
        self._options = checked_options(run_dir, recorder_options)
        self._recorder: Recorder | None = None
        self._step = StepBatches()
        # id(an optimizer's param_groups) -> their hyper-parameters at its last step
        self._used_hyperparameters: dict[int, list[dict[str, Any]]] = {}
        self._before_validation: dict[str, float] = {}
        self._started = False
        self._ever_stepped = False  # manual optimisation: whether any optimizer has stepped

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.is_global_zero:
            return
        options = dict(self._options)
        config = dict(options.pop("config", None) or {})
        config["trainer"] = json_safe({name: getattr(trainer, name, None)
                                       for name in _TRAINER_SETTINGS})
        config["hparams"] = json_safe(dict(getattr(pl_module, "hparams", {}) or {}))
        scaler = getattr(trainer.precision_plugin, "scaler", None)  # 16-mixed on CUDA
        if scaler is not None:
            options.setdefault("scaler", scaler)
        if self._started:  # a second fit() with this callback continues its run
            options.update(append=True, overwrite=False)
        optimizers = list(trainer.optimizers)
        recorder = Recorder(self._run_dir, pl_module,
                            optimizers[0] if len(optimizers) == 1 else optimizers,
                            config=config, **options)
        recorder.__enter__()
        self._recorder, self._started = recorder, True
        self._step = StepBatches()
        self._used_hyperparameters = {}

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._recorder is not None:
            self._recorder.event("epoch", f"epoch {trainer.current_epoch} begins at global "
                                          f"step {trainer.global_step}")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self._recorder is None:
            return
        groups = optimizer.param_groups
        self._used_hyperparameters[id(groups)] = [
            {k: v for k, v in group.items() if k != "params"} for group in groups]
        self._ever_stepped = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._recorder is None:
            return
        try:
            self._step.add_batch(batch)
            if isinstance(outputs, dict):
                for name, value in outputs.items():
                    self._step.add_scalar(str(name), value)
            elif outputs is not None:
                self._step.add_scalar("loss", outputs)
        except Exception as exc:  # noqa: BLE001 - never break the user's training
            warn_once(self, f"could not read a training batch ({type(exc).__name__}: {exc})")
        automatic = pl_module.automatic_optimization
        if not self._used_hyperparameters and not self._step_ends(trainer, automatic, batch_idx):
            return  # accumulating
        values = self._step.take(frozenset({"loss"}) if automatic else frozenset())
        with _hyperparameters_put_back(trainer.optimizers, self._used_hyperparameters):
            self._recorder.step(**values)
        self._used_hyperparameters = {}

    def _step_ends(self, trainer: Any, automatic: bool, batch_idx: int) -> bool:
        """Whether a batch in which no optimizer stepped still ends a step (see the class)."""
        if automatic:
            return (batch_idx + 1) % trainer.accumulate_grad_batches == 0 or trainer.is_last_batch
        return not self._ever_stepped

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._before_validation = numeric(trainer.callback_metrics)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._recorder is None or trainer.sanity_checking:
            return
        before = self._before_validation
        values = {name: value for name, value in numeric(trainer.callback_metrics).items()
                  if before.get(name) != value}  # what this validation logged
        self._recorder.event("validation", f"at global step {trainer.global_step}: " + ", ".join(
            f"{name}={value:.6g}" for name, value in values.items()))
        if values and self._recorder.current_step > 0:
            self._recorder.record_scalars(**values)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._recorder is not None:
            recorder, self._recorder = self._recorder, None
            recorder.__exit__(None, None, None)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self._recorder is not None:
            recorder, self._recorder = self._recorder, None
            recorder.__exit__(type(exception), exception, exception.__traceback__)


@contextmanager
def _hyperparameters_put_back(optimizers: list[Any], used: dict[int, list[dict[str, Any]]]):
    """Within the block, each stepped optimizer's param groups hold the hyper-parameters they
    had at its step (Lightning steps interval="step" schedulers before the batch ends)."""
    swaps = []
    for optimizer in optimizers:
        groups, saved = optimizer.param_groups, used.get(id(optimizer.param_groups))
        if saved is not None and len(saved) == len(groups):
            swaps.append((groups, saved, [{k: g[k] for k in values if k in g}
                                          for g, values in zip(groups, saved)]))
    for groups, saved, _ in swaps:
        for group, values in zip(groups, saved):
            group.update(values)
    try:
        yield
    finally:
        for groups, _, now in swaps:
            for group, values in zip(groups, now):
                group.update(values)
