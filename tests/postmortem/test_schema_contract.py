"""The recorder writes and the analyzer reads the same run format.

Both take the schemas, the segment names and the schema version from one module,
recorders.vocabulary (torch-free, so the analyzer imports it without torch). These tests keep the
two sides on it, the writer's segments stamped with the version the reader accepts, and
docs/run-format.md in step with it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import postmortem.loading as reader
from recorders import vocabulary

writer = pytest.importorskip("recorders.writer")

FORMAT_DOC = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"
TABLES = ["STATS_SCHEMA", "SCALARS_SCHEMA", "EVENTS_SCHEMA"]


@pytest.mark.parametrize("table", TABLES)
def test_reader_and_writer_schemas_are_the_vocabulary(table):
    assert getattr(reader, table) is getattr(vocabulary, table)
    written = getattr(writer, table)
    assert written.equals(getattr(vocabulary, table)), table
    assert written.metadata == {b"schema_version": str(vocabulary.SCHEMA_VERSION).encode()}
    assert vocabulary.SCHEMA_VERSION in reader.SUPPORTED_SCHEMA_VERSIONS


def test_written_segment_names_are_read():
    for number in (0, 7, 999_999, 1_000_000):
        match = vocabulary.SEGMENT_NAME.match(vocabulary.segment_name(number))
        assert match and int(match.group(1)) == number


def test_every_stats_column_and_role_is_documented():
    text = FORMAT_DOC.read_text()
    documented = set(re.findall(r"^\| `(\w+)` \|", text, flags=re.MULTILINE))
    missing = set(vocabulary.STATS_SCHEMA.names) - documented
    assert not missing, f"columns missing from docs/run-format.md: {sorted(missing)}"
    role_row = re.search(r"^\| `role` \|[^|]*\|(.*)\|$", text, flags=re.MULTILINE).group(1)
    assert set(re.findall(r"`(\w+)`", role_row)) == set(vocabulary.ROLES)
    for statistics in vocabulary.ROLE_STATISTICS.values():
        assert set(statistics) <= set(vocabulary.STATS_SCHEMA.names)
