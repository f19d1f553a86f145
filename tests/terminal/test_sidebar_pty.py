"""The status bar and the glossary through a real pty (issue 11): at 80x24 the status bar says "no reply yet"
(never ``0.0 tok/s``) until a reply, then its rate and K in the engine's words; at 60x20 F1 opens the
glossary, page down scrolls it to the colours, Esc closes it. The real app on the fake engine (fakeapp.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from ptyapp import PtyApp

FAKE_APP = Path(__file__).with_name("fakeapp.py")


def _status_bar(app: PtyApp) -> str:
    """The row above the footer."""
    return app.lines()[-2]


def test_the_status_bar_shows_no_number_before_a_reply_and_the_glossary_scrolls_at_60x20(tmp_path):
    db = tmp_path / "history.sqlite3"
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=80, rows=24) as app:
        app.wait_ready(timeout=60)
        bar = _status_bar(app)
        assert bar.strip().startswith("no reply yet \u00b7 K 3 (fixed)"), app.text()
        assert "0.0" not in bar and "tok/s" not in bar
        app.write("hello there\r")
        app.wait_for(lambda s: _status_bar(app).strip().split(" ")[1:3] == ["tok/s", "\u00b7"], timeout=60,
                     what="the status bar's rate")
        rate = float(_status_bar(app).split()[0])
        assert rate > 0 and "K 3 (fixed)" in _status_bar(app)
        app.resize(60, 20)
        app.wait_for(lambda s: len(app.lines()) == 20 and "K 3 (fixed)" in _status_bar(app), timeout=30,
                     what="the 60x20 layout")
        app.press("f1")
        app.wait_for("Glossary", timeout=30)
        assert "Colours" not in app.text()  # below the fold at 60x20
        for _ in range(8):  # one press at a time, each once the last one has scrolled and been drawn whole
            before = app.text()
            app.press("pagedown")
            app.wait_for(lambda s, before=before: s != before, timeout=30, what="the glossary scrolled")
            if "Colours" in app.settle():  # a screen read mid-frame or mid-animation would make the next press skip a page
                break
        assert "Colours" in app.text()
        app.press("escape")
        app.wait_for(lambda s: "Glossary" not in s and "Colours" not in s, timeout=30, what="the glossary closed")
        assert app.quit() == 0


def test_the_screen_is_read_in_whole_frames(tmp_path):
    """The emulated terminal answers the synchronized-output query, so the app draws each frame between a begin
    and an end and a wait reads only whole frames (before, CI read the sidebar's "ready" over a half-drawn frame
    whose drafter line was not there yet)."""
    from ptyapp import SYNC_BEGIN, SYNC_END

    db = tmp_path / "history.sqlite3"
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=80, rows=24) as app:
        app.wait_ready(timeout=60)
        # its first frames may be drawn before it has read the terminal's answer (under load: CI, 2026-12-06); a
        # resize redraws the whole screen, by then in a synchronized frame
        app.resize(81, 24)
        app.wait_for(lambda s: app.synced, timeout=30, what="a synchronized frame")
        assert not app.in_frame
        assert app.output.count(SYNC_BEGIN) >= 1
        assert app.output.rfind(SYNC_END) > app.output.rfind(SYNC_BEGIN)
        assert app.quit() == 0


def test_a_late_answer_to_the_sync_query_still_gives_whole_screens(tmp_path):
    """The condition CI met under load, made on purpose: the terminal answers the synchronized-output query only
    after the app has drawn its ready screen unsynchronized. A wait then reads the screen once the app is quiet
    (no frame boundaries yet), and once the answer is in, the next redraw is a synchronized frame."""
    from ptyapp import SYNC_BEGIN, SYNC_SUPPORTED

    db = tmp_path / "history.sqlite3"
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=80, rows=24,
                answer_sync=False) as app:
        screen = app.wait_ready(timeout=60)
        assert not app.synced and SYNC_BEGIN not in app.output
        # the screen was read whole: the status bar drawn with "ready" holds its K line too
        assert _status_bar(app).strip().startswith("no reply yet \u00b7 K 3 (fixed)"), screen
        app.write(SYNC_SUPPORTED)
        app.resize(81, 24)
        app.wait_for(lambda s: app.synced, timeout=30, what="a synchronized frame")
        assert not app.in_frame and app.output.count(SYNC_BEGIN) >= 1
        assert app.quit() == 0
