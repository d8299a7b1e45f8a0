"""Plain-text helpers shared by the HTML, Markdown and terminal renderers.

Names in a run directory come from other people's code and machines: they may carry terminal
escape sequences or bidirectional overrides that would rewrite what a reader sees, or lone
surrogates (undecodable bytes of a file name) that no UTF-8 page can hold. Every string that
comes from a run goes through `clean` before it is shown anywhere.
"""
from __future__ import annotations

import math
import re
import unicodedata

from recorders.vocabulary import LABELS, ROLES, describe_tensor

__all__ = ["clean", "fmt_number", "fmt_step", "fmt_interval", "fmt_growth", "series_words", "shorten", "tensor_words"]

# Explicit bidi controls are category Cf; they can make `fc1` display as something else.
_BIDI_CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def clean(value: object, *, keep_newlines: bool = False) -> str:
    """Text of a run-supplied value with control characters (C0, C1, DEL, bidi) removed and
    lone surrogates shown as their escape (`\\udcff`)."""
    text = "" if value is None else str(value)
    kept = []
    for char in text:
        if char == "\n" and keep_newlines:
            kept.append(char)
        elif char == "\t":
            kept.append(" ")
        elif unicodedata.category(char) == "Cc" or char in _BIDI_CONTROLS:
            continue
        elif "\ud800" <= char <= "\udfff":
            kept.append(f"\\u{ord(char):04x}")
        else:
            kept.append(char)
    return "".join(kept)


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with an ellipsis, so one huge name cannot flood a page."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def fmt_number(value: object, digits: int = 3) -> str:
    """A number as a reader wants it: ints in full, floats to `digits` significant figures."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    try:
        number = float(value)  # numpy scalars too
    except (TypeError, ValueError):
        return clean(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if number == int(number) and abs(number) < 1e6:
        return str(int(number))
    return f"{number:.{digits}g}"


def fmt_step(step: object) -> str:
    return "—" if step is None else f"step {int(step)}"


def fmt_interval(interval: object) -> str:
    """Onset interval `(lo, hi)` as ` (interval 39–41)`; empty when the step is exact."""
    if not interval:
        return ""
    lo, hi = (int(v) for v in interval)
    return "" if lo == hi else f" (interval {lo}–{hi})"


def fmt_growth(growth_per_step: object, doubling_steps: object = None) -> str:
    """Growth as `×1.8/step (doubles every 1.2 steps)`; empty when there is no growth (`1.0`
    is a pure jump: "×1/step" would read as a rate)."""
    if growth_per_step is None or not float(growth_per_step) > 1.0:
        return ""
    text = f"×{fmt_number(growth_per_step)}/step"
    if doubling_steps is not None and math.isfinite(float(doubling_steps)):
        text += f" (doubles every {fmt_number(doubling_steps, 2)} steps)"
    return text


_SERIES = re.compile(r"(\w+) (\S+?)(?:\[([^\]]+)\])?")
_CAUSE_SERIES = re.compile(r"(\w+): (.+)")  # an onset dated by a direct cause: "<label>: <what it names>"


def tensor_words(tensor: object, role: object, key: object = None) -> str:
    """A recorded tensor in words (`recorders.vocabulary.describe_tensor`), its names cleaned."""
    return describe_tensor(shorten(clean(tensor), 120), clean(role), clean(key) if key else None)


def series_words(series: object) -> str:
    """An onset's series (`grad fc1.weight`, `scalar loss`, `state fc1.weight[exp_avg_sq]`) in
    words; a direct cause's (`hyperparameter_changed: hp.opt.0.lr`) as what it names, then its
    label; a series described in words already (`grad norms (accumulating: ...)`) as it is."""
    text = clean(series)
    cause = _CAUSE_SERIES.fullmatch(text)
    if cause is not None and cause.group(1) in LABELS:
        return f"`{shorten(cause.group(2), 120)}` ({cause.group(1)})"
    match = _SERIES.fullmatch(text)
    if match is None or match.group(1) not in (*ROLES, "scalar"):
        return shorten(text, 120)
    return tensor_words(match.group(2), match.group(1), match.group(3))
