"""Small terminals and keys people can press (issue 9): the sidebar collapses to a status bar (a key, and by
itself below SIDEBAR_MIN_WIDTH), every function has a non-F-key binding, the footer shows quit, the theme and
the sidebar state are remembered in a state file next to config.toml (never in config.toml itself)."""

from __future__ import annotations

import json

import pytest
from tuikit import SIZE, notifications, send, settle, wait_ready

from specchat.tui.screens.chat import SIDEBAR_MIN_WIDTH
from specchat.tui.keys import APP_KEYS
from specchat.tui.state import UiState, load_state
from specchat.tui.widgets.sidebar import Sidebar


def _status(app) -> str:
    return str(app.query_one("#status-bar").render())


@pytest.mark.parametrize("size", [(60, 20), (80, 24)])
async def test_below_the_minimum_width_a_status_bar_replaces_the_sidebar(make_app, size):
    app, _ = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hi")
        await settle(pilot)
        assert not app.query_one(Sidebar).display and app.query_one("#status-bar").display
        status = _status(app)
        assert "tok/s" in status and "acceptance" in status and "K 3" in status, status
        assert app.query_one("#status-bar").region.width == size[0]
        await pilot.press("ctrl+b")  # too narrow: it says why instead of squeezing the chat
        assert any("needs" in n and str(SIDEBAR_MIN_WIDTH) in n for n in notifications(app))
        assert not app.query_one(Sidebar).display


async def test_the_sidebar_comes_back_when_the_terminal_widens_and_hides_with_its_key(make_app, tmp_path):
    state_file = tmp_path / "cfg" / "ui-state.json"
    app, _ = make_app(state_path=state_file)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_ready(pilot)
        assert not app.query_one(Sidebar).display
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        assert app.query_one(Sidebar).display and not app.query_one("#status-bar").display
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert not app.query_one(Sidebar).display and app.query_one("#status-bar").display
        await pilot.press("f2")
        await pilot.pause()
        assert app.query_one(Sidebar).display
        await pilot.press("ctrl+b")
    assert load_state(state_file)[0].sidebar is False


async def test_theme_and_sidebar_are_remembered_across_restarts(make_app, tmp_path):
    state_file = tmp_path / "cfg" / "ui-state.json"
    app, _ = make_app(state_path=state_file)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        app.set_theme("specchat-light")
        await pilot.press("ctrl+b")
        await pilot.pause()
    assert json.loads(state_file.read_text()) == {"theme": "specchat-light", "sidebar": False}
    state, problem = load_state(state_file)
    assert problem is None
    app2, _ = make_app(ui_state=state, state_path=state_file)
    async with app2.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app2.theme == "specchat-light"
        assert not app2.query_one(Sidebar).display


async def test_an_unwritable_state_file_is_reported_once_and_the_choice_holds(make_app, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the config dir should be")
    app, _ = make_app(state_path=blocker / "ui-state.json")
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("ctrl+b")
        await pilot.pause()
        app.set_theme("specchat-light")
        await pilot.pause()
        notes = [n for n in notifications(app) if "Could not remember" in n]
        assert len(notes) == 1 and str(blocker / "ui-state.json") in notes[0] and "\n" not in notes[0]
        assert not app.query_one(Sidebar).display and app.theme == "specchat-light"


def test_a_broken_state_file_is_ignored_with_a_one_line_reason(tmp_path):
    path = tmp_path / "ui-state.json"
    path.write_text("{not json")
    state, problem = load_state(path)
    assert state == UiState() and problem and str(path) in problem and "\n" not in problem


def test_every_function_has_a_key_that_is_not_an_f_key():
    for spec in APP_KEYS:
        keys = [k.strip() for k in spec.keys.split(",")]
        assert any(not (k.startswith("f") and k[1:].isdigit()) for k in keys), spec


async def test_the_footer_shows_quit_and_the_portable_help_key_at_60_columns(make_app):
    app, _ = make_app()
    async with app.run_test(size=(60, 20)) as pilot:
        await wait_ready(pilot)
        shown = {(b.binding.action, key) for key, b in app.active_bindings.items() if b.binding.show}
        assert ("quit", "ctrl+q") in shown
        footer = app.screen.query_one("Footer")
        text = " ".join(str(w.render()) for w in footer.query("FooterKey"))
        assert "Quit" in text and "^g" in text, text


@pytest.mark.parametrize("key", ["ctrl+g", "ctrl+b", "ctrl+up", "ctrl+down", "ctrl+t", "alt+k", "alt+g", "alt+m"])
async def test_the_non_f_keys_work(make_app, key):
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        before = (engine.controls.snapshot(), app.chat_screen.show_ghosts, app.chat_screen.markdown_view, app.query_one(Sidebar).display,
                  type(app.screen).__name__)
        await pilot.press(key)
        await pilot.pause()
        after = (engine.controls.snapshot(), app.chat_screen.show_ghosts, app.chat_screen.markdown_view, app.query_one(Sidebar).display,
                 type(app.screen).__name__)
        assert after != before, key


@pytest.mark.parametrize("size", [(60, 20), (80, 24)])
async def test_the_palette_is_usable_in_a_small_terminal(make_app, size):
    """Not a snapshot: the palette fills its hit list asynchronously, so its frames differ run to run."""
    from textual.command import CommandPalette

    app, engine = make_app()
    async with app.run_test(size=size) as pilot:
        await wait_ready(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        assert app.screen.region.right <= size[0]
        await pilot.press(*"K = 5")
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert engine.controls.snapshot().k == 5
