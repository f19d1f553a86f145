"""A timing on a shared CPU: the median of the most recent samples (robust to spikes, follows lasting changes)."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque


class RecentMedian:
    """A timing: the median of the last ``window`` samples.

    On a shared CPU a decode time carries spikes (contention, a first decode paging the weights in);
    the median ignores them as long as they are fewer than half the window, follows a lasting change
    within half a window, and - unlike a low quantile - has no bias that depends on how many samples a
    row count has, so ratios of timings (c, v) compare like with like.
    """

    __slots__ = ("samples", "ordered", "value", "n", "_window")

    def __init__(self, window: int) -> None:
        self.samples: deque[float] = deque()
        self.ordered: list[float] = []  # the same samples, sorted
        self.value: float | None = None
        self.n = 0  # samples ever added
        self._window = window

    def add(self, x: float) -> None:
        if len(self.samples) == self._window:
            old = self.samples.popleft()
            del self.ordered[bisect_left(self.ordered, old)]
        self.samples.append(x)
        insort(self.ordered, x)
        self.n += 1
        o, m = self.ordered, len(self.ordered)
        self.value = o[m // 2] if m % 2 else 0.5 * (o[m // 2 - 1] + o[m // 2])

    @property
    def weight(self) -> int:
        return len(self.samples)


__all__ = ["RecentMedian"]
