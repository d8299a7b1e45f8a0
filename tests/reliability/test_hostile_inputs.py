"""Hostile inputs to the recorder and the command line (issue 13): each one once crashed
training, lost a run, injected into Markdown or stalled `analyze`. One test per input."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import warnings
from collections import OrderedDict
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from markdown_it import MarkdownIt
from torch import nn

import postmortem
from postmortem_cli.cli import main
from recorders import Recorder
from recorders.errors import RecorderMeasureError, RecorderWarning, RunDirectoryError
from reliability_cases import copy_run, load_manifest, time_limit, write_manifest
from reports import build_page, render_html, render_markdown
from reports.markdown import _md, _spans

CASE_SECONDS = 60


def read_table(run_dir: Path, table: str) -> pd.DataFrame:
    files = sorted((run_dir / table).glob("part-*.parquet"))
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return frame.astype({c: object for c in frame.columns
                         if isinstance(frame[c].dtype, pd.CategoricalDtype)})


def train(rec: Recorder, model: nn.Module, optimizer, steps: int, **scalars) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        x = torch.randn(8, 4)
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
        rec.step(loss=loss, inputs=x, **scalars)


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@contextlib.contextmanager
def recording(run_dir: Path, model: nn.Module, optimizer=None, **options):
    """A Recorder block, and the list of warnings given while it ran."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(run_dir, model, optimizer, **options) as rec:
            yield rec, caught


def recorder_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RecorderWarning)]


# --------------------------------------------------------------------- 1. sparse buffers
class GraphNet(nn.Module):
    """A graph layer holding its adjacency matrix as a sparse buffer, as GNN code does."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("adj", torch.eye(4).to_sparse())

    def forward(self, x):
        return torch.sparse.mm(self.adj, self.lin(x).T).T


@pytest.mark.parametrize("ending", ["completed", "exception"])
def test_sparse_buffer_is_left_out_of_checkpoints_with_one_warning(tmp_path, ending):
    model = GraphNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(KeyError):
            with Recorder(tmp_path, model, optimizer, checkpoint_every=2, flight_ring=2,
                          flight_every=1) as rec:
                train(rec, model, optimizer, 5)
                if ending == "exception":
                    raise KeyError("boom")
    manifest = load_manifest(tmp_path)
    assert manifest["status"] == ending and manifest["last_step"] == 4
    assert list(manifest["checkpoint_skipped"]) == ["model.buffer.adj"]
    assert len(recorder_warnings(caught)) == 1
    files = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.parquet"))
    assert "step-00000004.parquet" in files
    if ending == "exception":
        assert any(f.startswith("flight-") for f in files)
    for name in files:
        stored = pq.read_table(tmp_path / "checkpoints" / name).to_pydict()
        assert "adj" not in stored["name"] and "lin.weight" in stored["name"]
    assert sorted(set(read_table(tmp_path, "stats")["step"])) == [0, 1, 2, 3, 4]
    analysis = postmortem.analyze(tmp_path)
    assert any("checkpoints leave out model.buffer.adj" in w for w in analysis.warnings)


def test_sparse_buffer_raises_under_strict(tmp_path):
    model = GraphNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(RecorderMeasureError, match="adj"):
        with Recorder(tmp_path, model, optimizer, checkpoint_every=1, strict=True) as rec:
            train(rec, model, optimizer, 1)


# --------------------------------------------------------------------- 2. lone surrogates
def test_lone_surrogates_in_names_are_recorded_visibly(tmp_path):
    model = nn.Sequential(OrderedDict([("l\udcff", nn.Linear(4, 2))]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with recording(tmp_path / "run", model, optimizer, flush_every=2) as (rec, caught):
        rec.event("data", os.fsdecode(b"data/\xff.bin"))
        rec.event("k\ud800ind", "fine")
        train(rec, model, optimizer, 5, **{"acc\udcff": 0.5})
    assert recorder_warnings(caught) == []
    run = tmp_path / "run"
    assert load_manifest(run)["status"] == "completed"
    stats, scalars, events = (read_table(run, t) for t in ("stats", "scalars", "events"))
    assert sorted(set(stats["step"])) == [0, 1, 2, 3, 4]
    assert "l\\udcff.weight" in set(stats["name"])
    assert (scalars["name"] == "acc\\udcff").sum() == 5
    assert list(events["message"]) == ["data/\\udcff.bin", "fine"]
    assert list(events["kind"]) == ["data", "k\\ud800ind"]
    modules = load_manifest(run)["models"]["model"]["modules"]
    assert modules[0]["name"] == "l\\udcff"
    analysis = postmortem.analyze(run)
    render_html(build_page(analysis))
    render_markdown(analysis).encode()


def test_a_segment_that_cannot_be_built_degrades_recording_with_one_warning(tmp_path, monkeypatch):
    import recorders.writer

    def broken(rows):
        raise RuntimeError("cannot build")
    monkeypatch.setattr(recorders.writer, "events_table", broken)
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with recording(tmp_path, model, optimizer, flush_every=2) as (rec, caught):
        for _ in range(3):
            rec.event("tick")
            train(rec, model, optimizer, 2)
    assert len(recorder_warnings(caught)) == 1
    manifest = load_manifest(tmp_path)
    assert manifest["status"] == "completed" and manifest["failed_writes"] == 3
    assert sorted(set(read_table(tmp_path, "scalars")["step"])) == list(range(6))


# --------------------------------------------------------------------- 3. Markdown injection
BACKTICK_NAMES = ("``![x](http://1249763329/x)`z`", "``<img src=//1249763329/y>`z`",
                  "`a` `` ![i](//h/i) ``", "```<b>bold</b>```", "a|b`|`c")


def _rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def text_of(html: str) -> str:
    """What a reader sees of rendered HTML: the text without tags, whitespace collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]*>", "", html)).split())


