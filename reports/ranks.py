"""A distributed run's report: which rank went bad first, how it spread, then that rank in full.

The page is the first rank's own report (reports/page.py) with a "Ranks" section in front and
the first rank named in the headline; the Markdown summary keeps to the 30-line limit.
"""
from __future__ import annotations

import dataclasses
import os
import textwrap
from collections.abc import Callable

from reports.markdown import MAX_LINES, _md
from reports.page import Fact, Page, Section, Table, build_page, headline
from reports.terminal import render_summary
from reports.text import clean, fmt_step, series_words, shorten

__all__ = ["build_ranks_page", "origin_sentence", "ranks_section", "render_ranks_markdown",
           "render_ranks_summary", "spread_sentence"]

_OWN_SHOWN = 3  # in a sentence; the table names the first only
_MARKDOWN_RANKS = 12


def _own_values(own: tuple[tuple[str, str], ...], shown: int = _OWN_SHOWN) -> str:
    """`input `x`, activation `fc1`, loss `loss``: the rank's own non-finite series."""
    named = [f"{'loss' if role == 'scalar' else clean(role)} `{shorten(clean(name), 80)}`" for role, name in own]
    more = len(named) - shown
    return ", ".join(named[:shown]) + (f" and {more} more" if more > 0 else "")


def _ranks(numbers) -> str:
    numbers = [str(n) for n in numbers]
    return numbers[0] if len(numbers) == 1 else ", ".join(numbers[:-1]) + " and " + numbers[-1]


def origin_sentence(multi) -> str:
    """Which rank showed the anomaly first, when, and in what."""
    origin = multi.origin
    if origin is None:
        shown = multi.shown
        if shown.analysis.verdict == "healthy":
            return f"No rank diverged or recorded a non-finite value ({len(multi.analysed)} analysed)."
        return (f"No rank diverged or recorded a non-finite value; rank {shown.rank} is shown, "
                f"the first with a {shown.analysis.verdict.replace('_', ' ')} verdict.")
    first = next(r for r in multi.ranks if r.rank == origin.rank)
    also = (f" (rank{'s' if len(origin.tied) > 1 else ''} {_ranks(origin.tied)} could not be told "
            "apart from it)" if origin.tied else "")
    if origin.by == "onset":
        return (f"No rank recorded a non-finite value; rank {origin.rank} began to diverge first, "
                f"at step {origin.step} in {series_words(first.analysis.onset.series)}{also}.")
    if origin.own:
        return (f"Rank {origin.rank} went bad first: at step {origin.step} its own values were "
                f"non-finite ({_own_values(first.own_nonfinite)}){also}.")
    value = first.analysis.first_nonfinite
    return (f"Rank {origin.rank} recorded the first non-finite value, at step {origin.step} in the "
            f"{clean(value.role)} of `{shorten(clean(value.tensor), 80)}`{also}; no rank's own values "
            "(batch, activations, loss) were non-finite before the shared ones.")


def spread_sentence(multi) -> str:
    """How the anomaly reached the other ranks, and which stayed clear."""
    if multi.origin is None:
        return ""
    parts = []
    for spread in multi.spread[1:]:
        when = "the same step" if spread.lag_steps == 0 else f"{spread.lag_steps} steps later"
        how = ("with its own values too" if spread.own else
               "with shared values only: gradients and what the optimizer step derives from "
               "them, as the gradient all-reduce carries them")
        parts.append(f"rank {spread.rank} at step {spread.step}, {when}, {how}")
    reached = {s.rank for s in multi.spread}
    clear = [r.rank for r in multi.analysed if r.rank not in reached]
    text = "It reached " + "; ".join(parts) + "." if parts else "No other rank showed it."
    if clear:
        word = "stayed finite" if multi.origin.by == "first_nonfinite" else "did not diverge"
        text += f" Rank{'s' if len(clear) > 1 else ''} {_ranks(clear)} {word}."
    return text


def _first_value(result) -> str:
    first = result.analysis.first_nonfinite if result.analysis else None
    if first is None:
        return "—"
    return f"step {first.step}: {clean(first.role)} `{shorten(clean(first.tensor), 60)}`"


