"""What a report shows of the run, reduced while `analyze` holds the run in memory.

The renderers (reports/) read only this: the curves and matrices the figures draw, the input
statistics its tables list, the events marked on every time axis, the manifest and the
checkpoints. They never open the run directory, so a report can be rendered after it is gone.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .findings import CheckpointInfo, Finding, FirstNonfinite, Onset, RankedTensor
from .loading import Run
from .manifest import frozen_parameters, manifest_order
from .onset import _robust_sigma
from .scalars import is_loss, recorder_scalar
from .series import SeriesTable, read_series
from .story import events_before

__all__ = ["Curve", "StepBins", "Matrix", "Heatmap", "TensorCurves", "Activations", "EventLines",
           "InputRow", "InputSummary", "InputTable", "InputHealth", "ReportData", "report_data", "binned_log_matrix"]

_MAX_LOSSES = 8
_MAX_HEATMAP_ROWS = 40
_MAX_HEATMAP_COLUMNS = 300
_TOP_TENSORS = 3
_MAX_ACTIVATIONS = 8
_MAX_INPUT_PANELS = 2
_INPUT_BASELINE_STEPS = 50
_MAX_EVENT_LINES = 40  # one line per step with events, on every panel: beyond this, the rarest kinds
_TENSOR_ROLES = ("param", "grad", "update", "state")


@dataclass(frozen=True, eq=False)
class Curve:
    """One drawn line: a value per step, steps ascending and distinct (the last write wins)."""

    label: str
    steps: np.ndarray
    values: np.ndarray

    def present(self) -> np.ndarray:
        """The values that were recorded (NaN is a missing value; ±inf is kept)."""
        return self.values[~np.isnan(self.values)]


@dataclass(frozen=True)
class StepBins:
    """Steps lo..hi cut into bins of `width` steps (width 1: one column per step)."""

    lo: int
    hi: int
    width: int

    @classmethod
    def covering(cls, lo: int, hi: int, max_columns: int) -> StepBins:
        return cls(lo, hi, max(1, math.ceil((hi - lo + 1) / max_columns)))

    @property
    def count(self) -> int:
        return (self.hi - self.lo) // self.width + 1

    @property
    def starts(self) -> np.ndarray:
        return self.lo + np.arange(self.count) * self.width


@dataclass(frozen=True, eq=False)
class Matrix:
    """Tensors × step bins: log10 values (NaN where no positive finite data), and masks of the
    cells holding non-finite values and of the cells where every value is exactly zero."""

    values: pd.DataFrame
    nonfinite: pd.DataFrame
    zero: pd.DataFrame


@dataclass(frozen=True, eq=False)
class Heatmap:
    """Per-tensor gradient norms (and update ratios, when recorded) in model order."""

    bins: StepBins
    grad_norm: Matrix
    update_ratio: Matrix | None
    hidden: int  # tensors left out to keep the map readable


@dataclass(frozen=True, eq=False)
class TensorCurves:
    """The norms of one tensor's parameter, gradient, update and optimizer state."""

    tensor: str
    curves: tuple[Curve, ...]


@dataclass(frozen=True, eq=False)
class Activations:
    """Activation statistics of the loudest (and ranked) modules, in model order."""

    max_abs: tuple[Curve, ...]
    zero_frac: tuple[Curve, ...]  # empty when no module has more than 5 % zeros
    sat_frac: tuple[Curve, ...]  # bounded modules only


@dataclass(frozen=True)
class EventLines:
    """Event lines to draw, (step, kinds joined), and the kinds too many to draw, (kind, count)."""

    lines: tuple[tuple[int, str], ...] = ()
    left_out: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class InputRow:
    """One input/target batch near the onset; z = robust distance from the preceding steps."""

    step: int
    mean: float
    z_mean: float | None
    std: float
    z_std: float | None
    min: float
    max: float
    nonfinite: float
    shape: object
    hash: object
    repeated: bool


