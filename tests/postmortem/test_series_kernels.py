"""The compiled per-batch passes of the streaming read (postmortem/_kernels.cpp) give exactly
what their numpy twins give (the fallback where the extension is not built), on random
batches: nulls, NaN and inf, ties, offsets that are not a multiple of 8, float32 and float64."""

import numpy as np
import pyarrow as pa
import pytest

from postmortem import series
from postmortem.loading import load_run
from postmortem.series import SeriesKey
from sample_runs.synthetic import SyntheticSpec, write_synthetic_run


def test_the_kernels_are_built():
    """The dev install compiles them; without them the read silently loses its speed."""
    from postmortem import _kernels  # noqa: F401


def _both(monkeypatch, function, *args):
    """`function(*args)` with the kernels and with numpy alone."""
    compiled = function(*args)
    with monkeypatch.context() as patch:
        patch.setattr(series, "_kernels", None)
        return compiled, function(*args)


def _floats(rng, rows, kind, nulls):
    values = rng.choice([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf, 3.25], rows) * rng.uniform(0.5, 2, rows)
    if nulls == 1.0:
        return pa.nulls(rows, kind)
    return pa.array(values, kind, mask=rng.uniform(0, 1, rows) < nulls if nulls else None)


@pytest.mark.parametrize("seed", range(12))
def test_magnitudes_match_numpy(monkeypatch, seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 300))
    kinds = {"norm": pa.float64(), "max_abs": pa.float32(), "min": rng.choice([pa.float32(), pa.float64()]),
             "max": rng.choice([pa.float32(), pa.float64()])}
    batch = pa.record_batch({name: _floats(rng, rows + 11, kind, rng.choice([0.0, 0.3, 0.9, 1.0]))
                             for name, kind in kinds.items()})
    start = int(rng.integers(0, 11))
    piece = batch.slice(start, rows)
    compiled, numpy = _both(monkeypatch, lambda: series._magnitude(piece, np.full(rows, 7.0)).copy())
    np.testing.assert_array_equal(compiled, numpy)


def _coded(rng, rows, values, nulls):
    codes = rng.choice(values, rows)
    column = pa.array(codes, mask=rng.uniform(0, 1, rows) < nulls if nulls else None)
    return column.dictionary_encode()


