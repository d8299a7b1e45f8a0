from postmortem import compare_runs, load_run
from postmortem.compare import Comparison, Difference, Mismatch
from report_runs import write_run
from reports import render_comparison
from reports.compare import difference_details


def _compare(tmp_path, **b_options):
    run_a = load_run(write_run(tmp_path / "a", kind="healthy"))
    run_b = load_run(write_run(tmp_path / "b", kind="healthy", **b_options))
    return compare_runs(run_a, run_b)


def test_identical_runs_agree_everywhere(tmp_path):
    comparison = _compare(tmp_path)
    assert comparison.first_difference is None
    assert comparison.common_steps == 60
    assert "agree on all 60 common steps" in render_comparison(comparison)


def test_same_batch_different_loss_found_at_its_step(tmp_path):
    difference = _compare(tmp_path, loss_change_at=17).first_difference
    assert (difference.step, difference.reason) == (17, "different_values")
    assert "loss" in [m.series for m in difference.mismatches]
    assert any(d.startswith("loss:") for d in difference_details(difference))


def test_different_batch_found_at_its_step_and_explains_later_values(tmp_path):
    difference = _compare(tmp_path, batch_change_at=23, loss_change_at=30).first_difference
    assert (difference.step, difference.reason) == (23, "different_batch")
    assert difference.mismatches[0].series == "input" and difference.mismatches[0].a != difference.mismatches[0].b
    assert difference_details(difference)[0].startswith("input: hash")


def test_batch_difference_wins_a_tie_with_values(tmp_path):
    difference = _compare(tmp_path, batch_change_at=5, loss_change_at=5).first_difference
    assert (difference.step, difference.reason) == (5, "different_batch")


def test_shorter_run_is_compared_on_common_steps(tmp_path):
    comparison = _compare(tmp_path, steps=40)
    assert comparison.first_difference is None
    assert (comparison.last_step_a, comparison.last_step_b) == (59, 39)
    assert "Run A ends at step 59, run B at step 39" in render_comparison(comparison)


def test_gradient_differences_are_located(tmp_path):
    run_a = load_run(write_run(tmp_path / "a", kind="healthy", seed=0))
    run_b = load_run(write_run(tmp_path / "b", kind="healthy", seed=1))  # different data from step 0
    difference = compare_runs(run_a, run_b).first_difference
    assert (difference.step, difference.reason) == (0, "different_batch")


def test_details_name_six_series_then_the_gradients_that_differ():
    difference = Difference(3, "different_values", tuple(Mismatch(f"loss{i}", 1.0, 2.0) for i in range(8)),
                            gradients=tuple(f"fc{i}.weight" for i in range(8)))
    lines = difference_details(difference)
    assert [line.split(":")[0] for line in lines[:6]] == [f"loss{i}" for i in range(6)]
    assert lines[6] == "gradient norms differ for: " + ", ".join(f"fc{i}.weight" for i in range(6)) + " and 2 more"
    assert difference_details(Difference(4, "missing_step", only_in="B")) == ["step 4 is recorded in run B only"]
    text = render_comparison(Comparison(10, 9, 9, difference)).splitlines()
    assert text[0] == "First difference at step 3: same batch, different numbers." and len(text) == 8
