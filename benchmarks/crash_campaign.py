"""Crash campaign: kill recorded training runs in every way a job dies, then read what is left.

A small MLP is trained in a child process with the Recorder (small flush interval). After
each `rec.step()` the child reports the step it reached through a pipe, so the parent knows how
far training got even when the child dies without a word. Each trial ends one way:

- `kill`       SIGKILL once the child reports a seeded random step (plus a random sub-step delay,
               so kills also land inside a flush);
- `term`       SIGTERM from the parent at a random step (the recorder's handler flushes and
               writes the status); it may land anywhere, inside a flush too;
- `term_self`  the child SIGTERMs itself between two steps (deterministic: outside any flush);
- `term_in_flush`  SIGTERM delivered while the recorder is writing a segment (the child signals
               itself from inside the Parquet write of the first flush after `stop_at`);
- `exception`  the training loop raises at a random step;
- `complete`   the loop finishes (the control);
- `sparse`     the model holds a sparse buffer (as graph models do) and the loop raises at a
               random step: checkpoints and the flight ring must leave the buffer out, name it
               in the manifest and keep every step;
- `race`       two children enter a Recorder on the same directory at once (two ranks started
               together): one must be refused, and every row on disk must come from the other.

A killed run must also load without warnings: crash damage is expected of other things, not of
the recorder's own files.

Then every segment is read back with plain pyarrow, the steps on disk are compared with the
step the child reported, the manifest status is checked, and `postmortem.load_run` /
`postmortem.analyze` must not raise. Children are forked from a forkserver that has imported
torch once, so a trial costs its training, not an interpreter start.

    .venv/bin/python benchmarks/crash_campaign.py                 # 20 kills + term + exception
    .venv/bin/python benchmarks/crash_campaign.py --write-docs    # also update docs/benchmarks.md

It also runs the hostile-input suites (`HOSTILE_SUITES`, under pytest) and counts the fixed
cases and generated examples they try and how many are handled.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

MODES = ("kill", "term", "term_self", "term_in_flush", "exception", "complete", "sparse", "race")
EXPECTED_STATUS = {"kill": "running", "term": "terminated", "term_self": "terminated",
                   "term_in_flush": "terminated", "exception": "exception",
                   "complete": "completed", "sparse": "exception", "race": "completed"}
_SPARSE_BUFFER = "model.buffer.adj"
_TABLES = ("stats", "scalars", "events")
_DOCS_SECTION = "## Crash campaign"
_ROOT = Path(__file__).resolve().parent.parent
# Hostile inputs to the recorder, the loader and the command line, one test each (issue 13's
# nineteen are test_hostile_inputs.py), plus generated names, floods and damaged runs.
HOSTILE_SUITES = ("tests/reliability/test_hostile_inputs.py",
                  "tests/reliability/test_hostile_names.py",
                  "tests/reliability/test_hostile_runs.py")


@dataclass(frozen=True)
class Trial:
    mode: str
    stop_at: int  # kill/term: signal once the child reports this step; exception: raise here
    delay: float = 0.0  # seconds between seeing `stop_at` and signalling


@dataclass
class Outcome:
    trial: Trial
    flush_every: int
    exitcode: int | None
    reported_step: int | None  # last step the child said rec.step() returned
    recorded_step: int | None  # last step present in both stats and scalars on disk
    status: str | None
    segments: int
    unreadable: list[str] = field(default_factory=list)
    checkpoint_reasons: list[str] = field(default_factory=list)
    missing_steps: list[int] = field(default_factory=list)  # gaps below recorded_step
    load_warnings: list[str] = field(default_factory=list)
    verdict: str | None = None
    analyzer_error: str | None = None
    checkpoint_skipped: list[str] = field(default_factory=list)  # the manifest's
    refused: int | None = None  # race: recorders refused the directory
    writers: list[int] = field(default_factory=list)  # race: ranks whose rows are on disk
    refusals: list[str] = field(default_factory=list)  # race: the errors the refused got

    @property
    def lost(self) -> int | None:
        """Steps the child completed that are not on disk (may be -1: it died before reporting)."""
        if self.reported_step is None:
            return None
        return self.reported_step - (-1 if self.recorded_step is None else self.recorded_step)

    def problems(self) -> list[str]:
        """Every way this trial breaks the recorder's or analyzer's promises (empty = fine)."""
        out = [f"unreadable segment {p}" for p in self.unreadable]
        if self.missing_steps:
            out.append(f"steps missing on disk below the last recorded one: {self.missing_steps[:5]}")
        lost = self.lost
        if lost is None:
            out.append("child reported no step")
        elif lost > self.flush_every:
            out.append(f"lost {lost} steps > flush interval {self.flush_every}")
        elif self.trial.mode != "kill" and lost > 0:
            out.append(f"lost {lost} steps although the recorder could flush at exit")
        if self.recorded_step is not None and self.reported_step is not None \
                and self.recorded_step > self.reported_step + 1:
            out.append("more steps on disk than the child ran")
        if self.trial.mode in ("exception", "sparse") and "exception" not in self.checkpoint_reasons:
            out.append("no flight-recorder checkpoint written for the exception")
        if self.trial.mode == "sparse" and self.checkpoint_skipped != [_SPARSE_BUFFER]:
            out.append(f"checkpoint_skipped is {self.checkpoint_skipped}, not [{_SPARSE_BUFFER!r}]")
        if self.trial.mode == "race":
            if self.refused != 1:
                out.append(f"{self.refused} recorders refused the shared directory, expected 1")
            unclear = [m for m in self.refusals if "in use by" not in m]
            if unclear:
                out.append(f"refused without saying the directory is in use: {unclear[0]}")
            if len(self.writers) != 1:
                out.append(f"rows on disk from ranks {self.writers}: two runs interleaved")
        expected = EXPECTED_STATUS[self.trial.mode]
        if self.status != expected:
            out.append(f"status {self.status!r}, expected {expected!r}")
        if self.analyzer_error is not None:
            out.append(f"analyzer raised {self.analyzer_error}")
        out += [f"load warning: {w}" for w in self.load_warnings]
        return out


def train_child(run_dir: str, trial: Trial, flush_every: int, steps: int, conn) -> None:
    """The training job under test (runs in the child process)."""
    import torch
    from torch import nn

    from recorders import Recorder

    sys.stderr = open(os.devnull, "w")  # the injected exception's traceback is in the manifest
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if trial.mode == "sparse":
        model.register_buffer("adj", torch.eye(4).to_sparse())
    inputs, targets = torch.randn(64, 8, 16), torch.randn(64, 8, 4)
    with Recorder(run_dir, model, optimizer, flush_every=flush_every, checkpoint_every=100) as rec:
        if trial.mode == "term_in_flush":
            _signal_inside_writes(rec, trial.stop_at)
        for i in range(steps):
            if trial.mode in ("exception", "sparse") and i == trial.stop_at:
                raise RuntimeError(f"injected failure at step {i}")
            optimizer.zero_grad()
            x, y = inputs[i % len(inputs)], targets[i % len(targets)]
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            conn.send(rec.step(loss=loss, inputs=x, targets=y))
            if trial.mode == "term_self" and i == trial.stop_at:
                os.kill(os.getpid(), signal.SIGTERM)


def race_child(run_dir: str, rank: int, barrier, flush_every: int, steps: int, conn) -> None:
    """One of two ranks entering a Recorder on the same directory at the same moment."""
    import torch
    from torch import nn

    from recorders import Recorder, RunDirectoryError

    torch.set_num_threads(1)
    torch.manual_seed(rank)
    model = nn.Linear(16, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    recorder = Recorder(run_dir, model, optimizer, flush_every=flush_every)  # both see it empty
    barrier.wait()
    with contextlib.ExitStack() as stack:
        try:
            rec = stack.enter_context(recorder)
        except RunDirectoryError as exc:
            conn.send(("refused", str(exc)))
            return
        for _ in range(steps):
            optimizer.zero_grad()
            loss = model(torch.randn(8, 16)).square().mean()
            loss.backward()
            optimizer.step()
            last = rec.step(loss=loss, rank=rank)
    conn.send(("done", last))


def _signal_inside_writes(rec, after_step: int) -> None:
    """Make the child SIGTERM itself from inside a segment write (a flush) after `after_step`."""
    import recorders.writer

    write = recorders.writer.atomic_write_parquet

    def interrupted(path, table, *args, **kwargs):
        if rec.current_step > after_step and path.parent.name == "stats":
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode, mid-write
        return write(path, table, *args, **kwargs)

    recorders.writer.atomic_write_parquet = interrupted


def _context() -> mp.context.BaseContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "recorders", __name__])
    return ctx


def run_race(run_dir: Path, trial: Trial, *, flush_every: int, steps: int,
             timeout: float = 120.0) -> Outcome:
    """Two ranks race for one directory; then inspect what is on disk."""
    ctx = _context()
    barrier = ctx.Barrier(2)
    receiver, sender = ctx.Pipe(duplex=False)
    children = [ctx.Process(target=race_child, args=(str(run_dir), rank, barrier, flush_every,
                                                     steps, sender)) for rank in (0, 1)]
    for child in children:
        child.start()
    sender.close()
    messages = []
    while len(messages) < 2 and receiver.poll(timeout):
        try:
            messages.append(receiver.recv())
        except EOFError:
            break
    for child in children:
        child.join(timeout)
    receiver.close()
    done = [value for kind, value in messages if kind == "done"]
    outcome = inspect_run(run_dir, trial, flush_every=flush_every,
                          exitcode=max((c.exitcode or 0 for c in children), key=abs),
                          reported_step=done[0] if len(done) == 1 else None)
    outcome.refused = sum(kind == "refused" for kind, _ in messages)
    outcome.refusals = [message for kind, message in messages if kind == "refused"]
    try:
        ranks = pq.read_table(run_dir / "scalars", filters=[("name", "=", "rank")])
        outcome.writers = sorted({int(v) for v in ranks.column("value").to_pylist()})
    except Exception as exc:  # noqa: BLE001 - the campaign records, the caller judges
        outcome.analyzer_error = f"reading the ranks: {type(exc).__name__}: {exc}"
    return outcome


def run_trial(run_dir: Path, trial: Trial, *, flush_every: int, steps: int,
              timeout: float = 120.0) -> Outcome:
    """Run one child to its end, then inspect what it left in `run_dir`."""
    if trial.mode == "race":
        return run_race(run_dir, trial, flush_every=flush_every, steps=steps, timeout=timeout)
    ctx = _context()
    receiver, sender = ctx.Pipe(duplex=False)
    if trial.mode in ("kill", "term"):
        steps = trial.stop_at + 100_000  # never done before the signal, however slow the parent
    child = ctx.Process(target=train_child, args=(str(run_dir), trial, flush_every, steps, sender))
    child.start()
    sender.close()
    reported = None
    deadline = time.monotonic() + timeout
    signalled = False
    while time.monotonic() < deadline:
        if not receiver.poll(0.5):
            if not child.is_alive() and not receiver.poll(0):
                break
            continue
        try:
            reported = receiver.recv()
        except EOFError:
            break
        if not signalled and trial.mode in ("kill", "term") and reported >= trial.stop_at:
            time.sleep(trial.delay)
            os.kill(child.pid, signal.SIGKILL if trial.mode == "kill" else signal.SIGTERM)
            signalled = True
    else:
        child.kill()
    child.join(timeout)
    while True:  # steps sent before the child died are still in the pipe
        try:
            if not receiver.poll(0):
                break
            reported = receiver.recv()
        except EOFError:
            break
    receiver.close()
    return inspect_run(run_dir, trial, flush_every=flush_every, exitcode=child.exitcode,
                       reported_step=reported)


def inspect_run(run_dir: Path, trial: Trial, *, flush_every: int, exitcode: int | None,
                reported_step: int | None) -> Outcome:
    """Read every closed segment with plain pyarrow, then load and analyse with postmortem."""
    import postmortem

    unreadable, segments = [], 0
    steps: dict[str, set[int]] = {"stats": set(), "scalars": set()}
    for table in _TABLES:
        for path in sorted((run_dir / table).glob("part-*.parquet")):
            segments += 1
            try:
                read = pq.read_table(path)
            except Exception as exc:  # noqa: BLE001 - any failure to read is the finding
                unreadable.append(f"{path.name} ({type(exc).__name__}: {exc})")
                continue
            if table in steps:
                steps[table].update(read.column("step").to_pylist())
    reasons = []
    for path in sorted((run_dir / "checkpoints").glob("[!.]*.parquet")):
        segments += 1
        try:
            pq.read_table(path)
            reasons.append((pq.read_metadata(path).metadata or {}).get(b"reason", b"").decode())
        except Exception as exc:  # noqa: BLE001
            unreadable.append(f"{path.name} ({type(exc).__name__}: {exc})")
    recorded = min((max(s) for s in steps.values() if s), default=None) \
        if all(steps.values()) else None
    missing = [] if recorded is None else sorted(set(range(recorded + 1)) - steps["stats"])
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        status = manifest.get("status")
        skipped = sorted(manifest.get("checkpoint_skipped") or {})
    except (OSError, ValueError) as exc:
        status, skipped = f"unreadable manifest: {exc}", []
    outcome = Outcome(trial=trial, flush_every=flush_every, exitcode=exitcode,
                      reported_step=reported_step, recorded_step=recorded, status=status,
                      segments=segments, unreadable=unreadable, checkpoint_reasons=reasons,
                      missing_steps=missing, checkpoint_skipped=skipped)
    try:
        run = postmortem.load_run(run_dir)
        outcome.verdict = postmortem.analyze(run).verdict
        outcome.load_warnings = list(run.warnings)
    except Exception as exc:  # noqa: BLE001 - the campaign records, the caller judges
        outcome.analyzer_error = f"{type(exc).__name__}: {exc}"
    return outcome


def plan(*, kills: int, seed: int, steps: int, flush_every: int, step_seconds: float = 0.005
         ) -> list[Trial]:
    """Seeded trials: `kills` SIGKILLs at random steps, one of each other ending."""
    rng = random.Random(seed)
    kill_steps = sorted(rng.sample(range(1, steps - 1), kills))
    trials = [Trial("kill", s, rng.uniform(0, step_seconds)) for s in kill_steps]
    trials.append(Trial("term", rng.randrange(flush_every, steps - 1)))
    trials.append(Trial("term_self", rng.randrange(flush_every, steps - 1)))
    trials.append(Trial("term_in_flush", rng.randrange(flush_every, steps - flush_every - 1)))
    trials.append(Trial("exception", rng.randrange(flush_every, steps - 1)))
    trials.append(Trial("complete", steps))
    trials.append(Trial("sparse", rng.randrange(flush_every, steps - 1)))
    trials.append(Trial("race", steps))
    return trials


def run_campaign(trials: list[Trial], workdir: Path, *, flush_every: int, steps: int
                 ) -> list[Outcome]:
    return [run_trial(workdir / f"{i:02d}-{t.mode}-{t.stop_at}", t, flush_every=flush_every,
                      steps=steps) for i, t in enumerate(trials)]


@dataclass
class HostileCount:
    cases: int  # pytest test cases (each parametrized case counts once)
    failed: int
    examples: int  # inputs hypothesis generated inside the generated cases
    failing_examples: int


def hostile_inputs() -> HostileCount:
    """Run the hostile-input suites under pytest; count what they try and what fails."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--hypothesis-show-statistics", f"--junitxml={report}", *HOSTILE_SUITES],
            cwd=_ROOT, capture_output=True, text=True, env={**os.environ, "CI": "true"})
        suites = ET.parse(report).getroot().iter("testsuite")
        totals = [(int(x.get("tests")), int(x.get("failures")) + int(x.get("errors")))
                  for x in suites]
    examples = [tuple(map(int, m)) for m in re.findall(
        r"(\d+) passing, (\d+) failing, and \d+ invalid test cases", done.stdout)]
    return HostileCount(cases=sum(t for t, _ in totals), failed=sum(f for _, f in totals),
                        examples=sum(p + f for p, f in examples),
                        failing_examples=sum(f for _, f in examples))


