"""Keys through a real pty with specchat's terminal driver (specchat/tui/driver.py): escape sequences that
arrive in one write are whole keys (never Esc + text), a lone Esc is the Esc key (closes help, stops a reply)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ptyapp import PtyApp

FAKE_APP = Path(__file__).with_name("fakeapp.py")


def test_sequences_are_whole_keys_and_a_lone_escape_is_escape(tmp_path):
    db = tmp_path / "history.sqlite3"
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=100, rows=30) as app:
        app.wait_ready(timeout=60)
        app.write("hello there\r")
        app.wait_for("tok/s \u00b7", timeout=60)
        app.press("up")  # ESC [ A in one write, in an empty prompt: edit the last message
        app.wait_for("editing your last message", timeout=30)
        assert "[A" not in app.text()
        app.press("escape")  # a lone ESC: cancel the edit
        app.wait_for(lambda s: "editing your last message" not in s, timeout=30, what="the edit cancelled")
        app.press("f1")  # ESC O P
        app.wait_for("specchat help", timeout=30)
        app.press("escape")
        app.wait_for(lambda s: "specchat help" not in s, timeout=30, what="help closed by Esc")
        assert "OP" not in app.text()
        assert app.quit() == 0


@pytest.mark.slow
def test_escape_stops_a_reply_of_the_bundled_model(tmp_path):
    with PtyApp(tmp_path, ["--n-predict", "400", "--no-auto-k"], cols=100, rows=30) as app:
        app.wait_ready(timeout=180)
        app.write("Tell me a long story about a robot who learns to paint.\r")
        app.wait_for("generating", timeout=180)
        app.press("escape")
        app.wait_for("\u2500 stopped", timeout=120)
        assert app.quit() == 0
