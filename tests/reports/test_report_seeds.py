"""Gold Markdown reports of the seed cases (../shared/seeds/): each tells its article's story.

Every case is the Markdown summary of a real run: the committed sample runs, or a small
scenario trained here by `python -m sample_runs make NAME --out DIR` (seconds each). The whole
summary must match its gold file (volatile parts scrubbed as in test_report_gold.py), and its
headline and first diagnosis must say the article's mechanism and fix.

Regenerate after an intended change with
    POSTMORTEM_UPDATE_GOLD=1 .venv/bin/python -m pytest tests/reports/test_report_seeds.py
and review the diff of tests/reports/gold/seed_*.md before committing it.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from postmortem import analyze
from report_runs import SHIPPED
from reports import render_markdown
from test_report_gold import GOLD, assert_matches_gold, scrub

_SAMPLE_RUNS = Path(__file__).resolve().parents[2] / "sample_runs"
# case → (committed sample run, or scenario to train)
CASES = {
    "seed000_cnn_domain_shift": ("cnn_domain_shift", None),
    "seed001_gan_log0": ("gan_log0", None),
    "seed002_linear_no_step": ("linear_no_step", None),
    "seed002_linear_lr_10": (None, "linear_lr_10-s0"),
    "seed002_linear_lr_1e-7": (None, "linear_lr_1e-7-s0"),
    "seed002_linear_unscaled": (None, "linear_unscaled-s0"),
    "seed003_deep_vanishing": (None, "deep_vanishing-s0"),
    "seed003_deep_dead_relu": (None, "deep_dead_relu-s0"),
    "seed003_gan_bad_init": (None, "gan_bad_init-s0"),
}


@pytest.fixture(scope="session")
def seed_reports(tmp_path_factory):
    """case → (analysis, scrubbed Markdown); each run trained and analysed once, on first use."""
    root = tmp_path_factory.mktemp("seeds")
    done = {}

    def report(case: str):
        if case not in done:
            sample, scenario = CASES[case]
            if sample is not None:
                run_dir = _SAMPLE_RUNS / sample
                if run_dir not in SHIPPED:
                    pytest.skip(f"no sample run {sample} in sample_runs/")
            else:
                pytest.importorskip("torch")
                run_dir = root / scenario
                subprocess.run([sys.executable, "-m", "sample_runs", "make", scenario, "--out", str(run_dir)],
                               check=True, capture_output=True, cwd=_SAMPLE_RUNS.parent)
            analysis = analyze(run_dir)
            done[case] = (analysis, scrub(render_markdown(analysis), root))
        return done[case]

    return report


def _headline(text: str) -> str:
    return text.splitlines()[2]


def _diagnoses(text: str) -> list[str]:
    lines = text.splitlines()
    if "**Diagnoses**" not in lines:
        return []
    return [line for line in lines[lines.index("**Diagnoses**") + 1:] if line.startswith("- **")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_seed_report_matches_gold_file(seed_reports, case):
    _, text = seed_reports(case)
    assert_matches_gold(GOLD / f"{case}.md", text)


def test_seed000_one_onset_story_after_the_domain_switch(seed_reports):
    analysis, text = seed_reports("seed000_cnn_domain_shift")
    events = analysis.run.events()
    switch = int(events.loc[events["kind"] == "domain_switch", "step"].iloc[0])
    onset, first = analysis.onset, analysis.first_nonfinite
    assert switch < onset.step < first.step
    assert _headline(text).startswith(f"Diverged. The failure began at step {onset.step}")
    assert f"It followed domain_switch at step {switch} " in _headline(text)
    # One date: every diagnosis is at or after the onset, none before the switch.
    steps = [int(s) for line in _diagnoses(text) for s in re.findall(r"\(step (\d+)\)", line)]
    assert steps and min(steps) >= onset.step
    assert _diagnoses(text)[0].startswith(f"- **diverged** (step {onset.step}): clip gradients")
    chain = analysis.chain
    assert chain[0].startswith(f"a `domain_switch` event was recorded at step {switch}")
    assert any(link.startswith("the gradient of") and f"at step {onset.step}" in link for link in chain)  # the spike
    assert any("momentum_buffer state" in link for link in chain)  # what carried it
    # ...shown with the spike, with the article's magnitudes, and how the first NaN came.
    carried = next(link for link in chain[:3] if link.startswith("it was carried by"))
    assert "the momentum_buffer state of" in carried and "the activations of" in carried
    assert "a float32 overflow" in chain[-2] and chain[-2].startswith("the first non-finite value")


def test_seed001_names_log0_and_the_articles_fix(seed_reports):
    analysis, text = seed_reports("seed001_gan_log0")
    assert "Cause: log_of_zero" in _headline(text) and "in D.sigmoid" in _headline(text)
    first = _diagnoses(text)[0]
    assert first.startswith("- **log_of_zero**")
    mechanism, fix = first.index("log(0) in a hand-written BCE"), first.index("BCEWithLogitsLoss")
    assert mechanism < fix < first.index("1e-8") < first.index("clip gradients")
    loss_step = analysis.findings[0].evidence["first_nonfinite_loss_step"]
    assert analysis.first_nonfinite.step == loss_step  # nothing broke before the loss did
    # One date: the failure began where the sigmoid reached 0/1, not where the NaN showed.
    since = analysis.findings[0].step
    assert since < loss_step and _headline(text).startswith(f"Diverged. The failure began at step {since} ")
    assert analysis.onset.step == since and _diagnoses(text)[1].startswith(f"- **diverged** (step {since})")


@pytest.mark.parametrize("case, label, fix", [
    ("seed002_linear_no_step", "no_update", "call optimizer.step() after loss.backward()"),
    ("seed002_linear_lr_1e-7", "lr_too_low", "raise the learning rate"),
    ("seed002_linear_unscaled", "unscaled_inputs", "normalise the inputs"),
])
def test_seed002_not_learning_headline_names_the_articles_fix(seed_reports, case, label, fix):
    _, text = seed_reports(case)
    assert _headline(text).startswith(f"Not learning: {label}")
    assert _diagnoses(text)[0].startswith(f"- **{label}**") and fix in _diagnoses(text)[0]


def test_seed002_lr_10_diverges_and_says_lower_the_learning_rate(seed_reports):
    analysis, text = seed_reports("seed002_linear_lr_10")
    assert _headline(text).startswith("Diverged.") and analysis.first_nonfinite is not None
    first = _diagnoses(text)[0]
    assert first.startswith("- **diverged**") and "lower the learning rate ×10 (lr 10 " in first
    assert any(line.startswith("- **lr_too_high**") for line in _diagnoses(text))


@pytest.mark.parametrize("case, label, layers", [
    ("seed003_deep_vanishing", "vanishing_gradient", "`fc0.weight`"),
    ("seed003_deep_dead_relu", "dead_units", "`act0`"),
])
def test_seed003_deep_net_names_the_mechanism_the_layers_and_the_init(seed_reports, case, label, layers):
    _, text = seed_reports(case)
    assert _headline(text).startswith(f"Not learning: {label}")
    first = _diagnoses(text)[0]
    assert first.startswith(f"- **{label}**") and layers in first and "Kaiming" in first.replace("kaiming", "Kaiming")
    assert ".detach()" not in first


def test_seed003_gan_bad_init_says_which_network_which_layers_which_init(seed_reports):
    _, text = seed_reports("seed003_gan_bad_init")
    assert _headline(text).startswith("Not learning: vanishing_gradient")
    first = _diagnoses(text)[0]
    assert first.startswith("- **vanishing_gradient**") and "`G.fc0.weight`" in first
    # The network (the generator, not the discriminator), and the init for its LeakyReLUs.
    plain = first.replace("\\", "")  # Markdown escapes
    assert "of `G` (DeepMLP)" in plain and "kaiming_normal_(w, a=0.2, nonlinearity='leaky_relu')" in plain
