"""The tour screen: the scenes of :data:`specchat.demo.SCENES`, one at a time - when speculation helps and when
it hurts, shown rather than told.

Each scene shows its number, name, pair and mode (a fixed K, or auto-K), its one sentence of explanation and
what to look for; then it is run as a race (the same message with speculation off, then on: the race screen's
:class:`~specchat.tui.widgets.race_view.RaceView`, so the speculative pane has the chat's colours and ghosts) and
replayed, ending with both speeds, the ratio and the verdict (helps / neutral / hurts,
:func:`specchat.demo.verdict`). ``n`` / → and ``p`` / ← move between scenes (a scene already run is replayed,
not recorded again), ``r`` replays, Esc closes (cancelling a scene being recorded at its next round).

**On the engine thread**, as turns of the :class:`~specchat.tui.engine_host.EngineHost` (nothing else runs
meanwhile; quitting cancels and waits): first the demo pairs are derived if they are missing
(:func:`specchat.demo.ensure_pairs`, its progress on screen); then each scene's pair is loaded the first time a
scene needs it (with the app's engine factory, :attr:`SpecChatApp.make_factory
<specchat.tui.app.SpecChatApp>`: the TUI never imports llama_cpp) and kept until the tour closes, when the
tour closes them on the engine thread (and so does the host's shutdown when the app quits with the tour open:
:meth:`EngineHost.own <specchat.tui.engine_host.EngineHost.own>`). Esc cancels the derivation too, at its next
step (a file's layer-skip, quantisation or load check: llama.cpp's quantiser itself cannot be interrupted), and
nothing half-written is left; and the history scene's first run, saving its earlier conversations (seconds to
minutes here), within a round (:func:`specchat.demo.load_scene`): the conversations are saved afresh when the scene
runs again, and a notification says so, since the tour may be closing. The chat's own models and conversation are not touched. Model drafters
run with the fixed K their scene gives (auto-K would switch them off at once and no colour would show); the
auto-K scenes then show auto-K's choice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from specchat.demo import (
    SCENES, Derive, Pair, Scene, SceneResult, ensure_pairs, load_scene, outcome_line, scenes_for,
    uses_helps_file,
)
from specchat.errors import UserError, describe_exception
from specchat.race import RaceCancelled
from specchat.tui.keys import TOUR_KEYS, screen_bindings
from specchat.tui.screens.race_base import RaceEnded, RaceProgress, RaceViewScreen, progress_text
from specchat.tui.widgets.race_view import LANE_TITLES

if TYPE_CHECKING:
    from specchat.config import Settings
    from specchat.tui.engine_host import EngineFactory, EngineHost


@dataclass(frozen=True)
class TourOptions:
    """What the app needs for the tour: ``derive`` writes the demo files (``specchat.models.derive.derive_demo``,
    passed in by the command: see :mod:`specchat.demo`), ``n_predict`` caps every scene's replies (None: each
    scene's own), ``open_at_start`` opens the app on the tour (``specchat demo``)."""

    derive: Derive
    n_predict: int | None = None
    open_at_start: bool = False
    scenes: tuple[Scene, ...] = SCENES
    #: chooses this machine's helps pair once the files are there (``pick(settings, progress)`` -> (pair, why),
    #: :func:`specchat.demo.choose_helps_pair`, passed in by the command); None: :data:`specchat.demo.HELPS_PAIR`
    pick: Callable[[Any, Callable[[str], None]], tuple[Pair, str]] | None = None


class TourStatus(Message):
    """A line of progress from the engine thread (deriving, loading)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class TourPrepared(Message):
    """The demo pairs are there (``error`` = "") or could not be made (``error`` says why and what to do), or
    their derivation was cancelled (``cancelled``)."""

    def __init__(self, turn_id: int, error: str, helps: Pair | None = None, why: str = "", *,
                 cancelled: bool = False) -> None:
        super().__init__()
        self.turn_id = turn_id
        self.error = error
        #: this machine's helps pair (:attr:`TourOptions.pick`) and where it came from, or None
        self.helps = helps
        self.why = why
        self.cancelled = cancelled


class DerivationCancelled(Exception):
    """Raised from the derivation's progress callback once the tour is asked to stop (Esc, quitting)."""


def scene_heading(i: int, scenes: Sequence[Scene]) -> Content:
    scene = scenes[i]
    return Content.assemble(
        Content.styled(f"Scene {i + 1} of {len(scenes)} \u00b7 {scene.name}", "bold"),
        Content(f"\n{scene.pair.label} \u00b7 {scene.mode}"),
    )


