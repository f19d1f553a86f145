"""``specchat demo`` in a real terminal (issue 23): Esc while the history scene saves its earlier conversations -
the status says Esc cancels, the tour closes within a round instead of after every conversation is generated,
a notification says the scene was cancelled, no marker is left, and the app quits cleanly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ptyapp import PtyApp

import specchat
from specchat import demo


def _flat(screen: str) -> str:
    return " ".join(screen.split())


@pytest.mark.slow
def test_escape_while_the_history_scene_saves_closes_the_tour_and_leaves_no_marker(tmp_path, bundled_model):
    history = next(s for s in demo.SCENES if s.earlier)
    scene = demo.SCENES.index(history) + 1
    data = tmp_path / "specchat-data"
    own = data / demo.TOUR_HISTORY_DIR
    # this checkout's code (the console script's editable install may point at another one)
    env = {"PYTHONPATH": str(Path(specchat.__file__).resolve().parents[1])}
    args = ["--data-dir", str(data), "demo", "--scene", str(scene), "--n-predict", "48", "--threads", "1"]
    with PtyApp(tmp_path, args, cols=100, rows=30, command=[sys.executable, "-m", "specchat.cli"], env=env) as app:
        screen = app.wait_for(lambda s: "saving earlier conversation 2/" in _flat(s), timeout=600,
                              what="the second earlier conversation being saved")  # after deriving the demo models
        assert "(Esc cancels)" in _flat(screen) and "Scene 1 of 1" in screen, _flat(screen)
        app.press("escape")
        # the toast's lines are drawn over the chat's: its words are looked for a line at a time
        screen = app.wait_for(lambda s: "was cancelled before" in s and "Scene 1 of 1" not in s, timeout=60,
                              what="the tour closed, saying the history scene was cancelled")
        assert "earlier conversations" in screen and "saved afresh" in screen, screen
        assert not (own / "earlier.txt").exists()
        assert app.quit(timeout=120) == 0
    assert not (own / "earlier.txt").exists()