def ranks_section(multi) -> Section:
    rows = []
    for result in multi.ranks:
        info = result.to_json()
        own = _own_values(result.own_nonfinite, shown=1) if result.own_nonfinite else (
            "none: shared only" if result.first_step is not None else "—")
        rows.append((str(result.rank), clean(info["host"] or "—"), clean(info["local_rank"] if info["local_rank"] is not None else "—"),
                     clean(info["verdict"] or "error"), fmt_step(info["onset_step"]), _first_value(result), own,
                     clean(info["status"] or "—"), clean(info["steps"] if info["steps"] is not None else "—"),
                     shorten(clean(result.error or ""), 300)))
    paragraphs = [origin_sentence(multi), spread_sentence(multi),
                  f"The sections below are rank {multi.shown.rank}'s full report; "
                  f"`postmortem analyze {clean(os.path.basename(os.path.normpath(str(multi.path))))} --rank N` "
                  "writes another rank's."]
    table = Table(("rank", "host", "local rank", "verdict", "onset", "first non-finite",
                   "own values non-finite then", "status", "steps", "error"), tuple(rows))
    return Section("ranks", "Ranks: which went bad first", paragraphs=tuple(p for p in paragraphs if p),
                   tables=(table,))


def build_ranks_page(multi, *, progress: Callable[[str], None] | None = None, version: str = "") -> Page:
    """The first rank's full report, with the ranks section and the first rank up front."""
    shown = multi.shown
    page = build_page(shown.analysis, progress=progress, version=version)
    name = clean(os.path.basename(os.path.normpath(str(multi.path))))
    facts = [Fact("Ranks recorded", str(len(multi.ranks)))]
    if multi.origin is not None:
        facts.insert(0, Fact("First rank to go bad", f"rank {multi.origin.rank} at step {multi.origin.step}"))
    return dataclasses.replace(
        page,
        title=f"postmortem: {shorten(name, 120)} ({len(multi.ranks)} ranks)",
        verdict=multi.verdict,
        headline=f"{origin_sentence(multi)} Rank {shown.rank}: {page.headline}",
        facts=(*facts, *page.facts),
        sections=(ranks_section(multi), *page.sections),
        warnings=(*(shorten(clean(w), 300) for w in multi.warnings), *page.warnings),
    )


def render_ranks_markdown(multi, *, report_name: str = "report.html") -> str:
    """Verdict, first rank, spread and one line per rank, in at most MAX_LINES lines."""
    name = os.path.basename(os.path.normpath(str(multi.path)))
    lines = [f"### postmortem: {_md(shorten(name, 80))} ({len(multi.ranks)} ranks): "
             f"{multi.verdict.replace('_', ' ')}", "", _md(origin_sentence(multi))]
    spread = spread_sentence(multi)
    if spread:
        lines += ["", _md(spread)]
    lines += ["", "| rank | verdict | onset | first non-finite | own values then |", "|---|---|---|---|---|"]
    for result in multi.ranks[:_MARKDOWN_RANKS]:
        verdict = result.analysis.verdict if result.analysis else f"error: {shorten(result.error or '', 80)}"
        own = "yes" if result.own_nonfinite else ("no" if result.first_step is not None else "—")
        lines.append(f"| {result.rank} | {_md(verdict)} | {fmt_step(result.onset_step)} | "
                     f"{_md(_first_value(result))} | {own} |")
    if len(multi.ranks) > _MARKDOWN_RANKS:
        lines.append(f"| … | {len(multi.ranks) - _MARKDOWN_RANKS} more ranks in the report | | | |")
    lines += ["", f"Rank {multi.shown.rank}: {_md(headline(multi.shown.analysis))}"]
    if len(lines) > MAX_LINES - 2:
        lines = lines[: MAX_LINES - 3] + ["…"]
    return "\n".join([*lines, "", f"Full report: {_md(report_name)}"]) + "\n"


def render_ranks_summary(multi, *, width: int = 100) -> str:
    """`postmortem summary` of a multi-rank run: first rank, spread, a line per rank, then the
    first rank's own summary."""
    lines = []
    for sentence in (origin_sentence(multi), spread_sentence(multi)):
        if sentence:
            lines += textwrap.wrap(clean(sentence), width)
    lines.append("")
    for result in multi.ranks:
        state = (f"{result.analysis.verdict}, first non-finite {_first_value(result)}" if result.analysis
                 else f"error: {result.error}")
        lines.append(shorten(f"  rank {result.rank}: {clean(state)}", width))
    lines += ["", f"Rank {multi.shown.rank}:"]
    return "\n".join(lines) + "\n" + render_summary(multi.shown.analysis, width=width)
