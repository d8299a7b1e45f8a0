"""Reports of the shipped sample runs, end to end (recorder output -> analyze -> page)."""
import re

import pytest

from report_runs import SHIPPED
from reports import render_markdown
from reports.markdown import MAX_LINES

pytestmark = pytest.mark.skipif(not SHIPPED, reason="no sample runs in sample_runs/")


@pytest.mark.parametrize("name", [p.name for p in SHIPPED])
def test_sample_report_is_small_complete_and_self_contained(name, shipped_reports):
    analysis, path = shipped_reports[name]
    html = path.read_text(encoding="utf-8")
    assert path.stat().st_size < 2_000_000
    sections = re.findall(r'<section id="([^"]+)"', html)
    assert {"timeline", "heatmap", "diagnoses", "metadata"} <= set(sections)
    assert ("ranking" in sections) == bool(analysis.ranking)
    if analysis.onset is None:  # no empty onset sections
        assert "Onset" not in html and "around the onset" not in html
    assert not re.search(r'src="(?!data:image/png;base64,)', html) and "<script" not in html
    assert len(render_markdown(analysis).splitlines()) <= MAX_LINES
