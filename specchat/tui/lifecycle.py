"""How the app ends on a signal: the stop signals on the event loop, the SIGHUP watchdog, the exit code.

With ``stop_signals=True`` (as ``specchat`` runs the app), SIGINT, SIGTERM and SIGHUP (the terminal window was
closed) quit the way ctrl+q does: the reply stops, the partial reply is saved marked stopped, the engine
closes, and the exit code is 128 + the signal number (:func:`specchat.signals.exit_code` says the same for the
other commands). They are handled by the event loop (``loop.add_signal_handler``), so the quit starts from an
ordinary loop callback, never from an exception raised at an arbitrary point inside asyncio or Textual.

SIGHUP usually means the terminal is gone (the kernel hangs up the tty and sends SIGHUP then SIGCONT), and then
Textual cannot quit: every write to the tty fails with EIO, its SIGCONT handler restarts application mode on
the dead tty and its driver blocks for ever on a full output queue (reproduced in a pty: the process never
ended). So on SIGHUP the app stops and saves the reply first, synchronously in the signal's loop callback, then
quits as usual, and :meth:`StopSignals.arm_watchdog` ends the process with ``os._exit(129)`` if that has not
happened within :data:`HANGUP_EXIT_S`: there is nothing to restore on a dead terminal, and history is durable
at every commit (see :mod:`specchat.history`). The tty cannot tell reliably in the signal handler whether it is
dead yet (the kernel finishes the hang-up asynchronously: ``tcgetattr`` still succeeded there in the pty tests).

Plain asyncio and threading, no Textual: :class:`specchat.tui.app.SpecChatApp` decides what a stop does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable

from specchat.signals import STOP_SIGNALS

#: after SIGHUP the process ends this many seconds later at the latest (a dead terminal blocks Textual's exit)
HANGUP_EXIT_S = 10.0


def is_hangup(signum: int) -> bool:
    """SIGHUP (which Windows does not have): the terminal may be gone."""
    return signum == getattr(signal, "SIGHUP", None)


class StopSignals:
    """The stop signals' handlers on one event loop, the exit code they set, and the hang-up watchdog."""

    def __init__(self) -> None:
        #: what the process exits with: 0, or 128 + the first stop signal's number
        self.exit_code = 0
        self.added: list[int] = []  # the signals whose handlers are on the loop (removed by remove())
        self._watchdog: threading.Timer | None = None

    def install(self, on_signal: Callable[[int], None]) -> None:
        """Have the running loop call ``on_signal(signum)`` for each stop signal it can handle (none off the
        main thread, or where the loop has no signal support)."""
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            try:
                loop.add_signal_handler(sig, on_signal, int(sig))
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            self.added.append(int(sig))

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.added:
            loop.remove_signal_handler(sig)
        self.added.clear()

    def record(self, signum: int) -> None:
        """The exit code for a quit caused by ``signum``."""
        self.exit_code = 128 + signum

    def arm_watchdog(self, signum: int) -> None:
        """End the process :data:`HANGUP_EXIT_S` from now with 128 + ``signum``, unless :meth:`disarm` comes
        first (the app ended normally). Armed once."""
        if self._watchdog is None:
            self._watchdog = threading.Timer(HANGUP_EXIT_S, os._exit, args=(128 + signum,))
            self._watchdog.daemon = True
            self._watchdog.start()

    def disarm(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