@pytest.mark.parametrize("name", BACKTICK_NAMES)
def test_backtick_runs_in_a_name_inject_nothing_into_markdown(name):
    """Names reach the Markdown inside the report's own backticks (`fc1.weight` grew first)."""
    sentence = f"the gradient of `{name}` grew first"
    for markdown in (f"1. {_md(sentence)}", f"| {_md(sentence, in_table=True)} | x |\n|---|---|"):
        html = _rendered(markdown)
        assert "<img" not in html and "<b>" not in html and "<a " not in html, html
        assert set(re.findall(r"<(\w+)", html)) <= {"ol", "li", "p", "code", "table", "thead",
                                                   "tr", "th"}, html
        shown = "".join(part for _, part in _spans(sentence))  # backticks that pair are fences
        assert text_of(html).startswith(" ".join(shown.split()))


def test_backtick_runs_in_a_run_name_inject_nothing(tiny_run, tmp_path):
    run_dir = copy_run(tiny_run, tmp_path / "``<img src=_1249763329_y>`z` ``[a](b)``")
    html = _rendered(render_markdown(postmortem.analyze(run_dir)))
    assert "<img" not in html and "<a " not in html
    assert "&lt;img src=_1249763329_y&gt;" in html.split("</h3>")[0]  # shown, as text


