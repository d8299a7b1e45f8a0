"""What the report draws agrees with a plain pandas reference on the same run, and a report needs
nothing of the run directory once the analysis holds it."""
import shutil

import numpy as np
import pandas as pd
import pytest

from postmortem import analyze, load_run
from postmortem.report_data import StepBins, binned_log_matrix, report_data
from postmortem.series import read_series
from report_runs import write_run
from reports import build_page, render_html, render_markdown, render_summary


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(write_run(tmp_path_factory.mktemp("agg") / "run", kind="diverged"))


def _reference(run, role, column, names, bins):
    frame = run.stats(roles=[role], columns=[column, "nonfinite"])
    frame = frame[(frame["step"] >= bins.lo) & (frame["step"] <= bins.hi)]
    frame = frame.assign(bin=bins.lo + (frame["step"] - bins.lo) // bins.width * bins.width)
    grouped = frame.groupby(["name", "bin"])
    positive = frame[column].where(frame[column] > 0)
    values = np.log10(positive.groupby([frame["name"], frame["bin"]]).max()).unstack()
    nonfinite = (grouped["nonfinite"].max() > 0).unstack()
    zero = (frame[column].eq(0).groupby([frame["name"], frame["bin"]]).all()).unstack() & ~nonfinite
    shape = dict(index=names, columns=bins.starts)
    return values.reindex(**shape), nonfinite.reindex(**shape).fillna(False), zero.reindex(**shape).fillna(False)


@pytest.mark.parametrize("role, column", [("grad", "norm"), ("update", "ratio")])
@pytest.mark.parametrize("bins", [StepBins(0, 59, 1), StepBins(13, 55, 7), StepBins.covering(0, 59, 8)])
def test_binned_matrix_matches_pandas(run, role, column, bins):
    names = ["fc2.weight", "conv1.bias", "fc1.weight"]
    matrix = binned_log_matrix(read_series(run), role=role, column=None if column == "norm" else column,
                               names=names, bins=bins)
    values, nonfinite, zero = _reference(run, role, column, names, bins)
    pd.testing.assert_frame_equal(matrix.values, values.astype(float), check_names=False, check_dtype=False)
    assert (matrix.nonfinite.to_numpy() == nonfinite.to_numpy(dtype=bool)).all()
    assert (matrix.zero.to_numpy() == zero.to_numpy(dtype=bool)).all()
    assert matrix.nonfinite.to_numpy().any()  # the run turns non-finite from step 52: the mask is exercised


def test_zero_cells_are_marked(tmp_path):
    table = read_series(load_run(write_run(tmp_path / "run", kind="no_update")))
    matrix = binned_log_matrix(table, role="update", column="ratio", names=["fc1.weight"], bins=StepBins(0, 59, 10))
    assert matrix.zero.to_numpy().all() and matrix.values.isna().to_numpy().all()


def test_curves_peaks_and_ratio_match_pandas(run):
    data = report_data(run, onset=None, first_nonfinite=None, ranking=[], findings=[])
    activations = run.stats(roles=["activation"], columns=["max_abs"])
    finite = activations[np.isfinite(activations["max_abs"])]
    peaks = finite.groupby("name")["max_abs"].max()
    loudest = list(peaks.sort_values(ascending=False).index[:8])
    assert {c.label for c in data.activations.max_abs} == set(loudest)
    ratios = run.stats(roles=["update"], columns=["ratio"])["ratio"].dropna().to_numpy()
    assert data.median_update_ratio == pytest.approx(float(np.median(ratios)))
    scalars = run.scalars()
    loss = scalars[scalars["name"] == "loss"].set_index("step")["value"].sort_index()
    curve = next(c for c in data.losses if c.label == "loss")
    assert curve.steps.tolist() == loss.index.tolist()
    np.testing.assert_array_equal(curve.values, loss.to_numpy(np.float64))


def test_report_renders_after_the_run_directory_is_gone(tmp_path):
    run_dir = write_run(tmp_path / "run", kind="diverged")
    analysis = analyze(run_dir)
    with_run = render_html(build_page(analysis, version="x"))
    shutil.rmtree(run_dir)
    assert not run_dir.exists()
    assert render_html(build_page(analysis, version="x")) == with_run
    assert render_markdown(analysis).startswith("### postmortem: run:")
    assert "Diverged" in render_summary(analysis)


def test_each_warning_is_shown_once(tmp_path):
    run_dir = write_run(tmp_path / "run", kind="diverged")
    (run_dir / "stats" / "part-999999.parquet").write_bytes(b"not parquet")  # the loader warns and skips it
    analysis = analyze(run_dir)
    skipped = [w for w in analysis.warnings if "part-999999" in w]
    assert len(skipped) == 1 and skipped[0] in analysis.run.warnings
    assert sum("part-999999" in w for w in build_page(analysis).warnings) == 1
    assert render_summary(analysis).count("skipped unreadable segment") == 1
