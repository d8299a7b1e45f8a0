"""Corrupt and hostile run directories: a one-line error (exit 2) or a warning, never a crash.

The bulk (hypothesis, 200 derandomized cases) goes through the library and the CLI's `main()`
in-process; a handful of fixed cases go through `python -m postmortem analyze` in real
subprocesses. Every case starts from a copy of one small real run (the `tiny_run` fixture).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import postmortem
from postmortem_cli.cli import main
from reliability_cases import (HOSTILE_TEXTS, KINDS, TABLES, Mutation, copy_run, load_manifest,
                               pick_segment, time_limit, write_manifest)

ROOT = Path(__file__).resolve().parents[2]
CASE_SECONDS = 60  # generous on a loaded 2-core machine; a hang is the failure caught here

mutations = st.builds(
    Mutation,
    kind=st.sampled_from(sorted(KINDS)),
    table=st.sampled_from(TABLES),
    index=st.integers(0, 7),
    fraction=st.floats(0.0, 0.999),
    number=st.integers(0, 10**6),
    text=st.sampled_from(HOSTILE_TEXTS),
    seed=st.integers(0, 2**16),
)


def dir_name(hostile: bool, text: str) -> str:
    """A run folder name, sometimes carrying HTML/JS/terminal control characters."""
    return "run-" + text.replace("/", "_").replace("\x00", "") if hostile else "run"


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(err: str) -> None:
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("postmortem: error: "), err
    assert "Traceback" not in err
    assert "\x1b" not in err and "\x07" not in err, f"terminal control characters in {err!r}"


class Recording:
    """Wraps the library's `analyze` as the CLI calls it, keeping what it returned or raised.

    One analysis per case then checks both contracts: the library's (return, or raise only
    PostmortemError) and the command line's (exit 0 with a summary, or exit 2 with one line).
    """

    def __init__(self) -> None:
        self.analysis: postmortem.Analysis | None = None
        self.error: BaseException | None = None

    def __call__(self, run):
        try:
            self.analysis = postmortem.analyze(run)
        except BaseException as exc:
            self.error = exc
            raise
        return self.analysis


@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutation=mutations, hostile_dir=st.booleans())
def test_damaged_run_is_analysed_with_a_warning_or_refused(tiny_run, mutation, hostile_dir):
    event(mutation.kind)  # the spread over kinds shows with --hypothesis-show-statistics
    check_case(tiny_run, mutation, hostile_dir)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_once(tiny_run, kind):
    """Hypothesis's draws are not uniform over kinds; this makes sure none is left out."""
    check_case(tiny_run, Mutation(kind, table="scalars", index=1, number=7, seed=1,
                                  text=HOSTILE_TEXTS[3]), hostile_dir=True)


def check_case(tiny_run: Path, mutation: Mutation, hostile_dir: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = copy_run(tiny_run, Path(tmp) / dir_name(hostile_dir, mutation.text))
        outside = Path(tmp) / "outside"
        outside.mkdir()
        mutation.apply(run_dir, outside)

        recording = Recording()
        with time_limit(CASE_SECONDS), mock.patch("postmortem_cli.cli.analyze", recording):
            code, out, err = run_main(["summary", str(run_dir)])

    assert "unexpected" not in err, f"the library raised a non-PostmortemError: {err}"
    if recording.error is not None:
        assert isinstance(recording.error, postmortem.PostmortemError), repr(recording.error)
    if code == 2:
        assert_one_line_error(err)
        return
    assert code == 0 and recording.analysis is not None, (code, err)
    json.dumps(recording.analysis.to_json(), allow_nan=False)
    assert "\x1b" not in out, "terminal control characters reach the terminal"
    if mutation.damaging:
        assert recording.analysis.warnings, f"{mutation.kind} damaged the run but nothing warns"
        assert "Warnings:" in out


# Fixed cases for the real command line: one of each family, in subprocesses run side by side.
SUBPROCESS_CASES = [
    Mutation("truncate", table="stats", index=3, fraction=0.4),
    Mutation("manifest_special_file", number=0),
    Mutation("manifest_bad_version", number=1),
    Mutation("hostile_events", index=2, text=HOSTILE_TEXTS[1]),
    Mutation("manifest_models_malformed", number=2, text=HOSTILE_TEXTS[3]),
]


def test_command_line_on_damaged_runs(tiny_run, tmp_path):
    jobs = []
    for i, mutation in enumerate(SUBPROCESS_CASES):
        run_dir = copy_run(tiny_run, tmp_path / f"{i:02d}-{mutation.kind}")
        outside = tmp_path / f"outside-{i}"
        outside.mkdir()
        mutation.apply(run_dir, outside)
        report = tmp_path / f"{i:02d}.html"
        process = subprocess.Popen(
            [sys.executable, "-m", "postmortem", "analyze", str(run_dir), "-o", str(report)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "POSTMORTEM_TRACEBACK": ""})
        jobs.append((mutation, process, report))
    for mutation, process, report in jobs:
        try:
            out, err = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"{mutation.kind}: the command hung")
        assert process.returncode in (0, 2), (mutation.kind, process.returncode, err)
        if process.returncode == 2:
            assert_one_line_error(err)
            continue
        assert "Traceback" not in err and "\x1b" not in out + err
        html = report.read_text()
        assert "<script>alert(1)" not in html and "onerror=alert(1)>" not in html
        assert "\x1b" not in html
        if mutation.damaging:
            assert "Warnings while reading the run" in html, mutation.kind


