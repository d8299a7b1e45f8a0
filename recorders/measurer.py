"""What one recorded step measures: tensors in, :class:`~recorders.rows.StatsBlock` s out.

:class:`StepMeasurer` keeps what measuring needs between steps (each parameter's value at the
last record, for its update; its norm then, for the update ratio) and within one (the
gradients as each backward left them, the leaf modules' outputs), and turns a step into a
:class:`StepMeasurement`. Host tensors are measured as they come (reading back is free there);
device tensors' kernels are queued and read back together with the step, once.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from .failures import MeasureFailures
from .manifest import HYPERPARAMETER_KEYS, hyperparameters
from .rows import StatsBlock
from .statistics import (FusedCall, MomentBatch, MomentColumn, activation_row, combine_rows,
                         fused_call, fused_pairs, host_rows, kernel_rows, measure_now,
                         params_and_updates, signature, summarize)
from .tracking import ModelTracker, ParamsFollowed, named_tensors

__all__ = ["StepMeasurement", "StepMeasurer"]

_WIDTH = len(MomentColumn)
# What became of a parameter's gradient this step.
_GRAD_PENDING, _GRAD_MEASURED, _GRAD_NONE, _GRAD_LOST = range(4)


def _frozen(value: Any) -> Any:
    """`value` as it is now: a tensor (a scheduler may ``fill_`` it in place) is copied on its
    own device (no host read here), numbers and tuples of numbers are kept as they are."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
        return tuple(_frozen(v) for v in value)
    return value


def _used_hyperparameters(group: dict[str, Any]) -> dict[str, Any]:
    """The entries of a param group that :func:`hyperparameters` reads, as the optimizer is
    about to use them (a scheduler stepped before ``rec.step()`` changes the group after)."""
    return {key: _frozen(group[key]) for key in HYPERPARAMETER_KEYS if key in group}


@dataclass
class _GradCapture:
    """The gradients as one backward left them: measured at its end, before clipping, the
    scaler's ``unscale_`` or ``zero_grad`` can touch them. Host tensors are measured at once;
    device tensors' kernels are queued and read with the step (no sync inside the loop)."""

    rows: dict[int, int]  # id(parameter) -> its row in the moments
    grads: dict[int, tuple[torch.Tensor, int]]  # id(parameter) -> (its .grad, that's _version)
    batch: MomentBatch | None  # None once read (or measured without one)
    moments: np.ndarray | None = None  # as measured, scaled until `read`
    scale: torch.Tensor | float | None = None  # the GradScaler's scale at that backward

    def read(self) -> np.ndarray:
        """The unscaled moments, a row per measured gradient (read once)."""
        if self.batch is not None:
            self.moments = self.batch.read()[0] if self.rows else np.empty((0, _WIDTH))
            self.batch = None
        if self.scale is not None:
            scale = float(self.scale)
            self.moments[:, [MomentColumn.SUM, MomentColumn.MIN, MomentColumn.MAX]] /= scale
            self.moments[:, MomentColumn.SUMSQ] /= scale * scale
            self.scale = None
        return self.moments


@dataclass
class _ParamReads:
    """A step's parameter and update moments: host ones measured, device ones queued."""

    params: np.ndarray
    updates: np.ndarray  # NaN rows: no update this step
    # Device tensors: (parameter, its index in the batch, its update's index or None).
    queued: list[tuple[int, int, int | None]] = field(default_factory=list)
    # (prev, now): prev <- now once the batch is read.
    refresh: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def fill(self, moments: np.ndarray) -> None:
        """The queued rows from the batch's moments; every update row gets its numel."""
        for i, param, update in self.queued:
            self.params[i] = moments[param]
            if update is not None:
                self.updates[i] = moments[update]
        self.updates[:, MomentColumn.NUMEL] = self.params[:, MomentColumn.NUMEL]


class _Plan(NamedTuple):
    """A fused call made again at every step while its tensors keep their signatures (their
    address, layout, type: parameters and optimizer state keep them, step after step)."""

    signatures: Any  # what must not change for `call` to be made again
    call: FusedCall


class _Queued(NamedTuple):
    """An input or target tensor, queued in the step's batch."""

    name: str
    tensor: torch.Tensor
    index: int


