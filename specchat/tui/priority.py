"""The UI thread's CPU priority beside llama.cpp's threads: lowered only when they take every core.

With ``threads`` = the core count (the default), llama.cpp's compute threads meet at a barrier after every
operation: a UI thread that wakes up to draw preempts one of them and the others wait. At nice 19 the UI draws
in the gaps instead. Measured on 2 cores (bundled SmolLM2 + ngram, K = 3, 150 tokens, alternating with
``specchat generate``): reply tok/s 0.83-1.07x of generate (median ~0.96) at nice 19, 0.71-1.0x (median ~0.75)
at nice 10, 0.65-0.85x at nice 0.

With fewer threads than cores there is a core for the UI, and nice 19 only starves it whenever anything else
runs: measured through a pty (tests/perf/ui_latency.py, ``--threads 1``, 2 cores, load average ~4 from other
processes, runs alternated), keystroke-to-screen while a reply streams was p50 146-178 ms, p95 0.95-1.1 s
before (nice 19) and p50 24-26 ms, p95 86-99 ms after (nice 0, with the Esc driver and the 15 Hz updates). So
then the UI keeps nice 0. The price under load: the UI's CPU comes out of the process's scheduler share (see
:mod:`specchat.tui.generation`).

Plain ``os`` calls, no Textual: :meth:`specchat.tui.app.SpecChatApp.on_mount` calls :func:`yield_cpu_to_engine`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

#: niceness of the UI thread once the engine thread exists, if llama.cpp takes every core (Linux only)
UI_NICE = 19


def ui_needs_to_yield(threads: int) -> bool:
    """llama.cpp's ``threads`` take every core (see the module docstring)."""
    return threads >= (os.cpu_count() or 1)


def yield_cpu_to_engine(threads: int, start_engine_thread: Callable[[], None]) -> None:
    """Give the calling (UI) thread the lowest CPU priority, below the engine's threads, when
    :func:`ui_needs_to_yield` (Linux; a no-op elsewhere).

    The engine thread is created first (``start_engine_thread``), so it and the llama.cpp threads it starts keep
    the normal priority. With autogroup scheduling (the default on desktop Linux) niceness only ranks the threads
    of this session, so other programs do not starve the UI any more than before. Lowering a priority cannot be
    undone without privileges.
    """
    if not sys.platform.startswith("linux") or UI_NICE <= 0 or not ui_needs_to_yield(threads):
        return
    start_engine_thread()  # the engine thread now exists, at nice 0
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), UI_NICE))
    except OSError:
        pass
