"""The versions of a reply through a real pty (issue 11): ctrl+r keeps the previous reply, left (ESC [ D) flips
between versions in an empty prompt and moves the cursor in one holding text, alt+n (ESC n, one write) flips
whatever the prompt holds and types nothing; the choice is in the SQLite file after quitting."""

from __future__ import annotations

import sys
from pathlib import Path

from ptyapp import PtyApp

from specchat.history import HistoryStore

FAKE_APP = Path(__file__).with_name("fakeapp.py")
LEFT, ALT_N = b"\x1b[D", b"\x1bn"


def test_arrow_and_alt_keys_flip_versions_and_the_choice_is_saved(tmp_path):
    db = tmp_path / "history.sqlite3"
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=110, rows=30) as app:
        app.wait_ready(timeout=60)
        app.write("hello there\r")
        app.wait_for("tok/s \u00b7", timeout=60)
        app.press("ctrl+r")
        app.wait_for("reply 2/2 \u00b7", timeout=60)
        app.write(LEFT)
        app.wait_for("reply 1/2 \u00b7", timeout=30)
        assert "[D" not in app.text()
        app.write(ALT_N)
        app.wait_for("reply 2/2 \u00b7", timeout=30)
        app.write(LEFT)
        app.wait_for("reply 1/2 \u00b7", timeout=30)
        app.write("ab")
        app.wait_for(lambda screen: any(line.startswith("\u2502 ab ") for line in map(str.strip, screen.split("\n"))),
                     timeout=30, what="ab in the prompt")
        # the prompt holds text: left is the prompt's (moves its cursor), no flip; alt+n flips whatever the
        # prompt holds. A bound key acts once it has passed the prompt, so "2/2" means left has acted too
        # (written after that: in one burst Textual inserts X before a bound key's action runs)
        app.write(LEFT)
        app.write(ALT_N)
        app.wait_for("reply 2/2 \u00b7", timeout=30)
        app.write("X")
        app.wait_for("aXb", timeout=30)
        app.write(b"\x7f" * 3)  # backspace the prompt empty (the cursor was after X: a, X go, then nothing)
        app.write(b"\x1b[F")  # end
        app.write(b"\x7f")
        app.wait_for("Message (Enter sends", timeout=30, what="the prompt empty (its placeholder)")
        app.write(LEFT)
        app.wait_for("reply 1/2 \u00b7", timeout=30)
        assert app.quit() == 0
    store = HistoryStore(db)
    try:
        (conv,) = store.list_conversations()
        _, records = store.records(conv.id)
        assert len(records[-1].version_records()) == 2 and records[-1].message.alternate_index == 0
    finally:
        store.close()


SHIFT_UP, SHIFT_DOWN = b"\x1b[1;2A", b"\x1b[1;2B"


def test_an_earlier_reply_flips_its_versions_and_the_screen_and_the_file_agree(tmp_path):
    """Issue 22: a reply keeps its versions once the chat goes on. shift+up (ESC [1;2A) in an empty prompt
    chooses the earlier reply, left flips it; the last reply stays; after quitting, the SQLite file holds what
    the screen showed: the earlier reply's first version chosen, both kept, the last reply untouched."""
    db = tmp_path / "history.sqlite3"
    replies = ["--reply", "Alpha reply.", "--reply", "Bravo reply.", "--reply", "Charlie reply."]
    with PtyApp(tmp_path, ["--db", str(db), *replies], command=[sys.executable, str(FAKE_APP)], cols=110,
                rows=40) as app:
        app.wait_ready(timeout=60)
        app.write("sea?\r")
        app.wait_for(lambda screen: "Alpha" in screen and "generating" not in screen, timeout=60,
                     what="the first reply finished")
        app.press("ctrl+r")
        app.wait_for("reply 2/2 \u00b7", timeout=60)
        app.write("mountains?\r")
        app.wait_for(lambda screen: "Charlie" in screen and "generating" not in screen, timeout=60,
                     what="the second reply finished")
        assert "Bravo" in app.text() and "Alpha" not in app.text()
        app.write(SHIFT_UP)
        app.wait_for("Reply 1 of 2 is chosen", timeout=30)
        app.write(LEFT)
        app.wait_for("reply 1/2 \u00b7", timeout=30)
        screen = app.text()
        assert "Alpha" in screen and "Bravo" not in screen and "Charlie" in screen
        assert "[1;2A" not in screen and "[D" not in screen
        app.write(SHIFT_DOWN)
        app.wait_for("The last reply is chosen", timeout=30)
        app.write(LEFT)  # the last reply has one version: nothing flips
        app.wait_for("The last reply has one version", timeout=30)
        assert "Alpha" in app.text() and "Charlie" in app.text()
        assert app.quit() == 0
    store = HistoryStore(db)
    try:
        (conv,) = store.list_conversations()
        _, records = store.records(conv.id)
        replies_saved = [r for r in records if r.message.role == "assistant"]
        assert [r.message.content for r in replies_saved] == ["Alpha reply.", "Charlie reply."]
        assert [v.message.content for v in replies_saved[0].version_records()] == ["Alpha reply.", "Bravo reply."]
        assert replies_saved[0].message.alternate_index == 0 and not replies_saved[1].alternates
        assert [r.message.content for r in records if r.message.role == "user"] == ["sea?", "mountains?"]
    finally:
        store.close()
