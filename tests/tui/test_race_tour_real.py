"""The race and the tour on the real engine (issue 11), through Pilot: the engine is built as ``specchat`` builds
it (:func:`specchat.commands.tui.make_factory`), the demo files are derived by the real deriver, the replay runs
on an injected clock (so the test decides when the replay has ended, never by sleeping).

- the race key end to end on the bundled model (short replies, one thread);
- Esc in bursts while a race records (tiny generated pair: fast) - always cancelled within a round, the
  conversation and controls as before, the app still answering;
- the whole tour on the bundled model, every scene run as a race, from a data dir without the demo files;
- auto-K turning the bundled model's self-draft off offers fixed K, and the palette entry sets it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from enginekit import assert_identical_or_a_near_tie
from tuikit import notifications, palette, send, settle, wait_ready

from specchat import demo
from specchat.commands.tui import derive_demo_models, make_factory
from specchat.config import Settings
from specchat.engine.events import Piece
from specchat.race import LANES
from specchat.tui.app import SpecChatApp
from specchat.tui.screens.race import RaceScreen
from specchat.tui.sanitize import sanitize
from specchat.tui.screens.tour import TourOptions, TourScreen
from specchat.tui.widgets.prompt import PromptInput
from specchat.tui.widgets.race_view import RaceView

SIZE = (120, 36)


class Clock:
    """The app's clock for the replay: stands still until the test moves it."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _settings(tmp_path: Path, target: str, draft: str, **kw) -> Settings:
    values = dict(target=target, draft=draft, k=4, auto_k=False, n_predict=16, n_ctx=1024, threads=1,
                  data_dir=tmp_path / "data", theme="specchat-dark")
    values.update(kw)
    return Settings(**values)


def _app(settings: Settings, clock: Clock, tour: TourOptions | None = None) -> SpecChatApp:
    return SpecChatApp(make_factory(settings), settings, clock=clock, make_factory=make_factory, tour=tour)


def _assert_replayed(view: RaceView, race) -> None:
    """The replay has ended: each pane holds exactly its run's pieces, ghosts included, and its figures."""
    for lane in LANES:
        run = race.run(lane)
        tokens = view.lane(lane).tokens
        assert view.lane(lane).pieces == tokens.n_tokens == len(run.pieces)
        assert {k for _t, k in tokens.kinds_text() if k} == {p.kind for p in run.pieces if p.text.strip("\n")}
        assert tokens.reply_text == sanitize(run.text)
        assert f"{run.tok_s:.1f} tok/s" in str(view.lane(lane).border_subtitle)
    assert f"{race.ratio:.2f}×" in str(view.query_one("#race-result").render())


@pytest.mark.slow
async def test_the_race_key_races_the_last_message_on_the_bundled_model(tmp_path, bundled_model):
    clock = Clock()
    app = _app(_settings(tmp_path, "bundled", "ngram"), clock)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        await send(pilot, "Repeat this line exactly: the quick brown fox jumps over the lazy dog.")
        await settle(pilot)
        engine = app.engine
        before = list(engine.messages)
        controls = engine.controls.snapshot()
        await pilot.press("alt+r")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RaceScreen) and screen.prompt == before[-2].content
        await settle(pilot)  # the recording is a worker on the engine thread
        race = screen.race
        assert race is not None and not screen.busy and not app.host.generating
        assert race.off.turn.draft_n == 0 and race.on.turn.draft_n > 0 and race.k == 4
        assert_identical_or_a_near_tie(race)
        assert engine.messages == before and engine.controls.snapshot() == controls  # nothing changed
        clock.t += 60.0
        screen.view.tick()
        await pilot.pause()
        _assert_replayed(screen.view, race)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RaceScreen)
        await send(pilot, "Thanks!")  # the chat goes on where it was
        await settle(pilot)
        assert [m.content for m in engine.messages if m.role == "user"][-2:] == [before[-2].content, "Thanks!"]


class Gated:
    """A real ChatSession, everything delegated, whose replies can wait at their first piece until the test opens
    the gate: so an Esc lands exactly mid-run (or before the run), whatever the machine's speed."""

    def __init__(self, session) -> None:
        object.__setattr__(self, "_session", session)
        object.__setattr__(self, "gate", threading.Event())
        object.__setattr__(self, "waiting", threading.Event())
        object.__setattr__(self, "hold_runs", set())  # which replies (1 = the next) wait at their first piece
        object.__setattr__(self, "runs", 0)

    def __getattr__(self, name):
        return getattr(self._session, name)

    def __setattr__(self, name, value):  # record_race restores the session's system prompt: on the session
        setattr(self._session, name, value)

    def arm(self, *runs: int) -> None:
        self.gate.clear()
        self.waiting.clear()
        object.__setattr__(self, "hold_runs", set(runs))
        object.__setattr__(self, "runs", 0)

    def send(self, text):
        object.__setattr__(self, "runs", self.runs + 1)
        held = self.runs in self.hold_runs
        for event in self._session.send(text):
            yield event
            if held and isinstance(event, Piece):
                held = False
                self.waiting.set()
                assert self.gate.wait(timeout=120), "the test never opened the gate"


