"""The race screen: one message with speculation off, then on, recorded on the engine thread and replayed side
by side in real time (:mod:`specchat.race`).

**Recording.** :meth:`RaceScreen.record` runs :func:`specchat.race.record_race` on the engine thread as a turn
of the :class:`~specchat.tui.engine_host.EngineHost` (:func:`specchat.tui.screens.race_base.record_on_engine_thread`:
so nothing else is sent meanwhile, and quitting waits for it): the baseline first, then the speculative run - one
after the other, never at once (two runs sharing the CPU would slow each other). The screen shows which run is
recording and how many tokens it has (at most :data:`~specchat.tui.screens.race_base.PROGRESS_INTERVAL_S` apart:
the engine thread posts no per-token message). Esc cancels: the run in flight ends at its next round boundary
(``record_race``'s ``cancelled``), the conversation and the controls are restored by ``record_race``, and the
screen closes. The recorded timestamps are real (``time.monotonic``), whatever clock the app was given.

**Replay.** :class:`~specchat.tui.widgets.race_view.RaceView` plays the race with the clock it is given (the
app's; a fake one in tests); ``r`` plays it again. The tour (:mod:`specchat.tui.screens.tour`) shows its scenes
in the same view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

from specchat.engine.drafter_kinds import NONE
from specchat.race import RaceResult
from specchat.tui.keys import RACE_KEYS, screen_bindings
from specchat.tui.sanitize import sanitize_line
from specchat.tui.screens.race_base import RaceEnded, RaceProgress, RaceViewScreen, progress_text
from specchat.tui.outcomes import Refusal
from specchat.tui.widgets.race_view import LANE_TITLES

if TYPE_CHECKING:
    from specchat.config import Settings
    from specchat.engine.protocol import ChatEngine, Message
    from specchat.tui.engine_host import EngineFactory, EngineHost

#: a race of two llama-servers (``--server-b``): lane "off" is server A, "on" server B (specchat.race)
SERVER_LANE_TITLES = {"off": "server A", "on": "server B"}


def one_line(text: str, width: int = 60) -> str:
    line = sanitize_line(" ".join(text.split()))
    return line if len(line) <= width else line[: width - 1] + "\u2026"



class RaceScreen(RaceViewScreen):
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
        super().__init__(clock)
        self._connect_b = connect_b
        self.titles = SERVER_LANE_TITLES if connect_b is not None else LANE_TITLES
        self.prompt = prompt
        self.race = race
        self._to_record = record

    def compose_header(self) -> Iterable[Widget]:
        yield Static(
            Content(f"Race \u00b7 \u201c{one_line(self.prompt)}\u201d \u00b7 the message alone, greedy: "
                    f"{'server A, then server B' if self._connect_b else 'speculation off, then on'}, one after the other"),
            id="race-header",
        )

    def on_mount(self) -> None:
        if self.race is not None:
            self.view.play(self.race)
        elif self._to_record is not None:
            self.record(*self._to_record)
        else:
            self.view.clear()

    def record(self, host: EngineHost, engine: ChatEngine, k: int | None) -> None:
        """Record the race on the engine thread (see the module docstring); the replay starts when it ends."""
        self.host = host
        self.view.clear(self.titles)
        self.view.show_status(f"recording 1 of 2: {self.titles['off']} \u00b7 reading the prompt\u2026 (Esc cancels)")
        self.start_recording(engine, self.prompt, k, connect_b=self._connect_b)

    def on_race_progress(self, message: RaceProgress) -> None:
        if self.busy:
            self.view.show_status(progress_text(message.lane, message.tokens, self.titles))

    def on_race_ended(self, message: RaceEnded) -> None:
        self.turn_ended(message.turn_id)
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
        if self.busy:
            self.cancel_turn("cancelling\u2026 (the round in flight ends first)")
            return
        self.dismiss()

    def action_replay(self) -> None:
        if self.race is not None and not self.busy:
            self.view.play(self.race)


def race_for(
    engine: ChatEngine,
    text: str | None,
    host: EngineHost,
    clock: Callable[[], float],
    settings: Settings,
    make_factory: Callable[[Settings], EngineFactory] | None,
) -> RaceScreen | Refusal:
    """The race of ``text`` this session can run, ready to push, or why there is none.

    Local models: speculation off, then on, with the drafter and K in use (auto-K races as auto-K). A
    llama-server sets its speculation with its own flags, so it races only against a second server
    (``--server-b``): server A (this session's), then server B.
    """
    server_b = settings.server_b_url if engine.controls.fixed else None
    if engine.controls.fixed and (server_b is None or make_factory is None):
        return Refusal("A race turns speculation off and on with local models; this session uses a llama-server, "
                       "whose own flags set speculation: give --server-b URL to race it against a second server.",
                       "warning", 8)
    if host.generating:
        return Refusal("A reply is still being generated: press Esc first, then race.", "warning")
    if text is None:
        return Refusal("Nothing to race yet: type a message in the prompt, or send one first.")
    if server_b is not None and make_factory is not None:  # two llama-servers: A (this session), then B
        factory_b = make_factory(settings.model_copy(update={"server_url": server_b, "server_b_url": None}))
        return RaceScreen(text, clock, record=(host, engine, None), connect_b=lambda: factory_b(lambda _f, _w: None))
    state = engine.controls.snapshot()
    info = engine.info()
    if not info.can_speculate or (state.drafter or info.draft_name) == NONE:
        why = info.note or "no drafter is selected: choose one with ctrl+p \u2192 Drafter"
        return Refusal(f"Nothing to race against: {why}.", "warning", 8)
    k = None if state.auto_k else state.k
    if k == 0:
        return Refusal("K is 0, so nothing would be drafted: raise K or turn auto-K on, then race.", "warning")
    return RaceScreen(text, clock, record=(host, engine, k))


def race_text(prompt_text: str, messages: Sequence[Message]) -> str | None:
    """What the race key races: the prompt's text if there is any (what you are about to send), else the last
    user message of ``messages``; None when there is neither."""
    if prompt_text.strip():
        return prompt_text
    last = next((m for m in reversed(messages) if m.role == "user"), None)
    return last.content if last is not None else None
