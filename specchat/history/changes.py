"""Change notices: who wants to hear that a conversation in a history file changed (issue 23's suffix corpus).

:class:`~specchat.history.store.HistoryStore` calls :func:`notify` after every committed write with the
conversation's id (a message saved, a reply replaced, a tail truncated, a conversation deleted or imported);
:func:`subscribe` registers a callback for one database file, whichever store object writes it in this process
(the app's store and a corpus's own reader are separate connections to one file). The callback runs on the
writer's thread and must only hand the id on (the suffix corpus queues it for its own thread): it never reads the
database there. Another process's writes are not heard; whoever listens reconciles with the file when it starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

Listener = Callable[[int], None]

_lock = threading.Lock()
_listeners: dict[str, list[Listener]] = {}


def _key(path: str | Path) -> str:
    return str(Path(path).expanduser().resolve())


def subscribe(path: str | Path, listener: Listener) -> Callable[[], None]:
    """Call ``listener(conversation id)`` after each write to the database at ``path``; returns the unsubscribe."""
    key = _key(path)
    with _lock:
        _listeners.setdefault(key, []).append(listener)

    def unsubscribe() -> None:
        with _lock:
            group = _listeners.get(key, [])
            if listener in group:
                group.remove(listener)
            if not group:
                _listeners.pop(key, None)

    return unsubscribe


def notify(path: str | Path, conv_id: int) -> None:
    """Tell the listeners of ``path`` that conversation ``conv_id`` changed (a failing listener is not the writer's
    problem: its error is dropped)."""
    with _lock:
        if not _listeners:
            return
        group = list(_listeners.get(_key(path), ()))
    for listener in group:
        try:
            listener(conv_id)
        except Exception:  # noqa: BLE001 - a listener's bug must never fail a save
            pass


__all__ = ["Listener", "notify", "subscribe"]
