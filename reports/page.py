"""Analysis -> page dataclasses: everything the template shows, as plain (unescaped) text.

The template (reports/template.py) is the only place that turns these into HTML, and it escapes
every string it is given; nothing here produces markup.
"""
from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from reports import figures
from reports.figures import Markers, Panel
from reports.text import clean, fmt_growth, fmt_interval, fmt_number, fmt_step, series_words, shorten, tensor_words

__all__ = ["Fact", "Figure", "Table", "Diagnosis", "Section", "Page", "build_page", "headline", "key_facts"]

_MAX_TABLE_ROWS = 500


@dataclass(frozen=True)
class Fact:
    label: str
    value: str


@dataclass(frozen=True)
class Figure:
    title: str
    png: bytes
    alt: str

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""
    collapsed: bool = False  # long reference tables start folded (<details>)


@dataclass(frozen=True)
class Diagnosis:
    label: str
    step: str
    tensors: tuple[str, ...]
    evidence: Table
    fix: str


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    paragraphs: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()
    tables: tuple[Table, ...] = ()
    items: tuple[str, ...] = ()  # an ordered list, e.g. the amplification chain
    diagnoses: tuple[Diagnosis, ...] = ()
    preformatted: str = ""


@dataclass(frozen=True)
class Page:
    title: str
    verdict: str
    headline: str
    facts: tuple[Fact, ...]
    fix: str
    sections: tuple[Section, ...]
    warnings: tuple[str, ...]
    footer: str


# --- headline --------------------------------------------------------------------------------

def _name(value: object) -> str:
    return shorten(clean(value), 120)


def _finite_shift(analysis) -> str:
    """What the verdict of a run that stayed finite follows: what judges it before the onset,
    after it and at the end (the `diverged` finding's evidence)."""
    found = next((f for f in analysis.findings if f.label == "diverged" and "judged_by" in f.evidence), None)
    if found is None:
        return ""
    e = found.evidence
    return (f": {_name(e['judged_by'])} {fmt_number(e['before_onset'])} before the onset, "
            f"{fmt_number(e['after_onset'])} after it, {fmt_number(e['at_end'])} at the end")


def headline(analysis) -> str:
    """One or two sentences that say what happened, when it began, where, and how fast; and,
    where the run was read with warnings (a lost segment, missing steps), that the verdict
    rests on part of it."""
    text = _verdict_sentences(analysis)
    if analysis.warnings:
        count = len(analysis.warnings)
        text += f" The record is incomplete ({count} warning{'s' if count > 1 else ''}): see the warnings."
    return text


