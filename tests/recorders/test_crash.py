"""Crash safety: SIGKILL loses at most one flush interval; SIGTERM and exit set the status."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recorder_helpers import read_manifest, read_table

ROOT = Path(__file__).resolve().parents[2]
FLUSH_EVERY = 5

TRAIN = textwrap.dedent("""
    import sys, time, torch
    from torch import nn
    from recorders import Recorder
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with Recorder(sys.argv[1], model, opt, flush_every={flush}, flush_seconds=3600) as rec:
        for step in range(100000):
            x = torch.randn(32, 8)
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            rec.step(loss=loss, inputs=x)
            print(step, flush=True)
            if step >= {stop_at}:
                time.sleep(60)
""")


def start(run_dir: Path, stop_at: int) -> subprocess.Popen:
    script = TRAIN.format(flush=FLUSH_EVERY, stop_at=stop_at)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", script, str(run_dir)], stdout=subprocess.PIPE,
                            text=True, env=env)


def wait_for_step(proc: subprocess.Popen, step: int) -> int:
    last = -1
    while last < step:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"training process ended early (rc={proc.wait()})")
        last = int(line)
    return last


def assert_every_file_readable(run_dir: Path):
    for path in run_dir.rglob("*.parquet"):
        if not path.name.startswith("."):
            pq.read_table(path)


def test_sigkill_loses_at_most_one_flush_interval(tmp_path):
    run = tmp_path / "run"
    proc = start(run, stop_at=10**9)
    last = wait_for_step(proc, 23)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert_every_file_readable(run)
    steps = read_table(run, "stats").step
    assert steps.max() >= last - FLUSH_EVERY
    assert sorted(steps.unique()) == list(range(steps.max() + 1))  # no hole
    assert read_manifest(run)["status"] == "running"


def test_sigterm_flushes_and_marks_the_run_terminated(tmp_path):
    run = tmp_path / "run"
    proc = start(run, stop_at=12)
    last = wait_for_step(proc, 12)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM  # the default action still happens
    assert_every_file_readable(run)
    assert read_table(run, "stats").step.max() == last  # nothing lost
    manifest = read_manifest(run)
    assert manifest["status"] == "terminated"
    assert manifest["exception"]["message"] == "SIGTERM"


def test_interpreter_exit_flushes_an_unclosed_recorder(tmp_path):
    script = textwrap.dedent("""
        import sys, torch
        from torch import nn
        from recorders import Recorder
        model = nn.Linear(3, 1)
        rec = Recorder(sys.argv[1], model).__enter__()   # never exited
        for _ in range(7):
            model(torch.randn(2, 3))
            rec.step()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "run")], env=env, check=True,
                   timeout=120)
    assert sorted(read_table(tmp_path / "run", "stats").step.unique()) == list(range(7))
    assert read_manifest(tmp_path / "run")["last_step"] == 6
