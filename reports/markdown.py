"""Markdown summary for pasting into a ticket: at most 30 lines, no raw HTML from the run."""
from __future__ import annotations

import os

from reports.page import headline, key_facts
from reports.text import clean, fmt_step, shorten

__all__ = ["render_markdown", "MAX_LINES"]

MAX_LINES = 30


def _md(text: str) -> str:
    """Markdown-safe text: code spans kept, everything else without HTML or table syntax."""
    parts = clean(text).split("`")
    if len(parts) % 2 == 0:  # unbalanced backtick: show it as a plain character
        parts = [clean(text).replace("`", "'")]
    out = []
    for index, part in enumerate(parts):
        if index % 2:
            out.append("`" + part.replace("|", "\\|") + "`")
        else:
            out.append(part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                       .replace("|", "\\|").replace("[", "\\[").replace("]", "\\]"))
    return "".join(out)


def render_markdown(analysis, *, report_name: str = "report.html") -> str:
    """The verdict, key facts, chain and diagnoses in at most MAX_LINES lines."""
    run_name = os.path.basename(os.path.normpath(str(analysis.run.path)))
    lines = [f"### postmortem: {_md(shorten(run_name, 80))}: {analysis.verdict.replace('_', ' ')}", "",
             _md(headline(analysis)), "", "| | |", "|---|---|"]
    # The chain below says what amplified; the spread and step count are detail for the report.
    facts = [f for f in key_facts(analysis) if f.label not in ("Amplified first", "Non-finite tensors per step", "Steps recorded")]
    lines += [f"| {_md(f.label)} | {_md(f.value)} |" for f in facts[:8]]
    fixes = [f for f in analysis.significant if f.fix and f.label != "healthy"]
    if analysis.chain:
        lines += ["", "**What amplified first**", ""]
        lines += [f"{i}. {_md(shorten(link, 200))}" for i, link in enumerate(analysis.chain[:3], 1)]
    if fixes:
        lines += ["", "**Diagnoses**", ""]
        lines += [f"- **{_md(f.label)}** ({fmt_step(f.step)}): {_md(shorten(f.fix, 240))}" for f in fixes[:5]]
    footer = f"Full report: {_md(report_name)}"
    if len(lines) > MAX_LINES - 2:
        lines = lines[: MAX_LINES - 3] + ["…"]
    return "\n".join([*lines, "", footer]) + "\n"
