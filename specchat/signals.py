"""How specchat stops on a signal: Ctrl-C (SIGINT), ``kill`` (SIGTERM) and a closed terminal (SIGHUP) all take
the same path, and none of them can be lost inside llama.cpp.

**One path for the three signals.** Python turns SIGINT into :class:`KeyboardInterrupt`, which every command
already handles: ``generate`` stops, ``bench`` writes the partial report (and its ``--json``), the app saves the
partial reply marked stopped. SIGTERM and SIGHUP would kill the process outright (their default action), losing
exactly that. :func:`termination_raises` makes them raise :class:`Terminated`, a
:class:`KeyboardInterrupt`, so the same code runs; the CLI then exits with ``128 + signal number``
(:func:`exit_code`: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP, as a shell reports a death by signal).

**Never inside a callback.** Python runs a signal handler in the main thread at the next bytecode it executes.
While llama.cpp loads a model, the only Python bytecode that runs is in the callbacks llama.cpp makes into
Python (its log callback, the load-progress callback): the handler runs there, its exception escapes the
ctypes callback, ctypes prints "Exception ignored on calling ctypes callback function ... KeyboardInterrupt" and
the interrupt is gone (measured by the issue's tester: ``generate`` finished with rc 0 in 2 of 12 tries,
``bench`` kept running in 2 of 6). :func:`deferred` closes that hole: for the duration of a native call it
swaps the Python handlers of these signals for one that only records the signal (it cannot raise, wherever
it runs), tells the caller (so a progress callback can ask llama.cpp to abort the load), and re-delivers each
recorded signal with :func:`signal.raise_signal` once the call has returned and the old handlers are back:
the usual ``KeyboardInterrupt`` / :class:`Terminated` is raised in ordinary code. Only the main thread can set
handlers; elsewhere (the app loads models in its engine thread) no handler ever runs in the calling thread,
so there is nothing to defer.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: the signals that stop a command; SIGHUP does not exist on Windows
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    s for s in (getattr(signal, name, None) for name in ("SIGINT", "SIGTERM", "SIGHUP")) if s is not None
)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where a Ctrl-C would raise :class:`KeyboardInterrupt` (and handled alike)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return signal.Signals(self.signum).name


_last: Terminated | None = None


def _raise_terminated(signum: int, _frame: object) -> None:
    global _last
    _last = Terminated(signum)
    raise _last


def last_termination() -> Terminated | None:
    """The last :class:`Terminated` raised in this process (a command may have handled it and returned 130)."""
    return _last


@contextmanager
def termination_raises() -> Iterator[None]:
    """Within the block SIGTERM and SIGHUP raise :class:`Terminated` (main thread only; a no-op elsewhere);
    the previous handlers are restored after it. Signals whose handler is not the default (ignored with
    ``nohup``, or set by an embedding program) are left alone."""
    global _last
    _last = None
    previous: dict[signal.Signals, object] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if sig != signal.SIGINT and signal.getsignal(sig) is signal.SIG_DFL:
                previous[sig] = signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]


def exit_code(exc: BaseException) -> int:
    """The exit status for a command stopped by ``exc``: 128 + the signal number (130 for a Ctrl-C)."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT))


@contextmanager
def deferred() -> Iterator[Callable[[], bool]]:
    """Run a native call with SIGINT/SIGTERM/SIGHUP recorded instead of raised; re-deliver them afterwards.

    Yields ``interrupted()``: True once one of them has arrived (a progress callback returns ``not
    interrupted()`` so llama.cpp stops loading early). On exit the previous handlers are restored and every
    recorded signal is raised again, in arrival order, so its exception appears right here, outside any
    callback. Nested use and use outside the main thread are no-ops that yield the outer state.
    """
    global _active
    if threading.current_thread() is not threading.main_thread() or _active is not None:
        outer = _active
        yield (lambda: bool(outer)) if outer is not None else (lambda: False)
        return
    received: list[int] = []

    def record(signum: int, _frame: object) -> None:
        received.append(signum)

    previous: dict[signal.Signals, object] = {}
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if callable(handler):  # only Python-level handlers raise; SIG_DFL / SIG_IGN act in C, outside callbacks
            previous[sig] = handler
            signal.signal(sig, record)
    _active = received
    try:
        yield lambda: bool(received)
    finally:
        _active = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        for signum in dict.fromkeys(received):  # each signal once, in order of arrival
            signal.raise_signal(signum)


_active: list[int] | None = None