def test_hostile_names_are_escaped_in_the_report(tiny_run, tmp_path):
    run_dir = copy_run(tiny_run, tmp_path / "run")
    Mutation("hostile_names", index=0, text=HOSTILE_TEXTS[0]).apply(run_dir, tmp_path)
    manifest = load_manifest(run_dir)
    manifest["config"] = {"note": HOSTILE_TEXTS[1], "title": HOSTILE_TEXTS[3]}
    write_manifest(run_dir, manifest)
    code, out, err = run_main(["analyze", str(run_dir), "-o", str(tmp_path / "r.html"),
                               "--markdown", str(tmp_path / "r.md")])
    assert code == 0, err
    html = (tmp_path / "r.html").read_text()
    assert "&lt;script&gt;alert(1)" in html or "&lt;script" in html  # shown, as text
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "\x1b" not in html + out + (tmp_path / "r.md").read_text()


@pytest.mark.parametrize("make", [
    lambda p: p.write_text("not a run"),  # a file instead of a directory
    lambda p: None,  # nothing there
    lambda p: p.mkdir(),  # an empty directory
], ids=["file", "missing", "empty"])
def test_not_a_run_directory_is_a_one_line_error(tmp_path, make):
    path = tmp_path / "run"
    make(path)
    with pytest.raises(postmortem.RunDirectoryError):
        postmortem.analyze(path)
    code, _, err = run_main(["analyze", str(path), "-o", str(tmp_path / "r.html")])
    assert code == 2
    assert_one_line_error(err)


# ------------------------------------------- shapes that once broke the analyzer, one test each
def _analyze_copy(tiny_run: Path, tmp_path: Path, damage) -> postmortem.Analysis:
    run_dir = copy_run(tiny_run, tmp_path / "run")
    damage(run_dir)
    with time_limit(CASE_SECONDS):
        return postmortem.analyze(run_dir)


