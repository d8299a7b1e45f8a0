import base64
import json
import re

import pytest

from reports import build_page, render_html
from report_runs import diverged_analysis, healthy_analysis, not_learning_analysis, write_run

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


@pytest.fixture(scope="module")
def pages(run_dirs):
    analyses = {"diverged": diverged_analysis(run_dirs["diverged"]), "healthy": healthy_analysis(run_dirs["healthy"]),
                "not_learning": not_learning_analysis(run_dirs["no_update"])}
    return {verdict: render_html(build_page(analysis)) for verdict, analysis in analyses.items()}


def _section_ids(html: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', html)


def test_diverged_first_screen_answers_what_when_where(pages):
    html = pages["diverged"]
    first_screen = html[: html.index("<nav>")]
    for expected in ("Diverged", "step 40 (interval 39–41)", "First non-finite value at step 52",
                     "the activations of <code>fc2</code>", "12 steps after the onset", "×2.5/step",
                     "domain_switch at step 38", "What to change:</strong> Clip gradients"):
        assert expected in first_screen, expected
    assert _section_ids(html) == ["timeline", "heatmap", "tensors", "ranking", "diagnoses", "inputs", "metadata"]


def test_ranking_table_and_chain(pages):
    html = pages["diverged"]
    ranking = html[html.index('<section id="ranking"'):html.index('<section id="diagnoses"')]
    assert ranking.count("<tr><td>") == 3
    assert "<li>grad of <code>fc2.weight</code> jumped ×40 at step 40</li>" in ranking
    assert "momentum_buffer" in ranking


def test_input_health_at_onset_lists_the_steps_around_it(pages):
    inputs = pages["diverged"].split('<section id="inputs"')[1].split("</section>")[0]
    rows = re.findall(r"<tr><td>(\d+)</td>", inputs)
    assert "40" in rows and "36" in rows and "43" in rows


@pytest.mark.parametrize("verdict", ["healthy", "not_learning"])
def test_runs_without_onset_get_no_onset_sections(pages, verdict):
    html = pages[verdict]
    assert "loss (median of first → last 6 steps)" in html and "Learning rate</dt><dd>0.05" in html
    assert "ranking" not in _section_ids(html)
    assert "Onset" not in html and "non-finite value at" not in html
    assert "the whole run (steps 0–59)" in html
    assert "Input and batch health over the run" in html


def test_not_learning_diagnosis_comes_first_with_evidence_and_fix(pages):
    html = pages["not_learning"]
    assert _section_ids(html)[0] == "diagnoses"
    assert "Not learning: no_update." in html
    assert "Median update / parameter ratio</dt><dd>0 (≈1e-3 is typical)" in html
    assert "grey: exactly 0" not in html  # it is in the figure; the page text stays plain
    assert "median_update_ratio" in html and "Call optimizer.step() after loss.backward()" in html
    assert "example warning" in html


@pytest.mark.parametrize("verdict", ["diverged", "healthy", "not_learning"])
def test_self_contained_and_locked_down(pages, verdict):
    html = pages[verdict]
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}' in html
    assert "<script" not in html and "<link" not in html and "@import" not in html
    sources = re.findall(r'src="([^"]*)"', html)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    for source in sources:
        assert base64.b64decode(source.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert len(html.encode()) < 2_000_000


HOSTILE = "<script>alert(1)</script>"


def test_every_run_supplied_name_is_escaped(tmp_path):
    run_dir = write_run(tmp_path / "hostile", modules=(HOSTILE, "a$b$\x1b[31mred", "ok\u202eevil"), event_at=38)
    analysis = diverged_analysis(run_dir)
    analysis.findings[0].tensors.append(f"{HOSTILE}.weight")
    analysis.chain.append(f"grad of `{HOSTILE}.weight` jumped")
    analysis.run.manifest["host"] = '"><img src=x onerror=alert(1)>'
    html = render_html(build_page(analysis))
    assert HOSTILE not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.weight" in html
    assert "\x1b" not in html and "\u202e" not in html
    assert "a$b$[31mred" in html  # the escape character itself is gone, the printable rest stays


def test_notes_are_shown_apart_and_never_in_the_headline(run_dirs):
    from dataclasses import replace

    from postmortem import Finding
    from reports import render_markdown

    note = Finding("no_gradient", 0, ["attn.k_proj.bias"], {"parameters_without_gradient": 1},
                   "attn.k_proj.bias never received a gradient while the run learned", "note")
    analysis = healthy_analysis(run_dirs["healthy"])
    analysis = replace(analysis, findings=[*analysis.findings, note])
    page = build_page(analysis)
    assert "no_gradient" not in page.headline and page.headline.startswith("Healthy")
    assert [s.anchor for s in page.sections if s.anchor in ("diagnoses", "notes")] == ["diagnoses", "notes"]
    notes = next(s for s in page.sections if s.anchor == "notes")
    assert [d.label for d in notes.diagnoses] == ["no_gradient"]
    assert 'id="notes"' in render_html(page)
    assert "no_gradient" not in render_markdown(analysis)


def test_a_warning_beside_a_healthy_verdict_says_where_it_was_seen(run_dirs):
    from dataclasses import replace

    from postmortem import Finding

    warning = Finding("batch_out_of_range", 72, ["<b>input</b>"], {"loss_felt_it": False},
                      "the batch at step 72 had max |x| 4.19e+03", "warning")
    analysis = healthy_analysis(run_dirs["healthy"])
    page = build_page(replace(analysis, findings=[*analysis.findings, warning]))
    assert page.headline.startswith("Healthy") and "Also noted: batch_out_of_range (step 72, <b>input</b>)." in page.headline
    assert "Also noted: batch_out_of_range (step 72, &lt;b&gt;input&lt;/b&gt;)." in render_html(page)


def test_a_finite_divergence_says_what_judged_it_before_and_after_the_onset(run_dirs):
    from dataclasses import replace

    analysis = diverged_analysis(run_dirs["diverged"])
    shift = {"judged_by": "val_l1_error", "before_onset": 0.276, "after_onset": 0.38, "at_end": 0.302}
    findings = [replace(f, evidence={**f.evidence, **shift}) if f.label == "diverged" else f for f in analysis.findings]
    finite = replace(analysis, first_nonfinite=None, findings=findings)
    assert build_page(finite).headline.endswith(
        "stayed finite while diverging: val_l1_error 0.276 before the onset, 0.38 after it, 0.302 at the end.")
    # Without the shift (an older analysis) the sentence stands alone.
    bare = replace(analysis, first_nonfinite=None)
    assert build_page(bare).headline.endswith("the run stayed finite while diverging.")


def test_learning_rate_fact_says_whose_when_the_param_groups_lrs_differ(tmp_path):
    run_dir = write_run(tmp_path / "run", kind="healthy")
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    group = manifest["optimizers"]["optimizer"]["param_groups"][0]
    manifest["optimizers"]["optimizer"]["param_groups"] = [
        {**group, "params": group["params"][:2]}, {**group, "lr": 0.5, "params": group["params"][2:]}]
    manifest_path.write_text(json.dumps(manifest))
    html = render_html(build_page(healthy_analysis(run_dir)))
    assert "Learning rate, first of 2 param groups (`conv1.weight`…)</dt><dd>0.05" in html
    assert "Learning rate</dt>" not in html
