"""`postmortem scan`: a sweep of small generated runs, scanned on a LocalCluster of 2 workers,
gives the table the serial scan gives; a corrupt run directory is a row, never a crash."""
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from postmortem_cli import cli
from postmortem.scan import COLUMNS, find_runs
from postmortem_cli.scan import scan, scan_runs
from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "scan.md"
_SMALL = dict(steps=60, tensors=11)
# (name, divergence) of the generated runs: 6 diverge into NaN, 6 diverge and stay finite, 7 healthy.
_SWEEP = [(f"lr-{lr}/seed-{seed}", lr) for lr in ("0.1", "0.5", "1.0") for seed in range(6)] + [("baseline", None)]
_DIVERGENCE = {"0.1": {}, "0.5": {"onset": 35}, "1.0": {"onset": 30, "nan_at": 45}, None: {}}
_CORRUPT = "lr-0.5/seed-broken"


def _write_sweep(root: Path) -> Path:
    for number, (name, lr) in enumerate(_SWEEP):
        write_synthetic_run(root / name, SyntheticSpec(**_SMALL, **_DIVERGENCE[lr], seed=number))
    corrupt = root / _CORRUPT
    (corrupt / "stats").mkdir(parents=True)
    (corrupt / "manifest.json").write_text('{"schema_version": 1, "status": "runn')  # cut short
    (corrupt / "stats" / "part-000000.parquet").write_bytes(b"PAR1 but not really")
    (root / "notes").mkdir()
    (root / "notes" / "README.txt").write_text("not a run")
    return root


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return _write_sweep(tmp_path_factory.mktemp("scan") / "sweep")


@pytest.fixture(scope="module")
def serial(sweep):
    return scan([sweep], sweep.parent / "serial", workers=0)


_FINISHED = []  # the rows the Dask scan reported as each run finished (what a progress bar draws)


@pytest.fixture(scope="module")
def on_dask(sweep):
    return scan([sweep], sweep.parent / "dask", workers=2, on_done=_FINISHED.append)


def test_dask_scan_gives_the_serial_table(serial, on_dask):
    assert len(serial.runs) == len(_SWEEP) + 1
    assert sorted(row["run"] for row in _FINISHED) == serial.runs["run"].tolist()
    pd.testing.assert_frame_equal(on_dask.runs, serial.runs)
    pd.testing.assert_frame_equal(on_dask.files, serial.files)
    for report in serial.runs["report"].dropna():
        assert (on_dask.output / report).read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_every_run_has_its_row_with_the_analysis(serial):
    runs = serial.runs.set_index("run")
    assert list(serial.runs.columns) == list(COLUMNS)
    assert set(runs.index) == {name for name, _ in _SWEEP} | {_CORRUPT}
    nan_runs = runs.loc[[f"lr-1.0/seed-{s}" for s in range(6)]]
    assert (nan_runs["verdict"] == "diverged").all() and (nan_runs["first_nonfinite_step"] == 45).all()
    assert nan_runs["onset_step"].between(28, 32).all()
    assert nan_runs["top_culprit"].eq("grad layers.0.weight").all()
    assert runs.loc["lr-0.5/seed-0", "verdict"] == "diverged"
    assert pd.isna(runs.loc["lr-0.5/seed-0", "first_nonfinite_step"])
    healthy = runs.loc[[f"lr-0.1/seed-{s}" for s in range(6)] + ["baseline"]]
    assert (healthy["verdict"] == "healthy").all() and (healthy["labels"] == "healthy").all()
    assert (runs.drop(index=_CORRUPT)["steps"] > 0).all()


def test_a_corrupt_run_directory_is_a_row_with_its_error(serial, on_dask):
    for result in (serial, on_dask):
        row = result.runs.set_index("run").loc[_CORRUPT]
        assert row["verdict"] == "error" and pd.isna(row["report"]) and pd.isna(row["steps"])
        assert "holds no readable stats or scalars segments" in row["error"] and "\n" not in row["error"]


def test_index_links_every_report_and_the_tables_agree(serial):
    html = serial.index.read_text(encoding="utf-8")
    links = re.findall(r'<a href="(reports/[^"]+)">', html)
    assert sorted(links) == sorted(serial.runs["report"].dropna())
    assert all((serial.output / link).is_file() for link in links)
    assert html.index("lr-1.0/seed-0") < html.index(_CORRUPT) < html.index("lr-0.1/seed-0")  # worst first
    assert "20 runs: 12 diverged, 1 error, 7 healthy" in html
    pd.testing.assert_frame_equal(pd.read_parquet(serial.output / "runs.parquet"), serial.runs)
    from_csv = pd.read_csv(serial.output / "runs.csv")
    assert from_csv["run"].tolist() == serial.runs["run"].tolist()
    assert from_csv["onset_step"].astype("Int64").equals(serial.runs["onset_step"])


