"""When things happen: flushes, scheduled checkpoints and flight-recorder samples.

Kept apart from what is measured (``statistics``) so that either can change alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Schedule"]


@dataclass(frozen=True)
class Schedule:
    """Step- and time-based triggers. A period of 0 disables that trigger."""

    flush_every: int = 50
    flush_seconds: float = 10.0
    checkpoint_every: int = 500
    flight_every: int = 10
    activation_every: int = 1

    def __post_init__(self) -> None:
        for name in ("flush_every", "checkpoint_every", "flight_every", "activation_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name in ("flush_every", "activation_every"):
            if getattr(self, name) == 0:
                raise ValueError(f"{name} must be >= 1")
        if isinstance(self.flush_seconds, bool) or not isinstance(self.flush_seconds, (int, float)) \
                or not self.flush_seconds > 0:
            raise ValueError(f"flush_seconds must be a number > 0, got {self.flush_seconds!r}")

    def should_flush(self, pending_steps: int, seconds_since_flush: float) -> bool:
        """Flush once `flush_every` steps are buffered or `flush_seconds` have passed."""
        if pending_steps <= 0:
            return False
        return pending_steps >= self.flush_every or seconds_since_flush >= self.flush_seconds

    def should_checkpoint(self, step: int) -> bool:
        """Scheduled full-state checkpoints at steps 0, N, 2N, ..."""
        return self.checkpoint_every > 0 and step % self.checkpoint_every == 0

    def should_sample_flight(self, step: int) -> bool:
        """Flight-recorder samples at steps 0, N, 2N, ..."""
        return self.flight_every > 0 and step % self.flight_every == 0

    def should_record_activations(self, step: int) -> bool:
        """Leaf-module outputs are the largest tensors a step touches (on a small CNN, ten times
        the parameters), so they get their own period; every step by default."""
        return step % self.activation_every == 0
