"""`postmortem compare` in words: where two runs part ways (postmortem.compare finds it)."""
from __future__ import annotations

from postmortem.compare import Comparison, Difference

from reports.text import clean, fmt_number, shorten

__all__ = ["render_comparison", "difference_details"]

_MAX_DETAILS = 6
_WHAT = {"different_batch": "different batches",
         "different_values": "same batch, different numbers",
         "missing_step": "a step recorded in only one run"}


def render_comparison(comparison: Comparison) -> str:
    """Human-readable lines for the terminal."""
    if comparison.first_difference is None:
        text = f"The runs agree on all {comparison.common_steps} common steps (same batches, same losses and gradients)."
        if comparison.last_step_a != comparison.last_step_b:
            text += f"\nRun A ends at step {comparison.last_step_a}, run B at step {comparison.last_step_b}."
        return text
    diff = comparison.first_difference
    return "\n".join([f"First difference at step {diff.step}: {_WHAT[diff.reason]}."]
                     + [f"  {d}" for d in difference_details(diff)])


def difference_details(diff: Difference) -> list[str]:
    """One line per series that differs (at most six), then the tensors whose gradients do."""
    if diff.reason == "missing_step":
        return [f"step {diff.step} is recorded in run {diff.only_in} only"]
    shown = diff.mismatches[:_MAX_DETAILS]
    if diff.reason == "different_batch":
        return [f"{shorten(clean(m.series), 80)}: hash {shorten(clean(m.a), 16)} vs {shorten(clean(m.b), 16)}"
                for m in shown]
    details = [f"{shorten(clean(m.series), 80)}: {fmt_number(m.a, 8)} vs {fmt_number(m.b, 8)}" for m in shown]
    if diff.gradients:
        names = ", ".join(shorten(clean(n), 60) for n in diff.gradients[:_MAX_DETAILS])
        more = f" and {len(diff.gradients) - _MAX_DETAILS} more" if len(diff.gradients) > _MAX_DETAILS else ""
        details.append(f"gradient norms differ for: {names}{more}")
    return details
