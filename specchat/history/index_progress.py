"""What the suffix drafter's history index is doing, for whoever shows it (issue 23): how far a build or rebuild
is, when it is ready, and its notices (a rebuilt index, an unreadable history).

:class:`~specchat.history.corpus.HistoryCorpus` reports each :class:`IndexProgress` and notice to its own callbacks
and to every :func:`watch` of its database file in this process - the way :mod:`specchat.history.changes` tells
the corpus of writes: the corpus is made inside :mod:`specchat.loading` on the app's engine thread (a lazy one as
late as its first draft), and the app never sees it, only the history file it is built from. Listeners run on
the corpus's thread and must only hand the value on (the app posts a Textual message); one that raises is
dropped from that call, never the corpus's problem. Light on purpose (no numpy): the app imports it at start-up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: the phases of :attr:`IndexProgress.phase`
LOADING, INDEXING, READY, OFF, STOPPED = "loading", "indexing", "ready", "off", "stopped"


@dataclass(frozen=True)
class IndexProgress:
    """One report of the index: ``phase`` (:data:`LOADING` the saved file or reading the history, :data:`INDEXING`
    ``done`` of ``total`` messages to tokenise, :data:`READY` with ``done`` messages of ``tokens`` tokens,
    :data:`OFF`: no history to draft from, :data:`STOPPED` before it was built) and ``status``, the corpus's
    :attr:`~specchat.history.corpus.HistoryCorpus.status` in words."""

    phase: str
    status: str
    done: int = 0
    total: int = 0
    tokens: int = 0


ProgressListener = Callable[[IndexProgress], None]
NoticeListener = Callable[[str], None]

_lock = threading.Lock()
_watchers: dict[str, list[tuple[ProgressListener, NoticeListener]]] = {}


def _key(path: str | Path) -> str:
    return str(Path(path).expanduser().resolve())


def watch(path: str | Path, progress: ProgressListener, notice: NoticeListener) -> Callable[[], None]:
    """Hear every index built from the history at ``path``: ``progress(IndexProgress)`` and ``notice(line)``, on the
    corpus's thread. Returns the unsubscribe."""
    key, pair = _key(path), (progress, notice)
    with _lock:
        _watchers.setdefault(key, []).append(pair)

    def unsubscribe() -> None:
        with _lock:
            group = _watchers.get(key, [])
            if pair in group:
                group.remove(pair)
            if not group:
                _watchers.pop(key, None)

    return unsubscribe


def _group(path: str | Path) -> list[tuple[ProgressListener, NoticeListener]]:
    with _lock:
        return list(_watchers.get(_key(path), ())) if _watchers else []


def report(path: str | Path, progress: IndexProgress) -> None:
    """Tell the watchers of ``path`` how the index is doing (the corpus's thread)."""
    for listener, _ in _group(path):
        try:
            listener(progress)
        except Exception:  # noqa: BLE001 - a watcher's bug must never stop the corpus
            pass


def say(path: str | Path, line: str) -> None:
    """Tell the watchers of ``path`` a notice (once per event: the corpus says each once)."""
    for _, listener in _group(path):
        try:
            listener(line)
        except Exception:  # noqa: BLE001 - as in report
            pass


__all__ = ["INDEXING", "LOADING", "OFF", "READY", "STOPPED", "IndexProgress", "report", "say", "watch"]