def _verdict_sentences(analysis) -> str:
    onset, first = analysis.onset, analysis.first_nonfinite
    if analysis.verdict == "diverged":
        parts = ["Diverged."]
        if onset is not None:
            how = [f"jump ×{fmt_number(onset.jump)}" if onset.jump else "",
                   fmt_growth(onset.growth_per_step, onset.doubling_steps)]
            how = "; ".join(h for h in how if h)
            parts.append(f"The failure began at step {onset.step}{fmt_interval(onset.interval)}"
                         f" in {series_words(onset.series)}" + (f": {how}." if how else "."))
            event = _event_before_onset(analysis)
            if event:  # a likely trigger (seed 000's domain switch) belongs to the one onset story
                parts.append(f"It followed {event}.")
        cause = next(iter(analysis.causes), None)
        if cause is not None:
            where = f" in {', '.join(_name(t) for t in cause.tensors[:3])}" if cause.tensors else ""
            parts.append(f"Cause: {clean(cause.label)} ({fmt_step(cause.step)}){where}.")
        if first is not None:
            lead = (f", {onset.lead_steps} steps after the onset"
                    if onset is not None and onset.lead_steps is not None else "")
            parts.append(f"First non-finite value at step {first.step} in "
                         f"{tensor_words(first.tensor, first.role, first.key)}{lead}.")
        else:
            parts.append("No non-finite value was recorded: the run stayed finite while diverging"
                         + _finite_shift(analysis) + ".")
        return " ".join(parts)
    noted = [f for f in analysis.significant if f.label != "healthy"]
    labels = [f.label for f in noted]
    if analysis.verdict == "not_learning":
        return "Not learning: " + ", ".join(clean(label) for label in labels) + "." if labels \
            else "Not learning."
    steps = analysis.data.step_count
    incident = next((f for f in analysis.significant if f.label == "recovered_incident"), None)
    if not labels and not any(f.label == "healthy" for f in analysis.findings):
        # The analyzer claims health only when it saw tensor statistics (see the warnings); a
        # run that came back from an incident, or that learns despite a warning (a layer cut
        # off while the rest learns on), has no `healthy` finding beside that warning.
        return (f"No divergence found over {steps} recorded steps, but the run lacks the "
                "statistics to call it healthy.")
    text = f"Healthy: no divergence and no not-learning pattern over {steps} recorded steps."
    if incident is not None:
        text = (f"Healthy, recovered: the run came back on its own from an incident at step "
                f"{incident.step} over {steps} recorded steps.")
        noted = [f for f in noted if f.label != "recovered_incident"]
    healthy = next((f for f in analysis.findings if f.label == "healthy"), None)
    if healthy is not None and healthy.evidence.get("learns", False) is None:  # a hand-built analysis may lack it
        text += (" Nothing recorded says whether it learns (no single training loss, no outcome"
                 " metric with enough points): judged from its tensors alone.")
    return text + (f" Also noted: {', '.join(_noted(f) for f in noted)}." if noted else "")


def _noted(f) -> str:
    """A warning beside a healthy verdict, with where it was seen: `batch out of range (step 72, `input`)`."""
    where = [fmt_step(f.step)] if f.step is not None else []
    where += [_name(t) for t in f.tensors[:1]]
    return clean(f.label) + (f" ({', '.join(where)})" if where else "")


def key_facts(analysis) -> list[Fact]:
    """The numbers a reader wants on the first screen, most telling first, omitting what does not apply."""
    facts: list[Fact] = []  # the verdict is the page's banner and the headline's first word
    onset, first = analysis.onset, analysis.first_nonfinite
    if onset is not None:
        facts.append(Fact("Onset", f"step {onset.step}{fmt_interval(onset.interval)}"))
        if onset.lead_steps is not None:
            facts.append(Fact("Lead time", f"{onset.lead_steps} steps before the first non-finite value"))
    if first is not None:
        facts.append(Fact("First non-finite", f"step {first.step}: {tensor_words(first.tensor, first.role, first.key)}"))
    if analysis.ranking:
        carriers = [f"{clean(r.role)}{' ' + clean(r.key) if r.key else ''} `{_name(r.tensor)}` ({fmt_step(r.onset_step)})"
                    for r in analysis.ranking[:3]]
        facts.append(Fact("Amplified first", " → ".join(carriers)))
    if onset is not None:
        growth = fmt_growth(onset.growth_per_step, onset.doubling_steps)
        if growth:
            facts.append(Fact("Growth rate", growth))
        if onset.jump:
            facts.append(Fact("Jump at onset", f"×{fmt_number(onset.jump)}"))
        facts.append(Fact("Onset series", series_words(onset.series)))
    if first is not None and first.spread:
        spread = ", ".join(f"{fmt_number(count)} at step {fmt_number(step)}" for step, count in first.spread[:4])
        facts.append(Fact("Non-finite tensors per step", spread + (" …" if len(first.spread) > 4 else "")))
    event = _event_before_onset(analysis)
    if event:
        facts.append(Fact("Last event before onset", event))
    for finding in analysis.significant:
        if finding.label not in ("diverged", "healthy"):
            facts.append(Fact("Diagnosis", f"{clean(finding.label)} ({fmt_step(finding.step)})"
                              if finding.step is not None else clean(finding.label)))
    if analysis.verdict != "diverged":
        facts += _training_facts(analysis.data)
    manifest = _mapping(analysis.data.manifest)
    facts.append(Fact("Steps recorded", str(analysis.data.step_count)))
    status = _name(manifest.get("status", "unknown (no manifest)"))
    if _mapping(manifest.get("exception")):
        status += f": {_name(manifest['exception'].get('type'))}"
    facts.append(Fact("Run status", status))
    return facts


