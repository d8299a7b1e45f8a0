"""What the recorder follows: the models' parameters and leaf modules, the optimizers, and
every hook on them.

:class:`ModelTracker` names parameters and leaf modules in dicts keyed by their identity (it
never writes onto a module), owns every hook handle it installs and removes them all, and notices
when a module or parameter is assigned into a model (or a lazy module sets its parameters), so
that the recorder follows the models as they are from that step on. A hook pickles as an inert
one (``torch.save(model)``, ``copy.deepcopy(model)``), so a copy of a recorded model never
records into the run.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn.modules.module import (register_module_module_registration_hook,
                                     register_module_parameter_registration_hook)
from torch.nn.parameter import is_lazy
from torch.ao.quantization import FakeQuantizeBase
from torch.ao.quantization.observer import ObserverBase
from torch.nn.utils import parametrize

from .failures import MeasureFailures

__all__ = ["Leaf", "ModelTracker", "ParamsFollowed", "StructureHooks", "as_models",
           "as_optimizers", "is_compiled", "named_tensors"]

_SATURATING = {nn.Tanh: "tanh", nn.Sigmoid: "sigmoid"}
# Where optimizer wrappers keep the optimizer they wrap.
# "base_optimizer": SAM (davda54/sam), whose first_step/second_step never call its own step():
# the base optimizer's step is the update, and its state (not SAM's copies of the weights) the
# optimizer state.
_WRAPPED_OPTIMIZER_ATTRIBUTES = ("optimizer", "_optimizer", "base_optimizer")


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


class StructureHooks(NamedTuple):
    """What the tracker's hooks call."""

    on_activation: Callable[[nn.Module, Any, Any], None]  # a leaf module's forward hook
    on_grad_accumulated: Callable[[torch.Tensor], None]  # a parameter's gradient is ready
    before_grad_accumulated: Callable[[int, torch.Tensor], None]  # (id(parameter), its gradient)
    before_optimizer_step: Callable[..., Any]  # an optimizer's step pre-hook
    on_structure_change: Callable[[], None]  # before a model's forward, after a change


class Leaf(NamedTuple):
    """A recorded leaf module."""

    name: str
    saturation: str | None  # "tanh" or "sigmoid": its saturated outputs are counted
    model: nn.Module  # the model it belongs to (its training flag decides)


class ParamsFollowed(NamedTuple):
    """How the followed parameters changed: (new index, old index) of those followed before,
    and the new indices of those followed from now on."""

    carried: list[tuple[int, int]]
    fresh: set[int]


def as_models(model: Any) -> dict[str, nn.Module]:
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
    AcceleratedOptimizer, Lightning's LightningOptimizer) or ``.base_optimizer`` (SAM): wrappers
    pass as optimizers by class but lack the step-hook tables, or (SAM) step without calling
    their own ``step()``; the one they wrap steps, and holds the param groups."""
    seen = {id(optimizer)}
    while True:
        inner = next((found for attr in _WRAPPED_OPTIMIZER_ATTRIBUTES
                      if isinstance(found := getattr(optimizer, attr, None), torch.optim.Optimizer)
                      and id(found) not in seen), None)
        if inner is None:
            return optimizer
        optimizer = inner
        seen.add(id(inner))


def as_optimizers(optimizer: Any) -> dict[str, torch.optim.Optimizer]:
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


def named_tensors(prefix: str, value: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors in a batch: a tensor, numeric array, or (nested) dict/list/tuple of them."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":  # strings, objects and the like carry no statistics
            yield prefix, torch.from_numpy(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from named_tensors(f"{prefix}.{key}", item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from named_tensors(f"{prefix}.{i}", item)


def is_compiled(module: nn.Module) -> bool:
    """``torch.compile(module)`` (an OptimizedModule) or ``module.compile()``."""
    return (type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod")) \
        or getattr(module, "_compiled_call_impl", None) is not None


def _unwrapped(name: str) -> str:
    """A tensor or module name without torch.compile's ``_orig_mod`` level."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


# Quantization-aware training's plumbing (prepare_qat): fake quantizers and observers hang under
# the layers they quantize and return those layers' own tensors, rounded.
_QUANTIZATION_PLUMBING = (FakeQuantizeBase, ObserverBase)


def _is_leaf(module: nn.Module) -> bool:
    """A module whose output is an activation of its own: no children, or none but the
    `parametrizations` of a parametrized weight (spectral_norm, weight_norm, orthogonal) and
    the fake quantizers and observers of quantization-aware training (a QAT `Linear` holds its
    `weight_fake_quant`; round 32's qat: its classifier went unrecorded), which are no leaves;
    and `nn.MultiheadAttention`, whose one child is never called."""
    if isinstance(module, _QUANTIZATION_PLUMBING):
        return False
    if isinstance(module, nn.MultiheadAttention):
        # Its `out_proj` is a parameter holder F.multi_head_attention_forward reads, never called:
        # without this, no attention output of any nn.Transformer* model is recorded (round 37's DETR).
        return True
    kept = getattr(module, "parametrizations", None) if parametrize.is_parametrized(module) else None
    return all(child is kept or isinstance(child, _QUANTIZATION_PLUMBING) for child in module.children())


