"""The race screen: one message with speculation off, then on, recorded on the engine thread and replayed side
by side in real time (:mod:`specchat.race`).

**Recording.** :meth:`RaceScreen.record` runs :func:`specchat.race.record_race` on the engine thread as a turn
of the :class:`~specchat.tui.engine_host.EngineHost` (so nothing else is sent meanwhile, and quitting waits for
it): the baseline first, then the speculative run - one after the other, never at once (two runs sharing the
CPU would slow each other). The screen shows which run is recording and how many tokens it has (at most
:data:`PROGRESS_INTERVAL_S` apart: the engine thread posts no per-token message). Esc cancels: the run in
flight ends at its next round boundary (``record_race``'s ``cancelled``), the conversation and the controls are
restored by ``record_race``, and the screen closes. The recorded timestamps are real (``time.monotonic``),
whatever clock the app was given.

**Replay.** :class:`RaceView` plays a :class:`~specchat.race.RaceResult` through :class:`~specchat.race.RaceReplay`
with the clock it is given (the app's; a fake one in tests, so what is on screen at replay time t is exactly
the pieces recorded at or before t): two :class:`RaceLane` panes, each a
:class:`~specchat.tui.widgets.token_view.TokenView` (the chat's widget, so the speculative pane has the chat's
token colours and ghost text), a clock, each run's tokens and tok/s once its run has ended in the replay, and
the ratio with the verdict (:func:`specchat.demo.verdict`) when both have. A timer checks every
:data:`FRAME_S` (one frame; both panes share it, so neither gains); ``r`` plays it again. Below
:data:`STACK_BELOW` columns the panes are stacked instead of side by side. The tour
(:mod:`specchat.tui.screens.tour`) shows its scenes in the same view.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual.containers import Container, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Static

from specchat.demo import verdict
from specchat.errors import UserError, describe_exception
from specchat.race import LANES, Lane, RaceCancelled, RaceReplay, RaceResult, TimedPiece, record_race, record_server_race
from specchat.tui.keys import RACE_KEYS, screen_bindings
from specchat.tui.sanitize import sanitize_line
from specchat.tui.widgets.token_view import TokenView

if TYPE_CHECKING:
    from specchat.engine.protocol import ChatEngine
    from specchat.tui.engine_host import EngineHost

#: the replay's timer: one frame at ~30 Hz (a piece shows at most this late, in both panes alike)
FRAME_S = 1 / 30
#: the recording's progress is posted at most this often (the engine thread never posts per token)
PROGRESS_INTERVAL_S = 0.2
#: below this many columns the two panes are stacked (side by side each would keep < 40 columns)
STACK_BELOW = 80

LANE_TITLES = {"off": "speculation off", "on": "speculation on"}
#: a race of two llama-servers (``--server-b``): lane "off" is server A, "on" server B (specchat.race)
SERVER_LANE_TITLES = {"off": "server A", "on": "server B"}


def mode_text(k: int | None) -> str:
    return "auto-K" if k is None else f"K {k}"


def progress_text(lane: Lane, tokens: int, titles: dict[Lane, str] = LANE_TITLES) -> str:
    """The recording's status line: which run of the two, and its tokens so far."""
    step = 1 if lane == "off" else 2
    return f"recording {step} of 2: {titles[lane]} \u00b7 {tokens} tokens (Esc cancels)"


def one_line(text: str, width: int = 60) -> str:
    line = sanitize_line(" ".join(text.split()))
    return line if len(line) <= width else line[: width - 1] + "\u2026"


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


# -- the view ----------------------------------------------------------------------------------------------
class RaceLane(Vertical):
    """One run of the race: its pieces as they were streamed, then its tokens and tok/s."""

    DEFAULT_CSS = """
    RaceLane {
        width: 1fr;
        height: 1fr;
        border: round $primary 50%;
        border-title-color: $primary;
        border-subtitle-color: $text-muted;
        padding: 0 1;
    }
    RaceLane > VerticalScroll {
        height: 1fr;
        scrollbar-size-vertical: 1;
    }
    """

    def __init__(self, lane: Lane) -> None:
        super().__init__(id=f"lane-{lane}")
        self.lane = lane
        self.tokens = TokenView(show_ghosts=True, classes="race-tokens")
        self.pieces = 0

    def compose(self):
        with VerticalScroll():
            yield self.tokens

    def start(self, title: str) -> None:
        self.border_title = sanitize_line(title)
        self.border_subtitle = ""
        self.tokens.clear()
        self.tokens.set_streaming(True)
        self.pieces = 0

    def append(self, pieces: list[tuple[str, str]]) -> None:
        self.tokens.append_pieces(pieces)
        self.pieces += len(pieces)
        self.query_one(VerticalScroll).scroll_end(animate=False)  # the newest text stays in view

    def finish(self, tokens: int, seconds: float, tok_s: float) -> None:
        self.tokens.set_streaming(False)
        self.border_subtitle = f"{tokens} tokens in {seconds:.2f} s \u00b7 {tok_s:.1f} tok/s"


