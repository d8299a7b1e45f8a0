"""The report as a person opens it: headless Chromium loads each report from disk.

No console errors (a Content-Security-Policy violation is one), no network request, and a
screenshot. Skipped when Chromium is missing, except under CI=true, where that is a failure.
"""
import os
from pathlib import Path

import pytest

from report_browser import chromium_path, visit
from report_runs import SHIPPED, diverged_analysis, write_run
from reports import build_page, render_html

@pytest.fixture(scope="module", autouse=True)
def require_chromium():
    if chromium_path() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is required in CI (apt-get install chromium)")
        pytest.skip("chromium is not installed")


def _check(report: Path, tmp_path: Path) -> None:
    seen = visit(report)
    (tmp_path / f"{report.stem}.png").write_bytes(seen.screenshot)
    assert seen.console_errors == []
    assert seen.requests == []
    assert seen.screenshot.startswith(b"\x89PNG") and len(seen.screenshot) > 10_000


def test_the_checker_sees_blocked_requests_and_console_errors(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'\">"
                    "<img src=\"http://example.invalid/x.png\"><p>hi</p>")
    seen = visit(page)
    assert seen.requests == ["http://example.invalid/x.png"]
    assert any("Content Security Policy" in error for error in seen.console_errors)


def test_report_of_hostile_run_renders_cleanly(tmp_path):
    """Module names carrying markup and scripts stay text in a real browser: nothing runs or loads."""
    run_dir = write_run(tmp_path / "run", modules=("<script>console.error(1)</script>", "<img src=http://x.invalid/>", "fc2"))
    report = tmp_path / "report.html"
    report.write_text(render_html(build_page(diverged_analysis(run_dir))), encoding="utf-8")
    _check(report, tmp_path)


@pytest.mark.parametrize("name", [p.name for p in SHIPPED])
def test_shipped_sample_run_report_renders_cleanly(name, shipped_reports, tmp_path):
    _check(shipped_reports[name][1], tmp_path)