# --------------------------------------------------------------------- 4. event floods
def test_analyze_with_100000_events_draws_a_bounded_number_of_markers(tiny_run, tmp_path,
                                                                        monkeypatch):
    from matplotlib.axes import Axes

    run_dir = copy_run(tiny_run, tmp_path / "run")
    n = 100_000  # lr_drop on 12 steps (drawn, a line per step), batch_loaded on 50 (too many)
    steps = np.where(np.arange(n) % 2, np.arange(n) % 24, np.arange(n) % 100)
    pq.write_table(pa.table({"step": pa.array(steps, pa.int64()),
                             "kind": pa.array(["batch_loaded", "lr_drop"] * (n // 2)),
                             "message": pa.array([f"batch {i}" for i in range(n)]),
                             "wall_time": pa.array(1.7e9 + np.arange(n) / 7)}),
                   run_dir / "events" / "part-000100.parquet", compression="none")
    lines: dict[int, int] = {}  # axes -> lines drawn on it
    draw = Axes.axvline

    def counted(ax, *args, **kwargs):
        lines[id(ax)] = lines.get(id(ax), 0) + 1
        return draw(ax, *args, **kwargs)
    monkeypatch.setattr(Axes, "axvline", counted)
    with time_limit(CASE_SECONDS):
        analysis = postmortem.analyze(run_dir)
        assert len(analysis.run.events()) == n + 1
        page = build_page(analysis)
    assert lines and max(lines.values()) <= 40 + 2  # events, onset and first non-finite
    assert min(lines.values()) >= 12 + 1  # lr_drop's steps and the run's own domain_switch
    html = render_html(page)
    assert "Events too many to draw: batch_loaded (50000 events)." in html


# --------------------------------------------------------------------- 5. two recorders
def test_second_recorder_on_a_directory_in_use_is_refused(tmp_path):
    m1, m2 = mlp(), mlp()
    first, second = Recorder(tmp_path, m1), Recorder(tmp_path, m2)  # both see it empty
    with first:
        with pytest.raises(RunDirectoryError, match="in use by process"):
            second.__enter__()
        first.step(loss=1.0)
    assert not (tmp_path / ".recorder.lock").exists()
    with pytest.raises(RunDirectoryError, match="not empty"):
        second.__enter__()  # the first run is there now: still not overwritten
    assert not (tmp_path / ".recorder.lock").exists()
    assert set(read_table(tmp_path, "scalars")["value"]) >= {1.0}


@pytest.mark.parametrize("left", ["dead pid", "unreadable and old"])
def test_a_lock_left_by_a_dead_process_does_not_block(tmp_path, left):
    lock = tmp_path / ".recorder.lock"
    if left == "dead pid":
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    else:
        lock.write_text("")
        os.utime(lock, (0, 0))
    with Recorder(tmp_path, mlp()) as rec:
        rec.step(loss=1.0)
    assert load_manifest(tmp_path)["status"] == "completed" and not lock.exists()


def test_a_lock_held_by_a_live_process_blocks(tmp_path):
    tmp_path.joinpath(".recorder.lock").write_text(json.dumps(
        {"pid": os.getppid(), "host": socket.gethostname()}))
    with pytest.raises(RunDirectoryError, match=f"process {os.getppid()}"):
        Recorder(tmp_path, mlp()).__enter__()


# --------------------------------------------------------------------- 6. reserved names
def test_user_scalar_named_like_a_recorder_scalar_is_kept_apart(tmp_path):
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with recording(tmp_path, model, optimizer) as (rec, caught):
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(8, 4)).square().mean().backward()
            clipped = nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            optimizer.step()
            rec.step(loss=1.0, grad_norm=clipped, lr=123.0, scaler_skipped=1)
    scalars = read_table(tmp_path, "scalars")
    values = scalars.groupby("name")["value"].count()
    assert values["grad_norm"] == values["user.grad_norm"] == 3
    assert values["user.scaler_skipped"] == 3 and "scaler_skipped" not in values
    # `lr` is not reserved: the loop's own lr= is the run's lr (a loop without an optimizer).
    assert "user.lr" not in values and values["lr"] == 3
    assert (scalars.loc[scalars["name"] == "lr", "value"] == 123.0).all()
    assert len([w for w in recorder_warnings(caught) if "reserved" in w]) == 1


# --------------------------------------------------------------------- 7. an exception's str
class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


def test_exception_whose_str_raises_still_ends_the_run(tmp_path):
    with pytest.raises(Unprintable):
        with Recorder(tmp_path, mlp()) as rec:
            rec.step(loss=1.0)
            raise Unprintable()
    manifest = load_manifest(tmp_path)
    assert manifest["status"] == "exception" and manifest["ended_at"]
    assert manifest["exception"]["type"] == "Unprintable"
    assert "str() raised RuntimeError" in manifest["exception"]["message"]


# --------------------------------------------------------------------- 8. checkpoint metadata
@pytest.mark.parametrize("meta", [{b"reason": b"\xff\xfe"}, {b"step": b"9" * 5000},
                                  {b"step": "٣".encode()}])
def test_bad_checkpoint_metadata_is_a_warning(tiny_run, tmp_path, meta):
    run_dir = copy_run(tiny_run, tmp_path / "run")
    path = sorted((run_dir / "checkpoints").glob("*.parquet"))[0]
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, **meta}), path)
    code, out, err = run_main(["analyze", str(run_dir), "-o", str(tmp_path / "r.html")])
    assert code == 0, err
    run = postmortem.load_run(run_dir)
    assert len(run.checkpoints) == 2  # of 3: the one with bad metadata is skipped
    assert any("skipped checkpoint" in w for w in run.warnings)
    assert "skipped checkpoint" in (tmp_path / "r.html").read_text()


# --------------------------------------------------------------------- 9. output paths
def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_output_symlink_is_written_through(tiny_run, tmp_path):
    target, link = tmp_path / "real.html", tmp_path / "link.html"
    target.write_text("old")
    link.symlink_to(target)
    json_target, json_link = tmp_path / "real.json", tmp_path / "link.json"
    json_link.symlink_to(json_target)  # dangling: the file it names is created
    code, _, err = run_main(["analyze", str(tiny_run), "-o", str(link), "--json", str(json_link)])
    assert code == 0, err
    assert link.is_symlink() and json_link.is_symlink()
    assert target.read_text().startswith("<!DOCTYPE html>")
    assert json.loads(json_target.read_text())["verdict"]


