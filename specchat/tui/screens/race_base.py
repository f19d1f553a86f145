"""What the race and tour screens share: a race recorded as a turn of the engine host (its progress and its
end posted as messages), and the base screen around a :class:`~specchat.tui.widgets.race_view.RaceView`.

**Recording** (:func:`record_on_engine_thread`): :func:`specchat.race.record_race` (or, for two llama-servers,
:func:`specchat.race.record_server_race`) runs on the engine thread as a turn of the
:class:`~specchat.tui.engine_host.EngineHost` (so nothing else is sent meanwhile, and quitting waits for it);
its progress is posted at most :data:`PROGRESS_INTERVAL_S` apart (the engine thread posts no per-token
message), and its end once, with the race, a cancel or an error. The recorded timestamps are real
(``time.monotonic``), whatever clock the app was given.

**The base screen** (:class:`RaceViewScreen`): the screen's own header, the view and the footer; the
engine-thread turn in flight (:attr:`RaceViewScreen.busy` while there is one) and the event that cancels it at
its next round boundary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from specchat.errors import UserError, describe_exception
from specchat.race import LANES, Lane, RaceCancelled, RaceResult, TimedPiece, record_race, record_server_race
from specchat.tui.widgets.race_view import LANE_TITLES, RaceView

if TYPE_CHECKING:
    from specchat.tui.engine_host import EngineHost

#: the recording's progress is posted at most this often (the engine thread never posts per token)
PROGRESS_INTERVAL_S = 0.2


def progress_text(lane: Lane, tokens: int, titles: dict[Lane, str] = LANE_TITLES) -> str:
    """The recording's status line: which run of the two, and its tokens so far."""
    step = 1 if lane == "off" else 2
    return f"recording {step} of 2: {titles[lane]} \u00b7 {tokens} tokens (Esc cancels)"


# -- messages the engine thread posts while recording -------------------------------------------------------
class RaceProgress(Message):
    """The recording's progress: the run recording now and its tokens so far."""

    def __init__(self, lane: Lane, tokens: int) -> None:
        super().__init__()
        self.lane = lane
        self.tokens = tokens

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RaceProgress)


class RaceEnded(Message):
    """The recording ended: with a race, cancelled, or with an error (one line)."""

    def __init__(self, turn_id: int, race: RaceResult | None, *, cancelled: bool = False, error: str = "") -> None:
        super().__init__()
        self.turn_id = turn_id
        self.race = race
        self.cancelled = cancelled
        self.error = error


def record_on_engine_thread(
    turn_id: int,
    engine: Any,
    prompt: str,
    k: int | None,
    post: Callable[[Message], Any],
    cancelled: Callable[[], bool],
    *,
    prepare: Callable[[], Any] | None = None,
    connect_b: Callable[[], Any] | None = None,
) -> RaceResult | None:
    """The race as a turn of the engine host (runs on the engine thread): record, post progress, post the end.
    ``prepare()`` runs first (the tour loads its pair there: its errors are the race's). ``connect_b()``: the
    session is a llama-server (server A) and this connects server B (``--server-b``): the race is then the two
    servers (:func:`specchat.race.record_server_race`), server B closed afterwards."""
    counts = {lane: 0 for lane in LANES}
    last = [0.0]

    def on_piece(lane: Lane, piece: TimedPiece) -> None:
        counts[lane] += 1
        now = time.monotonic()
        if now - last[0] >= PROGRESS_INTERVAL_S:
            last[0] = now
            post(RaceProgress(lane, counts[lane]))

    try:
        if prepare is not None:
            engine = prepare()
        if connect_b is not None:
            b = connect_b()
            try:
                race = record_server_race(engine, b, prompt, on_piece=on_piece, cancelled=cancelled)
            finally:
                b.close()
        else:
            race = record_race(engine, prompt, k=k, on_piece=on_piece, cancelled=cancelled)
    except RaceCancelled:
        post(RaceEnded(turn_id, None, cancelled=True))
        return None
    except UserError as exc:
        post(RaceEnded(turn_id, None, error=str(exc)))
        return None
    except Exception as exc:  # an engine that cannot race, a library error: a message, never a crash
        post(RaceEnded(turn_id, None, error=f"the race failed: {describe_exception(exc)}"))
        return None
    post(RaceEnded(turn_id, race))
    return race


# -- the base screen ---------------------------------------------------------------------------------------
class RaceViewScreen(Screen[None]):
    """The base of the race and tour screens: :meth:`compose_header`'s widgets over a :class:`RaceView` and the
    footer; :attr:`turn_id`, the engine-thread turn in flight on :attr:`host`, and the event that cancels it."""

    def __init__(self, clock: Callable[[], float], host: EngineHost | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.host = host
        self.turn_id: int | None = None  # the engine-thread turn in flight
        self._cancel = threading.Event()

    def compose_header(self) -> Iterable[Widget]:
        """The widgets above the view."""
        return ()

    def compose(self):
        yield from self.compose_header()
        yield RaceView(self.clock)
        yield Footer()

    @property
    def view(self) -> RaceView:
        return self.query_one(RaceView)

    @property
    def busy(self) -> bool:
        return self.turn_id is not None

    def start_recording(self, engine: Any, prompt: str, k: int | None, **options: Any) -> None:
        """Record a race of ``prompt`` on :attr:`host`'s engine thread (:func:`record_on_engine_thread`, with
        ``options``): cancelled by :meth:`cancel_turn` or the host closing."""
        host = self.host
        assert host is not None
        self._cancel.clear()
        self.turn_id = host.start_turn(
            lambda turn_id: record_on_engine_thread(
                turn_id, engine, prompt, k, self.post_message,
                cancelled=lambda: self._cancel.is_set() or host.closing, **options,
            )
        )

    def cancel_turn(self, status: str) -> None:
        """Ask the turn in flight to stop (at its next round boundary), saying ``status`` meanwhile."""
        self._cancel.set()
        self.view.show_status(status)

    def turn_ended(self, turn_id: int) -> None:
        """The engine thread's turn ``turn_id`` has posted its end: the host may run the next."""
        if self.host is not None:
            self.host.finish_turn(turn_id)
        self.turn_id = None
