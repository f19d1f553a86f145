"""The tour's history scene while it saves its earlier conversations (issue 23), through Pilot: Esc (closing the
tour) and a move to another scene cancel the saving within a round, the tour says so, the session it loaded is
closed and not kept, no marker is written, and the scene saves them afresh when it runs again.

The engines are fake (:class:`FakeEngine`, held at a round so the test knows where the saving is, never by
sleeping); the real model's side of the cancel is tested in ``tests/test_bench_history.py`` (``seed_history``)
and ``tests/test_demo.py`` (``load_scene``).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

from fake_engine import FakeEngine
from tuikit import fake_settings, notifications, screen_text, settle, wait_hold, wait_ready

from specchat import demo
from specchat.engine.drafter_kinds import SUFFIX
from specchat.history import HistoryStore
from specchat.tui.app import SpecChatApp
from specchat.tui.screens.tour import TourOptions, TourScreen

HISTORY = next(s for s in demo.SCENES if s.earlier)
#: the history scene on the bundled model (nothing to derive), with three earlier conversations
SCENE = replace(HISTORY, pair=demo.Pair("bundled", SUFFIX, "bundled SmolLM2 + suffix"), earlier=HISTORY.earlier[:3])
#: a scene without a history, on another pair
PLAIN = next(s for s in demo.SCENES if s.pair.target == "bundled" and not s.earlier)
REPLY = "def f(records):\n    return sum(r['x'] for r in records if 'x' in r)\n"


def _no_derive(*args, **kwargs):
    raise AssertionError("nothing to derive: the scenes are on the bundled model")


class Factory:
    """The tour's engine factory: a fake engine per load, the first ones held before their second round (each
    reply's round 1) until the test releases them; ``built`` is set once each engine is made."""

    def __init__(self, held: int) -> None:
        self.held = held  # how many of the first engines hold
        self.engines: list[FakeEngine] = []
        self.built = threading.Event()

    def __call__(self, settings):
        def build(progress):
            holds = (1,) if len(self.engines) < self.held else ()
            self.engines.append(FakeEngine([REPLY], speculative=True, hold_at_steps=holds))
            self.built.set()
            return self.engines[-1]
        return build


def _own(tmp_path: Path) -> Path:
    return tmp_path / demo.TOUR_HISTORY_DIR


def _saved(tmp_path: Path) -> int:
    with HistoryStore(_own(tmp_path) / "history.sqlite3") as store:
        return len(store.list_conversations())


def _sent(engine: FakeEngine) -> list[str]:
    return [c.removeprefix("send:") for c in engine.calls if c.startswith("send:")]


async def _at_second_conversation(pilot, factory: Factory) -> FakeEngine:
    """Wait until the first engine is saving the second earlier conversation, held after its first round."""
    assert await asyncio.to_thread(factory.built.wait, 30), "the tour never loaded the scene's pair"
    engine = factory.engines[0]
    await wait_hold(pilot, engine, 1)  # the first conversation's round 1
    engine.release()
    await wait_hold(pilot, engine, 2)  # the second conversation's round 1: its round 0 is done
    engine.hold_at_steps.clear()  # no later hold: a saving that ignores the cancel runs on (and fails), never hangs
    return engine


def _assert_cancelled_save(tmp_path: Path, app, engine: FakeEngine) -> None:
    assert _sent(engine) == list(SCENE.earlier[:2])  # the third conversation never started
    assert engine.turns[-1].stop_reason == "stopped" and engine.turns[-1].n_steps == 2  # the round in flight, no more
    assert engine.closed  # the cancelled scene's session is closed, not kept
    assert not (_own(tmp_path) / "earlier.txt").exists() and _saved(tmp_path) == 1  # the finished one only
    said = [n for n in notifications(app) if "was cancelled before its 3 earlier conversations were all saved" in n]
    assert len(said) == 1 and "saved afresh when it runs again" in said[0]


async def test_escape_while_the_history_scene_saves_cancels_within_a_round_and_the_next_tour_saves_afresh(tmp_path):
    """Fails if Esc waits for the saving to finish (the third conversation sent, the second reply run to its
    end), if the status does not say Esc cancels, if the cancelled save leaves a marker or its session open, if
    nothing says it was cancelled, or if the next tour does not save the conversations again from the first."""
    factory = Factory(held=1)
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(data_dir=tmp_path), make_factory=factory,
                      tour=TourOptions(derive=_no_derive, scenes=(SCENE,)))
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        app.open_tour()
        engine = await _at_second_conversation(pilot, factory)
        text = " ".join(screen_text(app).split())
        assert "saving earlier conversation 2/3" in text and "(Esc cancels)" in text, text
        await pilot.press("escape")
        await pilot.pause()
        engine.release()  # the round in flight ends; the next one is not run
        await settle(pilot)
        assert not isinstance(app.screen, TourScreen) and not app.host.generating
        _assert_cancelled_save(tmp_path, app, engine)

        app.open_tour()  # the scene again: saved afresh, by a new session, kept while the tour is open
        await settle(pilot)
        assert isinstance(app.screen, TourScreen) and len(factory.engines) == 2
        again = factory.engines[1]
        assert _sent(again) == list(SCENE.earlier) and not again.closed
        assert (_own(tmp_path) / "earlier.txt").read_text(encoding="utf-8") == "\n".join(SCENE.earlier)
        assert _saved(tmp_path) == 3  # its own three: the cut-short history was wiped first
        assert "the scene could not run" in " ".join(screen_text(app).split())  # a fake engine cannot race
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, TourScreen)


async def test_moving_to_another_scene_while_the_history_scene_saves_cancels_it_and_coming_back_saves_afresh(tmp_path):
    """``n`` during the saving: the saving stops within a round, the tour stays open on the next scene and says
    the history scene was cancelled; ``p`` back runs the history scene again, saving its conversations afresh."""
    factory = Factory(held=1)
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(data_dir=tmp_path), make_factory=factory,
                      tour=TourOptions(derive=_no_derive, scenes=(SCENE, PLAIN)))
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        app.open_tour()
        engine = await _at_second_conversation(pilot, factory)
        tour = app.screen
        assert isinstance(tour, TourScreen) and tour.busy
        await pilot.press("n")
        await pilot.pause()
        engine.release()
        await settle(pilot)
        assert app.screen is tour and tour.index == 1
        _assert_cancelled_save(tmp_path, app, engine)
        assert PLAIN.sentence in " ".join(screen_text(app).split())
        assert len(factory.engines) == 2  # the next scene's own pair

        await pilot.press("p")
        await settle(pilot)
        assert tour.index == 0 and len(factory.engines) == 3
        again = factory.engines[2]
        assert _sent(again) == list(SCENE.earlier) and not again.closed
        assert (_own(tmp_path) / "earlier.txt").is_file() and _saved(tmp_path) == 3
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, TourScreen)
