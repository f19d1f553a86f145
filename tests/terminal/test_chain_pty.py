"""A drafter chain in the real app through a real pty (issue 23): ``specchat --draft suffix,bundled`` - the suffix
drafter first, the bundled model drafting for itself when nothing free matches - answers, and the sidebar names
where the last draft came from (on an empty history the first rounds' drafts are the draft model's). Fixed K:
auto-K would turn a model drafting for itself off at once (it cannot pay) and nothing would be drafted to name."""

from __future__ import annotations

import pytest
from ptyapp import PtyApp


def _flat(screen: str) -> str:
    return " ".join(screen.split())


@pytest.mark.slow
def test_the_app_runs_a_suffix_chain_and_the_sidebar_names_the_drafts_source(tmp_path):
    args = ["--draft", "suffix,bundled", "--no-auto-k", "--k", "4", "--n-predict", "24"]
    with PtyApp(tmp_path, args, cols=120, rows=40) as app:
        app.wait_ready(timeout=120)
        assert "suffix," in _flat(app.text())  # the pair: the chain's name as its drafter
        app.write("Write a Python function that reverses a string.\r")
        screen = app.wait_for(lambda s: "draft from the" in _flat(s) and "draft model" in _flat(s) or
                              "draft from this conversation" in _flat(s), timeout=120, what="the draft's source")
        assert "Traceback" not in screen
        app.wait_for(lambda s: "tok/s" in s and "generating" not in s, timeout=120, what="the reply's end")
        assert app.quit() == 0
