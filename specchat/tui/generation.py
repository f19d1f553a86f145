"""The pump of a turn: the engine's events (engine thread) into the chat screen's messages (event loop).

:func:`pump_turn` runs on the engine thread (:meth:`specchat.tui.engine_host.EngineHost.start_turn`). It
consumes the engine's events as fast as the engine produces them and posts at most one :class:`PiecesBatch`
every :data:`FLUSH_INTERVAL_S` (~15 Hz) and one :class:`StatsUpdated` every :data:`STATS_INTERVAL_S`, via
``post`` (``ChatScreen.post_message``: thread-safe, non-blocking). It never calls ``call_from_thread``: that blocks
the engine thread until the UI has run the callback (~0.37 ms each, measured
with Textual 8.2.8), which per token would slow the engine it is measuring.

Stats go out at most every :data:`STATS_INTERVAL_S` (~4 Hz): redrawing the sidebar is the costliest
part of a frame, and on a 2-core machine every millisecond the UI thread spends is taken from llama.cpp.
The exception is a Step whose K, speculation, auto-K or drafter differs from the last one posted: it is
posted at once, so a change made mid-reply shows in the sidebar at the very step it takes effect, and so is
a :class:`~specchat.engine.events.Calibrating` (auto-K times v(K) for seconds before the first round: the
sidebar says so rather than look hung).
An :class:`~specchat.engine.events.AutoKNotice` (auto-K turned drafting off or on: the engine says each change
once) goes out in the batch's ``auto_k_notices``, apart from other notices, so the app shows each one once as
a chat line and a toast. A flush is checked after every event; the engine emits a :class:`Step` at the end of every round, so a
batch waits at most one round plus the interval. An exception from the engine ends the turn with an error
message (the chat shows it); it never propagates into Textual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from specchat.engine.events import (
    AutoKNotice,
    Calibrating,
    ContextTrimmed,
    EngineError,
    Event,
    Notice,
    Piece,
    PromptDone,
    Step,
    Turn,
)
from specchat.errors import describe_exception
from specchat.tui.messages import DraftingOff, PiecesBatch, StatsUpdated, TurnFinished
from specchat.tui.stats import LiveStats

#: Each batch costs a frame (a partial render, and a layout pass when the reply grows a line). Under load
#: the app's UI and engine threads share one scheduler slice (autogroup), so the UI's CPU is taken from
#: the engine: measured through a pty (bundled model, --threads 1, 300 tokens, load average ~4.5 on 2
#: cores, /proc per-thread CPU), the UI thread used 7-8 % of a core at 30 Hz pieces + 10 Hz stats and
#: 4-6 % at 15 Hz + 4 Hz, while the engine thread got ~45 %. 15 updates a second still streams smoothly.
FLUSH_INTERVAL_S = 1 / 15
#: the sidebar's numbers change every step but nobody reads them more than a few times a second; each
#: redraw of the sidebar (text, sparklines, big digits) costs CPU the engine would use on a small machine
STATS_INTERVAL_S = 1 / 4


class _Batch:
    """What a turn has produced since the last flush, and how it reaches the UI (``post``)."""

    def __init__(self, turn_id: int, post: Callable[[Any], Any], stats: LiveStats) -> None:
        self.turn_id = turn_id
        self.post = post
        self.stats = stats
        self.pieces: list[Piece] = []  # as the engine emitted them: the one record of a streamed piece
        self.notices: list[str] = []
        self.auto_k_notices: list[str] = []
        self.stats_dirty = False
        self.turn: Turn | None = None
        self.error: str | None = None
        self._posted_mode: tuple | None = None  # (k, speculative, auto_k, drafter) of the last Step the sidebar got

    def take(self, event: Event, now: float) -> bool:
        """Add one event to the batch; True if it must go out at once (the user changed K or speculation)."""
        if isinstance(event, Piece):
            self.pieces.append(event)
        elif isinstance(event, Step):
            self.stats.observe_step(event, now)
            self.stats_dirty = True
            # with auto-K on, K moves by itself (and often): only the user's switches force a post
            mode = (None if event.auto_k else event.k, event.speculative, event.auto_k, event.drafter)
            if mode != self._posted_mode:  # a K / speculation / drafter change shows at once, not throttled
                self._posted_mode = mode
                return True
        elif isinstance(event, PromptDone):
            self.stats.observe_prompt(event, now)
            self.stats_dirty = True
        elif isinstance(event, Calibrating):  # seconds with no event after it: the sidebar says why, at once
            self.stats.observe_calibrating(event)
            self.stats_dirty = True
            return True
        elif isinstance(event, Turn):
            self.turn = event
        elif isinstance(event, EngineError):
            self.error = event.message
        elif isinstance(event, ContextTrimmed):
            self.notices.append(
                f"The conversation no longer fit the context ({event.n_ctx} tokens): "
                f"the oldest {event.dropped_messages} message(s) were dropped for the model."
            )
        elif isinstance(event, AutoKNotice):  # said once by the engine: passed on once, as it is
            self.auto_k_notices.append(event.message)
            if not event.drafting:
                self.post(DraftingOff(event.drafter, event.message))  # the chat screen offers fixed K
        elif isinstance(event, Notice):
            self.notices.append(event.message)
        return False

    def flush(self, with_stats: bool) -> None:
        if self.pieces or self.notices or self.auto_k_notices:
            self.post(PiecesBatch(self.turn_id, self.pieces, self.notices, self.auto_k_notices))
            self.pieces, self.notices, self.auto_k_notices = [], [], []
        if self.stats_dirty and with_stats:
            self.post(StatsUpdated(self.stats.snapshot()))
            self.stats_dirty = False


def pump_turn(
    turn_id: int,
    events: Iterator[Event] | Callable[[], Iterator[Event]],
    post: Callable[[Any], Any],
    stats: LiveStats,
    clock: Callable[[], float],
    interval: float = FLUSH_INTERVAL_S,
    stats_interval: float = STATS_INTERVAL_S,
) -> Turn | None:
    """Consume one turn's events, posting batched pieces and stats; always posts :class:`TurnFinished`.

    ``events`` may be a callable that returns the iterator (so an exception raised while *starting* the
    turn, e.g. a prompt longer than the context, is reported like any other engine error). The iterator is
    always consumed to its end: stopping is the engine's job (``controls.request_stop()``), so its caches
    stay consistent.
    """
    batch = _Batch(turn_id, post, stats)
    last_flush = last_stats = clock()
    stats.start_turn(last_flush)
    post(StatsUpdated(stats.snapshot()))
    try:
        iterator = events() if callable(events) else events
        for event in iterator:
            now = clock()
            force = batch.take(event, now)
            if force or now - last_flush >= interval:
                with_stats = force or now - last_stats >= stats_interval
                batch.flush(with_stats)
                last_flush = now
                if with_stats:
                    last_stats = now
    except Exception as exc:  # the engine failed: end the turn with a message, never crash the app
        batch.error = describe_exception(exc)
    stats.finish_turn(batch.turn)
    batch.stats_dirty = True
    batch.flush(True)
    post(TurnFinished(turn_id, batch.turn, batch.error))
    return batch.turn