def test_documented_duckdb_query_reads_all_runs_at_once(serial, sweep, monkeypatch):
    query = re.search(r"```sql\n(.*?)```", DOC.read_text(), re.S).group(1)
    query = query.replace("sweep/postmortem-scan", serial.output.name)
    monkeypatch.chdir(serial.output.parent)
    result = duckdb.connect().sql(query).df()
    analysed = serial.runs[serial.runs["verdict"] != "error"]
    assert sorted(result["run"]) == sorted(analysed["run"])
    verdicts = dict(zip(analysed["run"], analysed["verdict"]))
    assert all(verdicts[run] == verdict for run, verdict in zip(result["run"], result["verdict"]))
    assert result["max_grad_norm"].is_monotonic_decreasing
    top = result.iloc[0]  # the runs that exploded without NaN reach the largest finite norms
    assert top["run"].startswith("lr-0.5/") and top["at_step"] == 59


def test_find_runs(tmp_path):
    root = _write_sweep(tmp_path / "sweep")
    write_synthetic_run(root / "lr-0.1" / "seed-0" / "nested", SyntheticSpec(**_SMALL))  # inside a run
    for rank in (0, 1):
        write_synthetic_run(root / "job" / f"rank-{rank:05d}", SyntheticSpec(**_SMALL, seed=rank))
    (root / "out").mkdir()
    names = [name for name, _ in find_runs([root], skip=[root / "out"])]
    assert "job" in names and not any(n.startswith("job/") or n.endswith("nested") for n in names)
    assert "notes" not in names and _CORRUPT in names and len(names) == len(_SWEEP) + 2
    both = [name for name, _ in find_runs([root / "lr-0.1", root / "lr-0.5"])]
    assert both[0] == "lr-0.1/seed-0" and "lr-0.5/seed-broken" in both and len(both) == 13
    assert find_runs([root / "lr-0.1" / "seed-0"]) == [("seed-0", root / "lr-0.1" / "seed-0")]


def test_scan_command(tmp_path, capsys):
    root = tmp_path / "sweep"
    write_synthetic_run(root / "a", SyntheticSpec(**_SMALL, onset=30, nan_at=45))
    write_synthetic_run(root / "b", SyntheticSpec(**_SMALL))
    assert cli.main(["scan", str(root), "--workers", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("a ") and "diverged" in out[0] and "first non-finite 45" in out[0]
    assert out[-2:] == ["2 runs: 1 diverged, 1 healthy", f"Index: {root / 'postmortem-scan' / 'index.html'}"]
    again = cli.main(["scan", str(root), "--workers", "0"])  # the output folder is not a run
    assert again == 0 and "2 runs:" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["scan", "{tmp}/missing"], "is not a directory"),
    (["scan", "{tmp}"], "no run directories below"),
    (["scan", "{tmp}", "--workers", "-1"], "expected a number of workers"),
    (["scan", "{tmp}", "--workers", "2", "--scheduler", "tcp://x:1"], "not allowed with argument"),
])
def test_scan_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_without_dask_the_error_names_the_extra(tmp_path, capsys, monkeypatch):
    write_synthetic_run(tmp_path / "sweep" / "a", SyntheticSpec(**_SMALL))
    monkeypatch.setitem(sys.modules, "distributed", None)  # `import distributed` raises ImportError
    assert cli.main(["scan", str(tmp_path / "sweep")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'postmortem[scan]'" in err
    assert not (tmp_path / "sweep" / "postmortem-scan").exists()
    assert cli.main(["scan", str(tmp_path / "sweep"), "--workers", "0"]) == 0  # serial needs no Dask


def test_unreachable_scheduler_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("postmortem_cli.scan._SCHEDULER_TIMEOUT", "1s")
    write_synthetic_run(tmp_path / "sweep" / "a", SyntheticSpec(**_SMALL))
    assert cli.main(["scan", str(tmp_path / "sweep"), "--scheduler", "tcp://127.0.0.1:9"]) == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in capsys.readouterr().err


def test_scan_and_multi_rank_analysis_never_import_torch(tmp_path):
    root = tmp_path / "sweep"
    write_synthetic_run(root / "single", SyntheticSpec(**_SMALL))
    for rank in (0, 1):
        write_synthetic_run(root / "job" / f"rank-{rank:05d}", SyntheticSpec(**_SMALL, onset=30, nan_at=45, seed=rank))
    code = textwrap.dedent(f"""
        import sys

        class BlockTorch:  # `import torch` (or torch.*) raises ImportError from here on
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError(name)

        sys.meta_path.insert(0, BlockTorch())
        sys.path.insert(0, {str(ROOT)!r})
        from postmortem_cli import cli
        from postmortem_cli.scan import scan
        result = scan([{str(root)!r}], {str(tmp_path / "out")!r}, workers=0)
        assert result.runs["verdict"].tolist() == ["diverged", "healthy"], result.runs
        assert not any(name.split(".")[0] == "torch" for name in sys.modules)
        print("ok")
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")
