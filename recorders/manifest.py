"""The run's manifest: who recorded what, with which models, optimizers and options."""

from __future__ import annotations

import math
import platform
import socket
import sys
import uuid
from datetime import datetime, timezone
from numbers import Real
from typing import Any

import torch
from torch.nn.parameter import is_lazy

from .vocabulary import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "new_manifest", "model_structure", "optimizer_structure",
           "utc_now", "hyperparameters", "HYPERPARAMETER_KEYS", "SCALAR_HYPERPARAMETERS"]


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json_number(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, Real):
        value = float(value) if not isinstance(value, int) else value
        return value if not isinstance(value, float) or math.isfinite(value) else str(value)
    if isinstance(value, (tuple, list)):
        return [_json_number(v) for v in value]
    return str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        value = value.item()
    if isinstance(value, Real) and not isinstance(value, bool):
        return float(value)
    return None


SCALAR_HYPERPARAMETERS = ("lr", "momentum", "weight_decay", "eps")
"""The param-group entries recorded as they are; ``betas`` is recorded split in two."""
HYPERPARAMETER_KEYS = (*SCALAR_HYPERPARAMETERS, "betas")
"""Every param-group entry that :func:`hyperparameters` reads."""


def hyperparameters(group: dict[str, Any]) -> dict[str, float]:
    """Numeric hyper-parameters of a param group, betas split into beta1/beta2 (values that
    are not numbers, as a hand-edited group may hold, are left out)."""
    out = {name: _number(group.get(name)) for name in SCALAR_HYPERPARAMETERS}
    betas = group.get("betas")
    if isinstance(betas, (tuple, list)) and len(betas) == 2:
        out["beta1"], out["beta2"] = (_number(b) for b in betas)
    return {name: value for name, value in out.items() if value is not None}


def model_structure(model: torch.nn.Module) -> dict[str, Any]:
    return {
        "class": type(model).__name__,
        "modules": [{"name": name, "type": type(m).__name__}
                    for name, m in model.named_modules() if name],
        # A lazy module's parameters have no shape until its first forward.
        "parameters": [{"name": name, "shape": None if is_lazy(p) else list(p.shape),
                        "dtype": str(p.dtype)[6:], "requires_grad": p.requires_grad}
                       for name, p in model.named_parameters()],
    }


def optimizer_structure(opt: torch.optim.Optimizer, param_names: dict[int, str],
                        param_models: dict[int, str]) -> dict[str, Any]:
    groups = []
    models: list[str] = []
    for group in opt.param_groups:
        entry = {k: _json_number(v) for k, v in group.items() if k != "params"}
        entry["params"] = [param_names.get(id(p), "<unnamed>") for p in group["params"]]
        groups.append(entry)
        for p in group["params"]:
            owner = param_models.get(id(p))
            if owner is not None and owner not in models:
                models.append(owner)
    return {"class": type(opt).__name__, "models": models, "param_groups": groups}


def new_manifest(*, models: dict[str, torch.nn.Module], optimizers: dict[str, torch.optim.Optimizer],
                 param_names: dict[int, str], param_models: dict[int, str],
                 options: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "started_at": utc_now(),
        "ended_at": None,
        "status": "running",
        "exception": None,
        "last_step": None,
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "argv": list(sys.argv),
        "models": {name: model_structure(m) for name, m in models.items()},
        "optimizers": {name: optimizer_structure(o, param_names, param_models)
                       for name, o in optimizers.items()},
        "options": options,
        "config": config,
    }
