"""The history browser (ctrl+o) and what it leads to: search, open, delete with confirmation, export.

Pilot tests with the fake engine and a real :class:`~specchat.history.HistoryStore` (a real SQLite file).
"""

from __future__ import annotations

from fake_engine import FakeEngine
from tuikit import SIZE, send_each, settle, wait_ready

from specchat.tui.screens.history import HistoryScreen


async def test_opening_a_saved_chat_in_markdown_view_does_not_crash(make_app, history_store):
    """F8, ctrl+o, down, enter: the saved replies are drawn as Markdown (was MountError in set_markdown)."""
    engine = FakeEngine(["first **reply**", "second reply", "third reply"])
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "one")
        await pilot.press("ctrl+n")
        await send_each(pilot, "two")
        first_id = history_store.list_conversations()[-1].id
        await pilot.press("f8")
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, HistoryScreen)
        await pilot.press("down")
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, HistoryScreen)
        assert app.chat_screen.recorder.conversation_id == first_id
        (reply,) = app.chat_screen.assistant_messages()
        assert reply.markdown_shown and not reply.tokens.display
        await pilot.press("f8")  # and back to the token view
        await pilot.pause()
        assert not reply.markdown_shown and reply.tokens.display


# -- helpers ----------------------------------------------------------------------------------------------


def _seed(store, chats: list[tuple[str, str]]) -> list[int]:
    """Save one conversation per (user text, reply text), oldest first; returns their ids."""
    from specchat.engine.protocol import Message

    ids = []
    for i, (question, answer) in enumerate(chats):
        conv = store.create_conversation(target="fake-target", draft="ngram", created=f"2025-01-0{i + 1}T10:00:00+00:00")
        store.append_message(conv, Message("user", question), created=f"2025-01-0{i + 1}T10:00:01+00:00")
        store.append_message(conv, Message("assistant", answer), created=f"2025-01-0{i + 1}T10:00:02+00:00")
        ids.append(conv)
    return ids


def _rows(screen: HistoryScreen) -> list[int]:
    """Conversation ids in the browser's table, top to bottom."""
    return [h.conversation.id for h in screen.hits]


def _notes(app) -> list[str]:
    return [n.message for n in app._notifications]


CHATS = [
    ("How do I merge two dicts?", "Use {**a, **b} or a | b."),
    ("Write a haiku about autumn", "Red leaves drift and fall / the merge_count of the year / quiet, cold, and still"),
    ("x [/bold] y", "[red]not markup[/red] and [link=x]no link[/link]"),
    ("Straße und Öl", "Grüße aus Köln"),
]


async def _open_browser(pilot) -> HistoryScreen:
    await pilot.press("ctrl+o")
    await pilot.pause()
    screen = pilot.app.screen
    assert isinstance(screen, HistoryScreen)
    return screen


# -- typing never acts ------------------------------------------------------------------------------------


async def test_typing_in_the_browser_goes_to_the_search_box_and_never_deletes_or_exports(
    make_app, history_store, tmp_path, monkeypatch
):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    ids = _seed(history_store, CHATS)
    app, _ = make_app(history_store=history_store, export_dir=tmp_path / "exports")
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await _open_browser(pilot)
        typed = "dd ee de ed qwertyuiopasdfghjklzxcvbnm 0123456789 DE"  # every letter, d and e twice
        await pilot.press(*typed)
        await pilot.pause()
        assert screen.search_text == typed  # all of it arrived in the search box
        assert isinstance(app.screen, HistoryScreen)  # no key closed it
        for _ in typed:
            await pilot.press("backspace")
        await pilot.pause()
        assert screen.search_text == "" and sorted(_rows(screen)) == sorted(ids)
    assert sorted(c.id for c in history_store.list_conversations()) == sorted(ids)  # nothing deleted
    assert list(cwd.iterdir()) == [] and not (tmp_path / "exports").exists()  # nothing exported


