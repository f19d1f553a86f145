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
