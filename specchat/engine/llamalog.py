"""llama.cpp's log output: silent unless asked for with ``specchat --verbose``, for every command and the app.

llama.cpp (and ggml) log through one process-wide callback (``llama_log_set``). llama-cpp-python installs its
own when ``llama_cpp`` is imported, and even at its quietest (``llama_cpp._logger.set_verbose(False)``) it
prints every ERROR-level line to stderr: a draft of another model family was refused with specchat's one-line
error *after* a few lines of llama.cpp's own, and a truncated model file did the same. specchat's one-line
errors already say what went wrong, so :func:`install` replaces that callback with one that drops everything,
or with ``--verbose`` writes each line to stderr exactly as llama.cpp wrote it (the app's stderr is Textual's,
which keeps it off the screen).

The callback is Python code that llama.cpp calls, often from the main thread while a model loads: a Ctrl-C
arriving then must not raise inside it (see :mod:`specchat.signals`, whose :func:`~specchat.signals.deferred`
every load runs under). Its body does the least possible either way.

This module imports ``llama_cpp`` only in :func:`install`, so the CLI can call :func:`set_verbose` before it
knows whether a command will load a model (``specchat --help`` stays fast).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

_verbose = False
_callback: Any = None  # the ctypes function object: must stay referenced while llama.cpp holds its pointer


def set_verbose(on: bool) -> None:
    """Show llama.cpp's log lines on stderr (``--verbose``) or drop them (the default)."""
    global _verbose
    _verbose = bool(on)


def _write(_level: int, text: bytes | None, _user: Any) -> None:
    if _verbose and text:
        sys.stderr.write(text.decode("utf-8", errors="replace"))
        sys.stderr.flush()


def install() -> None:
    """Make specchat's callback llama.cpp's log callback (again: other code may have swapped it meanwhile)."""
    global _callback
    import llama_cpp

    if _callback is None:
        _callback = llama_cpp.llama_log_callback(_write)
    llama_cpp.llama_log_set(_callback, ctypes.c_void_p(0))