@pytest.mark.parametrize("option", ["-o", "--json", "--markdown"])
def test_dash_writes_to_stdout(tiny_run, tmp_path, option, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["analyze", str(tiny_run), option, "-"]
    if option != "-o":
        argv += ["-o", str(tmp_path / "r.html")]
    code, out, err = run_main(argv)
    assert code == 0, err
    assert not (tmp_path / "-").exists()
    if option == "--json":
        assert json.loads(out)["verdict"]
    elif option == "-o":
        assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    else:
        assert out.startswith("### postmortem:")


def test_two_outputs_to_stdout_are_refused(tiny_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["analyze", str(tiny_run), "-o", "-", "--json", "-"])
    assert code == 2 and "stdout" in err


# --------------------------------------------------------------------- 10. odd scalar values
def test_odd_scalar_values_never_raise(tmp_path):
    model = mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    with recording(tmp_path, model, optimizer) as (rec, caught):
        for _ in range(3):
            optimizer.zero_grad()
            per_sample = model(torch.randn(8, 4)).square().mean(dim=1)
            per_sample.mean().backward()
            # No optimizer.step(): the recorder reads the param groups as they are at
            # rec.step() (after a step, it would read the values that step used).
            betas = optimizer.param_groups[0]["betas"]
            optimizer.param_groups[0]["betas"] = ("a", "b")  # what the recorder reads
            rec.step(loss=per_sample, acc=np.array(2.0), note="text", n=np.int64(3))
            optimizer.param_groups[0]["betas"] = betas
    scalars = read_table(tmp_path, "scalars")
    values = scalars.groupby("name")["value"].count()
    assert values["loss"] == values["acc"] == values["n"] == 3 and "note" not in values
    assert set(scalars.loc[scalars["name"] == "acc", "value"]) == {2.0}
    assert "hp.optimizer.0.beta1" not in values
    messages = recorder_warnings(caught)
    assert len([m for m in messages if "mean" in m]) == 1
    assert load_manifest(tmp_path)["status"] == "completed"


@pytest.mark.parametrize("value, error", [(torch.ones(3), ValueError), ("high", TypeError)])
def test_odd_scalar_values_raise_under_strict(tmp_path, value, error):
    with pytest.raises(error):
        with Recorder(tmp_path, mlp(), strict=True) as rec:
            rec.step(loss=value)


# --------------------------------------------------------------------- 11. complex, shapes
def test_complex_parameters_are_measured_by_modulus(tmp_path):
    class Spectral(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor([3 + 4j, 0j, -1j], dtype=torch.complex64))

        def forward(self, x):
            return (x * self.w).abs().sum()

    model = Spectral()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)  # w stays put
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it drops an imaginary part
        with Recorder(tmp_path, model, optimizer, checkpoint_every=1) as rec:
            for _ in range(2):
                optimizer.zero_grad()
                loss = model(torch.ones(3))
                loss.backward()
                optimizer.step()
                rec.step(loss=loss, inputs=model.w.detach())
    stats = read_table(tmp_path, "stats")
    assert set(stats["role"]) >= {"param", "grad", "update", "state", "input"}
    row = stats[(stats["role"] == "param") & (stats["name"] == "w")].iloc[-1]
    assert row["norm"] == pytest.approx(np.sqrt(26))
    assert row["max_abs"] == pytest.approx(5) and row["mean"] == pytest.approx(2)  # of |z|


def test_manifest_shapes_are_cleaned_before_the_html(tiny_run, tmp_path):
    run_dir = copy_run(tiny_run, tmp_path / "run")
    manifest = load_manifest(run_dir)
    manifest["models"]["model"]["parameters"][0]["shape"] = ["\u202e4", "<b>8</b>\x1b[2J"]
    write_manifest(run_dir, manifest)
    html = render_html(build_page(postmortem.analyze(run_dir)))
    assert "\u202e" not in html and "\x1b" not in html and "<b>8" not in html


def test_a_flood_of_events_before_the_onset_gives_one_sentence_per_kind():
    from types import SimpleNamespace

    from postmortem.story import events_near

    n = 100_000
    events = pd.DataFrame({"step": np.arange(n) // 1000, "kind": ["batch_loaded"] * (n - 1) + ["lr_drop"],
                           "message": [""] * n})
    sentences = events_near(SimpleNamespace(onset=SimpleNamespace(step=99), events=events))
    assert len(sentences) == 2
    assert "3999 `batch_loaded` events from step 96 to the onset" in sentences[0] and "`lr_drop`" in sentences[1]


def test_dev_stdout_is_written_into_not_replaced(tiny_run, tmp_path):
    done = subprocess.run([sys.executable, "-m", "postmortem", "analyze", str(tiny_run),
                           "-o", "/dev/stdout", "--json", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!DOCTYPE html>") and os.path.islink("/dev/stdout")
    assert "Report: /dev/stdout" in done.stderr
