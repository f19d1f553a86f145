"""The garbage collector's pauses: the objects that live as long as the app are taken out of its reach.

CPython's cyclic collector stops every thread while it walks a generation, and a full (generation 2) pass
walks every tracked object. Once the app is up, about 105,000 of them were created at start-up (imports,
Textual's widgets and styles, llama.cpp's bindings) and never die, so each full pass spent most of its time
on them. Measured inside the app with a ``gc.callbacks`` timer during ``tests/perf/ui_latency.py --rounds 5
--n-predict 300 --threads 1`` (bundled model, n-gram K 3, two runs one after the other on a quiet machine):
15 full passes per run, **median 77 ms, max 125 ms** without this, **median 25 ms, max 49 ms** with it.
Such a pass holds the GIL: it stalls the UI (a keystroke, or the frame that says a reply was stopped: one
Esc-to-stopped read 175 ms, 89 ms of it one full pass inside the frame's layout) and the engine thread's
Python between two ``llama_decode`` calls.

:func:`freeze_startup_heap` collects once, then moves every surviving object to CPython's permanent
generation (``gc.freeze()``, Python 3.7: frozen objects are ignored by all future collections). Frozen
objects are still freed by reference counting; only a reference cycle among them is never reclaimed, which
is why this runs once per process, when the first engine is ready (later objects, such as a chat's widgets
or a switched model's, stay collectable). Textual pauses the collector during
smooth scrolling for the same reason (``App.PAUSE_GC_ON_SCROLL``).
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> bool:
    """Collect, then freeze what survives, the first time in this process; True if it did (False after)."""
    if gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True


__all__ = ["freeze_startup_heap"]
