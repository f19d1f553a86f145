"""The race screen and the tour screen (issue 11) with hand-built races and an injected clock: what is on screen
at replay time t is exactly what was recorded by t; the panes stack below 80 columns; snapshots of the race
mid-replay and of every tour scene; the race key's guards; auto-K's "drafting off" offers fixed K.

The recording itself (on the engine thread, cancel, the real models) is tested in test_race_tour_real.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from fake_engine import FakeEngine
from tuikit import fake_settings, notifications, palette, screen_text, send, settle, wait_ready

from specchat import demo
from specchat.engine.events import AutoKNotice, Turn
from specchat.race import LANES, RaceResult, RaceRun, TimedPiece
from specchat.tui.app import SpecChatApp
from specchat.tui.keys import APP_KEYS, PROMPT_KEYS
from specchat.tui.screens.race import RaceScreen
from specchat.tui.screens.tour import TourOptions, TourScreen
from specchat.tui.widgets.race_view import STACK_BELOW, RaceLane, RaceView
from specchat.tui.widgets.prompt import PromptInput


class Clock:
    """A clock that stands still until the test moves it."""

    def __init__(self, t: float = 500.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _turn(n: int, tok_s: float, drafted: int = 0, accepted: int = 0) -> Turn:
    return Turn(prompt_n=12, prompt_ms=20.0, predicted_n=n, predicted_ms=n / tok_s * 1000, predicted_per_second=tok_s,
                draft_n=drafted, draft_n_accepted=accepted, acceptance=accepted / drafted if drafted else None,
                mean_len=1.0, accepted_per_pos=[], draft_ms_per_step=0.0, verify_ms_per_step=0.0, overhead_ms=0.0,
                step_ms=1.0, n_steps=n, n_spec_steps=0, stop_reason="eos", text="", tokens=[1] * n)


WORDS = ("Speculative decoding lets a cheap drafter guess the next tokens and the target checks them all in one "
         "batch, keeping the longest prefix it agrees with.").split(" ")


def make_race(kinds: str = "aacbpar", off_dt: float = 0.05, on_dt: float = 0.03, *, k: int | None = 4,
              drafter: str = "ngram") -> RaceResult:
    """A race over WORDS: the baseline one plain word every ``off_dt`` s; the speculative run cycles ``kinds``
    (a accepted, r rejected ghost, c corrected, b bonus, p plain) every ``on_dt`` s, a ghost not advancing."""
    off = tuple(TimedPiece(round(off_dt * (i + 1), 6), (" " if i else "") + w, "plain", i) for i, w in enumerate(WORDS))
    names = {"a": "accepted", "r": "rejected", "c": "corrected", "b": "bonus", "p": "plain"}
    on: list[TimedPiece] = []
    i = j = 0
    while i < len(WORDS):
        kind = names[kinds[j % len(kinds)]]
        t = round(on_dt * (len(on) + 1), 6)
        if kind == "rejected":
            on.append(TimedPiece(t, " maybe", kind, 999))
        else:
            on.append(TimedPiece(t, (" " if i else "") + WORDS[i], kind, i))
            i += 1
        j += 1
    n = len(WORDS)
    drafted = sum(1 for p in on if p.kind in ("accepted", "rejected"))
    accepted = sum(1 for p in on if p.kind == "accepted")
    off_end, on_end = off[-1].t + 0.01, on[-1].t + 0.01
    return RaceResult(
        "Explain speculative decoding in one sentence.", "SmolLM2-135M-Instruct.Q4_1", drafter, k,
        RaceRun("off", off, _turn(n, n / off_end), off_end), RaceRun("on", tuple(on), _turn(n, n / on_end, drafted, accepted), on_end),
    )


def lane_text(view: RaceView, lane: str) -> str:
    return view.lane(lane).tokens.visible_text()


def expected_text(race: RaceResult, lane: str, t: float) -> str:
    return "".join(p.text for p in race.run(lane).pieces if p.t <= t)


def _app() -> SpecChatApp:
    return SpecChatApp(lambda progress: FakeEngine(), fake_settings())


async def test_at_replay_time_t_exactly_the_pieces_recorded_by_t_are_shown():
    race = make_race()
    clock = Clock()
    app = _app()
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_ready(pilot)
        app.push_screen(RaceScreen(race.prompt, clock, race=race))
        await pilot.pause()
        view = app.screen.query_one(RaceView)
        start = clock.t
        times = sorted({p.t for lane in LANES for p in race.run(lane).pieces})
        # every recorded time, just before it and at it, and the ends of both runs
        moments = sorted({0.0, *times, *(t - 1e-6 for t in times), race.off.t_end, race.on.t_end})
        for t in moments:
            clock.t = start + t
            view.tick()
            for lane in LANES:
                assert lane_text(view, lane) == expected_text(race, lane, t), (lane, t)
                subtitle = str(view.lane(lane).border_subtitle)
                assert ("tok/s" in subtitle) == (t >= race.run(lane).t_end), (lane, t, subtitle)
            result = str(view.query_one("#race-result").render())
            assert ("2." in result or "×" in result) == (t >= max(race.off.t_end, race.on.t_end)), (t, result)
        await pilot.pause()
        on_subtitle = str(view.lane("on").border_subtitle)
        assert f"{race.on.tok_s:.1f} tok/s" in on_subtitle and f"{len(WORDS)} tokens" in on_subtitle
        result = str(view.query_one("#race-result").render())
        assert f"{race.ratio:.2f}×" in result and demo.verdict(race.ratio) in result and "texts identical" in result
        # r plays it again from the start: at t = 0 nothing is shown
        await pilot.press("r")
        assert lane_text(view, "off") == lane_text(view, "on") == ""
        clock.t += race.on.pieces[2].t
        view.tick()
        assert lane_text(view, "on") == expected_text(race, "on", race.on.pieces[2].t)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RaceScreen)


@pytest.mark.parametrize("width", [STACK_BELOW - 1, STACK_BELOW])
async def test_the_panes_stack_below_80_columns(width):
    race = make_race()
    app = _app()
    async with app.run_test(size=(width, 24)) as pilot:
        await wait_ready(pilot)
        app.push_screen(RaceScreen(race.prompt, Clock(), race=race))
        await pilot.pause()
        view = app.screen.query_one(RaceView)
        off, on = view.lane("off").region, view.lane("on").region
        if width < STACK_BELOW:
            assert view.has_class("stacked") and on.y >= off.bottom and on.x == off.x and on.width == width
        else:
            assert not view.has_class("stacked") and on.y == off.y and on.x >= off.right


def _snapshot_race_app(clock: Clock, race: RaceResult) -> tuple[SpecChatApp, object]:
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(), clock=clock)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.push_screen(RaceScreen(race.prompt, clock, race=race))
        await pilot.pause()
        clock.t += 0.45  # mid-replay: the speculative run is ahead, the baseline still going
        app.screen.query_one(RaceView).tick()
        await pilot.pause()

    return app, run_before


@pytest.mark.parametrize("size", [(110, 30), (70, 24)], ids=["110x30", "70x24"])
def test_race_mid_replay_snapshot(snap_compare, size):
    app, run_before = _snapshot_race_app(Clock(), make_race())
    assert snap_compare(app, terminal_size=size, run_before=run_before)


# -- the tour -------------------------------------------------------------------------------------------------

#: what each scene's hand-built race looks like: (kinds of the speculative run, baseline and speculative seconds
#: per piece) - long accepted runs for the copy, plain prose, ~100 % accepted but slower, ghosts everywhere...
SCENE_SHAPES = {
    0: ("aaaaaaab", 0.05, 0.02),
    1: ("ppppppar", 0.05, 0.049),
    2: ("aaab", 0.05, 0.07),
    3: ("rrcrrcac", 0.05, 0.05),
    4: ("aaaaaaab", 0.05, 0.022),
    5: ("pppppppp", 0.05, 0.05),
    6: ("pppppppp", 0.05, 0.051),
    7: ("pppppppr", 0.05, 0.052),
    8: ("aaaaaaab", 0.05, 0.02),  # the model has answered this kind of question before: copies from the history
    9: ("aaaaaaaaaaaaaab", 0.05, 0.015),  # the same question asked again: its saved answer copied from the start
}


def scene_results() -> dict[int, demo.SceneResult]:
    out = {}
    for i, scene in enumerate(demo.SCENES):
        kinds, off_dt, on_dt = SCENE_SHAPES[i]
        race = make_race(kinds, off_dt, on_dt, k=scene.k, drafter=scene.pair.draft)
        out[i] = demo.SceneResult(scene, race)
    return out


def _tour_options() -> TourOptions:
    def no_derive(*args, **kwargs):  # every scene has its result: nothing is derived or loaded
        raise AssertionError("the tour derived models although every scene had a result")

    return TourOptions(derive=no_derive)


@pytest.mark.parametrize("index", range(len(demo.SCENES)))
def test_tour_scene_snapshot(snap_compare, index):
    clock = Clock()
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(), clock=clock)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        app.push_screen(TourScreen(_tour_options(), None, None, None, clock, results=scene_results(), start=index))
        await pilot.pause()
        clock.t += 10.0  # the replay has ended: speeds, ratio and verdict are on screen
        app.screen.query_one(RaceView).tick()
        await pilot.pause()

    assert snap_compare(app, terminal_size=(100, 32), run_before=run_before)


async def test_the_tour_moves_between_scenes_and_shows_each_sentence_pair_mode_and_verdict():
    clock = Clock()
    results = scene_results()
    app = _app()
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        tour = TourScreen(_tour_options(), None, None, None, clock, results=results)
        app.push_screen(tour)
        await pilot.pause()
        for i, scene in enumerate(demo.SCENES):
            assert tour.index == i
            clock.t += 10.0
            tour.view.tick()
            await pilot.pause()
            text = " ".join(screen_text(app).split())
            assert f"Scene {i + 1} of {len(demo.SCENES)}" in text and scene.name in text
            assert " ".join(scene.sentence.split()[:6]) in text and scene.pair.label in text and scene.mode in text
            ratio = results[i].race.ratio
            assert f"{ratio:.2f}× — {demo.verdict(ratio)}" in text
            await pilot.press("n" if i % 2 else "right")
        await pilot.press("n")  # past the last scene: stays there
        assert tour.index == len(demo.SCENES) - 1
        await pilot.press("p", "left")
        assert tour.index == len(demo.SCENES) - 3
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TourScreen)


async def test_the_palette_opens_the_tour_and_a_scene_that_cannot_race_says_why(tmp_path):
    """ctrl+p -> Tour opens the tour on scene 1 with its sentence; the fake engine has no decoder to race with,
    so the scene says it could not run (one line) instead of failing; Esc closes the tour, nothing left running."""
    scene = next(s for s in demo.SCENES if s.pair.target == "bundled")  # the bundled model alone: nothing to derive
    options = TourOptions(derive=_tour_options().derive, scenes=(scene,))
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(data_dir=tmp_path),
                      make_factory=lambda settings: (lambda progress: FakeEngine()), tour=options)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await palette(pilot, "tour")
        assert isinstance(app.screen, TourScreen)
        await settle(pilot)
        text = " ".join(screen_text(app).split())
        assert scene.sentence in text and "Scene 1 of 1" in text
        assert "the scene could not run: the race failed:" in text and not app.host.generating
        await pilot.press("escape")
        await settle(pilot)
        assert not isinstance(app.screen, TourScreen)


# -- the race key and the palette ---------------------------------------------------------------------------


def test_the_race_key_is_not_an_f_key_and_clashes_with_nothing():
    race = next(s for s in APP_KEYS if s.action == "race")
    keys = [k.strip() for k in race.keys.split(",")]
    assert keys and not any(k.startswith("f") and k[1:].isdigit() for k in keys)
    others = {k.strip() for s in (*APP_KEYS, *PROMPT_KEYS) if s is not race for k in s.keys.split(",")}
    assert not others & set(keys)
    assert race.description == "Race: this message, speculation off vs on"


async def test_the_race_key_says_why_when_there_is_nothing_to_race():
    engine = FakeEngine(k=0)
    app = SpecChatApp(lambda progress: engine, fake_settings())
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_ready(pilot)
        await pilot.press("alt+r")
        await pilot.pause()
        assert any("Nothing to race yet" in n for n in notifications(app))
        assert not isinstance(app.screen, RaceScreen)
        app.query_one(PromptInput).text = "race me"
        await pilot.press("alt+r")
        await pilot.pause()
        assert any("K is 0" in n for n in notifications(app)) and not isinstance(app.screen, RaceScreen)
        engine.controls.set_k(3)
        engine.controls.set_drafter("none")
        await pilot.press("alt+r")
        await pilot.pause()
        assert any("no drafter is selected" in n for n in notifications(app)) and not isinstance(app.screen, RaceScreen)


async def test_the_race_races_the_prompt_text_else_the_last_message():
    app = _app()
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "first message")
        await settle(pilot)
        assert app.chat_screen.race_text() == "first message"
        app.query_one(PromptInput).text = "typed, not sent"
        assert app.chat_screen.race_text() == "typed, not sent"


# -- auto-K turning drafting off: the offer of a fixed K ------------------------------------------------------


class DraftingOffEngine(FakeEngine):
    """A fake engine whose auto-K turns drafting off before the first round, as the real one does for a costly
    model draft (its notice is the real one's wording)."""

    def _rounds(self, tokens):
        yield AutoKNotice("auto-K: drafting off — the draft costs 0.98× a target token; it cannot pay even at "
                          "100 % acceptance", drafting=False, drafter="draft.gguf")
        yield from super()._rounds(tokens)


async def test_auto_k_turning_drafting_off_offers_fixed_k_and_the_palette_entry_sets_it():
    engine = DraftingOffEngine(auto_k=True, k=3)
    app = SpecChatApp(lambda progress: engine, fake_settings(auto_k=True))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hello")
        await settle(pilot)
        offers = [n for n in notifications(app) if "Use fixed K" in n]
        assert len(offers) == 1 and "draft.gguf" in offers[0] and "unprofitable" in offers[0]
        assert "auto-K: drafting off" in screen_text(app)  # the engine's notice, in the chat
        await palette(pilot, "use fixed k")
        state = engine.controls.snapshot()
        assert not state.auto_k and state.k == 3 and state.speculative


async def test_escape_cancels_the_demo_models_derivation_at_its_next_step(tmp_path):
    """Esc while the demo pairs are being derived: the derivation stops at its next step (the progress callback
    is where it can: llama.cpp's quantiser cannot be interrupted inside), the tour closes, nothing keeps running."""
    import asyncio
    import threading

    reached, gate = threading.Event(), threading.Event()
    steps: list[int] = []

    def slow_derive(models_dir, *, threads=1, progress=None):
        for i in range(8):  # eight steps of a derivation (a file's layer-skip, quantisation, load check...)
            progress(f"deriving step {i}")
            steps.append(i)
            if i == 1:
                reached.set()
                assert gate.wait(30), "the test never opened the gate"
        return []

    options = TourOptions(derive=slow_derive)  # a fresh data dir: every derived pair is missing
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(data_dir=tmp_path),
                      make_factory=lambda settings: (lambda progress: FakeEngine()), tour=options)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        app.open_tour()
        await pilot.pause()
        assert await asyncio.to_thread(reached.wait, 30)
        assert isinstance(app.screen, TourScreen) and app.screen.busy
        assert "Esc cancels" in " ".join(screen_text(app).split())
        await pilot.press("escape")
        await pilot.pause()
        gate.set()
        await settle(pilot)
        assert not isinstance(app.screen, TourScreen) and not app.host.generating
        assert steps == [0, 1]  # the step after Esc never ran


