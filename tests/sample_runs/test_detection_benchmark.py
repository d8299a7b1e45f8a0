"""Smoke test of benchmarks/detection.py on three tiny generated runs."""

import pytest

from sample_run_helpers import load_script
from sample_runs import make


@pytest.fixture(scope="module")
def detection():
    return load_script("benchmarks/detection.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    for name in ("linear_lr_10-s0", "linear_no_step-s0", "linear_overfit_batch-s0"):
        make(name, folder / name)
    return folder


def test_baselines_read_the_run_directory(detection, runs):
    lr10 = detection.read_run(runs / "linear_lr_10-s0")
    nan_at = detection.first_nonfinite_step(lr10)
    truth = (runs / "linear_lr_10-s0" / "expected.json").read_text()
    assert nan_at is not None and nan_at <= int(truth.split('"first_nonfinite_loss_step": ')[1].split(",")[0])
    assert detection.megatron_method(runs, lr10).verdict == "diverged"
    assert detection.first_nonfinite_method(runs, lr10).onset == nan_at
    stuck = detection.sagemaker_rules(runs, detection.read_run(runs / "linear_no_step-s0"))
    assert stuck.verdict == "not_learning" and "no_update" in stuck.labels
    healthy = detection.read_run(runs / "linear_overfit_batch-s0")
    assert detection.first_nonfinite_method(runs, healthy).verdict == "healthy"


def test_every_method_is_scored_on_every_run(detection, runs):
    rows = detection.evaluate(runs)
    assert {(r.run, r.method) for r in rows} == {
        (run, method) for run in ("linear_lr_10-s0", "linear_no_step-s0", "linear_overfit_batch-s0")
        for method in detection.METHODS
    }
    by = {(r.run, r.method): r for r in rows}
    lr10 = by["linear_lr_10-s0", "first_nonfinite"]
    assert lr10.truth == "diverged" and lr10.onset_truth == 0 and lr10.top1 is not None
    summary = detection.summarize([r for r in rows if r.method == "first_nonfinite"])
    assert summary["detected (diverged)"].startswith("1/1") and summary["false alarms (healthy)"].startswith("0/1")
    text = detection.report(rows, "pytest", runs)
    assert text.startswith("## Detection") and "| postmortem |" in text


def test_write_section_replaces_only_our_section(detection, tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\n## Recorder overhead\n\nkeep me\n\n## Detection\n\nold\n\n## Analyzer scale\n\nkeep too\n")
    detection.write_section("## Detection\n\nnew table\n", docs)
    text = docs.read_text()
    assert "keep me" in text and "keep too" in text and "new table" in text and "old" not in text
    detection.write_section("## Detection\n\nnewer\n", docs)
    assert docs.read_text().count("## Detection") == 1


def _row(detection, arch, config, right, held_out=False):
    truth = "healthy"
    return detection.Scored(f"{arch}-{config}", "healthy", arch, held_out, "postmortem", truth,
                            truth if right else "diverged", None, None, None, None, None, None, right, 0.0, config)


def test_each_family_is_scored_with_the_configuration_chosen_on_the_others(detection):
    # "b" is right on mlp, cnn and lstm, "a" only on the never-seen family: it gets "b", chosen without it.
    held = detection.NEVER_SEEN_ARCHS[0]
    results = {"mlp": {"a": False, "b": True}, "cnn": {"a": False, "b": True}, "lstm": {"a": False, "b": True},
               held: {"a": True, "b": False}}
    rows = [_row(detection, arch, config, right, arch in detection.NEVER_SEEN_ARCHS)
            for arch, by_config in results.items() for config, right in by_config.items()]
    chosen = detection.choose_per_family(rows)
    assert chosen == {"cnn": "b", "lstm": "b", "mlp": "b", held: "b"}
    left = detection.left_out_rows(rows, chosen)
    assert sorted(r.run for r in left) == sorted(["cnn-b", "lstm-b", "mlp-b", f"{held}-b"])
    # With the held-out family's runs alone deciding, "a" would win: the choice for a family never reads its runs.
    alone = [r for r in rows if r.arch in (held, "mlp")]
    assert detection.choose_per_family(alone) == {held: "b", "mlp": "a"}
    text = detection.left_out_section(rows)
    assert f"| {held} (never seen) | b | 1 | 0/1 (0 %)" in text
    assert f"| **never seen ({', '.join(detection.NEVER_SEEN_ARCHS)}; 1 runs)** | 1 | 0/1 (0 %)" in text


def test_a_grid_analyses_each_run_once_per_configuration_and_caches_it(detection, runs):
    grid = detection.threshold_grid()
    assert list(grid)[0] == detection.DEFAULT and len(grid) == 1 + len(detection.VARIANTS)
    two = dict(list(grid.items())[:2])
    cache = detection.PredictionCache(runs)
    rows = detection.evaluate(runs, ["linear_lr_10-s0"], two, cache)
    assert sorted(r.config for r in rows if r.method == "postmortem") == sorted(two)
    assert len(cache.entries) == 2 and cache.path.exists()
    again = detection.evaluate(runs, ["linear_lr_10-s0"], two, detection.PredictionCache(runs))
    assert [(r.config, r.verdict, r.onset) for r in again] == [(r.config, r.verdict, r.onset) for r in rows]


def test_lead_counts_only_runs_whose_first_nonfinite_value_follows_the_true_onset(detection):
    def diverged(onset_truth, onset, nan_at):
        return detection.Scored("r", "f", "mlp", False, "postmortem", "diverged", "diverged", onset_truth, onset,
                                nan_at, None, None, None, True, 0.0, "default")
    # A NaN batch at its own step has no lead to give; a blow-up 6 steps after its onset does.
    summary = detection.summarize([diverged(50, 50, 50), diverged(50, 50, 50), diverged(40, 41, 47)])
    assert summary["median lead (steps)"] == "6 (1)" and summary["median lead, all"] == "0 (3)"
