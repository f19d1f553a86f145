"""The bench's progress display: one ``\\r``-rewritten line on stderr, and the callback type that feeds it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

#: progress(done, total, what): ``done`` of ``total`` steps of the current phase, ``what`` is happening
Progress = Callable[[int, int, str], None]


class ProgressLine:
    """``[#####.....] 12/48 copy-heavy K=3 run 2 eta 40s`` on one ``\\r``-rewritten stderr line.

    Plain text, no dependency. Redrawn at most every ``interval`` seconds (and at every phase's start
    and end); the ETA restarts whenever ``done`` is 0 (a new phase). Disabled when ``enabled`` is False
    (``--no-progress``, or stderr is not a terminal: a log file gets no ``\\r`` noise).
    """

    def __init__(self, stream: TextIO, enabled: bool = True, width: int = 24, interval: float = 0.1) -> None:
        self.stream = stream
        self.enabled = enabled
        self.width = width
        self.interval = interval
        self._len = 0
        self._t0 = time.perf_counter()
        self._last = 0.0

    def __call__(self, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if done == 0:
            self._t0 = now
        elif done < total and now - self._last < self.interval:
            return
        self._last = now
        frac = min(1.0, done / total) if total else 1.0
        n = int(frac * self.width)
        el = now - self._t0
        eta = f" eta {el / done * (total - done):.0f}s" if 0 < done < total else ""
        text = f"[{'#' * n}{'.' * (self.width - n)}] {done}/{total} {what}{eta}"
        pad = max(0, self._len - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._len = len(text)

    def close(self) -> None:
        if self.enabled and self._len:
            self.stream.write("\r" + " " * self._len + "\r")
            self.stream.flush()
            self._len = 0


__all__ = ["Progress", "ProgressLine"]
