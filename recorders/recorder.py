"""The context manager users put around their training loop.

:class:`Recorder` composes three parts, one role each: a
:class:`~recorders.tracking.ModelTracker` follows the models, parameters and optimizers and owns
every hook on them (names live in dicts keyed by identity; nothing is written onto the user's
modules); a :class:`~recorders.measurer.StepMeasurer` turns each step's tensors into stats
blocks; a :class:`~recorders.buffer.StepBuffer` keeps the rows until a flush writes them as
segments. The recorder itself owns the run directory, the manifest, checkpoints, and the exit
paths (normal exit, exception, SIGTERM, interpreter exit), and removes every hook on exit.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import signal
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Mapping

from torch import nn

from .buffer import StepBuffer
from .checkpoints import (FlightRing, SkippedTensors, StateSource, checkpoint_table,
                          live_snapshot)
from .errors import RecorderError, RecorderWarning, RunDirectoryError
from .failures import MeasureFailures
from .lock import LOCK_NAME, RunLock
from .manifest import model_structure, new_manifest, optimizer_structure, utc_now
from .measurer import StepMeasurer
from .ranks import distributed_info, rank_dir
from .scalars import ScalarReader
from .schedule import Schedule
from .tracking import ModelTracker, StructureHooks, as_models, as_optimizers
from .writer import RunWriter

__all__ = ["Recorder"]

_RUN_ENTRIES = ("manifest.json", "stats", "scalars", "events", "checkpoints")


def _safe_text(describe, exc: BaseException) -> str:
    """`describe(exc)`, or a placeholder when the exception's own __str__ raises (the run must
    still end with its final manifest)."""
    try:
        return describe(exc)
    except Exception as error:  # noqa: BLE001 - any user-defined __str__
        return f"<{type(exc).__name__}: its str() raised {type(error).__name__}>"


def _checked_options(scaler: Any, config: Mapping[str, Any] | None, flight_ring: int,
                     overwrite: bool, append: bool) -> dict[str, Any]:
    """The constructor's arguments that Schedule does not check; returns the config as JSON."""
    if scaler is not None and not (hasattr(scaler, "get_scale") and hasattr(scaler, "is_enabled")):
        raise TypeError(f"scaler must be a torch GradScaler, got {type(scaler).__name__}")
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    try:
        config_json = json.loads(json.dumps(dict(config or {}), default=str))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"config must be JSON-serialisable: {exc}") from exc
    if isinstance(flight_ring, bool) or not isinstance(flight_ring, int) or flight_ring < 0:
        raise ValueError(f"flight_ring must be an integer >= 0, got {flight_ring!r}")
    if overwrite and append:
        raise ValueError("overwrite=True and append=True exclude each other")
    return config_json


