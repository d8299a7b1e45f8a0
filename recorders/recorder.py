"""The context manager users put around their training loop.

It owns every hook it installs (forward hooks on leaf modules, gradient hooks on parameters,
step hooks on optimizers, a SIGTERM handler, an atexit callback) and removes them on exit. Names
live in dicts keyed by module and parameter identity; nothing is ever written onto the user's
modules, and a hook pickles as an inert one (``torch.save(model)``, ``copy.deepcopy(model)``), so
a copy of a recorded model never records into the run.
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
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch
from torch import nn
from torch.nn.parameter import is_lazy
from torch.nn.modules.module import (register_module_module_registration_hook,
                                     register_module_parameter_registration_hook)

from .checkpoints import (FlightRing, SkippedTensors, StateSource, checkpoint_table,
                          live_snapshot)
from .errors import RecorderError, RecorderMeasureError, RecorderWarning, RunDirectoryError
from .lock import LOCK_NAME, RunLock
from .manifest import (hyperparameters, model_structure, new_manifest, optimizer_structure,
                       utc_now)
from .ranks import distributed_info, rank_dir
from .scalars import ScalarReader
from .schedule import Schedule
from .rows import StatsBlock
from .statistics import (MomentBatch, Moments, activation_moments, combine, measure_now,
                         moments_rows, params_and_updates, row_moments, summarize)
from .writer import RunWriter

__all__ = ["Recorder"]

_RUN_ENTRIES = ("manifest.json", "stats", "scalars", "events", "checkpoints")
_SATURATING = {nn.Tanh: "tanh", nn.Sigmoid: "sigmoid"}
_IO_KEYWORDS = ("inputs", "targets")
# What became of a parameter's gradient this step.
_GRAD_PENDING, _GRAD_MEASURED, _GRAD_NONE, _GRAD_LOST = range(4)
_MOMENT_WIDTH = len(Moments._fields)


class _InertHook:
    """What a recorder's hook becomes in a pickle or a deep copy of the model: nothing."""

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Hook:
    """A recorder's hook on a user's module or optimizer: calls the recorder, and pickles as an
    :class:`_InertHook` (a closure or a bound method would drag the recorder into
    ``torch.save(model)`` and fail, or make a deep copy record into the run)."""

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __reduce__(self) -> tuple:
        return (_InertHook, ())


@dataclass
class _GradCapture:
    """The gradients as one backward left them: measured at its end, before clipping, the
    scaler's ``unscale_`` or ``zero_grad`` can touch them. Host tensors are measured at once;
    device tensors' kernels are queued and read with the step (no sync inside the loop)."""

    rows: dict[int, int]  # id(parameter) -> its row in the moments
    grads: dict[int, tuple[torch.Tensor, int]]  # id(parameter) -> (its .grad, that's _version)
    batch: MomentBatch
    moments: np.ndarray | None = None
    scale: torch.Tensor | float | None = None  # the GradScaler's scale at that backward

    def read(self) -> np.ndarray:
        """The unscaled moments, a row per measured gradient (read once)."""
        if self.moments is None:
            self.moments = self.batch.read()[0] if self.rows else np.empty((0, _MOMENT_WIDTH))
            self.batch = MomentBatch()
            if self.scale is not None:
                scale = float(self.scale)
                self.moments[:, [2, 4, 5]] /= scale  # sum, min, max
                self.moments[:, 3] /= scale * scale  # sum of squares
            self.scale = None
        return self.moments


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


def _as_optimizers(optimizer: Any) -> dict[str, torch.optim.Optimizer]:
    if optimizer is None:
        return {}
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


