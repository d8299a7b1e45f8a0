"""A one-line progress bar on stderr, drawn only when stderr is a terminal.

Hand-written (20 lines) rather than tqdm: the stages are few and known, and the analysis side
keeps its dependency list to the scientific stack.
"""
from __future__ import annotations

import sys
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 24) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = self._stream.isatty()
        self._total, self._done, self._width = total, 0, width

    def advance(self, label: str) -> None:
        """Mark the start of the next stage, named `label`."""
        self._done = min(self._done + 1, self._total)
        if self._enabled:
            filled = self._width * self._done // self._total
            bar = "#" * filled + "." * (self._width - filled)
            self._stream.write(f"\r[{bar}] {self._done}/{self._total} {label[:40]:<40}")
            self._stream.flush()

    def close(self) -> None:
        if self._enabled:
            self._stream.write("\r" + " " * (self._width + 50) + "\r")
            self._stream.flush()
