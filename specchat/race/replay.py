"""Replaying a race: its two runs' pieces on one timeline, handed out by time.

**Replay** (:class:`RaceReplay`, pure): the two runs' pieces merged into one timeline and handed out by an
injected clock - at replay time t exactly the pieces recorded at or before t (scaled by ``speed``), so a UI
drives it from a timer and a test from a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specchat.race.record import LANES, Lane, RaceResult, TimedPiece


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """A piece of one lane, due at replay time ``piece.t`` (seconds, before the speed is applied)."""

    lane: Lane
    piece: TimedPiece


def timeline(race: RaceResult) -> tuple[ReplayEvent, ...]:
    """Both runs' pieces in time order (a tie goes to the baseline lane, then to the order recorded)."""
    events = [(p.t, i, j, ReplayEvent(lane, p)) for i, lane in enumerate(LANES) for j, p in enumerate(race.run(lane).pieces)]
    return tuple(e for *_key, e in sorted(events, key=lambda x: x[:3]))


class RaceReplay:
    """Plays a race back by time, through an injected clock (pure: no thread, no sleep; not the engine's
    :class:`specchat.engine.telemetry.replay.Replay`, which replays drafting rounds at every cap K).

    :meth:`start` notes the clock; :meth:`due` returns the pieces whose recorded time has come (every piece
    recorded at or before ``(clock - start) × speed``, compared as clock times: ``clock ≥ start + t / speed``),
    each once and in time order. :meth:`finished` says whether a
    lane's run is over (its final figures may be shown), :meth:`next_at` when the next piece is due (for a UI
    timer), :attr:`done` whether everything was played.
    """

    def __init__(self, race: RaceResult, clock: Callable[[], float], *, speed: float = 1.0) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        self.race = race
        self.clock = clock
        self.speed = speed
        self.events = timeline(race)
        self._next = 0
        self._t0: float | None = None

    def start(self) -> None:
        self._t0 = self.clock()
        self._next = 0

    @property
    def started(self) -> bool:
        return self._t0 is not None

    def elapsed(self) -> float:
        """Recorded time reached so far (seconds of the race, i.e. replay seconds × speed)."""
        if self._t0 is None:
            return 0.0
        return (self.clock() - self._t0) * self.speed

    def _at(self, t: float) -> float:
        """The clock time at which recorded time ``t`` is replayed (the one comparison every method uses, so a
        timer set to :meth:`next_at` finds its piece due, without rounding in between)."""
        assert self._t0 is not None
        return self._t0 + t / self.speed

    def due(self) -> list[ReplayEvent]:
        if self._t0 is None:
            return []
        now = self.clock()
        out = []
        while self._next < len(self.events) and now >= self._at(self.events[self._next].piece.t):
            out.append(self.events[self._next])
            self._next += 1
        return out

    def finished(self, lane: Lane) -> bool:
        """The lane's run has ended by now (its Turn had arrived at this recorded time)."""
        return self._t0 is not None and self.clock() >= self._at(self.race.run(lane).t_end)

    def next_at(self) -> float | None:
        """The clock time at which the next piece is due, None when every piece was handed out."""
        if self._t0 is None or self._next >= len(self.events):
            return None
        return self._at(self.events[self._next].piece.t)

    @property
    def done(self) -> bool:
        return self.started and self._next >= len(self.events) and all(self.finished(lane) for lane in LANES)


def play(
    race: RaceResult, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
    *, speed: float = 1.0,
) -> Iterator[ReplayEvent]:
    """The replay as a blocking iterator (headless use): sleeps until each piece is due, then yields it."""
    replay = RaceReplay(race, clock, speed=speed)
    replay.start()
    while not replay.done:
        yield from replay.due()
        at = replay.next_at()
        if at is None:
            at = max(replay._at(race.run(lane).t_end) for lane in LANES)
        wait = at - clock()
        if wait > 0:
            sleep(wait)
