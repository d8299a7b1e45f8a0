"""load_run on crash-shaped run directories."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from pm_runs import make_run, scalar_rows, series_rows
from postmortem import RunDirectoryError, SchemaVersionError, analyze, load_run
from postmortem import loading
from postmortem.exceptions import PostmortemError
from postmortem.series import SeriesKey, read_series


def _run(tmp_path, segments=3, steps=30):
    stats = pd.concat([
        series_rows("grad", "fc.weight", np.linspace(1, 2, steps)),
        series_rows("param", "fc.weight", np.linspace(5, 6, steps)),
        series_rows("activation", "fc", np.linspace(3, 4, steps)),
    ])
    return make_run(tmp_path / "run", stats, scalar_rows("loss", np.linspace(2, 1, steps)),
                    segments=segments)


def test_reads_tidy_frames_in_step_order(tmp_path):
    run = load_run(_run(tmp_path))
    stats = run.stats()
    assert len(stats) == 90 and run.warnings == []
    grad = stats[(stats["role"] == "grad")]
    assert grad["step"].tolist() == list(range(30))
    assert grad["norm"].iloc[-1] == pytest.approx(2.0)
    assert run.scalars()["value"].iloc[0] == pytest.approx(2.0)
    assert list(run.events().columns) == ["step", "kind", "message", "wall_time"]


def test_projection_and_filters(tmp_path):
    run = load_run(_run(tmp_path))
    frame = run.stats(roles=["grad"], columns=["norm"])
    assert list(frame.columns) == ["step", "role", "name", "key", "norm"]
    assert set(frame["role"]) == {"grad"}
    assert set(load_run(_run(tmp_path / "b")).stats(names=["fc"])["role"]) == {"activation"}
    with pytest.raises(ValueError):
        run.stats(columns=["nope"])


@pytest.mark.parametrize("damage", ["truncated", "zero_byte"])
def test_damaged_last_segment_is_skipped_with_a_warning(tmp_path, damage):
    root = _run(tmp_path)
    last = root / "stats" / "part-000002.parquet"
    if damage == "truncated":
        last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    else:
        last.write_bytes(b"")
    run = load_run(root)
    assert any("part-000002.parquet" in w for w in run.warnings)
    assert run.stats()["step"].max() == 19  # the first two segments survive
    assert analyze(root).verdict in {"healthy", "not_learning"}


def test_duplicated_steps_keep_the_last_occurrence(tmp_path):
    root = _run(tmp_path)
    # An interrupted compaction: steps 10..19 appear again in a later segment, rewritten.
    stats = pd.concat([series_rows("grad", "fc.weight", np.full(10, 7.0), start=10)])
    from pm_runs import write_segment
    from postmortem.loading import STATS_SCHEMA
    write_segment(root / "stats" / "part-000003.parquet", stats, STATS_SCHEMA)
    run = load_run(root)
    grad = run.stats(roles=["grad"])
    assert grad["step"].tolist() == list(range(30))
    assert grad.loc[grad["step"] == 15, "norm"].item() == 7.0
    table = read_series(run)
    index = table.keys.index(SeriesKey("grad", "fc.weight", None))
    assert table.step[table.rows(index)].tolist() == list(range(30))
    assert table.magnitude[table.rows(index)][15] == 7.0


def test_missing_manifest_warns_and_carries_on(tmp_path):
    root = _run(tmp_path)
    (root / "manifest.json").unlink()
    run = load_run(root)
    assert run.manifest == {}
    assert any("manifest" in w for w in run.warnings)
    assert analyze(root).to_json()["warnings"]


def test_unknown_schema_version_is_a_clear_error(tmp_path):
    root = _run(tmp_path)
    (root / "manifest.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(SchemaVersionError, match="99"):
        load_run(root)


def test_not_a_run_directory(tmp_path):
    with pytest.raises(RunDirectoryError):
        load_run(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirectoryError):
        load_run(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirectoryError):
        load_run(tmp_path / "empty")
    assert issubclass(RunDirectoryError, PostmortemError) and issubclass(SchemaVersionError, PostmortemError)


def test_files_that_are_not_ours_are_ignored(tmp_path):
    root = _run(tmp_path)
    (root / "stats" / ".part-000009.parquet").write_bytes(b"partial")
    (root / "stats" / "part-000009.parquet.tmp").write_bytes(b"partial")
    (root / "stats" / "model.pkl").write_bytes(b"\x80\x04not unpickled")
    shutil.copy(root / "stats" / "part-000000.parquet", root / "stats" / "notes.parquet")
    run = load_run(root)
    assert run.warnings == []
    assert len(run.stats()) == 90


def test_segments_in_number_order_not_name_order(tmp_path):
    stats = series_rows("grad", "w", np.arange(1, 21, dtype=float))
    root = make_run(tmp_path / "run", stats, segments=2)
    # Renumber so that lexical order differs from numeric order: 9 < 10 numerically.
    (root / "stats" / "part-000000.parquet").rename(root / "stats" / "part-9.parquet")
    (root / "stats" / "part-000001.parquet").rename(root / "stats" / "part-10.parquet")
    table = read_series(load_run(root))
    assert table.magnitude[table.rows(0)].tolist() == list(np.arange(1, 21, dtype=float))


def test_checkpoint_metadata(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    root = _run(tmp_path)
    (root / "checkpoints").mkdir()
    table = pa.table({"step": [46]}).replace_schema_metadata({"step": "46", "reason": "first_nonfinite"})
    pq.write_table(table, root / "checkpoints" / "flight-00000046.parquet")
    (root / "checkpoints" / "broken.parquet").write_bytes(b"")
    run = load_run(root)
    (info,) = run.checkpoints
    assert (info.step, info.reason) == (46, "first_nonfinite")
    assert any("broken.parquet" in w for w in run.warnings)


def test_segments_not_sorted_by_series_are_grouped(tmp_path):
    # Another writer may interleave series (rows ordered by step): grouping must not rely on
    # the recorder's (role, name, key, step) order.
    stats = pd.concat([series_rows("grad", "a", np.arange(1.0, 31.0)),
                       series_rows("grad", "b", np.arange(101.0, 131.0))])
    root = tmp_path / "run"
    from pm_runs import write_segment
    from postmortem.loading import STATS_SCHEMA
    write_segment(root / "stats" / "part-000000.parquet", stats.sort_values("step", kind="stable"),
                  STATS_SCHEMA)
    table = read_series(load_run(root))
    for name, first in (("a", 1.0), ("b", 101.0)):
        rows = table.rows(table.keys.index(SeriesKey("grad", name, None)))
        assert table.step[rows].tolist() == list(range(30))
        assert table.magnitude[rows].tolist() == list(np.arange(first, first + 30))


@pytest.mark.parametrize("t0", [35, 62])
def test_scalars_only_run_with_a_finite_loss_explosion(tmp_path, t0):
    # No stats segments at all (a user recording only the loss): the loss still tells.
    from pm_runs import write_segment
    from postmortem.loading import SCALARS_SCHEMA
    loss = np.r_[np.linspace(2.0, 1.0, t0), 10.0 ** np.arange(1, 12)]
    write_segment(tmp_path / "run" / "scalars" / "part-000000.parquet",
                  scalar_rows("loss", loss), SCALARS_SCHEMA)
    analysis = analyze(tmp_path / "run")
    assert analysis.verdict == "diverged" and analysis.first_nonfinite is None
    assert analysis.onset.step == t0 and analysis.ranking == []


def test_nonfinite_counts_beyond_int32_are_capped():
    from postmortem.series import _counts

    counts = _counts(np.array([0, 5, 2**40, 2**31 - 1], np.int64))
    assert counts.dtype == np.int32 and counts.tolist() == [0, 5, 2**31 - 1, 2**31 - 1]


def _in_row_groups(tmp_path, segments=5, rows_per_group=7):
    """A run whose stats segments hold several row groups each (as a compacted segment does)."""
    root = _run(tmp_path, segments=segments, steps=60)
    for path in sorted((root / "stats").glob("part-*.parquet")):
        pq.write_table(pq.read_table(path), path, row_group_size=rows_per_group)
    return root


def _one_reader(root, columns, broken=None):
    """The batches a plain loop gives: segment after segment, row group after row group, one
    ParquetFile each, a segment's row groups up to the first that fails (`broken`: its path
    and row group)."""
    batches = []
    for path in sorted((root / "stats").glob("part-*.parquet")):
        file = pq.ParquetFile(path)
        for index in range(file.metadata.num_row_groups):
            if (path, index) == broken:
                break
            batches += file.read_row_group(index, columns=columns, use_threads=False).to_batches()
    return batches


def _same(batches, expected):
    """Equal batch by batch: schema and values (NaN where NaN)."""
    return len(batches) == len(expected) and all(
        a.schema.equals(b.schema) and a.to_pandas().equals(b.to_pandas()) for a, b in zip(batches, expected))


def test_row_groups_decoded_ahead_arrive_in_order_with_the_same_contents(tmp_path):
    root = _in_row_groups(tmp_path)
    columns = ["step", "role", "name", "key", "norm", "max_abs", "nonfinite"]
    expected = _one_reader(root, columns)
    assert len(expected) > 3 * loading._READERS
    for _ in range(20):  # the decoding threads finish in any order; the batches must not
        got = list(load_run(root).stats_batches(columns))
        assert _same(got, expected)
    window = [b for b in load_run(root).stats_batches(columns, steps=(30, 40))]
    assert 0 < len(window) < len(expected)
    assert all(b.column("step").to_numpy().max() >= 30 and b.column("step").to_numpy().min() <= 40
               for b in window)
    partial = load_run(root).stats_batches(columns)  # given up after one batch: no hang
    assert _same([next(partial)], expected[:1])
    partial.close()


def test_a_row_group_that_fails_to_decode_skips_the_rest_of_its_segment(tmp_path):
    root = _in_row_groups(tmp_path)
    path = root / "stats" / "part-000002.parquet"
    column = pq.read_metadata(path).row_group(1).column(0)
    data = bytearray(path.read_bytes())
    data[column.data_page_offset:column.data_page_offset + 16] = b"\xff" * 16  # its page header
    path.write_bytes(bytes(data))
    columns = ["step", "role", "name", "key", "norm"]
    expected = _one_reader(root, columns, broken=(path, 1))
    run = load_run(root)
    got = list(run.stats_batches(columns))
    assert _same(got, expected)
    assert [w for w in run.warnings if "part-000002.parquet" in w and "unreadable" in w]
    assert path not in run.segments["stats"]
