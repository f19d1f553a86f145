"""Measuring a bench pair round by round: the baseline on one copy of the target, the measured mode on a second
copy, their rounds interleaved so that each side runs while its own clock is behind the other's; then the same
with the copies swapped.

**Why.** These machines are shared: one reply's tok/s moves by 3-7 % from one run to the next (contention on the
host that changes over seconds: steal time is nil here, the guest idle), and a pair of replies run one after the
other carries that noise into its ratio. Interleaved round by round, both sides run under the same contention.
Measured on the AMD EPYC Zen 4 (Genoa, KVM, 2 vCPUs), ``--threads 1``, the bundled Q4_1, 256 tokens, 8 pairs each
way in one process (2026-12-06): plain decoding against plain decoding on the prose prompt, the ratio's relative
standard deviation 2.2 % one reply after the other, **0.09 %** interleaved (each swapped pair within 0.13 % of
1); auto-K against plain decoding on prose, 3.9 % against **0.09 %** (0.967-0.968 over four swapped pairs, where the
replies one after the other read 0.93-1.03); K 16 against plain decoding on copy-heavy, 1.5 % against 1.2 %
(medians 1.27 and 1.28: a batch and a single row are not hit alike by the contention, so unlike workloads keep
more of it).

**Each side on its own clock** (:class:`SideClock`): the engine's clock (the decoder's ``clock``) runs only while
that side runs, so the reply's own figures - its ``predicted_ms``, the rounds' timings auto-K learns from - are
its own time, never the other side's.

**Two copies, swapped.** Two loads of one model do not run at exactly the same speed (one read 2.7 % faster than
the other in one process, 0.9 % slower in the next: each copy's own buffers - the repacked weights, the KV cache -
land in other memory). So every pair is measured twice, the copies swapped, and its figures are geometric means
over the two halves: the copy's factor cancels from the pair's speedup exactly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from specchat.engine.events import Turn


def now() -> float:
    """The wall clock the side clocks divide (seconds): ``time.perf_counter``, the engine's own clock."""
    return time.perf_counter()


class SideClock:
    """A clock that advances only between :meth:`resume` and :meth:`pause`: one side's own time, in seconds of
    :func:`now`."""

    def __init__(self) -> None:
        self.total = 0.0
        self._since: float | None = None

    def __call__(self) -> float:
        return self.total + (now() - self._since if self._since is not None else 0.0)

    def resume(self) -> None:
        self._since = now()

    def pause(self) -> None:
        if self._since is not None:
            self.total += now() - self._since
            self._since = None


def interleave(events: Sequence[Iterator[Any]], clocks: Sequence[SideClock],
               on_event: Callable[[int, Any], None]) -> None:
    """Run the event streams to their ends, one event at a time, always the stream whose clock is behind (the
    first on a tie); each stream's clock runs only while it produces an event. ``on_event(i, event)`` sees every
    event of stream ``i``. An exception from one stream closes the others and propagates."""
    live = list(range(len(events)))
    try:
        while live:
            i = min(live, key=lambda j: clocks[j]())
            clocks[i].resume()
            try:
                event = next(events[i])
            except StopIteration:
                live.remove(i)
                continue
            finally:
                clocks[i].pause()
            on_event(i, event)
    finally:
        for j in live:
            close = getattr(events[j], "close", None)
            if close is not None:
                close()


def run_interleaved(sides: Sequence[tuple[Any, Callable[[Any], Iterator[Any]]]],
                    count: Callable[[Any, Any], None], new_stats: Callable[[], Any]) -> list[tuple[Turn, Any]]:
    """Each ``(session, start)`` side's reply, ``start(session)`` giving its events (a prepared run: its controls
    set, its caches cleared), interleaved by :func:`interleave` with every session's decoder on its own
    :class:`SideClock`; returns each side's (Turn, stats), ``count(stats, event)`` having seen its events."""
    clocks = [SideClock() for _ in sides]
    stats = [new_stats() for _ in sides]
    turns: list[Turn | None] = [None] * len(sides)
    saved = [session.decoder.clock for session, _start in sides]
    try:
        for (session, _start), clock in zip(sides, clocks):
            session.decoder.clock = clock
        streams = [start(session) for session, start in sides]

        def on_event(i: int, event: Any) -> None:
            count(stats[i], event)
            if isinstance(event, Turn):
                turns[i] = event

        interleave(streams, clocks, on_event)
    finally:
        for (session, _start), clock in zip(sides, saved):
            session.decoder.clock = clock
    out: list[tuple[Turn, Any]] = []
    for turn, st in zip(turns, stats):
        if turn is None:  # pragma: no cover - a generation always ends with a Turn
            raise RuntimeError("an interleaved reply ended without its Turn")
        out.append((turn, st))
    return out


__all__ = ["SideClock", "interleave", "now", "run_interleaved"]
