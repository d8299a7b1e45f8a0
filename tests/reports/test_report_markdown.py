from dataclasses import replace

from report_runs import diverged_analysis, not_learning_analysis
from reports import render_markdown, render_summary
from reports.markdown import MAX_LINES


def test_markdown_summary_carries_the_verdict(run_dirs):
    text = render_markdown(diverged_analysis(run_dirs["diverged"]))
    assert text.startswith("### postmortem: diverged: diverged")
    assert "| Onset | step 40 (interval 39–41) |" in text
    assert "1. grad of `fc2.weight` jumped ×40 at step 40" in text
    assert "- **diverged** (step 40): Clip gradients" in text
    assert len(text.splitlines()) <= MAX_LINES


def _with_findings(analysis, count):
    finding = analysis.findings[0]
    analysis.findings.extend(replace(finding, label=f"label{i}", fix=f"fix <b>{i}</b> | pipe") for i in range(count))
    analysis.chain.extend(f"link {i} of `<script>x</script>`" for i in range(count))
    return analysis


def test_markdown_escapes_html_outside_code_spans(run_dirs):
    text = render_markdown(_with_findings(not_learning_analysis(run_dirs["no_update"]), 2))
    assert "<b>" not in text and "fix &lt;b&gt;0&lt;/b&gt; \\| pipe" in text
    assert "link 0 of `<script>x</script>`" in text  # inside a code span it is shown, not run


def test_markdown_stays_within_30_lines(run_dirs):
    text = render_markdown(_with_findings(not_learning_analysis(run_dirs["no_update"]), 40))
    assert len(text.splitlines()) <= MAX_LINES
    assert text.rstrip().endswith("Full report: report.html")


def test_terminal_summary_has_no_control_characters(run_dirs):
    analysis = diverged_analysis(run_dirs["diverged"])
    analysis.chain.append("grad of `\x1b[2J\x1b]0;owned\x07fc1` jumped")
    analysis.findings[0] = replace(analysis.findings[0], fix=analysis.findings[0].fix + "\x1b[31m red \x9b")
    text = render_summary(analysis)
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "Diverged. The failure began at step 40" in text and "fix: Clip gradients" in text
