"""Drive specchat through a real pseudo-terminal, the way a person uses it, and read the screen back.

:class:`PtyApp` starts a command (by default the installed ``specchat`` console script, ``--threads 1``) in a
pty of a given size with isolated ``XDG_CONFIG_HOME`` / ``XDG_DATA_HOME`` / ``XDG_CACHE_HOME`` and no
``SPECCHAT_*`` variables, so a developer's own config and history never leak in or get written. Bytes go in
exactly as given, one ``write()`` per :meth:`PtyApp.write` call (so ``"text\\r"`` arrives as a burst, as from a
fast typist, tmux ``send-keys`` or a loaded machine); the output is fed to a ``pyte`` terminal emulator, and
:meth:`PtyApp.wait_for` polls that screen until a condition holds.

The emulated terminal supports synchronized output (DEC mode 2026), as kitty, WezTerm, foot, iTerm2 and Windows
Terminal do: it answers the app's query for the mode, so Textual wraps every frame in ``ESC[?2026h`` ...
``ESC[?2026l``, and a condition is checked only on whole frames (between an end and the next begin). A frame
arrives in several reads of the pty (4 KiB at a time), so without this a check could read the top of a new frame
over the bottom of the old one: the sidebar's "ready" drawn and its drafter line not yet (CI, 2026-12-05, on a
loaded 2-core AMD EPYC). The app draws unsynchronized until it has read the answer, which under load can come
after its first frames (CI, 2026-12-06: "ready" on screen and no frame begun yet); until its first synchronized
frame has ended, a screen counts as whole only once the app has written nothing for :data:`UNSYNCED_QUIET` s.

Nothing here sleeps a fixed time: waiting is "until the screen shows X", bounded by a timeout that only keeps
a broken run from hanging (a timeout raises with the screen as it was). Used by the pty tests
(``tests/terminal/``) and by the latency script (``tests/perf/ui_latency.py``).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pexpect
import pyte

#: synchronized output (DEC private mode 2026): the app's query, the terminal's answer ("2": supported, now reset),
#: and the frame's begin and end
SYNC_QUERY = b"\x1b[?2026$p"
SYNC_SUPPORTED = b"\x1b[?2026;2$y"
SYNC_BEGIN = b"\x1b[?2026h"
SYNC_END = b"\x1b[?2026l"
#: before the app's first synchronized frame, the quiet (s) after which its screen counts as whole
UNSYNCED_QUIET = 0.2

#: keys as a terminal in its default mode sends them
KEYS = {
    "enter": b"\r",
    "escape": b"\x1b",
    "ctrl+j": b"\n",
    "ctrl+b": b"\x02",
    "ctrl+c": b"\x03",
    "ctrl+n": b"\x0e",
    "ctrl+o": b"\x0f",
    "ctrl+p": b"\x10",
    "ctrl+q": b"\x11",
    "ctrl+s": b"\x13",
    "ctrl+r": b"\x12",
    "ctrl+t": b"\x14",
    "ctrl+g": b"\x07",
    "ctrl+k": b"\x0b",
    "ctrl+l": b"\x0c",
    "ctrl+y": b"\x19",
    "ctrl+u": b"\x15",
    "up": b"\x1b[A",
    "down": b"\x1b[B",
    "right": b"\x1b[C",
    "left": b"\x1b[D",
    "f1": b"\x1bOP",
    "pagedown": b"\x1b[6~",
}


def specchat_command() -> list[str]:
    """The installed ``specchat`` console script of this interpreter's environment."""
    script = Path(sys.executable).with_name("specchat")
    if script.exists():
        return [str(script)]
    found = shutil.which("specchat")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from specchat.cli import main; sys.exit(main())"]


