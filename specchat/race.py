"""The race: one message answered with speculation off and then on, recorded piece by piece, and replayed
side by side by time.

**Recording** (:func:`record_race`, on the engine thread): the same message, greedy, first with speculation
off, then on (with a fixed K or auto-K) - one after the other, never at once: two runs sharing one CPU would
slow each other and falsify both. Each run starts from empty caches and a conversation holding only the
message (and the system prompt), so both decode the prompt the same way; every piece (ghost drafts included)
is stamped with the monotonic time since the run's generation started - the
:class:`~specchat.engine.events.PromptDone` event, which comes after the prompt and any auto-K calibration,
so neither counts. The caller's conversation and controls are restored afterwards (the caches follow by
longest common prefix on the next turn).

**Cancelling** (a UI's Esc, the app quitting): ``cancelled()`` is asked before each run and at each piece; once
it says yes, the run is asked to stop (``controls.request_stop``: it ends at the next round boundary, caches
consistent) and :class:`RaceCancelled` is raised after it - as it is when a run ends ``stopped`` by any other
stop request. A half-run race compares nothing, so there is no partial result. The per-piece check is what
makes a cancel reliable: a run clears stop requests when it starts (``ChatSession``), so a request made
between the two runs alone would be lost.

**Same text.** Greedy speculative decoding keeps exactly the target's argmax, so both texts should be
identical and only the speed differ. Verified: when the token ids part, :func:`record_race` measures the
target's preference between the two tokens where they part; a gap within :data:`NEAR_TIE` is the batch-size
numerics described in :mod:`specchat.engine.chat` ("Greedy replies and batch sizes": a verify batch's logits
differ from single-row decoding by up to ~0.9 on the bundled model, so at a near-tie the argmax can flip),
said in :attr:`RaceResult.difference`; anything larger would be a defect.

**Replay** (:class:`Replay`, pure): the two runs' pieces merged into one timeline and handed out by an
injected clock - at replay time t exactly the pieces recorded at or before t (scaled by ``speed``), so a UI
drives it from a timer and a test from a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from specchat.engine.drafter_kinds import NONE
from specchat.engine.events import EngineError, Notice, Piece, PieceKind, PromptDone, Step, Turn
from specchat.errors import UserError

if TYPE_CHECKING:  # the replay half is pure: a UI imports this module without llama.cpp
    from specchat.engine.chat import ChatSession

Lane = Literal["off", "on"]
LANES: tuple[Lane, ...] = ("off", "on")
#: logit gaps up to this are near-ties that batch-size numerics can flip (measured up to 0.86 between batch
#: splits on the bundled SmolLM2: specchat.engine.chat); a larger gap where the texts part would be a defect
NEAR_TIE = 1.0


class RaceCancelled(Exception):
    """The race was cancelled (or a run was stopped) before both runs ended; the conversation is restored."""


@dataclass(frozen=True, slots=True)
class TimedPiece:
    """One piece of a run and when it arrived: ``t`` seconds after the run's generation started."""

    t: float
    text: str
    kind: PieceKind
    token: int


@dataclass(frozen=True, slots=True)
class RaceRun:
    """One run of the race: its pieces in order, its :class:`Turn`, and when it ended (``t_end`` seconds after
    its generation started, when the Turn arrived); the notices it gave (e.g. auto-K turning drafting off) and
    its last :class:`Step` (how K was chosen at the end, the reply's and the recent figures)."""

    lane: Lane
    pieces: tuple[TimedPiece, ...]
    turn: Turn
    t_end: float
    notices: tuple[str, ...] = ()
    last_step: Step | None = None

    @property
    def text(self) -> str:
        return self.turn.text

    @property
    def tok_s(self) -> float:
        """The run's generation speed as the engine measured it (``predicted_per_second``)."""
        return self.turn.predicted_per_second


@dataclass(frozen=True, slots=True)
class RaceResult:
    """Both runs of a race and whether their texts are the same."""

    prompt: str
    target: str
    drafter: str
    k: int | None  # the fixed K of the speculative run; None = auto-K
    off: RaceRun
    on: RaceRun
    #: the index of the first token where the two replies differ, None when they are identical
    first_difference: int | None = None
    #: why they differ, in one line ("" when identical)
    difference: str = ""

    @property
    def identical(self) -> bool:
        return self.first_difference is None

    @property
    def ratio(self) -> float | None:
        """Speculation on / off, generation speed (None when the baseline has no speed)."""
        return self.on.tok_s / self.off.tok_s if self.off.tok_s > 0 else None

    def run(self, lane: Lane) -> RaceRun:
        return self.off if lane == "off" else self.on


def _one_run(session: ChatSession, prompt: str, lane: Lane, clock: Callable[[], float],
             on_piece: Callable[[Lane, TimedPiece], None] | None, cancelled: Callable[[], bool]) -> RaceRun:  # fmt: skip
    if cancelled():
        raise RaceCancelled
    session.decoder.reset()  # empty caches: both runs decode the prompt alike
    session.reset()
    pieces: list[TimedPiece] = []
    t0: float | None = None
    turn: Turn | None = None
    t_end = 0.0
    notices: list[str] = []
    last_step: Step | None = None
    for ev in session.send(prompt):
        if isinstance(ev, Step):
            last_step = ev
        elif isinstance(ev, Notice):
            notices.append(ev.message)
        elif isinstance(ev, PromptDone):
            t0 = clock()
        elif isinstance(ev, Piece):
            now = clock()
            piece = TimedPiece(now - (t0 if t0 is not None else now), ev.text, ev.kind, ev.token)
            pieces.append(piece)
            if on_piece is not None:
                on_piece(lane, piece)
            if cancelled():
                session.controls.request_stop()
        elif isinstance(ev, Turn):
            turn = ev
            now = clock()
            t_end = now - (t0 if t0 is not None else now)
        elif isinstance(ev, EngineError):
            raise UserError(f"the race's {'speculative' if lane == 'on' else 'baseline'} run failed: {ev.message}")
    if turn is None:  # pragma: no cover - a reply always ends with a Turn
        raise UserError("the race produced no reply")
    if turn.stop_reason == "stopped" or cancelled():
        raise RaceCancelled
    return RaceRun(lane, tuple(pieces), turn, t_end, tuple(notices), last_step)


