"""A state fuzz for the app: random sequences of what a user does, with invariants checked after every action.

A *sequence* is ``length`` actions drawn by a :class:`random.Random` seeded with the sequence's seed: send
(sometimes with the reply held after its first round by :class:`HeldEngine`, so the following actions land
in the middle of a reply; ``release`` lets it go on), K up/down, speculation, auto-K, ghosts, Markdown, Esc,
regenerate (sometimes held mid-reply too), flipping the last reply's versions (← → in an empty prompt),
edit-last, new chat, the history browser (open, search, choose, reopen a conversation, delete
with its confirmation, close), export, theme, command palette, resize. Keys are pressed as a user does (key
events into the app, :meth:`Fuzz.press`). Several sequences share one app session; :func:`go_home` brings the
app back to the same starting state before each (no dialog or reply, a new chat, the first controls, views,
theme and size, the seeded history), so a sequence replays alone from its seed.

After every action, once the app has settled (:meth:`Fuzz.settle`: the reply finished, or is held), these
must hold:

- no exception: the app is still running and has not recorded one;
- the app answers a key: a probe key (``f19``, a priority binding of :class:`FuzzApp` that only counts) is
  handled once the app has handled what was queued before it (:meth:`Fuzz.sync`), pressed twice an action:
  right after it (a reply may be streaming, a dialog opening) and once the app has settled. With a
  ``key_budget`` (the fake engine's fuzz: 0.5 s) each probe must be answered within it, a key's answer as a
  user feels it, less the time the OS kept the app's thread waiting for a CPU (:func:`run_delay`); without one (the real model, whose rounds hold the engine thread's share of one core) only
  within 30 s, a hang detector. The slowest answer is kept (:attr:`Fuzz.slowest_key`) for the report;
- only the engine thread touched the engine: the threads recorded by :class:`HeldEngine` (every event of a
  turn, detokenize, close) and, for the real engine, by :func:`record_llama_threads` (every llama.cpp C
  function) are the app's one engine thread;
- the SQLite history equals the screen: the messages of the open conversation (role, text, stopped flag, in
  order) are the chat pane's, except the reply still being generated and the messages queued behind it
  (sent during a reply: saved when they are sent, once it ends), and - while a regenerated reply is being
  generated - the version it regenerates, which history keeps until the new one joins it; and when no
  reply is being generated, the engine's conversation is the screen's too.

A failure raises :class:`AssertionError` naming the seed and the actions; ``SPECCHAT_FUZZ_SEED=<seed>
SPECCHAT_FUZZ_SEQUENCES=1`` runs that sequence again (the engine runs in its own thread, so a race may need a
few runs: the finding of seed 89 took about four).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import random
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from textual import events
from textual.binding import Binding
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key

from specchat.engine.events import Event, Step
from specchat.engine.protocol import Message
from specchat.tui import app as app_module
from specchat.tui.app import SpecChatApp
from specchat.tui.screens.history import ConfirmDeleteScreen, HistoryScreen
from specchat.tui.widgets.chat import AssistantMessage, UserMessage
from specchat.tui.widgets.prompt import PromptInput

PROBE_KEY = "f19"


class FuzzApp(SpecChatApp):
    """The app plus a probe key that only counts (to check that the app still answers keys)."""

    CSS_PATH = str(Path(app_module.__file__).with_name(SpecChatApp.CSS_PATH))  # relative to the subclass otherwise
    BINDINGS = [*SpecChatApp.BINDINGS, Binding(PROBE_KEY, "fuzz_probe", "probe", show=False, priority=True)]
    probes = 0

    def action_fuzz_probe(self) -> None:
        self.probes += 1


class HeldEngine:
    """Delegates to a ChatEngine; records the threads that run its work; can hold a reply after its first Step.

    :meth:`hold_next` arms a hold for the next turn: after the turn's first Step the event stream (and so the
    engine, between two rounds) waits until :meth:`release` or a stop request. :attr:`held` is set meanwhile.
    """

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.controls = engine.controls
        self.threads: set[int] = set()
        self.held = threading.Event()
        self._armed = False  # the next turn holds
        self._pending = False  # the turn under way holds after its first Step
        self._release = threading.Semaphore(0)

    @property
    def messages(self) -> list[Message]:
        return self.engine.messages

    def info(self):
        return self.engine.info()

    def send(self, text: str) -> Iterator[Event]:
        return self._wrap(lambda: self.engine.send(text))

    def regenerate(self) -> Iterator[Event]:
        return self._wrap(self.engine.regenerate)

    def select_alternate(self, index: int, at: int | None = None) -> Message:
        return self.engine.select_alternate(index, at)

    def edit_last(self, text: str) -> Iterator[Event]:
        return self._wrap(lambda: self.engine.edit_last(text))

    def reset(self, system_prompt: str | None = None) -> None:
        self.engine.reset(system_prompt)

    def load(self, messages: list[Message]) -> None:
        self.engine.load(messages)

    def detokenize_pieces(self, tokens):
        self.threads.add(threading.get_ident())
        return self.engine.detokenize_pieces(tokens)

    def close(self) -> None:
        self.threads.add(threading.get_ident())
        self.engine.close()

    # -- holds ---------------------------------------------------------------------------------------
    def hold_next(self) -> None:
        self._armed = True

    def release(self) -> None:
        """Let a held reply go on, or cancel the hold of a reply that has not reached it yet."""
        self._pending = False
        if self.held.is_set():
            self._release.release()

    def _wrap(self, start) -> Iterator[Event]:
        self.threads.add(threading.get_ident())
        self._pending, self._armed = self._armed, False
        events = start()  # as the engine's own methods: the conversation changes when the turn starts
        return self._events(events)

    def _events(self, events: Iterator[Event]) -> Iterator[Event]:
        for event in events:
            self.threads.add(threading.get_ident())
            yield event
            if self._pending and isinstance(event, Step):
                self._pending = False
                self.held.set()
                try:
                    while not self._release.acquire(timeout=0.01):
                        if self.controls.stop_requested:
                            break
                finally:
                    self.held.clear()


def run_delay() -> float:
    """Seconds this thread (the app's event loop: the test runs on it) has spent runnable but waiting for a CPU,
    from ``/proc/thread-self/schedstat`` (0.0 where there is none). A key's answer is timed without it: on a
    core shared with other work (the tests run niced beside benchmarks) the OS may hold the whole app off the
    CPU, which says nothing of the app; time the app spends working, or blocked (on a lock, the GIL, the engine
    thread), still counts."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class CollectorTime:
    """The time the cyclic garbage collector's passes took (``gc.callbacks``), in seconds, while installed.

    A key's answer is timed without it too: in a test process the collector walks every object of the suite
    so far (earlier sessions' apps, pytest's own), which the app's start-up freeze (:mod:`specchat.tui.heap`,
    once per process) does not cover; a full pass there took ~0.5 s late in a run. The longest pass is kept
    (:attr:`longest`) and reported beside the keys' answers."""

    def __init__(self) -> None:
        self.total = 0.0
        self.longest = 0.0
        self._start = 0.0

    def __call__(self, phase: str, _info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            took = time.perf_counter() - self._start
            self.total += took
            self.longest = max(self.longest, took)

    def __enter__(self) -> CollectorTime:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def record_llama_threads(monkeypatch) -> set[int]:
    """Wrap every llama.cpp C function (``llama_*`` of ``llama_cpp`` and ``llama_cpp.llama_cpp``) to record the
    calling thread; returns the set of thread idents (filled as the app runs)."""
    import llama_cpp
    from llama_cpp import llama_cpp as low

    threads: set[int] = set()
    for name in dir(low):
        fn = getattr(low, name)
        if not name.startswith("llama_") or not isinstance(fn, ctypes._CFuncPtr):
            continue

        def wrapper(*args, _fn=fn, **kwargs):
            threads.add(threading.get_ident())
            return _fn(*args, **kwargs)

        monkeypatch.setattr(low, name, wrapper)
        if getattr(llama_cpp, name, None) is fn:
            monkeypatch.setattr(llama_cpp, name, wrapper)
    return threads


#: the fake engine's replies in a fuzz: long enough that a hold after the first round is mid-reply
FUZZ_REPLIES = [
    "Speculative decoding: a cheap drafter guesses the next tokens and the target checks them in one batch.",
    "One two three four five six seven eight nine ten eleven twelve.",
    "Short, but more than one round.",
]

WORDS = ("hello", "why", "is", "the", "sky", "blue", "merge", "count", "x [/bold] y", "[red]", "ok", "Straße", "\u00e9t\u00e9")


class Fuzz:
    """One sequence: ``run()`` drives the app through ``length`` random actions, checking after each."""

    WEIGHTS = {
        "send": 8, "send_held": 4, "release": 3, "k_up": 2, "k_down": 2, "toggle_speculation": 2, "toggle_auto_k": 2,
        "toggle_ghosts": 2, "toggle_markdown": 3, "escape": 3, "regenerate": 3, "regenerate_held": 2, "flip": 3,
        "edit_last": 3, "new_chat": 2,
        "history_open": 3, "history_search": 2, "history_move": 2, "history_enter": 3, "history_delete": 2,
        "history_close": 2, "export": 2, "theme": 1, "palette": 1, "resize": 2, "choose": 2,
    }

    def __init__(
        self,
        pilot,
        engine: HeldEngine,
        store,
        seed: int,
        *,
        llama_threads: set[int] | None = None,
        settle_polls: int = 20_000,
        key_budget: float | None = None,
    ) -> None:
        self.pilot = pilot
        self.app: FuzzApp = pilot.app
        self.engine = engine
        self.store = store
        self.seed = seed
        self.rng = random.Random(seed)
        self.log: list[str] = []
        self.llama_threads = llama_threads
        self.settle_polls = settle_polls
        self.key_budget = key_budget
        self.slowest_key = 0.0  # the longest a probe key waited for its answer, in seconds
        self.collector: CollectorTime | None = None  # the collector's passes, left out of a key's answer
        self.engine_thread: int | None = None
        self.saved_reply: Message | None = None  # see seed_history
        #: the turn id of a regeneration and the reply it regenerates (history keeps that reply until the new
        #: version joins it, i.e. while that turn is the one being generated)
        self.regenerating: tuple[int, tuple[str, str, bool]] | None = None
        names = list(self.WEIGHTS)
        self._names, self._weights = names, [self.WEIGHTS[n] for n in names]

    # -- the loop --------------------------------------------------------------------------------------
    async def run(self, length: int) -> None:
        self.engine_thread = await self.app.host.call(threading.get_ident)
        await self.settle()
        self.check()
        for _ in range(length):
            name = self.rng.choices(self._names, self._weights)[0]
            detail = await getattr(self, "do_" + name)()
            self.log.append(name + (f"({detail})" if detail else ""))
            await self.probe()  # mid-action: a reply may be streaming
            await self.settle()
            self.check()
            await self.probe()
        # end: let a held reply go, and check once more with everything finished
        self.engine.release()
        await self.settle()
        self.check()

    def failure(self, exc: BaseException) -> AssertionError:
        steps = "\n  ".join(f"{i + 1}. {a}" for i, a in enumerate(self.log))
        return AssertionError(
            f"fuzz sequence failed: seed {self.seed} (replay: SPECCHAT_FUZZ_SEED={self.seed} SPECCHAT_FUZZ_SEQUENCES=1)"
            f"\n  {steps}\n{type(exc).__name__}: {exc}"
        )

    # -- waiting and checking ----------------------------------------------------------------------------
    def _busy(self) -> bool:
        return any(w.is_running for w in self.app.workers if w.group in ("generation", "detokenize", "load"))

    async def sync(self, rounds: int = 2) -> None:
        """Let the app handle what is queued: the app, its screen and the focused widget each empty their queue,
        ``rounds`` times (a key goes from the app to the screen to the focused widget, which may post more).

        As Pilot's ``_wait_for_screen`` (a callback queued behind each node's messages), but over the nodes a key
        and the engine's messages go through rather than every widget: ~5x faster a sequence here.
        """
        for _ in range(rounds):
            nodes = [self.app, self.app.chat_screen]  # the chat screen gets the engine's messages, even under a dialog
            try:
                if self.app.screen is not self.app.chat_screen:
                    nodes.append(self.app.screen)
            except Exception:  # no screen: the app is closing
                pass
            if self.app.focused is not None:
                nodes.append(self.app.focused)
            done = asyncio.Event()
            pending = 0

            def one_done() -> None:
                nonlocal pending
                pending -= 1
                if pending == 0:
                    done.set()

            for node in nodes:
                if node.call_later(one_done):
                    pending += 1
            if pending:
                waiter = asyncio.ensure_future(done.wait())
                crashed = asyncio.ensure_future(self.app._exception_event.wait())
                finished, unfinished = await asyncio.wait({waiter, crashed}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
                for task in unfinished:
                    task.cancel()
                if not finished:
                    raise AssertionError("the app did not handle its queued messages within 30 s (a hang?)")
            await asyncio.sleep(0)

    async def settle(self) -> None:
        """Wait until the reply has finished (and its messages are handled) or is held mid-way."""
        for _ in range(self.settle_polls):
            await self.sync(1)
            if self.app.generating and self.engine.held.is_set() and not self.engine.controls.stop_requested:
                await self.sync()
                return
            if not self.app.generating and not self._busy():
                await self.sync()
                if not self.app.generating and not self._busy():
                    return
            await asyncio.sleep(0.001)  # the engine thread is working: give it the CPU
        raise AssertionError(f"the app did not settle after {self.settle_polls} polls (a hang?)")

    def screen_messages(self) -> list[tuple[str, str, bool]]:
        out = []
        for widget in self.app.chat_screen.chat.children:
            if isinstance(widget, UserMessage):
                if not widget.has_class("queued"):  # sent during a reply: saved once it is sent, after the reply
                    out.append(("user", widget.text, False))
            elif isinstance(widget, AssistantMessage) and widget is not self.app.chat_screen._current:
                out.append(("assistant", widget.reply_text, widget.stopped))
        return out

    def check(self) -> None:
        app = self.app
        assert app._exception is None, f"the app raised {app._exception!r}"
        assert app.is_running, "the app is not running"
        # the engine: only its thread
        others = self.engine.threads - {self.engine_thread}
        assert not others, f"engine work ran on other threads than the engine thread: {others}"
        if self.llama_threads is not None:
            others = self.llama_threads - {self.engine_thread}
            assert not others, f"llama.cpp was called from other threads than the engine thread: {others}"
        # history == screen (the reply being generated aside); engine == screen when idle
        shown = self.screen_messages()
        if app.chat_screen.recorder.conversation_id is None:
            saved: list[tuple[str, str, bool]] = []
        else:
            _, messages = self.store.load(app.chat_screen.recorder.conversation_id)
            saved = [(m.role, m.content, m.stopped) for m in messages if m.role != "system"]
        regenerating = self.regenerating
        if regenerating is not None and app.generating and app.host.turn_id == regenerating[0]:
            if app.chat_screen.recorder.conversation_id is not None:
                shown = [*shown, regenerating[1]]
        else:
            self.regenerating = None
        assert saved == shown, f"history {saved} != screen {shown}"
        if not app.generating:
            engine = [(m.role, m.content, m.stopped) for m in self.engine.messages if m.role != "system"]
            assert engine == shown, f"engine {engine} != screen {shown}"

    async def probe(self) -> None:
        before = self.app.probes
        collector = self.collector
        start, queued, collected = time.perf_counter(), run_delay(), collector.total if collector else 0.0
        await self.press(PROBE_KEY)
        took = time.perf_counter() - start - (run_delay() - queued)
        if collector is not None:
            took -= collector.total - collected
        assert self.app.probes == before + 1, "the app did not answer the probe key"
        self.slowest_key = max(self.slowest_key, took)
        if self.key_budget is not None:
            assert took <= self.key_budget, (
                f"the app answered a key after {took * 1000:.0f} ms (budget {self.key_budget * 1000:.0f} ms)"
            )

    # -- helpers -----------------------------------------------------------------------------------------
    @property
    def main(self) -> bool:
        return len(self.app.screen_stack) == 1

    def text(self) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 4)))

    async def press(self, *keys: str) -> None:
        """Press keys as Pilot does, but wait for the app to handle each (:meth:`sync`) instead of for the CPU
        to go idle (Pilot's ``wait_for_idle`` takes >= 40 ms a key: too slow for hundreds of sequences)."""
        for key in keys:
            if len(key) == 1 and not key.isalnum():
                key = _character_to_key(key)
            try:
                char = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
            except KeyError:
                char = key if len(key) == 1 else None
            event = events.Key(key, char)
            event.set_sender(self.app)
            self.app.post_message(event)
            await self.sync()

    async def type_into_prompt(self, text: str) -> None:
        prompt = self.app.query_one(PromptInput)
        prompt.focus()
        await self.sync()
        prompt.set_text(text)

    # -- actions (each returns a detail for the log, or None) ----------------------------------------------
    async def do_send(self, held: bool = False) -> str:
        text = self.text()
        if held:
            self.engine.hold_next()
        if self.main:
            await self.type_into_prompt(text)
            await self.press("enter")
        else:  # a dialog is open: the text goes where the user's typing would go
            await self.press(*text, "enter")
        return repr(text)

    async def do_send_held(self) -> str:
        return await self.do_send(held=True)

    async def do_release(self) -> None:
        self.engine.release()

    async def do_k_up(self) -> None:
        await self.press("f4")

    async def do_k_down(self) -> None:
        await self.press("f3")

    async def do_toggle_speculation(self) -> None:
        await self.press("f5")

    async def do_toggle_auto_k(self) -> None:
        await self.press("f6")

    async def do_toggle_ghosts(self) -> None:
        await self.press("f7")

    async def do_toggle_markdown(self) -> None:
        await self.press("f8")

    async def do_escape(self) -> None:
        await self.press("escape")

    async def do_regenerate(self, held: bool = False) -> str | None:
        last = self.engine.messages[-1] if self.engine.messages else None
        regenerates = self.main and not self.app.generating and last is not None and last.role == "assistant"
        if held:
            self.engine.hold_next()
        before = self.app.host.turn_id
        await self.press("ctrl+r")
        if regenerates and self.app.host.turn_id != before:
            self.regenerating = (self.app.host.turn_id, ("assistant", last.content, last.stopped))
        return None if regenerates else "nothing to regenerate here"  # a hold stays armed for the next turn

    async def do_regenerate_held(self) -> str | None:
        return await self.do_regenerate(held=True)

    async def do_flip(self) -> str:
        key = self.rng.choice(("left", "right", "alt+p", "alt+n"))
        if self.main:
            await self.type_into_prompt("")
        await self.press(key)
        last = self.engine.messages[-1] if self.engine.messages and not self.app.generating else None
        return f"{key}: " + (f"reply {last.alternate_index + 1}/{len(last.alternates) + 1}" if last else "-")

    async def do_choose(self) -> str:
        """Choose an earlier or later reply (issue 22): the flips that follow flip its versions."""
        key = self.rng.choice(("shift+up", "shift+down", "alt+u", "alt+d"))
        if self.main:
            await self.type_into_prompt("")
        await self.press(key)
        return f"{key}: the reply at {self.app.chat_screen.chat.chosen}"

    async def do_edit_last(self) -> str:
        if not self.main:
            await self.press("up")
            return "not on the main screen: up"
        await self.type_into_prompt("")
        await self.press("up")
        if self.rng.random() < 0.3:
            await self.press("escape")
            return "cancelled"
        extra = " " + self.text()
        await self.press(*extra, "enter")
        return f"+{extra!r}"

    async def do_new_chat(self) -> None:
        await self.press("ctrl+n")

    async def do_history_open(self) -> None:
        await self.press("ctrl+o")

    async def do_history_search(self) -> str:
        text = self.rng.choice(("sky", "merge", "[/bold]", "e", "zzz", ""))
        if isinstance(self.app.screen, HistoryScreen):
            await self.press("ctrl+u", *text)
        return repr(text)

    async def do_history_move(self) -> str:
        key = self.rng.choice(("down", "up", "pagedown", "pageup"))
        await self.press(key)
        return key

    async def do_history_enter(self) -> str:
        if not isinstance(self.app.screen, HistoryScreen):
            await self.press("ctrl+o")
            await self.sync()
        downs = self.rng.randint(0, 3)
        await self.press(*["down"] * downs, "enter")
        return f"down x{downs}"

    async def do_history_delete(self) -> str:
        if not isinstance(self.app.screen, HistoryScreen):
            await self.press("ctrl+o")
            await self.sync()
        await self.press(self.rng.choice(("delete", "ctrl+d")))
        await self.sync()
        confirm = self.rng.random() < 0.6
        if isinstance(self.app.screen, ConfirmDeleteScreen):
            await self.press(*(("tab", "enter") if confirm else ("escape",)))
        return "confirm" if confirm else "cancel"

    async def do_history_close(self) -> None:
        if isinstance(self.app.screen, (HistoryScreen, ConfirmDeleteScreen)):
            await self.press("escape")

    async def do_export(self) -> None:
        await self.press("ctrl+s")

    async def do_theme(self) -> str:
        name = self.rng.choice(sorted(self.app.available_themes))
        if self.main:
            await self.press("ctrl+p", *f"theme {name}")
            await self.sync()
            await self.sync()
            await self.press("enter")
            if len(self.app.screen_stack) > 1 and not isinstance(self.app.screen, (HistoryScreen, ConfirmDeleteScreen)):
                await self.press("escape")
        return name

    async def do_palette(self) -> str:
        words = self.rng.choice(("K = 5", "K = 0", "Drafter: none", "Drafter: ngram", "Temperature = 0.7", "ghost"))
        await self.press("ctrl+p", *words)
        await self.sync()
        await self.sync()
        key = self.rng.choice(("enter", "escape"))
        await self.press(key)
        # leave no palette open (a command may open another list): close palettes, not the user's dialogs
        for _ in range(3):
            if type(self.app.screen).__name__ == "CommandPalette":
                await self.press("escape")
        return f"{words!r} {key}"

    async def do_resize(self) -> str:
        width, height = self.rng.choice(((60, 20), (80, 24), (100, 30), (140, 45), (70, 22)))
        await self.pilot.resize_terminal(width, height)
        return f"{width}x{height}"


