"""The context manager users put around their training loop.

It owns every hook it installs (forward hooks on leaf modules, step hooks on optimizers, a
SIGTERM handler, an atexit callback) and removes them on exit. Names live in dicts; nothing is
ever written onto the user's modules.
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
from dataclasses import dataclass, field
from numbers import Real
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn.parameter import is_lazy
from torch.nn.modules.module import (register_module_module_registration_hook,
                                     register_module_parameter_registration_hook)

from .checkpoints import FlightRing, StateSource, checkpoint_table, live_snapshot
from .errors import RecorderError, RecorderMeasureError, RecorderWarning, RunDirectoryError
from .manifest import (hyperparameters, model_structure, new_manifest, optimizer_structure,
                       utc_now)
from .schedule import Schedule
from .rows import StatsBlock, stats_columns
from .statistics import (MomentBatch, Moments, activation_moments, combine, measure_now,
                         moments_rows, params_and_updates, row_moments, summarize)
from .writer import RunWriter, events_table, scalars_table, stats_table

__all__ = ["Recorder"]

_RUN_ENTRIES = ("manifest.json", "stats", "scalars", "events", "checkpoints")
_SATURATING = {nn.Tanh: "tanh", nn.Sigmoid: "sigmoid"}
_IO_KEYWORDS = ("inputs", "targets")
# Where optimizer wrappers keep the optimizer they wrap.
_WRAPPED_OPTIMIZER_ATTRIBUTES = ("optimizer", "_optimizer")
# What became of a parameter's gradient this step.
_GRAD_PENDING, _GRAD_MEASURED, _GRAD_NONE, _GRAD_LOST = range(4)


@dataclass
class _Param:
    """One recorded parameter and what the recorder keeps about it between steps."""

    name: str
    model: str
    tensor: nn.Parameter
    prev: torch.Tensor  # value at the previous record, for the update


@dataclass
class _StepBuffers:
    stats: list[StatsBlock] = field(default_factory=list)
    scalars: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    steps: int = 0
    written: set[str] = field(default_factory=set)  # tables already on disk

    def __bool__(self) -> bool:
        return bool(self.steps or self.stats or self.scalars or self.events)


def _as_models(model: Any) -> dict[str, nn.Module]:
    if isinstance(model, nn.Module):
        return {"model": model}
    if isinstance(model, Mapping) and model:
        out = {}
        for name, m in model.items():
            if not isinstance(name, str) or not name or "." in name:
                raise ValueError(f"model names must be non-empty strings without '.', got {name!r}")
            if not isinstance(m, nn.Module):
                raise TypeError(f"model {name!r} is a {type(m).__name__}, not a torch.nn.Module")
            out[name] = m
        return out
    raise TypeError(f"model must be a torch.nn.Module or a non-empty dict of name -> nn.Module, "
                    f"got {type(model).__name__}")


def _unwrapped_optimizer(optimizer: Any) -> Any:
    """The optimizer a wrapper keeps in ``.optimizer`` or ``._optimizer`` (accelerate's
    AcceleratedOptimizer, Lightning's LightningOptimizer): wrappers pass as optimizers by class
    but lack the step-hook tables; the one they wrap steps, and holds the param groups."""
    seen = {id(optimizer)}
    while True:
        inner = next((found for attr in _WRAPPED_OPTIMIZER_ATTRIBUTES
                      if isinstance(found := getattr(optimizer, attr, None), torch.optim.Optimizer)
                      and id(found) not in seen), None)
        if inner is None:
            return optimizer
        optimizer = inner
        seen.add(id(inner))


def _as_optimizers(optimizer: Any) -> dict[str, torch.optim.Optimizer]:
    if optimizer is None:
        return {}
    optimizer = _unwrapped_optimizer(optimizer)
    if isinstance(optimizer, torch.optim.Optimizer):
        return {"optimizer": optimizer}
    if isinstance(optimizer, Mapping):
        items = list(optimizer.items())
    elif isinstance(optimizer, (list, tuple)):
        items = [(f"optimizer_{i}", o) for i, o in enumerate(optimizer)]
    else:
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, a list or a dict of them, "
                        f"got {type(optimizer).__name__}")
    out = {}
    for name, opt in items:
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"optimizer names must be non-empty strings without '.', got {name!r}")
        opt = _unwrapped_optimizer(opt)
        if not isinstance(opt, torch.optim.Optimizer):
            raise TypeError(f"optimizer {name!r} is a {type(opt).__name__}, "
                            "not a torch.optim.Optimizer")
        out[name] = opt
    return out


def _named_tensors(prefix: str, value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors in a batch: a tensor, numeric array, or (nested) dict/list/tuple of them."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":  # strings, objects and the like carry no statistics
            yield prefix, torch.from_numpy(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _named_tensors(f"{prefix}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _named_tensors(f"{prefix}.{i}", item)


def _stats_table(blocks: list[StatsBlock]):
    return stats_table(stats_columns(blocks))


def _scalar_value(name: str, value: Any) -> torch.Tensor | float:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"rec.step({name}=...) needs a scalar, got a tensor of shape "
                             f"{tuple(value.shape)}")
        return value
    if isinstance(value, Real) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"rec.step({name}=...) needs a number or a one-element tensor, "
                    f"got {type(value).__name__}")


class Recorder:
    """Records per-step tensor statistics, scalars, events and checkpoints of a training run.

    >>> with Recorder("runs/exp1", model, optimizer) as rec:      # doctest: +SKIP
    ...     for x, y in loader:
    ...         ...; optimizer.step()
    ...         rec.step(loss=loss, inputs=x, targets=y)

    Args:
        run_dir: folder to write (see docs/run-format.md); must be empty or absent unless
            ``overwrite`` (replace the run's files, nothing else) or ``append`` (continue it).
        model: an ``nn.Module`` or a dict ``name -> nn.Module`` (names prefix tensor names).
        optimizer: ``None``, an optimizer, a list (named ``optimizer_0``...) or a dict of them.
        scaler: a ``GradScaler``; its scale is recorded as ``grad_scale``.
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
        self._models = _as_models(model)
        self._optimizers = _as_optimizers(optimizer)
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
        self._schedule = Schedule(flush_every=flush_every, flush_seconds=flush_seconds,
                                  checkpoint_every=checkpoint_every, flight_every=flight_every,
                                  activation_every=activation_every)
        self._options = {"flush_every": flush_every, "flush_seconds": float(flush_seconds),
                         "checkpoint_every": checkpoint_every, "flight_ring": flight_ring,
                         "flight_every": flight_every, "activation_every": activation_every,
                         "overwrite": bool(overwrite),
                         "append": bool(append), "strict": bool(strict)}
        self._scaler = scaler
        self._config = config_json
        self._overwrite = overwrite
        self._append = append
        self.run_dir = Path(run_dir)
        self._previous_manifest = self._check_run_dir()
        self._writer = RunWriter(self.run_dir, strict=strict)
        self._strict = strict
        self._measure_errors: dict[str, str] = {}  # where -> the first error there
        self._flight = FlightRing(flight_ring)

        self._params: list[_Param] = []
        self._param_index: dict[int, int] = {}  # id(parameter) -> its place in _params
        self._param_names: dict[int, str] = {}
        self._param_models: dict[int, str] = {}
        self._leaves: dict[str, tuple[nn.Module, str | None]] = {}
        self._module_ids: set[int] = set()
        self._scan_models()
        self._source = StateSource(self._models, self._optimizers, self._param_names)

        self._handles: list[Any] = []
        self._leaf_hooks: dict[str, tuple[nn.Module, Any]] = {}  # leaf -> (module, its hook)
        self._structure_changed = False  # a module or parameter was assigned into a model
        self._lazy: list[nn.Parameter] = []  # not followed until their module's first forward
        self._fresh: set[int] = set()  # followed since this step's optimizer step: no update
        self._open = False
        self._closed = False
        self._step = 0
        self._manifest: dict[str, Any] = {}
        self._buffers = _StepBuffers()
        self._unwritten: list[_StepBuffers] = []  # handed to flush(), not yet all on disk
        self._last_flush = time.monotonic()
        self._activations: dict[str, Moments] = {}
        self._batch = MomentBatch()
        self._pending_activations: list[tuple[str, int]] = []
        self._watch_activations = True  # whether the step being run records activations
        self._nonfinite_seen = False
        self._terminated_by: str | None = None
        self._in_sigterm = False
        self._previous_sigterm: Any = None

    # ----------------------------------------------------------------- set-up and tear-down
    def _check_run_dir(self) -> dict[str, Any] | None:
        d = self.run_dir
        if d.exists() and not d.is_dir():
            raise RunDirectoryError(f"run directory {d} exists and is not a directory")
        entries = list(d.iterdir()) if d.is_dir() else []
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
        self._manifest = new_manifest(models=self._models, optimizers=self._optimizers,
                                      param_names=self._param_names,
                                      param_models=self._param_models,
                                      options=self._options, config=self._config)
        if self._previous_manifest is not None:
            prev = self._previous_manifest
            self._manifest["run_id"] = prev.get("run_id", self._manifest["run_id"])
            self._manifest["started_at"] = prev.get("started_at", self._manifest["started_at"])
            last = prev.get("last_step")
            self._step = 0 if last is None else int(last) + 1
            self._manifest["last_step"] = last
        if not self._writer.write_manifest(self._manifest):
            raise RunDirectoryError(f"run directory {self.run_dir} is not writable")

        self._sync_params()
        self._sync_leaf_hooks()
        for name, model in self._models.items():
            self._hook(f"model {name}", model.register_forward_pre_hook, self._before_forward)
        self._hook("module registration", register_module_module_registration_hook,
                   self._on_registration)
        self._hook("parameter registration", register_module_parameter_registration_hook,
                   self._on_registration)
        for name, opt in self._optimizers.items():
            self._hook(f"optimizer {name}", opt.register_step_pre_hook, self._capture_grads_hook)
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self._on_interpreter_exit)
        self._last_flush = time.monotonic()
        self._watch_activations = self._schedule.should_record_activations(self._step)
        self._open = True
        return self

    def _hook(self, where: str, register: Any, hook: Any) -> Any:
        """Install a hook the recorder owns; one that cannot be installed (an object that only
        looks like a module or an optimizer) warns once and recording goes on without it."""
        try:
            handle = register(hook)
        except Exception as exc:  # noqa: BLE001 - never break the user's training
            self._measure_failed(f"the hook on {where}", exc)
            return None
        self._handles.append(handle)
        return handle

    def _scan_models(self) -> None:
        """Name the models' parameters and leaf modules as they are now (in place: the state
        source holds these dicts)."""
        several = len(self._models) > 1
        names: dict[int, str] = {}
        owners: dict[int, str] = {}
        leaves: dict[str, tuple[nn.Module, str | None]] = {}
        modules: set[int] = set()
        for model_name, m in self._models.items():
            prefix = f"{model_name}." if several else ""
            for name, p in m.named_parameters():
                if id(p) not in names:  # shared parameters are recorded once
                    names[id(p)] = prefix + name
                    owners[id(p)] = model_name
            for name, module in m.named_modules():
                modules.add(id(module))
                if next(module.children(), None) is None:
                    leaf = prefix + name if name else model_name
                    leaves[leaf] = (module, _SATURATING.get(type(module)))
        for mapping, now in ((self._param_names, names), (self._param_models, owners),
                             (self._leaves, leaves)):
            mapping.clear()
            mapping.update(now)
        self._module_ids = modules

    def _sync_params(self) -> None:
        """Follow every parameter the models hold now, but a lazy module's before its first
        forward. One already followed keeps its saved copy, last norm and this step's
        gradient; a new one is measured from its value now (`_fresh`)."""
        followed = self._param_index
        params, norms, carried, fresh, seen = [], [], [], set(), set()
        self._lazy = []
        with torch.no_grad():
            for m in self._models.values():
                for p in m.parameters():
                    if id(p) in seen:  # shared by two models: followed once
                        continue
                    seen.add(id(p))
                    if is_lazy(p):
                        self._lazy.append(p)
                        continue
                    if id(p) in followed:
                        i = followed[id(p)]
                        prm, norm = self._params[i], float(self._prev_norms[i])
                        carried.append((len(params), i))
                    else:
                        prm = _Param("", "", p, p.detach().clone())
                        norm = summarize(measure_now(prm.prev, sums=False)).norm
                        fresh.add(len(params))
                    prm.name, prm.model = self._param_names[id(p)], self._param_models[id(p)]
                    params.append(prm)
                    norms.append(norm)
        # Gradients as the optimizers' pre-step hooks found them (else read at record).
        grads = np.full((len(params), len(Moments._fields)), np.nan)
        grad_state = np.full(len(params), _GRAD_PENDING, dtype=np.int8)
        if carried:
            now, before = map(list, zip(*carried))
            grads[now], grad_state[now] = self._grads[before], self._grad_state[before]
        self._params, self._fresh, self._grads, self._grad_state = params, fresh, grads, grad_state
        self._param_index = {id(p.tensor): i for i, p in enumerate(params)}
        self._param_labels = [p.name for p in params]
        model_numbers = {name: i for i, name in enumerate(self._models)}
        self._param_model = np.array([model_numbers[p.model] for p in params], dtype=np.intp)
        self._prev_norms = np.array(norms, dtype=np.float64)  # at the last record, for ratios

    def _sync_leaf_hooks(self) -> None:
        """A forward hook on every leaf module the models hold now, and on no other."""
        for name, (module, handle) in list(self._leaf_hooks.items()):
            if self._leaves.get(name, (None,))[0] is not module:
                handle.remove()
                del self._leaf_hooks[name]
        for name, (module, saturation) in self._leaves.items():
            if name not in self._leaf_hooks:
                try:
                    handle = module.register_forward_hook(self._activation_hook(name, saturation))
                except Exception as exc:  # noqa: BLE001 - never break the user's training
                    self._measure_failed(f"the hook on module {name}", exc)
                    continue
                self._leaf_hooks[name] = (module, handle)

    def _on_registration(self, module: nn.Module, name: str, value: Any) -> None:
        """torch calls this for every module or parameter assigned into any module."""
        if id(module) in self._module_ids:
            self._structure_changed = True

    def _before_forward(self, module: nn.Module, args: Any) -> None:
        if self._structure_changed:
            self._follow_structure()

    def _follow_structure(self) -> None:
        """A module or parameter was assigned into a model (a new head, say), or a lazy module
        set its parameters: follow what the models hold now, from this step on, and mark the
        step with a `model_changed` event that says what changed."""
        self._structure_changed = False
        try:
            before = self._structure()
            self._scan_models()
            self._sync_params()
            self._sync_leaf_hooks()
            after = self._structure()
            self._manifest["models"] = {name: model_structure(m)
                                        for name, m in self._models.items()}
            self._manifest["optimizers"] = {
                name: optimizer_structure(o, self._param_names, self._param_models)
                for name, o in self._optimizers.items()}
        except Exception as exc:  # noqa: BLE001 - never break the user's forward or step
            self._measure_failed("the models' new structure", exc)
            return
        (params, lazy, leaves), (params_now, lazy_now, leaves_now) = before, after
        changes = (
            ("added", params_now.keys() - params.keys()),
            ("removed", params.keys() - params_now.keys()),
            ("replaced", {n for n in params_now.keys() & params.keys()
                          if params_now[n] != params[n]}),
            ("initialized", lazy - lazy_now),
            ("new modules", {n for n in leaves_now if leaves_now[n] != leaves.get(n)}),
        )
        message = "; ".join(f"{word} {', '.join(sorted(names))}"
                            for word, names in changes if names)
        self._buffers.events.append((self._step, "model_changed", message, time.time()))

    def _structure(self) -> tuple[dict[str, int], set[str], dict[str, int]]:
        """Parameter name -> id, names of lazy parameters, leaf module name -> id."""
        return ({name: pid for pid, name in self._param_names.items()},
                {self._param_names[id(p)] for p in self._lazy},
                {name: id(module) for name, (module, _) in self._leaves.items()})

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
                info = {"type": exc_type.__name__, "message": str(exc),
                        "traceback": "".join(traceback.format_exception(exc_type, exc, tb))}
                reason = "exception"
            self._finish(status, info, flight_reason=reason)
        finally:
            self._remove_hooks()
        return False

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for _, handle in self._leaf_hooks.values():
            handle.remove()
        self._leaf_hooks.clear()
        if threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        atexit.unregister(self._on_interpreter_exit)
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

    # ----------------------------------------------------------------- hooks
    def _activation_hook(self, name: str, saturation: str | None):
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not self._watch_activations:
                return
            outputs = (("", output),) if isinstance(output, torch.Tensor) \
                else _named_tensors("", output)
            for suffix, t in outputs:
                if not t.is_floating_point():
                    continue
                key = name + suffix
                try:
                    if t.is_cpu:  # reading back is free on the host
                        m = activation_moments(t, saturation)
                        seen = self._activations.get(key)
                        self._activations[key] = m if seen is None else combine(seen, m)
                    else:  # measured on the device; read back with the rest of the step
                        index = self._batch.add(t, sums=True, zeros=True,
                                                saturation=saturation, exact=True)
                        self._pending_activations.append((key, index))
                except Exception as exc:  # noqa: BLE001 - never break the user's forward
                    self._measure_failed(f"activation {key}", exc)
        return hook

    def _measure_failed(self, where: str, exc: Exception) -> None:
        """A tensor could not be measured: raise under ``strict``, else warn once and go on
        without it (the first error per place is kept in the manifest)."""
        message = f"{type(exc).__name__}: {exc}"
        if self._strict:
            raise RecorderMeasureError(f"could not measure {where}: {message}") from exc
        if not self._measure_errors:
            warnings.warn(f"postmortem recorder: could not measure {where} ({message}); "
                          "recording goes on without it", RecorderWarning, stacklevel=3)
        self._measure_errors.setdefault(where, message)
        self._manifest["measure_errors"] = dict(self._measure_errors)

    def _capture_grads_hook(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Read gradients before the optimizer consumes them (the loop may zero them next)."""
        indices = [self._param_index[id(p)] for group in optimizer.param_groups
                   for p in group["params"] if id(p) in self._param_index]
        try:
            self._measure_grads(indices)
        except Exception as exc:  # noqa: BLE001 - never break the user's optimizer.step()
            self._measure_failed("gradients", exc)
            self._grad_state[indices] = _GRAD_LOST  # rec.step() writes no gradient row for them

    def _measure_grads(self, indices: list[int]) -> None:
        batch = MomentBatch()
        measured = []
        for i in indices:
            g = self._params[i].tensor.grad
            if g is None:
                self._grad_state[i] = _GRAD_NONE
            else:
                batch.add(g, zeros=True)
                measured.append(i)
        if measured:
            self._grads[measured] = batch.read()[0]
            self._grad_state[measured] = _GRAD_MEASURED

    # ----------------------------------------------------------------- public API
    def step(self, *, inputs: Any = None, targets: Any = None, **scalars: Any) -> int:
        """Record one training step; call it once per step, after ``optimizer.step()``.

        Keywords: ``inputs``/``targets`` (tensor, or dict/list of tensors) and any named scalar
        (``loss=...``, ``loss_d=...``, ``accuracy=...``). Returns the step number recorded.
        """
        if not self._open:
            raise RecorderError("Recorder.step() called outside the `with Recorder(...)` block")
        values = {name: _scalar_value(name, v) for name, v in scalars.items()}
        step = self._step
        wall = time.time()
        if self._structure_changed or any(not is_lazy(p) for p in self._lazy):
            # No model's forward ran since the change (a loop calling submodules), or a lazy
            # module's forward set its parameters: they have no update this step.
            self._follow_structure()
        else:
            self._fresh = set()
        try:
            blocks, values, grad_sumsq, nonfinite = self._measure(step, inputs, targets, values)
        except Exception as exc:  # noqa: BLE001 - never break the training loop
            self._measure_failed("the step's tensors", exc)
            blocks, grad_sumsq, nonfinite = [], None, False
            values = self._readable_scalars(values)
            self._reset_step_state()
        self._buffers.stats.extend(blocks)

        scalar_rows = self._buffers.scalars
        for name, value in values.items():
            scalar_rows.append((step, name, value))
            nonfinite = nonfinite or not math.isfinite(value)
        if grad_sumsq is not None:
            scalar_rows.append((step, "grad_norm", math.sqrt(grad_sumsq.sum())))
            if len(self._models) > 1:
                for model_name, sumsq in zip(self._models, grad_sumsq.tolist()):
                    scalar_rows.append((step, f"grad_norm.{model_name}", math.sqrt(sumsq)))
        first = True
        for opt_name, opt in self._optimizers.items():
            for g, group in enumerate(opt.param_groups):
                for hp, value in hyperparameters(group).items():
                    if first and hp == "lr":
                        scalar_rows.append((step, "lr", value))
                        first = False
                    scalar_rows.append((step, f"hp.{opt_name}.{g}.{hp}", value))
        if self._scaler is not None and self._scaler.is_enabled():
            scalar_rows.append((step, "grad_scale", float(self._scaler.get_scale())))
        scalar_rows.append((step, "wall_time", wall))

        self._step = step + 1
        self._watch_activations = self._schedule.should_record_activations(self._step)
        self._buffers.steps += 1
        self._manifest["last_step"] = step
        if nonfinite and not self._nonfinite_seen:
            self._nonfinite_seen = True
            self._manifest["first_nonfinite_step"] = step
            self._dump_flight("first_nonfinite")
        if self._schedule.should_checkpoint(step):
            snap = live_snapshot(step, self._source)
            self._writer.write_checkpoint(f"step-{step:08d}.parquet", checkpoint_table([snap]),
                                          {"step": str(step), "reason": "scheduled"})
        if self._schedule.should_sample_flight(step):
            self._flight.sample(step, self._source)
        if self._schedule.should_flush(self._buffers.steps, time.monotonic() - self._last_flush):
            self.flush()
        return step

    def _measure(self, step: int, inputs: Any, targets: Any, values: dict[str, Any]
                 ) -> tuple[list[StatsBlock], dict[str, float], np.ndarray, bool]:
        """The step's stats blocks, its scalars as floats, each model's sum of squared
        gradients, and whether anything was non-finite."""
        batch = self._batch
        pending = np.flatnonzero(self._grad_state == _GRAD_PENDING)
        if pending.size:  # no optimizer stepped them
            self._measure_grads(pending.tolist())
        width = len(Moments._fields)
        params = np.empty((len(self._params), width))
        updates = np.full((len(self._params), width), np.nan)  # NaN: no update this step

        with torch.no_grad():
            current = [p.tensor.detach() for p in self._params]
            # A parameter moved to another device, cast or reshaped since the last record has
            # no update this step: its saved copy starts again from its new value.
            moved = {i for i, (prm, now) in enumerate(zip(self._params, current))
                     if (prm.prev.shape, prm.prev.dtype, prm.prev.device)
                     != (now.shape, now.dtype, now.device)}
            moved |= self._fresh
            for i in moved:
                self._params[i].prev = current[i].clone()
            prevs = [p.prev for p in self._params]
            # Reading back is free on the host: measure parameters and updates and refill
            # `prev` at once, in one fused pass where the kernel applies.
            on_host = [i for i, prev in enumerate(prevs) if prev.is_cpu and i not in moved]
            if on_host:
                params[on_host], updates[on_host] = params_and_updates(
                    [(current[i], prevs[i]) for i in on_host])
            queued = []  # (parameter, its index in the batch, its update's index or None)
            refresh: list[tuple[torch.Tensor, torch.Tensor]] = []  # prev <- now after the read
            host = set(on_host)
            for i, (now, prev) in enumerate(zip(current, prevs)):
                if i in host:
                    continue
                update = None
                param = batch.add(now, sums=True)
                if i not in moved:
                    prev.sub_(now)  # prev := prev - now = -update
                    update = batch.add(prev, extremes=False)
                    refresh.append((prev, now))
                queued.append((i, param, update))
            state_names, state_keys, state_index = [], [], []
            for opt in self._optimizers.values():
                for p, state in opt.state.items():
                    name = self._param_names.get(id(p))
                    if name is None:
                        continue
                    for key, value in state.items():
                        if isinstance(value, torch.Tensor) and key != "step":
                            state_names.append(name)
                            state_keys.append(str(key))
                            state_index.append(batch.add(value))
            io = {"input": [], "target": []}  # role -> [(name, tensor, index in the batch)]
            for role, value in (("input", inputs), ("target", targets)):
                for name, t in _named_tensors(role, value):
                    io[role].append((name, t, batch.add(t, sums=True, hashed=True)))
            scalar_offsets = {name: batch.add_value(v) for name, v in values.items()
                              if isinstance(v, torch.Tensor)}
            moments, flat = batch.read()
            if refresh:
                torch._foreach_copy_([p for p, _ in refresh], [n for _, n in refresh])

        for i, param, update in queued:
            params[i] = moments[param]
            if update is not None:
                updates[i] = moments[update]
        updates[:, 0] = params[:, 0]  # numel, also where there is no update
        ratios = np.full(len(self._params), np.nan)
        np.divide(np.sqrt(updates[:, 3]), self._prev_norms, out=ratios,
                  where=self._prev_norms > 0)
        self._prev_norms = np.sqrt(params[:, 3])

        labels = self._param_labels
        blocks = [StatsBlock(step, "param", labels, params),
                  StatsBlock(step, "update", labels, updates, extra={"ratio": ratios})]
        measured = self._grad_state == _GRAD_MEASURED
        shown = measured | (self._grad_state == _GRAD_NONE)
        grads = self._grads.copy()  # NaN rows where not measured
        grads[:, 0] = params[:, 0]
        grad_none = (self._grad_state == _GRAD_NONE).tolist()
        if shown.all():
            blocks.append(StatsBlock(step, "grad", labels, grads, extra={"grad_none": grad_none}))
        else:  # a gradient that could not be measured has no row
            rows = np.flatnonzero(shown).tolist()
            blocks.append(StatsBlock(step, "grad", [labels[i] for i in rows], grads[rows],
                                     extra={"grad_none": [grad_none[i] for i in rows]}))
        grad_sumsq = np.bincount(self._param_model[measured], weights=grads[measured, 3],
                                 minlength=len(self._models))
        if state_index:
            blocks.append(StatsBlock(step, "state", state_names, moments[state_index],
                                     keys=state_keys))
        for key, index in self._pending_activations:
            seen = self._activations.get(key)
            m = row_moments(moments[index])
            self._activations[key] = m if seen is None else combine(seen, m)
        if self._activations:
            blocks.append(StatsBlock(step, "activation", list(self._activations),
                                     moments_rows(list(self._activations.values()))))
        for role, tensors in io.items():
            if tensors:
                blocks.append(StatsBlock(
                    step, role, [name for name, _, _ in tensors],
                    moments[[index for _, _, index in tensors]],
                    extra={"shape": ["x".join(map(str, t.shape)) for _, t, _ in tensors],
                           "hash": [batch.content_hash(index) for _, _, index in tensors]}))
        nonfinite = any((block.moments[:, 8] > 0).any() for block in blocks)
        self._reset_step_state()
        read = {name: flat[scalar_offsets[name]] if name in scalar_offsets else v
                for name, v in values.items()}
        return blocks, read, grad_sumsq, nonfinite

    def _readable_scalars(self, values: dict[str, Any]) -> dict[str, float]:
        """The scalars that can still be read as floats after the step's measuring failed."""
        readable = {}
        for name, value in values.items():
            try:
                readable[name] = float(value)
            except Exception as exc:  # noqa: BLE001 - a scalar that cannot be read is left out
                self._measure_failed(f"scalar {name}", exc)
        return readable

    def _reset_step_state(self) -> None:
        self._activations = {}
        self._pending_activations = []
        self._batch = MomentBatch()
        self._grad_state[:] = _GRAD_PENDING
        self._grads[:] = np.nan

    def event(self, kind: str, message: str = "") -> None:
        """Mark something that happened (``domain_switch``, ``lr_drop``...) from the next step on."""
        if not isinstance(kind, str) or not kind:
            raise ValueError("event kind must be a non-empty string")
        if not isinstance(message, str):
            raise TypeError(f"event message must be a string, got {type(message).__name__}")
        if not self._open:
            raise RecorderError("Recorder.event() called outside the `with Recorder(...)` block")
        self._buffers.events.append((self._step, kind, message, time.time()))

    def record_scalars(self, **scalars: Any) -> int:
        """Scalars measured after the last recorded step, before the next one (evaluation
        metrics): written at the last recorded step, which is returned."""
        if not self._open:
            raise RecorderError("Recorder.record_scalars() called outside the `with Recorder(...)` "
                                "block")
        if self._manifest.get("last_step") is None:
            raise RecorderError("Recorder.record_scalars() needs a recorded step: call step() first")
        step = self._step - 1
        for name, value in scalars.items():
            self._buffers.scalars.append((step, name, float(_scalar_value(name, value))))
        return step

    @property
    def current_step(self) -> int:
        """The step number the next ``step()`` call will record."""
        return self._step

    def flush(self) -> None:
        """Write everything buffered as new segments (also done automatically).

        Re-entrant: a SIGTERM arriving in the middle of a flush runs flush() again from the
        handler, which finishes what the interrupted call had not yet written (a table written
        twice holds the same rows, and readers keep the last occurrence).
        """
        if self._buffers:
            self._unwritten.append(self._buffers)
            self._buffers = _StepBuffers()
        self._last_flush = time.monotonic()
        wrote = False
        while self._unwritten:
            buffers = self._unwritten[0]
            for table, rows, build in (("stats", buffers.stats, _stats_table),
                                       ("scalars", buffers.scalars, scalars_table),
                                       ("events", buffers.events, events_table)):
                if rows and table not in buffers.written:
                    self._writer.write_segment(table, build(rows))
                    buffers.written.add(table)
            if self._unwritten and self._unwritten[0] is buffers:
                self._unwritten.pop(0)
            wrote = True
        if wrote:
            self._writer.write_manifest(self._manifest)

    # ----------------------------------------------------------------- checkpoints
    def _dump_flight(self, reason: str) -> None:
        last = self._step - 1
        snapshots = [s for s in self._flight.snapshots() if s.step != last]
        if last >= 0:
            snapshots.append(live_snapshot(last, self._source))
        if not snapshots:
            return
        name = f"flight-{max(last, 0):08d}.parquet"
        self._writer.write_checkpoint(name, checkpoint_table(snapshots),
                                      {"step": str(last), "reason": reason})
