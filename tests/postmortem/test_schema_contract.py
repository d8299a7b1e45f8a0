"""The recorder writes and the analyzer reads the same schema.

Each side keeps its own copy on purpose: the analyzer must import without torch, and the
recorder without pandas/scipy. This test is what keeps the two copies (and docs/run-format.md)
from drifting apart.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import postmortem.loading as reader

writer = pytest.importorskip("recorders.writer")

FORMAT_DOC = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"


@pytest.mark.parametrize("table", ["STATS_SCHEMA", "SCALARS_SCHEMA", "EVENTS_SCHEMA"])
def test_reader_and_writer_schemas_are_identical(table):
    assert getattr(reader, table).equals(getattr(writer, table)), table


def test_every_stats_column_is_documented():
    documented = set(re.findall(r"^\| `(\w+)` \|", FORMAT_DOC.read_text(), flags=re.MULTILINE))
    missing = set(reader.STATS_SCHEMA.names) - documented
    assert not missing, f"columns missing from docs/run-format.md: {sorted(missing)}"
