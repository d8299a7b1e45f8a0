"""What load_run refuses to open or read whole: files outside the run, special files, bombs, odd versions."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pm_runs import make_run, scalar_rows, series_rows
import postmortem
from postmortem import LABELS, SchemaVersionError, analyze, load_run
from postmortem.detectors import INFORMATIONAL, NOT_LEARNING, REGISTRY
from postmortem.gaps import missing_step_warnings, missing_steps, unmeasured_warnings
from postmortem.loading import MAX_MANIFEST_BYTES, MAX_STEP

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, steps=30, segments=3):
    stats = pd.concat([series_rows("grad", "fc.weight", np.linspace(1, 2, steps)),
                       series_rows("param", "fc.weight", np.linspace(5, 6, steps))])
    return make_run(tmp_path / "run", stats, scalar_rows("loss", np.linspace(2, 1, steps)),
                    segments=segments)


def test_symlink_inside_the_run_is_read_and_one_outside_is_not(tmp_path):
    run_dir = _run(tmp_path)
    parts = sorted((run_dir / "stats").glob("part-*.parquet"))
    kept = run_dir / "kept.parquet"
    parts[0].rename(kept)
    parts[0].symlink_to(kept)  # inside the run: fine
    outside = tmp_path / "elsewhere.parquet"
    parts[1].rename(outside)
    parts[1].symlink_to(outside)
    run = load_run(run_dir)
    assert [p.name for p in run.segments["stats"]] == [parts[0].name, parts[2].name]
    assert any("links outside the run directory" in w and parts[1].name in w for w in run.warnings)


def test_manifest_symlinked_out_of_the_run_is_not_read(tmp_path):
    run_dir = _run(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"schema_version": 1, "config": {"token": "SECRET"}}))
    (run_dir / "manifest.json").unlink()
    (run_dir / "manifest.json").symlink_to(secret)
    run = load_run(run_dir)
    assert run.manifest == {} and any("outside the run" in w for w in run.warnings)


@pytest.mark.parametrize("special", ["fifo", "device"])
def test_special_files_are_skipped_unopened(tmp_path, special):
    run_dir = _run(tmp_path)
    target = sorted((run_dir / "stats").glob("part-*.parquet"))[1]
    target.unlink()
    os.mkfifo(target) if special == "fifo" else target.symlink_to("/dev/zero")
    run = load_run(run_dir)  # opening the FIFO would block here forever
    assert target not in run.segments["stats"]
    assert any(target.name in w for w in run.warnings)


def test_manifest_over_the_size_bound_is_ignored(tmp_path):
    run_dir = _run(tmp_path)
    (run_dir / "manifest.json").write_text(json.dumps({"schema_version": 1,
                                                       "config": {"pad": "x" * MAX_MANIFEST_BYTES}}))
    run = load_run(run_dir)
    assert run.manifest == {} and any("larger than" in w for w in run.warnings)


def test_deeply_nested_manifest_is_a_warning(tmp_path):
    run_dir = _run(tmp_path)
    (run_dir / "manifest.json").write_text("[" * 50_000 + "]" * 50_000)
    assert any("unreadable manifest" in w for w in load_run(run_dir).warnings)


@pytest.mark.parametrize("version", [1.0, 1.5, True, "1", 1e400, [1]])
def test_only_an_integer_schema_version_passes(tmp_path, version):
    run_dir = _run(tmp_path)
    (run_dir / "manifest.json").write_text(json.dumps({"schema_version": version}))
    with pytest.raises(SchemaVersionError):
        load_run(run_dir)


@pytest.mark.parametrize("declared", [b"1.5", b"x", b"3"])
def test_segment_schema_version_must_be_a_supported_integer(tmp_path, declared):
    run_dir = _run(tmp_path)
    path = sorted((run_dir / "stats").glob("part-*.parquet"))[0]
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({b"schema_version": declared}), path)
    with pytest.raises(SchemaVersionError):
        load_run(run_dir)


def test_decompression_bomb_is_refused_before_reading(tmp_path):
    run_dir = _run(tmp_path)
    rows = 1_000_000
    bomb = run_dir / "scalars" / "part-000009.parquet"
    pq.write_table(pa.table({"step": np.zeros(rows, np.int64),
                             "name": pa.array(["loss"] * rows).dictionary_encode(),
                             "value": np.ones(rows)}), bomb, compression="zstd")
    run = load_run(run_dir)
    assert bomb not in run.segments["scalars"]
    assert any("decompression bomb" in w for w in run.warnings)
    assert len(run.scalars()) == 30


@pytest.mark.parametrize("drop", [["step"], ["role", "name"]])
def test_segment_without_required_columns_is_skipped(tmp_path, drop):
    run_dir = _run(tmp_path)
    path = sorted((run_dir / "stats").glob("part-*.parquet"))[1]
    pq.write_table(pq.read_table(path).drop(drop), path)
    analysis = analyze(run_dir)
    assert any(f"no {drop[0]}" in w for w in analysis.warnings)


@pytest.mark.parametrize("bad_step", [-1, MAX_STEP + 1, 2**63 - 1])
def test_rows_with_steps_out_of_range_are_dropped_with_a_warning(tmp_path, bad_step):
    run_dir = _run(tmp_path)
    path = sorted((run_dir / "stats").glob("part-*.parquet"))[2]
    table = pq.read_table(path)
    steps = np.full(table.num_rows, bad_step, np.int64)
    pq.write_table(table.set_column(0, "step", pa.array(steps)), path)
    analysis = analyze(run_dir)
    assert analysis.run.stats()["step"].between(0, MAX_STEP).all()
    assert any("whose step is missing, negative or beyond" in w for w in analysis.warnings)


def test_rows_without_role_are_dropped_with_a_warning(tmp_path):
    run_dir = _run(tmp_path)
    path = sorted((run_dir / "stats").glob("part-*.parquet"))[0]
    table = pq.read_table(path)
    role = pa.array([None] * table.num_rows, pa.string()).dictionary_encode()
    pq.write_table(table.set_column(table.schema.get_field_index("role"), "role", role), path)
    assert any("no role or no name" in w for w in analyze(run_dir).warnings)


def test_run_without_statistics_warns_and_claims_no_health(tmp_path):
    run_dir = _run(tmp_path)
    for path in (run_dir / "stats").iterdir():
        path.unlink()
    analysis = analyze(run_dir)
    assert any("no readable tensor statistics" in w for w in analysis.warnings)
    assert "healthy" not in {f.label for f in analysis.findings}


def test_missing_steps_at_the_runs_own_stride():
    assert missing_steps(np.arange(100)) == []
    assert missing_steps(np.arange(0, 1000, 10)) == []  # recorded every 10th step on purpose
    steps = np.r_[np.arange(0, 120), np.arange(180, 200)]
    assert missing_steps(np.repeat(steps, 3)) == [(120, 179, 60)]
    assert missing_steps(np.r_[np.arange(0, 100, 10), np.arange(150, 200, 10)]) == [(100, 140, 5)]


def test_missing_step_warning_names_the_cause():
    steps = np.r_[np.arange(0, 120), np.arange(180, 200)]
    [warning] = missing_step_warnings("scalars", steps, {"failed_writes": 3})
    assert "steps 120–179" in warning and "(60 steps in all)" in warning and "3 failed writes" in warning
    [warning] = missing_step_warnings("scalars", steps, {"failed_writes": "3"})
    assert "no readable segment holds them" in warning


def test_a_lost_middle_segment_is_reported_as_a_gap(tmp_path):
    run_dir = _run(tmp_path)
    sorted((run_dir / "stats").glob("part-*.parquet"))[1].unlink()
    assert any(w.startswith("tensor statistics: steps 10–19 missing") for w in analyze(run_dir).warnings)


def test_labels_are_every_label_the_detectors_emit_and_all_documented():
    # One rule per label in the registry (postmortem.detectors), plus the "healthy" conclusion.
    assert set(REGISTRY) | {"healthy"} == set(LABELS)
    assert set(LABELS) >= INFORMATIONAL | NOT_LEARNING
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", (ROOT / "docs" / "diagnoses.md").read_text(), re.M))
    assert documented == set(LABELS)


def test_checkpoint_linked_out_of_the_run_is_not_opened(tmp_path):
    run_dir = _run(tmp_path)
    (run_dir / "checkpoints").mkdir()
    outside = tmp_path / "outside.parquet"
    pq.write_table(pa.table({"x": [1]}).replace_schema_metadata({b"step": b"5"}), outside)
    (run_dir / "checkpoints" / "step-00000005.parquet").symlink_to(outside)
    run = load_run(run_dir)
    assert run.checkpoints == [] and run.checkpoints == []
    assert sum("checkpoint" in w for w in run.warnings) == 1


def test_what_the_recorder_could_not_measure_is_one_bounded_warning():
    errors = {"activation fc1": "RuntimeError: unsupported tensor", "gradients": "x" * 10_000}
    [warning] = unmeasured_warnings({"measure_errors": errors})
    assert "activation fc1 (RuntimeError: unsupported tensor)" in warning and len(warning) < 500
    many = {f"activation m{i}": "E" for i in range(1000)}
    [warning] = unmeasured_warnings({"measure_errors": many})
    assert "and 997 more" in warning
    for hostile in ("oops", 3, None, [], {}):
        assert unmeasured_warnings({"measure_errors": hostile}) == []
