"""Fixtures for the report tests: synthetic run directories (see report_runs.py)."""
from __future__ import annotations

import pytest

from report_runs import write_run


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return {kind: write_run(root / kind, kind=kind) for kind in ("diverged", "healthy", "no_update")}
