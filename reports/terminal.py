"""The verdict as plain terminal lines (`postmortem summary`), free of control characters."""
from __future__ import annotations

import textwrap

from reports.page import headline, key_facts
from reports.text import clean, fmt_step, shorten

__all__ = ["render_summary"]


def render_summary(analysis, *, width: int = 100) -> str:
    lines = textwrap.wrap(clean(headline(analysis)), width) + [""]
    facts = key_facts(analysis)
    label_width = max(len(f.label) for f in facts)
    lines += [f"  {f.label.ljust(label_width)}  {clean(f.value)}" for f in facts]
    if analysis.chain:
        lines += ["", "What amplified first:"]
        lines += [f"  {i}. {shorten(clean(link), width)}" for i, link in enumerate(analysis.chain[:5], 1)]
    findings = [f for f in analysis.significant if f.label != "healthy"]
    if findings:
        lines += ["", "Diagnoses:"]
        for finding in findings:
            lines.append(f"  {clean(finding.label)} ({fmt_step(finding.step)})")
            if finding.fix:
                lines += textwrap.wrap(f"fix: {clean(finding.fix)}", width, initial_indent="    ",
                                       subsequent_indent="      ")
    if analysis.warnings:  # the run's own warnings are among them
        lines += ["", "Warnings:"] + [f"  {shorten(clean(w), width)}" for w in analysis.warnings[:10]]
    return "\n".join(lines) + "\n"