def test_deeply_nested_manifest_is_a_warning(tiny_run, tmp_path):
    def damage(run_dir):
        (run_dir / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings


def test_infinite_schema_version_is_a_schema_error(tiny_run, tmp_path):
    def damage(run_dir):
        manifest = load_manifest(run_dir)
        text = json.dumps(manifest).replace(f'"schema_version": {manifest["schema_version"]}',
                                            '"schema_version": 1e400')
        (run_dir / "manifest.json").write_text(text)
    with pytest.raises(postmortem.SchemaVersionError):
        _analyze_copy(tiny_run, tmp_path, damage)


@pytest.mark.parametrize("version", [1.5, True])
def test_non_integer_schema_version_is_a_schema_error(tiny_run, tmp_path, version):
    def damage(run_dir):
        manifest = load_manifest(run_dir)
        manifest["schema_version"] = version
        write_manifest(run_dir, manifest)
    with pytest.raises(postmortem.SchemaVersionError):
        _analyze_copy(tiny_run, tmp_path, damage)


def test_segment_without_role_and_name_is_skipped_with_a_warning(tiny_run, tmp_path):
    def damage(run_dir):
        path = pick_segment(run_dir, "stats", 1)
        pq.write_table(pa.table({"foo": [1, 2, 3]}), path)
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings


def test_segment_without_step_column_warns(tiny_run, tmp_path):
    def damage(run_dir):
        path = pick_segment(run_dir, "stats", 1)
        pq.write_table(pq.read_table(path).drop(["step"]), path)
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings


def test_negative_steps_warn(tiny_run, tmp_path):
    def damage(run_dir):
        Mutation("negative_steps", index=1, number=1).apply(run_dir, tmp_path)
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings


@pytest.mark.parametrize("step", [2**62, 2**63 - 1, -(2**63)])
def test_steps_beyond_float_precision_are_refused_or_warned(tiny_run, tmp_path, step):
    def damage(run_dir):
        for table in ("stats", "scalars"):
            path = pick_segment(run_dir, table, 1)
            read = pq.read_table(path)
            steps = [step - s % 3 if step > 0 else step + s % 3 for s in read.column("step").to_pylist()]
            pq.write_table(read.set_column(0, "step", pa.array(steps, pa.int64())), path)
    try:
        analysis = _analyze_copy(tiny_run, tmp_path, damage)
    except postmortem.PostmortemError:
        return
    assert analysis.warnings


def test_decompression_bomb_segment_is_noticed(tiny_run, tmp_path):
    rows = 2_000_000  # ~25 KB of Parquet; 10 M rows (~120 KB) took 1.1 GB and 8 s to analyse

    def damage(run_dir):
        zeros = pa.array(np.zeros(rows, dtype="int64"))
        pq.write_table(pa.table({
            "step": zeros,
            "name": pa.array(["loss"]).dictionary_encode().take(pa.array(np.zeros(rows, "int32"))),
            "value": pa.array(np.ones(rows)),
        }), run_dir / "scalars" / "part-000099.parquet", compression="zstd")
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings


def test_enormous_manifest_is_refused_with_a_warning(tiny_run, tmp_path):
    def damage(run_dir):
        manifest = load_manifest(run_dir)
        manifest["config"] = {"padding": "x" * (64 * 2**20)}
        write_manifest(run_dir, manifest)
    analysis = _analyze_copy(tiny_run, tmp_path, damage)
    assert analysis.warnings and "padding" not in analysis.run.manifest.get("config", {})


def test_manifest_symlink_out_of_the_run_is_not_read(tiny_run, tmp_path):
    secret = tmp_path / "secrets.json"
    secret.write_text(json.dumps({"schema_version": 1, "config": {"api_key": "SECRET-42"}}))

    def damage(run_dir):
        (run_dir / "manifest.json").unlink()
        (run_dir / "manifest.json").symlink_to(secret)
    analysis = _analyze_copy(tiny_run, tmp_path, damage)
    assert "SECRET-42" not in json.dumps(analysis.run.manifest)
    assert analysis.warnings


def test_segment_symlink_out_of_the_run_is_not_read(tiny_run, tmp_path):
    foreign = copy_run(tiny_run, tmp_path / "other-run")

    def damage(run_dir):
        path = pick_segment(run_dir, "scalars", 1)
        path.unlink()
        path.symlink_to(pick_segment(foreign, "scalars", 1))
    analysis = _analyze_copy(tiny_run, tmp_path, damage)
    assert any("scalars" in w for w in analysis.warnings)


def test_segment_that_is_not_a_regular_file_warns(tiny_run, tmp_path):
    def damage(run_dir):
        Mutation("segment_special_file", table="stats", index=1, number=2).apply(run_dir, tmp_path)
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings


def test_run_without_stats_warns(tiny_run, tmp_path):
    def damage(run_dir):
        import shutil
        shutil.rmtree(run_dir / "stats")
        (run_dir / "stats").write_text("not a folder")
    assert _analyze_copy(tiny_run, tmp_path, damage).warnings
