"""What every framework's recorded runs are checked for (plain pandas and postmortem.analyze)."""

import postmortem
from recorder_helpers import read_manifest, read_table


def scalar_series(run, name):
    """(steps, values) of one scalar, in step order."""
    scalars = read_table(run, "scalars")
    rows = scalars[scalars["name"] == name].sort_values("step")
    return rows["step"].to_numpy(), rows["value"].to_numpy()


def assert_healthy(run):
    analysis = postmortem.analyze(run)
    assert analysis.verdict == "healthy", [(f.label, f.evidence) for f in analysis.findings]


def assert_diverged_at(run, step):
    analysis = postmortem.analyze(run)
    assert analysis.verdict == "diverged"
    assert abs(analysis.onset.step - step) <= 1, analysis.onset


def assert_exception_run(run, message, last_step):
    """Status `exception` with the traceback, and the steps before it readable."""
    manifest = read_manifest(run)
    assert manifest["status"] == "exception"
    assert manifest["exception"]["type"] == "RuntimeError"
    assert message in manifest["exception"]["traceback"]
    assert manifest["last_step"] == last_step
    assert postmortem.analyze(run).run.scalars()["step"].max() == last_step