class TourScreen(RaceViewScreen):
    """The guided tour (see the module docstring)."""

    BINDINGS = screen_bindings(TOUR_KEYS)

    DEFAULT_CSS = """
    TourScreen #tour-scene {
        height: auto;
        padding: 0 1;
        background: $surface;
    }
    TourScreen #tour-sentence {
        height: auto;
        max-height: 15%;
        overflow-y: auto;
        padding: 0 1;
        margin: 1 0 0 0;
        text-style: bold;
        color: $accent;
    }
    TourScreen #tour-expect {
        height: auto;
        max-height: 15%;
        overflow-y: auto;
        padding: 0 1;
        color: $text-muted;
    }
    """
    # the sentence and the outcome each take at most 15 % of the screen (the rest scrolls): at 60x20 the history
    # scene's four-line sentence and a six-line outcome left the two lanes no row at all

    def __init__(
        self,
        options: TourOptions,
        host: EngineHost | None,
        make_factory: Callable[[Settings], EngineFactory] | None,
        settings: Settings | None,
        clock: Callable[[], float],
        *,
        results: dict[int, SceneResult] | None = None,
        start: int = 0,
    ) -> None:
        """``results``: scenes already raced (played, not recorded again); a scene without one is recorded with
        ``host``, ``make_factory`` and ``settings`` (the app's)."""
        super().__init__(clock, host)
        self.options = options
        self.scenes = options.scenes
        self.make_factory = make_factory
        self.settings = settings
        self.results: dict[int, SceneResult] = dict(results or {})
        self.index = start
        self.prepared = all(i in self.results for i in range(len(self.scenes)))
        #: the pairs loaded so far (used and closed on the engine thread only)
        self._sessions: dict[Pair, Any] = {}
        self._recording: int | None = None  # the scene being recorded (the turn in flight prepares or records)
        self._after: Callable[[], None] | None = None  # what to do once the turn in flight has ended
        #: the scene whose earlier conversations were being saved when it was cancelled (set on the engine thread)
        self._unsaved: Scene | None = None
        self.error: str | None = None

    def compose_header(self) -> Iterable[Widget]:
        yield Static(id="tour-scene")
        yield Static(id="tour-sentence")
        yield Static(id="tour-expect")

    def on_mount(self) -> None:
        if self.host is not None:
            self.host.own(id(self), self._close_sessions)  # closed at the app's shutdown if still open then
        self.show_scene()
        if self.prepared:
            self.run_scene()
        else:
            self.prepare()

    # -- scenes ------------------------------------------------------------------------------------------
    def show_scene(self) -> None:
        scene = self.scenes[self.index]
        self.query_one("#tour-scene", Static).update(scene_heading(self.index, self.scenes))
        self.query_one("#tour-sentence", Static).update(Content(scene.sentence))
        self.query_one("#tour-expect", Static).update(Content(f"look for: {scene.expect}"))
        self.view.clear()

    def run_scene(self) -> None:
        """Replay the scene's race if it was run, else record it (after the pairs are prepared)."""
        i, scene = self.index, self.scenes[self.index]
        if i in self.results:
            self.query_one("#tour-expect", Static).update(Content(outcome_line(self.results[i])))
            self.view.play(self.results[i].race)
            return
        if self.error is not None:
            self.view.show_status(f"cannot run the scene: {self.error}")
            return
        if self.host is None or not self.prepared:
            return
        self._recording = i
        self.view.clear({"off": f"{LANE_TITLES['off']} \u00b7 recording first", "on": LANE_TITLES["on"]})
        self.view.show_status(f"{scene.pair.label}: getting ready\u2026 (Esc cancels)")
        self.start_recording(None, scene.prompt, scene.k, prepare=lambda: self._session(scene))

    def _cancelled(self) -> bool:
        """The work in flight is to stop: Esc or a move (:meth:`cancel_turn`), or the app quitting."""
        return self._cancel.is_set() or (self.host is not None and self.host.closing)

    def _session(self, scene: Scene) -> Any:
        """On the engine thread: the scene's pair, loaded the first time, with the scene's reply length. A scene's
        earlier conversations are saved here the first time (:func:`specchat.demo.load_scene`), cancellable within
        a round; a cancelled save is said (:meth:`on_race_ended`) and its session closed, not kept."""
        session = self._sessions.get(scene.pair)
        if session is None:
            assert self.make_factory is not None and self.settings is not None
            self.post_message(TourStatus(f"loading {scene.pair.label}\u2026 (Esc cancels)"))
            factory = self.make_factory
            try:
                session = load_scene(scene, self.settings,
                                     lambda settings: factory(settings)(lambda fraction, what: None),
                                     lambda text: self.post_message(TourStatus(f"{text} (Esc cancels)")),
                                     self.options.n_predict, self._cancelled)
            except RaceCancelled:
                self._unsaved = scene  # read on the UI thread after the RaceEnded this cancel posts
                raise
            self._sessions[scene.pair] = session
        session.n_predict = self.options.n_predict or scene.n_predict
        return session

    def prepare(self) -> None:
        """Derive the demo pairs if missing, on the engine thread (progress on screen)."""
        if self.host is None or self.settings is None:
            self.error = "no engine in this session"
            return
        self.view.show_status("checking the demo models\u2026 (Esc cancels)")
        settings, derive, scenes = self.settings, self.options.derive, self.scenes
        pick = self.options.pick
        self._cancel.clear()

        def progress(text: str) -> None:  # between the derivation's steps: where it can stop
            if self._cancelled():
                raise DerivationCancelled
            self.post_message(TourStatus(f"{text} (Esc cancels)"))

        def work(turn_id: int) -> None:
            helps, why = None, ""
            try:
                ensure_pairs(scenes, settings.effective_data_dir(), derive=derive, threads=settings.threads,
                             progress=progress)
                if pick is not None and uses_helps_file(scenes):
                    helps, why = pick(settings, progress)
            except DerivationCancelled:
                self.post_message(TourPrepared(turn_id, "", cancelled=True))
            except UserError as exc:
                self.post_message(TourPrepared(turn_id, str(exc)))
            except Exception as exc:
                self.post_message(TourPrepared(turn_id, f"could not derive the demo models: {describe_exception(exc)}"))
            else:
                self.post_message(TourPrepared(turn_id, "", helps, why))

        self.turn_id = self.host.start_turn(work)

    # -- the engine thread's messages ---------------------------------------------------------------------
    def on_tour_status(self, message: TourStatus) -> None:
        self.view.show_status(message.text)

    def on_tour_prepared(self, message: TourPrepared) -> None:
        self.turn_ended(message.turn_id)
        if message.cancelled:
            self.view.show_status("the demo models' derivation was cancelled")
        elif message.error:
            self.error = message.error
            self.view.show_status(f"the tour cannot run: {message.error}")
            self.app.notify(f"Tour: {message.error}", severity="error", timeout=12)
        else:
            self.prepared = True
            if message.helps is not None:
                self.scenes = scenes_for(message.helps, self.scenes)
                self.show_scene()
                self.app.notify(message.why, timeout=8)
        if not self._then():
            self.run_scene()

    def on_race_progress(self, message: RaceProgress) -> None:
        if self._recording is not None:
            self.view.show_status(progress_text(message.lane, message.tokens))

    def on_race_ended(self, message: RaceEnded) -> None:
        self.turn_ended(message.turn_id)
        i, self._recording = self._recording, None
        if message.race is not None and i is not None:
            self.results[i] = SceneResult(self.scenes[i], message.race)
            if i == self.index:  # the measured verdict: the expectation, or what this CPU did instead and why
                self.query_one("#tour-expect", Static).update(Content(outcome_line(self.results[i])))
        elif message.error:
            self.view.show_status(f"the scene could not run: {message.error}")
        elif message.cancelled:
            unsaved, self._unsaved = self._unsaved, None
            if unsaved is not None:  # told in a notification too: the tour may be closing or moving on
                note = (f"the scene \u201c{unsaved.name}\u201d was cancelled before its {len(unsaved.earlier)} earlier "
                        "conversations were all saved; they are saved afresh when it runs again")
                self.view.show_status(note)
                self.app.notify(f"Tour: {note}", timeout=10)
            else:
                self.view.show_status("the scene was cancelled")
        if self._then():
            return
        if message.race is not None and i == self.index:
            self.view.play(message.race)

    def _then(self) -> bool:
        """Run what waited for the turn in flight (a move, closing); True if there was something."""
        after, self._after = self._after, None
        if after is None:
            return False
        after()
        return True

    # -- keys --------------------------------------------------------------------------------------------
    def go(self, index: int) -> None:
        """Show scene ``index`` (after cancelling a scene being recorded) and run it."""
        if not 0 <= index < len(self.scenes):
            return
        if self.busy:
            self._after = lambda: self.go(index)
            self.cancel_turn("finishing the round in flight\u2026")
            return
        self.index = index
        self.show_scene()
        self.run_scene()

    def action_next(self) -> None:
        self.go(self.index + 1)

    def action_previous(self) -> None:
        self.go(self.index - 1)

    def action_replay(self) -> None:
        if not self.busy and self.index in self.results:
            self.view.play(self.results[self.index].race)

    def action_close(self) -> None:
        if self.busy:
            self._after = self._close
            self.cancel_turn("closing once the work in flight has ended\u2026")
            return
        self._close()

    def _close_sessions(self) -> None:
        """On the engine thread: close the pairs this tour loaded (once: the dict is emptied)."""
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            session.close()

    def _close(self) -> None:
        if self.host is not None and not self.host.closing:  # while closing, the host's shutdown closes them
            self.host.disown(id(self))
            if self._sessions:
                self.host.submit(self._close_sessions, name="tour-close", description="close the tour's models")
        self.dismiss()