class ModelTracker:
    """The models' parameters and leaf modules by name, and the hooks the recorder owns.

    ``params`` lists the parameters followed, in a fixed order (shared ones once, lazy ones
    not before their module's first forward); ``param_index`` maps ``id(parameter)`` to its
    place there. The name dicts are updated in place (a checkpoint's state source holds them).
    """

    def __init__(self, models: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                 failures: MeasureFailures) -> None:
        self.models = models
        self.optimizers = optimizers
        self.optimizer_names = {id(o): name for name, o in optimizers.items()}
        self._failures = failures
        self.param_names: dict[int, str] = {}
        self.param_models: dict[int, str] = {}
        self.leaves: dict[str, tuple[nn.Module, str | None]] = {}
        self.leaf_of: dict[int, Leaf] = {}  # id(module) -> the leaf it is
        self.tied: dict[str, list[str]] = {}  # recorded name -> the other names of that tensor
        self.compiled: list[str] = []
        self.params: list[nn.Parameter] = []
        self.param_index: dict[int, int] = {}
        self.param_labels: list[str] = []
        self.param_model = np.empty(0, dtype=np.intp)  # each parameter's model, numbered
        self.lazy: list[nn.Parameter] = []  # not followed until their module's first forward
        self.structure_changed = False  # a module or parameter was assigned into a model
        self._module_ids: set[int] = set()
        self._handles: list[Any] = []
        self._leaf_hooks: dict[str, tuple[nn.Module, Any]] = {}  # leaf -> (module, its hook)
        # id(parameter) -> its post-accumulate hook and its tensor hook (before accumulation)
        self._grad_hooks: dict[int, tuple[Any, Any]] = {}
        self._hooks: StructureHooks | None = None
        self.scan()

    # ----------------------------------------------------------------- names
    def scan(self) -> None:
        """Name the models' parameters and leaf modules as they are now."""
        several = len(self.models) > 1
        names: dict[int, str] = {}
        owners: dict[int, str] = {}
        tied: dict[str, list[str]] = {}
        leaves: dict[str, tuple[nn.Module, str | None]] = {}
        leaf_of: dict[int, Leaf] = {}
        self._module_ids, self.compiled = set(), []
        for model_name, m in self.models.items():
            prefix = f"{model_name}." if several else ""
            for name, p in m.named_parameters(remove_duplicate=False):
                name = _unwrapped(prefix + name)
                if id(p) not in names:  # shared parameters are recorded once
                    names[id(p)] = name
                    owners[id(p)] = model_name
                elif name != names[id(p)]:
                    tied.setdefault(names[id(p)], []).append(name)
            for name, module in self._recordable_modules(m, prefix, model_name):
                if _is_leaf(module) and id(module) not in leaf_of:
                    saturation = _SATURATING.get(type(module))
                    leaves[name] = (module, saturation)
                    leaf_of[id(module)] = Leaf(name, saturation, m)
        for mapping, now in ((self.param_names, names), (self.param_models, owners),
                             (self.leaves, leaves), (self.leaf_of, leaf_of), (self.tied, tied)):
            mapping.clear()
            mapping.update(now)

    def _recordable_modules(self, model: nn.Module, prefix: str, model_name: str
                            ) -> Iterator[tuple[str, nn.Module]]:
        """(leaf name, module) of every module outside a compiled one and outside a layer's
        parametrizations (they compute its weight, not an activation); notes the compiled."""
        inside_compiled: tuple[str, ...] = ()
        parametrizing = {id(p) for module in model.modules() if parametrize.is_parametrized(module)
                         for p in module.parametrizations.modules()}
        for name, module in model.named_modules():
            self._module_ids.add(id(module))
            if id(module) in parametrizing:
                continue
            if is_compiled(module):
                self.compiled.append(_unwrapped(prefix + name) or model_name)
                inside_compiled += (f"{name}.",) if name else ("",)
                continue
            if name.startswith(inside_compiled) and inside_compiled:
                continue  # hooks would be traced into (and break) the compiled graph
            yield (_unwrapped(prefix + name) if name else model_name), module

    def follow_params(self) -> ParamsFollowed:
        """Follow every parameter the models hold now, but a lazy module's before its first
        forward; returns which were followed before and which are new."""
        before = self.param_index
        params: list[nn.Parameter] = []
        carried, fresh, seen = [], set(), set()
        self.lazy = []
        for m in self.models.values():
            for p in m.parameters():
                if id(p) in seen:  # shared by two models: followed once
                    continue
                seen.add(id(p))
                if is_lazy(p):
                    self.lazy.append(p)
                    continue
                if id(p) in before:
                    carried.append((len(params), before[id(p)]))
                else:
                    fresh.add(len(params))
                params.append(p)
        self.params = params
        self.param_index = {id(p): i for i, p in enumerate(params)}
        self.param_labels = [self.param_names[id(p)] for p in params]
        model_numbers = {name: i for i, name in enumerate(self.models)}
        self.param_model = np.array([model_numbers[self.param_models[id(p)]] for p in params],
                                    dtype=np.intp)
        if self._hooks is not None:
            self._sync_grad_hooks()
        return ParamsFollowed(carried, fresh)

    def lazy_initialized(self) -> bool:
        """Whether a lazy module's forward set its parameters since they were followed."""
        return any(not is_lazy(p) for p in self.lazy)

    def structure(self) -> tuple[dict[str, int], set[str], dict[str, int]]:
        """Parameter name -> id, names of lazy parameters, leaf module name -> id."""
        return ({name: pid for pid, name in self.param_names.items()},
                {self.param_names[id(p)] for p in self.lazy},
                {name: id(module) for name, (module, _) in self.leaves.items()})

    @staticmethod
    def changes(before: tuple, after: tuple) -> str:
        """What changed between two :meth:`structure` s, as a `model_changed` message."""
        (params, lazy, leaves), (params_now, lazy_now, leaves_now) = before, after
        changes = (
            ("added", params_now.keys() - params.keys()),
            ("removed", params.keys() - params_now.keys()),
            ("replaced", {n for n in params_now.keys() & params.keys()
                          if params_now[n] != params[n]}),
            ("initialized", lazy - lazy_now),
            ("new modules", {n for n in leaves_now if leaves_now[n] != leaves.get(n)}),
        )
        return "; ".join(f"{word} {', '.join(sorted(names))}" for word, names in changes if names)

    # ----------------------------------------------------------------- hooks
    def install(self, hooks: StructureHooks) -> None:
        """Install every hook: leaf modules, parameters, models, optimizers, registrations."""
        self._hooks = hooks
        self._activation_hook = _Hook(hooks.on_activation)
        self._grad_hook = _Hook(hooks.on_grad_accumulated)
        self._sync_grad_hooks()
        self.sync_leaf_hooks()
        before_forward = _Hook(self._before_forward)
        for name, model in self.models.items():
            if not is_compiled(model):  # a compiled model's own hooks run inside its graph
                self._hook(f"model {name}", model.register_forward_pre_hook, before_forward)
        self._hook("module registration", register_module_module_registration_hook,
                   self._on_registration)
        self._hook("parameter registration", register_module_parameter_registration_hook,
                   self._on_registration)
        before_step = _Hook(hooks.before_optimizer_step)
        for name, opt in self.optimizers.items():
            self._hook(f"optimizer {name}", opt.register_step_pre_hook, before_step)

    def _hook(self, where: str, register: Any, hook: Any) -> Any:
        """Install a hook; one that cannot be installed (an object that only looks like a
        module or an optimizer) warns once and recording goes on without it."""
        try:
            handle = register(hook)
        except Exception as exc:  # noqa: BLE001 - never break the user's training
            self._failures(f"the hook on {where}", exc)
            return None
        self._handles.append(handle)
        return handle

    def _sync_grad_hooks(self) -> None:
        """Two hooks on every followed parameter that takes gradients: after accumulation (the
        first to fire in a backward queues the capture at that backward's end), and before it,
        while ``.grad`` still holds what was there (a gradient carried over, or nothing)."""
        followed = {id(p): p for p in self.params if p.requires_grad}
        for pid in self._grad_hooks.keys() - followed.keys():
            for handle in self._grad_hooks.pop(pid):
                handle.remove()
        before = self._hooks.before_grad_accumulated
        for pid in followed.keys() - self._grad_hooks.keys():
            p = followed[pid]
            self._grad_hooks[pid] = (p.register_post_accumulate_grad_hook(self._grad_hook),
                                     p.register_hook(_Hook(functools.partial(before, pid))))

    def sync_leaf_hooks(self) -> None:
        """A forward hook on every leaf module the models hold now, and on no other."""
        for name, (module, handle) in list(self._leaf_hooks.items()):
            if self.leaves.get(name, (None,))[0] is not module:
                handle.remove()
                del self._leaf_hooks[name]
        for name, (module, saturation) in self.leaves.items():
            if name not in self._leaf_hooks:
                try:
                    handle = module.register_forward_hook(self._activation_hook)
                except Exception as exc:  # noqa: BLE001 - never break the user's training
                    self._failures(f"the hook on module {name}", exc)
                    continue
                self._leaf_hooks[name] = (module, handle)

    def _on_registration(self, module: nn.Module, name: str, value: Any) -> None:
        """torch calls this for every module or parameter assigned into any module."""
        if id(module) in self._module_ids:
            self.structure_changed = True

    def _before_forward(self, module: nn.Module, args: Any) -> None:
        if self.structure_changed:
            self._hooks.on_structure_change()

    def remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for _, handle in self._leaf_hooks.values():
            handle.remove()
        self._leaf_hooks.clear()
        for handles in self._grad_hooks.values():
            for handle in handles:
                handle.remove()
        self._grad_hooks.clear()