def _training_facts(data) -> list[Fact]:
    """How training went when nothing blew up: loss start → end, learning rate, update size."""
    facts = []
    for curve in data.losses[:3]:
        loss = pd.Series(curve.present())
        if len(loss) >= 2:
            n = max(1, min(10, len(loss) // 10))
            facts.append(Fact(f"{_name(curve.label)} (median of first → last {n} steps)",
                              f"{fmt_number(loss.iloc[:n].median())} → {fmt_number(loss.iloc[-n:].median())}"))
    lr = data.lr.present() if data.lr is not None else np.zeros(0)
    if len(lr):
        facts.append(Fact(_lr_label(data.manifest), fmt_number(lr[0]) if len(np.unique(lr)) == 1
                          else f"{fmt_number(lr[0])} → {fmt_number(lr[-1])}"))
    if data.median_update_ratio is not None:
        facts.append(Fact("Median update / parameter ratio", f"{fmt_number(data.median_update_ratio)} (≈1e-3 is typical)"))
    return facts


def _event_before_onset(analysis) -> str:
    """The last recorded event at or before the onset interval: a likely trigger, with its distance."""
    if analysis.onset is None or analysis.data.last_event is None:
        return ""
    step, kind = analysis.data.last_event
    return f"{_name(kind)} at step {step} ({analysis.onset.step - step} steps before the onset)"


# --- data helpers ----------------------------------------------------------------------------

def _lr_label(manifest: object) -> str:
    """The recorded `lr` is the first param group's: say whose when the groups' lrs differ (Muon
    beside Adam, an aux head at lr ×10), so that an embedding's lr is not read as the run's."""
    groups = [group for optimizer in _mapping(_mapping(manifest).get("optimizers")).values()
              for group in _records(_mapping(optimizer).get("param_groups"))]
    if len({str(group.get("lr")) for group in groups}) < 2:
        return "Learning rate"
    params = groups[0].get("params")
    first = f" (`{_name(params[0])}`…)" if isinstance(params, list) and params else ""
    return f"Learning rate, first of {len(groups)} param groups{first}"


def _mapping(value: object) -> dict:
    """A manifest field that should be a JSON object; anything else (a hostile or broken
    manifest) reads as empty rather than failing the report."""
    return value if isinstance(value, dict) else {}


def _records(value: object) -> list[dict]:
    """A manifest field that should be a list of objects, keeping only the objects."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _markers(analysis) -> Markers:
    onset, events = analysis.onset, analysis.data.events
    return Markers(
        onset=None if onset is None else int(onset.step),
        onset_interval=None if onset is None else tuple(int(v) for v in onset.interval),
        first_nonfinite=None if analysis.first_nonfinite is None else int(analysis.first_nonfinite.step),
        events=events.lines,
        events_left_out=events.left_out,
    )


# --- sections --------------------------------------------------------------------------------

def _timeline(analysis, markers: Markers) -> Section | None:
    data = analysis.data
    panels = []
    if data.losses:
        panels.append(Panel("Losses", "value", data.losses))
    if data.metrics:
        panels.append(Panel("Other metrics", "value", data.metrics))
    if data.grad_norms:
        panels.append(Panel("Global gradient norm", "L2 norm", data.grad_norms))
    if data.lr is not None and len(np.unique(data.lr.present())) > 1:  # a constant lr is in the metadata
        panels.append(Panel("Learning rate", "lr", (data.lr,)))
    if not panels:
        return None
    png = figures.line_panels(panels, markers)
    left_out = "; ".join(f"{_name(kind)} ({count} events)" for kind, count in markers.events_left_out[:10])
    return Section("timeline", "Timeline", paragraphs=(
        f"Losses{', other metrics' if data.metrics else ''} and global gradient norm per step (log scale). Orange: onset and its interval; red dashed: "
        "first non-finite value; dotted: recorded events; × on the top edge: non-finite values."
        + (f" Events too many to draw: {left_out}." if left_out else ""),),
        figures=(Figure("Timeline", png, "Losses, gradient norm and learning rate per step"),))


def _heatmap(analysis, markers: Markers) -> Section | None:
    heatmap, window = analysis.data.heatmap, analysis.data.window
    if heatmap is None:
        return None
    bins, hidden = heatmap.bins, heatmap.hidden
    matrices = [("log10 gradient norm", heatmap.grad_norm)]
    if heatmap.update_ratio is not None:
        matrices.append(("log10 update / parameter ratio (typical ≈ -3)", heatmap.update_ratio))
    png = figures.heatmap(matrices, markers.within(*window))
    where = (f"steps {window[0]}–{window[1]} around the onset" if analysis.onset is not None
             else f"the whole run (steps {window[0]}–{window[1]})")
    text = f"Per-tensor gradient norm and update/parameter ratio over {where}, tensors in model order."
    if bins.width > 1:
        text += f" Each column is the largest value of {bins.width} steps."
    if hidden:
        text += f" {hidden} more tensors are not shown (the ranked ones always are)."
    return Section("heatmap", "Layers × steps", paragraphs=(text,),
                   figures=(Figure("Layers × steps", png, "Heatmap of per-tensor gradient norms and update ratios"),))


def _top_tensors(analysis, markers: Markers) -> Section | None:
    data = analysis.data
    panels = [Panel(f"`{t.tensor}`: parameter, gradient, update and optimizer state", "L2 norm", t.curves)
              for t in data.tensors]
    activations = data.activations
    if activations is not None:
        panels.append(Panel("Activations: largest absolute value", "max |a|", activations.max_abs))
        if activations.zero_frac:
            panels.append(Panel("Activations: fraction of zeros (dead units)", "fraction", activations.zero_frac, log=False))
        if activations.sat_frac:
            panels.append(Panel("Activations: fraction saturated", "fraction", activations.sat_frac, log=False))
    if not panels:
        return None
    png = figures.line_panels(panels, markers.within(*data.window), panel_height=2.1)
    title = "Top-ranked tensors" if analysis.ranking else "Selected tensors"
    return Section("tensors", f"{title}: optimizer state and activations", figures=(
        Figure(title, png, "Norms of parameters, gradients, updates, optimizer state and activation statistics"),))


def _ranking(analysis) -> Section | None:
    if not analysis.ranking:
        return None
    rows = tuple(
        (str(i), _name(r.tensor), clean(r.role), clean(r.key or ""), fmt_number(r.onset_step),
         "" if r.growth_per_step is None else f"×{fmt_number(r.growth_per_step)}",
         "" if not r.jump else f"×{fmt_number(r.jump)}")
        for i, r in enumerate(analysis.ranking[:30], 1))
    caption = "" if len(analysis.ranking) <= 30 else f"First 30 of {len(analysis.ranking)} tensors."
    return Section("ranking", "What amplified first",
                   paragraphs=("Tensors ordered by when each began to amplify, then by growth rate and jump.",),
                   tables=(Table(("#", "tensor", "role", "state key", "onset step", "growth / step", "jump"), rows, caption),),
                   items=tuple(shorten(clean(link), 400) for link in analysis.chain))


def _evidence_table(evidence: dict) -> Table:
    rows = []
    for key, value in (evidence or {}).items():
        if isinstance(value, (list, tuple)):
            shown = ", ".join(fmt_number(v) if isinstance(v, (int, float)) else _name(v) for v in value[:12])
            shown += " …" if len(value) > 12 else ""
        elif isinstance(value, dict):
            shown = shorten(clean(json.dumps(value, default=str)), 300)
        else:
            shown = fmt_number(value) if isinstance(value, (int, float, np.number)) else _name(value)
        rows.append((_name(key), shown))
    return Table(("evidence", "value"), tuple(rows))


def _diagnoses(analysis) -> Section | None:
    findings = [f for f in analysis.findings if f not in analysis.notes]
    return _finding_section("diagnoses", "Diagnoses", findings)


def _notes(analysis) -> Section | None:
    """Structure and mechanisms seen in a run that learns: not a verdict, shown apart."""
    return _finding_section("notes", "Notes", analysis.notes)


def _finding_section(key: str, title: str, findings) -> Section | None:
    if not findings:
        return None
    diagnoses = tuple(
        Diagnosis(clean(f.label), fmt_step(f.step), tuple(_name(t) for t in (f.tensors or [])[:20]),
                  _evidence_table(f.evidence), shorten(clean(f.fix), 2000))
        for f in findings)
    return Section(key, title, diagnoses=diagnoses)


def _input_health(analysis, markers: Markers) -> Section | None:
    inputs = analysis.data.inputs
    if inputs is None:
        return None
    panels = [Panel(f"{_name(name)}: mean, std, min, max", "value", curves, log=False) for name, curves in inputs.panels]
    tables = [_input_table(table) for table in inputs.tables]
    where = "at the onset" if analysis.onset is not None else "over the run"
    figs = (Figure("Input statistics", figures.line_panels(panels, markers, panel_height=2.0), "Input statistics per step"),) if panels else ()
    return Section("inputs", f"Input and batch health {where}", figures=figs, tables=tuple(tables))


def _input_table(table) -> Table:
    role, name = table.role, table.name
    if table.summary is not None:
        s = table.summary
        rows = ((f"{role} {_name(name)}", str(s.steps), f"{fmt_number(s.mean_range[0])} … {fmt_number(s.mean_range[1])}",
                 f"{fmt_number(s.std_range[0])} … {fmt_number(s.std_range[1])}", fmt_number(s.min), fmt_number(s.max),
                 fmt_number(s.nonfinite), str(s.repeated)),)
        return Table(("series", "steps", "mean range", "std range", "min", "max", "non-finite values", "repeated batches"), rows)
    rows = tuple(
        (str(r.step), fmt_number(r.mean), _z(r.z_mean), fmt_number(r.std), _z(r.z_std),
         fmt_number(r.min), fmt_number(r.max), fmt_number(r.nonfinite), _name(r.shape),
         shorten(clean(r.hash), 12), "yes" if r.repeated else "no")
        for r in table.rows)
    caption = (f"{role} `{_name(name)}` around the onset; z = distance from the median of the {table.baseline_steps} "
               "preceding steps in robust standard deviations (MAD).")
    return Table(("step", "mean", "z", "std", "z", "min", "max", "non-finite", "shape", "hash", "seen before"), rows, caption)


def _z(z: float | None) -> str:
    return "—" if z is None else fmt_number(z, 2)


def _capped(rows: list[tuple[str, ...]], caption: str) -> tuple[tuple[tuple[str, ...], ...], str]:
    """At most _MAX_TABLE_ROWS rows, saying so in the caption when rows were left out."""
    if len(rows) <= _MAX_TABLE_ROWS:
        return tuple(rows), caption
    return tuple(rows[:_MAX_TABLE_ROWS]), f"{caption} (first {_MAX_TABLE_ROWS} of {len(rows)})"


def _hyper_parameter(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_number(v) for v in value[:8])
    return fmt_number(value) if isinstance(value, (int, float)) or value is None else _name(value)


def _metadata(analysis) -> Section:
    data = analysis.data
    manifest = _mapping(data.manifest)
    fields = ("run_id", "status", "started_at", "ended_at", "last_step", "schema_version",
              "python_version", "torch_version", "host", "platform")
    rows = [(f, _name(manifest.get(f))) for f in fields if f in manifest]
    for key in ("options", "config"):
        if manifest.get(key):
            rows.append((key, shorten(clean(json.dumps(manifest[key], default=str, sort_keys=True)), 600)))
    rows.append(("run directory", _name(data.run_name)))
    tables = [Table(("field", "value"), tuple(rows), "Manifest" if manifest else "No manifest: values come from the segments.")]
    for model_name, model in _mapping(manifest.get("models")).items():
        model = _mapping(model)
        modules = [(_name(m.get("name")), _name(m.get("type"))) for m in _records(model.get("modules"))]
        params = [(_name(p.get("name")),
                   _name("×".join(map(str, p["shape"]))) if isinstance(p.get("shape"), list) and p["shape"] else "scalar",
                   _name(p.get("dtype")), fmt_number(p.get("requires_grad")))
                  for p in _records(model.get("parameters"))]
        label = f"Model `{_name(model_name)}` ({_name(model.get('class'))})"
        tables.append(Table(("module", "type"), *_capped(modules, f"{label}: modules"), collapsed=True))
        tables.append(Table(("parameter", "shape", "dtype", "requires grad"), *_capped(params, f"{label}: parameters"),
                            collapsed=True))
    for opt_name, optimizer in _mapping(manifest.get("optimizers")).items():
        optimizer = _mapping(optimizer)
        groups = _records(optimizer.get("param_groups"))
        keys = list(dict.fromkeys(k for g in groups for k in g if k != "params"))[:12]
        rows = [(str(i), *(_hyper_parameter(g.get(k)) for k in keys),
                 str(len(g["params"])) if isinstance(g.get("params"), list) else "—") for i, g in enumerate(groups)]
        tables.append(Table(("group", *(_name(k) for k in keys), "parameters"),
                            *_capped(rows, f"Optimizer `{_name(opt_name)}` ({_name(optimizer.get('class'))}) hyper-parameters")))
    checkpoints = [(fmt_number(c.step), _name(c.reason), _name(os.path.basename(str(c.path)))) for c in data.checkpoints]
    caption = "Checkpoints available (Parquet, loadable without torch)" if checkpoints else "No checkpoints were recorded."
    tables.append(Table(("step", "reason", "file"), *_capped(checkpoints, caption)))
    trace = ""
    exception = _mapping(manifest.get("exception"))
    if exception:
        trace = shorten(clean(f"{exception.get('type')}: {exception.get('message')}\n\n{exception.get('traceback') or ''}",
                              keep_newlines=True), 6000)
    return Section("metadata", "Run metadata", tables=tuple(tables), preformatted=trace)


# --- page ------------------------------------------------------------------------------------

def build_page(analysis, *, progress: Callable[[str], None] | None = None, version: str = "") -> Page:
    """Every section of the report for `analysis`; sections without data are left out."""
    report_progress = progress or (lambda label: None)
    markers = _markers(analysis)
    sections: list[Section | None] = []
    builders = [("timeline", lambda: _timeline(analysis, markers)),
                ("heatmap", lambda: _heatmap(analysis, markers)),
                ("tensors", lambda: _top_tensors(analysis, markers)),
                ("ranking", lambda: _ranking(analysis)),
                ("diagnoses", lambda: _diagnoses(analysis)),
                ("notes", lambda: _notes(analysis)),
                ("inputs", lambda: _input_health(analysis, markers)),
                ("metadata", lambda: _metadata(analysis))]
    if analysis.verdict == "not_learning":  # the diagnoses are the story: show them first
        builders.insert(0, builders.pop(4))
    for label, build in builders:
        report_progress(f"drawing {label}")
        sections.append(build())
    fixes = [f.fix for f in analysis.significant if f.fix and f.label != "healthy"]
    return Page(
        title=f"postmortem: {_name(analysis.data.run_name)}",
        verdict=analysis.verdict,
        headline=headline(analysis),
        facts=tuple(key_facts(analysis)),
        fix=shorten(clean(fixes[0]), 600) if fixes else "",
        sections=tuple(s for s in sections if s is not None),
        warnings=tuple(_name(w) for w in analysis.warnings),  # the run's own warnings are among them
        footer=f"postmortem {version}".strip(),
    )