@pytest.mark.parametrize("seed", range(12))
def test_series_ids_match_numpy(monkeypatch, seed):
    rng = np.random.default_rng(100 + seed)
    rows = int(rng.integers(1, 400))
    runs = np.repeat(np.arange(rows), rng.integers(1, 30, rows))[:rows + 13]  # runs of rows
    role = pa.array(np.array(["param", "grad", "activation"])[runs % 3]).dictionary_encode()
    name = pa.array(np.array(["a", "b", "c", "d"])[runs // 3 % 4]).dictionary_encode()
    key = _coded(rng, len(runs), ["exp_avg", "exp_avg_sq"], rng.choice([0.0, 0.5, 1.0]))
    batch = pa.record_batch({"role": role, "name": name, "key": key}).slice(int(rng.integers(0, 13)), rows)

    def ids():
        builder = series._Builder()
        sid, starts, role_codes, role_names = builder._series_ids(batch)
        return sid, starts, role_codes.copy(), role_names, list(builder.ids)

    compiled, numpy = _both(monkeypatch, ids)
    for a, b in zip(compiled, numpy):
        np.testing.assert_array_equal(np.asarray(a, object), np.asarray(b, object))


@pytest.mark.parametrize("seed", range(24))
def test_coarse_rows_match_numpy(monkeypatch, seed):
    # The rows a coarse pass keeps (stride, tail, non-finite rows, each series' first row and
    # extremes) and their series: ties, NaN-only series, ±0 and ±inf, a series in several runs.
    rng = np.random.default_rng(300 + seed)
    runs = int(rng.integers(1, 60))
    lengths = rng.integers(1, 20, runs)
    starts = np.r_[0, np.cumsum(lengths)[:-1]].astype(np.int64)
    run_sid = rng.integers(0, max(1, runs // 3), runs).astype(np.int32)
    rows = int(lengths.sum())
    pools = [[1.0, 2.0, 2.0, np.nan], [np.nan], [0.0, -0.0, np.inf, -np.inf, 5.0], list(rng.uniform(0, 1, 50))]
    magnitude = rng.choice(pools[seed % len(pools)], rows)
    low = int(rng.integers(0, 10_000))
    step = low + rng.integers(0, int(rng.choice([3, 50, 400, 5000])), rows)
    nf = np.where(rng.uniform(0, 1, rows) < 0.05, rng.integers(1, 9, rows), 0)
    builder = series._Builder(int(rng.integers(1, 40)), rng.choice([None, low + 30]))

    def coarse():
        distinct, keep, kept = builder._coarse(step, nf, magnitude, run_sid, starts)
        if kept is None:
            kept = (np.arange(rows), None) if keep is None or keep.all() else (np.flatnonzero(keep), None)
        at, sid = kept
        if sid is None:
            sid = run_sid[np.searchsorted(starts, at, side="right") - 1]
        return distinct.copy(), at.copy(), sid.copy()

    compiled, numpy = _both(monkeypatch, coarse)
    for a, b in zip(compiled, numpy):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_a_thinned_read_matches_numpy(tmp_path, monkeypatch):
    """The whole streaming read of a run thinned as a 150 M-row one is: equal in every array."""
    spec = SyntheticSpec(steps=1500, tensors=21, onset=1400, nan_at=1490, growth=1.5, steps_per_segment=250)
    run = load_run(write_synthetic_run(tmp_path / "run", spec))
    monkeypatch.setattr(series, "FULL_ROWS", 20_000)
    monkeypatch.setattr(series, "COARSE_ROWS", 6_000)
    monkeypatch.setattr(series, "FINE_STEPS", 200)
    compiled, numpy = _both(monkeypatch, series.read_series, run)
    assert compiled.keys == numpy.keys and all(isinstance(k, SeriesKey) for k in compiled.keys)
    assert len(compiled.step) < 1500 * 21 / 2  # thinned
    for name in ("offsets", "step", "magnitude", "nonfinite", "aux", "numel", "thinned_steps"):
        np.testing.assert_array_equal(getattr(compiled, name), getattr(numpy, name))


@pytest.mark.parametrize("kind", ["float32", "float64"])
def test_magnitudes_of_a_norm_on_every_row_match_numpy(monkeypatch, kind):
    # numpy returns the norm column itself (widened) when it is valid and a number everywhere.
    rng = np.random.default_rng(7)
    rows = 1000
    batch = pa.record_batch({"norm": pa.array(rng.uniform(0, 3, rows), kind),
                             **{c: pa.nulls(rows, pa.float32()) for c in ("max_abs", "min", "max")}})
    compiled, numpy = _both(monkeypatch, lambda: series._magnitude(batch, np.full(rows, 7.0)).copy())
    np.testing.assert_array_equal(compiled, numpy)
    assert compiled.dtype == numpy.dtype == np.float64


def test_codes_that_are_not_int32_take_the_numpy_path(monkeypatch):
    # A dictionary with int8 or int64 codes (another writer's file) is read by the numpy twin.
    rng = np.random.default_rng(11)
    rows = 500
    runs = np.repeat(np.arange(rows), 7)[:rows]
    columns = {"role": np.array(["param", "grad"])[runs % 2], "name": np.array(["a", "b", "c"])[runs // 2 % 3],
               "key": np.array(["x", "y"])[rng.integers(0, 2, rows)]}
    for index in (pa.int8(), pa.int64()):
        batch = pa.record_batch({c: pa.array(v).dictionary_encode().cast(pa.dictionary(index, pa.string()))
                                 for c, v in columns.items()})
        assert not series._int32_codes(batch.column("role"))

        def ids():
            builder = series._Builder()
            sid, starts, role_codes, _ = builder._series_ids(batch)
            return sid, starts, role_codes.copy(), list(builder.ids)

        compiled, numpy = _both(monkeypatch, ids)
        for a, b in zip(compiled, numpy):
            np.testing.assert_array_equal(np.asarray(a, object), np.asarray(b, object))


@pytest.mark.parametrize("thinned", [False, True])
def test_an_analysis_without_the_extension_is_the_same(tmp_path, thinned):
    """Where the extension could not be compiled (its import fails), `analyze` falls back to
    numpy and writes the same JSON, thinned (a 150 M-row run's read, scaled down) or not."""
    import json
    import subprocess
    import sys

    spec = SyntheticSpec(steps=1500, tensors=21, onset=1400, nan_at=1490, growth=1.5, steps_per_segment=250)
    run_dir = write_synthetic_run(tmp_path / "run", spec)
    scale = ("from postmortem import series; series.FULL_ROWS, series.COARSE_ROWS, series.FINE_STEPS = "
             "20_000, 6_000, 200; " if thinned else "")
    outputs = []
    for blocked in (False, True):
        code = ("import json, sys\n"
                + ("sys.modules['postmortem._kernels'] = None  # `from . import _kernels` raises ImportError\n"
                   if blocked else "")
                + scale + "\nimport postmortem\nfrom postmortem import series\n"
                f"assert (series._kernels is None) == {blocked}\n"
                f"print(json.dumps(postmortem.analyze({str(run_dir)!r}).to_json(), sort_keys=True))\n")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["verdict"]


def test_a_table_since_a_step_keeps_each_series_rows_from_there_and_drops_emptied_series(tmp_path):
    run = load_run(write_synthetic_run(tmp_path / "run", SyntheticSpec(steps=60, tensors=6, seed=3)))
    table = series.read_series(run)
    later = table.since(40)
    for index, key in enumerate(table.keys):
        rows = table.rows(index)
        keep = table.step[rows] >= 40
        if not keep.any():
            assert key not in later.keys
            continue
        mine = later.rows(later.keys.index(key))
        assert np.array_equal(later.step[mine], table.step[rows][keep])
        assert np.array_equal(later.magnitude[mine], table.magnitude[rows][keep], equal_nan=True)
        assert np.array_equal(later.aux[:, mine], table.aux[:, rows][:, keep], equal_nan=True)
        assert later.numel[later.keys.index(key)] == table.numel[index]
    assert later.recorded_steps().min() == 40
    assert len(table.since(10_000).keys) == 0
