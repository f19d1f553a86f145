"""The everyday keys with Pilot (issue 24): copy the last reply and a code block of it (never the ghost text), write
the message in $EDITOR (a real editor script; only the terminal hand-over is stood in for, as Pilot's headless
driver cannot suspend), all of them in the key table, help, palette and remappable. The real terminal's side
(OSC 52 bytes, the editor in a pty, the reply saved in SQLite) is tests/terminal/test_everyday_keys_pty.py."""

from __future__ import annotations

import contextlib
import stat
import tempfile
from pathlib import Path

import pytest
from fake_engine import FakeEngine
from tuikit import SIZE, fake_settings, notifications, send, settle, wait_ready

from specchat.tui.clipboard import OSC52_NOTE, CodeBlock, code_blocks, next_block
from specchat.tui.editor import NO_EDITOR, Editor, edit_in_editor, editor_from
from specchat.tui.keys import ALL_IDS, resolve_keymap
from specchat.tui.outcomes import Refusal
from specchat.tui.screens.everyday import NO_SUSPEND
from specchat.tui.screens.help import help_text
from specchat.tui.widgets.prompt import PromptInput
from specchat.tui.widgets.token_view import TokenView

TWO_BLOCKS = (
    "First a shell line:\n\n```sh\necho one\n```\n\nThen the function:\n\n~~~python\ndef two():\n    return 2\n~~~\n\n"
    "That is all."
)


def editor_script(tmp_path: Path, body: str, name: str = "editor.sh") -> Path:
    """An executable editor: a shell script run as ``script FILE`` (``$1`` is the temp file)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def no_terminal_handover(app, monkeypatch) -> None:
    """Pilot's headless driver cannot suspend: run the editor without handing a terminal over."""
    monkeypatch.setattr(app, "suspend", lambda: contextlib.nullcontext())


# -- the plain rules ----------------------------------------------------------------------------------------
def test_code_blocks_are_found_as_commonmark_finds_fences():
    assert code_blocks(TWO_BLOCKS) == [CodeBlock("echo one", "sh"), CodeBlock("def two():\n    return 2", "python")]
    assert code_blocks("no code here, only `inline`") == []
    # a longer closing fence closes; a shorter one or another character does not; an unclosed fence runs to the end
    assert code_blocks("````\na\n```\n~~~\n`````\nafter") == [CodeBlock("a\n```\n~~~")]
    assert code_blocks("stopped mid-block:\n```js\nlet x = 1;") == [CodeBlock("let x = 1;", "js")]
    # an indented fence: its indentation is taken off the content lines, no more
    assert code_blocks("  ```\n  two\n    four\n one\n  ```") == [CodeBlock("two\n  four\none")]
    assert code_blocks("```a`b\nnot a fence\n```") == [CodeBlock("")]  # a backtick in the info: not an opening


def test_the_block_key_starts_at_the_last_block_and_steps_back_around():
    assert [next_block(3, p) for p in (None, 2, 1, 0)] == [2, 1, 0, 2]
    assert next_block(2, 5) == 1  # a stale index (another reply): the last block again


def test_the_editor_is_visual_then_editor_split_like_a_shell(tmp_path):
    assert editor_from({"VISUAL": "code --wait", "EDITOR": "vi"}) == Editor(("code", "--wait"), "VISUAL")
    assert editor_from({"VISUAL": "  ", "EDITOR": "nano -w"}) == Editor(("nano", "-w"), "EDITOR")
    assert editor_from({}) is NO_EDITOR and "VISUAL" in NO_EDITOR.message and "EDITOR" in NO_EDITOR.message
    bad = editor_from({"EDITOR": "vim '"})
    assert isinstance(bad, Refusal) and "$EDITOR" in bad.message and "\n" not in bad.message