@dataclass(frozen=True)
class InputSummary:
    """One input/target series over the whole run (a run without an onset)."""

    steps: int
    mean_range: tuple[float, float]
    std_range: tuple[float, float]
    min: float
    max: float
    nonfinite: int
    repeated: int  # batches whose content hash was seen at an earlier step


@dataclass(frozen=True)
class InputTable:
    """One input/target series: its near-onset rows and baseline size, or (no onset) a summary."""

    role: str
    name: str
    rows: tuple[InputRow, ...] = ()
    baseline_steps: int = 0
    summary: InputSummary | None = None


@dataclass(frozen=True, eq=False)
class InputHealth:
    panels: tuple[tuple[str, tuple[Curve, ...]], ...]  # (input name, its mean/std/min/max curves)
    tables: tuple[InputTable, ...]


@dataclass(frozen=True, eq=False)
class ReportData:
    run_name: str
    manifest: dict
    checkpoints: tuple[CheckpointInfo, ...]
    step_count: int
    window: tuple[int, int]  # steps shown around the onset (the whole run without one)
    losses: tuple[Curve, ...]  # in order of first appearance (tensors and modules are in model order)
    metrics: tuple[Curve, ...]  # the other scalars passed to rec.step() (accuracy, ...)
    grad_norms: tuple[Curve, ...]
    lr: Curve | None
    median_update_ratio: float | None
    events: EventLines
    last_event: tuple[int, str] | None  # (step, kind) of the last event up to the onset interval
    heatmap: Heatmap | None
    tensors: tuple[TensorCurves, ...]
    activations: Activations | None
    inputs: InputHealth | None


def report_data(run: Run, *, onset: Onset | None, first_nonfinite: FirstNonfinite | None,
                ranking: list[RankedTensor], findings: list[Finding], table: SeriesTable | None = None,
                scalars: pd.DataFrame | None = None, events: pd.DataFrame | None = None) -> ReportData:
    """Everything a report shows of `run` for these findings; `table`, `scalars` and `events`
    are the run's, passed when already read."""
    table = read_series(run) if table is None else table
    scalars = run.scalars() if scalars is None else scalars
    events = run.events() if events is None else events
    order = manifest_order(run.manifest if isinstance(run.manifest, dict) else {})
    steps = scalars["step"].unique()
    steps = steps if len(steps) else np.unique(table.recorded_steps())
    window = _window(steps, onset, first_nonfinite) if len(steps) else (0, 0)
    by_name = _scalar_curves(scalars)
    loss_names = tuple(n for n in by_name if is_loss(n))
    focus = _focus_tensors(table, ranking, findings, order)
    return ReportData(
        run_name=os.path.basename(os.path.normpath(str(run.path))),
        manifest=run.manifest,
        checkpoints=tuple(run.checkpoints),
        step_count=len(steps),
        window=window,
        losses=tuple(by_name[n] for n in loss_names[:_MAX_LOSSES]),
        metrics=tuple(c for n, c in by_name.items() if not is_loss(n) and not recorder_scalar(n))[:_MAX_LOSSES],
        grad_norms=tuple(c for n, c in by_name.items() if n == "grad_norm" or n.startswith("grad_norm.")),
        lr=by_name.get("lr"),
        median_update_ratio=_median_update_ratio(table, frozen_parameters(run.manifest if isinstance(run.manifest, dict) else {})),
        events=_event_lines(events),
        last_event=_last_event(events, onset),
        heatmap=_heatmap(table, ranking, order, window),
        tensors=tuple(_tensor_curves(table, t, window) for t in focus),
        activations=_activations(table, ranking, order, window),
        inputs=_input_health(table, onset),
    )


def _curve(label: str, steps: np.ndarray, values: np.ndarray) -> Curve:
    """Steps ascending, the last occurrence of a repeated step kept (as in the run format)."""
    steps = np.asarray(steps, np.int64)
    values = np.asarray(values, np.float64)
    if len(steps) > 1 and not np.all(steps[1:] > steps[:-1]):
        unique, last = np.unique(steps[::-1], return_index=True)
        steps, values = unique, values[::-1][last]
    return Curve(label, steps, values)


