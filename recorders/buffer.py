"""The rows of recorded steps until they are on disk, and the flush that writes them.

:class:`StepBuffer` collects each step's stats blocks, scalar rows and events, and writes them
as one new segment per table with :class:`~recorders.writer.RunWriter`, then the manifest (so
that its ``last_step`` matches the segments). What is not yet written when a process is
SIGKILLed is lost: at most the steps since the last flush.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from .rows import StatsBlock
from .schedule import Schedule
from .writer import RunWriter

__all__ = ["StepBuffer"]


@dataclass
class _Rows:
    """The rows of the steps since the last flush."""

    stats: list[StatsBlock] = field(default_factory=list)
    scalars: list[tuple] = field(default_factory=list)
    events: list[tuple] = field(default_factory=list)
    steps: int = 0
    written: set[str] = field(default_factory=set)  # tables already on disk

    def __bool__(self) -> bool:
        return bool(self.steps or self.stats or self.scalars or self.events)


class StepBuffer:
    """Buffered rows and when they are written (see the module's docstring)."""

    def __init__(self, writer: RunWriter, manifest: dict[str, Any]) -> None:
        self._writer = writer
        self._manifest = manifest  # written after every flush
        self._rows = _Rows()
        self._unwritten: list[_Rows] = []  # handed to flush(), not yet all on disk
        self._last_flush = time.monotonic()

    def add_step(self, blocks: Iterable[StatsBlock], scalar_rows: Iterable[tuple]) -> None:
        """One recorded step's rows."""
        self._rows.stats.extend(blocks)
        self._rows.scalars.extend(scalar_rows)
        self._rows.steps += 1

    def add_scalars(self, rows: Iterable[tuple]) -> None:
        self._rows.scalars.extend(rows)

    def add_event(self, step: int, kind: str, message: str) -> None:
        self._rows.events.append((step, kind, message, time.time()))

    def restart_clock(self) -> None:
        """Time-based flushes count from now (recording starts)."""
        self._last_flush = time.monotonic()

    def due(self, schedule: Schedule) -> bool:
        """Whether `schedule` asks for a flush now."""
        return schedule.should_flush(self._rows.steps, time.monotonic() - self._last_flush)

    def flush(self) -> None:
        """Write everything buffered as new segments, then the manifest.

        Re-entrant: a SIGTERM arriving in the middle of a flush runs flush() again from the
        handler, which finishes what the interrupted call had not yet written (a table written
        twice holds the same rows, and readers keep the last occurrence).
        """
        if self._rows:
            self._unwritten.append(self._rows)
            self._rows = _Rows()
        self._last_flush = time.monotonic()
        wrote = False
        while self._unwritten:
            rows = self._unwritten[0]
            for table, table_rows in (("stats", rows.stats), ("scalars", rows.scalars),
                                      ("events", rows.events)):
                if table_rows and table not in rows.written:
                    self._writer.write_rows(table, table_rows)
                    rows.written.add(table)
            if self._unwritten and self._unwritten[0] is rows:
                self._unwritten.pop(0)
            wrote = True
        if wrote:
            self._writer.write_manifest(self._manifest)
