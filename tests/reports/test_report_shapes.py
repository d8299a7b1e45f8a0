"""Crash-shaped and hostile run directories still get a report (never an exception)."""
import json
import shutil

import pytest

from report_runs import healthy_analysis, write_run
from reports import build_page, render_html, render_markdown, render_summary


def _drop(folder):
    return lambda run_dir: shutil.rmtree(run_dir / folder)


def _manifest(**fields):
    def edit(run_dir):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        (run_dir / "manifest.json").write_text(json.dumps({**manifest, **fields}))
    return edit


@pytest.mark.parametrize("damage, steps, expect", [
    (_drop("stats"), 60, "Steps recorded</dt><dd>60"),
    (_drop("scalars"), 60, "Steps recorded</dt><dd>60"),  # counted from the stats instead
    (lambda run_dir: None, 1, "Steps recorded</dt><dd>1"),
    (_manifest(models=["x"], optimizers={"o": {"param_groups": [{"lr": "high", "params": "all"}]}},
               exception="boom", status=None), 60, "<td>high</td>"),
], ids=["no stats", "no scalars", "one step", "malformed manifest"])
def test_damaged_run_still_gets_a_report(tmp_path, damage, steps, expect):
    run_dir = write_run(tmp_path / "run", kind="healthy", steps=steps)
    damage(run_dir)
    analysis = healthy_analysis(run_dir)
    html = render_html(build_page(analysis))
    assert expect in html
    assert render_markdown(analysis) and render_summary(analysis)


def test_run_without_tensor_statistics_is_not_called_healthy(tmp_path):
    from postmortem import analyze
    from reports.page import headline

    complete = write_run(tmp_path / "complete", kind="healthy", steps=60)
    assert headline(analyze(complete)).startswith("Healthy:")
    lossy = write_run(tmp_path / "lossy", kind="healthy", steps=60)
    _drop("stats")(lossy)
    text = headline(analyze(lossy))
    assert not text.startswith("Healthy") and "lacks the statistics" in text and "incomplete" in text


def test_a_healthy_run_that_records_no_loss_says_its_outcome_was_not_judged(tmp_path):
    from postmortem import analyze
    from reports.page import headline

    with_loss = write_run(tmp_path / "with_loss", kind="healthy", steps=60)
    assert "Nothing recorded says whether it learns" not in headline(analyze(with_loss))
    without = write_run(tmp_path / "without", kind="healthy", steps=60)
    _drop("scalars")(without)  # no loss, no metric: only the tensors speak
    analysis = analyze(without)
    assert next(f for f in analysis.findings if f.label == "healthy").evidence["learns"] is None
    text = headline(analysis)
    assert text.startswith("Healthy:") and "Nothing recorded says whether it learns" in text


def test_a_verdict_on_a_run_read_with_warnings_says_the_record_is_incomplete(tmp_path):
    from postmortem import analyze
    from reports.page import headline

    run_dir = write_run(tmp_path / "run", kind="healthy", steps=60)
    complete = headline(analyze(run_dir))
    assert "incomplete" not in complete
    first = sorted((run_dir / "stats").glob("*.parquet"))[0]
    first.write_bytes(first.read_bytes()[:100])  # a segment cut short: its steps are lost
    text = headline(analyze(run_dir))
    assert text.startswith("Healthy") and text.endswith("The record is incomplete (1 warning): see the warnings.")


def test_a_run_that_came_back_from_an_incident_is_healthy_recovered(tmp_path):
    from dataclasses import replace

    from postmortem import analyze
    from postmortem.findings import Finding, Severity
    from reports.page import headline

    analysis = analyze(write_run(tmp_path / "run", kind="healthy", steps=60))
    incident = Finding("recovered_incident", 30, [], {}, "the run came back on its own", Severity.WARNING)
    # The incident's warning replaces the `healthy` note (diagnose adds it only without one).
    recovered = replace(analysis, findings=[incident])
    assert headline(recovered).startswith("Healthy, recovered") and "step 30" in headline(recovered)
    assert "lacks the statistics" in headline(replace(analysis, findings=[]))
    # A run that learns on while one layer was cut off: its warning replaces the note too.
    cut = Finding("no_gradient", 40, ["fc1.weight"], {}, "remove the .detach()", Severity.WARNING)
    assert headline(replace(analysis, findings=[cut])).startswith("Healthy:")
    assert "no gradient" in headline(replace(analysis, findings=[cut])).replace("_", " ")
