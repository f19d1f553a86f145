"""The everyday keys in a real terminal (issue 24), the installed ``specchat`` on a real GGUF (the tiny generated
target, n-gram drafter) with its real SQLite history, through a pty:

- alt+e (ESC e) hands the terminal to ``$EDITOR``, here a shell script that appends to the file it is given: what
  it saved (the prompt's text, preloaded, plus its line) is sent, the real model replies, and both are in the
  history database after quitting;
- alt+c (ESC c) copies the last reply: the app's output bytes hold OSC 52 (``ESC ] 52 ; c ; <base64> BEL``), whose
  base64 decodes to exactly the reply as saved (never the ghost text: the saved reply is the kept tokens' text).
"""

from __future__ import annotations

import base64
import re
import stat
from pathlib import Path

from ptyapp import PtyApp

from specchat.history import HistoryStore

ALT_E, ALT_C = b"\x1be", b"\x1bc"
OSC52 = re.compile(rb"\x1b\]52;c;([A-Za-z0-9+/=]*)\x07")


def _args(tmp_path: Path, tiny_target: Path) -> list[str]:
    return ["--data-dir", str(tmp_path / "data"), "--target", str(tiny_target), "--draft", "ngram",
            "--n-predict", "16", "--no-auto-k"]


def _saved(tmp_path: Path) -> list[tuple[str, str]]:
    store = HistoryStore(tmp_path / "data" / "history.sqlite3")
    try:
        (conv,) = store.list_conversations()
        _, records = store.records(conv.id)
        return [(r.message.role, r.message.content) for r in records if r.message.role != "system"]
    finally:
        store.close()


def test_the_editor_key_sends_what_the_editor_saved_and_the_reply_is_saved(tmp_path: Path, tiny_target: Path):
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nprintf ' one two three one two three\\n' >> \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IXUSR)
    env = {"EDITOR": str(editor), "VISUAL": ""}
    with PtyApp(tmp_path, _args(tmp_path, tiny_target), cols=110, rows=30, env=env) as app:
        app.wait_ready(timeout=180)
        app.write("Repeat:")
        app.write(ALT_E)  # in order after the typed text: the editor is given "Repeat:"
        app.wait_for("tok/s \u00b7", timeout=180, what="the reply to the edited message")
        assert "Repeat: one two three one two three" in app.text()
        assert app.quit() == 0
    saved = _saved(tmp_path)
    assert saved[0] == ("user", "Repeat: one two three one two three")
    assert saved[1][0] == "assistant" and saved[1][1]


def test_the_copy_key_writes_osc52_carrying_exactly_the_saved_reply(tmp_path: Path, tiny_target: Path):
    with PtyApp(tmp_path, _args(tmp_path, tiny_target), cols=110, rows=30) as app:
        app.wait_ready(timeout=180)
        app.write("Repeat exactly: one two three four. one two three four.\r")
        app.wait_for("tok/s \u00b7", timeout=180, what="the reply")
        start = len(app.output)
        app.write(ALT_C)
        app.wait_for(lambda s: OSC52.search(bytes(app.output[start:])) is not None, timeout=30, what="OSC 52")
        app.wait_for("Clipboard", timeout=30, what="the copy's notice")
        assert app.quit() == 0
        (payload,) = OSC52.findall(bytes(app.output[start:]))
    saved = _saved(tmp_path)
    reply = saved[-1]
    assert reply[0] == "assistant" and reply[1]
    assert base64.b64decode(payload).decode("utf-8") == reply[1]


def test_a_toggle_after_a_reply_shows_on_the_narrow_status_bar(tmp_path: Path, tiny_target: Path):
    """At 60x20 the sidebar gives way to a one-line status bar; speculation toggled (ctrl+t) after a reply must show
    there as the next round's setting, not leave the last round's K as if nothing had happened (found in tmux)."""
    with PtyApp(tmp_path, _args(tmp_path, tiny_target), cols=60, rows=20) as app:
        app.wait_ready(timeout=180)
        app.write("one two three one two three\r")
        app.wait_for(lambda s: "tok/s \u00b7" in app.lines()[-2] and "ready" in app.lines()[-2], timeout=180,
                     what="the reply's rate on the status bar")
        assert "next round" not in app.lines()[-2]
        app.write(b"\x14")  # ctrl+t: speculation off
        app.wait_for(lambda s: "next round: speculation off" in app.lines()[-2], timeout=30,
                     what="the toggle on the status bar")
        app.write(b"\x14")  # and on again: the last round's K stands
        app.wait_for(lambda s: "next round" not in app.lines()[-2] and "tok/s \u00b7 K" in app.lines()[-2], timeout=30,
                     what="the status bar back to the last round's K")
        assert app.quit() == 0
    assert [role for role, _ in _saved(tmp_path)] == ["user", "assistant"]
