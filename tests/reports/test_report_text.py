"""The plain-text formatters the HTML, Markdown and terminal renderers share."""

from reports.text import fmt_growth, series_words, tensor_words


def test_growth_is_written_as_a_rate_with_its_doubling_time():
    assert fmt_growth(1.8, 1.18) == "×1.8/step (doubles every 1.2 steps)"


def test_a_pure_jump_has_no_growth_rate():
    # growth_per_step 1.0 is a jump with no growth after it (docs/findings.md): "×1/step" misread
    assert fmt_growth(1.0, None) == "" and fmt_growth(None) == ""


def test_series_and_tensors_read_as_words():
    assert series_words("grad conv2.bias") == "the gradient of `conv2.bias`"
    assert series_words("scalar loss") == "the logged `loss`"
    assert series_words("state fc1.weight[exp_avg_sq]") == "the exp_avg_sq state of `fc1.weight`"
    # A series already described in words, or of a role outside the vocabulary, stays as written.
    assert series_words("grad norms (accumulating: missing zero_grad)") == "grad norms (accumulating: missing zero_grad)"
    assert series_words("weird x") == "weird x"
    assert series_words("hyperparameter_changed: hp.opt.4.lr") == "`hp.opt.4.lr` (hyperparameter_changed)"
    assert series_words("not_a_label: x") == "not_a_label: x"
    assert tensor_words("conv1.weight", "param") == "the parameter `conv1.weight`"
    assert tensor_words("x", "ema") == "the ema of `x`"
    assert tensor_words("fc\x1b[31m", "grad") == "the gradient of `fc[31m`"  # a run's name is cleaned
