"""The streaming aggregates agree with a plain pandas reference on the same run."""
import numpy as np
import pandas as pd
import pytest

from postmortem import load_run
from report_runs import write_run
from reports.aggregate import StepBins, binned_log_matrix, column_values, names_of, peak_by_name


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
    matrix = binned_log_matrix(run, role=role, column=column, names=names, bins=bins)
    values, nonfinite, zero = _reference(run, role, column, names, bins)
    pd.testing.assert_frame_equal(matrix.values, values.astype(float), check_names=False, check_dtype=False)
    assert (matrix.nonfinite.to_numpy() == nonfinite.to_numpy(dtype=bool)).all()
    assert (matrix.zero.to_numpy() == zero.to_numpy(dtype=bool)).all()
    assert matrix.nonfinite.to_numpy().any()  # the run turns non-finite from step 52: the mask is exercised


def test_zero_cells_are_marked(tmp_path):
    run = load_run(write_run(tmp_path / "run", kind="no_update"))
    matrix = binned_log_matrix(run, role="update", column="ratio", names=["fc1.weight"], bins=StepBins(0, 59, 10))
    assert matrix.zero.to_numpy().all() and matrix.values.isna().to_numpy().all()


def test_names_peaks_and_values_match_pandas(run):
    activations = run.stats(roles=["activation"], columns=["max_abs"])
    assert names_of(run, "activation") == sorted(activations["name"].unique())
    finite = activations[np.isfinite(activations["max_abs"])]
    assert peak_by_name(run, role="activation", column="max_abs") == pytest.approx(
        finite.groupby("name")["max_abs"].max().to_dict())
    ratios = run.stats(roles=["update"], columns=["ratio"])["ratio"].dropna().to_numpy()
    assert np.sort(column_values(run, role="update", column="ratio")) == pytest.approx(np.sort(ratios))