class Recorder:
    """Records per-step tensor statistics, scalars, events and checkpoints of a training run.

    >>> with Recorder("runs/exp1", model, optimizer) as rec:      # doctest: +SKIP
    ...     for x, y in loader:
    ...         ...; optimizer.step()
    ...         rec.step(loss=loss, inputs=x, targets=y)

    Args:
        run_dir: folder to write (see docs/run-format.md); must be empty or absent unless
            ``overwrite`` (replace the run's files, nothing else) or ``append`` (continue it).
            Under ``torch.distributed`` every rank passes the same folder and records into
            its sub-directory ``rank-00000``, ``rank-00001``... (recorders/ranks.py).
        model: an ``nn.Module`` or a dict ``name -> nn.Module`` (names prefix tensor names).
        optimizer: ``None`` (then pass ``lr=`` to ``step()``), an optimizer, a list (named
            ``optimizer_0``...) or a dict of them.
        scaler: a ``GradScaler``: gradients are recorded unscaled, its scale as
            ``grad_scale`` and the steps it skipped as ``scaler_skipped``.
        config: a JSON-serialisable dict stored in the manifest.
        flush_every, flush_seconds: write buffered steps every N steps or T seconds.
        checkpoint_every: full-state checkpoint every N steps (0: never).
        flight_ring, flight_every: keep the last ``flight_ring`` states sampled every
            ``flight_every`` steps as CPU copies (memory: ``flight_ring`` x model+optimizer
            state; 0 disables) and write them when the first non-finite value appears or the
            block raises.
        activation_every: record leaf-module outputs every N steps (default every step).
        strict: raise :class:`RecorderWriteError` on a failed write, and
            :class:`RecorderMeasureError` where a tensor cannot be measured, instead of warning
            once and recording on without it (training is never interrupted by default).
    """

    def __init__(self, run_dir: str | os.PathLike, model: nn.Module | Mapping[str, nn.Module],
                 optimizer: Any = None, *, scaler: Any = None,
                 config: Mapping[str, Any] | None = None,
                 flush_every: int = 50, flush_seconds: float = 10.0,
                 checkpoint_every: int = 500, flight_ring: int = 4, flight_every: int = 10,
                 activation_every: int = 1,
                 overwrite: bool = False, append: bool = False, strict: bool = False) -> None:
        models, optimizers = as_models(model), as_optimizers(optimizer)
        self._config = _checked_options(scaler, config, flight_ring, overwrite, append)
        self._schedule = Schedule(flush_every=flush_every, flush_seconds=flush_seconds,
                                  checkpoint_every=checkpoint_every, flight_every=flight_every,
                                  activation_every=activation_every)
        self._options = {"flush_every": flush_every, "flush_seconds": float(flush_seconds),
                         "checkpoint_every": checkpoint_every, "flight_ring": flight_ring,
                         "flight_every": flight_every, "activation_every": activation_every,
                         "overwrite": bool(overwrite),
                         "append": bool(append), "strict": bool(strict)}
        self._overwrite = overwrite
        self._append = append
        self._distributed = distributed_info()  # None in a single process
        self.run_dir = rank_dir(Path(run_dir), self._distributed)
        self._previous_manifest = self._check_run_dir()
        self._lock: RunLock | None = None
        self._manifest: dict[str, Any] = {}  # this one dict, filled in when recording starts
        self._failures = MeasureFailures(self._manifest, strict=strict)
        self._writer = RunWriter(self.run_dir, strict=strict)
        self._buffer = StepBuffer(self._writer, self._manifest)
        self._tracker = ModelTracker(models, optimizers, self._failures)
        self._measurer = StepMeasurer(self._tracker, scaler, self._failures)
        self._flight = FlightRing(flight_ring)
        self._checkpoint_skipped = SkippedTensors(strict=strict)
        self._source = StateSource(models, optimizers, self._tracker.param_names)
        self._read_scalars = ScalarReader(strict=strict)
        self._open = False
        self._closed = False
        self._step = 0
        self._nonfinite_seen = False
        self._terminated_by: str | None = None
        self._in_sigterm = False
        self._previous_sigterm: Any = None

    # ----------------------------------------------------------------- set-up and tear-down
    def _check_run_dir(self) -> dict[str, Any] | None:
        d = self.run_dir
        if d.exists() and not d.is_dir():
            raise RunDirectoryError(f"run directory {d} exists and is not a directory")
        entries = [e for e in d.iterdir() if e.name != LOCK_NAME] if d.is_dir() else []
        previous = None
        if entries and self._append:
            try:
                previous = json.loads((d / "manifest.json").read_text())
            except (OSError, ValueError) as exc:
                raise RunDirectoryError(f"cannot append to {d}: no readable manifest.json "
                                        f"({exc})") from exc
        elif entries and not self._overwrite:
            raise RunDirectoryError(f"run directory {d} is not empty; pass overwrite=True to "
                                    "replace the run or append=True to continue it")
        parent = d if d.exists() else next((p for p in d.parents if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise RunDirectoryError(f"run directory {d} is not writable")
        return previous

    def __enter__(self) -> "Recorder":
        if self._open or self._closed:
            raise RecorderError("a Recorder can be entered only once")
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirectoryError(f"cannot create run directory {self.run_dir}: {exc}") from exc
        self._lock = RunLock.acquire(self.run_dir)  # refuses a directory another Recorder writes
        try:
            # Checked again now that it is ours: a run may have been written here since __init__.
            self._previous_manifest = self._check_run_dir()
            return self._start()
        except BaseException:
            self._lock.release()
            raise

    def _start(self) -> "Recorder":
        self._prepare_run_dir()
        self._write_first_manifest()
        tracker = self._tracker
        self._measurer.follow(tracker.follow_params())
        tracker.install(StructureHooks(
            on_activation=self._measurer.on_activation,
            on_grad_accumulated=self._measurer.on_grad_accumulated,
            before_grad_accumulated=self._measurer.before_grad_accumulated,
            before_optimizer_step=self._measurer.before_optimizer_step,
            on_structure_change=self._follow_structure))
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self._on_interpreter_exit)
        self._buffer.restart_clock()
        self._measurer.watch_activations = self._schedule.should_record_activations(self._step)
        self._measurer.start()
        self._open = True
        return self

    def _prepare_run_dir(self) -> None:
        try:
            if self._overwrite and self.run_dir.is_dir():
                for entry in _RUN_ENTRIES:
                    path = self.run_dir / entry
                    if path.is_dir():
                        shutil.rmtree(path)
                    elif path.exists():
                        path.unlink()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._writer.prepare()
        except OSError as exc:
            raise RunDirectoryError(f"cannot prepare run directory {self.run_dir}: {exc}") from exc

    def _write_first_manifest(self) -> None:
        tracker, manifest = self._tracker, self._manifest
        manifest.update(new_manifest(models=tracker.models, optimizers=tracker.optimizers,
                                     param_names=tracker.param_names,
                                     param_models=tracker.param_models,
                                     options=self._options, config=self._config))
        manifest["tied_parameters"] = {k: list(v) for k, v in tracker.tied.items()}
        manifest["notes"] = []
        if tracker.compiled:
            note = (f"activations of torch.compile'd {', '.join(tracker.compiled)} are not "
                    "recorded (forward hooks would be traced into the compiled graph); "
                    "parameters, gradients, updates, optimizer state, inputs and scalars are")
            manifest["notes"].append(note)
            warnings.warn(f"postmortem recorder: {note}", RecorderWarning, stacklevel=3)
        if self._distributed is not None:
            manifest["distributed"] = dict(self._distributed)
        if self._previous_manifest is not None:
            prev = self._previous_manifest
            manifest["run_id"] = prev.get("run_id", manifest["run_id"])
            manifest["started_at"] = prev.get("started_at", manifest["started_at"])
            last = prev.get("last_step")
            self._step = 0 if last is None else int(last) + 1
            manifest["last_step"] = last
        if not self._writer.write_manifest(manifest):
            raise RunDirectoryError(f"run directory {self.run_dir} is not writable")

    def _follow_structure(self) -> None:
        """A module or parameter was assigned into a model (a new head, say), or a lazy module
        set its parameters: follow what the models hold now, from this step on, and mark the
        step with a `model_changed` event that says what changed."""
        tracker = self._tracker
        tracker.structure_changed = False
        try:
            before = tracker.structure()
            tracker.scan()
            self._measurer.follow(tracker.follow_params())
            tracker.sync_leaf_hooks()
            after = tracker.structure()
            self._manifest["models"] = {name: model_structure(m)
                                        for name, m in tracker.models.items()}
            self._manifest["tied_parameters"] = {k: list(v) for k, v in tracker.tied.items()}
            self._manifest["optimizers"] = {
                name: optimizer_structure(o, tracker.param_names, tracker.param_models)
                for name, o in tracker.optimizers.items()}
        except Exception as exc:  # noqa: BLE001 - never break the user's forward or step
            self._failures("the models' new structure", exc)
            return
        self._buffer.add_event(self._step, "model_changed", tracker.changes(before, after))

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self._open:
            return False
        try:
            if exc_type is None or (issubclass(exc_type, SystemExit) and exc.code in (0, None)):
                status, info, reason = "completed", None, None
            elif self._terminated_by is not None and issubclass(
                    exc_type, (SystemExit, KeyboardInterrupt)):
                status, info, reason = "terminated", None, None
            else:
                status = "exception"
                info = {"type": exc_type.__name__, "message": _safe_text(str, exc),
                        "traceback": _safe_text(lambda e: "".join(
                            traceback.format_exception(exc_type, e, tb)), exc)}
                reason = "exception"
            self._finish(status, info, flight_reason=reason)
        finally:
            self._remove_hooks()
        return False

    def _remove_hooks(self) -> None:
        self._tracker.remove_hooks()
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        atexit.unregister(self._on_interpreter_exit)
        self._lock.release()
        self._open = False
        self._closed = True

    def _finish(self, status: str, info: dict[str, Any] | None, flight_reason: str | None) -> None:
        if flight_reason is not None:
            self._dump_flight(flight_reason)
        self.flush()
        if self._terminated_by is not None and status == "terminated":
            info = {"type": "signal", "message": self._terminated_by, "traceback": ""}
        self._manifest.update(status=status, exception=info, ended_at=utc_now(),
                              failed_writes=self._writer.failed_writes)
        self._writer.write_manifest(self._manifest)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        if self._in_sigterm:  # a second SIGTERM while the first is being handled
            return
        self._in_sigterm = True
        try:
            self._terminated_by = signal.Signals(signum).name
            if self._open:
                self._finish("terminated", None, flight_reason=None)
            previous = self._previous_sigterm
            if callable(previous):
                previous(signum, frame)
            elif previous == signal.SIG_DFL or previous is None:
                self._remove_hooks()
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
        finally:
            self._in_sigterm = False

    def _on_interpreter_exit(self) -> None:
        if self._open:
            self.flush()

    # ----------------------------------------------------------------- public API
    def step(self, *, inputs: Any = None, targets: Any = None, **scalars: Any) -> int:
        """Record one training step; call it once per optimizer step, after
        ``optimizer.step()`` (with gradient accumulation: after the step that ends the
        micro-batches, whose gradients and activations the record pools).

        Keywords: ``inputs``/``targets`` (tensor, or dict/list of tensors) and any named scalar
        (``loss=...``, ``loss_d=...``, ``accuracy=...``). Returns the step number recorded.
        """
        if not self._open:
            raise RecorderError("Recorder.step() called outside the `with Recorder(...)` block")
        values, left_out = self._read_scalars(scalars)
        for name, exc in left_out:
            self._failures(f"scalar {name}", exc)
        step = self._step
        wall = time.time()
        if self._tracker.structure_changed or self._tracker.lazy_initialized():
            # No model's forward ran since the change (a loop calling submodules), or a lazy
            # module's forward set its parameters: they have no update this step.
            self._follow_structure()
        else:
            self._measurer.fresh = set()
        measured = self._measurer.measure(step, inputs, targets, values)
        self._buffer.add_step(measured.blocks, self._measurer.scalar_rows(step, measured, wall))
        nonfinite = measured.nonfinite or not all(map(math.isfinite, measured.scalars.values()))

        self._step = step + 1
        self._measurer.watch_activations = self._schedule.should_record_activations(self._step)
        self._manifest["last_step"] = step
        if nonfinite and not self._nonfinite_seen:
            self._nonfinite_seen = True
            self._manifest["first_nonfinite_step"] = step
            self._dump_flight("first_nonfinite")
        self._scheduled_state(step)
        if self._buffer.due(self._schedule):
            self.flush()
        return step

    def event(self, kind: str, message: str = "") -> None:
        """Mark something that happened (``domain_switch``, ``lr_drop``...) from the next step on."""
        if not isinstance(kind, str) or not kind:
            raise ValueError("event kind must be a non-empty string")
        if not isinstance(message, str):
            raise TypeError(f"event message must be a string, got {type(message).__name__}")
        if not self._open:
            raise RecorderError("Recorder.event() called outside the `with Recorder(...)` block")
        self._buffer.add_event(self._step, kind, message)

    def record_scalars(self, **scalars: Any) -> int:
        """Scalars measured after the last recorded step, before the next one (evaluation
        metrics): written at the last recorded step, which is returned."""
        if not self._open:
            raise RecorderError("Recorder.record_scalars() called outside the `with Recorder(...)` "
                                "block")
        if self._manifest.get("last_step") is None:
            raise RecorderError("Recorder.record_scalars() needs a recorded step: call step() first")
        step = self._step - 1
        values, left_out = self._read_scalars(scalars)
        for name, exc in left_out:
            self._failures(f"scalar {name}", exc)
        self._buffer.add_scalars((step, name, float(value)) for name, value in values.items())
        return step

    @property
    def current_step(self) -> int:
        """The step number the next ``step()`` call will record."""
        return self._step

    def flush(self) -> None:
        """Write everything buffered as new segments (also done automatically; re-entrant: a
        SIGTERM in the middle of a flush finishes it from the handler)."""
        self._buffer.flush()

    # ----------------------------------------------------------------- checkpoints
    def _scheduled_state(self, step: int) -> None:
        """The scheduled checkpoint and flight-ring sample of `step`, where they fall."""
        if self._schedule.should_checkpoint(step):
            self._guard_state("the checkpoint", lambda: self._writer.write_checkpoint(
                f"step-{step:08d}.parquet",
                checkpoint_table([live_snapshot(step, self._source)], self._checkpoint_skipped),
                {"step": str(step), "reason": "scheduled"}))
        if self._schedule.should_sample_flight(step):
            self._guard_state("the flight ring", lambda: self._flight.sample(
                step, self._source, self._checkpoint_skipped))

    def _guard_state(self, what: str, save) -> None:
        """Checkpointing never breaks training: a failure is a measure error (raised under
        ``strict``); the tensors left out are named in the manifest."""
        try:
            save()
        except RecorderError:  # strict: a write or a tensor that failed
            raise
        except Exception as exc:  # noqa: BLE001 - recording degrades, training goes on
            self._failures(what, exc)
        if self._checkpoint_skipped:
            self._manifest["checkpoint_skipped"] = dict(self._checkpoint_skipped)

    def _dump_flight(self, reason: str) -> None:
        self._guard_state("the flight recorder", lambda: self._write_flight(reason))

    def _write_flight(self, reason: str) -> None:
        last = self._step - 1
        snapshots = [s for s in self._flight.snapshots() if s.step != last]
        if last >= 0:
            snapshots.append(live_snapshot(last, self._source))
        if not snapshots:
            return
        name = f"flight-{max(last, 0):08d}.parquet"
        self._writer.write_checkpoint(name, checkpoint_table(snapshots, self._checkpoint_skipped),
                                      {"step": str(last), "reason": reason})
