"""Fixtures for the report tests: synthetic run directories (see report_runs.py)."""
from __future__ import annotations

import pytest

from postmortem import analyze
from report_runs import SHIPPED, write_run
from reports import build_page, render_html


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {kind: write_run(root / kind, kind=kind) for kind in ("diverged", "healthy", "no_update")}


@pytest.fixture(scope="session")
def shipped_reports(tmp_path_factory):
    """name -> (analysis, report path) for every shipped sample run, each analysed and rendered once."""
    root = tmp_path_factory.mktemp("shipped")
    reports = {}
    for run_dir in SHIPPED:
        analysis = analyze(run_dir)
        path = root / f"{run_dir.name}.html"
        path.write_text(render_html(build_page(analysis)), encoding="utf-8")
        reports[run_dir.name] = (analysis, path)
    return reports
