"""Figures for the report, drawn with matplotlib's Agg canvas and returned as PNG bytes.

Uses `matplotlib.figure.Figure` with an Agg canvas instead of pyplot: no global backend switch,
no figure registry to leak, safe to call from a library. Every `$` in a name from a run is
escaped, so a module named `a$b$` is drawn as text and cannot switch on (or break) mathtext.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, replace

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from postmortem.report_data import Curve, Matrix
from reports.text import clean, shorten

__all__ = ["Markers", "Panel", "line_panels", "heatmap", "DPI"]

DPI = 90  # modest: a report holds ~8 figures and must stay well under 2 MB
_WIDTH_IN = 11.0
_STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
}
_ONSET_COLOUR = "#d97706"
_NONFINITE_COLOUR = "#dc2626"
_EVENT_COLOUR = "#4b5563"
_ZERO_COLOUR = "#9ca3af"
_LEGEND_IN = 2.3  # right margin of line plots, where the legend goes


@dataclass(frozen=True)
class Markers:
    """Steps marked on every time axis: onset (with its interval), first non-finite, events
    (step, label), and the event kinds too many to draw (kind, count), which are not marked."""

    onset: int | None = None
    onset_interval: tuple[int, int] | None = None
    first_nonfinite: int | None = None
    events: tuple[tuple[int, str], ...] = ()
    events_left_out: tuple[tuple[str, int], ...] = ()

    def within(self, lo: int, hi: int) -> Markers:
        """The markers a plot of steps lo..hi can show (others would stretch its axis)."""
        inside = lambda step: step is not None and lo <= step <= hi  # noqa: E731
        return Markers(self.onset if inside(self.onset) else None,
                       self.onset_interval if inside(self.onset) else None,
                       self.first_nonfinite if inside(self.first_nonfinite) else None,
                       tuple(e for e in self.events if inside(e[0])), self.events_left_out)


@dataclass(frozen=True)
class Panel:
    """One axes of stacked line plots, one line per curve."""

    title: str
    ylabel: str
    curves: tuple[Curve, ...] = ()
    log: bool = True


def _margins(fig: Figure, *, left_in: float, axes_height_in: float, right_in: float = 0.15,
             gap_in: float = 0.55) -> None:
    """Fixed margins in inches: much cheaper than constrained layout, which redraws every text."""
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=left_in / width, right=1 - right_in / width, bottom=0.45 / height,
                        top=1 - 0.3 / height, hspace=gap_in / max(axes_height_in, 0.5))


def _png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    # zlib level 1, not the default 6: the same pixels, PNGs ~9 % larger, the 150 M-row
    # report's figures 0.12 s less CPU (docs/benchmarks.md, issue 18 part 1, session 9).
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None},
                pil_kwargs={"compress_level": 1})
    return buffer.getvalue()


def _label(name: str, limit: int = 48) -> str:
    return shorten(clean(name), limit).replace("$", r"\$")


def _legend_label(name: str, limit: int = 30) -> str:
    """Legend text that fits beside the plot: long names keep their start and their end
    (`model.encoder…q_proj.weight`), where the distinguishing parts usually are."""
    text = clean(name)
    if len(text) > limit:
        head = (limit - 1) // 2
        text = text[:head] + "…" + text[-(limit - 1 - head):]
    return text.replace("$", r"\$")


def _mark(ax, markers: Markers, *, first: bool) -> None:
    """Onset, first non-finite and event lines; the legend entries and event names on the first axes only."""
    if markers.onset_interval is not None:
        lo, hi = markers.onset_interval
        ax.axvspan(lo - 0.5, hi + 0.5, color=_ONSET_COLOUR, alpha=0.15, lw=0)
    if markers.onset is not None:
        ax.axvline(markers.onset, color=_ONSET_COLOUR, lw=1.5,
                   label=f"onset (step {markers.onset})" if first else None)
    if markers.first_nonfinite is not None:
        ax.axvline(markers.first_nonfinite, color=_NONFINITE_COLOUR, lw=1.5, ls="--",
                   label=f"first non-finite (step {markers.first_nonfinite})" if first else None)
    top = blended_transform_factory(ax.transData, ax.transAxes)
    for step, kind in markers.events:
        ax.axvline(step, color=_EVENT_COLOUR, lw=1, ls=":")
        if first:
            ax.text(step, 1.0, f" {_label(kind)}", transform=top, rotation=90, va="top",
                    ha="right", fontsize=7, color=_EVENT_COLOUR)


def _plot_curve(ax, curve: Curve, log: bool) -> None:
    steps, values, name = curve.steps, curve.values, curve.label
    finite = np.isfinite(values)
    if log:
        finite &= values > 0
    (line,) = ax.plot(steps[finite], values[finite], lw=1.2, label=_legend_label(name))
    nonfinite = ~np.isfinite(values)
    if nonfinite.any():  # NaN/inf cannot be drawn on the axis: mark them along the top edge
        top = blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(steps[nonfinite], np.full(nonfinite.sum(), 0.97), "x", color=line.get_color(),
                transform=top, ms=5)


def _loggable(arrays: list[np.ndarray]) -> bool:
    """Log scale fits norms and losses (zeros are left out); a negative value needs a linear axis."""
    values = _finite(arrays)
    return bool((values > 0).any() and not (values < 0).any())


def _finite(arrays: list[np.ndarray]) -> np.ndarray:
    values = np.concatenate(arrays) if arrays else np.array([])
    return values[np.isfinite(values)]


_SYMLOG_SPAN = 100.0
"""A panel with negative values whose largest |value| is this many times its typical one (a flow's
NLL of −0.5 with a spike to 700) gets a symmetric log axis: linear near 0, log beyond."""


def _linear_scale(ax, arrays: list[np.ndarray]) -> None:
    magnitude = np.abs(_finite(arrays))
    magnitude = magnitude[magnitude > 0]
    if len(magnitude) and magnitude.max() > _SYMLOG_SPAN * np.median(magnitude):
        # Most values stay on the linear part, which gets the room of two decades.
        ax.set_yscale("symlog", linthresh=float(np.quantile(magnitude, 0.9)), linscale=2.0)


def line_panels(panels: list[Panel], markers: Markers, *, panel_height: float = 2.4) -> bytes:
    """Stacked panels sharing the step axis, each with the onset/non-finite/event markers."""
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(_WIDTH_IN, panel_height * len(panels) + 0.4))
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
        _margins(fig, left_in=0.8, axes_height_in=panel_height - 0.45, right_in=_LEGEND_IN)
        for index, (ax, panel) in enumerate(zip(axes, panels)):
            log = panel.log and _loggable([c.values for c in panel.curves])
            for curve in panel.curves:
                _plot_curve(ax, curve, log)
            if log:
                ax.set_yscale("log")
            elif panel.log:
                _linear_scale(ax, [c.values for c in panel.curves])
            ax.set_title(_label(panel.title, 110), loc="left")
            ax.set_ylabel(_label(panel.ylabel))
            _mark(ax, markers, first=index == 0)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside, never over, the data
        axes[-1].set_xlabel("step")
        return _png(fig)


def heatmap(matrices: list[tuple[str, Matrix]], markers: Markers) -> bytes:
    """Tensors × steps colour maps, one per (title, matrix); red cells hold non-finite values,
    grey cells are exactly zero (no gradient, no update), white cells have no data."""
    rows = max(len(matrix.values.index) for _, matrix in matrices)
    height = min(max(1.6 + 0.16 * rows, 2.6), 9.0)
    with matplotlib.rc_context({**_STYLE, "axes.grid": False}):
        fig = Figure(figsize=(_WIDTH_IN, height * len(matrices)))
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(matrices), 1, squeeze=False)[:, 0]
        longest = max(len(_label(n)) for _, matrix in matrices for n in matrix.values.index)
        _margins(fig, left_in=min(0.3 + 0.06 * longest, 3.2), axes_height_in=height - 0.9, right_in=0.55,
                 gap_in=0.8)
        for ax, (title, matrix) in zip(axes, matrices):
            steps = matrix.values.columns.to_numpy()
            half = (steps[1] - steps[0]) / 2 if len(steps) > 1 else 0.5
            extent = (steps[0] - half, steps[-1] + half, len(matrix.values.index) - 0.5, -0.5)
            image = ax.imshow(matrix.values.to_numpy(dtype=float), aspect="auto", interpolation="nearest",
                              extent=extent, cmap="viridis")
            notes = []
            for mask, colour, note in ((matrix.zero, _ZERO_COLOUR, "grey: exactly 0"),
                                       (matrix.nonfinite, _NONFINITE_COLOUR, "red: non-finite values")):
                cells = mask.to_numpy(dtype=bool)
                if cells.any():
                    ax.imshow(np.where(cells, 1.0, np.nan), aspect="auto", interpolation="nearest",
                              extent=extent, cmap=ListedColormap([colour]), vmin=0, vmax=1)
                    notes.append(note)
            ax.set_yticks(range(len(matrix.values.index)), [_label(n) for n in matrix.values.index],
                          fontsize=7 if len(matrix.values.index) <= 40 else 5)
            ax.set_title(_label(title, 110) + (f"  ({'; '.join(notes)})" if notes else ""), loc="left")
            ax.set_xlabel("step")
            fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
            _mark(ax, replace(markers, onset_interval=None), first=False)
        return _png(fig)