def _is_compiled(module: nn.Module) -> bool:
    """``torch.compile(module)`` (an OptimizedModule) or ``module.compile()``."""
    return (type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")) \
        or getattr(module, "_compiled_call_impl", None) is not None


def _unwrapped(name: str) -> str:
    """A tensor or module name without torch.compile's ``_orig_mod`` level."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def _input_kind(t: torch.Tensor) -> str:
    """What an input or target tensor holds: features, indices (token IDs, class labels) or a
    mask; the analyzer judges only features' scale."""
    if t.dtype is torch.bool:
        return "mask"
    return "float" if t.is_floating_point() or t.is_complex() else "index"


def _safe_text(describe, exc: BaseException) -> str:
    """`describe(exc)`, or a placeholder when the exception's own __str__ raises (the run must
    still end with its final manifest)."""
    try:
        return describe(exc)
    except Exception as error:  # noqa: BLE001 - any user-defined __str__
        return f"<{type(exc).__name__}: its str() raised {type(error).__name__}>"


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
        self._distributed = distributed_info()  # None in a single process
        self.run_dir = rank_dir(Path(run_dir), self._distributed)
        self._previous_manifest = self._check_run_dir()
        self._lock: RunLock | None = None
        self._writer = RunWriter(self.run_dir, strict=strict)
        self._strict = strict
        self._measure_errors: dict[str, str] = {}  # where -> the first error there
        self._flight = FlightRing(flight_ring)
        self._checkpoint_skipped = SkippedTensors(strict=strict)
        self._read_scalars = ScalarReader(strict=strict)

        self._params: list[_Param] = []
        self._param_index: dict[int, int] = {}  # id(parameter) -> its place in _params
        self._param_names: dict[int, str] = {}
        self._param_models: dict[int, str] = {}
        self._leaves: dict[str, tuple[nn.Module, str | None]] = {}
        self._leaf_of: dict[int, tuple[str, str | None, nn.Module]] = {}  # id -> name, sat., model
        self._tied: dict[str, list[str]] = {}  # recorded name -> the other names of that tensor
        self._module_ids: set[int] = set()
        self._scan_models()
        self._source = StateSource(self._models, self._optimizers, self._param_names)

        self._handles: list[Any] = []
        self._leaf_hooks: dict[str, tuple[nn.Module, Any]] = {}  # leaf -> (module, its hook)
        self._activation_hook = _Hook(self._on_activation)
        self._grad_hook = _Hook(self._on_grad_accumulated)
        self._grad_hooks: dict[int, Any] = {}  # id(parameter) -> its post-accumulate hook
        self._backward_task = -1  # the autograd graph task whose end is queued
        # This record's gradients: id(parameter) -> the backward capture that holds its
        # gradient; those an optimizer consumed are not replaced by a later backward.
        self._grad_source: dict[int, _GradCapture] = {}
        self._consumed: set[int] = set()
        self._clipped: list[tuple[list[int], torch.Tensor]] = []  # post-clip norms at a step
        self._optimizer_names = {id(o): name for name, o in self._optimizers.items()}
        self._stepped = dict.fromkeys(self._optimizers, False)
        self._last_scale = math.inf  # the scaler's scale at the previous record
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
        self._manifest["tied_parameters"] = {k: list(v) for k, v in self._tied.items()}
        self._manifest["notes"] = []
        if self._compiled:
            note = (f"activations of torch.compile'd {', '.join(self._compiled)} are not recorded "
                    "(forward hooks would be traced into the compiled graph); parameters, "
                    "gradients, updates, optimizer state, inputs and scalars are")
            self._manifest["notes"].append(note)
            warnings.warn(f"postmortem recorder: {note}", RecorderWarning, stacklevel=2)
        if self._distributed is not None:
            self._manifest["distributed"] = dict(self._distributed)
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
        before_forward = _Hook(self._before_forward)
        for model in self._models.values():
            if not _is_compiled(model):  # a compiled model's own hooks run inside its graph
                self._handles.append(model.register_forward_pre_hook(before_forward))
        self._handles.append(register_module_module_registration_hook(self._on_registration))
        self._handles.append(register_module_parameter_registration_hook(self._on_registration))
        before_step = _Hook(self._before_optimizer_step)
        for opt in self._optimizers.values():
            self._handles.append(opt.register_step_pre_hook(before_step))
        if threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self._on_interpreter_exit)
        self._last_flush = time.monotonic()
        self._watch_activations = self._schedule.should_record_activations(self._step)
        if self._scaler is not None and self._scaler.is_enabled():
            self._last_scale = float(self._scaler.get_scale())
        self._open = True
        return self

    def _scan_models(self) -> None:
        """Name the models' parameters and leaf modules as they are now (in place: the state
        source holds these dicts)."""
        several = len(self._models) > 1
        names: dict[int, str] = {}
        owners: dict[int, str] = {}
        tied: dict[str, list[str]] = {}
        leaves: dict[str, tuple[nn.Module, str | None]] = {}
        leaf_of: dict[int, tuple[str, str | None, nn.Module]] = {}
        modules: set[int] = set()
        compiled: list[str] = []
        for model_name, m in self._models.items():
            prefix = f"{model_name}." if several else ""
            for name, p in m.named_parameters(remove_duplicate=False):
                name = _unwrapped(prefix + name)
                if id(p) not in names:  # shared parameters are recorded once
                    names[id(p)] = name
                    owners[id(p)] = model_name
                elif name != names[id(p)]:
                    tied.setdefault(names[id(p)], []).append(name)
            inside_compiled: tuple[str, ...] = ()
            for name, module in m.named_modules():
                modules.add(id(module))
                if _is_compiled(module):
                    compiled.append(_unwrapped(prefix + name) or model_name)
                    inside_compiled += (f"{name}.",) if name else ("",)
                    continue
                if name.startswith(inside_compiled) and inside_compiled:
                    continue  # hooks would be traced into (and break) the compiled graph
                if next(module.children(), None) is None and id(module) not in leaf_of:
                    leaf = _unwrapped(prefix + name) if name else model_name
                    saturation = _SATURATING.get(type(module))
                    leaves[leaf] = (module, saturation)
                    leaf_of[id(module)] = (leaf, saturation, m)
        for mapping, now in ((self._param_names, names), (self._param_models, owners),
                             (self._leaves, leaves), (self._leaf_of, leaf_of),
                             (self._tied, tied)):
            mapping.clear()
            mapping.update(now)
        self._module_ids = modules
        self._compiled = compiled

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
        self._sync_grad_hooks()

    def _sync_grad_hooks(self) -> None:
        """A post-accumulate-grad hook on every followed parameter that takes gradients: the
        first to fire in a backward queues the capture at that backward's end."""
        followed = {id(p.tensor): p.tensor for p in self._params if p.tensor.requires_grad}
        for pid in self._grad_hooks.keys() - followed.keys():
            self._grad_hooks.pop(pid).remove()
        for pid in followed.keys() - self._grad_hooks.keys():
            self._grad_hooks[pid] = followed[pid].register_post_accumulate_grad_hook(
                self._grad_hook)

    def _sync_leaf_hooks(self) -> None:
        """A forward hook on every leaf module the models hold now, and on no other."""
        for name, (module, handle) in list(self._leaf_hooks.items()):
            if self._leaves.get(name, (None,))[0] is not module:
                handle.remove()
                del self._leaf_hooks[name]
        for name, (module, saturation) in self._leaves.items():
            if name not in self._leaf_hooks:
                self._leaf_hooks[name] = (module,
                                          module.register_forward_hook(self._activation_hook))

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
            self._manifest["tied_parameters"] = {k: list(v) for k, v in self._tied.items()}
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
                info = {"type": exc_type.__name__, "message": _safe_text(str, exc),
                        "traceback": _safe_text(lambda e: "".join(
                            traceback.format_exception(exc_type, e, tb)), exc)}
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
        for handle in self._grad_hooks.values():
            handle.remove()
        self._grad_hooks.clear()
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

    # ----------------------------------------------------------------- hooks
    def _on_activation(self, module: nn.Module, args: Any, output: Any) -> None:
        """A leaf's forward hook. Only training forwards count (grad enabled, the model in
        training mode): an eval loop's forwards are not the step's activations."""
        if not self._watch_activations or not torch.is_grad_enabled():
            return
        leaf = self._leaf_of.get(id(module))
        if leaf is None or not leaf[2].training:
            return
        name, saturation, _ = leaf
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

    def _on_grad_accumulated(self, param: torch.Tensor) -> None:
        """A parameter's post-accumulate-grad hook: queue the capture at this backward's end
        (once per backward, whichever parameter's gradient comes first)."""
        task = torch._C._current_graph_task_id()
        if task != self._backward_task:
            self._backward_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def _on_backward_end(self) -> None:
        """Measure every gradient no optimizer has consumed yet in this record, as backward
        left it: accumulated over the micro-batches so far, before any clipping. A later
        backward (the next micro-batch) replaces the capture."""
        free = [p for p in self._params if id(p.tensor) not in self._consumed]
        try:
            capture = self._measure_grads(free)
        except Exception as exc:  # noqa: BLE001 - never break the user's backward()
            self._measure_failed("gradients", exc)
            for p in free:
                self._grad_source.pop(id(p.tensor), None)
                self._grad_state[self._param_index[id(p.tensor)]] = _GRAD_LOST
            return
        for p in free:
            self._grad_source[id(p.tensor)] = capture

    def _measure_grads(self, params: list[_Param], scaled: bool = True) -> _GradCapture:
        """Queue (and on the host, read) `params`' gradients; `scaled`: as backward left them,
        multiplied by the GradScaler's scale if one is in use."""
        capture = _GradCapture({}, {}, MomentBatch())
        on_host = True
        for p in params:
            g = p.tensor.grad
            if g is not None:
                capture.rows[id(p.tensor)] = capture.batch.add(g, zeros=True)
                capture.grads[id(p.tensor)] = (g, g._version)
                on_host = on_host and g.is_cpu
        scaler = self._scaler
        if scaled and capture.rows and scaler is not None and scaler.is_enabled():
            scale = getattr(scaler, "_scale", None)  # a tensor: no sync on the device
            capture.scale = scale.detach().clone() if isinstance(scale, torch.Tensor) \
                else float(scaler.get_scale())
        if on_host:  # the fused kernel reads host tensors at `read`: before they change
            capture.read()
        return capture

    def _before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: Any,
                               kwargs: Any) -> None:
        """The optimizer is about to consume its gradients: keep their capture for the record,
        and measure the global norm of what it consumes where clipping (or the scaler's
        unscale_) changed them since the end of backward."""
        self._stepped[self._optimizer_names[id(optimizer)]] = True
        changed, uncaptured = [], []
        for group in optimizer.param_groups:
            for p in group["params"]:
                pid = id(p)
                if pid not in self._param_index or pid in self._consumed:
                    continue
                capture = self._grad_source.get(pid)
                if capture is None:  # a gradient set without backward (or lost)
                    if self._grad_state[self._param_index[pid]] == _GRAD_PENDING:
                        uncaptured.append(pid)
                    continue
                self._consumed.add(pid)
                then = capture.grads.pop(pid, None)  # not kept alive past the step
                if then is not None and (p.grad is not then[0] or p.grad._version != then[1]):
                    changed.append(pid)
        try:
            if uncaptured:
                params = [self._params[self._param_index[pid]] for pid in uncaptured]
                capture = self._measure_grads(params, scaled=False)  # after scaler.unscale_
                for pid in uncaptured:
                    self._grad_source[pid] = capture
            grads = [g for g in (self._params[self._param_index[pid]].tensor.grad
                                 for pid in changed) if g is not None]
            if grads:
                norms = torch._foreach_norm(grads)
                device = norms[0].device
                self._clipped.append((changed, torch.stack([n.to(device, torch.float64)
                                                             for n in norms])))
        except Exception as exc:  # noqa: BLE001 - never break the user's optimizer.step()
            self._measure_failed("gradients", exc)

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
            self._measure_failed(f"scalar {name}", exc)
        step = self._step
        wall = time.time()
        if self._structure_changed or any(not is_lazy(p) for p in self._lazy):
            # No model's forward ran since the change (a loop calling submodules), or a lazy
            # module's forward set its parameters: they have no update this step.
            self._follow_structure()
        else:
            self._fresh = set()
        try:
            blocks, values, grad_sumsq, clip_scalars, nonfinite = self._measure(
                step, inputs, targets, values)
        except Exception as exc:  # noqa: BLE001 - never break the training loop
            self._measure_failed("the step's tensors", exc)
            blocks, grad_sumsq, clip_scalars, nonfinite = [], None, {}, False
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
        scalar_rows.extend((step, name, value) for name, value in clip_scalars.items())
        first = "lr" not in values  # an lr passed to rec.step() wins
        for opt_name, opt in self._optimizers.items():
            scalar_rows.append((step, f"optimizer_stepped.{opt_name}",
                                float(self._stepped[opt_name])))
            for g, group in enumerate(opt.param_groups):
                for hp, value in hyperparameters(group).items():
                    if first and hp == "lr":
                        scalar_rows.append((step, "lr", value))
                        first = False
                    scalar_rows.append((step, f"hp.{opt_name}.{g}.{hp}", value))
        if self._scaler is not None and self._scaler.is_enabled():
            scale = float(self._scaler.get_scale())
            scalar_rows.append((step, "grad_scale", scale))
            # A skipped step: an optimizer did not step and scaler.update() backed the scale
            # off (it does exactly when unscale_ found an inf or a NaN).
            skipped = not all(self._stepped.values()) and scale < self._last_scale
            scalar_rows.append((step, "scaler_skipped", float(skipped)))
            self._last_scale = scale
        scalar_rows.append((step, "wall_time", wall))
        self._stepped = dict.fromkeys(self._optimizers, False)

        self._step = step + 1
        self._watch_activations = self._schedule.should_record_activations(self._step)
        self._buffers.steps += 1
        self._manifest["last_step"] = step
        if nonfinite and not self._nonfinite_seen:
            self._nonfinite_seen = True
            self._manifest["first_nonfinite_step"] = step
            self._dump_flight("first_nonfinite")
        if self._schedule.should_checkpoint(step):
            self._guard_state("the checkpoint", lambda: self._writer.write_checkpoint(
                f"step-{step:08d}.parquet",
                checkpoint_table([live_snapshot(step, self._source)], self._checkpoint_skipped),
                {"step": str(step), "reason": "scheduled"}))
        if self._schedule.should_sample_flight(step):
            self._guard_state("the flight ring", lambda: self._flight.sample(
                step, self._source, self._checkpoint_skipped))
        if self._schedule.should_flush(self._buffers.steps, time.monotonic() - self._last_flush):
            self.flush()
        return step

    def _measure(self, step: int, inputs: Any, targets: Any, values: dict[str, Any]
                 ) -> tuple[list[StatsBlock], dict[str, float], np.ndarray, dict[str, float],
                            bool]:
        """The step's stats blocks, its scalars as floats, each model's sum of squared
        (pre-clip) gradients, the clipping and scaler scalars, and whether anything was
        non-finite."""
        batch = self._batch
        self._resolve_grads()
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
        clip_scalars = self._clip_scalars(measured, grad_sumsq)
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
                           "hash": [batch.content_hash(index) for _, _, index in tensors],
                           "dtype": [str(t.dtype).removeprefix("torch.") for _, t, _ in tensors],
                           "kind": [_input_kind(t) for _, t, _ in tensors]}))
        nonfinite = any((block.moments[:, 8] > 0).any() for block in blocks)
        self._reset_step_state()
        read = {name: flat[scalar_offsets[name]] if name in scalar_offsets else v
                for name, v in values.items()}
        return blocks, read, grad_sumsq, clip_scalars, nonfinite

    def _resolve_grads(self) -> None:
        """This record's gradients from the backward captures; one that no backward captured
        (set by hand, or left from an earlier step) is read as it is now."""
        state, grads = self._grad_state, self._grads
        uncaptured = []
        for i, p in enumerate(self._params):
            capture = self._grad_source.get(id(p.tensor))
            if capture is None:
                if state[i] == _GRAD_PENDING:
                    uncaptured.append(p)
                continue
            row = capture.rows.get(id(p.tensor))
            if row is None:
                state[i] = _GRAD_NONE
            else:
                grads[i] = capture.read()[row]
                state[i] = _GRAD_MEASURED
        if uncaptured:
            capture = self._measure_grads(uncaptured, scaled=False)
            for p in uncaptured:
                row = capture.rows.get(id(p.tensor))
                i = self._param_index[id(p.tensor)]
                if row is None:
                    state[i] = _GRAD_NONE
                else:
                    grads[i] = capture.read()[row]
                    state[i] = _GRAD_MEASURED

    def _clip_scalars(self, measured: np.ndarray, grad_sumsq: np.ndarray) -> dict[str, float]:
        """grad_norm_clipped and clip_coef where the optimizers consumed gradients other than
        backward left them (clipping, unscale_); scaler_skipped when a scaler is in use."""
        out = {}
        if self._clipped:
            consumed = {}
            for pids, norms in self._clipped:
                consumed.update(zip(pids, np.square(norms.tolist())))
            unchanged = [i for i in np.flatnonzero(measured).tolist()
                         if id(self._params[i].tensor) not in consumed]
            clipped = math.sqrt(sum(consumed.values()) + self._grads[unchanged, 3].sum())
            out["grad_norm_clipped"] = clipped
            total = math.sqrt(grad_sumsq.sum())
            if total > 0:
                out["clip_coef"] = clipped / total
        return out

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
        self._grad_source = {}
        self._consumed = set()
        self._clipped = []

    def event(self, kind: str, message: str = "") -> None:
        """Mark something that happened (``domain_switch``, ``lr_drop``...) from the next step on."""
        if not isinstance(kind, str) or not kind:
            raise ValueError("event kind must be a non-empty string")
        if not isinstance(message, str):
            raise TypeError(f"event message must be a string, got {type(message).__name__}")
        if not self._open:
            raise RecorderError("Recorder.event() called outside the `with Recorder(...)` block")
        self._buffers.events.append((self._step, kind, message, time.time()))

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
            for table, rows in (("stats", buffers.stats), ("scalars", buffers.scalars),
                                ("events", buffers.events)):
                if rows and table not in buffers.written:
                    self._writer.write_rows(table, rows)
                    buffers.written.add(table)
            if self._unwritten and self._unwritten[0] is buffers:
                self._unwritten.pop(0)
            wrote = True
        if wrote:
            self._writer.write_manifest(self._manifest)

    # ----------------------------------------------------------------- checkpoints
    def _guard_state(self, what: str, save) -> None:
        """Checkpointing never breaks training: a failure is a measure error (raised under
        ``strict``); the tensors left out are named in the manifest."""
        try:
            save()
        except RecorderError:  # strict: a write or a tensor that failed
            raise
        except Exception as exc:  # noqa: BLE001 - recording degrades, training goes on
            self._measure_failed(what, exc)
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
