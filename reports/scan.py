"""A scan's index: one HTML page linking every run's report, and a short terminal table.

Both take the scan's run table (postmortem.scan.COLUMNS) and list the worst runs first. Every
value comes from a run directory, so it is cleaned and, in HTML, escaped; links point only at
the reports the scan itself wrote (relative `reports/NNNN-name.html`).
"""
from __future__ import annotations

from html import escape
from urllib.parse import quote

import pandas as pd

from reports.template import CSP
from reports.text import clean, shorten

__all__ = ["counts", "render_index", "render_scan_table", "worst_first"]

_ORDER = {"diverged": 0, "error": 1, "not_learning": 2, "healthy": 3}
_TERMINAL_ROWS = 30
_SHOWN = (("run", "run"), ("verdict", "verdict"), ("onset_step", "onset"),
          ("first_nonfinite_step", "first non-finite"), ("first_nonfinite", "in"),
          ("top_culprit", "top culprit"), ("labels", "labels"), ("status", "status"),
          ("steps", "steps"), ("first_rank", "first rank"), ("error", "error"))

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{title}</title>
<style>
body {{ font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111827;
       margin: 0 auto; padding: 0 20px 40px; max-width: 1400px; background: #f9fafb; }}
table {{ border-collapse: collapse; font-size: 13px; background: #fff; }}
th, td {{ border-bottom: 1px solid #e5e7eb; padding: 3px 10px 3px 0; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }}
td:first-child {{ white-space: nowrap; }}
.verdict {{ font: 600 12px ui-monospace, monospace; padding: 1px 6px; border-radius: 4px; white-space: nowrap; }}
.diverged {{ background: #fee2e2; color: #991b1b; }} .error {{ background: #e5e7eb; color: #111827; }}
.not_learning {{ background: #fef3c7; color: #92400e; }} .healthy {{ background: #dcfce7; color: #166534; }}
footer {{ color: #6b7280; font-size: 12px; margin-top: 20px; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p>{counts}</p>
<p>The table: <a href="runs.csv">runs.csv</a>, <a href="runs.parquet">runs.parquet</a>; the segment
files each analysis read: <a href="files.parquet">files.parquet</a>.</p>
<table><thead><tr>{head}</tr></thead><tbody>
{rows}
</tbody></table>
<footer>{footer}</footer>
</body>
</html>
"""


def worst_first(runs: pd.DataFrame) -> pd.DataFrame:
    order = runs["verdict"].map(lambda v: _ORDER.get(v, len(_ORDER)))
    return runs.assign(_order=order).sort_values(["_order", "run"], kind="stable").drop(columns="_order")


def _text(value) -> str:
    return "" if value is None or value is pd.NA or (isinstance(value, float) and value != value) \
        else shorten(clean(value), 300)


def counts(runs: pd.DataFrame) -> str:
    tally = runs["verdict"].value_counts()
    parts = [f"{int(tally[v])} {v.replace('_', ' ')}" for v in _ORDER if v in tally]
    return f"{len(runs)} runs: " + ", ".join(parts)


def _cell(column: str, row) -> str:
    value = _text(row[column])
    if column == "run" and _text(row["report"]):
        return f'<a href="{escape(quote(row["report"]))}">{escape(value)}</a>'
    if column == "verdict":
        return f'<span class="verdict {escape(value)}">{escape(value.replace("_", " "))}</span>'
    if column == "labels":
        return escape(value.replace(",", ", "))
    return escape(value)


def render_index(runs: pd.DataFrame, *, version: str = "") -> str:
    """The index page: counts, then every run worst first, its name linking its report."""
    rows = "\n".join("<tr>" + "".join(f"<td>{_cell(column, row)}</td>" for column, _ in _SHOWN) + "</tr>"
                     for _, row in worst_first(runs).iterrows())
    return _PAGE.format(csp=CSP, title=escape(f"postmortem scan: {len(runs)} runs"),
                        counts=escape(counts(runs)), head="".join(f"<th>{escape(label)}</th>" for _, label in _SHOWN),
                        rows=rows, footer=escape(f"postmortem {version}".strip()))


def render_scan_table(runs: pd.DataFrame, *, width: int = 110) -> str:
    """At most 30 runs, worst first, one line each; then the counts."""
    shown = worst_first(runs).head(_TERMINAL_ROWS)
    lines = []
    name_width = min(40, max([3, *(len(_text(r)) for r in shown["run"])]))
    for _, row in shown.iterrows():
        if row["verdict"] == "error":
            detail = f"error: {_text(row['error'])}"
        else:
            detail = "; ".join(part for part in (
                f"onset {_text(row['onset_step'])}" if _text(row["onset_step"]) else "",
                f"first non-finite {_text(row['first_nonfinite_step'])}" if _text(row["first_nonfinite_step"]) else "",
                _text(row["top_culprit"]), _text(row["labels"])) if part)
        line = f"{shorten(_text(row['run']), name_width):<{name_width}}  {_text(row['verdict']):<12}  {detail}"
        lines.append(shorten(line.rstrip(), width))
    if len(runs) > _TERMINAL_ROWS:
        lines.append(f"… {len(runs) - _TERMINAL_ROWS} more in the index")
    return "\n".join([*lines, counts(runs)]) + "\n"
