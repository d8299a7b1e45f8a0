"""The page template: Page -> one self-contained HTML document.

Every string from a Page is passed through `html.escape` here and nowhere else; the only markup
added to run-supplied text is `<code>` around `backticked` names, applied after escaping.
No scripts, no external resources: a Content-Security-Policy forbids everything but inline
styles and data: images, so the file is safe to open from a ticket attachment.
"""
from __future__ import annotations

import re
from html import escape
from string import Template

from reports.page import Diagnosis, Page, Section, Table

__all__ = ["CSP", "render_html"]

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

_PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="$csp">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>$title</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111827;
       margin: 0; background: #f9fafb; }
main { max-width: 1120px; margin: 0 auto; padding: 0 20px 40px; }
header.verdict { padding: 14px 20px; color: #fff; }
header.diverged { background: #b91c1c; } header.not_learning { background: #b45309; }
header.healthy { background: #15803d; }
header.verdict h1 { margin: 0 auto; max-width: 1080px; font-size: 22px; }
.headline { font-size: 17px; margin: 16px 0 10px; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 6px 14px;
         margin: 0 0 12px; }
.facts div { background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px 10px; }
.facts dt { font-size: 11px; text-transform: uppercase; color: #6b7280; letter-spacing: .04em; }
.facts dd { margin: 0; font-weight: 600; overflow-wrap: anywhere; }
.fix { background: #eff6ff; border-left: 4px solid #2563eb; padding: 8px 12px; margin: 8px 0 14px; }
.warnings { background: #fffbeb; border-left: 4px solid #d97706; padding: 6px 12px; }
nav { font-size: 13px; margin: 10px 0; } nav a { margin-right: 12px; color: #1d4ed8; }
section { background: #fff; border: 1px solid #e5e7eb; border-radius: 8px; padding: 4px 18px 14px;
          margin: 16px 0; }
h2 { font-size: 18px; margin: 14px 0 8px; }
img { max-width: 100%; height: auto; display: block; margin: 8px 0; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 3px 10px 3px 0; text-align: left;
         vertical-align: top; overflow-wrap: anywhere; }
th { color: #374151; font-weight: 600; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, monospace; background: #f3f4f6;
       padding: 0 3px; border-radius: 3px; }
pre { background: #f3f4f6; padding: 10px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; }
.diagnosis { border-top: 1px solid #e5e7eb; padding: 6px 0; }
.diagnosis h3 { margin: 6px 0; font-size: 15px; }
.label { font: 600 12px ui-monospace, monospace; background: #fee2e2; color: #991b1b;
         padding: 1px 6px; border-radius: 4px; }
.label.healthy { background: #dcfce7; color: #166534; }
footer { color: #6b7280; font-size: 12px; margin-top: 20px; }
</style>
</head>
<body>
<header class="verdict $verdict_class"><h1>$verdict_title</h1></header>
<main>
<p class="headline">$headline</p>
<dl class="facts">
$facts
</dl>
$fix
$warnings
<nav>$nav</nav>
$sections
<footer>$footer</footer>
</main>
</body>
</html>
""")

_VERDICT_TITLES = {"diverged": "Diverged", "not_learning": "Not learning", "healthy": "Healthy"}
_CODE = re.compile(r"`([^`<>]+)`")


def _text(value: str) -> str:
    """Escaped text, with `backticked` names (already escaped) shown as code."""
    return _CODE.sub(r"<code>\1</code>", escape(value))


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    body = "\n".join("<tr>" + "".join(f"<td>{_text(cell)}</td>" for cell in row) + "</tr>" for row in table.rows)
    caption = f"<caption>{_text(table.caption)}</caption>" if table.caption else ""
    html = f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"
    if table.collapsed:
        summary = _text(table.caption or "details") + f" ({len(table.rows)} rows)"
        return f"<details><summary>{summary}</summary>{html}</details>"
    return html


def _diagnosis(diagnosis: Diagnosis) -> str:
    css = "label healthy" if diagnosis.label == "healthy" else "label"
    tensors = ", ".join(f"<code>{escape(t)}</code>" for t in diagnosis.tensors)
    parts = [f'<div class="diagnosis"><h3><span class="{css}">{escape(diagnosis.label)}</span> '
             f"{escape(diagnosis.step)}</h3>"]
    if tensors:
        parts.append(f"<p>Tensors: {tensors}</p>")
    if diagnosis.evidence.rows:
        parts.append(_table(diagnosis.evidence))
    if diagnosis.fix:
        parts.append(f'<p class="fix"><strong>Fix:</strong> {_text(diagnosis.fix)}</p>')
    return "\n".join(parts) + "</div>"


def _section(section: Section) -> str:
    parts = [f'<section id="{escape(section.anchor)}"><h2>{escape(section.title)}</h2>']
    parts += [f"<p>{_text(p)}</p>" for p in section.paragraphs]
    parts += [f'<img src="{figure.data_uri}" alt="{escape(figure.alt)}">' for figure in section.figures]
    parts += [_table(t) for t in section.tables]
    if section.items:
        parts.append("<ol>" + "".join(f"<li>{_text(item)}</li>" for item in section.items) + "</ol>")
    parts += [_diagnosis(d) for d in section.diagnoses]
    if section.preformatted:
        parts.append(f"<pre>{escape(section.preformatted)}</pre>")
    return "\n".join(parts) + "\n</section>"


def render_html(page: Page) -> str:
    """The whole report as one HTML string."""
    facts = "\n".join(f"<div><dt>{escape(f.label)}</dt><dd>{_text(f.value)}</dd></div>" for f in page.facts)
    warnings = ""
    if page.warnings:
        items = "".join(f"<li>{_text(w)}</li>" for w in page.warnings)
        warnings = f'<div class="warnings"><strong>Warnings while reading the run</strong><ul>{items}</ul></div>'
    return _PAGE.substitute(
        csp=CSP,
        title=escape(page.title),
        verdict_class=escape(page.verdict),
        verdict_title=escape(_VERDICT_TITLES.get(page.verdict, page.verdict)),
        headline=_text(page.headline),
        facts=facts,
        fix=f'<p class="fix"><strong>What to change:</strong> {_text(page.fix)}</p>' if page.fix else "",
        warnings=warnings,
        nav=" ".join(f'<a href="#{escape(s.anchor)}">{escape(s.title)}</a>' for s in page.sections),
        sections="\n".join(_section(s) for s in page.sections),
        footer=escape(page.footer),
    )
