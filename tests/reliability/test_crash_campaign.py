"""The crash campaign's fast subset: 3 SIGKILLs, a SIGTERM, an exception, a model with a sparse
buffer and two recorders racing for one directory, in real children.

The full campaign (20 kills) is benchmarks/crash_campaign.py; both share its code. A run that
completes is the control.
"""

from __future__ import annotations

import signal

import pytest

import crash_campaign
from crash_campaign import Outcome, Trial

FLUSH_EVERY, STEPS = 5, 60


def test_killed_terminated_failed_and_finished_runs_lose_at_most_one_flush(tmp_path):
    # An external SIGTERM lands at a random point, sometimes inside a flush (tested apart
    # below); here the child signals itself between two steps, which is repeatable.
    trials = [t for t in crash_campaign.plan(kills=3, seed=1, steps=STEPS, flush_every=FLUSH_EVERY)
              if t.mode not in ("term", "term_in_flush")]
    outcomes = crash_campaign.run_campaign(trials, tmp_path, flush_every=FLUSH_EVERY, steps=STEPS)

    assert [o.trial.mode for o in outcomes[-4:]] == ["exception", "complete", "sparse", "race"]
    assert [o.exitcode for o in outcomes] == [-signal.SIGKILL] * 3 + [-signal.SIGTERM, 1, 0, 1, 0]
    assert [o.status for o in outcomes] == ["running"] * 3 + ["terminated", "exception",
                                                               "completed", "exception",
                                                               "completed"]
    for outcome in outcomes:
        assert outcome.problems() == [], (outcome.trial, outcome.problems())
    for failed in (outcomes[-4], outcomes[-2]):  # every step before the raise
        assert failed.recorded_step == failed.trial.stop_at - 1
    race = outcomes[-1]
    assert race.refused == 1 and len(race.writers) == 1 and race.recorded_step == STEPS - 1


def test_sigterm_during_a_flush_loses_nothing(tmp_path):
    outcome = crash_campaign.run_trial(tmp_path / "run", Trial("term_in_flush", 20),
                                       flush_every=FLUSH_EVERY, steps=STEPS)
    assert outcome.exitcode == -signal.SIGTERM and outcome.status == "terminated"
    assert outcome.problems() == []


def test_campaign_checks_can_fail():
    """The judge itself: a loss beyond the flush interval, a bad segment, a wrong status."""
    outcome = Outcome(trial=Trial("kill", 40), flush_every=5, exitcode=-9, reported_step=40,
                      recorded_step=30, status="completed", segments=6,
                      unreadable=["part-000003.parquet (ArrowInvalid)"],
                      analyzer_error="ValueError: boom")
    outcome.load_warnings = ["skipped unreadable segment part-000003.parquet"]
    problems = " | ".join(outcome.problems())
    for expected in ("lost 10 steps", "unreadable segment", "status 'completed'", "ValueError",
                     "load warning"):
        assert expected in problems
    race = Outcome(trial=Trial("race", 60), flush_every=5, exitcode=0, reported_step=59,
                   recorded_step=59, status="completed", segments=6, refused=0, writers=[0, 1])
    assert "0 recorders refused" in " | ".join(race.problems())
    assert "two runs interleaved" in " | ".join(race.problems())
    sparse = Outcome(trial=Trial("sparse", 20), flush_every=5, exitcode=1, reported_step=19,
                     recorded_step=19, status="exception", segments=6,
                     checkpoint_reasons=["scheduled"])
    assert "checkpoint_skipped is []" in " | ".join(sparse.problems())
    assert "no flight-recorder checkpoint" in " | ".join(sparse.problems())