HOME_SIZE = (100, 30)


async def go_home(fuzz: Fuzz, initial) -> None:
    """Bring a session back to the state a sequence starts from (so each sequence replays alone from its seed):
    no dialog, no reply, a new chat, the first controls, views, theme and size, and a history of the two seeded
    conversations (ids aside: they are never reused)."""
    app = fuzz.app
    fuzz.engine.release()
    for _ in range(6):
        if len(app.screen_stack) == 1:
            break
        await fuzz.press("escape")
    if app.generating:
        await fuzz.press("escape")
    await fuzz.settle()
    await fuzz.press("ctrl+n")
    await fuzz.settle()
    state, theme = initial
    controls = fuzz.engine.controls
    controls.set_k(state.k)
    controls.set_speculative(state.speculative)
    controls.set_auto_k(state.auto_k)
    controls.set_drafter(state.drafter)
    controls.set_sampling(state.sampling)
    app.chat_screen.controls_changed()
    if not app.chat_screen.show_ghosts:
        app.chat_screen.action_toggle_ghosts()
    if app.chat_screen.markdown_view:
        app.chat_screen.action_toggle_markdown()
    app.theme = theme
    app.chat_screen.prompt.clear()
    inner = getattr(fuzz.engine.engine, "_reply_index", None)
    if inner is not None:  # the fake engine's replies start from the first again
        fuzz.engine.engine._reply_index = 0
    for conv in fuzz.store.list_conversations():
        fuzz.store.delete(conv.id)
    seed_history(fuzz.store, fuzz.saved_reply)
    if app.size != HOME_SIZE:
        await fuzz.pilot.resize_terminal(*HOME_SIZE)
    app.clear_notifications()
    await fuzz.settle()


