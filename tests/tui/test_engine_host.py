"""EngineHost on its own (no Textual) with the real engine: the tiny generated GGUF loaded the way
``specchat`` loads it. Every engine call it makes runs on its one engine thread; its state follows
load -> turn -> detokenize -> shutdown; a shutdown during a load waits for the load and closes what it loaded.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from specchat.commands.tui import make_factory
from specchat.config import Settings
from specchat.engine.events import Turn
from specchat.tui.engine_host import EngineHost


class Recorder:
    """Wraps a real engine and records the thread of every call made to it."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.controls = engine.controls
        self.threads: dict[str, set[int]] = {}
        self.closed = False

    def _seen(self, what: str) -> None:
        self.threads.setdefault(what, set()).add(threading.get_ident())

    @property
    def messages(self):
        return self.engine.messages

    def send(self, text):
        self._seen("send")
        for event in self.engine.send(text):
            self._seen("send")
            yield event

    def load(self, messages):
        self.engine.load(messages)

    def detokenize_pieces(self, tokens):
        self._seen("detokenize_pieces")
        return self.engine.detokenize_pieces(tokens)

    def close(self):
        self._seen("close")
        self.closed = True
        self.engine.close()


def tiny_settings(tmp_path: Path, target: Path) -> Settings:
    return Settings(target=str(target), draft="ngram", k=3, auto_k=False, n_predict=12, n_ctx=512, threads=1,
                    data_dir=tmp_path)


async def run_host(tmp_path: Path, target: Path) -> tuple[EngineHost, Recorder, dict]:
    tasks: list[asyncio.Future] = []
    host = EngineHost(lambda work, **kw: tasks.append(asyncio.ensure_future(work)))
    real_factory = make_factory(tiny_settings(tmp_path, target))
    seen: dict = {"progress": [], "factory": None}

    def factory(progress):
        seen["factory"] = threading.get_ident()
        return Recorder(real_factory(progress))

    async def drain() -> None:
        while tasks:
            await tasks.pop(0)

    host.load(
        factory,
        progress=lambda fraction, what: seen["progress"].append((fraction, what)),
        loaded=lambda engine, seconds: seen.update(engine=engine, seconds=seconds),
        failed=lambda message: seen.update(failed=message),
    )
    assert host.loading and host.engine is None
    await drain()
    assert not host.loading and "failed" not in seen
    engine: Recorder = seen["engine"]
    assert host.engine is None  # loaded, but not in use until the app takes it
    assert host.accept(engine) and host.engine is engine

    turns: list[Turn] = []

    def pump(turn_id: int) -> None:
        turns.extend(e for e in engine.send("Hello there") if isinstance(e, Turn))

    turn_id = host.start_turn(pump)
    assert host.generating
    await drain()
    assert not host.turn_running and host.generating  # the turn's end is not handled yet
    assert not host.finish_turn(turn_id - 1) and host.finish_turn(turn_id) and not host.generating
    assert turns and turns[0].tokens

    host.detokenize([("reply", list(turns[0].tokens))], lambda results: seen.update(pieces=results))
    await drain()
    ((key, pieces),) = seen["pieces"]
    assert key == "reply" and len(pieces) == len(turns[0].tokens) and "".join(pieces) == turns[0].text

    saved: list[bool] = []
    await host.shutdown(save_stopped=lambda: saved.append(True))
    assert engine.closed and host.closing and saved == []  # no turn was left unhandled
    return host, engine, seen


def test_every_engine_call_runs_on_the_one_engine_thread(tmp_path, tiny_target):
    host, engine, seen = asyncio.run(run_host(tmp_path, tiny_target))
    threads = {seen["factory"]} | set().union(*engine.threads.values())
    assert set(engine.threads) == {"send", "detokenize_pieces", "close"}
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert seen["progress"] and seen["progress"][-1][0] == 1.0
    assert not any("ready" in what for _, what in seen["progress"])  # "ready" is the app's word, once it can send


def test_shutdown_during_a_load_waits_for_it_and_closes_what_it_loaded(tmp_path, tiny_target):
    async def main():
        tasks: list[asyncio.Future] = []
        host = EngineHost(lambda work, **kw: tasks.append(asyncio.ensure_future(work)))
        real_factory = make_factory(tiny_settings(tmp_path, tiny_target))
        started, release = threading.Event(), threading.Event()
        box: dict = {}

        def factory(progress):
            started.set()
            release.wait(60)
            box["engine"] = Recorder(real_factory(progress))
            return box["engine"]

        host.load(factory, progress=lambda f, w: None, loaded=lambda e, s: box.update(loaded=e), failed=box.update)
        assert await asyncio.to_thread(started.wait, 60)
        shutdown = asyncio.ensure_future(host.shutdown(save_stopped=lambda: None))
        await asyncio.sleep(0)
        assert host.closing and not shutdown.done()
        release.set()
        await shutdown
        for task in tasks:
            await task
        assert box["loaded"] is box["engine"] and box["engine"].closed
        assert not host.accept(box["engine"]) and host.engine is None  # too late: the app is closing

    asyncio.run(main())


def test_a_turn_whose_worker_is_cancelled_before_it_runs_does_not_hang_the_shutdown():
    """Textual cancels the app's workers as it exits: a turn's worker cancelled while its work waited behind other
    engine work (here: a job holding the engine thread) must not leave :meth:`EngineHost.shutdown` waiting for a
    turn that never ran (the state fuzz hung so on 2026-12-02: the work was submitted only when the worker's
    coroutine first ran, and a cancelled worker never ran it). Fails with ``_run`` submitting from the coroutine."""

    async def main() -> None:
        tasks: list[asyncio.Future] = []
        host = EngineHost(lambda work, **kw: tasks.append(asyncio.ensure_future(work)))
        gate = threading.Event()
        host.submit(gate.wait, name="hold", description="hold the engine thread")
        ran: list[int] = []
        host.start_turn(ran.append)
        load_seen: list[str] = []
        host.load(lambda progress: load_seen.append("factory"), progress=lambda *a: None,
                  loaded=lambda *a: load_seen.append("loaded"), failed=load_seen.append)
        assert host.turn_running and host.loading
        for task in tasks[1:]:
            task.cancel()  # before any of them ran a step, as at the app's exit
        await asyncio.sleep(0)
        gate.set()
        saved: list[bool] = []
        # a guard against the hang this test is about, not a timing: the shutdown has nothing slow to wait for
        try:
            await asyncio.wait_for(host.shutdown(save_stopped=lambda: saved.append(True)), timeout=30)
        except TimeoutError:
            host._turn_done.set(), host._load_done.set()  # let the stuck wait's thread end, so the test can fail
            raise AssertionError("the shutdown waited for a turn (or load) whose work never ran") from None
        assert not host.turn_running and not host.loading
        assert saved == [True]  # the turn was started and its end never handled: saved as stopped
        assert ran in ([], [1]) and load_seen in ([], ["factory", "loaded"])  # dropped while queued, or run

    asyncio.run(main())


def test_a_turn_started_after_the_shutdown_runs_nothing_and_is_not_waited_for():
    async def main() -> None:
        host = EngineHost(lambda work, **kw: asyncio.ensure_future(work))
        await host.shutdown(save_stopped=lambda: None)
        ran: list[int] = []
        host.start_turn(ran.append)  # e.g. an Enter handled after the quit: the engine thread is gone
        assert not host.turn_running and ran == []

    asyncio.run(main())
