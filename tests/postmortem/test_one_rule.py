"""Decisions made in several places, made by one rule: which scalar is a loss, an unusual batch,
the last event before the onset."""
import numpy as np
import pandas as pd

from postmortem.detectors import Thresholds
from postmortem.findings import Onset
from postmortem.ranking import extreme_batch, healthy_range, out_of_range
from postmortem.report_data import _last_event, _scalar_curves
from postmortem.scalars import is_loss, main_loss, recorder_scalar
from postmortem.series import SeriesKey, SeriesTable
from postmortem.story import batch_at, events_near


def test_an_accuracy_is_a_metric_not_a_loss():
    assert is_loss("loss") and is_loss("val_loss") and is_loss("loss_d")
    assert not is_loss("accuracy") and not is_loss("grad_norm") and not is_loss("lr")
    assert recorder_scalar("grad_norm.G") and recorder_scalar("hp.0.lr") and not recorder_scalar("accuracy")
    scalars = pd.DataFrame({"step": [0, 0, 0, 1, 1, 1], "name": ["train_loss", "accuracy", "lr"] * 2,
                            "value": [2.0, 0.1, 0.1, 1.0, 0.5, 0.1]})
    assert main_loss(scalars) == "train_loss"
    curves = _scalar_curves(scalars)
    assert [n for n in curves if is_loss(n)] == ["train_loss"]
    assert curves["accuracy"].values.tolist() == [0.1, 0.5]


def _inputs(magnitudes: list[float]) -> SeriesTable:
    n = len(magnitudes)
    return SeriesTable([SeriesKey("input", "x", None)], np.array([0, n]), np.arange(n), np.array(magnitudes, float),
                       np.zeros(n, np.int32), np.full((2, n), np.nan, np.float32), np.array([4]),
                       pd.DataFrame({"step": [], "name": [], "hash": []}))


def test_the_story_and_the_ranking_agree_on_an_unusual_batch():
    table = _inputs([1.0, 2.0, 1.5, 1.2, 30.0])  # ×15 above every batch before it
    assert healthy_range(np.array([1.0, 2.0, 1.5, 0.0, np.nan])) == (1.0, 2.0)
    factor = Thresholds().root_causes.batch_range_factor  # the one factor both read
    assert out_of_range(30.0, (1.0, 2.0), factor) and not out_of_range(15.0, (1.0, 2.0), factor)
    assert extreme_batch(table, 4, factor) == ("x", 15.0)
    ev = type("Ev", (), {"table": table, "onset": Onset(4, (4, 4), "", None, None, None, None)})()
    assert "was unusual" in batch_at(ev, factor)
    assert "looked ordinary" in batch_at(ev, 20.0)
    assert extreme_batch(_inputs([1.0, 2.0, 1.5, 1.2, 15.0]), 4, factor) is None


def test_an_event_after_the_onset_step_is_not_before_it():
    events = pd.DataFrame({"step": [30, 38, 41], "kind": ["a", "domain_switch", "late"], "message": ["", "", ""]})
    onset = Onset(40, (39, 41), "", None, None, None, None)
    assert _last_event(events, onset) == (38, "domain_switch")
    ev = type("Ev", (), {"events": events, "onset": onset})()
    assert "late" not in " ".join(events_near(ev)) and "domain_switch" in events_near(ev)[-1]


def test_an_event_at_the_first_step_is_where_the_run_began_not_a_trigger():
    events = pd.DataFrame({"step": [0, 25], "kind": ["epoch", "validation"], "message": ["epoch 0 begins", ""]})
    onset = Onset(20, (19, 21), "", None, None, None, None)
    assert _last_event(events, onset) is None
    assert events_near(type("Ev", (), {"events": events, "onset": onset})()) == []
    events.loc[1, "step"] = 12  # an event after the start still leads
    assert _last_event(events, onset) == (12, "validation")
