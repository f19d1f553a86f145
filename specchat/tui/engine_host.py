"""The app's engine host: the one thread every engine call runs on, and the engine's life on it.

:class:`EngineHost` owns the engine thread and the engine: loading it (after the first frame, so the window
appears first), each turn, splitting saved replies into tokens, stopping and closing, and the state those
share between the UI thread and the engine thread (is a load or a turn running, which engine is in use,
messages waiting for an engine, is the app closing). The app (:class:`specchat.tui.app.SpecChatApp`: loading,
switching, quitting) and its chat screen (:class:`specchat.tui.screens.chat.ChatScreen`: the turns) talk to
the engine only through this class and the engine's thread-safe :class:`~specchat.engine.controls.Controls`.

Why one dedicated thread, not ``run_worker(thread=True)`` (a thread of the event loop's shared pool):
llama.cpp is built with OpenMP, and libgomp keeps one pool of compute threads per *calling* thread. Once
``llama_decode`` has been called from two live threads, both pools exist and every decode slows down
(measured here on the bundled SmolLM2, 2 threads on 2 cores: ~110 tok/s from one thread, ~62 tok/s once a
second thread had decoded). A pool thread is whichever is idle, so over a session the turns would hop
between threads. One dedicated thread keeps one OpenMP pool: loading, every turn, closing.

Plain Python (no Textual import): work is handed to the app as a coroutine through ``spawn`` (the app runs
it as a Textual worker, so quitting and tests can wait for it), and results come back through the
callbacks each call takes, which run on the engine thread and post the app's messages.

"Ready" means the app can send: :meth:`load` calls ``loaded`` only once the factory has returned an engine,
and the engine is in use once the app has taken it (:meth:`accept`), which is when the app says "ready".
The loaders' progress texts say what they did ("models loaded", "connected"): their last one said "ready"
while the app had no engine yet, and a message sent on it was refused.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol, TypeVar

from specchat.engine.protocol import ChatEngine, Message
from specchat.errors import UserError, describe_exception

T = TypeVar("T")
R = TypeVar("R")

Progress = Callable[[float, str], None]
EngineFactory = Callable[[Progress], ChatEngine]


class Spawn(Protocol):
    """Runs a coroutine as a UI worker (``App.run_worker``), named for the worker list."""

    def __call__(self, work: Coroutine[Any, Any, Any], *, group: str, name: str, description: str) -> None: ...


class EngineHost:
    """The engine thread and the engine's state. See the module docstring.

    Read on the UI thread: :attr:`engine` (the engine in use, or None), :attr:`error` (why none could be
    loaded), :attr:`pending_messages` (a conversation waiting for an engine), :attr:`turn_id` and
    :attr:`generating` (the current turn), :attr:`closing`, :attr:`loading`.
    """

    def __init__(self, spawn: Spawn, clock: Callable[[], float] = time.monotonic) -> None:
        self._spawn = spawn
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specchat-engine")
        self.engine: ChatEngine | None = None
        self.error: str | None = None
        #: the conversation to load into the next engine (opened while loading, or carried over by a switch)
        self.pending_messages: list[Message] | None = None
        self.turn_id = 0
        #: a turn was started and its end not handled yet (on the UI thread)
        self.generating = False
        #: the app is quitting: nothing new starts, late results are not drawn
        self.closing = False
        self._loaded: ChatEngine | None = None  # set on the engine thread before ``loaded`` is called
        self._load_done = threading.Event()
        self._load_done.set()
        self._turn_done = threading.Event()
        self._turn_done.set()
        self._closed = False
        #: what else the engine thread closes at shutdown (e.g. the tour's models), by owner: see :meth:`own`
        self._owned: dict[int, Callable[[], Any]] = {}
        self._owned_lock = threading.Lock()
        self._owned_closed = False

    # -- the thread ------------------------------------------------------------------------------------
    async def call(self, work: Callable[[], R]) -> R:
        """Run ``work`` on the engine thread and return its result."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def start_thread(self) -> None:
        """Create the engine thread now (it inherits the calling thread's priority: see
        :func:`specchat.tui.priority.yield_cpu_to_engine`)."""
        self._executor.submit(lambda: None).result()

    def _run(
        self, work: Callable[[], Any], *, group: str, name: str, description: str,
        dropped: Callable[[], None] | None = None,
    ) -> None:
        """Submit ``work`` to the engine thread now, and have a worker (``spawn``) wait for it.

        Submitted here, not when the worker's coroutine first runs: a worker cancelled before it started (Textual
        cancels the app's workers as it exits) used to leave its work never submitted, so the ``finally`` that
        sets :attr:`_turn_done` / :attr:`_load_done` never ran and :meth:`shutdown` waited for ever (the state
        fuzz hung so, 2026-12-02, AMD EPYC). Now the work runs, or - cancelled while still queued behind other
        engine work - ``dropped()`` runs instead, so whatever waits for its end is told either way."""
        try:
            future = self._executor.submit(work)
        except RuntimeError:  # the engine thread has ended (after shutdown): nothing runs any more
            if dropped is not None:
                dropped()
            return
        if dropped is not None:
            future.add_done_callback(lambda f: dropped() if f.cancelled() else None)

        async def wait() -> Any:
            return await asyncio.wrap_future(future)

        self._spawn(wait(), group=group, name=name, description=description)

    # -- loading ---------------------------------------------------------------------------------------
    @property
    def loading(self) -> bool:
        return not self._load_done.is_set()

    def load(
        self,
        factory: EngineFactory,
        *,
        progress: Progress,
        loaded: Callable[[ChatEngine, float], None],
        failed: Callable[[str], None],
        close_first: ChatEngine | None = None,
    ) -> None:
        """Close ``close_first``, then build an engine with ``factory`` on the engine thread.

        ``progress(fraction, what)`` as the factory reports it; then ``loaded(engine, seconds)`` or
        ``failed(one line: what happened and what to do)``. All three run on the engine thread.
        """
        if self.closing:
            return
        self._load_done.clear()
        self.error = None

        def work() -> None:
            try:
                if close_first is not None:
                    close_first.close()
                start = self._clock()
                try:
                    engine = factory(lambda fraction, what: progress(float(fraction), str(what)))
                except UserError as exc:
                    failed(str(exc))
                    return
                except Exception as exc:  # a bug or an unexpected library error: still a message, not a crash
                    failed(
                        f"could not load the models ({describe_exception(exc)}); check target and draft "
                        f"with 'specchat config show' and 'specchat models list'"
                    )
                    return
                self._loaded = engine
                loaded(engine, self._clock() - start)
            finally:
                self._load_done.set()

        self._run(work, group="load", name="load-engine", description="load the models", dropped=self._load_done.set)

    def accept(self, engine: ChatEngine) -> bool:
        """UI thread, once ``loaded`` has been handled: ``engine`` is the one in use, with the pending
        conversation loaded into it. False while closing (:meth:`shutdown` closes it)."""
        if self.closing:
            return False
        self.engine = engine
        if self.pending_messages is not None:
            engine.load(self.pending_messages)
            self.pending_messages = None
        return True

    def fail(self, message: str) -> None:
        """UI thread: no engine could be loaded, for the reason ``message``."""
        self.error = message

    def unload(self) -> ChatEngine | None:
        """Take the engine out of use before loading another (a model switch); its conversation becomes
        :attr:`pending_messages`. Returns it, to be closed by the next :meth:`load` on the engine thread."""
        old = self.engine
        if old is not None:
            self.pending_messages = list(old.messages)
        self.engine = None
        self._loaded = None
        return old

    # -- turns -----------------------------------------------------------------------------------------
    def start_turn(self, pump: Callable[[int], Any]) -> int:
        """Run ``pump(turn_id)`` (the turn: :func:`specchat.tui.generation.pump_turn`) on the engine thread;
        :attr:`generating` until :meth:`finish_turn`. Returns the new turn's id."""
        self.turn_id += 1
        turn_id = self.turn_id
        if self.engine is not None:  # a stop pressed from now on is this turn's (Controls.begin_turn)
            self.engine.controls.begin_turn()
        self.generating = True
        self._turn_done.clear()
        self._run(
            partial(self._turn, turn_id, pump), group="generation", name=f"turn-{turn_id}",
            description="generate a reply", dropped=self._turn_done.set,
        )
        return turn_id

    def _turn(self, turn_id: int, pump: Callable[[int], Any]) -> None:
        try:
            pump(turn_id)
        finally:
            self._turn_done.set()

    @property
    def turn_running(self) -> bool:
        """The engine thread is still inside a turn (its end may not be handled yet: see :attr:`generating`)."""
        return not self._turn_done.is_set()

    def finish_turn(self, turn_id: int) -> bool:
        """UI thread: the end of turn ``turn_id`` is being handled. True if it is the current turn (which then
        is over); False for a turn that was replaced."""
        if turn_id != self.turn_id:
            return False
        self.generating = False
        return True

    def stop_turn_and_wait(self, timeout: float) -> bool:
        """Stop the current turn and wait (at most ``timeout`` s) for the engine thread to end it, blocking the
        caller. True if a turn was running (for the SIGHUP path: see the app's module docstring)."""
        engine = self.engine or self._loaded
        if engine is None or not self.generating:
            return False
        engine.controls.request_stop()
        self._turn_done.wait(timeout=timeout)
        return True

    def submit(self, work: Callable[[], Any], *, name: str, description: str) -> None:
        """Run ``work`` on the engine thread, not as a turn: nothing waits for its end but quitting (e.g. the
        tour closing the models it loaded). Not once the app is closing (shutdown closes what it knows)."""
        if not self.closing:
            self._run(work, group="engine-work", name=name, description=description)

    def own(self, key: int, close: Callable[[], Any]) -> None:
        """Have :meth:`shutdown` run ``close()`` on the engine thread, after the engine's own close, unless
        :meth:`disown` (``key``) came first: what a screen loaded beside the engine (the tour's models) is
        closed when the app quits with it open, not left to the process's exit. Any thread."""
        with self._owned_lock:
            self._owned[key] = close

    def disown(self, key: int) -> None:
        with self._owned_lock:
            self._owned.pop(key, None)

    def _close_owned(self) -> None:
        """On the engine thread, at shutdown: each owned close, one failing not keeping the others from running."""
        with self._owned_lock:
            closers, self._owned = list(self._owned.values()), {}
        for close in closers:
            try:
                close()
            except Exception:  # closing at exit: nothing to report it to, and the rest must still close
                pass

    # -- saved replies ---------------------------------------------------------------------------------
    def detokenize(self, jobs: list[tuple[T, list[int]]], done: Callable[[list[tuple[T, list[str]]]], None]) -> None:
        """Split each job's token ids into their pieces' text on the engine thread
        (:meth:`ChatEngine.detokenize_pieces`); ``done(results)`` there. Ids the engine's vocabulary does not
        have (another model wrote that reply) leave that job out."""
        engine = self.engine
        if engine is None or self.closing or not jobs:
            return
        self._run(
            partial(self._detokenize, engine, jobs, done), group="detokenize", name="detokenize-saved",
            description="split saved replies into tokens",
        )

    @staticmethod
    def _detokenize(
        engine: ChatEngine, jobs: list[tuple[T, list[int]]], done: Callable[[list[tuple[T, list[str]]]], None]
    ) -> None:
        results: list[tuple[T, list[str]]] = []
        for key, tokens in jobs:
            try:
                results.append((key, engine.detokenize_pieces(tokens)))
            except ValueError:  # ids of another model's vocabulary: that reply stays uncoloured
                continue
        done(results)

    # -- closing ---------------------------------------------------------------------------------------
    async def shutdown(self, save_stopped: Callable[[], None]) -> None:
        """Stop the turn, wait for the load and the turn to end, close the engine on its thread, end the
        thread. ``save_stopped()`` runs (on the UI thread) if a turn was stopped whose end was not handled yet:
        the app may exit before it is. Idempotent."""
        self.closing = True
        engine = self.engine or self._loaded
        if engine is not None:
            engine.controls.request_stop()
        await asyncio.to_thread(self._turn_done.wait)
        if self.generating:
            save_stopped()  # if the turn's end is still handled later, its save changes nothing
        await asyncio.to_thread(self._load_done.wait)
        engine = self.engine or self._loaded
        if engine is not None and not self._closed:
            self._closed = True
            await self.call(engine.close)
        if not self._owned_closed:
            self._owned_closed = True
            await self.call(self._close_owned)
        await asyncio.to_thread(self._executor.shutdown, True)  # the engine thread ends with the app
