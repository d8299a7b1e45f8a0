"""Deterministic run directories written straight from docs/run-format.md (no torch, no recorder).

They give the report tests exact, platform-independent inputs: a diverging run whose gradients jump
and then grow from a known step, a healthy one, and one whose parameters never move. The analyses
below are built by hand from the analyzer's own result types, so the rendering tests check a known
analysis, independent of how the detectors evolve.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from postmortem import Analysis, Finding, FirstNonfinite, Onset, RankedTensor, load_run
from postmortem.detectors import OutcomeThresholds, measure_outcome
from postmortem.detectors.base import loss_curve, main_loss, metric_curves
from postmortem.loading import EVENTS_SCHEMA, SCALARS_SCHEMA, STATS_SCHEMA
from postmortem.report_data import report_data

_META = {b"schema_version": b"1"}
_SAMPLE_RUNS = Path(__file__).resolve().parents[2] / "sample_runs"
SHIPPED = sorted(p for p in _SAMPLE_RUNS.iterdir() if (p / "manifest.json").is_file()) if _SAMPLE_RUNS.is_dir() else []


def _write(table_rows: list[dict], schema: pa.Schema, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {f.name: [row.get(f.name) for row in table_rows] for f in schema}
    table = pa.table({n: pa.array(v, type=schema.field(n).type if not pa.types.is_dictionary(schema.field(n).type)
                                  else pa.string()) for n, v in columns.items()})
    table = table.cast(schema).replace_schema_metadata(_META)
    pq.write_table(table, path)


def write_run(path: Path, *, kind: str = "diverged", steps: int = 60, onset: int = 40, nonfinite_at: int | None = 52,
              modules: tuple[str, ...] = ("conv1", "fc1", "fc2"), event_at: int | None = 38, seed: int = 0,
              loss_change_at: int | None = None, batch_change_at: int | None = None) -> Path:
    """Write a run directory. kind: "diverged" (grads jump ×40 at `onset`, then grow ×2.5/step,
    non-finite from `nonfinite_at`), "healthy", or "no_update" (parameters never change)."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    params = [f"{m}.{p}" for m in modules for p in ("weight", "bias")]
    stats, scalars = [], []
    param_norm = {p: 1.0 + i for i, p in enumerate(params)}
    for step in range(steps):
        blowup = kind == "diverged" and step >= onset
        factor = 40.0 * 2.5 ** (step - onset) if blowup else 1.0
        broken = kind == "diverged" and nonfinite_at is not None and step >= nonfinite_at
        grad_total = 0.0
        for i, p in enumerate(params):
            grad = 0.5 * (1 + 0.1 * rng.standard_normal()) * factor / (i + 1)
            grad_total += grad ** 2
            update = 0.0 if kind == "no_update" else 0.05 * grad
            nonfinite = 10 if broken else 0
            stats += [
                dict(step=step, role="param", name=p, numel=100, norm=param_norm[p], max_abs=param_norm[p] / 3,
                     mean=0.0, std=param_norm[p] / 10, nonfinite=nonfinite),
                dict(step=step, role="grad", name=p, numel=100, norm=grad, max_abs=grad / 3, zero_frac=0.0,
                     nonfinite=nonfinite, grad_none=False),
                dict(step=step, role="update", name=p, numel=100, norm=update, ratio=update / param_norm[p],
                     nonfinite=nonfinite),
                dict(step=step, role="state", name=p, key="momentum_buffer", numel=100, norm=grad * 3,
                     max_abs=grad, nonfinite=nonfinite),
            ]
            param_norm[p] += update * 0.1
        for j, m in enumerate(modules):
            peak = 2.0 * (j + 1) * (factor if blowup else 1.0)
            stats.append(dict(step=step, role="activation", name=m, numel=1000, mean=0.1, std=0.5, max_abs=peak,
                              zero_frac=0.3, nonfinite=100 if broken else 0))
        batch = rng.standard_normal(16).astype(np.float32)
        batch_hash = hashlib.sha1(batch.tobytes() + (b"changed" if batch_change_at is not None and step >= batch_change_at else b"")).hexdigest()
        stats.append(dict(step=step, role="input", name="input", numel=16, mean=float(batch.mean()), std=float(batch.std()),
                          min=float(batch.min()), max=float(batch.max()), nonfinite=0, shape="4x4", hash=batch_hash))
        stats.append(dict(step=step, role="target", name="target", numel=4, mean=1.5, std=1.0, min=0.0, max=3.0,
                          nonfinite=0, shape="4", hash=hashlib.sha1(f"t{step}".encode()).hexdigest()))
        loss = 2.3 * 0.98 ** step if kind != "no_update" else 2.3
        if blowup:
            loss = 3.0 * factor ** 2
        if broken:
            loss = float("nan")
        if loss_change_at is not None and step >= loss_change_at:
            loss += 1e-3
        scalars += [dict(step=step, name="loss", value=loss),
                    dict(step=step, name="grad_norm", value=float("nan") if broken else grad_total ** 0.5),
                    dict(step=step, name="lr", value=0.05),
                    dict(step=step, name="wall_time", value=1.7e9 + step + seed)]
    stats.sort(key=lambda r: (r["role"], r["name"], r.get("key") or "", r["step"]))
    half = steps // 2  # two segments, as a flushing recorder writes them
    for number, rows in enumerate((stats[: len(stats) // 2], stats[len(stats) // 2:])):
        _write(rows, STATS_SCHEMA, path / "stats" / f"part-{number:06d}.parquet")
    _write([r for r in scalars if r["step"] < half], SCALARS_SCHEMA, path / "scalars" / "part-000000.parquet")
    _write([r for r in scalars if r["step"] >= half], SCALARS_SCHEMA, path / "scalars" / "part-000001.parquet")
    events = [dict(step=event_at, kind="domain_switch", message="now training on domain B", wall_time=1.7e9 + event_at)] \
        if event_at is not None else []
    _write(events, EVENTS_SCHEMA, path / "events" / "part-000000.parquet")
    manifest = {
        "schema_version": 1, "run_id": f"test-{kind}-{seed}", "started_at": "2026-11-30T14:00:00+00:00",
        "ended_at": None if kind == "diverged" else "2026-11-30T14:01:00+00:00",
        "status": "exception" if kind == "diverged" else "completed",
        "exception": {"type": "FloatingPointError", "message": "loss is nan", "traceback": "Traceback ...\nFloatingPointError: loss is nan"}
        if kind == "diverged" else None,
        "last_step": steps - 1, "python_version": "3.11.7", "torch_version": "2.13.0", "host": "testhost", "platform": "Linux",
        "models": {"model": {"class": "Net", "modules": [{"name": m, "type": "Linear"} for m in modules],
                             "parameters": [{"name": p, "shape": [10, 10], "dtype": "float32", "requires_grad": True} for p in params]}},
        "optimizers": {"optimizer": {"class": "SGD", "models": ["model"],
                                     "param_groups": [{"lr": 0.05, "momentum": 0.9, "params": params}]}},
        "options": {"flush_every": 50, "flush_seconds": 10.0, "checkpoint_every": 500}, "config": {},
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    return path


def _analysis(run_dir, **decided) -> Analysis:
    """An Analysis of the run at `run_dir` with the findings `decided` by hand, and what a report
    shows of the run for them and of its loss."""
    run = load_run(run_dir)
    data = report_data(run, **{k: decided[k] for k in ("onset", "first_nonfinite", "ranking", "findings")})
    scalars = run.scalars()
    outcome = measure_outcome(*loss_curve(scalars), metric_curves(scalars), OutcomeThresholds(), loss=main_loss(scalars))
    return Analysis(run=run, **decided, data=data, outcome=outcome)


def diverged_analysis(run_dir) -> Analysis:
    return _analysis(
        run_dir, verdict="diverged",
        onset=Onset(step=40, interval=(39, 41), series="grad fc2.weight", growth_per_step=2.5,
                    doubling_steps=0.76, jump=40.0, lead_steps=12),
        first_nonfinite=FirstNonfinite(step=52, tensor="fc2", role="activation", key=None, spread=[(52, 21), (53, 21)]),
        ranking=[RankedTensor("fc2.weight", "grad", None, 40, 2.5, 40.0),
                 RankedTensor("fc2.weight", "state", "momentum_buffer", 41, 2.5, 30.0),
                 RankedTensor("conv1", "activation", None, 42, 2.4, None)],
        chain=["grad of `fc2.weight` jumped ×40 at step 40", "its momentum buffer followed at 41",
               "activations of `conv1` at 42"],
        findings=[Finding("diverged", 40, ["fc2.weight"], {"grad_norm_before": 3.03, "grad_norm_at_onset": 121.2},
                          "Clip gradients at a norm taken from the healthy phase (about 5) and lower the LR ×10.")],
        warnings=[])


def healthy_analysis(run_dir) -> Analysis:
    return _analysis(run_dir, verdict="healthy", onset=None, first_nonfinite=None, ranking=[], chain=[],
                    findings=[Finding("healthy", None, [], {"final_loss": 0.7}, "")], warnings=[])


def not_learning_analysis(run_dir) -> Analysis:
    return _analysis(run_dir, verdict="not_learning", onset=None, first_nonfinite=None, ranking=[], chain=[],
                    findings=[Finding("no_update", 0, ["conv1.weight", "fc1.weight"],
                                      {"median_update_ratio": 0.0, "grad_norm_median": 0.5},
                                      "Call optimizer.step() after loss.backward(), and check that the LR is not 0.")],
                    warnings=["example warning"])
