"""A run too long to keep every row: thinned history, every row of the steps that decide."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pm_runs import make_run, series_rows

import postmortem
from postmortem import series
from postmortem.series import SeriesKey
from postmortem.loading import load_run
from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

_SPEC = SyntheticSpec(steps=3000, tensors=41, onset=2900, nan_at=2990, growth=1.5, steps_per_segment=250)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("long") / "run", _SPEC)


@pytest.fixture
def thinned(monkeypatch):
    """Thresholds scaled down so that a 120 000-row run is read as a 150 M-row one would be."""
    monkeypatch.setattr(series, "FULL_ROWS", 50_000)
    monkeypatch.setattr(series, "COARSE_ROWS", 15_000)
    monkeypatch.setattr(series, "FINE_STEPS", 400)


def _result(run_dir):
    payload = postmortem.analyze(run_dir).to_json()
    del payload["run"]
    return payload


def test_a_thinned_run_keeps_a_fraction_of_the_rows_and_every_row_before_the_nan(long_run, thinned):
    run = load_run(long_run)
    table = series.read_series(run)
    assert len(table.step) < run.stats_rows() / 3
    grad = table.rows(table.keys.index(SeriesKey("grad", "layers.0.weight", None)))
    steps = table.step[grad]
    assert np.all(np.diff(steps) > 0)
    assert set(range(2990 - 400, 2991)) <= set(steps.tolist())  # the fine window, whole
    stride = -(-run.stats_rows() // 15_000)
    assert stride > 1 and np.all(np.diff(steps[steps < 2990 - 400]) <= stride)
    assert table.recorded_steps().tolist() == list(range(2991))
    # Every input row, all its columns: a report shows the batches without reading the run.
    inputs = run.stats(roles=list(series.INPUT_ROLES), columns=series.INPUT_COLUMNS[4:])
    assert len(inputs) == 2991 and table.input_rows.equals(inputs)


def test_a_thinned_run_is_diagnosed_as_when_every_row_is_read(long_run, monkeypatch):
    whole = _result(long_run)
    monkeypatch.setattr(series, "FULL_ROWS", 50_000)
    monkeypatch.setattr(series, "COARSE_ROWS", 15_000)
    monkeypatch.setattr(series, "FINE_STEPS", 400)
    thin = _result(long_run)
    assert whole["onset"]["step"] == 2900
    for key in ("verdict", "onset", "first_nonfinite", "chain", "warnings"):
        assert thin[key] == whole[key], key
    assert [d["label"] for d in thin["diagnoses"]] == [d["label"] for d in whole["diagnoses"]]
    assert thin["ranking"][:5] == whole["ranking"][:5]


def test_without_step_statistics_the_fine_pass_reads_the_end_again(long_run, thinned, monkeypatch):
    """The row groups' step statistics tell the coarse pass where the last steps begin; a
    writer that leaves them out gets the same rows from a second, fine pass."""
    with_statistics = _result(long_run)
    read = []
    batches = series.Run.stats_batches
    monkeypatch.setattr(series.Run, "stats_last_step", lambda self: None)
    monkeypatch.setattr(series.Run, "stats_batches",
                        lambda self, *a, **k: read.append(k.get("steps")) or batches(self, *a, **k))
    table = series.read_series(load_run(long_run))
    assert read == [None, (2990 - 400, 2990)]
    assert set(range(2990 - 400, 2991)) <= set(table.step[table.rows(table.keys.index(SeriesKey("grad", "layers.0.weight", None)))].tolist())
    assert _result(long_run) == with_statistics


def test_a_thinned_run_names_only_its_real_holes(long_run, tmp_path, thinned):
    import shutil
    copy = tmp_path / "run"
    shutil.copytree(long_run, copy)
    segments = sorted((copy / "stats").glob("part-*.parquet"))
    segments[3].unlink()  # steps 750-999
    warnings = postmortem.analyze(copy).warnings
    assert [w for w in warnings if "tensor statistics" in w] == [
        "tensor statistics: steps 750–999 missing (250 steps in all): no readable segment holds them"]


def test_stats_of_a_step_range_read_only_those_rows(long_run):
    run = load_run(long_run)
    whole = run.stats(roles=["grad"], columns=["norm"])
    part = run.stats(roles=["grad"], columns=["norm"], steps=(1200, 1260))
    expected = whole[(whole["step"] >= 1200) & (whole["step"] <= 1260)].reset_index(drop=True)
    assert part.equals(expected)


def test_the_progress_moves_while_a_thinned_run_is_read(long_run, thinned, monkeypatch):
    """Reading is most of a long run's analysis: its READ_STAGES progress calls come as the
    batches arrive, not all at the end."""
    handed_out = []
    batches = series.Run.stats_batches

    def counted(self, *args, **kwargs):
        for batch in batches(self, *args, **kwargs):
            handed_out.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(series.Run, "stats_batches", counted)
    calls = []
    postmortem.analyze(long_run, progress=lambda label: calls.append((label, len(handed_out))))
    reading = [read for label, read in calls if label.startswith("reading tensor statistics (")]
    assert len(reading) == series.READ_STAGES and len(handed_out) >= series.READ_STAGES
    assert reading == sorted(reading) and len(set(reading)) >= series.READ_STAGES // 2
    assert reading[0] <= len(handed_out) / 4  # the first stage is drawn early in the read
    assert [label for label, _ in calls][-1].startswith("ranking")


@pytest.mark.parametrize("sliced_spans", [series._SLICED_SPANS, 0])  # 0: every batch taken row by row
def test_each_series_keeps_the_recorded_statistics_of_its_role(long_run, monkeypatch, sliced_spans):
    monkeypatch.setattr(series, "_SLICED_SPANS", sliced_spans)
    run = load_run(long_run)
    table = series.read_series(run)
    columns = sorted({c for kept in series.AUX_COLUMNS.values() for c in kept})
    frame = run.stats(columns=["numel", *columns]).sort_values("step")
    groups = {(r, n, k if isinstance(k, str) else None): g
              for (r, n, k), g in frame.groupby(["role", "name", "key"], dropna=False, observed=True)}
    for index, key in enumerate(table.keys):
        recorded = groups[(key.role, key.name, key.key)]
        assert table.step[table.rows(index)].tolist() == recorded["step"].tolist()
        assert table.numel[index] == recorded["numel"].iloc[0]
        for column in series.AUX_COLUMNS[key.role]:
            expected = recorded[column].astype(np.float32).to_numpy()
            np.testing.assert_array_equal(table.column(index, column), expected, err_msg=f"{key} {column}")


def test_a_batch_kept_whole_keeps_its_values_when_later_batches_are_thinned(tmp_path, monkeypatch):
    # The segment of the last steps (kept whole) comes first, the older one (thinned) after it:
    # the per-batch buffers the second reuses must not be the rows the first kept.
    rng = np.random.default_rng(0)
    stats = pd.concat([series_rows(role, name, rng.uniform(1, 2, 200))
                       for role, name in (("grad", "a"), ("param", "a"), ("activation", "a"))])
    root = make_run(tmp_path / "run", stats, segments=2)
    early, late = (root / "stats" / f"part-{i:06d}.parquet" for i in range(2))
    early.rename(root / "stats" / "part-000002.parquet")
    late.rename(early)
    monkeypatch.setattr(series, "FULL_ROWS", 100)
    monkeypatch.setattr(series, "COARSE_ROWS", 100)
    monkeypatch.setattr(series, "FINE_STEPS", 100)
    run = load_run(root)
    table = series.read_series(run)
    stored = run.stats(columns=["norm", "max_abs"])
    assert len(table.step) < len(stored)
    for index, key in enumerate(table.keys):
        recorded = stored[(stored["role"] == key.role) & (stored["name"] == key.name)].set_index("step")
        magnitude = recorded["max_abs" if key.role == "activation" else "norm"].astype(np.float64)
        rows = table.rows(index)
        assert set(range(100, 200)) <= set(table.step[rows].tolist())
        np.testing.assert_array_equal(table.magnitude[rows], magnitude.loc[table.step[rows]].to_numpy())


@pytest.mark.parametrize("kind", [pa.float32(), pa.float64(), pa.bool_()])
@pytest.mark.parametrize("nulls", [0.3, 0.0, 1.0])
def test_column_values_read_from_their_buffers_match_arrow_at_any_offset(kind, nulls):
    # The per-batch reads take a column's values and validity from its buffers (no filled copy):
    # sliced at offsets that are not a multiple of 8 they still give Arrow's values, NaN for null,
    # for every row (bitmaps unpacked) and for a few rows (only their bits read).
    rng = np.random.default_rng(1)
    values = rng.uniform(-1, 1, 100) > 0 if kind == pa.bool_() else rng.uniform(-1, 1, 100)
    column = pa.array(values, kind, mask=rng.uniform(0, 1, 100) < nulls if nulls else None)
    if nulls == 1.0:
        column = pa.nulls(100, kind)
    for start, length in ((0, 100), (3, 50), (13, 1), (97, 3), (40, 0), (5, 90)):
        piece = column.slice(start, length)
        expected = pc.fill_null(pc.cast(piece, pa.float64()), float("nan")).to_numpy(zero_copy_only=False)
        for rows in (np.arange(length)[::-1], np.arange(length)[1::9], np.arange(length)[::-41]):
            taken = series._raw_at(piece, rows)
            assert taken.dtype == (np.float64 if kind == pa.float64() else np.float32)
            np.testing.assert_array_equal(taken.astype(np.float64), expected[rows])
