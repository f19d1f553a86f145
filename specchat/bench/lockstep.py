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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

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


#: what a second copy must leave free beside itself (the copy's own KV cache and compute buffers are not in its files)
COPY_MARGIN_BYTES = 1 << 30


def copy_bytes(session: Any) -> int:
    """The bytes a second copy of ``session`` loads: its target's file and every model drafter's file."""
    dec = session.decoder
    models = [dec.target, *(getattr(d, "model", None) for d in getattr(dec, "links", {}).values())]
    return sum(Path(m.path).stat().st_size for m in models if m is not None and getattr(m, "path", None))


def available_bytes() -> int | None:
    """MemAvailable of /proc/meminfo, or None where there is none (then a copy is not loaded)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def load_copies(copies: Mapping[str, tuple[Any, Any]], progress: Callable[[int, int, str], None],
                err: TextIO) -> dict[str, Any]:
    """A second copy of each session of ``copies`` (``{label: (session, the settings it was loaded with)}``), loaded
    with the same settings, for :func:`interleave` (``specchat bench``'s pairs, ``specchat models tune``'s runs).
    One that would not fit in memory (MemAvailable against its files and :data:`COPY_MARGIN_BYTES`) is not loaded:
    stderr says so in one line, and that label's pairs run one reply after the other. A copy of a history drafter
    waits until its index holds every saved conversation, as the first copy's does. Ctrl-C while loading closes
    the copies loaded so far."""
    from specchat.bench.history_suite import wait_for_index
    from specchat.loading import load_engine

    twins: dict[str, Any] = {}
    try:
        for label, (session, settings) in copies.items():
            need, free = copy_bytes(session) + COPY_MARGIN_BYTES, available_bytes()
            if free is None or need > free:
                where = f" of {label}" if label else ""
                have = "unknown" if free is None else f"{free / 2**30:.1f} GiB"
                print(f"specchat: a second copy{where} needs {need / 2**30:.1f} GiB, available {have}: its pairs run "
                      "one reply after the other (--interleave replies)", file=err)
                continue
            what = f"{label} copy 2" if label else "copy 2"
            twins[label] = load_engine(settings, lambda f, w, what=what: progress(int(f * 100), 100, f"{what}: {w}"),
                                       auto_k=False)
            wait_for_index(twins[label], settle=True)  # a history drafter's copy drafts from the same saved history
    except BaseException:
        for twin in twins.values():
            twin.close()
        raise
    return twins


__all__ = ["COPY_MARGIN_BYTES", "SideClock", "available_bytes", "copy_bytes", "interleave", "load_copies", "now",
           "run_interleaved"]
