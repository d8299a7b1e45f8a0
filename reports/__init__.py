"""Render an analysis as a self-contained HTML incident report, a Markdown summary or terminal
text, and where two runs part ways. Never imports torch."""
from reports.compare import render_comparison
from reports.markdown import render_markdown
from reports.page import Page, build_page
from reports.progress import Progress
from reports.ranks import build_ranks_page, render_ranks_markdown, render_ranks_summary
from reports.template import render_html
from reports.terminal import render_summary

__all__ = [
    "Page",
    "Progress",
    "build_page",
    "build_ranks_page",
    "render_comparison",
    "render_html",
    "render_markdown",
    "render_ranks_markdown",
    "render_ranks_summary",
    "render_summary",
]