def isolated_env(root: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child app: the caller's, minus SPECCHAT_*, with XDG dirs under ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    for name in ("COLUMNS", "LINES", "TEXTUAL", "NO_COLOR"):
        env.pop(name, None)
    env.update(
        XDG_CONFIG_HOME=str(root / "config"),
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
        TERM="xterm-256color",
        COLORTERM="truecolor",
        LANG=env.get("LANG", "C.UTF-8") if "UTF-8" in env.get("LANG", "").upper() else "C.UTF-8",
    )
    env.update(extra or {})
    return env


class ScreenTimeout(AssertionError):
    """The screen never showed what was waited for; the message holds the screen as it was."""


class PtyApp:
    """One app process in a pty, its screen emulated by pyte. Use as a context manager (closes the app)."""

    def __init__(
        self,
        root: Path,
        args: Sequence[str] = (),
        *,
        cols: int = 100,
        rows: int = 30,
        command: Sequence[str] | None = None,
        threads: int | None = 1,
        env: Mapping[str, str] | None = None,
        answer_sync: bool = True,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        argv = list(command) if command is not None else specchat_command()
        argv += list(args)
        if threads is not None and command is None:
            argv += ["--threads", str(threads)]
        self.argv = argv
        self.cols, self.rows = cols, rows
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.output = bytearray()  # everything the app wrote, for a post-mortem
        self.in_frame = False  # between a synchronized frame's begin and its end: the screen is half drawn
        self._answered_sync_query = not answer_sync  # False: the answer is the test's to write (a late one)
        self.synced = False  # a synchronized frame has ended: from now on every frame is between a begin and an end
        self.child = pexpect.spawn(
            argv[0], argv[1:], env=isolated_env(self.root, env), dimensions=(rows, cols), cwd=str(self.root),
            echo=False,
        )

    # -- input --------------------------------------------------------------------------------------
    def write(self, data: bytes | str) -> None:
        """Write ``data`` to the terminal in one ``write()`` (a burst); ``str`` is encoded as UTF-8."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        written = os.write(self.child.child_fd, raw)
        assert written == len(raw), f"short write to the pty: {written} of {len(raw)} bytes"

    def press(self, *keys: str) -> None:
        """Each key (a name in :data:`KEYS`) in its own write."""
        for key in keys:
            self.write(KEYS[key])

    def resize(self, cols: int, rows: int) -> None:
        self.cols, self.rows = cols, rows
        self.screen.resize(rows, cols)
        self.child.setwinsize(rows, cols)  # the child gets SIGWINCH

    # -- output -------------------------------------------------------------------------------------
    def pump(self, timeout: float = 0.0, until: Callable[[], bool] | None = None) -> bool:
        """Feed whatever the app has written (waiting up to ``timeout`` for the first byte); True if any. With
        ``until``, stop as soon as it holds after a chunk: a test that fell behind the app (the project's CI on
        a loaded 2-core AMD EPYC) would otherwise feed seconds of frames at once and never see a state that
        lasted only those seconds - a whole 400-token reply went by without "generating" ever being on screen."""
        got = False
        wait = timeout
        while True:
            try:
                chunk = self.child.read_nonblocking(65536, timeout=wait)
            except pexpect.TIMEOUT:
                return got
            except pexpect.EOF:
                return got
            self.feed(chunk)
            got = True
            wait = 0
            if until is not None and not self.in_frame and until():
                return got

    def feed(self, chunk: bytes) -> None:
        """Take ``chunk`` of the app's output: to the emulator, and to the synchronized-output bookkeeping (the
        mode query answered once; :attr:`in_frame` as the last begin or end in the output so far says)."""
        start = max(0, len(self.output) - len(SYNC_BEGIN))  # a sequence split across two reads is found whole
        self.output += chunk
        self.stream.feed(chunk)
        seen = bytes(self.output[start:])
        if not self._answered_sync_query and SYNC_QUERY in seen:
            self._answered_sync_query = True
            self.write(SYNC_SUPPORTED)
        begin, end = seen.rfind(SYNC_BEGIN), seen.rfind(SYNC_END)
        if begin != end:  # both -1: no news
            self.in_frame = begin > end
        if end >= 0:
            self.synced = True

    def settle(self, quiet: float = 0.3, timeout: float = 30.0) -> str:
        """Feed output until the app has written nothing for ``quiet`` seconds (a frame, or a scroll animation,
        is drawn in several writes: a screen read between them is a partly drawn one); the screen then."""
        deadline = time.monotonic() + timeout
        while self.pump(quiet) and time.monotonic() < deadline:
            pass
        return self.text()

    def text(self) -> str:
        """The screen as text, one line per row (trailing spaces stripped)."""
        return "\n".join(line.rstrip() for line in self.screen.display)

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def wait_for(self, condition: str | Callable[[str], bool], timeout: float = 60.0, what: str | None = None) -> str:
        """Pump output until ``condition`` (text on screen, or a predicate of the screen text) holds."""
        check = (lambda screen: condition in screen) if isinstance(condition, str) else condition
        deadline = time.monotonic() + timeout
        while True:
            screen = self.text()
            if not self.in_frame and check(screen):
                if self.synced:
                    return screen
                screen = self.settle(quiet=UNSYNCED_QUIET)  # no frame boundaries yet: whole once the app is quiet
                if not self.in_frame and check(screen):
                    return screen
                continue
            if not self.alive:
                self.pump(0.1)
                screen = self.text()
                if check(screen):
                    return screen
                raise ScreenTimeout(f"the app exited ({self.exit_status()}) before {what or condition!r}:\n{screen}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise ScreenTimeout(f"no {what or condition!r} within {timeout:.0f} s; the screen:\n{screen}")
            self.pump(min(left, 0.05), until=lambda: check(self.text()))

    def wait_ready(self, timeout: float = 120.0) -> str:
        """Until the model is loaded: the sidebar's "ready \u00b7 loaded in" or the status bar's "\u00b7 ready"
        (not the loader's own progress text, "loading 100 %: ready", shown just before)."""
        return self.wait_for(
            lambda screen: "ready \u00b7 loaded" in screen or any(line.endswith("\u00b7 ready") for line in self.lines()),
            timeout=timeout, what="the model loaded",
        )

    # -- lifetime ------------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.child.isalive()

    def exit_status(self) -> int | None:
        if self.child.isalive():
            return None
        return self.child.exitstatus if self.child.exitstatus is not None else -(self.child.signalstatus or 0)

    def wait_exit(self, timeout: float = 60.0) -> int | None:
        """Pump output until the app exits; its exit status (negative: killed by that signal)."""
        deadline = time.monotonic() + timeout
        while self.child.isalive() and time.monotonic() < deadline:
            self.pump(0.05)
        self.pump(0)
        if self.child.isalive():
            return None
        self.child.wait() if self.child.exitstatus is None and self.child.signalstatus is None else None
        return self.exit_status()

    def quit(self, timeout: float = 60.0) -> int | None:
        """Quit the way a user does (ctrl+q) and wait for the exit; the exit status."""
        if self.child.isalive():
            self.press("ctrl+q")
        return self.wait_exit(timeout)

    def close(self) -> None:
        """Quit if still running; kill it if it does not exit."""
        if self.child.isalive():
            self.quit(timeout=30)
        if self.child.isalive():
            self.child.kill(signal.SIGKILL)
        self.child.close(force=True)

    def __enter__(self) -> PtyApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
