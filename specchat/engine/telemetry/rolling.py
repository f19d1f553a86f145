"""The live speed: tokens per second over the most recent rounds, weighted by time, for a UI.

Only the speed: the acceptance figures of a recent window are :func:`specchat.engine.telemetry.figures.recent_figures`,
computed from the very rounds auto-K's α comes from (a second "recent acceptance" over other rounds would
contradict it on screen).
"""

from __future__ import annotations

from collections import deque

from specchat.engine.events import Step


class Rolling:
    """Tokens emitted / time over the fewest most recent rounds that together cover ``window_ms`` (all rounds
    while they cover less): weighted by time, not a mean of per-round rates. Only round time counts, so a pause
    between replies does not lower it. :attr:`tok_per_s` is None before any round (no speed yet, not 0)."""

    __slots__ = ("window_ms", "_tok", "_tok_n", "_tok_ms")

    def __init__(self, window_ms: float = 3000.0) -> None:
        if window_ms <= 0:
            raise ValueError("window_ms must be > 0")
        self.window_ms = float(window_ms)
        self._tok: deque[tuple[int, float]] = deque()
        self._tok_n = 0
        self._tok_ms = 0.0

    def reset(self) -> None:
        self._tok.clear()
        self._tok_n, self._tok_ms = 0, 0.0

    def add_step(self, *, emitted: int, t_step_ms: float) -> None:
        self._tok.append((emitted, t_step_ms))
        self._tok_n += emitted
        self._tok_ms += t_step_ms
        while len(self._tok) > 1 and self._tok_ms - self._tok[0][1] >= self.window_ms:
            n, ms = self._tok.popleft()
            self._tok_n -= n
            self._tok_ms -= ms

    def add(self, step: Step) -> None:
        self.add_step(emitted=step.emitted, t_step_ms=step.t_step_ms)

    @property
    def tok_per_s(self) -> float | None:
        return self._tok_n / self._tok_ms * 1000.0 if self._tok_ms > 0 else None


__all__ = ["Rolling"]
