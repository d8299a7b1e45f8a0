"""recorders.vocabulary: the words the recorder, the analyzer and the renderer share."""

from __future__ import annotations

import json

import postmortem
import recorders
from recorders.vocabulary import LABELS, VERDICTS, Label, Severity, Verdict


def test_one_run_directory_error_for_both_sides():
    assert recorders.RunDirectoryError is postmortem.RunDirectoryError
    error = recorders.RunDirectoryError("bad")
    assert isinstance(error, (recorders.RecorderError)) and isinstance(error, postmortem.PostmortemError)
    assert isinstance(error, ValueError)  # what the recorder's usage errors have always been


def test_labels_are_their_strings():
    assert {"diverged", "no_update"} <= LABELS and all(type(label) is str for label in LABELS)
    assert Label.NO_UPDATE == "no_update" and "no_update" in {Label.NO_UPDATE}
    assert f"{Label.NO_UPDATE}" == str(Label.NO_UPDATE) == "no_update"
    assert json.dumps([Label.DIVERGED, Severity.NOTE]) == '["diverged", "note"]'
    assert VERDICTS == ("diverged", "not_learning", "healthy") == tuple(Verdict)


def test_every_role_reads_as_words():
    from recorders.vocabulary import ROLES, describe_tensor

    assert all(describe_tensor("x", role).startswith("the ") for role in ROLES)
    assert describe_tensor("fc1.weight", "state", "exp_avg_sq") == "the exp_avg_sq state of `fc1.weight`"
    assert describe_tensor("fc1.weight", "state") == "the optimizer state of `fc1.weight`"
    assert describe_tensor("loss", "scalar") == "the logged `loss`"
