"""The plain-text formatters the HTML, Markdown and terminal renderers share."""

from reports.text import fmt_growth


def test_growth_is_written_as_a_rate_with_its_doubling_time():
    assert fmt_growth(1.8, 1.18) == "×1.8/step (doubles every 1.2 steps)"


def test_a_pure_jump_has_no_growth_rate():
    # growth_per_step 1.0 is a jump with no growth after it (docs/findings.md): "×1/step" misread
    assert fmt_growth(1.0, None) == "" and fmt_growth(None) == ""