async def test_the_tours_models_are_closed_on_the_engine_thread_when_the_app_quits_with_the_tour_open(tmp_path):
    """Quitting (ctrl+q) with the tour open: the pair the tour loaded is closed by the host's shutdown, on the
    engine thread, like the chat's own engine, not left to the process's exit."""
    import threading

    scene = next(s for s in demo.SCENES if s.pair.target == "bundled")  # the bundled model alone: nothing to derive
    options = TourOptions(derive=_tour_options().derive, scenes=(scene,))
    loaded: list[FakeEngine] = []
    closed_on: list[int] = []

    class Closing(FakeEngine):
        def close(self) -> None:
            closed_on.append(threading.get_ident())
            super().close()

    def tour_factory(settings):
        def build(progress):
            loaded.append(Closing())
            return loaded[-1]
        return build

    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(data_dir=tmp_path), make_factory=tour_factory,
                      tour=options)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        engine_thread = await app.host.call(threading.get_ident)
        app.open_tour()
        await settle(pilot)
        assert isinstance(app.screen, TourScreen) and len(loaded) == 1  # the scene's pair (it cannot race: fake)
        assert not loaded[0].closed
        await pilot.press("ctrl+q")
        await settle(pilot)
    assert loaded[0].closed and closed_on == [engine_thread]


