"""A full disk: training goes on, the recorder warns once, the analyzer shows the hole.

Two ways to fill the disk: an injected ENOSPC on every Parquet write for a window of steps
(always runs), and a real 256 KiB tmpfs (runs where this process may mount one, as root does).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

import postmortem
import recorders.writer
from recorders import Recorder, RecorderWarning

FLUSH_EVERY = 5
FULL_FROM, FULL_UNTIL = 10, 25  # steps during which every Parquet write fails


def train(run_dir: Path, steps: int, on_step=None) -> tuple[int, list[warnings.WarningMessage]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    done = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(run_dir, model, optimizer, flush_every=FLUSH_EVERY,
                      checkpoint_every=1000) as rec:
            for step in range(steps):
                if on_step is not None:
                    on_step(step)
                x, y = torch.randn(16, 4), torch.randn(16, 2)
                optimizer.zero_grad()
                loss = ((model(x) - y) ** 2).mean()
                loss.backward()
                optimizer.step()
                rec.step(loss=loss, inputs=x, targets=y)
                done += 1
    return done, [w for w in caught if issubclass(w.category, RecorderWarning)]


def stats_steps(run_dir: Path) -> set[int]:
    steps: set[int] = set()
    for path in sorted((run_dir / "stats").glob("part-*.parquet")):
        steps.update(pq.read_table(path, columns=["step"]).column("step").to_pylist())
    return steps


@pytest.fixture
def run_with_hole(tmp_path, monkeypatch) -> Path:
    """A 40-step run whose Parquet writes failed with ENOSPC during steps 10..24."""
    write = recorders.writer.atomic_write_parquet
    full = {"on": False}

    def failing_write(path, table, *args, **kwargs):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return write(path, table, *args, **kwargs)

    monkeypatch.setattr(recorders.writer, "atomic_write_parquet", failing_write)

    def disk(step):
        full["on"] = FULL_FROM <= step < FULL_UNTIL

    run_dir = tmp_path / "run"
    done, caught = train(run_dir, 40, on_step=disk)
    assert done == 40, "a write error stopped training"
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert "No space left" in str(caught[0].message)
    return run_dir


def test_write_errors_leave_training_running_and_warn_once(run_with_hole):
    manifest = json.loads((run_with_hole / "manifest.json").read_text())
    assert manifest["status"] == "completed"
    assert manifest["failed_writes"] >= 3
    steps = stats_steps(run_with_hole)
    assert set(range(FULL_FROM)) <= steps and set(range(FULL_UNTIL, 40)) <= steps
    assert not steps & set(range(FULL_FROM, FULL_UNTIL))  # the hole is where the disk was full
    analysis = postmortem.analyze(run_with_hole)  # and it does not stop the analysis
    assert analysis.verdict in ("healthy", "not_learning", "diverged")


def _mentions_hole(analysis: postmortem.Analysis) -> bool:
    texts = [*analysis.warnings, *(json.dumps(f.evidence, default=str) for f in analysis.findings)]
    words = ("missing", "gap", "hole", "failed write", "failed_writes")
    return any(word in text.lower() for text in texts for word in words)


def test_analyzer_reports_the_hole(run_with_hole):
    assert _mentions_hole(postmortem.analyze(run_with_hole))


@pytest.fixture
def tiny_disk(tmp_path) -> Path:
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
    try:
        # Leave only a little room, so the run fills the disk however compact its segments are.
        free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
        (mount / "ballast").write_bytes(b"\0" * max(0, free - 48 * 1024))
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_real_full_disk(tiny_disk):
    run_dir = tiny_disk / "run"
    done, caught = train(run_dir, 400)
    assert done == 400
    assert len(caught) == 1, [str(w.message) for w in caught]
    steps = stats_steps(run_dir)  # every closed segment on the full disk still reads
    assert steps and max(steps) < 399, "the disk never filled: make it smaller"
    assert not list((run_dir / "stats").glob(".*.tmp"))
    postmortem.analyze(run_dir)


def test_failed_manifest_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(recorders.writer.os, "fsync", no_space)
    with pytest.raises(OSError):
        recorders.writer.atomic_write_bytes(tmp_path / "manifest.json", b"{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