async def run_sequences(
    make,
    seeds: list[int],
    length: int,
    tmp: Path,
    *,
    per_session: int = 10,
    llama_threads: set[int] | None = None,
    saved_reply: Message | None = None,
    key_budget: float | None = None,
    report: dict | None = None,
) -> int:
    """Run one sequence of ``length`` actions per seed, ``per_session`` sequences per app session (a fresh app,
    engine and history database each session; :func:`go_home` between sequences). ``make(store, directory)``
    returns (app, :class:`HeldEngine`); ``saved_reply`` is a reply of the engine's model to find in the history
    (:func:`seed_history`); ``key_budget``: see :class:`Fuzz`. Returns the number of actions run; ``report``
    (a dict) gets the slowest key answer (``slowest_key``, seconds), the longest collector pass
    (``longest_collection``) and the sequences run."""
    with CollectorTime() as collector:
        actions = await _run_sessions(
            make, seeds, length, tmp, per_session, llama_threads, saved_reply, key_budget, report, collector
        )
    if report is not None:
        report["longest_collection"] = collector.longest
    return actions


async def _run_sessions(make, seeds, length, tmp, per_session, llama_threads, saved_reply, key_budget, report,
                        collector) -> int:
    from specchat.history import HistoryStore

    actions = 0
    for first in range(0, len(seeds), per_session):
        directory = tmp / f"session-{seeds[first]}"
        directory.mkdir()
        store = HistoryStore(directory / "history.sqlite3")
        seed_history(store, saved_reply)
        app, engine = make(store, directory)
        fuzz: Fuzz | None = None
        try:
            async with app.run_test(size=HOME_SIZE) as pilot:
                initial = None
                for seed in seeds[first : first + per_session]:
                    fuzz = Fuzz(pilot, engine, store, seed, llama_threads=llama_threads, key_budget=key_budget)
                    fuzz.collector = collector
                    fuzz.saved_reply = saved_reply
                    try:
                        if initial is None:
                            await fuzz.settle()
                            initial = (engine.controls.snapshot(), app.theme)
                        else:
                            await go_home(fuzz, initial)
                        await fuzz.run(length)
                        actions += len(fuzz.log)
                    except Exception as exc:
                        raise fuzz.failure(exc) from exc
                    finally:
                        if report is not None:
                            report["slowest_key"] = max(report.get("slowest_key", 0.0), fuzz.slowest_key)
                            report["sequences"] = report.get("sequences", 0) + 1
                            if report.get("progress"):  # a long run says how far it got, as it goes
                                print(f"fuzz progress: {report['sequences']} sequences ({actions} actions) held, last "
                                      f"seed {seed}, slowest key {report['slowest_key'] * 1000:.0f} ms", flush=True)
            if app._exception is not None:
                raise fuzz.failure(app._exception) if fuzz else app._exception
        except AssertionError:
            raise
        except Exception as exc:  # the app crashed on the way out (run_test re-raises it)
            if fuzz is None:
                raise
            raise fuzz.failure(exc) from exc
        finally:
            store.close()
    return actions


def seed_history(store, saved_reply: Message | None = None) -> None:
    """Saved conversations, so that the browser has something to open from the first action: two with replies
    of another model (no token ids), and one with ``saved_reply`` (with its ids: reopening it has the engine
    split it into its tokens, on the engine thread)."""
    for question, answer in (("why is the sky blue", "Rayleigh scattering."), ("x [/bold] y", "[red]z")):
        conv = store.create_conversation(target="saved-target", draft="ngram")
        store.append_message(conv, Message("user", question))
        store.append_message(conv, Message("assistant", answer))
    if saved_reply is not None:
        conv = store.create_conversation(target="this-target", draft="ngram")
        store.append_message(conv, Message("user", "a saved chat of this model"))
        store.append_message(conv, saved_reply)
