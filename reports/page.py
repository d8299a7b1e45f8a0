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

from recorders.vocabulary import RESERVED_PREFIXES, RESERVED_SCALARS
from reports import figures
from reports.aggregate import StepBins, binned_log_matrix, column_values, names_of, peak_by_name
from reports.figures import Markers, Panel
from reports.text import clean, fmt_growth, fmt_interval, fmt_number, fmt_step, shorten

__all__ = ["Fact", "Figure", "Table", "Diagnosis", "Section", "Page", "build_page", "headline", "key_facts"]

_MAX_HEATMAP_ROWS = 40
_MAX_HEATMAP_COLUMNS = 300
_TOP_TENSORS = 3
_MAX_ACTIVATIONS = 8
_MAX_TABLE_ROWS = 500
_INPUT_BASELINE_STEPS = 50
_MAX_EVENT_LINES = 40  # one line per step with events, on every panel: beyond this, the rarest kinds
# The recorder's own scalars and `lr` (docs/run-format.md), never a loss to plot.
_NOT_LOSSES = (*sorted(RESERVED_SCALARS), *RESERVED_PREFIXES, "lr")


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


def _tensor_label(tensor: object, role: object, key: object = None) -> str:
    label = f"{clean(role)} of `{_name(tensor)}`"
    return label + (f" ({clean(key)})" if key else "")


def headline(analysis) -> str:
    """One or two sentences that say what happened, when it began, where, and how fast."""
    onset, first = analysis.onset, analysis.first_nonfinite
    if analysis.verdict == "diverged":
        parts = ["Diverged."]
        if onset is not None:
            how = [f"jump ×{fmt_number(onset.jump)}" if onset.jump else "",
                   fmt_growth(onset.growth_per_step, onset.doubling_steps)]
            how = "; ".join(h for h in how if h)
            parts.append(f"The failure began at step {onset.step}{fmt_interval(onset.interval)}"
                         f" in {_name(onset.series)}" + (f": {how}." if how else "."))
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
            parts.append(f"First non-finite value at step {first.step} in the "
                         f"{_tensor_label(first.tensor, first.role, first.key)}{lead}.")
        else:
            parts.append("No non-finite value was recorded: the run stayed finite while diverging.")
        return " ".join(parts)
    labels = [f.label for f in analysis.significant if f.label != "healthy"]
    if analysis.verdict == "not_learning":
        return "Not learning: " + ", ".join(clean(label) for label in labels) + "." if labels \
            else "Not learning."
    steps = _step_count(analysis.run)
    if not any(f.label == "healthy" for f in analysis.findings):
        # The analyzer claims health only when it saw tensor statistics (see the warnings).
        return (f"No divergence found over {steps} recorded steps, but the run lacks the "
                "statistics to call it healthy: see the warnings.")
    text = f"Healthy: no divergence and no not-learning pattern over {steps} recorded steps."
    incident = next((f for f in analysis.significant if f.label == "recovered_incident"), None)
    if incident is not None:
        text = (f"Healthy, recovered: the run came back on its own from an incident at step "
                f"{incident.step} over {steps} recorded steps.")
        labels = [label for label in labels if label != "recovered_incident"]
    return text + (f" Also noted: {', '.join(clean(label) for label in labels)}." if labels else "")


def key_facts(analysis) -> list[Fact]:
    """The numbers a reader wants on the first screen, most telling first, omitting what does not apply."""
    facts: list[Fact] = []  # the verdict is the page's banner and the headline's first word
    onset, first = analysis.onset, analysis.first_nonfinite
    if onset is not None:
        facts.append(Fact("Onset", f"step {onset.step}{fmt_interval(onset.interval)}"))
        if onset.lead_steps is not None:
            facts.append(Fact("Lead time", f"{onset.lead_steps} steps before the first non-finite value"))
    if first is not None:
        facts.append(Fact("First non-finite", f"step {first.step}: {_tensor_label(first.tensor, first.role, first.key)}"))
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
        facts.append(Fact("Onset series", _name(onset.series)))
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
        facts += _training_facts(analysis.run)
    manifest = _mapping(analysis.run.manifest)
    facts.append(Fact("Steps recorded", str(_step_count(analysis.run))))
    status = _name(manifest.get("status", "unknown (no manifest)"))
    if _mapping(manifest.get("exception")):
        status += f": {_name(manifest['exception'].get('type'))}"
    facts.append(Fact("Run status", status))
    return facts