async def test_escape_in_bursts_cancels_a_recording_race_and_restores_the_conversation(tmp_path, tiny_pair, greedy_prompts):
    """Esc in the same burst as the race key (before the baseline starts, or at its first piece), Esc during
    the baseline, Esc during the speculative run, Esc twice: each time the race is cancelled (never a result),
    the conversation and the controls are as before, and the chat still answers."""
    target, draft = tiny_pair
    settings = _settings(tmp_path, str(target), str(draft), n_predict=48, k=3, threads=2)
    real = make_factory(settings)
    box: dict = {}

    def factory(progress):
        box["engine"] = Gated(real(progress))
        return box["engine"]

    app = SpecChatApp(factory, settings, clock=Clock(), make_factory=make_factory)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        engine: Gated = box["engine"]
        await send(pilot, greedy_prompts[0])
        await settle(pilot)
        before = list(engine.messages)
        controls = engine.controls.snapshot()
        cases = [  # (keys in one burst, the reply of the race that waits for Esc: 1 baseline, 2 speculative)
            (("alt+r", "escape"), 1), (("alt+r", "escape", "escape"), 1), (("alt+r",), 1), (("alt+r",), 2),
        ]
        for keys, run in cases:
            app.clear_notifications()
            engine.arm(run)
            await pilot.press(*keys)
            if keys == ("alt+r",):  # Esc mid-run: once that run has streamed its first piece
                assert isinstance(app.screen, RaceScreen)
                assert await asyncio.to_thread(engine.waiting.wait, 120)
                await pilot.pause()
                await pilot.press("escape")
            engine.gate.set()
            await settle(pilot)
            assert not isinstance(app.screen, RaceScreen), keys
            assert any("Race cancelled" in m for m in notifications(app)), (keys, run, notifications(app))
            assert not app.host.generating
            assert engine.messages == before and engine.controls.snapshot() == controls
        app.query_one(PromptInput).text = ""
        engine.arm()
        await send(pilot, greedy_prompts[1])
        await settle(pilot)
        assert engine.messages[-1].role == "assistant" and not engine.messages[-1].stopped


@pytest.mark.slow
async def test_the_tour_runs_every_scene_on_the_bundled_model(tmp_path, bundled_model):
    """From a data dir without the demo files: they are derived (with progress), each pair is loaded once, each
    scene is recorded as a race and replayed, with its verdict; model drafters draft with their fixed K."""
    clock = Clock()
    settings = _settings(tmp_path, "bundled", "ngram", auto_k=True)
    app = _app(settings, clock, TourOptions(derive=derive_demo_models, n_predict=16, open_at_start=True))
    async with app.run_test(size=(100, 32)) as pilot:
        await settle(pilot)
        tour = app.screen
        assert isinstance(tour, TourScreen) and tour.error is None, getattr(tour, "error", None)
        assert (tmp_path / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.layerskip-0-5_24-29.gguf").is_file()
        for i in range(len(demo.SCENES)):
            await settle(pilot)
            assert tour.index == i and i in tour.results, (i, tour.error)
            clock.t += 60.0
            tour.view.tick()
            await pilot.pause()
            _assert_replayed(tour.view, tour.results[i].race)
            await pilot.press("n")
        await settle(pilot)
        figures = [tour.results[i].figures() for i in range(len(demo.SCENES))]
        for i, f in enumerate(figures):
            assert f["tokens"] > 0 and f["tok_s_off"] > 0 and f["tok_s_on"] > 0 and f["verdict"] in ("helps", "neutral", "hurts")
            assert_identical_or_a_near_tie(tour.results[i].race)
        # the history scene: its earlier conversations were answered and saved in the tour's own history first, and
        # its reply copied from them (issue 23)
        assert figures[8]["history_drafts"] > 0 and (tmp_path / "data" / demo.TOUR_HISTORY_DIR / "earlier.txt").is_file()
        self_draft, layer_skip = tour.results[2].race.on, tour.results[3].race.on
        assert {p.kind for p in self_draft.pieces} & {"accepted", "bonus"}  # K 4 fixed: its colours show
        assert any(p.kind == "rejected" for p in layer_skip.pieces)  # ghosts
        assert app.engine is not None and all(m.role == "system" for m in app.engine.messages)  # the chat untouched
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, TourScreen) and not app.host.generating


@pytest.mark.slow
async def test_auto_k_judging_a_model_draft_unprofitable_offers_fixed_k(tmp_path, bundled_model):
    """The bundled model drafting for itself costs a whole target decode per draft token: auto-K turns drafting
    off before the first round and says so; the app offers fixed K and the palette entry sets it."""
    clock = Clock()
    app = _app(_settings(tmp_path, "bundled", "bundled", auto_k=True, k=4), clock)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.engine_error is None, app.engine_error
        await send(pilot, "Hi!")
        await settle(pilot)
        offers = [n for n in notifications(app) if "Use fixed K" in n]
        assert len(offers) == 1 and "unprofitable" in offers[0], notifications(app)
        assert app.chat_screen.assistant_messages()[-1].turn.draft_n == 0
        await palette(pilot, "use fixed k")
        state = app.engine.controls.snapshot()
        assert not state.auto_k and state.k == 4 and state.speculative
        await send(pilot, "Say it again.")
        await settle(pilot)
        assert app.chat_screen.assistant_messages()[-1].turn.draft_n > 0  # fixed K: the model drafter drafts every round
