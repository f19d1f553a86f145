"""Issue 10 in the app (Pilot): model- and user-supplied text is shown as text, never parsed as markup and never
with a raw control character; broken themes are reported and skipped; a stop signal saves the partial reply.

The engine is the deterministic fake (UI behaviour); the history store is a real SQLite file. The same cases
run against the real app in a pseudo-terminal in ``test_hostile_pty.py``.
"""

from __future__ import annotations

import json
import signal
import sqlite3

import pytest
from fake_engine import FakeEngine
from hostile import HOSTILE, PAYLOADS, hostile_export, raw_controls
from tuikit import SIZE, fake_settings, send, settle, wait_hold, wait_ready

from specchat.tui.screens.history import HistoryScreen
from specchat.tui.widgets.chat import AssistantMessage


def screen_text(app) -> str:
    """Every character the app would draw now: the top screen's composited lines (what the driver writes)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def drawn_controls(app) -> list[str]:
    return raw_controls(screen_text(app))


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications] + [n.title for n in app._notifications]


@pytest.mark.parametrize("title", ["x [/bold] y", "[/]", "[b]bold[/b] [link=https://example.com]x[/link]"])
async def test_a_title_that_looks_like_markup_opens_in_the_history_browser(make_app, history_store, title):
    """Sent as a first message, it becomes the conversation's title: the browser lists it as text and opens it."""
    app, engine = make_app(history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, title)
        await settle(pilot)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        table = app.screen.query_one("DataTable")
        cells = [str(c) for c in table.get_row_at(0)]  # a cell shows it as typed (maybe cut to the column), not interpreted
        assert any(c == title or (c.endswith("\u2026") and len(c) > 8 and title.startswith(c[:-1])) for c in cells), cells
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, HistoryScreen)
        assert any(title in n for n in notifications(app))  # "Opened “x [/bold] y”": shown as text too
    assert app.return_code in (0, None)


async def test_a_hostile_conversation_is_drawn_without_a_raw_control_character(make_app, history_store):
    """Imported (every text field hostile) and then crafted in the database behind the import's back (a date and
    a stop reason with escape sequences): browser, reopened messages, border subtitle and notifications show
    every character as visible text."""
    data = hostile_export()
    data["messages"][2]["stopped"] = False  # a stopped reply's subtitle says "stopped", not its stop reason
    conv_id = history_store.import_json(data, source="hostile.json")
    with sqlite3.connect(history_store.path) as conn:
        conn.execute("UPDATE conversations SET updated = ?", ("~" + PAYLOADS["osc2-title"],))
        conn.execute("UPDATE turn_stats SET stop_reason = ?", (PAYLOADS["osc52-clipboard"],))
    app, _ = make_app(history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        assert drawn_controls(app) == []
        assert "PWNED" in screen_text(app)  # the updated column shows the payload, inert
        await pilot.press("enter")
        await settle(pilot)
        assert app.chat_screen.recorder.conversation_id == conv_id
        (reply,) = app.query(AssistantMessage)
        assert "ended: " in reply.border_subtitle and "]52;c;" in reply.border_subtitle
        assert raw_controls(reply.border_subtitle) == []
        assert drawn_controls(app) == []
        assert all(raw_controls(n) == [] for n in notifications(app))


async def test_model_names_replies_and_notices_with_markup_and_escapes_are_drawn_as_text(make_app):
    engine = FakeEngine(
        replies=[HOSTILE], target_name=f"evil {PAYLOADS['markup']} {PAYLOADS['osc2-title']}.gguf",
        drafters=(f"[/] {PAYLOADS['c1-csi']}", "none"), notice=f"notice {HOSTILE}",
    )
    app, _ = make_app(engine)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, HOSTILE)
        await settle(pilot)
        (reply,) = app.query(AssistantMessage)
        assert reply.finished and reply.reply_text
        assert "[/bold]" in reply.border_title  # the model name, as text
        assert drawn_controls(app) == []
        # the command palette lists the drafter (a file name) as text; Textual's own highlighter would parse it
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"drafter")
        await settle(pilot)
        assert "Drafter: [/]" in screen_text(app)
        assert drawn_controls(app) == []
        await pilot.press("escape")
        await pilot.pause()
        app.notify(f"a message with {HOSTILE}", title=f"title {PAYLOADS['markup']}")
        await pilot.pause()
        assert drawn_controls(app) == []