def summary_markdown(outcomes: list[Outcome], *, flush_every: int, steps: int, seed: int,
                     seconds: float, hostile: HostileCount | None = None) -> str:
    lines = [
        _DOCS_SECTION,
        "",
        f"Measured by `benchmarks/crash_campaign.py` (seed {seed}): a 2-layer MLP trained for up "
        f"to {steps} steps in a child process with `Recorder(flush_every={flush_every})`, ended "
        "by SIGKILL at random steps (with a random sub-step delay, so some kills land inside a "
        "flush), by SIGTERM and by an exception raised in the training loop. Steps lost = last "
        "step the child reported reaching − last step present on disk in both `stats` and "
        "`scalars`. `term` is a SIGTERM from the parent at a random step, `term_self` one the "
        "child sends itself between two steps, `term_in_flush` one delivered inside a segment "
        "write. `sparse`: the model holds a sparse buffer (`torch.eye(4).to_sparse()`, as graph "
        "models do) and the loop raises; the buffer must be left out of every checkpoint, named "
        "in the manifest's `checkpoint_skipped`, and no step lost. `race`: two children enter a "
        "`Recorder` on one directory at the same moment (a barrier); exactly one must be refused "
        "with an error saying the directory is in use, and every row on disk must come from the "
        f"other. Wall time of the whole campaign: {seconds:.0f} s.",
        "",
        "| ending | trials | steps lost (max) | bound | statuses | unreadable files "
        "| load warnings | analyzer errors | verdicts |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for mode in MODES:
        group = [o for o in outcomes if o.trial.mode == mode]
        if not group:
            continue
        lost = max((o.lost for o in group if o.lost is not None), default=None)
        bound = flush_every if mode == "kill" else 0  # a SIGTERM or an exception can flush
        statuses = ", ".join(f"{s} ×{n}" for s, n in Counter(o.status for o in group).items())
        verdicts = ", ".join(f"{v} ×{n}" for v, n in Counter(o.verdict for o in group).items())
        lines.append(f"| {mode} | {len(group)} | {lost} | {bound} | {statuses} "
                     f"| {sum(len(o.unreadable) for o in group)} "
                     f"| {sum(len(o.load_warnings) for o in group)} "
                     f"| {sum(o.analyzer_error is not None for o in group)} | {verdicts} |")
    kills = [o for o in outcomes if o.trial.mode == "kill"]
    if kills:
        lost = Counter(o.lost for o in kills)
        lines += ["", "Steps lost per SIGKILL (steps lost: kills): "
                  + ", ".join(f"{k}: {lost[k]}" for k in sorted(lost, key=lambda v: (v is None, v)))
                  + f"; files (segments and checkpoints) per killed run: "
                  f"{min(o.segments for o in kills)}–{max(o.segments for o in kills)}."]
    failed = [(o, p) for o in outcomes for p in o.problems()]
    lines += ["", "Problems found: " + ("none." if not failed else "; ".join(
        f"{o.trial.mode}@{o.trial.stop_at}: {p}" for o, p in failed))]
    if hostile is not None:
        hostile_trials = [o for o in outcomes if o.trial.mode in ("sparse", "race")]
        handled = hostile.cases - hostile.failed + sum(not o.problems() for o in hostile_trials)
        lines += ["", f"Hostile inputs (the suites {', '.join(f'`{s}`' for s in HOSTILE_SUITES)}, "
                  f"run by this script under pytest): {hostile.cases} fixed and generated test "
                  f"cases, {hostile.cases - hostile.failed} handled, {hostile.failed} not; inside "
                  f"the generated ones hypothesis tried {hostile.examples} inputs (names with lone "
                  "surrogates, backtick runs, control and bidi characters, event floods, damaged "
                  f"runs), {hostile.failing_examples} of them failing. With the `sparse` and "
                  f"`race` trials: {hostile.cases + len(hostile_trials)} hostile cases tried, "
                  f"{handled} handled."]
    return "\n".join(lines) + "\n"


def write_docs_section(docs: Path, section: str) -> None:
    """Replace only this benchmark's generated part of the `## Crash campaign` section.

    The shared file is re-read right before writing; other sections, and the hand-written
    `### ` subsections of this one (the long-run figures), are kept as they are.
    """
    text = docs.read_text() if docs.exists() else "# Benchmarks\n"
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == _DOCS_SECTION), None)
    if start is None:
        docs.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    kept = next((i for i in range(start + 1, end) if lines[i].startswith("### ")), end)
    docs.write_text("".join(lines[:start]) + section + "\n" + "".join(lines[kept:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--flush-every", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--write-docs", action="store_true",
                        help="replace the '## Crash campaign' section of docs/benchmarks.md")
    parser.add_argument("--no-hostile", action="store_true",
                        help="skip the hostile-input suites (about two minutes)")
    args = parser.parse_args()
    start = time.perf_counter()
    trials = plan(kills=args.kills, seed=args.seed, steps=args.steps, flush_every=args.flush_every)
    with tempfile.TemporaryDirectory(prefix="crash_campaign_") as tmp:
        outcomes = run_campaign(trials, Path(tmp), flush_every=args.flush_every, steps=args.steps)
    seconds = time.perf_counter() - start
    hostile = None if args.no_hostile else hostile_inputs()
    for o in outcomes:
        print(f"{o.trial.mode:9} stop_at={o.trial.stop_at:4} exit={o.exitcode} "
              f"reported={o.reported_step} recorded={o.recorded_step} lost={o.lost} "
              f"status={o.status} verdict={o.verdict} problems={o.problems()}")
    section = summary_markdown(outcomes, flush_every=args.flush_every, steps=args.steps,
                               seed=args.seed, seconds=seconds, hostile=hostile)
    print("\n" + section)
    if args.write_docs:
        write_docs_section(Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md",
                           section)
    sys.exit(1 if any(o.problems() for o in outcomes) or (hostile and hostile.failed) else 0)


if __name__ == "__main__":
    # Children are forked from a forkserver that imports this module by name, not as __main__;
    # the checkout goes first on the path so the packages are found without an install.
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
    import crash_campaign

    crash_campaign.main()