class RaceView(Vertical):
    """Two panes, a clock and the result; plays a race by an injected clock (see the module docstring)."""

    DEFAULT_CSS = """
    RaceView {
        height: 1fr;
    }
    RaceView #race-status {
        height: 1;
        padding: 0 1;
        color: $text-muted;
    }
    RaceView #race-lanes {
        layout: horizontal;
        height: 1fr;
    }
    RaceView.stacked #race-lanes {
        layout: vertical;
    }
    RaceView #race-result {
        height: auto;
        padding: 0 1;
    }
    """

    def __init__(self, clock: Callable[[], float], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.clock = clock
        self.race: RaceResult | None = None
        self.replay: RaceReplay | None = None
        self._finished: set[Lane] = set()
        self._timer: Any = None

    def compose(self):
        yield Static(id="race-status")
        with Container(id="race-lanes"):
            for lane in LANES:
                yield RaceLane(lane)
        yield Static(id="race-result")

    def on_resize(self) -> None:
        self.set_class(self.app.size.width < STACK_BELOW, "stacked")

    def lane(self, lane: Lane) -> RaceLane:
        return self.query_one(f"#lane-{lane}", RaceLane)

    def show_status(self, text: str) -> None:
        self.query_one("#race-status", Static).update(Content(text))

    def show_result(self, text: str | Content) -> None:
        self.query_one("#race-result", Static).update(text if isinstance(text, Content) else Content(text))

    def clear(self, titles: dict[Lane, str] | None = None) -> None:
        """Empty panes (before a recording)."""
        self._stop_timer()
        self.race = self.replay = None
        for lane in LANES:
            self.lane(lane).start((titles or LANE_TITLES)[lane])
        self.show_result("")

    # -- replay ------------------------------------------------------------------------------------------
    def play(self, race: RaceResult) -> None:
        """Play ``race`` from its start (again, if it was playing)."""
        self.race = race
        self.replay = RaceReplay(race, self.clock)
        self._finished = set()
        for lane in LANES:
            self.lane(lane).start(lane_title(race, lane))
        self.show_result("")
        self.replay.start()
        if self._timer is None:
            self._timer = self.set_interval(FRAME_S, self.tick)
        self.tick()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def tick(self) -> None:
        """Show what is due by the clock now: the pieces recorded at or before the replay time, each run's
        figures once its run has ended, the ratio once both have."""
        replay, race = self.replay, self.race
        if replay is None or race is None:
            return
        batches: dict[Lane, list[tuple[str, str]]] = {lane: [] for lane in LANES}
        for event in replay.due():
            batches[event.lane].append((event.piece.text, event.piece.kind))
        for lane in LANES:
            if batches[lane]:
                self.lane(lane).append(batches[lane])
            if lane not in self._finished and replay.finished(lane):
                self._finished.add(lane)
                run = race.run(lane)
                self.lane(lane).finish(run.turn.predicted_n, run.t_end, run.tok_s)
        total = max(race.off.t_end, race.on.t_end)
        elapsed = min(replay.elapsed(), total)
        self.show_status(f"replay \u00b7 {elapsed:5.2f} s of {total:.2f} s (as recorded)")
        if replay.done:
            self._stop_timer()
            self.show_result(result_text(race))


def lane_title(race: RaceResult, lane: Lane) -> str:
    """The pane's title: what the lane is (:meth:`RaceResult.label`) and what ran it."""
    if lane == "off":
        return f"{race.label(lane)} \u00b7 {race.target}"
    return f"{race.label(lane)} \u00b7 {race.drafter} \u00b7 {mode_text(race.k)}"


def result_text(race: RaceResult) -> Content:
    """The race's verdict: both speeds, the ratio, helps / neutral / hurts, whether the texts are the same."""
    ratio = race.ratio
    parts = [f"off {race.off.tok_s:.1f} tok/s \u00b7 on {race.on.tok_s:.1f} tok/s"]
    if ratio is not None:
        parts.append(f"{ratio:.2f}\u00d7 \u2014 {verdict(ratio)}")
    turn = race.on.turn
    if turn.draft_n:
        acc = f"{turn.acceptance * 100:.0f} %" if turn.acceptance is not None else "\u2013"
        parts.append(f"drafted {turn.draft_n}, accepted {acc}")
    else:
        parts.append("nothing drafted")
    lines = [" \u00b7 ".join(parts)]
    lines += [sanitize_line(n) for n in race.on.notices]
    lines.append("texts identical" if race.identical else f"texts differ: {sanitize_line(race.difference)}")
    return Content("\n".join(lines))


# -- the screen --------------------------------------------------------------------------------------------
class RaceScreen(Screen[None]):
    """A race of one message: recorded (:meth:`record`) or given (``race``), then replayed."""

    BINDINGS = screen_bindings(RACE_KEYS)

    DEFAULT_CSS = """
    RaceScreen #race-header {
        height: auto;
        padding: 0 1;
        background: $surface;
    }
    """

    def __init__(
        self,
        prompt: str,
        clock: Callable[[], float],
        *,
        race: RaceResult | None = None,
        record: tuple[EngineHost, ChatEngine, int | None] | None = None,
        connect_b: Callable[[], ChatEngine] | None = None,
    ) -> None:
        """``race``: play this one; ``record``: (host, engine, K or None for auto-K) to record it with, once
        the screen is up; ``connect_b``: the engine is server A and this connects server B (a race of two
        llama-servers, run on the engine thread)."""
        super().__init__()
        self._connect_b = connect_b
        self.titles = SERVER_LANE_TITLES if connect_b is not None else LANE_TITLES
        self.prompt = prompt
        self.clock = clock
        self.race = race
        self._to_record = record
        self.turn_id: int | None = None
        self._host: EngineHost | None = None
        self._cancel = threading.Event()

    def compose(self):
        yield Static(
            Content(f"Race \u00b7 \u201c{one_line(self.prompt)}\u201d \u00b7 the message alone, greedy: "
                    f"{'server A, then server B' if self._connect_b else 'speculation off, then on'}, one after the other"),
            id="race-header",
        )  # fmt: skip
        yield RaceView(self.clock)
        yield Footer()

    @property
    def view(self) -> RaceView:
        return self.query_one(RaceView)

    @property
    def recording(self) -> bool:
        return self.turn_id is not None

    def on_mount(self) -> None:
        if self.race is not None:
            self.view.play(self.race)
        elif self._to_record is not None:
            self.record(*self._to_record)
        else:
            self.view.clear()

    def record(self, host: EngineHost, engine: ChatEngine, k: int | None) -> None:
        """Record the race on the engine thread (see the module docstring); the replay starts when it ends."""
        self._host = host
        self._cancel.clear()
        self.view.clear(self.titles)
        self.view.show_status(f"recording 1 of 2: {self.titles['off']} \u00b7 reading the prompt\u2026 (Esc cancels)")
        self.turn_id = host.start_turn(
            lambda turn_id: record_on_engine_thread(
                turn_id, engine, self.prompt, k, self.post_message,
                cancelled=lambda: self._cancel.is_set() or host.closing, connect_b=self._connect_b,
            )
        )  # fmt: skip

    def on_race_progress(self, message: RaceProgress) -> None:
        if self.recording:
            self.view.show_status(progress_text(message.lane, message.tokens, self.titles))

    def on_race_ended(self, message: RaceEnded) -> None:
        if self._host is not None:
            self._host.finish_turn(message.turn_id)
        self.turn_id = None
        if message.cancelled:
            self.app.notify("Race cancelled; the conversation is as it was.", timeout=4)
            self.dismiss()
        elif message.error:
            self.app.notify(f"No race: {message.error}", severity="error", timeout=10)
            self.dismiss()
        elif message.race is not None:
            self.race = message.race
            self.view.play(message.race)

    def action_close(self) -> None:
        if self.recording:
            self._cancel.set()
            self.view.show_status("cancelling\u2026 (the round in flight ends first)")
            return
        self.dismiss()

    def action_replay(self) -> None:
        if self.race is not None and not self.recording:
            self.view.play(self.race)
