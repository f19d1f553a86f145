"""Input arrives whole (issue 9): text typed in a burst with Enter is sent exactly as typed, through a real pty.

Each message is written to the terminal in *one* ``write()`` (``text + "\\r"``), as tmux ``send-keys``, a fast
typist or a loaded machine delivers it; several messages in one write come back to back. The SQLite history
the app writes is the judge: it must hold exactly the typed messages, in order, none cut, merged or lost.
Before the fix (the send binding read the prompt before the queued characters were inserted) the first burst
was already sent empty or cut. Runs against the fake engine (fast, many rounds) and the real bundled model.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest
from ptyapp import PtyApp

FAKE_APP = Path(__file__).with_name("fakeapp.py")

MESSAGES = (
    "Burst one: the quick brown fox",
    "Write a haiku about speculative decoding, please",
    "merge_count and Say hi twice",
    "caf\u00e9 na\u00efve \u00fcber \u2014 unicode survives",
    "2+2=? (answer in one word)",
    "How are you in the room today",
    "short",
    "a" * 120,
)


def user_messages(db: Path) -> list[str]:
    """The user messages the history database holds, in conversation and message order."""
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT role, content FROM messages ORDER BY conversation_id, idx"
        ).fetchall()
    except sqlite3.OperationalError:  # the schema is being created
        return []
    finally:
        con.close()
    return [content for role, content in rows if role == "user"]


def replies_saved(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM messages WHERE role = 'assistant'").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def wait_settled(app: PtyApp, db: Path, sent_at_least: int, timeout: float) -> list[str]:
    """Pump the screen until history holds >= ``sent_at_least`` user messages, each with its saved reply."""

    def settled(_screen: str) -> bool:
        users = user_messages(db)
        return len(users) >= sent_at_least and replies_saved(db) == len(users)

    app.wait_for(settled, timeout=timeout, what=f"{sent_at_least} message(s) sent and answered")
    return user_messages(db)


def type_and_check(app: PtyApp, db: Path, bursts: list[list[str]], timeout: float) -> None:
    """Write each burst (messages joined, each + Enter) in one write; history must equal the typed messages.

    A message typed while a reply is still being generated is refused (a notice says why) and stays in the
    prompt whole: one more Enter, once the reply is done, sends it.
    """
    expected: list[str] = []
    for burst in bursts:
        app.write("".join(text + "\r" for text in burst))
        expected += burst
        got = wait_settled(app, db, len(expected) - len(burst) + 1, timeout)
        while len(got) < len(expected):
            assert got == expected[: len(got)], f"history {got!r} is not a prefix of what was typed {expected!r}"
            app.write("\r")  # the refused message is still in the prompt: send it now
            got = wait_settled(app, db, len(got) + 1, timeout)
        assert got == expected, f"typed {expected!r}\nhistory holds {got!r}"


def test_bursts_arrive_whole_on_the_fake_engine(tmp_path):
    db = tmp_path / "history.sqlite3"
    bursts = [[MESSAGES[i % len(MESSAGES)] + f" #{i}"] for i in range(24)]
    bursts += [[f"back to back {i}a", f"back to back {i}b", f"back to back {i}c"] for i in range(4)]
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=100, rows=30) as app:
        app.wait_ready(timeout=60)
        type_and_check(app, db, bursts, timeout=60)
        assert app.quit() == 0


def test_newline_key_in_a_burst_keeps_its_place(tmp_path):
    """ctrl+j (LF) typed between characters in one burst: the newline lands where it was typed."""
    db = tmp_path / "history.sqlite3"
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=100, rows=30) as app:
        app.wait_ready(timeout=60)
        for i in range(6):
            app.write(f"line one {i}\nline two {i}\r")
            wait_settled(app, db, i + 1, timeout=60)
        assert user_messages(db) == [f"line one {i}\nline two {i}" for i in range(6)]
        assert app.quit() == 0


@pytest.mark.slow
def test_bursts_arrive_whole_on_the_bundled_model(tmp_path):
    db = tmp_path / "data" / "specchat" / "history.sqlite3"
    bursts = [[text] for text in MESSAGES[:6]] + [["Say hi", "Say bye"]]
    with PtyApp(tmp_path, ["--n-predict", "6", "--k", "3"], cols=100, rows=30) as app:
        app.wait_ready(timeout=180)
        type_and_check(app, db, bursts, timeout=180)
        assert app.quit() == 0


def test_an_arrow_and_characters_in_one_write_apply_in_the_order_typed(tmp_path):
    """"ab" in the prompt, then left + "X" in one write: "aXb" (the arrow before the X, as typed), and the same
    for backspace and home; repeated, since before the fix about one burst in two came out as "abX"."""
    db = tmp_path / "history.sqlite3"
    cases = [("ab", b"\x1b[DX", "aXb"), ("abc", b"\x7fd", "abd"), ("abc", b"\x1b[HZ", "Zabc")]
    with PtyApp(tmp_path, ["--db", str(db)], command=[sys.executable, str(FAKE_APP)], cols=100, rows=30) as app:
        app.wait_ready(timeout=60)
        for i in range(6):
            for start, burst, expected in cases:
                word = f"{i}{start}"
                app.write(word)
                app.wait_for(lambda s, w=word: re.search(rf"(?<!\S){w}(?!\S)", s) is not None, timeout=30,
                             what=f"{word!r} typed")
                app.write(burst)
                want = f"{i}{expected}" if not expected.startswith("Z") else f"Z{i}{start}"
                app.wait_for(lambda s, w=want: re.search(rf"(?<!\S){re.escape(w)}(?!\S)", s) is not None,
                             timeout=30, what=f"{want!r} (typed in order)")
                app.write(b"\x1b[F\x15")  # end, ctrl+u: the prompt empty again
                app.wait_for("Message (Enter sends", timeout=30, what="the prompt empty")
        assert app.quit() == 0
