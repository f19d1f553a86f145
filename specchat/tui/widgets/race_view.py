"""The view of a race: two panes replaying its runs side by side by time, a clock, and the result.

**Replay.** :class:`RaceView` plays a :class:`~specchat.race.RaceResult` through :class:`~specchat.race.RaceReplay`
with the clock it is given (the app's; a fake one in tests, so what is on screen at replay time t is exactly
the pieces recorded at or before t): two :class:`RaceLane` panes, each a
:class:`~specchat.tui.widgets.token_view.TokenView` (the chat's widget, so the speculative pane has the chat's
token colours and ghost text), a clock, each run's tokens and tok/s once its run has ended in the replay, and
the ratio with the verdict (:func:`specchat.demo.verdict`) when both have. A timer checks every
:data:`FRAME_S` (one frame; both panes share it, so neither gains). Below
:data:`STACK_BELOW` columns the panes are stacked instead of side by side. The race screen
(:mod:`specchat.tui.screens.race`) and the tour (:mod:`specchat.tui.screens.tour`) show their races in it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.containers import Container, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Static

from specchat.demo import verdict
from specchat.race import LANES, Lane, RaceReplay, RaceResult, TimedPiece
from specchat.tui.sanitize import sanitize_line
from specchat.tui.widgets.token_view import TokenView

#: the replay's timer: one frame at ~30 Hz (a piece shows at most this late, in both panes alike)
FRAME_S = 1 / 30
#: below this many columns the two panes are stacked (side by side each would keep < 40 columns)
STACK_BELOW = 80

LANE_TITLES = {"off": "speculation off", "on": "speculation on"}


def mode_text(k: int | None) -> str:
    return "auto-K" if k is None else f"K {k}"


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

    def append(self, pieces: list[TimedPiece]) -> None:
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
        batches: dict[Lane, list[TimedPiece]] = {lane: [] for lane in LANES}
        for event in replay.due():
            batches[event.lane].append(event.piece)
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
