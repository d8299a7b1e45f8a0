"""Multi-rank runs: a real 2-process DDP job (gloo, CPU) records one directory per rank, and the
analysis names the rank whose own batch went bad first, at that step."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from postmortem_cli import cli
from postmortem.ranks import analyze_ranks, is_multi_rank, rank_dirs
from reports.ranks import origin_sentence, spread_sentence
from sample_runs.synthetic import SyntheticSpec, write_synthetic_run

WORKER = Path(__file__).with_name("ddp_worker.py")
ROOT = Path(__file__).resolve().parents[2]
BAD_RANK, BAD_STEP, STEPS = 1, 7, 12


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ddp") / "job"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(WORKER), str(run_dir), str(BAD_RANK), str(BAD_STEP), str(STEPS)],
        capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_each_rank_records_into_its_own_directory_with_its_place_in_the_job(ddp_run):
    assert sorted(p.name for p in ddp_run.iterdir()) == ["rank-00000", "rank-00001"]
    assert is_multi_rank(ddp_run) and list(rank_dirs(ddp_run)) == [0, 1]
    for rank in (0, 1):
        manifest = json.loads((ddp_run / f"rank-{rank:05d}" / "manifest.json").read_text())
        assert manifest["distributed"] == {"rank": rank, "world_size": 2, "local_rank": rank,
                                           "backend": "gloo"}
        assert manifest["host"] and manifest["status"] == "completed"
        assert manifest["last_step"] == STEPS - 1


def test_the_rank_whose_batch_went_bad_is_named_first_at_that_step(ddp_run):
    multi = analyze_ranks(ddp_run)
    assert (multi.origin.rank, multi.origin.step, multi.origin.by) == (BAD_RANK, BAD_STEP, "first_nonfinite")
    assert multi.origin.own and not multi.origin.tied
    first = multi.ranks[BAD_RANK]
    assert ("input", "input") in first.own_nonfinite and ("scalar", "loss") in first.own_nonfinite
    # The all-reduce brings the NaN gradients to rank 0 within the same step, its own values clean.
    other = multi.ranks[1 - BAD_RANK]
    assert other.first_step == BAD_STEP and other.own_nonfinite == ()
    assert [(s.rank, s.step, s.lag_steps, s.own) for s in multi.spread] == [
        (BAD_RANK, BAD_STEP, 0, True), (1 - BAD_RANK, BAD_STEP, 0, False)]
    assert multi.verdict == "diverged" and multi.shown.rank == BAD_RANK and multi.warnings == []


def test_analyze_of_the_parent_reports_every_rank(ddp_run, tmp_path, capsys):
    code = cli.main(["analyze", str(ddp_run), "-o", str(tmp_path / "r.html"), "--json",
                     str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"),
                     "--fail-on", "nonfinite_input"])
    out = capsys.readouterr().out
    assert code == 1  # nonfinite_input was found on rank 1
    assert out.startswith(f"Rank {BAD_RANK} went bad first: at step {BAD_STEP}")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Ranks: which went bad first" in html and html.count('id="ranks"') == 1
    assert f"It reached rank 0 at step {BAD_STEP}, the same step, with shared values only" in html
    payload = json.loads((tmp_path / "r.json").read_text())
    assert payload["origin"] == {"rank": BAD_RANK, "step": BAD_STEP, "by": "first_nonfinite",
                                 "own": True, "tied_with": []}
    assert [r["rank"] for r in payload["ranks"]] == [0, 1]
    assert payload["ranks"][BAD_RANK]["first_nonfinite"]["role"] == "input"
    assert payload["analysis"]["first_nonfinite"]["step"] == BAD_STEP
    markdown = (tmp_path / "r.md").read_text()
    assert len(markdown.splitlines()) <= 30 and f"Rank {BAD_RANK} went bad first" in markdown
    assert cli.main(["summary", str(ddp_run)]) == 0
    summary = capsys.readouterr().out
    assert summary.startswith(f"Rank {BAD_RANK} went bad first") and f"\nRank {BAD_RANK}:\nDiverged." in summary


def test_rank_option_gives_that_ranks_report_alone(ddp_run, tmp_path, capsys):
    assert cli.main(["analyze", str(ddp_run), "--rank", "0", "-o", str(tmp_path / "r0.html")]) == 0
    html = (tmp_path / "r0.html").read_text(encoding="utf-8")
    assert 'id="ranks"' not in html and "module.0.weight" in html
    assert cli.main(["analyze", str(ddp_run), "--rank", "5"]) == 2
    assert "has no rank 5 (ranks recorded: 0, 1)" in capsys.readouterr().err


def _ranked_job(root: Path, specs: dict[int, SyntheticSpec | None]) -> Path:
    for rank, spec in specs.items():
        folder = root / f"rank-{rank:05d}"
        if spec is None:  # a rank whose files are damaged beyond reading
            (folder / "stats").mkdir(parents=True)
            (folder / "stats" / "part-000000.parquet").write_bytes(b"not parquet")
            continue
        write_synthetic_run(folder, spec)
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["distributed"] = {"rank": rank, "world_size": 4, "local_rank": rank, "backend": "gloo"}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_without_non_finite_values_the_earliest_onset_names_the_rank(tmp_path):
    small = dict(steps=120, tensors=11)
    job = _ranked_job(tmp_path / "job", {0: SyntheticSpec(**small, onset=80, seed=1),
                                         1: SyntheticSpec(**small, seed=2),
                                         2: SyntheticSpec(**small, onset=60, seed=3)})
    multi = analyze_ranks(job)
    assert (multi.origin.rank, multi.origin.by) == (2, "onset")
    assert abs(multi.origin.step - 60) <= 2
    assert [s.rank for s in multi.spread] == [2, 0]
    assert multi.warnings == ["the job had 4 ranks but 1 left no directory (ranks 3)"]


def test_an_unreadable_rank_is_a_row_not_a_failure(tmp_path, capsys):
    job = _ranked_job(tmp_path / "job", {0: SyntheticSpec(steps=80, tensors=11, seed=4),
                                         1: SyntheticSpec(steps=80, tensors=11, onset=40, nan_at=50, seed=5),
                                         2: None})
    multi = analyze_ranks(job)
    assert multi.origin.rank == 1 and multi.origin.step == 50
    assert multi.ranks[2].analysis is None and "no readable stats or scalars" in multi.ranks[2].error
    assert any(w.startswith("rank 2 could not be analysed") for w in multi.warnings)
    assert cli.main(["analyze", str(job), "--json", str(tmp_path / "j.json")]) == 0
    assert json.loads((tmp_path / "j.json").read_text())["ranks"][2]["verdict"] is None
    shutil.rmtree(job / "rank-00000")
    shutil.rmtree(job / "rank-00001")
    assert cli.main(["analyze", str(job)]) == 2
    assert "no rank of" in capsys.readouterr().err


def test_ranks_that_went_bad_alike_are_named_as_tied(tmp_path):
    same = SyntheticSpec(steps=80, tensors=11, onset=40, nan_at=50)
    job = _ranked_job(tmp_path / "job", {0: same, 1: same, 2: SyntheticSpec(steps=80, tensors=11, seed=6)})
    multi = analyze_ranks(job)
    assert (multi.origin.rank, multi.origin.step, multi.origin.tied) == (0, 50, (1,))
    assert "ranks 1 could not be told apart" not in origin_sentence(multi)
    assert "(rank 1 could not be told apart from it)" in origin_sentence(multi)
    assert "Rank 2 stayed finite." in spread_sentence(multi)
