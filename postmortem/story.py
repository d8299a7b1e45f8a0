"""The chain of events as sentences a person can read, with the events and batch at the onset."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .findings import Onset, RankedTensor
from .ranking import healthy_range, out_of_range

if TYPE_CHECKING:
    from .detectors import Evidence

__all__ = ["chain_sentences", "batch_at", "events_near", "events_before"]

_CHAIN_LENGTH = 6
_EVENT_WINDOW = 3
_EVENT_KINDS = 3  # sentences about events: one per kind, the latest of it (floods are common)


def _what(r: RankedTensor) -> str:
    if r.role == "state":
        return f"the {r.key or 'optimizer'} state of `{r.tensor}`"
    if r.role == "activation":
        return f"activations of `{r.tensor}`"
    if r.role in ("input", "target"):
        return f"the {r.role} batch `{r.tensor}`"
    return f"{r.role} of `{r.tensor}`"


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


def chain_sentences(ev: Evidence, ranking: list[RankedTensor]) -> list[str]:
    sentences = []
    for event in events_near(ev):
        sentences.append(event)
    batch = batch_at(ev)
    if batch:
        sentences.append(batch)
    for i, r in enumerate(ranking[:_CHAIN_LENGTH]):
        verb = _how(r) if i == 0 or r.jump or r.growth_per_step else "followed"
        sentences.append(f"{_what(r)} {verb} at step {r.onset_step}")
    first = ev.first_nonfinite
    if first is not None:
        name = f"`{first.tensor}`" + (f" [{first.key}]" if first.key else "")
        lead = ""
        if ev.onset is not None and ev.onset.step < first.step:
            lead = f", {first.step - ev.onset.step} steps after the onset"
        sentences.append(f"the first non-finite value appeared in {first.role} {name} at step {first.step}{lead}")
    return sentences


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
    """The events recorded up to the onset step, in the order they were recorded (an event
    later in the onset interval came after the onset, not before it)."""
    return events[events["step"] <= onset.step]


def batch_at(ev: Evidence) -> str | None:
    """Was the batch at the onset unusual compared with the healthy phase?"""
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
        if out_of_range(value, healthy):
            return (f"the batch `{key.name}` at step {step} was unusual: max |x| {value:.3g} "
                    f"vs {low:.3g}–{high:.3g} in the healthy phase.{repeat}")
        return (f"the batch `{key.name}` at step {step} looked ordinary: max |x| {value:.3g} "
                f"within the healthy range {low:.3g}–{high:.3g}.{repeat}")
    return None
