"""What the manifest says about the models: names in order, shapes, frozen parameters."""

from __future__ import annotations

__all__ = ["manifest_order", "parameter_shapes", "frozen_parameters", "lookup_tables", "module_types", "is_weight",
           "optimizer_groups"]

# Modules whose weight is a table of rows looked up by index, not a map applied to an input.
_LOOKUP_MODULES = ("Embedding", "EmbeddingBag")


def _entries(manifest: dict, section: str):
    """(qualified name, entry) pairs; with several models the model name is a prefix."""
    models = manifest.get("models") or {}
    if not isinstance(models, dict):
        return
    for model_name, model in models.items():
        if not isinstance(model, dict):
            continue
        prefix = f"{model_name}." if len(models) > 1 else ""
        for entry in model.get(section) or []:
            if isinstance(entry, dict) and entry.get("name"):
                yield prefix + str(entry["name"]), entry


def optimizer_groups(manifest: dict) -> dict[str, list[str]]:
    """"<optimizer>.<group index>" → the names of that param group's parameters, as the
    recorded `hp.<optimizer>.<group>.<name>` scalars name the groups."""
    groups = {}
    optimizers = manifest.get("optimizers")
    for opt, entry in optimizers.items() if isinstance(optimizers, dict) else ():
        param_groups = entry.get("param_groups") if isinstance(entry, dict) else None
        for g, group in enumerate(param_groups) if isinstance(param_groups, list) else ():
            if isinstance(group, dict) and isinstance(group.get("params"), list):
                groups[f"{opt}.{g}"] = [str(p) for p in group["params"]]
    return groups


def manifest_order(manifest: dict) -> dict[str, int]:
    """Module then parameter names in registration order (≈ forward order), for tie-breaks."""
    order: dict[str, int] = {}
    for section in ("modules", "parameters"):
        for name, _ in _entries(manifest, section):
            order.setdefault(name, len(order))
    return order


def parameter_shapes(manifest: dict) -> dict[str, list[int]]:
    """Parameter name -> shape, for shapes that are lists of non-negative integers."""
    return {
        name: entry["shape"]
        for name, entry in _entries(manifest, "parameters")
        if isinstance(entry.get("shape"), list)
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in entry["shape"])
    }


def module_types(manifest: dict) -> dict[str, str]:
    """Qualified module name → its class name (`Sigmoid`, `Linear`)."""
    return {name: str(entry.get("type")) for name, entry in _entries(manifest, "modules")}


def lookup_tables(manifest: dict) -> set[str]:
    """The weights of lookup modules (`nn.Embedding`, `nn.EmbeddingBag`)."""
    return {f"{name}.weight" for name, kind in module_types(manifest).items() if kind in _LOOKUP_MODULES}


def frozen_parameters(manifest: dict) -> set[str]:
    return {name for name, entry in _entries(manifest, "parameters") if entry.get("requires_grad") is False}


def is_weight(name: str, numel: int, shapes: dict[str, list[int]]) -> bool:
    """A weight a layer multiplies by (a matrix or a kernel: two or more dimensions, as nanoGPT's
    configure_optimizers tells weights from biases and norm gains by `p.dim() >= 2`), read from the
    manifest's shape; a parameter the manifest does not list is a weight when it is named `*weight`
    and has more than one element. By shape, an LSTM's `weight_ih_l0` and weights kept in a
    ParameterDict (`weight.base`) are weights, a LayerNorm's gain is not."""
    shape = shapes.get(name)
    return len(shape) >= 2 if shape is not None else name.endswith("weight") and numel > 1