async def test_search_filters_by_title_and_message_text_as_you_type(make_app, history_store):
    ids = _seed(history_store, CHATS)
    app, _ = make_app(history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await _open_browser(pilot)
        assert _rows(screen) == ids[::-1]  # most recent first
        await pilot.press(*"merge")
        await pilot.pause()
        # chat 0 by its title (and first message), chat 1 by its reply (mid-word: merge_count)
        assert _rows(screen) == [ids[1], ids[0]]
        found = {h.conversation.id: h for h in screen.hits}
        assert found[ids[0]].role == "user" and found[ids[1]].role == "assistant"
        assert "merge_count" in found[ids[1]].text
        for _ in "merge":
            await pilot.press("backspace")
        await pilot.press(*"GRÜSSE")  # case-insensitive beyond ASCII (casefold: ß = ss)
        await pilot.pause()
        assert _rows(screen) == [ids[3]]
        await pilot.press("ctrl+u")  # the search box's own keys still work (clear to the start)
        await pilot.press(*"no such text")
        await pilot.pause()
        assert _rows(screen) == [] and "No conversation contains" in str(screen.query_one("#history-help").render())
        await pilot.press("enter")  # nothing chosen: Enter does nothing
        await pilot.pause()
        assert app.screen is screen


async def test_arrows_choose_and_enter_opens_while_typing_stays_in_the_search_box(make_app, history_store):
    ids = _seed(history_store, CHATS)
    app, engine = make_app(history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await _open_browser(pilot)
        await pilot.press("down", "down", "up", "pagedown")  # page down stops at the last row
        assert screen.selected_id() == ids[0]
        await pilot.press("pageup", "down")
        assert screen.selected_id() == ids[2]
        assert app.focused is screen.query_one("#history-search")
        await pilot.press("enter")
        await settle(pilot)
        assert not isinstance(app.screen, HistoryScreen)
        assert app.chat_screen.recorder.conversation_id == ids[2] and [m.content for m in engine.loaded] == list(CHATS[2])


# -- delete: an unambiguous key and a confirmation -----------------------------------------------------------


async def test_delete_asks_first_naming_the_conversation_and_only_the_delete_button_deletes(make_app, history_store):
    from specchat.tui.screens.history import ConfirmDeleteScreen

    ids = _seed(history_store, CHATS[:2])
    app, _ = make_app(history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await _open_browser(pilot)
        assert screen.selected_id() == ids[1]
        for key, cancel in (("delete", "enter"), ("ctrl+d", "escape"), ("delete", "delete")):
            await pilot.press(key)
            await pilot.pause()
            dialog = app.screen
            assert isinstance(dialog, ConfirmDeleteScreen)
            text = str(dialog.query_one("#confirm-text").render())
            assert "Write a haiku about autumn" in text and f"ID {ids[1]}" in text and "2 messages" in text
            await pilot.press(cancel)  # Enter on the default (Cancel), Esc, and the key held down: all keep it
            await pilot.pause()
            if isinstance(app.screen, ConfirmDeleteScreen):  # the repeated Delete key changed nothing
                await pilot.press("escape")
                await pilot.pause()
            assert app.screen is screen
            assert len(history_store.list_conversations()) == 2
        await pilot.press("ctrl+d")
        await pilot.pause()
        await pilot.press("right", "enter")  # move to Delete, press it
        await pilot.pause()
        assert app.screen is screen
        assert [c.id for c in history_store.list_conversations()] == [ids[0]]
        assert _rows(screen) == [ids[0]] and screen.selected_id() == ids[0]
        assert any(f"Deleted conversation \u201cWrite a haiku about autumn\u201d (ID {ids[1]}" in n for n in _notes(app))


async def test_deleting_the_open_conversation_starts_a_new_chat_and_never_resaves_it(make_app, history_store):
    engine = FakeEngine(["an answer of a few words", "next"])
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "a chat to delete")
        conv_id = app.chat_screen.recorder.conversation_id
        await _open_browser(pilot)
        await pilot.press("delete", "tab", "enter", "escape")
        await settle(pilot)
        assert history_store.list_conversations() == [] and app.chat_screen.recorder.conversation_id is None
        assert app.chat_screen.assistant_messages() == [] and engine.messages == []
        await send_each(pilot, "a new one")
        (conv,) = history_store.list_conversations()
        assert conv.id != conv_id and conv.title == "a new one"


# -- rendered as text --------------------------------------------------------------------------------------


async def test_titles_and_text_that_look_like_markup_are_shown_as_typed(make_app, history_store, tmp_path):
    from tuikit import screen_text

    ids = _seed(history_store, [("x [/bold] y", "[red]z"), ("[b]bold?[/b] [link=https://x]l[/link]", "ok")])
    app, _ = make_app(history_store=history_store, export_dir=tmp_path / "out")
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        screen = await _open_browser(pilot)
        shown = screen_text(app)
        assert "x [/bold] y" in shown and "[b]bold?[/b] [link=https://x]l[/link]" in shown
        await pilot.press(*"[/bold]")
        await pilot.pause()
        assert _rows(screen) == [ids[0]]
        await pilot.press("delete")
        await pilot.pause()
        assert "\u201cx [/bold] y\u201d" in screen_text(app)
        await pilot.press("escape", "ctrl+s")
        await pilot.pause()
        (path,) = (tmp_path / "out").iterdir()
        assert path.name == f"specchat-{ids[0]}-x-bold-y.md"
        assert any(n == f"Exported to {path}" for n in _notes(app))
        await pilot.press("enter")
        await settle(pilot)
        assert any("\u201cx [/bold] y\u201d" in n for n in _notes(app))  # the "Opened ..." notice


# -- small terminals ---------------------------------------------------------------------------------------


async def test_the_browser_and_its_dialog_fit_a_60x20_terminal(make_app, history_store):
    from tuikit import screen_text

    from specchat.tui.screens.history import ConfirmDeleteScreen

    ids = _seed(history_store, CHATS)
    app, _ = make_app(history_store=history_store)
    async with app.run_test(size=(60, 20)) as pilot:
        await wait_ready(pilot)
        screen = await _open_browser(pilot)
        whole = screen.region
        for part in ("#history-search", "#history-table", "#history-help"):
            region = screen.query_one(part).region
            assert region.height > 0 and whole.contains_region(region), part
        shown = screen_text(app)
        assert all(f" {i} " in shown for i in ids)
        assert "Write a haiku" in shown and "esc close" in shown  # titles readable, the keys on screen
        await pilot.press(*"autumn")
        await settle(pilot)
        assert _rows(screen) == [ids[1]] and "Write a" in screen_text(app)
        await pilot.press("ctrl+d")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmDeleteScreen)
        for part in ("#confirm-text", "#confirm-cancel", "#confirm-delete", "#confirm-help"):
            assert dialog.region.contains_region(dialog.query_one(part).region), part
        await pilot.resize_terminal(120, 40)  # and back up: the columns follow the width
        await pilot.press("escape")
        await pilot.pause()
        assert screen.query_one("#history-table").columns  # redrawn, still there


# -- exports ------------------------------------------------------------------------------------------------


async def test_exports_go_to_the_data_dirs_exports_with_one_naming_scheme(history_store, tmp_path, monkeypatch):
    from fake_engine import FakeClock

    from specchat.config import Settings
    from specchat.tui.app import SpecChatApp

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    settings = Settings(data_dir=tmp_path / "data", theme="specchat-dark")
    app = SpecChatApp(lambda progress: FakeEngine(["An answer."]), settings, history_store, clock=FakeClock())
    exports = tmp_path / "data" / "exports"
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send_each(pilot, "Why is the sky blue?")
        conv_id = app.chat_screen.recorder.conversation_id
        await pilot.press("ctrl+s")
        await pilot.pause()
        first = exports / f"specchat-{conv_id}-why-is-the-sky-blue.md"
        assert first.is_file() and "Why is the sky blue?" in first.read_text()
        assert f"Exported to {first}" in _notes(app)  # the full path
        await _open_browser(pilot)
        await pilot.press("ctrl+s")  # the same conversation from the browser: same scheme, a new file
        await pilot.pause()
        second = exports / f"specchat-{conv_id}-why-is-the-sky-blue-2.md"
        assert second.is_file() and f"Exported to {second}" in _notes(app)
    assert {p.name for p in exports.iterdir()} == {first.name, second.name}
    assert list(cwd.iterdir()) == []  # never the current directory


async def test_the_markdown_k_column_is_the_k_used_over_the_turn(make_app, history_store):
    engine = FakeEngine(["one two three four five six seven eight nine ten eleven twelve"], k=3, hold_at_steps=(2,))
    app, _ = make_app(engine, history_store=history_store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        from tuikit import send, wait_hold

        await send(pilot, "count")
        await wait_hold(pilot, engine)
        await pilot.press("f4", "f4")  # K 3 -> 5 mid-reply
        await pilot.pause()
        engine.release()
        await settle(pilot)
        ks = sorted({s.k for s in engine.steps_seen})
        assert ks == [3, 5]
        md = history_store.export_markdown(app.chat_screen.recorder.conversation_id)
        assert "| 3\u20135 | ngram |" in md  # was "| 5 |": the K control when the turn ended