def _training_facts(run) -> list[Fact]:
    """How training went when nothing blew up: loss start → end, learning rate, update size."""
    scalars = run.scalars()
    facts = []
    for name in [n for n in scalars["name"].unique() if _is_loss(n)][:3]:
        loss = _series(scalars[scalars["name"] == name], "value").dropna()
        if len(loss) >= 2:
            n = max(1, min(10, len(loss) // 10))
            facts.append(Fact(f"{_name(name)} (median of first → last {n} steps)",
                              f"{fmt_number(loss.iloc[:n].median())} → {fmt_number(loss.iloc[-n:].median())}"))
    lr = _series(scalars[scalars["name"] == "lr"], "value").dropna()
    if len(lr):
        facts.append(Fact("Learning rate", fmt_number(lr.iloc[0]) if lr.nunique() == 1
                          else f"{fmt_number(lr.iloc[0])} → {fmt_number(lr.iloc[-1])}"))
    ratio = column_values(run, role="update", column="ratio")
    if len(ratio):
        facts.append(Fact("Median update / parameter ratio", f"{fmt_number(np.median(ratio))} (≈1e-3 is typical)"))
    return facts


def _is_loss(name: object) -> bool:
    return not str(name).startswith(_NOT_LOSSES)


def _event_before_onset(analysis) -> str:
    """The last recorded event at or before the onset interval: a likely trigger, with its distance."""
    if analysis.onset is None:
        return ""
    events = analysis.run.events()
    before = events[events["step"] <= analysis.onset.interval[1]]
    if before.empty:
        return ""
    row = before.iloc[-1]
    gap = analysis.onset.step - int(row["step"])
    return f"{_name(row['kind'])} at step {int(row['step'])} ({gap} steps before the onset)"


def _recorded_steps(run) -> np.ndarray:
    """The distinct steps of the run, from the scalars or, when a crash left none, the stats."""
    steps = run.scalars()["step"].unique()
    return steps if len(steps) else run.stats(columns=["step"])["step"].unique()


def _step_count(run) -> int:
    return len(_recorded_steps(run))


# --- data helpers ----------------------------------------------------------------------------

def _stats(run, roles: list[str], columns: list[str]) -> pd.DataFrame:
    return run.stats(roles=roles, columns=["step", "role", "name", "key", *columns])


def _mapping(value: object) -> dict:
    """A manifest field that should be a JSON object; anything else (a hostile or broken
    manifest) reads as empty rather than failing the report."""
    return value if isinstance(value, dict) else {}


def _records(value: object) -> list[dict]:
    """A manifest field that should be a list of objects, keeping only the objects."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _model_order(run) -> dict[str, int]:
    """Tensor/module name -> position in the model, so tables and heatmaps read input to output."""
    order: dict[str, int] = {}
    models = _mapping(_mapping(run.manifest).get("models"))
    prefix = len(models) > 1
    for model_name, model in models.items():
        for kind in ("modules", "parameters"):
            for entry in _records(_mapping(model).get(kind)):
                name = f"{model_name}.{entry.get('name')}" if prefix else str(entry.get("name"))
                order.setdefault(name, len(order))
    return order


def _ordered(names, order: dict[str, int]) -> list[str]:
    return sorted(set(names), key=lambda n: (order.get(n, len(order)), n))


def _window(analysis, steps: np.ndarray) -> tuple[int, int]:
    """Steps shown around the onset: a stable stretch before it through the first non-finite value."""
    first_step, last_step = int(steps.min()), int(steps.max())
    if analysis.onset is None:
        return first_step, last_step
    lo, hi = (int(v) for v in analysis.onset.interval)
    end = analysis.first_nonfinite.step if analysis.first_nonfinite is not None else last_step
    span = max(int(end) - lo, hi - lo, 15)
    return max(first_step, lo - 2 * span), min(last_step, int(end) + max(span // 4, 3))


def _event_lines(events: pd.DataFrame) -> tuple[tuple[tuple[int, str], ...], tuple[tuple[str, int], ...]]:
    """Event lines to draw, one per step (its kinds joined), and the kinds left undrawn with
    their counts. Rare kinds are drawn first: a `domain_switch` must stay visible in a flood of
    `batch_loaded` events, and a kind is drawn at all its steps or not at all."""
    if events.empty:
        return (), ()
    kinds = events["kind"].astype(str).to_numpy()
    steps = events["step"].astype(np.int64).groupby(kinds, sort=False).unique()
    counts = pd.Series(kinds).value_counts(sort=False).sort_values(kind="stable")
    drawn, left_out, lines = set(), [], set()
    for kind, count in counts.items():
        at = lines | set(steps[kind].tolist())
        if len(at) <= _MAX_EVENT_LINES:
            drawn.add(kind)
            lines = at
        else:
            left_out.append((kind, int(count)))
    shown = pd.DataFrame({"step": events["step"].to_numpy(), "kind": kinds})[np.isin(kinds, list(drawn))]
    labels = shown.groupby("step", sort=True)["kind"].agg(lambda k: ", ".join(dict.fromkeys(k)))
    return tuple((int(s), k) for s, k in labels.items()), tuple(left_out)


def _markers(analysis) -> Markers:
    onset = analysis.onset
    events, left_out = _event_lines(analysis.run.events())
    return Markers(
        onset=None if onset is None else int(onset.step),
        onset_interval=None if onset is None else tuple(int(v) for v in onset.interval),
        first_nonfinite=None if analysis.first_nonfinite is None else int(analysis.first_nonfinite.step),
        events=events,
        events_left_out=left_out,
    )


def _series(frame: pd.DataFrame, column: str) -> pd.Series:
    """One series indexed by step (last occurrence wins, as in the run format)."""
    return frame.drop_duplicates("step", keep="last").set_index("step")[column].sort_index()


# --- sections --------------------------------------------------------------------------------

def _timeline(analysis, markers: Markers) -> Section | None:
    scalars = analysis.run.scalars()
    if scalars.empty:
        return None
    names = [n for n in scalars["name"].unique() if _is_loss(n)]
    norms = [n for n in scalars["name"].unique() if str(n) == "grad_norm" or str(n).startswith("grad_norm.")]
    panels = []
    if names:
        panels.append(Panel("Losses", "value", {n: _series(scalars[scalars["name"] == n], "value") for n in names[:8]}))
    if norms:
        panels.append(Panel("Global gradient norm", "L2 norm", {n: _series(scalars[scalars["name"] == n], "value") for n in norms}))
    if scalars.loc[scalars["name"] == "lr", "value"].nunique() > 1:  # a constant lr is in the metadata
        panels.append(Panel("Learning rate", "lr", {"lr": _series(scalars[scalars["name"] == "lr"], "value")}))
    if not panels:
        return None
    png = figures.line_panels(panels, markers)
    left_out = "; ".join(f"{_name(kind)} ({count} events)" for kind, count in markers.events_left_out[:10])
    return Section("timeline", "Timeline", paragraphs=(
        "Losses and global gradient norm per step (log scale). Orange: onset and its interval; red dashed: "
        "first non-finite value; dotted: recorded events; × on the top edge: non-finite values."
        + (f" Events too many to draw: {left_out}." if left_out else ""),),
        figures=(Figure("Timeline", png, "Losses, gradient norm and learning rate per step"),))


def _heatmap(analysis, markers: Markers, window: tuple[int, int], order: dict[str, int]) -> Section | None:
    run = analysis.run
    names = names_of(run, "grad")
    if not names:
        return None
    rows = _ordered(names, order)
    hidden = 0
    if len(rows) > _MAX_HEATMAP_ROWS:
        ranked = [r.tensor for r in analysis.ranking if r.tensor in set(rows)]
        keep = list(dict.fromkeys(ranked + rows))[:_MAX_HEATMAP_ROWS]
        hidden = len(rows) - len(keep)
        rows = _ordered(keep, order)
    bins = StepBins.covering(*window, _MAX_HEATMAP_COLUMNS)
    matrices = [("log10 gradient norm", binned_log_matrix(run, role="grad", column="norm", names=rows, bins=bins))]
    ratios = binned_log_matrix(run, role="update", column="ratio", names=rows, bins=bins)
    if ratios.values.notna().any().any() or ratios.zero.any().any():
        matrices.append(("log10 update / parameter ratio (typical ≈ -3)", ratios))
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


def _focus_tensors(analysis, names: set[str], order: dict[str, int]) -> list[str]:
    """Tensors worth a close look: ranked first, then those named by diagnoses, else a spread."""
    chosen = [r.tensor for r in analysis.ranking if r.role in ("param", "grad", "update", "state")]
    chosen += [t for f in analysis.findings for t in (f.tensors or [])]
    chosen = [t for t in dict.fromkeys(chosen) if t in names]
    if not chosen:  # healthy: first, middle and last layer, weights rather than biases
        ordered = _ordered(names, order)
        ordered = [n for n in ordered if not n.endswith(".bias")] or ordered
        chosen = list(dict.fromkeys([ordered[0], ordered[len(ordered) // 2], ordered[-1]]))
    return chosen[:_TOP_TENSORS]


def _top_tensors(analysis, markers: Markers, window: tuple[int, int], order: dict[str, int]) -> Section | None:
    run = analysis.run
    in_window = lambda frame: frame[(frame["step"] >= window[0]) & (frame["step"] <= window[1])]  # noqa: E731
    panels = []
    names = names_of(run, "grad") or names_of(run, "param")
    if names:
        focus = _focus_tensors(analysis, set(names), order)
        tensors = in_window(run.stats(roles=["param", "grad", "update", "state"], names=focus, columns=["norm"]))
        for tensor in focus:
            rows = tensors[tensors["name"] == tensor]
            series = {}
            for (role, key), group in rows.groupby(["role", rows["key"].fillna("")], sort=False):
                series[f"{role} {key}".strip() + " norm"] = _series(group, "norm")
            panels.append(Panel(f"`{tensor}`: parameter, gradient, update and optimizer state", "L2 norm", series))
    peaks = peak_by_name(run, role="activation", column="max_abs")
    if peaks:
        ranked = [r.tensor for r in analysis.ranking if r.role == "activation" and r.tensor in peaks]
        loudest = sorted(peaks, key=peaks.get, reverse=True)
        modules = _ordered(list(dict.fromkeys(ranked + loudest))[:_MAX_ACTIVATIONS], order)
        activations = in_window(run.stats(roles=["activation"], names=modules, columns=["max_abs", "zero_frac", "sat_frac"]))
        by_module = {m: activations[activations["name"] == m] for m in modules}
        panels.append(Panel("Activations: largest absolute value", "max |a|",
                            {m: _series(rows, "max_abs") for m, rows in by_module.items()}))
        if activations["zero_frac"].max() > 0.05:  # a flat zero line (LeakyReLU, Tanh) tells nothing
            panels.append(Panel("Activations: fraction of zeros (dead units)", "fraction",
                                {m: _series(rows, "zero_frac") for m, rows in by_module.items()}, log=False))
        bounded = {m: rows for m, rows in by_module.items() if rows["sat_frac"].notna().any()}
        if bounded:
            panels.append(Panel("Activations: fraction saturated", "fraction",
                                {m: _series(rows, "sat_frac") for m, rows in bounded.items()}, log=False))
    if not panels:
        return None
    png = figures.line_panels(panels, markers.within(*window), panel_height=2.1)
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
    stats = _stats(analysis.run, ["input", "target"], ["mean", "std", "min", "max", "nonfinite", "hash", "shape"])
    if stats.empty:
        return None
    stats = stats.drop_duplicates(["step", "role", "name"], keep="last").sort_values("step")
    inputs = stats[stats["role"] == "input"]
    panels = [Panel(f"{_name(name)}: mean, std, min, max", "value",
                    {c: _series(group, c) for c in ("mean", "std", "min", "max")}, log=False)
              for name, group in inputs.groupby("name", sort=True)][:2]
    tables = []
    for (role, name), group in stats.groupby(["role", "name"], sort=True):
        group = group.reset_index(drop=True)
        first_seen = group.groupby("hash")["step"].transform("min")
        repeated = (first_seen < group["step"]) & group["hash"].notna()
        if analysis.onset is None:
            rows = ((f"{role} {_name(name)}", str(len(group)), f"{fmt_number(group['mean'].min())} … {fmt_number(group['mean'].max())}",
                     f"{fmt_number(group['std'].min())} … {fmt_number(group['std'].max())}",
                     fmt_number(group["min"].min()), fmt_number(group["max"].max()),
                     fmt_number(int(group["nonfinite"].fillna(0).sum())), str(int(repeated.sum()))),)
            tables.append(Table(("series", "steps", "mean range", "std range", "min", "max", "non-finite values", "repeated batches"), rows))
            continue
        lo, hi = analysis.onset.interval
        before = group[group["step"] < lo - 3].tail(_INPUT_BASELINE_STEPS)  # recent: a domain switch moves the baseline
        centre_m, spread_m = _robust(before["mean"])
        centre_s, spread_s = _robust(before["std"])
        near = group[(group["step"] >= lo - 3) & (group["step"] <= hi + 2)]
        rows = tuple(
            (str(int(r.step)), fmt_number(r.mean), _z(r.mean, centre_m, spread_m), fmt_number(r.std), _z(r.std, centre_s, spread_s),
             fmt_number(r.min), fmt_number(r.max), fmt_number(r.nonfinite), _name(r.shape),
             shorten(clean(r.hash), 12), "yes" if repeated.loc[r.Index] else "no")
            for r in near.itertuples())
        caption = (f"{role} `{_name(name)}` around the onset; z = distance from the median of the {len(before)} "
                   "preceding steps in robust standard deviations (MAD).")
        tables.append(Table(("step", "mean", "z", "std", "z", "min", "max", "non-finite", "shape", "hash", "seen before"), rows, caption))
    where = "at the onset" if analysis.onset is not None else "over the run"
    figs = (Figure("Input statistics", figures.line_panels(panels, markers, panel_height=2.0), "Input statistics per step"),) if panels else ()
    return Section("inputs", f"Input and batch health {where}", figures=figs, tables=tuple(tables))


def _robust(values: pd.Series) -> tuple[float, float]:
    values = values.dropna().astype(float)
    if values.empty:
        return float("nan"), float("nan")
    centre = float(values.median())
    return centre, 1.4826 * float((values - centre).abs().median())


def _z(value: float, centre: float, spread: float) -> str:
    if not np.isfinite(spread) or spread == 0 or value is None or not np.isfinite(value):
        return "—"
    return fmt_number((value - centre) / spread, 2)


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
    run = analysis.run
    manifest = _mapping(run.manifest)
    fields = ("run_id", "status", "started_at", "ended_at", "last_step", "schema_version",
              "python_version", "torch_version", "host", "platform")
    rows = [(f, _name(manifest.get(f))) for f in fields if f in manifest]
    for key in ("options", "config"):
        if manifest.get(key):
            rows.append((key, shorten(clean(json.dumps(manifest[key], default=str, sort_keys=True)), 600)))
    rows.append(("run directory", _name(os.path.basename(os.path.normpath(str(run.path))))))
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
    checkpoints = [(fmt_number(c.step), _name(c.reason), _name(os.path.basename(str(c.path)))) for c in run.checkpoints]
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
    run = analysis.run
    markers = _markers(analysis)
    order = _model_order(run)
    steps = _recorded_steps(run)
    window = _window(analysis, steps) if len(steps) else (0, 0)
    sections: list[Section | None] = []
    builders = [("timeline", lambda: _timeline(analysis, markers)),
                ("heatmap", lambda: _heatmap(analysis, markers, window, order)),
                ("tensors", lambda: _top_tensors(analysis, markers, window, order)),
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
    run_name = os.path.basename(os.path.normpath(str(run.path)))
    return Page(
        title=f"postmortem: {_name(run_name)}",
        verdict=analysis.verdict,
        headline=headline(analysis),
        facts=tuple(key_facts(analysis)),
        fix=shorten(clean(fixes[0]), 600) if fixes else "",
        sections=tuple(s for s in sections if s is not None),
        warnings=tuple(_name(w) for w in [*run.warnings, *analysis.warnings]),
        footer=f"postmortem {version}".strip(),
    )