class StepMeasurement(NamedTuple):
    """One step, measured."""

    blocks: list[StatsBlock]
    scalars: dict[str, float]
    grad_sumsq: np.ndarray | None  # each model's sum of squared (pre-clip) gradients
    clip_scalars: dict[str, float]  # grad_norm_clipped, clip_coef
    nonfinite: bool  # whether any tensor held a NaN or an inf
    grad_carried_over: float | None = None  # see StepMeasurer.before_grad_accumulated


def _input_kind(t: torch.Tensor) -> str:
    """What an input or target tensor holds: features, indices (token IDs, class labels) or a
    mask; the analyzer judges only features' scale."""
    if t.dtype is torch.bool:
        return "mask"
    return "float" if t.is_floating_point() or t.is_complex() else "index"


def _io_block(step: int, role: str, tensors: list[_Queued], moments: np.ndarray,
              batch: MomentBatch) -> StatsBlock:
    return StatsBlock(
        step, role, [q.name for q in tensors], moments[[q.index for q in tensors]],
        extra={"shape": ["x".join(map(str, q.tensor.shape)) for q in tensors],
               "hash": [batch.content_hash(q.index) for q in tensors],
               "dtype": [str(q.tensor.dtype).removeprefix("torch.") for q in tensors],
               "kind": [_input_kind(q.tensor) for q in tensors]})