def test_the_editor_round_trip_preloads_the_prompt_and_refuses_empty_or_failed_edits(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    appending = Editor((str(editor_script(tmp_path, "printf ' and more\\n' >> \"$1\"")),), "EDITOR")
    assert edit_in_editor(appending, "draft") == "draft and more"  # the saved text, one trailing newline off
    failing = Editor((str(editor_script(tmp_path, "exit 3", "fail.sh")),), "EDITOR")
    out = edit_in_editor(failing, "draft")
    assert isinstance(out, Refusal) and "status 3" in out.message and "nothing was sent" in out.message
    emptying = Editor((str(editor_script(tmp_path, ": > \"$1\"", "empty.sh")),), "EDITOR")
    out = edit_in_editor(emptying, "draft")
    assert isinstance(out, Refusal) and "empty" in out.message
    missing = Editor((str(tmp_path / "no-such-editor"),), "VISUAL")
    out = edit_in_editor(missing, "draft")
    assert isinstance(out, Refusal) and "$VISUAL" in out.message and "\n" not in out.message
    assert list(temp.iterdir()) == []  # every temp file removed, whatever the editor did


# -- copying in the app ---------------------------------------------------------------------------------------
async def test_copy_keys_copy_the_reply_and_each_code_block_never_the_ghosts(make_app, monkeypatch):
    app, engine = make_app(FakeEngine([TWO_BLOCKS]))
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("alt+b")
        assert any("No reply to copy a code block from yet" in n for n in notifications(app)) and copied == []
        await send(pilot, "show me code")
        await settle(pilot)
        view = app.query_one(TokenView)
        assert view.ghost_text.strip() and view.visible_text() != view.reply_text  # ghosts are on screen
        await pilot.press("f9")
        assert copied == [engine.messages[-1].content] == [TWO_BLOCKS]  # the reply, without the ghost text
        assert OSC52_NOTE in notifications(app)[-1]  # the caveat, on the first copy of the session
        await pilot.press("alt+b", "alt+b", "alt+b")
        assert copied[1:] == ["def two():\n    return 2", "echo one", "def two():\n    return 2"]
        notes = notifications(app)
        assert "code block 2 of 2 (python, 2 lines); alt+b again copies block 1" in notes[-3]
        assert "code block 1 of 2 (sh, 1 line)" in notes[-2]
        assert not any(OSC52_NOTE in n for n in notes[-3:])  # said once


async def test_a_reply_without_code_says_so_and_names_the_reply_key(make_app, monkeypatch):
    app, _ = make_app(FakeEngine(["plain words only"]))
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hi")
        await settle(pilot)
        await pilot.press("alt+b")
        assert copied == [] and "no code block" in notifications(app)[-1] and "f9" in notifications(app)[-1]


async def test_the_new_keys_are_in_help_and_the_palette_and_remappable(make_app, monkeypatch):
    assert {"copy_reply", "copy_code", "edit_in_editor"} <= ALL_IDS
    assert resolve_keymap({"copy_code": "alt+x", "alt+w": "edit_in_editor"}) == (
        {"copy_code": "alt+x", "edit_in_editor": "alt+w"}, [])
    app, _ = make_app(FakeEngine([TWO_BLOCKS]), fake_settings(keymap={"copy_code": "alt+x"}))
    copied: list[str] = []
    monkeypatch.setattr(app, "copy_to_clipboard", copied.append)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        text = help_text(app.effective_keys).plain
        assert "[copy_code]" in text and "[edit_in_editor]" in text and "alt+x" in text
        titles = {c.title: c.help for c in app.get_system_commands(app.screen)}
        assert "Copy a code block" in titles and "[alt+x]" in titles["Copy a code block"]
        assert "Write the message in $EDITOR" in titles and "[alt+e]" in titles["Write the message in $EDITOR"]
        await send(pilot, "code please")
        await settle(pilot)
        await pilot.press("alt+b")  # its old key does nothing now
        assert copied == []
        await pilot.press("alt+x")
        assert copied == ["def two():\n    return 2"]
        assert "alt+x again" in notifications(app)[-1]


# -- the editor in the app ------------------------------------------------------------------------------------
async def test_what_the_editor_saves_is_sent_and_the_prompt_emptied(make_app, monkeypatch, tmp_path):
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(editor_script(tmp_path, "printf ' from the editor\\n' >> \"$1\"")))
    app, engine = make_app(FakeEngine(["ok"]))
    async with app.run_test(size=SIZE) as pilot:
        no_terminal_handover(app, monkeypatch)
        await wait_ready(pilot)
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press(*"typed")  # typed, then the key in the same burst: the editor gets what was typed
        await pilot.press("alt+e")
        await settle(pilot)
        assert [m.content for m in engine.messages if m.role == "user"] == ["typed from the editor"]
        assert engine.messages[-1].role == "assistant" and prompt.text == ""


@pytest.mark.parametrize("body,said", [("exit 3", "exited with status 3"), (": > \"$1\"", "is empty")])
async def test_a_failed_or_empty_edit_sends_nothing_and_keeps_the_prompt(make_app, monkeypatch, tmp_path, body, said):
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(editor_script(tmp_path, body)))
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        no_terminal_handover(app, monkeypatch)
        await wait_ready(pilot)
        prompt = app.query_one(PromptInput)
        prompt.text = "keep me"
        prompt.focus()
        await pilot.press("alt+e")
        await settle(pilot)
        assert not engine.messages or all(m.role != "user" for m in engine.messages)
        assert prompt.text == "keep me" and said in notifications(app)[-1]
        assert "\n" not in notifications(app)[-1]


async def test_no_editor_or_no_terminal_to_hand_over_says_so_in_one_line(make_app, monkeypatch, tmp_path):
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("alt+e")
        await pilot.pause()
        assert notifications(app)[-1] == NO_EDITOR.message
        monkeypatch.setenv("EDITOR", str(editor_script(tmp_path, "exit 0")))
        await pilot.press("alt+e")  # Pilot's headless driver, like a browser session, cannot suspend
        await pilot.pause()
        assert notifications(app)[-1] == NO_SUSPEND and not engine.messages


async def test_the_server_key_without_two_servers_says_how_to_get_them(make_app):
    """alt+s (switch_server, tested against real llama-servers in tests/remote/test_app_servers.py): with no
    --server-b, one line naming both flags, and nothing changes."""
    from specchat.tui.servers import NOT_TWO

    app, engine = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("alt+s")
        await pilot.pause()
        assert notifications(app)[-1] == NOT_TWO.message and "--server-b" in NOT_TWO.message
        assert app.engine is engine