def _scalar_curves(scalars: pd.DataFrame) -> dict[str, Curve]:
    """Name -> its curve, names in order of first appearance."""
    codes, names = pd.factorize(scalars["name"].astype(str))
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
    steps, values = scalars["step"].to_numpy(np.int64)[order], scalars["value"].to_numpy(np.float64)[order]
    return {str(name): _curve(str(name), steps[lo:hi], values[lo:hi])
            for name, lo, hi in zip(names, bounds[:-1], bounds[1:])}


def _window(steps: np.ndarray, onset: Onset | None, first: FirstNonfinite | None) -> tuple[int, int]:
    """Steps shown around the onset: a stable stretch before it through the first non-finite value."""
    first_step, last_step = int(steps.min()), int(steps.max())
    if onset is None:
        return first_step, last_step
    lo, hi = (int(v) for v in onset.interval)
    end = first.step if first is not None else last_step
    span = max(int(end) - lo, hi - lo, 15)
    return max(first_step, lo - 2 * span), min(last_step, int(end) + max(span // 4, 3))


def _ordered(names, order: dict[str, int]) -> list[str]:
    return sorted(set(names), key=lambda n: (order.get(n, len(order)), n))


def _series_of(table: SeriesTable, roles: tuple[str, ...], names: set[str]) -> list[int]:
    return [i for i, k in enumerate(table.keys) if k.role in roles and k.name in names]


def _names(table: SeriesTable, role: str) -> list[str]:
    return sorted({k.name for k in table.keys if k.role == role})


def _in_window(table: SeriesTable, index: int, window: tuple[int, int]) -> slice:
    rows = table.rows(index)
    steps = table.step[rows]
    lo, hi = np.searchsorted(steps, window[0], "left"), np.searchsorted(steps, window[1], "right")
    return slice(rows.start + int(lo), rows.start + int(hi))


def _median_update_ratio(table: SeriesTable, frozen: set[str]) -> float | None:
    """Over the parameters the optimizer trains: a frozen base (LoRA's) updates by 0 by design."""
    parts = [table.column(i, "ratio") for i in table.indices("update") if table.keys[i].name not in frozen]
    values = np.concatenate(parts).astype(np.float64) if parts else np.zeros(0)
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else None


def binned_log_matrix(table: SeriesTable, *, role: str, column: str | None, names: list[str],
                      bins: StepBins) -> Matrix:
    """log10 of a statistic (`column`, or the magnitude: the norm) for `names` × step bins, the
    largest value of each bin (spikes stay visible)."""
    shape = (len(names), bins.count)
    peak = np.full(shape, -np.inf)
    seen = np.zeros(shape, dtype=np.int64)
    zeros = np.zeros(shape, dtype=np.int64)
    nonfinite = np.zeros(shape, dtype=bool)
    index = {name: row for row, name in enumerate(names)}
    for series in _series_of(table, (role,), set(names)):
        rows = _in_window(table, series, (bins.lo, bins.hi))
        if rows.stop <= rows.start:
            continue
        cells = index[table.keys[series].name] * bins.count + (table.step[rows] - bins.lo) // bins.width
        values = _values(table, series, rows, column)
        with np.errstate(divide="ignore", invalid="ignore"):
            np.fmax.at(peak.ravel(), cells, np.log10(values))  # fmax skips the NaN of negatives and nulls
        np.add.at(seen.ravel(), cells, 1)
        np.add.at(zeros.ravel(), cells, values == 0)
        np.logical_or.at(nonfinite.ravel(), cells, table.nonfinite[rows] > 0)
    frame = lambda data: pd.DataFrame(data, index=names, columns=bins.starts)  # noqa: E731
    values = np.where(np.isfinite(peak), peak, np.nan)
    return Matrix(frame(values), frame(nonfinite), frame((seen > 0) & (zeros == seen) & ~nonfinite))


def _values(table: SeriesTable, series: int, rows: slice, column: str | None) -> np.ndarray:
    """`column` (or the magnitude, None) of `rows`, a slice of series `series`, as float64."""
    if column is None:
        return table.magnitude[rows].astype(np.float64)
    start = int(table.offsets[series])
    return table.column(series, column)[rows.start - start:rows.stop - start].astype(np.float64)


def _heatmap(table: SeriesTable, ranking: list[RankedTensor], order: dict[str, int],
             window: tuple[int, int]) -> Heatmap | None:
    names = _names(table, "grad")
    if not names:
        return None
    rows = _ordered(names, order)
    hidden = 0
    if len(rows) > _MAX_HEATMAP_ROWS:
        ranked = [r.tensor for r in ranking if r.tensor in set(rows)]
        keep = list(dict.fromkeys(ranked + rows))[:_MAX_HEATMAP_ROWS]
        hidden = len(rows) - len(keep)
        rows = _ordered(keep, order)
    bins = StepBins.covering(*window, _MAX_HEATMAP_COLUMNS)
    grads = binned_log_matrix(table, role="grad", column=None, names=rows, bins=bins)
    ratios = binned_log_matrix(table, role="update", column="ratio", names=rows, bins=bins)
    drawn = ratios.values.notna().any().any() or ratios.zero.any().any()
    return Heatmap(bins, grads, ratios if drawn else None, hidden)


def _focus_tensors(table: SeriesTable, ranking: list[RankedTensor], findings: list[Finding],
                   order: dict[str, int]) -> list[str]:
    """Tensors worth a close look: ranked first, then those named by diagnoses, else a spread."""
    names = set(_names(table, "grad") or _names(table, "param"))
    if not names:
        return []
    chosen = [r.tensor for r in ranking if r.role in _TENSOR_ROLES]
    chosen += [t for f in findings for t in (f.tensors or [])]
    chosen = [t for t in dict.fromkeys(chosen) if t in names]
    if not chosen:  # healthy: first, middle and last layer, weights rather than biases
        ordered = _ordered(names, order)
        ordered = [n for n in ordered if not n.endswith(".bias")] or ordered
        chosen = list(dict.fromkeys([ordered[0], ordered[len(ordered) // 2], ordered[-1]]))
    return chosen[:_TOP_TENSORS]


def _tensor_curves(table: SeriesTable, tensor: str, window: tuple[int, int]) -> TensorCurves:
    curves = []
    for series in _series_of(table, _TENSOR_ROLES, {tensor}):
        rows = _in_window(table, series, window)
        if rows.stop > rows.start:
            key = table.keys[series]
            label = f"{key.role} {key.key or ''}".strip() + " norm"
            curves.append(Curve(label, table.step[rows].copy(), table.magnitude[rows].astype(np.float64)))
    return TensorCurves(tensor, tuple(curves))


def _activations(table: SeriesTable, ranking: list[RankedTensor], order: dict[str, int],
                 window: tuple[int, int]) -> Activations | None:
    peaks: dict[str, float] = {}
    for i in table.indices("activation"):
        values = table.magnitude[table.rows(i)]
        values = values[np.isfinite(values)]
        if len(values):
            name = table.keys[i].name
            peaks[name] = max(float(values.max()), peaks.get(name, -np.inf))
    if not peaks:
        return None
    ranked = [r.tensor for r in ranking if r.role == "activation" and r.tensor in peaks]
    loudest = sorted(peaks, key=peaks.get, reverse=True)
    modules = _ordered(list(dict.fromkeys(ranked + loudest))[:_MAX_ACTIVATIONS], order)
    index = {table.keys[i].name: i for i in table.indices("activation")}
    shown = {m: _in_window(table, index[m], window) for m in modules}
    curve = lambda m, column: Curve(m, table.step[shown[m]].copy(), _values(table, index[m], shown[m], column))  # noqa: E731
    max_abs = tuple(curve(m, None) for m in modules)
    zero_frac = tuple(curve(m, "zero_frac") for m in modules)
    sat_frac = tuple(curve(m, "sat_frac") for m in modules)
    zeros = np.concatenate([c.present() for c in zero_frac])
    return Activations(
        max_abs,
        zero_frac if len(zeros) and zeros.max() > 0.05 else (),  # a flat zero line (LeakyReLU, Tanh) tells nothing
        tuple(c for c in sat_frac if (~np.isnan(c.values)).any()))


def _event_lines(events: pd.DataFrame) -> EventLines:
    """One line per step (its kinds joined). Rare kinds are drawn first: a `domain_switch` must
    stay visible in a flood of `batch_loaded` events, and a kind is drawn at all its steps or not
    at all."""
    if events.empty:
        return EventLines()
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
    return EventLines(tuple((int(s), k) for s, k in labels.items()), tuple(left_out))


def _last_event(events: pd.DataFrame, onset: Onset | None) -> tuple[int, str] | None:
    """The last event recorded up to the onset: a likely trigger."""
    if onset is None:
        return None
    before = events_before(events, onset)
    if before.empty:
        return None
    row = before.iloc[-1]
    return int(row["step"]), str(row["kind"])


def _input_health(table: SeriesTable, onset: Onset | None) -> InputHealth | None:
    stats = table.input_rows  # every input/target row, read in the analysis's one pass
    if stats.empty:
        return None
    stats = stats.drop_duplicates(["step", "role", "name"], keep="last").sort_values("step")
    inputs = stats[stats["role"] == "input"]
    panels = tuple(
        (str(name), tuple(_curve(c, group["step"].to_numpy(), group[c].to_numpy(np.float64))
                          for c in ("mean", "std", "min", "max")))
        for name, group in inputs.groupby("name", sort=True))[:_MAX_INPUT_PANELS]
    tables = tuple(_input_table(str(role), str(name), group.reset_index(drop=True), onset)
                   for (role, name), group in stats.groupby(["role", "name"], sort=True))
    return InputHealth(panels, tables)


def _input_table(role: str, name: str, group: pd.DataFrame, onset: Onset | None) -> InputTable:
    first_seen = group.groupby("hash")["step"].transform("min")
    repeated = (first_seen < group["step"]) & group["hash"].notna()
    if onset is None:
        return InputTable(role, name, summary=InputSummary(
            len(group), (group["mean"].min(), group["mean"].max()), (group["std"].min(), group["std"].max()),
            group["min"].min(), group["max"].max(), int(group["nonfinite"].fillna(0).sum()), int(repeated.sum())))
    lo, hi = onset.interval
    before = group[group["step"] < lo - 3].tail(_INPUT_BASELINE_STEPS)  # recent: a domain switch moves the baseline
    centre_m, spread_m = _robust(before["mean"])
    centre_s, spread_s = _robust(before["std"])
    near = group[(group["step"] >= lo - 3) & (group["step"] <= hi + 2)]
    rows = tuple(
        InputRow(int(r.step), r.mean, _z(r.mean, centre_m, spread_m), r.std, _z(r.std, centre_s, spread_s),
                 r.min, r.max, r.nonfinite, r.shape, r.hash, bool(repeated.loc[r.Index]))
        for r in near.itertuples())
    return InputTable(role, name, rows, len(before))


def _robust(values: pd.Series) -> tuple[float, float]:
    """Median and robust σ (onset's rule: 1.4826 × MAD) of the recorded values."""
    values = values.dropna().to_numpy(np.float64)
    if not len(values):
        return float("nan"), float("nan")
    return float(np.median(values)), _robust_sigma(values)


def _z(value: float, centre: float, spread: float) -> float | None:
    if not np.isfinite(spread) or spread == 0 or value is None or not np.isfinite(value):
        return None
    return (value - centre) / spread
