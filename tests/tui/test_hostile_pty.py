"""Issue 10 against the real app in a real pseudo-terminal (pexpect + pyte): hostile history never changes the
terminal (title, clipboard, screen), a broken theme does not crash the app, and SIGTERM / SIGHUP / SIGINT /
closing the terminal mid-reply save the partial reply marked stopped.

:class:`Term` is a deliberately small harness (a shared one is being built in ``tests/pty/``): the installed
``specchat`` in a pty of a given size with isolated config and data dirs, its output fed to a pyte screen (and
kept as raw bytes). Waiting is "until the screen shows X" with a timeout that only stops a broken run.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pexpect
import pyte
import pytest
from hostile import PAYLOADS, hostile_export, raw_control_bytes

from specchat.history import HistoryStore


class Term:
    """``specchat ARGS`` in a pty (``cols`` x ``rows``), its screen emulated by pyte."""

    def __init__(self, root: Path, args: list[str], *, cols: int = 110, rows: int = 32) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
        env.update(XDG_CONFIG_HOME=str(root / "cfg"), XDG_DATA_HOME=str(root / "data"), TERM="xterm-256color",
                   LANG="C.UTF-8", COLORTERM="truecolor")
        script = Path(sys.executable).with_name("specchat")
        self.child = pexpect.spawn(str(script), args, env=env, dimensions=(rows, cols), cwd=str(root), echo=False,
                                   preexec_fn=_default_stop_signals)
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()

    def pump(self, timeout: float = 0.1) -> None:
        try:
            while True:
                chunk = self.child.read_nonblocking(65536, timeout=timeout)
                self.raw += chunk
                self.stream.feed(chunk)
                timeout = 0
        except (pexpect.TIMEOUT, pexpect.EOF):
            pass

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, what: Callable[[str], bool] | str, timeout: float = 60) -> None:
        check = (lambda s: what in s) if isinstance(what, str) else what
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            if check(self.text()):
                return
            if not self.child.isalive() or time.monotonic() > deadline:
                raise AssertionError(f"waited for {what!r}; alive={self.child.isalive()}; screen:\n{self.text()}\n"
                                     f"last output: {bytes(self.raw[-1500:])!r}")

    def write(self, data: bytes) -> None:
        os.write(self.child.child_fd, data)

    def type_and_send(self, text: str) -> None:
        """Type ``text``, wait until the prompt shows it, then Enter (as a person does)."""
        self.write(text.encode())
        self.wait_for(text[-20:])
        self.write(b"\r")

    def exit_code(self, timeout: float = 120) -> int:
        """Wait for the app to end (reading its output meanwhile); its exit code or -signal."""
        deadline = time.monotonic() + timeout
        while self.child.isalive() and time.monotonic() < deadline:
            self.pump()
        assert not self.child.isalive(), f"still running; screen:\n{self.text()}"
        self.pump(0)
        self.child.wait() if self.child.exitstatus is None and self.child.signalstatus is None else None
        return self.child.exitstatus if self.child.exitstatus is not None else -self.child.signalstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.kill(signal.SIGKILL)
        self.child.close(force=True)


def _default_stop_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.fixture
def term_factory(tmp_path):
    terms: list[Term] = []

    def make(args: list[str], **kw) -> Term:
        term = Term(tmp_path, args, **kw)
        terms.append(term)
        return term

    yield make
    for term in terms:
        term.close()


def _history_db(root: Path) -> Path:
    return root / "data" / "specchat" / "history.sqlite3"


def test_hostile_history_never_reaches_the_terminal(tmp_path, term_factory):
    """A conversation imported with every field hostile, then crafted in the database (its "updated" date and
    stop reason hold an OSC 2 title change and an OSC 52 clipboard write): the history browser and the reopened
    conversation draw it, and the terminal receives none of the payloads; its title stays untouched."""
    data = hostile_export()
    data["messages"][2]["stopped"] = False
    with HistoryStore(_history_db(tmp_path)) as store:
        store.import_json(data, source="hostile.json")
    with sqlite3.connect(_history_db(tmp_path)) as conn:
        conn.execute("UPDATE conversations SET updated = ?", ("~" + PAYLOADS["osc2-title"],))
        conn.execute("UPDATE turn_stats SET stop_reason = ?", (PAYLOADS["osc52-clipboard"],))
    term = term_factory(["--target", str(tmp_path / "no-model.gguf"), "--threads", "1"])  # no model: read only
    term.wait_for("Could not load the model")
    term.write(b"\x0f")  # ctrl+o
    term.wait_for("saved conversations")
    term.wait_for("PWNED")  # the "updated" column: shown as text
    term.write(b"\r")
    term.wait_for("ended: ")
    term.pump(0.3)
    assert raw_control_bytes(bytes(term.raw)) == []
    assert "PWNED" not in term.screen.title and "C1TITLE" not in term.screen.title
    term.write(b"\x11")  # ctrl+q
    assert term.exit_code() == 0


def test_a_broken_selected_theme_is_reported_and_the_app_keeps_running(tmp_path, term_factory):
    cfg = tmp_path / "cfg" / "specchat"
    (cfg / "themes").mkdir(parents=True)
    (cfg / "themes" / "nan.toml").write_text('name = "nan-spread"\nprimary = "#ff0000"\nluminosity_spread = nan\n')
    (cfg / "themes" / "zzz.toml").write_text(
        'name = "zzz-var"\nprimary = "#ff0000"\n[variables]\nfooter-key-foreground = "zzz"\n'
    )
    (cfg / "config.toml").write_text('theme = "nan-spread"\n')
    term = term_factory(["--target", str(tmp_path / "no-model.gguf"), "--threads", "1"])
    term.wait_for("Theme skipped", timeout=60)
    term.wait_for("Could not load the model")
    assert term.child.isalive()
    term.write(b"\x11")
    assert term.exit_code() == 0
    assert b"Traceback" not in term.raw


STOPS = {
    "SIGTERM": lambda term: term.child.kill(signal.SIGTERM),
    "SIGHUP": lambda term: term.child.kill(signal.SIGHUP),
    "SIGINT": lambda term: term.child.kill(signal.SIGINT),
    # the terminal window closes: the kernel hangs up the pty (SIGHUP) and the app's writes fail from then on
    "hangup": lambda term: term.child.ptyproc.fileobj.close(),
}
EXIT = {"SIGTERM": 128 + signal.SIGTERM, "SIGHUP": 128 + signal.SIGHUP, "SIGINT": 128 + signal.SIGINT,
        "hangup": 128 + signal.SIGHUP}


@pytest.mark.slow
@pytest.mark.parametrize("stop", sorted(STOPS))
def test_a_stop_signal_mid_reply_saves_the_partial_reply_marked_stopped(tmp_path, term_factory, bundled_model, stop):
    """The real app on the bundled model (one thread): a reply is streaming when the signal arrives; the app
    exits with 128 + the signal and the partial reply is in the history database, marked stopped."""
    term = term_factory(["--threads", "1", "--n-predict", "400", "--no-auto-k"])
    term.wait_for("ready", timeout=180)
    term.type_and_send("Tell me a long story about a dragon who learns to read.")
    term.wait_for("generating")
    letters = sum(ch.isalpha() for ch in term.text())
    term.wait_for(lambda s: sum(ch.isalpha() for ch in s) > letters + 40, timeout=120)  # ~40 letters of reply
    STOPS[stop](term)
    if stop == "hangup":  # the pty is closed: nothing to read, only wait for the process (bounded)
        proc = term.child.ptyproc
        deadline = time.monotonic() + 60
        while proc.isalive():
            assert time.monotonic() < deadline, "the app did not end after the terminal hung up"
            time.sleep(0.2)
        code = proc.exitstatus if proc.exitstatus is not None else -proc.signalstatus
    else:
        code = term.exit_code()
    assert code == EXIT[stop], bytes(term.raw[-2000:])
    with sqlite3.connect(_history_db(tmp_path)) as conn:
        rows = conn.execute("SELECT role, stopped, length(content) FROM messages ORDER BY idx").fetchall()
        stops = conn.execute("SELECT stop_reason FROM turn_stats").fetchall()
    assert [r[0] for r in rows] == ["user", "assistant"], rows
    assert rows[1][1] == 1 and rows[1][2] > 0, rows
    assert stops == [("stopped",)]