class StepMeasurer:
    """Measures the followed tensors of one step at a time (see the module's docstring)."""

    def __init__(self, tracker: ModelTracker, scaler: Any, failures: MeasureFailures) -> None:
        self._tracker = tracker
        self._scaler = scaler
        self._failures = failures
        self._prev: list[torch.Tensor] = []  # each parameter's value at the last record
        self._prev_norms = np.empty(0)  # and its norm then, for the update ratio
        self._grads = np.empty((0, _WIDTH))
        self._grad_state = np.empty(0, dtype=np.int8)
        # The parameters' fused call, made again while they keep their signatures (all on
        # the host, each measured with its update in one pass).
        self._param_plan: _Plan | None = None
        self._state_plan: _Plan | None = None  # the optimizer state's, all on the host
        self.fresh: set[int] = set()  # followed since this step's optimizer step: no update
        self.watch_activations = True  # whether the step being run records activations
        self._backward_task = -1  # the autograd graph task whose end is queued
        self._stepped = dict.fromkeys(tracker.optimizers, False)
        # Each optimizer's param groups' hyper-parameters at its last step (see scalar_rows).
        self._step_groups: dict[str, list[dict[str, Any]]] = {}
        self._last_scale = math.inf  # the scaler's scale at the previous record
        self._reset_step_state()

    def start(self) -> None:
        """Recording starts: the scaler's scale now is the one a skipped step backs off."""
        if self._scaler is not None and self._scaler.is_enabled():
            self._last_scale = float(self._scaler.get_scale())

    def follow(self, followed: ParamsFollowed) -> None:
        """The tracker's parameters changed: one followed before keeps its saved copy, last
        norm and this step's gradient; a new one is measured from its value now."""
        params = self._tracker.params
        prev: list[torch.Tensor | None] = [None] * len(params)
        norms = np.empty(len(params))
        grads = np.full((len(params), _WIDTH), np.nan)
        grad_state = np.full(len(params), _GRAD_PENDING, dtype=np.int8)
        for now, before in followed.carried:
            prev[now], norms[now] = self._prev[before], self._prev_norms[before]
            grads[now], grad_state[now] = self._grads[before], self._grad_state[before]
        with torch.no_grad():
            for i in followed.fresh:
                prev[i] = params[i].detach().clone()
                norms[i] = summarize(measure_now(prev[i], sums=False)).norm
        self._prev, self._prev_norms, self.fresh = prev, norms, followed.fresh
        self._param_plan = None
        self._grads, self._grad_state = grads, grad_state

    # ----------------------------------------------------------------- hooks
    def on_activation(self, module: nn.Module, args: Any, output: Any) -> None:
        """A leaf's forward hook. Only training forwards count (grad enabled, the model in
        training mode): an eval loop's forwards are not the step's activations. A forward that
        runs inside a backward is activation checkpointing's recomputation: it counts only where
        the forward it repeats did not (the reentrant kind runs that one without grad)."""
        if not self.watch_activations or not torch.is_grad_enabled():
            return
        leaf = self._tracker.leaf_of.get(id(module))
        if leaf is None or not leaf.model.training:
            return
        counted, recomputed = self._forwards_counted.get(id(module), 0), torch._C._current_graph_task_id() != -1
        if recomputed and counted:  # the non-reentrant kind: its forward was counted already
            self._forwards_counted[id(module)] = counted - 1
            return
        if not recomputed:
            self._forwards_counted[id(module)] = counted + 1
        outputs = (("", output),) if isinstance(output, torch.Tensor) \
            else named_tensors("", output)
        for suffix, t in outputs:
            if not t.is_floating_point():
                continue
            key = leaf.name + suffix
            try:
                if t.is_cpu:  # reading back is free on the host
                    self._activation_rows.append(activation_row(t, leaf.saturation))
                    self._activation_keys.append(key)
                else:  # measured on the device; read back with the rest of the step
                    index = self._batch.add(t, sums=True, zeros=True,
                                            saturation=leaf.saturation, exact=True)
                    self._pending_activations.append((key, index))
            except Exception as exc:  # noqa: BLE001 - never break the user's forward
                self._failures(f"activation {key}", exc)

    def on_grad_accumulated(self, param: torch.Tensor) -> None:
        """A parameter's post-accumulate-grad hook: queue the capture at this backward's end
        (once per backward, whichever parameter's gradient comes first)."""
        task = torch._C._current_graph_task_id()
        if task != self._backward_task:
            self._backward_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._on_backward_end)

    def before_grad_accumulated(self, pid: int, grad: torch.Tensor) -> None:
        """A parameter's tensor hook, before its gradient is accumulated into ``.grad``. The
        first time in a record: whether ``.grad`` still holds a gradient, the previous step's,
        carried over where no ``zero_grad()`` ran. ``None`` (``set_to_none=True``) is not; the
        very tensor the last record ended with, not modified since, is; one modified in place
        since (``zero_grad(set_to_none=False)``) or set anew is read at one element, not
        reduced (a zeroed one reads 0 there). Device elements are read with the step. A later
        backward that finds ``.grad`` None again (a GAN's generator reached by the
        discriminator's backward, then zeroed before its own) takes the mark back."""
        index = self._tracker.param_index.get(pid)
        if index is None:
            return
        held = self._tracker.params[index].grad
        if pid in self._reached:
            if held is None:
                self._carried.discard(pid)
                self._carried_flags.pop(pid, None)
            return
        self._reached.add(pid)
        if held is None:
            return
        then = self._grads_at_record.get(pid)
        if then is not None and then[0]() is held and held._version == then[1]:
            self._carried.add(pid)  # untouched since the last record ended
            return
        try:
            if held.layout != torch.strided:  # sparse: zero_() leaves no stored values
                if held._nnz():
                    self._carried.add(pid)
            elif held.numel():
                first = held[(0,) * held.dim()].detach()  # a view: compared before accumulation
                if not first.is_cpu:
                    self._carried_flags[pid] = first != 0
                elif first != 0:
                    self._carried.add(pid)
        except Exception as exc:  # noqa: BLE001 - never break the user's backward()
            self._failures("carried-over gradients", exc)

    def _carried_over(self, flagged: float) -> float | None:
        """The share of the parameters this record's backwards reached whose gradient was
        carried over from before (None: no backward reached any); `flagged`: how many device
        elements read non-zero."""
        if not self._reached:
            return None
        return (len(self._carried) + flagged) / len(self._reached)

    def _on_backward_end(self) -> None:
        """Measure every gradient no optimizer has consumed yet in this record, as backward
        left it: accumulated over the micro-batches so far, before any clipping. A later
        backward (the next micro-batch) replaces the capture."""
        consumed = self._consumed
        free = [p for p in self._tracker.params if id(p) not in consumed] if consumed \
            else self._tracker.params
        try:
            capture = self._measure_grads(free)
        except Exception as exc:  # noqa: BLE001 - never break the user's backward()
            self._failures("gradients", exc)
            for p in free:
                self._grad_source.pop(id(p), None)
                self._grad_state[self._tracker.param_index[id(p)]] = _GRAD_LOST
            return
        self._grad_source.update(dict.fromkeys(map(id, free), capture))

    def _measure_grads(self, params: list[nn.Parameter], scaled: bool = True) -> _GradCapture:
        """Queue (and on the host, read) `params`' gradients; `scaled`: as backward left them,
        multiplied by the GradScaler's scale if one is in use."""
        grads = {id(p): (g, g._version) for p in params if (g := p.grad) is not None}
        tensors = [g for g, _ in grads.values()]
        moments = host_rows(tensors, zeros=True)  # the common case: all on the host
        if moments is not None:
            capture = _GradCapture(dict(zip(grads, range(len(tensors)))), grads, None, moments)
            on_host = True
        else:
            batch = MomentBatch()
            capture = _GradCapture({pid: batch.add(g, zeros=True)
                                    for pid, (g, _) in grads.items()}, grads, batch)
            on_host = all(g.is_cpu for g in tensors)
        scaler = self._scaler
        if scaled and capture.rows and scaler is not None and scaler.is_enabled():
            scale = getattr(scaler, "_scale", None)  # a tensor: no sync on the device
            capture.scale = scale.detach().clone() if isinstance(scale, torch.Tensor) \
                else float(scaler.get_scale())
        if on_host:  # the fused kernel reads host tensors at `read`: before they change
            capture.read()
        return capture

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer, args: tuple,
                              kwargs: dict) -> tuple[tuple, dict] | None:
        """The optimizer is about to consume its gradients: keep their capture for the record,
        and measure the global norm of what it consumes where clipping (or the scaler's
        unscale_) changed them since the end of backward. Given a closure, ``step()`` runs the
        backward (Lightning: and the clipping) itself: that is done once the closure returns."""
        name = self._tracker.optimizer_names[id(optimizer)]
        self._stepped[name] = True
        self._step_groups[name] = [_used_hyperparameters(g) for g in optimizer.param_groups]
        # args[0] is the optimizer itself (torch passes step()'s own arguments).
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if not callable(closure):
            self._consume_grads(optimizer)
            return None

        def closure_then_consume() -> Any:
            result = closure()
            self._consume_grads(optimizer)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": closure_then_consume}
        return (args[0], closure_then_consume, *args[2:]), kwargs

    def _consume_grads(self, optimizer: torch.optim.Optimizer) -> None:
        index = self._tracker.param_index
        changed, uncaptured = [], []
        for group in optimizer.param_groups:
            for p in group["params"]:
                pid = id(p)
                if pid not in index or pid in self._consumed:
                    continue
                capture = self._grad_source.get(pid)
                if capture is None:  # a gradient set without backward (or lost)
                    if self._grad_state[index[pid]] == _GRAD_PENDING:
                        uncaptured.append(p)
                    continue
                self._consumed.add(pid)
                then = capture.grads.pop(pid, None)  # not kept alive past the step
                if then is not None and (p.grad is not then[0] or p.grad._version != then[1]):
                    changed.append(p)
        try:
            if uncaptured:
                capture = self._measure_grads(uncaptured, scaled=False)  # after unscale_
                for p in uncaptured:
                    self._grad_source[id(p)] = capture
            changed = [p for p in changed if p.grad is not None]  # a norm for each
            if changed:
                norms = torch._foreach_norm([p.grad for p in changed])
                device = norms[0].device
                # One device (the common case): stacked, then widened, in two kernels, not one
                # per tensor (float64 holds every narrower float exactly: the same values).
                stacked = torch.stack(norms).to(torch.float64) \
                    if all(n.device == device for n in norms) \
                    else torch.stack([n.to(device, torch.float64) for n in norms])
                self._clipped.append(([id(p) for p in changed], stacked))
        except Exception as exc:  # noqa: BLE001 - never break the user's optimizer.step()
            self._failures("gradients", exc)

    # ----------------------------------------------------------------- the step
    def measure(self, step: int, inputs: Any, targets: Any, values: dict[str, Any]
                ) -> StepMeasurement:
        """The step's stats blocks and scalars; never raises (what fails is left out)."""
        try:
            return self._measure(step, inputs, targets, values)
        except Exception as exc:  # noqa: BLE001 - never break the training loop
            self._failures("the step's tensors", exc)
            readable = self._readable_scalars(values)
            self._reset_step_state()
            return StepMeasurement([], readable, None, {}, False)

    def _measure(self, step: int, inputs: Any, targets: Any, values: dict[str, Any]
                 ) -> StepMeasurement:
        batch = self._batch
        self._resolve_grads()
        with torch.no_grad():
            reads = self._queue_params(batch)
            state_names, state_keys, state_index = self._queue_state(batch)
            io = {role: [_Queued(name, t, batch.add(t, sums=True, hashed=True))
                         for name, t in named_tensors(role, value)]
                  for role, value in (("input", inputs), ("target", targets))}
            scalar_offsets = {name: batch.add_value(v) for name, v in values.items()
                              if isinstance(v, torch.Tensor)}
            flags = list(self._carried_flags.values())
            flagged = batch.add_value(torch.stack([f.to(flags[0].device) for f in flags]).sum()) \
                if flags else None
            moments, flat = batch.read()
            if reads.refresh:
                torch._foreach_copy_([p for p, _ in reads.refresh], [n for _, n in reads.refresh])
        reads.fill(moments)
        blocks = self._param_blocks(step, reads)
        grad_block, measured = self._grad_block(step, reads.params[:, MomentColumn.NUMEL])
        blocks.append(grad_block)
        grad_sumsq = np.bincount(self._tracker.param_model[measured],
                                 weights=self._grads[measured, MomentColumn.SUMSQ],
                                 minlength=len(self._tracker.models))
        clip_scalars = self._clip_scalars(measured, grad_sumsq)
        if state_index:
            blocks.append(StatsBlock(step, "state", state_names, moments[state_index],
                                     keys=state_keys))
        blocks.extend(self._activation_blocks(step, moments))
        blocks.extend(_io_block(step, role, tensors, moments, batch)
                      for role, tensors in io.items() if tensors)
        nonfinite = bool((np.concatenate([block.moments[:, MomentColumn.NONFINITE]
                                          for block in blocks]) > 0).any())
        carried_over = self._carried_over(0.0 if flagged is None else flat[flagged])
        self._reset_step_state()
        read = {name: flat[scalar_offsets[name]] if name in scalar_offsets else v
                for name, v in values.items()}
        return StepMeasurement(blocks, read, grad_sumsq, clip_scalars, nonfinite, carried_over)

    def _queue_params(self, batch: MomentBatch) -> _ParamReads:
        """Parameters and their updates since the last record. On the host reading back is
        free: measured at once, `prev` refilled in the same fused pass; elsewhere queued."""
        plan = self._param_plan
        if plan is not None and not self.fresh \
                and plan.signatures == list(map(signature, self._tracker.params)):
            params, updates, _ = plan.call.measure()
            return _ParamReads(params, updates)
        current = [p.detach() for p in self._tracker.params]
        prevs = self._prev
        reads = _ParamReads(np.empty((len(current), _WIDTH)),
                            np.full((len(current), _WIDTH), np.nan))
        # A parameter moved to another device, cast or reshaped since the last record has
        # no update this step: its saved copy starts again from its new value.
        moved = {i for i, (prev, now) in enumerate(zip(prevs, current))
                 if (prev.shape, prev.dtype, prev.device) != (now.shape, now.dtype, now.device)}
        moved |= self.fresh
        for i in moved:
            prevs[i] = current[i].clone()
        on_host = [i for i, prev in enumerate(prevs) if prev.is_cpu and i not in moved]
        if on_host:
            pairs = [(current[i], prevs[i]) for i in on_host]
            reads.params[on_host], reads.updates[on_host] = params_and_updates(pairs)
            if len(on_host) == len(current) and (call := fused_pairs(pairs)) is not None:
                self._param_plan = _Plan(list(map(signature, current)), call)
        host = set(on_host)
        for i, (now, prev) in enumerate(zip(current, prevs)):
            if i in host:
                continue
            update = None
            param = batch.add(now, sums=True)
            if i not in moved:
                prev.sub_(now)  # prev := prev - now = -update
                update = batch.add(prev, extremes=False)
                reads.refresh.append((prev, now))
            reads.queued.append((i, param, update))
        return reads

    def _queue_state(self, batch: MomentBatch) -> tuple[list[str], list[str], list[int]]:
        """The optimizers' tensor state of followed parameters: names, keys, batch indices.
        While the same tensors keep their signatures, the fused call prepared for them is
        queued again."""
        names, keys, tensors = [], [], []
        for opt in self._tracker.optimizers.values():
            for p, state in opt.state.items():
                name = self._tracker.param_names.get(id(p))
                if name is None:
                    continue
                for key, value in state.items():
                    if isinstance(value, torch.Tensor) and key != "step":
                        names.append(name)
                        keys.append(str(key))
                        tensors.append(value)
        signatures = (names, keys, list(map(signature, tensors)))
        plan = self._state_plan
        if plan is not None and plan.signatures == signatures:
            return names, keys, list(batch.add_call(plan.call))
        call = fused_call(tensors)
        self._state_plan = None if call is None else _Plan(signatures, call)
        return names, keys, [batch.add(t) for t in tensors]

    def _param_blocks(self, step: int, reads: _ParamReads) -> list[StatsBlock]:
        """The param and update blocks; the update ratio is |update| / |param| at the last
        record."""
        params, updates = reads.params, reads.updates
        ratios = np.full(len(params), np.nan)
        np.divide(np.sqrt(updates[:, MomentColumn.SUMSQ]), self._prev_norms, out=ratios,
                  where=self._prev_norms > 0)
        self._prev_norms = np.sqrt(params[:, MomentColumn.SUMSQ])
        labels = self._tracker.param_labels
        return [StatsBlock(step, "param", labels, params),
                StatsBlock(step, "update", labels, updates, extra={"ratio": ratios})]

    def _grad_block(self, step: int, numel: np.ndarray) -> tuple[StatsBlock, np.ndarray]:
        """The grad block (a gradient that could not be measured has no row) and which
        parameters' gradients were measured."""
        measured = self._grad_state == _GRAD_MEASURED
        none = self._grad_state == _GRAD_NONE
        grads = self._grads.copy()  # NaN rows where not measured
        grads[:, MomentColumn.NUMEL] = numel
        labels, grad_none = self._tracker.param_labels, none.tolist()
        shown = measured | none
        if shown.all():
            return StatsBlock(step, "grad", labels, grads, extra={"grad_none": grad_none}), measured
        rows = np.flatnonzero(shown).tolist()
        return StatsBlock(step, "grad", [labels[i] for i in rows], grads[rows],
                          extra={"grad_none": [grad_none[i] for i in rows]}), measured

    def _activation_blocks(self, step: int, moments: np.ndarray) -> list[StatsBlock]:
        """One row per leaf output name (a module called twice, by two micro-batches say,
        pools its outputs), names in the order first seen, the device's after the host's."""
        keys = self._activation_keys + [key for key, _ in self._pending_activations]
        if not keys:
            return []
        rows = np.concatenate([kernel_rows(self._activation_rows),
                               moments[[index for _, index in self._pending_activations]]])
        names: dict[str, int] = {}
        groups = [names.setdefault(key, len(names)) for key in keys]
        return [StatsBlock(step, "activation", list(names), combine_rows(rows, groups,
                                                                         len(names)))]

    def _resolve_grads(self) -> None:
        """This record's gradients from the backward captures; one that no backward captured
        (set by hand, or left from an earlier step) is read as it is now."""
        state, grads, index = self._grad_state, self._grads, self._tracker.param_index
        uncaptured = []
        for i, p in enumerate(self._tracker.params):
            capture = self._grad_source.get(id(p))
            if capture is None:
                if state[i] == _GRAD_PENDING:
                    uncaptured.append(p)
                continue
            self._take_grad(i, capture, p)
        if uncaptured:
            capture = self._measure_grads(uncaptured, scaled=False)
            for p in uncaptured:
                self._take_grad(index[id(p)], capture, p)

    def _take_grad(self, i: int, capture: _GradCapture, p: nn.Parameter) -> None:
        row = capture.rows.get(id(p))
        if row is None:
            self._grad_state[i] = _GRAD_NONE
        else:
            self._grads[i] = capture.read()[row]
            self._grad_state[i] = _GRAD_MEASURED

    def _clip_scalars(self, measured: np.ndarray, grad_sumsq: np.ndarray) -> dict[str, float]:
        """grad_norm_clipped and clip_coef where the optimizers consumed gradients other than
        backward left them (clipping, unscale_)."""
        out = {}
        if self._clipped:
            consumed = {}
            for pids, norms in self._clipped:
                consumed.update(zip(pids, np.square(norms.tolist())))
            params = self._tracker.params
            unchanged = [i for i in np.flatnonzero(measured).tolist()
                         if id(params[i]) not in consumed]
            clipped = math.sqrt(sum(consumed.values())
                                + self._grads[unchanged, MomentColumn.SUMSQ].sum())
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
                self._failures(f"scalar {name}", exc)
        return readable

    def _reset_step_state(self) -> None:
        # Host leaf outputs as measured (a kernel row each) and their names, in hook order.
        self._activation_rows: list[bytes] = []
        self._activation_keys: list[str] = []
        self._pending_activations: list[tuple[str, int]] = []  # device: (name, batch index)
        self._forwards_counted: dict[int, int] = {}  # id(leaf) -> its counted forwards a backward may recompute
        self._batch = MomentBatch()
        self._grad_state[:] = _GRAD_PENDING
        self._grads[:] = np.nan
        # This record's gradients: id(parameter) -> the backward capture that holds its
        # gradient; those an optimizer consumed are not replaced by a later backward.
        self._grad_source: dict[int, _GradCapture] = {}
        self._consumed: set[int] = set()
        self._clipped: list[tuple[list[int], torch.Tensor]] = []  # post-clip norms at a step
        # Parameters a backward reached in this record, and those of them that held a gradient
        # then (on the host: known at once; on a device: a flag each, read with the step).
        self._reached: set[int] = set()
        self._carried: set[int] = set()
        self._carried_flags: dict[int, torch.Tensor] = {}
        # What each .grad held as the record ended (not kept alive): a backward of the next one
        # that finds the same tensor, unmodified, finds it carried over.
        self._grads_at_record = {id(p): (weakref.ref(g), g._version)
                                 for p in self._tracker.params if (g := p.grad) is not None}

    # ----------------------------------------------------------------- scalars
    def scalar_rows(self, step: int, measured: StepMeasurement, wall: float) -> list[tuple]:
        """The step's scalar rows: the user's, the gradient norms, each optimizer's
        hyper-parameters and whether it stepped, the scaler's scale, the wall time. An
        optimizer that stepped has the hyper-parameters of its (last) step, as its pre-step
        hook saw them: a scheduler stepped between ``optimizer.step()`` and ``rec.step()``
        does not date its change a step early. One that did not step has its current ones."""
        rows = [(step, name, value) for name, value in measured.scalars.items()]
        if measured.grad_sumsq is not None:
            rows.append((step, "grad_norm", math.sqrt(measured.grad_sumsq.sum())))
            if len(self._tracker.models) > 1:
                for model_name, sumsq in zip(self._tracker.models, measured.grad_sumsq.tolist()):
                    rows.append((step, f"grad_norm.{model_name}", math.sqrt(sumsq)))
        rows.extend((step, name, value) for name, value in measured.clip_scalars.items())
        if measured.grad_carried_over is not None:
            rows.append((step, "grad_carried_over", measured.grad_carried_over))
        first = "lr" not in measured.scalars  # an lr passed to rec.step() wins
        for opt_name, opt in self._tracker.optimizers.items():
            stepped = self._stepped[opt_name]
            rows.append((step, f"optimizer_stepped.{opt_name}", float(stepped)))
            groups = opt.param_groups
            if stepped:  # a group added since the step has its current values
                used = self._step_groups[opt_name]
                groups = used + groups[len(used):]
            for g, group in enumerate(groups):
                for hp, value in hyperparameters(group).items():
                    if first and hp == "lr":
                        rows.append((step, "lr", value))
                        first = False
                    rows.append((step, f"hp.{opt_name}.{g}.{hp}", value))
        if self._scaler is not None and self._scaler.is_enabled():
            scale = float(self._scaler.get_scale())
            rows.append((step, "grad_scale", scale))
            # A skipped step: an optimizer did not step and scaler.update() backed the scale
            # off (it does exactly when unscale_ found an inf or a NaN).
            skipped = not all(self._stepped.values()) and scale < self._last_scale
            rows.append((step, "scaler_skipped", float(skipped)))
            self._last_scale = scale
        rows.append((step, "wall_time", wall))
        self._stepped = dict.fromkeys(self._tracker.optimizers, False)
        return rows
