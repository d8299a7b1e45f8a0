"""Generated hostile names and event floods (hypothesis, derandomized): lone surrogates, backtick
runs, control and bidi characters and Markdown/HTML syntax in every name a run carries, and
floods of events. Nothing raises, the recorder keeps every name visible, the Markdown shows the
name as text, and the report draws a bounded number of event lines."""

from __future__ import annotations

import io
import json
import re
import tempfile
import warnings
from collections import OrderedDict
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from torch import nn

import postmortem
from postmortem.report_data import _MAX_EVENT_LINES, _event_lines
from recorders import Recorder
from recorders.errors import RecorderWarning
from recorders.writer import manifest_bytes, segment_table, visible
from reports import build_page, render_html, render_markdown
from reports.markdown import _md, _spans
from reports.text import clean

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
BACKTICK_RUNS = st.integers(1, 5).map(lambda n: "`" * n)
CONTROLS = st.sampled_from([chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))])
BIDI = st.sampled_from(list("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"))
MARKUP = st.sampled_from(["<img src=//1249763329/x>", "![x](//h/x)", "[a](//h)", "<b>", "&amp;",
                          "|", "*", "_", "~~", "\\", "#", "- ", "1. ", "> ", "    ", "---", "<!--"])
hostile_names = st.lists(st.one_of(st.text(max_size=3), SURROGATES, BACKTICK_RUNS, CONTROLS, BIDI,
                                   MARKUP), min_size=1, max_size=10).map("".join)

EXAMPLES = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
_RENDERER = MarkdownIt("commonmark").enable("table")  # raw HTML on, as in GitHub's renderer
_TEXT_TAGS = {"p", "code", "ol", "li", "table", "thead", "tr", "th"}


def text_of(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]*>", "", html)).split())


@EXAMPLES
@given(name=hostile_names)
def test_markdown_shows_any_name_as_text(name):
    sentence = f"the gradient of `{name}` grew first"
    shown = " ".join("".join(part for _, part in _spans(clean(sentence).strip())).split())
    for markdown in (f"1. {_md(sentence)}", f"| {_md(sentence, in_table=True)} | x |\n|---|---|"):
        html = _RENDERER.render(markdown)
        assert set(re.findall(r"<(\w+)", html)) <= _TEXT_TAGS, (markdown, html)
        assert text_of(html).startswith(shown), (markdown, html)


@EXAMPLES
@given(name=hostile_names, message=hostile_names)
def test_segments_and_manifest_keep_any_name_visible(name, message):
    tables = {"scalars": [(0, name, 1.0)], "events": [(0, name, message, 0.0)]}
    for table_name, rows in tables.items():
        buffer = io.BytesIO()
        pq.write_table(segment_table(table_name, rows), buffer)
        read = pq.read_table(buffer).to_pylist()[0]
        assert read["name" if table_name == "scalars" else "kind"] == visible(name)
    manifest = json.loads(manifest_bytes({"config": {name: [message]}, "argv": [name]}))
    assert manifest == {"config": {visible(name): [visible(message)]}, "argv": [visible(name)]}


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])  # a run each
@given(name=hostile_names)
def test_a_run_full_of_a_hostile_name_records_and_reports(name):
    module = name.replace(".", "") or "x"  # torch refuses dots in module names
    model = nn.Sequential(OrderedDict([(module, nn.Linear(3, 2))]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("error", RecorderWarning)  # a degraded recording warns: fail then
        run_dir = Path(tmp) / "run"
        with Recorder(run_dir, model, optimizer, flush_every=1) as rec:
            for step in range(3):
                rec.event(name or "x", name)
                optimizer.zero_grad()
                loss = model(torch.randn(4, 3)).square().mean()
                loss.backward()
                optimizer.step()
                rec.step(loss=loss, **{name: float(step)}, inputs={name: torch.ones(2)})
        analysis = postmortem.analyze(run_dir)
        assert sorted(analysis.run.scalars()["step"].unique()) == [0, 1, 2]
        html = render_html(build_page(analysis))
        markdown = render_markdown(analysis)
    for text in (html, markdown):
        text.encode("utf-8")
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", text)
    assert "<img src=//1249763329" not in html
    assert set(re.findall(r"<(\w+)", _RENDERER.render(markdown))) <= {
        *_TEXT_TAGS, "h3", "td", "tbody", "strong", "ul", "em"}


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(n=st.integers(1, 100_000), steps=st.integers(1, 400), kinds=st.integers(1, 60),
       seed=st.integers(0, 2**16))
def test_event_floods_draw_a_bounded_number_of_lines(n, steps, kinds, seed):
    rng = np.random.default_rng(seed)
    kind = rng.zipf(1.5, n) % kinds  # a few kinds flood, most are rare
    events = pd.DataFrame({"step": rng.integers(0, steps, n), "kind": [f"k{k}" for k in kind],
                           "message": ""})
    drawn_lines = _event_lines(events)
    lines, left_out = drawn_lines.lines, drawn_lines.left_out
    assert len(lines) <= _MAX_EVENT_LINES
    assert [s for s, _ in lines] == sorted({s for s, _ in lines})
    drawn = {k for _, label in lines for k in label.split(", ")}
    counts = events["kind"].value_counts()
    assert drawn.isdisjoint(k for k, _ in left_out)
    assert sum(counts[k] for k in drawn) + sum(c for _, c in left_out) == n
    for k in drawn:  # a kind is drawn at every step it happened
        assert set(events.loc[events["kind"] == k, "step"]) <= {s for s, _ in lines}
