"""The suffix drafter's history index in the real app through a real pty (issue 23): ``specchat --draft suffix`` over
a saved history whose index file is garbage - the app comes up, the rebuild is one warning on screen, the sidebar
says the index is ready with every saved message, a reply still comes, and the app quits cleanly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ptyapp import PtyApp

#: the checkout these tests are in: the child app runs its code (the venv's editable install may point elsewhere)
ROOT = Path(__file__).resolve().parents[2]


def _flat(screen: str) -> str:
    """The screen's words in one line, a toast's edge and the sidebar's border left out (they sit between the
    words of a wrapped line)."""
    return " ".join(re.sub("[\u2580-\u259f\u2500-\u257f]", " ", screen).split())


@pytest.mark.slow
def test_a_corrupt_index_is_one_warning_on_screen_and_the_app_runs_on(tmp_path):
    from specchat.config import Settings
    from specchat.engine.protocol import Message
    from specchat.history import HistoryStore
    from specchat.loading import load_engine, wait_for_history

    data = tmp_path / "specchat-data"
    settings = Settings(target="bundled", draft="suffix", auto_k=False, n_ctx=512, threads=1, data_dir=data)
    with HistoryStore(settings.history_path()) as store:
        for i in range(10):
            conv = store.create_conversation(f"Question {i}")
            store.append_message(conv, Message("user", f"What is {i} plus {i}?"))
            store.append_message(conv, Message("assistant", f"{i} plus {i} is {2 * i}."))
        before = store.corpus_messages()
    session = load_engine(settings)  # writes the index file for the bundled model's tokenizer
    try:
        assert wait_for_history(session, 60) == []
    finally:
        session.close()
    (saved,) = (data / "suffix").glob("*.npz")
    saved.write_bytes(b"PK\x03\x04 not the index it claims to be")

    args = ["--data-dir", str(data), "--draft", "suffix", "--no-auto-k", "--k", "4", "--n-predict", "16"]
    with PtyApp(tmp_path / "app", args, cols=120, rows=40, env={"PYTHONPATH": str(ROOT)}) as app:
        app.wait_ready(timeout=120)
        screen = app.wait_for(lambda s: "rebuilt from the history" in _flat(s), timeout=60, what="the notice")
        assert "History index" in screen and "Traceback" not in screen
        screen = app.wait_for(lambda s: "history: 20 messages" in _flat(s), timeout=60, what="the ready line")
        app.write("What is 4 plus 4?\r")
        screen = app.wait_for(lambda s: "tok/s" in s and "generating" not in s, timeout=120, what="the reply's end")
        assert "Traceback" not in screen
        assert app.quit() == 0
    with HistoryStore(settings.history_path()) as store:
        assert store.corpus_messages()[: len(before)] == before  # the history is intact, the new turn after it
