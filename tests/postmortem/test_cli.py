"""The command line as a user (or a CI job) drives it: outputs, exit codes, one-line errors."""
import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import postmortem
from postmortem_cli import cli

_spec = importlib.util.spec_from_file_location("report_runs", Path(__file__).parents[1] / "reports" / "report_runs.py")
report_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report_runs)
write_run = report_runs.write_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-runs")
    return {kind: write_run(root / kind, kind=kind) for kind in ("diverged", "healthy")}


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("postmortem: error: "), err
    assert "Traceback" not in err
    return err


def test_analyze_writes_report_into_run_dir_and_extra_outputs(runs, tmp_path, capsys):
    code = cli.main(["analyze", str(runs["healthy"]), "--json", str(tmp_path / "a.json"),
                     "--markdown", str(tmp_path / "a.md"), "--fail-on", "diverged,nonfinite_input"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""  # no progress bar: stderr is not a terminal here
    report = runs["healthy"] / "report.html"
    assert report.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert out.startswith("Healthy:") and f"Report: {report}" in out
    assert json.loads((tmp_path / "a.json").read_text())["verdict"] == "healthy"
    markdown = (tmp_path / "a.md").read_text()
    assert len(markdown.splitlines()) <= 30 and "Full report: report.html" in markdown


def test_fail_on_a_reported_label_exits_1(runs, tmp_path, capsys):
    code = cli.main(["analyze", str(runs["diverged"]), "-o", str(tmp_path / "r.html"), "--fail-on", "nonfinite_input, diverged"])
    assert code == 1
    assert "diverged matched --fail-on" in capsys.readouterr().err
    assert (tmp_path / "r.html").is_file()  # the report is still written for the ticket


def _empty(path: Path) -> Path:
    path.mkdir()
    return path


def _file(path: Path) -> Path:
    path.write_text("not a run")
    return path


def _garbage_parquet(path: Path) -> Path:
    (path / "stats").mkdir(parents=True)
    (path / "stats" / "part-000000.parquet").write_bytes(b"PAR1 this is not parquet \x00\xff" * 10)
    return path


def _future_schema(path: Path) -> Path:
    write_run(path, kind="healthy")
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 99}))
    return path


@pytest.mark.parametrize("make", [lambda p: p, _empty, _file, _garbage_parquet, _future_schema],
                         ids=["missing", "empty dir", "file instead of dir", "garbage parquet", "future schema"])
@pytest.mark.parametrize("command", ["analyze", "summary"])
def test_bad_run_directory_is_one_line_and_exit_2(tmp_path, capsys, make, command):
    run_dir = make(tmp_path / "run")
    assert cli.main([command, str(run_dir)]) == 2
    assert str(run_dir) in _one_line_error(capsys)


def test_unwritable_default_report_says_how_to_write_elsewhere(tmp_path, capsys):
    run_dir = write_run(tmp_path / "run", kind="healthy")
    (run_dir / "report.html").mkdir()  # as unwritable as it gets, even for root
    assert cli.main(["analyze", str(run_dir)]) == 2
    assert "pass -o FILE" in _one_line_error(capsys)


def test_read_only_run_dir_is_refused_before_analysis(runs, capsys, monkeypatch):
    monkeypatch.setattr(cli.os, "access", lambda path, mode: False)  # root ignores chmod, so pretend
    monkeypatch.setattr(cli, "analyze", lambda run: pytest.fail("analysed although the report cannot be written"))
    assert cli.main(["analyze", str(runs["healthy"])]) == 2
    message = _one_line_error(capsys)
    assert "is not writable" in message and "pass -o FILE" in message


def test_output_into_missing_folder_is_refused_before_analysis(runs, tmp_path, capsys):
    assert cli.main(["analyze", str(runs["healthy"]), "--json", str(tmp_path / "nope" / "a.json")]) == 2
    assert "does not exist" in _one_line_error(capsys)


@pytest.mark.parametrize("argv", [[], ["frobnicate"], ["analyze"], ["analyze", "x", "--fail-on", " , "],
                                  ["compare", "only-one"]])
