"""The suffix drafter's corpus: a :class:`~specchat.engine.suffix.SuffixIndex` of every saved conversation, kept in
step with the history database on a thread of its own (issue 23).

* **Per tokenizer.** Messages are tokenised with the target's tokenizer (``tokenize``), and the index is kept in
  ``<data dir>/suffix/<fingerprint>.npz`` (:func:`index_path`), so a target of another family gets its own file and
  switching back finds the old one.
* **Start-up: load, then reconcile** - persisted, because a rebuild is dominated by tokenising: llama.cpp's
  tokenizer through ctypes gave 0.08-0.1 M tokens/s here (the bundled SmolLM2, 2,000-character messages, AMD EPYC,
  one shared core), ~50 s for 5 M tokens, then ~6 s to sort; loading the saved index takes 0.25-0.3 s
  (``scripts/suffix_index_figures.py``), and reading the history's texts to compare checksums is one query: a whole
  start-up from the saved index over a real 39 MiB history of 10,000 messages (5 M tokens) took 0.63 s wall. The saved
  file names every document by (conversation id, message id) with a CRC-32 of its text; the messages in the database
  are compared with it: one that is gone leaves the index, a new one or one whose text differs (stale) is tokenised
  and added. A file that cannot be read, fails its checksum or was written for another tokenizer is rebuilt from the
  history, with one notice. The history is never changed.
* **Incremental:** :mod:`specchat.history.changes` tells the corpus which conversation a store wrote (a reply saved,
  a conversation deleted or imported); the id is queued and the corpus's thread re-reads that conversation and adds
  or drops its messages. The writer's thread (the UI's, in the app) only puts an int on a queue. A conversation
  that lost or changed a message (a reply regenerated) is added again whole, in order, so each saved message is
  followed in the index by its reply (what :meth:`~specchat.engine.suffix.SuffixIndex.reply_after` relies on).
* **Never in the way:** :meth:`HistoryCorpus.start` returns at once; until the build is done :meth:`index` is None and
  the drafter drafts from the conversation alone (like n-gram). The database is only read on the corpus's thread, on a
  connection of its own.
* **Progress shown:** ``on_progress`` (and every :func:`specchat.history.index_progress.watch` of the database file:
  the app's sidebar line) hears an :class:`~specchat.history.index_progress.IndexProgress` on the corpus's thread -
  loading, the messages tokenised so far of a build, a rebuild or the start-up reconcile, ready - at most every
  :data:`PROGRESS_EVERY_S` during a build (a first build of 10,000 messages takes ~50 s here: a few lines a second
  show it moving without costing the UI a redraw per message), plus each change of phase and once at the end.
  Notices go to ``notice`` and the watchers once each. A callback that raises is logged, never the corpus's end.
* **Excluded** conversations (``exclude``) are never indexed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import zlib
from collections.abc import Callable, Collection
from pathlib import Path

from specchat.engine.suffix import CorruptIndexError, SuffixIndex
from specchat.history import changes, index_progress
from specchat.history.index_progress import INDEXING, LOADING, OFF, READY, STOPPED, IndexProgress
from specchat.history.store import HistoryStore

log = logging.getLogger(__name__)

#: where the indexes live, under the data dir
SUFFIX_DIR = "suffix"
_STOP = -1
#: the least time between two progress reports of one build (seconds): at most 4 a second
PROGRESS_EVERY_S = 0.25


class _Stopped(Exception):
    """The corpus was closed in the middle of a build (the target's tokenizer is about to go away)."""


def index_path(data_dir: Path, fingerprint: str) -> Path:
    """The index file for one tokenizer (``fingerprint``: a hash of its vocabulary)."""
    return Path(data_dir) / SUFFIX_DIR / f"{fingerprint[:32]}.npz"


def checksum(text: str) -> int:
    """What tells a saved document's text from a changed one (CRC-32 of its UTF-8)."""
    return zlib.crc32(text.encode("utf-8", errors="surrogatepass"))


class HistoryCorpus:
    """The index of the history at ``db_path`` for one tokenizer, built and kept up to date in the background.

    ``tokenize(text)`` gives a message's token ids (called on the corpus's thread); ``end_token`` (the target's
    end-of-turn id, or None) is appended to every message, as a reply in the conversation ends with it, so a draft
    that copies a whole reply ends the turn too. ``notice`` hears the one line said when a saved index had to be
    rebuilt (default: logged at INFO, so nothing is printed over the app's screen; :attr:`notices` keeps them).
    ``on_progress`` hears each :class:`~specchat.history.index_progress.IndexProgress` (see the module docstring;
    ``clock`` times its throttle).
    """

    def __init__(
        self,
        db_path: str | Path,
        path: str | Path,
        tokenize: Callable[[str], list[int]],
        *,
        fingerprint: str,
        end_token: int | None = None,
        exclude: Collection[int] = (),
        notice: Callable[[str], None] | None = None,
        on_progress: Callable[[IndexProgress], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db_path = Path(db_path)
        self.path = Path(path)
        self.tokenize = tokenize
        self.fingerprint = fingerprint
        self.end_token = end_token
        self.exclude = frozenset(int(c) for c in exclude)
        self.notice = notice or (lambda line: log.info("%s", line))
        self.on_progress = on_progress
        self._clock = clock
        self._last_report = float("-inf")
        #: what the corpus is doing, in words (for a status line); :attr:`progress` says it in figures
        self.status = "not started"
        self.progress = IndexProgress(LOADING, self.status)
        #: notices said so far (a rebuilt index, an unreadable history)
        self.notices: list[str] = []
        self._index: SuffixIndex | None = None
        self._queue: queue.Queue[int | threading.Event] = queue.Queue()
        self._ready = threading.Event()
        self._dirty = False
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False

    # -- what the drafter sees ------------------------------------------------------------------------
    def index(self) -> SuffixIndex | None:
        """The index once built (None before): :class:`~specchat.engine.suffix_drafter.SuffixDrafter`'s corpus."""
        return self._index

    __call__ = index

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the first build is done (``specchat generate`` drafts from a finished index); False on timeout."""
        return self._ready.wait(timeout)

    def settle(self, timeout: float = 10.0) -> bool:
        """Block until every change heard so far is in the index (tests, and ``generate`` after a save)."""
        if not self.wait(timeout):
            return False
        done = threading.Event()
        self._queue.put(done)  # the thread sets it when it gets there: everything queued before is done
        return done.wait(timeout)

    # -- life cycle -----------------------------------------------------------------------------------
    def start(self) -> HistoryCorpus:
        """Listen for changes and build in the background; returns at once."""
        self._unsubscribe = changes.subscribe(self.db_path, self.changed)
        self._thread = threading.Thread(target=self._run, name="specchat-suffix-corpus", daemon=True)
        self._thread.start()
        return self

    def changed(self, conv_id: int) -> None:
        """A store wrote conversation ``conv_id`` (called on the writer's thread: only queues the id)."""
        if conv_id >= 0:
            self._queue.put(int(conv_id))

    def close(self, save: bool = True) -> None:
        """Stop listening, finish the queued changes, and save the index if it changed. A first build still under
        way stops at its next message and is not saved (it is started again next time): the target, whose tokenizer
        it uses, is closed right after this."""
        if self._closed:
            return
        self._closed = True
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout=60)
        if save and self._dirty and self._index is not None:
            self._save(self._index)

    # -- the thread -----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._index = self._startup()
            self._report_ready(self._index)
        except _Stopped:
            self._report(STOPPED, "stopped before the index was built")
            return
        except Exception as exc:  # noqa: BLE001 - the drafter then drafts from the conversation alone
            self._say(f"the suffix drafter has no history to draft from: {exc}")
            self._report(OFF, "off: the history could not be read")
        finally:
            self._ready.set()
        while True:
            conv_id = self._queue.get()
            if isinstance(conv_id, threading.Event):  # a settle marker: everything before it is done
                conv_id.set()
                continue
            if conv_id == _STOP:
                return
            if self._index is None:
                continue
            try:
                with self._open() as store:
                    messages = store.corpus_messages(conv_id) if store else []
                if self._reconcile(self._index, messages, group=conv_id):
                    self._report_ready(self._index)  # the sidebar's count follows the saved replies
            except _Stopped:
                return
            except Exception as exc:  # noqa: BLE001 - one bad conversation must not stop the corpus
                log.info("suffix corpus: conversation %s not indexed: %s", conv_id, exc)

    def _say(self, line: str) -> None:
        self.notices.append(line)
        for listener in (self.notice, lambda text: index_progress.say(self.db_path, text)):
            try:
                listener(line)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the corpus
                log.exception("suffix corpus: a notice listener failed")

    def _report(self, phase: str, status: str, done: int = 0, total: int = 0, tokens: int = 0) -> None:
        """Keep :attr:`status` and :attr:`progress` in step and tell ``on_progress`` and the watchers."""
        self.status = status
        self.progress = progress = IndexProgress(phase, status, done, total, tokens)
        self._last_report = self._clock()
        if self.on_progress is not None:
            try:
                self.on_progress(progress)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the corpus
                log.exception("suffix corpus: the progress listener failed")
        index_progress.report(self.db_path, progress)

    def _tick(self, done: int, total: int) -> None:
        """``done`` of ``total`` messages tokenised: reported if :data:`PROGRESS_EVERY_S` has passed (and at the
        first and the last, so a build's start and end are always seen)."""
        if done in (0, total) or self._clock() - self._last_report >= PROGRESS_EVERY_S:
            self._report(INDEXING, f"indexing {done:,}/{total:,} messages", done, total)

    def _report_ready(self, index: SuffixIndex) -> None:
        self._report(READY, f"ready: {index.n_tokens:,} tokens of {len(index):,} messages", len(index), len(index),
                     index.n_tokens)

    def _open(self) -> _Reader:
        return _Reader(self.db_path)

    def _startup(self) -> SuffixIndex:
        index: SuffixIndex | None = None
        if self.path.exists():
            self._report(LOADING, "loading the index")
            try:
                index, meta = SuffixIndex.load(self.path)
                if meta.get("fingerprint") != self.fingerprint:
                    raise CorruptIndexError("it was written for another tokenizer")
            except CorruptIndexError as exc:
                self._say(f"the suffix index {self.path} was rebuilt from the history: {exc}")
                index = None
        self._report(LOADING, "reading the history")
        with self._open() as store:
            messages = store.corpus_messages() if store else []
        if index is None:
            wanted = [(cid, mid, text) for cid, mid, text in messages if cid not in self.exclude]
            docs = []
            for done, (cid, mid, text) in enumerate(wanted):
                self._tick(done, len(wanted))
                docs.append(((cid, mid), self._tokens(text), checksum(text)))
            if wanted:
                self._tick(len(wanted), len(wanted))
            index = SuffixIndex.build(docs)
            self._save(index)
            return index
        if self._reconcile(index, messages, group=None, report=True):
            self._save(index)
        return index

    def _tokens(self, text: str) -> list[int]:
        if self._closed and not self._ready.is_set():  # closed during the first build: give it up
            raise _Stopped
        tokens = self.tokenize(text)
        return [*tokens, self.end_token] if self.end_token is not None else tokens

    def _reconcile(
        self, index: SuffixIndex, messages: list[tuple[int, int, str]], *, group: int | None, report: bool = False
    ) -> bool:
        """Make ``index``'s documents (of conversation ``group``, or all) those of ``messages``; True if it changed.
        ``report``: the messages tokenised so far are progress (the start-up reconcile of a loaded index)."""
        want = {(cid, mid): text for cid, mid, text in messages if cid not in self.exclude}
        have = [k for k in index.keys() if group is None or (isinstance(k, tuple) and k[0] == group)]
        changed = False
        broken: set[object] = set()  # conversations that lost or changed a message
        for key in have:
            text = want.get(key)  # type: ignore[call-overload]
            if text is None or index.checksum(key) != checksum(text):
                index.remove(key)
                changed = True
                broken.add(key[0] if isinstance(key, tuple) else key)
        # such a conversation (a reply regenerated, another version chosen) is added again whole, in its order: the
        # index finds the saved reply to a message as the document right after it (SuffixIndex.reply_after), and a
        # new version alone would be added at the corpus's end
        for key in have:
            if isinstance(key, tuple) and key[0] in broken and key in index:
                index.remove(key)
        new = [(key, text) for key, text in want.items() if key not in index]
        for done, (key, text) in enumerate(new):
            if report:
                self._tick(done, len(new))
            index.add(key, self._tokens(text), checksum(text))
            changed = True
        if report and new:
            self._tick(len(new), len(new))
        self._dirty |= changed
        return changed

    def _save(self, index: SuffixIndex) -> None:
        try:
            index.save(self.path, {"fingerprint": self.fingerprint})
            self._dirty = False
        except OSError as exc:
            self._say(f"the suffix index could not be saved to {self.path}: {exc.strerror or exc}; it is rebuilt next time")


class _Reader:
    """The corpus thread's own read connection (None as the value when there is no database yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store: HistoryStore | None = None

    def __enter__(self) -> HistoryStore | None:
        if not self.path.exists():
            return None
        self.store = HistoryStore(self.path, readonly=True)
        return self.store

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()


__all__ = ["SUFFIX_DIR", "HistoryCorpus", "checksum", "index_path"]
