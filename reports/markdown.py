"""Markdown summary for pasting into a ticket: at most 30 lines, no raw HTML from the run."""
from __future__ import annotations

import re

from reports.page import headline, key_facts
from reports.text import clean, fmt_step, shorten

__all__ = ["render_markdown", "MAX_LINES"]

MAX_LINES = 30


_BACKTICKS = re.compile(r"`+")
# Outside code spans: every character CommonMark (or GitHub's tables) gives a meaning to inline,
# and `_` where it can start or end emphasis (inside a word it cannot).
_SPECIAL = re.compile(r"[\\`*~\[\]|]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# First on a line these start a heading, a rule or a list: escape the character that does.
_LINE_START = re.compile(r"^(?:[#=+-]|\d+(?=[.)]))")


def _spans(text: str) -> list[tuple[bool, str]]:
    """`text` cut into (is code, part) as CommonMark pairs backticks: a run of n backticks opens
    a code span that the next run of exactly n closes; a run that nothing closes is text."""
    parts, start, at = [], 0, 0
    while (run := _BACKTICKS.search(text, at)) is not None:
        closing = next((m for m in _BACKTICKS.finditer(text, run.end())
                        if len(m.group()) == len(run.group())), None)
        if closing is None:
            at = run.end()
            continue
        parts += [(False, text[start:run.start()]), (True, text[run.end():closing.start()])]
        start = at = closing.end()
    return [*parts, (False, text[start:])]


def _code(part: str, in_table: bool) -> str:
    """A code span fenced by a backtick run longer than any inside it (padded with a space
    where it starts or ends with a backtick or a space, which CommonMark strips once)."""
    fence = "`" * (max((len(r) for r in _BACKTICKS.findall(part)), default=0) + 1)
    if part.strip(" ") and (part[0] in "` " or part[-1] in "` "):
        part = f" {part} "
    return fence + (part.replace("|", r"\|") if in_table else part) + fence


def _text(part: str) -> str:
    escaped = _SPECIAL.sub(lambda m: "\\" + m.group(), part)
    return re.sub("[&<>]", lambda m: _ENTITIES[m.group()], escaped)


def _line_start(match: re.Match) -> str:
    found = match.group()
    return found + "\\" if found.isdigit() else "\\" + found  # `1\.` or `\#`


def _md(text: str, *, in_table: bool = False) -> str:
    """Markdown showing `text` as it is, its `backticked` names as code spans: nothing in it can
    open a link, an image, raw HTML, emphasis or a table cell, wherever it is placed."""
    out = "".join(_code(part, in_table) if code else _text(part)
                  for code, part in _spans(clean(text).strip()))
    return _LINE_START.sub(_line_start, out, count=1)


def render_markdown(analysis, *, report_name: str = "report.html") -> str:
    """The verdict, key facts, chain and diagnoses in at most MAX_LINES lines."""
    lines = [f"### postmortem: {_md(shorten(analysis.data.run_name, 80))}: {analysis.verdict.replace('_', ' ')}", "",
             _md(headline(analysis)), "", "| | |", "|---|---|"]
    # The chain below says what amplified; the spread and step count are detail for the report.
    facts = [f for f in key_facts(analysis) if f.label not in ("Amplified first", "Non-finite tensors per step", "Steps recorded")]
    lines += [f"| {_md(f.label, in_table=True)} | {_md(f.value, in_table=True)} |" for f in facts[:8]]
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