BROKEN_THEMES = {
    "nan.toml": 'name = "nan-spread"\nprimary = "#ff0000"\nluminosity_spread = nan\n',
    "huge.toml": 'name = "huge-spread"\nprimary = "#ff0000"\nluminosity_spread = 1e308\n',
    "alpha.toml": 'name = "inf-alpha"\nprimary = "#ff0000"\ntext_alpha = inf\n',
    "zzz.toml": 'name = "zzz-var"\nprimary = "#ff0000"\n[variables]\nfooter-key-foreground = "zzz"\n',
    "css.toml": (
        'name = "css-var"\nprimary = "#ff0000"\n[variables]\n'
        'footer-key-foreground = "red; } Screen { display: none; } Footer {"\n'
    ),
    "style.toml": 'name = "bad-style"\nprimary = "#ff0000"\n[variables]\nlink-style = "blink-ish"\n',
    "unknown.toml": 'name = "unknown-var"\nprimary = "#ff0000"\n[variables]\nmy-var = "red"\n',
    "markup.toml": 'name = "x [/bold] y"\nprimary = "#ff0000"\n',
}


@pytest.mark.parametrize("broken", sorted(BROKEN_THEMES), ids=lambda n: n.removesuffix(".toml"))
async def test_a_broken_user_theme_is_reported_and_skipped_even_when_selected(make_app, tmp_path, broken):
    themes = tmp_path / "cfg" / "themes"
    themes.mkdir(parents=True)
    (themes / broken).write_text(BROKEN_THEMES[broken])
    (themes / "fine.toml").write_text(
        'name = "fine"\nprimary = "#ff8800"\nluminosity_spread = 0.2\n[variables]\n'
        'footer-key-foreground = "#00ff00 50%"\nlink-style = "bold not underline"\n'
    )
    name = BROKEN_THEMES[broken].split('"')[1]
    app, _ = make_app(user_theme_dir=tmp_path / "cfg", settings=fake_settings(theme=name))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.pause()
        assert len(app.theme_errors) == 1 and broken in app.theme_errors[0], app.theme_errors
        assert name not in app.available_themes and "fine" in app.available_themes
        assert app.theme == "specchat-dark"  # the selected theme was skipped: the default, with a notice
        assert any(broken in n for n in notifications(app))
        app.set_theme("fine")  # the good one next to it works, its variables included
        await pilot.pause()
        assert app.get_css_variables()["footer-key-foreground"] == "#00ff00 50%"
        assert drawn_controls(app) == []
    assert app.return_code in (0, None)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
async def test_a_stop_signal_mid_reply_saves_the_partial_reply_marked_stopped(make_app, history_store, sig):
    """What ``specchat`` does on SIGINT/SIGTERM/SIGHUP (``stop_signals=True``): quit like ctrl+q, saving the
    partial reply marked stopped, exit code 128 + the signal. Driven by the handler the event loop calls."""
    engine = FakeEngine(hold_at_steps=(3,))
    app, _ = make_app(engine, history_store=history_store, stop_signals=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert app.lifecycle.added  # installed on the running loop
        await send(pilot, "tell me")
        await wait_hold(pilot, engine)
        app._on_stop_signal(int(sig))  # what loop.add_signal_handler calls
        await pilot.pause()
        await app.workers.wait_for_complete()
    assert app.return_code == 128 + sig
    (conv,) = history_store.list_conversations()
    _, messages = history_store.load(conv.id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[-1].stopped and messages[-1].content and messages[-1].stats.stop_reason == "stopped"


def test_hostile_export_is_valid_json_for_the_tests():
    assert json.loads(json.dumps(hostile_export()))["messages"][1]["content"] == HOSTILE
