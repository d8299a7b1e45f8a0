"""The chain of events as sentences a person can read, with the events and batch at the onset."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from recorders.vocabulary import describe_tensor

from .findings import Onset, RankedTensor
from .ranking import healthy_range, out_of_range

if TYPE_CHECKING:
    from .detectors import Evidence

__all__ = ["chain_sentences", "batch_at", "carriers", "events_near", "events_before"]

_CHAIN_LENGTH = 6
_EVENT_WINDOW = 3
_EVENT_KINDS = 3  # sentences about events: one per kind, the latest of it (floods are common)
_CARRIED = 1e3  # a tensor grown ×1000 over its healthy median carried the blow-up
_OVERFLOW = 1e6  # ...and one ×1e6 above it when it turned non-finite had overflowed
_FITTED_ROLES_FOR_OVERFLOW = ("param", "grad", "update", "state", "activation")


def _how(r: RankedTensor) -> str:
    if r.cause is not None:  # named by a direct cause (the sigmoid of log(0)), not by a break
        return f"started it ({r.cause})"
    if r.jump is None and r.growth_per_step is None:
        return "turned non-finite"  # ranked from the first non-finite value, no break before
    parts = []
    if r.jump is not None and r.jump >= 1.5:
        parts.append(f"jumped ×{r.jump:.3g}")
    if r.growth_per_step is not None and r.growth_per_step >= 1.05:
        parts.append(f"grew ×{r.growth_per_step:.3g} per step")
    return " and ".join(parts) or "began to amplify"


def chain_sentences(ev: Evidence, ranking: list[RankedTensor], batch_range_factor: float) -> list[str]:
    """The story in order: the events before the onset, an unusual batch, what amplified first,
    what carried it to the first non-finite value (seed 000: momentum buffers ~1e14, activations
    ~1e15) and how that value came (a float32 overflow); an ordinary batch last."""
    sentences = list(events_near(ev))
    batch = batch_at(ev, batch_range_factor)
    ordinary = batch is not None and " looked ordinary" in batch
    if batch and not ordinary:
        sentences.append(batch)
    for i, r in enumerate(ranking[:_CHAIN_LENGTH]):
        verb = _how(r) if i == 0 or r.jump or r.growth_per_step else "followed"
        sentences.append(f"{describe_tensor(r.tensor, r.role, r.key)} {verb} at step {r.onset_step}")
        if i == 0:
            sentences += carriers(ev)
    first = ev.first_nonfinite
    if first is not None:
        lead = ""
        if ev.onset is not None and ev.onset.step < first.step:
            lead = f", {first.step - ev.onset.step} steps after the onset"
        sentences.append(f"the first non-finite value appeared in {describe_tensor(first.tensor, first.role, first.key)} at step {first.step}{lead}"
                         + _overflow(ev))
    if ordinary:
        sentences.append(batch)
    return sentences


def _peaks(ev: Evidence, role: str, until: int) -> list[tuple[float, float, str, str | None]]:
    """(largest finite magnitude in [onset, until), its median before the onset, name, key) per series."""
    table, onset = ev.table, ev.onset.step
    found = []
    for index in table.indices(role):
        sl = table.rows(index)
        steps, mag, bad = table.step[sl], table.magnitude[sl], table.nonfinite[sl]
        ok = np.isfinite(mag) & (bad == 0)
        during, before = ok & (steps >= onset) & (steps < until), ok & (steps < onset)
        if during.any() and before.any():
            key = table.keys[index]
            found.append((float(np.max(mag[during])), float(np.median(mag[before])), key.name, key.key))
    return sorted(found, key=lambda f: f[0], reverse=True)


def carriers(ev: Evidence) -> list[str]:
    """What carried the blow-up from the onset to the first non-finite value: per role (optimizer
    state, activations, parameters) the tensor that grew most, when it grew ≥ ×1000 its healthy level."""
    first = ev.first_nonfinite
    if ev.onset is None or first is None or first.step <= ev.onset.step:
        return []
    parts = []
    for role in ("state", "activation", "param"):
        if role == "param" and parts:
            break  # the weights only when neither the optimizer state nor activations carried it
        grown = [(peak, level, name, key) for peak, level, name, key in _peaks(ev, role, first.step)
                 if level > 0 and peak >= _CARRIED * level]
        if grown:
            peak, level, name, key = grown[0]
            parts.append(f"{describe_tensor(name, role, key)} reached {peak:.2g} (×{peak / level:.2g} the healthy level)")
    if not parts:
        return []
    return [f"it was carried by: {'; '.join(parts)}, before step {first.step}"]


def _overflow(ev: Evidence) -> str:
    """A tensor that went non-finite from a finite value already ≥ 1e6× its healthy level
    overflowed (float32 tops out at 3.4e38; a norm of such values squares them), it was no 0/0."""
    first = ev.first_nonfinite
    if ev.onset is None or first is None or first.role not in _FITTED_ROLES_FOR_OVERFLOW:
        return ""
    table = ev.table
    for index in table.indices(first.role):
        if table.keys[index].name != first.tensor:
            continue
        sl = table.rows(index)
        steps, mag, bad = table.step[sl], table.magnitude[sl], table.nonfinite[sl]
        ok = np.isfinite(mag) & (bad == 0)
        last = mag[ok & (steps < first.step)]
        healthy = mag[ok & (steps < ev.onset.step)]
        if len(last) and len(healthy) and np.median(healthy) > 0 and last[-1] >= _OVERFLOW * np.median(healthy):
            return (f": a float32 overflow (it was {last[-1]:.2g} the step before, "
                    f"×{last[-1] / np.median(healthy):.2g} its healthy level)")
    return ""


def events_near(ev: Evidence) -> list[str]:
    """Recorded events up to the onset: those in the few steps before it ("a domain_switch one
    step before"), else the latest one, with its distance."""
    if ev.onset is None or ev.events.empty:
        return []
    before = events_before(ev.events, ev.onset)
    near = before[before["step"] >= ev.onset.step - _EVENT_WINDOW]
    if near.empty:
        near = before.tail(1)
    counts = near["kind"].value_counts()
    latest = near.drop_duplicates("kind", keep="last").tail(_EVENT_KINDS)
    sentences = []
    for step, kind, message in zip(latest["step"], latest["kind"], latest["message"]):
        gap = ev.onset.step - int(step)
        when = "at the onset step" if gap == 0 else f"{gap} step{'s' if gap > 1 else ''} before the onset"
        detail = f" ({message})" if message else ""
        if counts[kind] > 1:
            detail += f"; {counts[kind]} `{kind}` events from step {ev.onset.step - _EVENT_WINDOW} to the onset"
        sentences.append(f"a `{kind}` event was recorded at step {int(step)}, {when}{detail}")
    return sentences


def events_before(events: pd.DataFrame, onset: Onset) -> pd.DataFrame:
    """The events recorded after the run's first step and up to the onset step, in the order
    they were recorded: the candidate triggers. An event later in the onset interval came after
    the onset, not before it; one at step 0 (a Trainer's "epoch 0 begins") is where the run
    started, not what set it off (the recorder counts from 0; a resumed run goes on from its
    last step)."""
    return events[(events["step"] > 0) & (events["step"] <= onset.step)]


def batch_at(ev: Evidence, factor: float) -> str | None:
    """Was the batch at the onset unusual (`factor` outside the healthy range) compared with the
    healthy phase?"""
    if ev.onset is None:
        return None
    table, step = ev.table, ev.onset.step
    for index in table.indices("input"):
        key = table.keys[index]
        sl = table.rows(index)
        steps, mag = table.step[sl], table.magnitude[sl]
        healthy = healthy_range(mag[steps < step])
        now = mag[steps == step]
        if np.any(table.nonfinite[sl][steps == step] > 0):
            now = np.array([np.nan])
        if healthy is None or len(now) == 0:
            continue
        low, high = healthy
        value = float(now[0])
        hashes = table.input_hashes[table.input_hashes["name"] == key.name]
        current = hashes.loc[hashes["step"] == step, "hash"]
        earlier = set(hashes.loc[hashes["step"] < step, "hash"])
        seen = len(current) > 0 and current.iloc[-1] in earlier
        repeat = " It is a batch already seen in the healthy phase." if seen else ""
        if not np.isfinite(value):
            return f"the batch `{key.name}` at step {step} holds non-finite values.{repeat}"
        if out_of_range(value, healthy, factor):
            return (f"the batch `{key.name}` at step {step} was unusual: max |x| {value:.3g} "
                    f"vs {low:.3g}–{high:.3g} in the healthy phase.{repeat}")
        return (f"the batch `{key.name}` at step {step} looked ordinary: max |x| {value:.3g} "
                f"within the healthy range {low:.3g}–{high:.3g}.{repeat}")
    return None