def test_bad_arguments_are_one_line_and_exit_2(argv, capsys):
    assert cli.main(argv) == 2
    _one_line_error(capsys)


def test_fail_on_an_unknown_label_is_refused(capsys):
    # a typo would never match, so the CI gate would pass silently: refuse it before any work
    assert cli.main(["analyze", "no-such-run", "--fail-on", "diverged,exploding_gradeint"]) == 2
    message = _one_line_error(capsys)
    assert "unknown label 'exploding_gradeint'" in message and "exploding_gradient" in message


def test_fail_on_accepts_every_label_and_verdict():
    every = postmortem.LABELS | set(postmortem.VERDICTS)
    assert cli._labels(",".join(sorted(every))) == every


def test_unexpected_error_is_still_one_line(runs, capsys, monkeypatch):
    def broken(run):
        raise TypeError("surprise\nsecond line")

    monkeypatch.setattr(cli, "analyze", broken)
    assert cli.main(["summary", str(runs["healthy"])]) == 2
    assert "unexpected TypeError while reading the run: surprise second line" in _one_line_error(capsys)
    monkeypatch.setenv("POSTMORTEM_TRACEBACK", "1")
    with pytest.raises(TypeError):
        cli.main(["summary", str(runs["healthy"])])


def test_summary_prints_verdict_without_terminal_controls(tmp_path, capsys):
    run_dir = write_run(tmp_path / "run", modules=("\x1b]0;pwned\x07conv1", "\x1b[2Jfc1", "fc2"))
    assert cli.main(["summary", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Diverged. The failure began at step")
    assert "\x1b" not in out and "\x07" not in out


def test_compare_reports_first_difference(tmp_path, capsys):
    run_a = write_run(tmp_path / "a", kind="healthy")
    run_b = write_run(tmp_path / "b", kind="healthy", loss_change_at=17)
    assert cli.main(["compare", str(run_a), str(run_a)]) == 0
    assert "agree on all 60 common steps" in capsys.readouterr().out
    assert cli.main(["compare", str(run_a), str(run_b)]) == 0
    assert "First difference at step 17: same batch, different numbers." in capsys.readouterr().out


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("postmortem ")


def test_module_entry_point_runs_without_torch(runs):
    """`python -m postmortem` works, and the CLI with its reports never imports torch."""
    blocker = (
        "import runpy, sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('torch is blocked in this test')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "sys.argv = ['postmortem'] + sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_module('postmortem', run_name='__main__')\n"
        "finally:\n"
        "    assert 'torch' not in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", blocker, "summary", str(runs["healthy"])],
                            capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Healthy:")


@pytest.mark.parametrize("severity,code", [("note", 0), ("error", 1)])
def test_fail_on_reads_errors_and_warnings_not_notes(runs, tmp_path, monkeypatch, severity, code):
    real = cli.analyze

    def with_finding(run, **kwargs):
        analysis = real(run, **kwargs)
        finding = postmortem.Finding("no_gradient", 0, ["attn.k_proj.bias"], {}, "zero by construction", severity)
        return dataclasses.replace(analysis, findings=[*analysis.findings, finding])

    monkeypatch.setattr(cli, "analyze", with_finding)
    assert cli.main(["analyze", str(runs["healthy"]), "-o", str(tmp_path / "r.html"), "--fail-on", "no_gradient"]) == code


def test_the_progress_bar_moves_through_the_analysis_and_ends_full(runs, tmp_path, monkeypatch):
    drawn = []

    class Recording:
        def __init__(self, total):
            drawn.append(total)

        def advance(self, label):
            drawn.append(label)

        def close(self):
            pass

    monkeypatch.setattr(cli, "Progress", Recording)
    assert cli.main(["analyze", str(runs["diverged"]), "-o", str(tmp_path / "r.html")]) == 0
    total, labels = drawn[0], drawn[1:]
    assert len(labels) == total
    between = labels[labels.index("analysing") + 1:]
    stages = [label.split()[0] for label in between[:postmortem.analysis.ANALYSIS_STAGES]]
    assert stages == ["reading"] * (1 + postmortem.series.READ_STAGES) + ["fitting", "diagnosing", "ranking"]
