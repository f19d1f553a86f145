"""Live rates over the most recent rounds (tok/s weighted by time, acceptance, mean accepted length), for a UI."""

from __future__ import annotations

from collections import deque

from specchat.engine.events import Step


class Rolling:
    """Live rates over recent steps.

    * :attr:`tok_per_s` - tokens emitted / time over the fewest most recent steps that together cover
      ``window_ms`` (all steps while they cover less), i.e. weighted by time, not a mean of per-step rates.
      Only step time counts: a pause between replies does not lower it.
    * :attr:`acceptance` - accepted / drafted over the last ``acceptance_steps`` steps that drafted.
    * :attr:`mean_len` - 1 + accepted / those steps (llama.cpp's mean len, recent).
    """

    __slots__ = ("window_ms", "_tok", "_tok_n", "_tok_ms", "_acc", "_acc_d", "_acc_a")

    def __init__(self, window_ms: float = 3000.0, acceptance_steps: int = 32) -> None:
        if window_ms <= 0 or acceptance_steps < 1:
            raise ValueError("window_ms must be > 0 and acceptance_steps >= 1")
        self.window_ms = float(window_ms)
        self._tok: deque[tuple[int, float]] = deque()
        self._tok_n = 0
        self._tok_ms = 0.0
        self._acc: deque[tuple[int, int]] = deque(maxlen=acceptance_steps)
        self._acc_d = 0
        self._acc_a = 0

    def reset(self) -> None:
        self._tok.clear()
        self._tok_n, self._tok_ms = 0, 0.0
        self._acc.clear()
        self._acc_d = self._acc_a = 0

    def add_step(self, *, emitted: int, t_step_ms: float, drafted: int = 0, accepted: int = 0) -> None:
        self._tok.append((emitted, t_step_ms))
        self._tok_n += emitted
        self._tok_ms += t_step_ms
        while len(self._tok) > 1 and self._tok_ms - self._tok[0][1] >= self.window_ms:
            n, ms = self._tok.popleft()
            self._tok_n -= n
            self._tok_ms -= ms
        if drafted > 0:
            if len(self._acc) == self._acc.maxlen:
                d, a = self._acc[0]
                self._acc_d -= d
                self._acc_a -= a
            self._acc.append((drafted, accepted))
            self._acc_d += drafted
            self._acc_a += accepted

    def add(self, step: Step) -> None:
        self.add_step(emitted=step.emitted, t_step_ms=step.t_step_ms, drafted=step.drafted, accepted=step.accepted)

    @property
    def tok_per_s(self) -> float:
        return self._tok_n / self._tok_ms * 1000.0 if self._tok_ms > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return self._acc_a / self._acc_d if self._acc_d else 0.0

    @property
    def mean_len(self) -> float:
        return 1.0 + self._acc_a / len(self._acc) if self._acc else 1.0


__all__ = ["Rolling"]