async def test_the_race_and_tour_keys_are_remappable_in_the_keymap():
    """The keymap reaches the race and tour screens: ids race_replay, race_close, tour_next, tour_previous,
    tour_replay, tour_close (listed in help and config.example.toml); the keys given replace the defaults, and
    a key may mean one thing on those screens and another in the chat (no clash reported for it)."""
    from specchat.tui.keys import resolve_keymap
    from specchat.tui.screens.help import HelpScreen

    keymap = {"race_replay": "ctrl+e", "tour_next": "space", "tour_previous": "b", "q": "race_close",
              "ctrl+r": "tour_replay"}
    resolved, problems = resolve_keymap(keymap)
    assert problems == [] and resolved["race_close"] == "q"  # ctrl+r is regenerate in the chat: not a clash here
    _, problems = resolve_keymap({"tour_next": "r"})  # but r is the tour's own replay key: a clash on that screen
    assert problems and "tour_replay" in problems[0]
    clock = Clock()
    race = make_race()
    app = SpecChatApp(lambda progress: FakeEngine(), fake_settings(keymap=keymap), clock=clock)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_ready(pilot)
        assert app.keymap_problems == []
        app.push_screen(RaceScreen(race.prompt, clock, race=race))
        await pilot.pause()
        view = app.screen.query_one(RaceView)
        clock.t += 60.0
        view.tick()
        assert lane_text(view, "on") == expected_text(race, "on", 60.0)
        await pilot.press("r")  # no longer the replay key
        assert lane_text(view, "on") == expected_text(race, "on", 60.0)
        await pilot.press("ctrl+e")  # the remapped replay: from the start
        assert lane_text(view, "off") == lane_text(view, "on") == ""
        await pilot.press("escape")  # replaced by q
        await pilot.pause()
        assert isinstance(app.screen, RaceScreen)
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, RaceScreen)

        tour = TourScreen(_tour_options(), None, None, None, clock, results=scene_results())
        app.push_screen(tour)
        await pilot.pause()
        await pilot.press("n", "right")  # the defaults, replaced
        assert tour.index == 0
        await pilot.press("space", "space")
        assert tour.index == 2
        await pilot.press("b")
        assert tour.index == 1
        clock.t += 60.0
        tour.view.tick()
        await pilot.press("ctrl+r")  # the tour's replay here (regenerate is the chat's)
        assert lane_text(tour.view, "off") == ""
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TourScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        help_lines = str(app.screen.query_one("#help-text").render()).splitlines()
        line = next(line for line in help_lines if "[tour_next]" in line)
        assert line.split()[0] == "space"


@pytest.mark.parametrize("index", range(len(demo.SCENES)))
async def test_at_60x20_every_scene_keeps_a_row_of_tokens_in_each_lane(index):
    """The smallest terminal the app supports: the scene's sentence and its outcome - the long one a CPU whose
    verdict is not the expected one gets, with its arithmetic - each take at most 15 % of the screen, so both lanes
    keep a row of tokens (the history scene's four-line sentence and six-line outcome once left them none)."""
    clock = Clock()
    results = {i: demo.SceneResult(replace(r.scene, expected=()), r.race) for i, r in scene_results().items()}
    app = _app()
    async with app.run_test(size=(60, 20)) as pilot:
        await wait_ready(pilot)
        app.push_screen(TourScreen(_tour_options(), None, None, None, clock, results=results, start=index))
        await pilot.pause()
        clock.t += 10.0
        app.screen.query_one(RaceView).tick()
        await pilot.pause()
        assert "on this CPU it " in " ".join(screen_text(app).split())  # the outcome, not the expectation
        for lane in app.screen.query(RaceLane):
            assert lane.content_region.height >= 1, f"scene {index + 1}: the {lane.lane} lane has no row"