def _near_tie(session: ChatSession, run: RaceRun, other: RaceRun, at: int) -> float:
    """How much the target prefers ``run``'s token over ``other``'s where they part, decoded in one batch on
    fresh caches (the logit gap; small = a near-tie)."""
    dec = session.decoder
    context = session.template.tokens(session.messages[:-1]) + list(run.turn.tokens[:at])
    dec.reset()
    logits = dec.target.decode(context, logits_last=1)
    dec.reset()
    assert logits is not None
    row = logits[0]
    return float(row[run.turn.tokens[at]] - row[other.turn.tokens[at]])


def record_race(
    session: ChatSession,
    prompt: str,
    *,
    k: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_piece: Callable[[Lane, TimedPiece], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> RaceResult:
    """Run ``prompt`` greedily with speculation off, then on with the fixed ``k`` (None: auto-K), on the
    engine thread; ``on_piece(lane, piece)`` is called as each piece arrives (a UI's progress). The session's
    conversation and controls are as before afterwards. :class:`UserError` when the session cannot speculate
    (no drafter, a recurrent target) or K is 0; :class:`RaceCancelled` once ``cancelled()`` (see the module
    docstring)."""
    dec = session.decoder
    if dec.drafter is None or not dec.can_speculate:
        why = "the target cannot roll back its KV (recurrent/hybrid)" if not dec.can_speculate else "no drafter is loaded"
        raise UserError(f"nothing to race: {why}; give a drafter (--draft ngram or a draft model)")
    if k is not None and k <= 0:
        raise UserError("nothing to race with K = 0: give --k 1 or more, or --auto-k")
    controls = session.controls
    saved_state = controls.snapshot()
    saved_messages = list(session.messages)
    saved_system = session.system_prompt
    greedy = replace(saved_state.sampling, temperature=0.0)
    try:
        controls.set_sampling(greedy)
        controls.set_speculative(False)
        off = _one_run(session, prompt, "off", clock, on_piece, cancelled)
        controls.set_speculative(True)
        controls.set_auto_k(k is None)
        if k is not None:
            controls.set_k(k)
        on = _one_run(session, prompt, "on", clock, on_piece, cancelled)
        first = next(
            (i for i, (a, b) in enumerate(zip(off.turn.tokens, on.turn.tokens, strict=False)) if a != b), None
        )
        if first is None and len(off.turn.tokens) != len(on.turn.tokens):
            first = min(len(off.turn.tokens), len(on.turn.tokens))
        difference = ""
        if first is not None:
            if first < min(len(off.turn.tokens), len(on.turn.tokens)):
                gap = _near_tie(session, off, on, first)
                piece = dec.target.piece
                a = piece(off.turn.tokens[first]).decode("utf-8", "replace")
                b = piece(on.turn.tokens[first]).decode("utf-8", "replace")
                kind = "a near-tie" if abs(gap) <= NEAR_TIE else "not a near-tie: a defect, please report it"
                difference = (
                    f"the texts part at token {first + 1} ({a!r} without speculation, {b!r} with it): {kind} - the "
                    f"target scores them {abs(gap):.2f} apart, and a verify batch's logits differ from one-token "
                    "decoding by about that much (specchat/engine/chat.py)"
                )
            else:
                difference = (
                    f"one reply stopped after {first} tokens and the other went on: the end-of-text token was a "
                    "near-tie"
                )
    finally:
        controls.set_sampling(saved_state.sampling)
        controls.set_speculative(saved_state.speculative)
        controls.set_auto_k(saved_state.auto_k)
        controls.set_k(saved_state.k)
        session.load(saved_messages)
        session.system_prompt = saved_system
    return RaceResult(
        prompt=prompt, target=dec.target.name, drafter=dec.drafter_name or NONE, k=k, off=off, on=on,
        first_difference=first, difference=difference,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """A piece of one lane, due at replay time ``piece.t`` (seconds, before the speed is applied)."""

    lane: Lane
    piece: TimedPiece


def timeline(race: RaceResult) -> tuple[ReplayEvent, ...]:
    """Both runs' pieces in time order (a tie goes to the baseline lane, then to the order recorded)."""
    events = [(p.t, i, j, ReplayEvent(lane, p)) for i, lane in enumerate(LANES) for j, p in enumerate(race.run(lane).pieces)]
    return tuple(e for *_key, e in sorted(events, key=lambda x: x[:3]))


class Replay:
    """Plays a race back by time, through an injected clock (pure: no thread, no sleep).

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
) -> Iterator[ReplayEvent]:  # fmt: skip
    """The replay as a blocking iterator (headless use): sleeps until each piece is due, then yields it."""
    replay = Replay(race, clock, speed=speed)
    replay.start()
    while not replay.done:
        yield from replay.due()
        at = replay.next_at()
        if at is None:
            at = max(replay._at(race.run(lane).t_end) for lane in LANES)
        wait = at - clock()
        if wait > 0:
            sleep(wait)


__all__ = [
    "LANES", "NEAR_TIE", "Lane", "RaceCancelled", "RaceResult", "RaceRun", "Replay", "ReplayEvent", "TimedPiece", "play",
    "record_race", "timeline",
]  # fmt: skip
