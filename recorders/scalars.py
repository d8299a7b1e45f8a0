"""What ``rec.step(**scalars)`` records of the scalars it is given.

Training must not stop for a value the recorder finds odd: a per-sample loss tensor is reduced
to its mean (warned once), a numpy 0-d array or scalar is read as a float, and anything else
that is not a number is left out (the recorder warns once and names it in the manifest).
``strict=True`` raises instead. A scalar named like one the recorder writes itself
(``grad_norm``, ``clip_coef``...) is kept apart as ``user.<name>`` (warned once), so neither hides the
other.
"""

from __future__ import annotations

import warnings
from numbers import Real
from typing import Any, Mapping

import numpy as np
import torch

from .errors import RecorderWarning
from .vocabulary import USER_PREFIX, is_reserved_scalar

__all__ = ["ScalarReader"]

class ScalarReader:
    """Turns ``rec.step()``'s keyword scalars into name -> float or one-element tensor."""

    def __init__(self, *, strict: bool) -> None:
        self.strict = strict
        self._warned: set[str] = set()  # which warnings were given (each once per run)

    def __call__(self, scalars: Mapping[str, Any]
                 ) -> tuple[dict[str, torch.Tensor | float], list[tuple[str, Exception]]]:
        """The scalars to record, and (name, why) for each one left out."""
        values, left_out = {}, []
        for name, value in scalars.items():
            try:
                read = self._value(name, value)
            except (TypeError, ValueError) as exc:
                if self.strict:
                    raise
                left_out.append((name, exc))
                continue
            if is_reserved_scalar(name):
                self._warn_once("reserved", f"rec.step({name}=...): `{name}` is a scalar the "
                                "recorder writes itself; yours is recorded as "
                                f"`{USER_PREFIX}{name}` (so are other reserved names)")
                name = USER_PREFIX + name
            values[name] = read
        return values, left_out

    def _value(self, name: str, value: Any) -> torch.Tensor | float:
        if isinstance(value, np.ndarray) or isinstance(value, np.generic):
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise TypeError(f"rec.step({name}=...) needs a number, got an array of "
                                f"{array.dtype}")
            if array.size == 1:
                return float(array.reshape(-1)[0])
            value = torch.from_numpy(np.ascontiguousarray(array))
        if isinstance(value, torch.Tensor):
            if value.numel() == 1:
                return value
            if self.strict or value.numel() == 0 or value.is_complex():
                raise ValueError(f"rec.step({name}=...) needs a scalar, got a tensor of shape "
                                 f"{tuple(value.shape)}")
            self._warn_once("mean", f"rec.step({name}=...) got a tensor of shape "
                            f"{tuple(value.shape)}; its mean is recorded (pass a scalar to "
                            "record something else)")
            return value.detach().float().mean()
        if isinstance(value, Real):
            return float(value)
        raise TypeError(f"rec.step({name}=...) needs a number or a one-element tensor, "
                        f"got {type(value).__name__}")

    def _warn_once(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(f"postmortem recorder: {message}", RecorderWarning, stacklevel=4)
