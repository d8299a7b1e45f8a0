"""Gold-file test of the whole HTML page for a known analysis.

Volatile parts are scrubbed before comparing: base64 image payloads (PNG bytes vary with the
matplotlib/freetype build), the package version in the footer and the temporary directory. Everything else (markup, CSS,
numbers, escaping) must match byte for byte.

To regenerate after an intended change, run
    POSTMORTEM_UPDATE_GOLD=1 .venv/bin/python -m pytest tests/reports/test_report_gold.py
and review the diff of tests/reports/gold/ before committing it.
"""
import os
import re
from pathlib import Path

import pytest

from report_runs import diverged_analysis, healthy_analysis, not_learning_analysis, write_run
from reports import build_page, render_html

GOLD = Path(__file__).parent / "gold"
BUILDERS = {"diverged": (diverged_analysis, "diverged"), "healthy": (healthy_analysis, "healthy"),
            "not_learning": (not_learning_analysis, "no_update")}


def scrub(html: str, tmp_path: Path = Path("/nonexistent")) -> str:
    html = html.replace(str(tmp_path), "<TMP>")
    html = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,<PNG>", html)
    return re.sub(r"<footer>postmortem [^<]*</footer>", "<footer>postmortem <VERSION></footer>", html)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_report_matches_gold_file(tmp_path, name):
    build, kind = BUILDERS[name]
    analysis = build(write_run(tmp_path / f"{name}-run", kind=kind))
    html = scrub(render_html(build_page(analysis, version="9.9.9")), tmp_path)
    assert_matches_gold(GOLD / f"{name}.html", html)


def assert_matches_gold(gold: Path, text: str) -> None:
    """`text` equals the gold file (POSTMORTEM_UPDATE_GOLD=1 rewrites it first)."""
    if os.environ.get("POSTMORTEM_UPDATE_GOLD"):
        gold.parent.mkdir(exist_ok=True)
        gold.write_text(text, encoding="utf-8")
    assert gold.exists(), f"no gold file {gold}; regenerate with POSTMORTEM_UPDATE_GOLD=1"
    assert text == gold.read_text(encoding="utf-8"), (
        f"{gold.name} differs; if the change is intended, regenerate with POSTMORTEM_UPDATE_GOLD=1 and review the diff")


def test_scrub_keeps_everything_but_payloads_and_version():
    page = '<img src="data:image/png;base64,iVBORw0KGgo+/=" alt="x"><footer>postmortem 0.1.0</footer>'
    assert scrub(page) == '<img src="data:image/png;base64,<PNG>" alt="x"><footer>postmortem <VERSION></footer>'
