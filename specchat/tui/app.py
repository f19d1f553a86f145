"""The chat window: its widgets, its actions (keys, palette) and the history glue.

The app keeps the widgets, the actions and the history glue. It never imports llama_cpp or the engine's
model code: it receives an *engine factory* (``Callable[[progress], ChatEngine]``), and its
:class:`~specchat.tui.engine_host.EngineHost` runs it on the engine thread after the first frame, so the
window appears before the models load; every turn runs on that thread too (:mod:`specchat.tui.generation`:
batched pieces and coalescing stats messages, never a per-token ``call_from_thread``). Stop and quit go
through ``engine.controls.request_stop()``; quitting waits for the host so no thread outlives the app.

Signals (``stop_signals=True``, as ``specchat`` runs it): SIGINT, SIGTERM and SIGHUP (the terminal window was
closed) quit the way ctrl+q does: the reply stops, the partial reply is saved marked stopped, the engine
closes, and the exit code is 128 + the signal number. They are handled by the event loop
(``loop.add_signal_handler``), so the quit starts from an ordinary loop callback, never from an exception
raised at an arbitrary point inside asyncio or Textual. SIGHUP usually means the terminal is gone (the window
was closed: the kernel hangs up the tty and sends SIGHUP then SIGCONT), and then Textual cannot quit: every
write to the tty fails with EIO, its SIGCONT handler restarts application mode on the dead tty and its driver
blocks for ever on a full output queue (reproduced in a pty: the process never ended). So on SIGHUP the reply
is stopped and saved first, synchronously in the signal's loop callback (:meth:`_stop_and_save_now`), then the
app quits as usual, and a watchdog ends the process with ``os._exit(129)`` if that has not happened within
:data:`HANGUP_EXIT_S`: there is nothing to restore on a dead terminal, and history is durable at every commit
(see :mod:`specchat.history`). The tty cannot tell reliably in the signal handler whether it is dead yet (the
kernel finishes the hang-up asynchronously: ``tcgetattr`` still succeeded there in the pty tests).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Footer, Static

from specchat.config import Settings
from specchat.engine.controls import ControlState
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.protocol import ChatEngine, Message
from specchat.errors import UserError, describe_exception
from specchat.history import HistoryStore, default_title, write_export
from specchat.models.registry import resolve_pair
from specchat.tui.commands import SpecChatCommands
from specchat.tui.engine_host import EngineFactory, EngineHost
from specchat.tui.generation import pump_turn
from specchat.tui.heap import freeze_startup_heap
from specchat.tui.keys import APP_KEYS, PROMPT_KEYS, app_bindings, resolve_keymap
from specchat.tui.messages import (
    DraftingOff,
    EngineFailed,
    EngineReady,
    LoadProgress,
    PiecesBatch,
    SavedRepliesDetokenized,
    StatsUpdated,
    TurnFinished,
)
from specchat.tui.sanitize import sanitize, sanitize_line
from specchat.tui.sanitize import text as inert
from specchat.tui.screens.help import HelpScreen
from specchat.tui.screens.history import HistoryScreen
from specchat.tui.screens.race import RaceScreen
from specchat.tui.screens.tour import FIXED_K, TourOptions, TourScreen
from specchat.tui.stats import LiveStats
from specchat.tui.themes import DEFAULT_THEME, TOKEN_DEFAULTS, load_themes, theme_dirs
from specchat.tui.widgets.chat import AssistantMessage, ChatLog, ChatNotice, UserMessage
from specchat.tui.widgets.prompt import PromptInput
from specchat.tui.state import UiState, save_state
from specchat.tui.widgets.sidebar import Sidebar
from specchat.tui.widgets.token_view import GHOST, kind_style

#: niceness of the UI thread once the engine thread exists, if llama.cpp takes every core (Linux only;
#: see SpecChatApp.ui_needs_to_yield)
UI_NICE = 19
#: after SIGHUP the process ends this many seconds later at the latest (a dead terminal blocks Textual's exit)
HANGUP_EXIT_S = 10.0

#: below this terminal width the sidebar (36 columns) hides by itself and a one-line status bar replaces it:
#: at 100 columns the chat keeps 64 (a reply box of ~60), at 80 it would keep 44 and at 60 only ~22
SIDEBAR_MIN_WIDTH = 100

APP_ACTIONS = {spec.action for spec in APP_KEYS}


@dataclass
class EditInProgress:
    """The last user message is back in the prompt for editing (see :meth:`SpecChatApp.start_edit`)."""

    saved_prompt: str  # what the prompt held before; Esc puts it back
    message: UserMessage | None  # the chat pane's copy of the message being edited (highlighted meanwhile)


def legend_content(show_ghosts: bool) -> Content:
    parts: list[Content] = []
    for kind in ("accepted", "corrected", "bonus", "plain"):
        parts.append(Content.styled(f"\u25a0 {kind}", kind_style(kind)))
        parts.append(Content("  "))
    ghost = Content.styled("ghost", kind_style(GHOST))
    parts.append(ghost)
    parts.append(Content(" = refused draft" + ("" if show_ghosts else " (hidden)")))
    return Content.assemble(*parts)


class SpecChatApp(App[None]):
    """The chat window. See the module docstring."""

    CSS_PATH = "app.tcss"
    TITLE = "specchat"
    BINDINGS = app_bindings()
    COMMANDS = App.COMMANDS | {SpecChatCommands}
    AUTO_FOCUS = "#prompt"

    def __init__(
        self,
        engine_factory: EngineFactory,
        settings: Settings,
        history_store: HistoryStore | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        make_factory: Callable[[Settings], EngineFactory] | None = None,
        user_theme_dir: Path | None = None,
        export_dir: Path | None = None,
        history_note: str | None = None,
        ui_state: UiState | None = None,
        state_path: Path | None = None,
        state_note: str | None = None,
        stop_signals: bool = False,
        tour: TourOptions | None = None,
    ) -> None:
        super().__init__()
        self.stop_signals = stop_signals
        #: what the tour needs (the demo files' deriver, its reply length; None: no tour in this session)
        self.tour = tour
        self._signals_added: list[int] = []
        self._exit_code = 0
        self._running_in_terminal = False
        self._hangup_watchdog: threading.Timer | None = None
        self.engine_factory = engine_factory
        self.settings = settings
        self.history_store = history_store
        self.make_factory = make_factory
        self.user_theme_dir = user_theme_dir
        #: ``<data dir>/exports`` unless given (never the current directory: it is wherever the app started)
        self.export_dir = export_dir or settings.exports_dir()
        self.history_note = history_note
        #: remembered between runs (specchat.tui.state); written to ``state_path`` when it changes
        self.ui_state = ui_state or UiState()
        self.state_path = state_path
        self._state_note = state_note
        self._state_write_failed = False
        self._clock = clock
        #: the engine thread, the engine and their state (loading, turns, closing)
        self.host = EngineHost(self._spawn, clock)
        self.conversation_id: int | None = None
        self.show_ghosts = True
        self.markdown_view = False
        self.effective_keys: dict[str, str] = {s.id: s.keys for s in (*APP_KEYS, *PROMPT_KEYS)}
        self.theme_errors: list[str] = []
        self.keymap_problems: list[str] = []
        self._stats = LiveStats()
        self._current: AssistantMessage | None = None
        self._conversation_deleted = False  # the chat on screen was deleted from history: see _on_conversation_deleted
        self.editing: EditInProgress | None = None
        self._after_turn: list[Callable[[], None]] = []
        self._queued: list[UserMessage] = []  # messages sent during a reply, in order (see submit_prompt)

    def _spawn(self, work: Any, *, group: str, name: str, description: str) -> None:
        """The host's work runs as a Textual worker (quitting and tests wait for the app's workers)."""
        self.run_worker(work, group=group, name=name, description=description, exit_on_error=False)

    @property
    def engine(self) -> ChatEngine | None:
        """The engine in use (None while loading, or when none could be loaded: :attr:`engine_error`)."""
        return self.host.engine

    @property
    def engine_error(self) -> str | None:
        return self.host.error

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: Any = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every notification is shown as text: ``markup`` is ignored (never parsed) and control characters are
        made visible (:mod:`specchat.sanitize`). Notifications carry file names, titles, model names and error
        messages; a ``[/]`` in one must show as itself, not raise ``MarkupError``. Widgets' and screens'
        ``notify`` come here too."""
        super().notify(
            sanitize(str(message)), title=sanitize_line(title), severity=severity, timeout=timeout, markup=False
        )

    # -- layout ------------------------------------------------------------------------------------------
    def compose(self):
        with Horizontal(id="main"):
            with Vertical(id="chat-column"):
                yield Static(legend_content(True), id="legend")
                yield ChatLog(id="chat")
                yield PromptInput(id="prompt", submit=self.submit_prompt)
            yield Sidebar(id="sidebar")
        yield Static(id="status-bar")
        yield Footer()

    def get_driver_class(self):
        """Textual's driver, except on Linux terminals: :class:`specchat.tui.driver.FastEscapeLinuxDriver`."""
        driver_class = super().get_driver_class()
        try:
            from textual.drivers.linux_driver import LinuxDriver

            from specchat.tui.driver import FastEscapeLinuxDriver
        except ImportError:  # not on Linux (or another Textual): Textual's own driver
            return driver_class
        return FastEscapeLinuxDriver if driver_class is LinuxDriver else driver_class

    def get_theme_variable_defaults(self) -> dict[str, str]:
        defaults = dict(TOKEN_DEFAULTS)
        try:
            foreground = self.current_theme.foreground
        except Exception:
            foreground = None
        if foreground:
            defaults["token-plain"] = foreground
        return defaults

    def ui_needs_to_yield(self) -> bool:
        """Lower the UI thread's priority only when llama.cpp's threads take every core.

        With ``threads`` = the core count (the default), llama.cpp's compute threads meet at a barrier after
        every operation: a UI thread that wakes up to draw preempts one of them and the others wait. At nice
        19 the UI draws in the gaps instead. Measured on 2 cores (bundled SmolLM2 + ngram, K = 3, 150 tokens,
        alternating with ``specchat generate``): reply tok/s 0.83-1.07x of generate (median ~0.96) at nice
        19, 0.71-1.0x (median ~0.75) at nice 10, 0.65-0.85x at nice 0.

        With fewer threads than cores there is a core for the UI, and nice 19 only starves it whenever
        anything else runs: measured through a pty (tests/perf/ui_latency.py, ``--threads 1``, 2 cores,
        load average ~4 from other processes, runs alternated), keystroke-to-screen while a reply streams
        was p50 146-178 ms, p95 0.95-1.1 s before (nice 19) and p50 24-26 ms, p95 86-99 ms after (nice 0,
        with the Esc driver and the 15 Hz updates). So then the UI keeps nice 0. The price under load: the
        UI's CPU comes out of the process's scheduler share (see :mod:`specchat.tui.generation`).
        """
        import os

        return self.settings.threads >= (os.cpu_count() or 1)

    def _yield_cpu_to_engine(self) -> None:
        """Give the UI thread the lowest CPU priority, below the engine's threads, when
        :meth:`ui_needs_to_yield` (Linux; a no-op elsewhere).

        The engine thread is created first, so it and the llama.cpp threads it starts keep the normal
        priority. With autogroup scheduling (the default on desktop Linux) niceness only ranks the threads
        of this session, so other programs do not starve the UI any more than before. Lowering a priority
        cannot be undone without privileges.
        """
        import os
        import sys

        if not sys.platform.startswith("linux") or UI_NICE <= 0 or not self.ui_needs_to_yield():
            return
        self.host.start_thread()  # the engine thread now exists, at nice 0
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), UI_NICE))
        except OSError:
            pass

    def on_mount(self) -> None:
        if self.stop_signals:
            self._add_signal_handlers()
        self._yield_cpu_to_engine()
        self._setup_themes()
        self._setup_keymap()
        self.sidebar.on_change = self._update_status_bar
        self._apply_sidebar()
        if self._state_note:
            self.notify(f"UI state: {self._state_note}", severity="warning", timeout=10)
        self.sidebar.show_pair(None, None)
        self.sidebar.show_controls(None)
        if self.history_note:
            self.chat.mount(ChatNotice(self.history_note))
        self._start_load(self.engine_factory)
        if self.tour is not None and self.tour.open_at_start:
            self.open_tour()

    def _setup_themes(self) -> None:
        result = load_themes(theme_dirs(self.user_theme_dir))
        for theme in result.themes:
            self.register_theme(theme)
        self.theme_errors = list(result.errors)
        for error in result.errors:
            self.notify(f"Theme skipped: {error}", title="Theme error", severity="error", timeout=15)
        wanted = self.ui_state.theme or self.settings.theme
        if wanted not in self.available_themes:
            fallback = DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
            self.notify(
                f"Unknown theme {wanted!r}; using {fallback}. Choose one with ctrl+p \u2192 Theme.",
                severity="warning",
                timeout=10,
            )
            wanted = fallback
        self.theme = wanted
        self.theme_changed_signal.subscribe(self, self._on_theme_changed)

    # -- remembered UI state: theme and sidebar ------------------------------------------------------
    def _on_theme_changed(self, theme: Any) -> None:
        name = getattr(theme, "name", None)
        if name and name != self.ui_state.theme:
            self.ui_state.theme = name
            self._save_ui_state()

    def _save_ui_state(self) -> None:
        if self.state_path is None:
            return
        try:
            save_state(self.state_path, self.ui_state)
        except OSError as exc:
            if not self._state_write_failed:  # once per session: the choice still holds until quit
                self._state_write_failed = True
                self.notify(
                    f"Could not remember the theme and sidebar in {self.state_path} "
                    f"({exc.strerror or exc}); they hold until you quit.", severity="warning", timeout=10,
                )

    def sidebar_visible(self, width: int | None = None) -> bool:
        """Shown unless hidden with its key, or the terminal is narrower than :data:`SIDEBAR_MIN_WIDTH`."""
        width = self.size.width if width is None else width
        return self.ui_state.sidebar is not False and width >= SIDEBAR_MIN_WIDTH

    def _apply_sidebar(self, width: int | None = None) -> None:
        visible = self.sidebar_visible(width)
        self.sidebar.display = visible
        self.query_one("#status-bar", Static).display = not visible
        self._update_status_bar()

    def _update_status_bar(self) -> None:
        bar = self.query_one("#status-bar", Static)
        if bar.display:
            bar.update(Content(self.sidebar.summary()))

    def on_resize(self, event: Any) -> None:
        self._apply_sidebar(event.size.width)

    def action_toggle_sidebar(self) -> None:
        if self.size.width < SIDEBAR_MIN_WIDTH:
            self.notify(
                f"The terminal is {self.size.width} columns wide; the sidebar needs {SIDEBAR_MIN_WIDTH}. "
                "The status bar shows tok/s, acceptance and K.", timeout=5,
            )
            return
        self.ui_state.sidebar = not self.sidebar_visible()
        self._apply_sidebar()
        self._save_ui_state()

    def _setup_keymap(self) -> None:
        keymap, problems = resolve_keymap(self.settings.keymap)
        self.keymap_problems = problems
        for problem in problems:
            self.notify(f"Config: {problem}", title="Keymap", severity="warning", timeout=15)
        if keymap:
            self.set_keymap(keymap)
        self.effective_keys.update(keymap)

    def get_system_commands(self, screen):
        """The palette also lists every key action (so nothing depends on a function key working)."""
        yield from super().get_system_commands(screen)
        for spec in APP_KEYS:
            if spec.action in ("stop", "stop_now") and not self.host.generating:
                continue
            # the palette edits whatever the prompt holds (the key only in an empty prompt: check_action)
            callback = {"edit_last": self.start_edit, "reply_prev": partial(self.flip_reply, -1),
                        "reply_next": partial(self.flip_reply, 1)}.get(spec.action, partial(self.run_action, spec.action))
            yield SystemCommand(spec.description, f"{spec.help} [{self.effective_keys.get(spec.id, spec.keys)}]",
                                callback)

    # -- handy queries ----------------------------------------------------------------------------------
    @property
    def sidebar(self) -> Sidebar:
        return self.query_one(Sidebar)

    @property
    def chat(self) -> ChatLog:
        return self.query_one(ChatLog)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)

    @property
    def generating(self) -> bool:
        """A reply is being generated (from sending until its end is handled)."""
        return self.host.generating

    def assistant_messages(self) -> list[AssistantMessage]:
        return list(self.chat.query(AssistantMessage))

    def control_state(self) -> ControlState | None:
        return self.engine.controls.snapshot() if self.engine is not None else None

    # -- loading the engine -------------------------------------------------------------------------------
    def _start_load(self, factory: EngineFactory, close_first: ChatEngine | None = None) -> None:
        """Have the host load an engine (closing ``close_first`` first); the sidebar shows the progress."""
        if self.host.closing:
            return
        self.sidebar.show_loading(0.0, "starting")
        self.host.load(
            factory,
            progress=lambda fraction, what: self.post_message(LoadProgress(fraction, what)),
            loaded=lambda engine, seconds: self.post_message(EngineReady(engine, seconds)),
            failed=lambda message: self.post_message(EngineFailed(message)),
            close_first=close_first,
        )

    def _ui_gone(self) -> bool:
        """The app is closing (its screens may be gone already): messages posted by the engine thread are not
        drawn any more. A reply still being generated is saved by :meth:`_shutdown_engine`, marked stopped.
        (Found by the state fuzz: a StatsUpdated handled after the screen was gone raised NoMatches.)"""
        return self.host.closing or not self.is_running

    def on_load_progress(self, message: LoadProgress) -> None:
        if self._ui_gone():
            return
        if self.engine is None and self.engine_error is None:
            self.sidebar.show_loading(message.fraction, message.what)

    def on_engine_ready(self, message: EngineReady) -> None:
        engine = message.engine
        info = engine.info()  # before the pending conversation (if any) is loaded into it, as always
        if not self.host.accept(engine):
            return  # closing: _shutdown_engine closes it
        state = engine.controls.snapshot()
        self.sidebar.show_ready(f"ready \u00b7 loaded in {message.load_seconds:.1f} s")
        self.sidebar.show_pair(info, state)
        self.sidebar.show_controls(state)
        if info.note:
            self.chat.mount(ChatNotice(info.note))
        self._colour_saved_replies()  # a conversation opened while loading, or carried over to a new model
        self.call_after_refresh(freeze_startup_heap)  # after "ready" is on screen: a one-off collection

    def on_engine_failed(self, message: EngineFailed) -> None:
        self.host.fail(message.message)
        if self._ui_gone():
            return
        self.sidebar.show_error("model error \u2013 see the chat")
        self.chat.mount(
            ChatNotice(
                f"Could not load the model: {message.message}\n"
                "You can still read saved chats (ctrl+o). Fix the setting and restart specchat, or pick "
                "another model with ctrl+p \u2192 Model.",
                error=True,
            )
        )

    # -- sending and streaming ------------------------------------------------------------------------------
    def _engine_or_explain(self) -> ChatEngine | None:
        if self.engine is not None:
            return self.engine
        if self.engine_error is not None:
            self.notify(f"No model is loaded: {self.engine_error}", severity="error", timeout=10)
        else:
            self.notify("The model is still loading; try again in a moment.", severity="warning")
        return None

    def submit_prompt(self, text: str) -> bool:
        """Send ``text`` (the prompt's whole text when the send key was pressed); True if it was taken.

        Called by :class:`PromptInput` in its own message queue, after every key typed before the send key
        (see :mod:`specchat.tui.widgets.prompt`); the prompt clears itself only when this returns True, so a
        refused message stays in the prompt, whole.

        A message sent while a reply is being generated is *queued*: shown at the end of the chat marked
        "queued", sent as is when the reply ends (by itself or by Esc), in the order sent. Refusing it instead
        left it in the prompt, and whatever was typed next was appended to it: two messages typed back to back
        were sent merged into one (issue 9).
        """
        if not text.strip():
            return False
        engine = self._engine_or_explain()
        if engine is None:
            return False
        if self.host.generating:
            self._queue_message(text)
            return True
        if self.editing is not None:
            self._send_edit(engine, text)
            return True
        self._start_turn(partial(engine.send, text), [*engine.messages, Message("user", text)], user_text=text)
        return True

    def _queue_message(self, text: str) -> None:
        widget = UserMessage(text)
        widget.add_class("queued")
        widget.border_title = "you \u00b7 queued: sent when this reply ends"
        self._queued.append(widget)
        self.chat.mount(widget)
        self.chat.anchor()

    def _send_next_queued(self) -> None:
        """Start the reply to the oldest queued message (its widget stays where it is, now a sent message)."""
        engine = self.engine
        if not self._queued or engine is None or self.host.generating or self.host.closing:
            return
        widget = self._queued.pop(0)
        widget.remove_class("queued")
        widget.border_title = "you"
        text = widget.text
        self._start_turn(partial(engine.send, text), [*engine.messages, Message("user", text)], user_widget=widget)

    def _unqueue_to_prompt(self) -> int:
        """Take the queued messages off the chat and put their text back in the prompt (before what it holds)."""
        if not self._queued:
            return 0
        texts = [w.text for w in self._queued]
        for widget in self._queued:
            widget.remove()
        self._queued = []
        prompt = self.prompt
        prompt.set_text("\n\n".join([*texts, prompt.text] if prompt.text.strip() else texts))
        return len(texts)

    # -- editing the last message -----------------------------------------------------------------------------
    def _edit_key_applies(self) -> bool:
        """The edit key (up) edits only in the focused, empty prompt; elsewhere it keeps its own meaning.

        "Empty" includes the keys still queued for the prompt: typed fast, "x" then up reaches this check
        (an App priority binding) before the prompt has inserted the "x" (see :mod:`specchat.tui.widgets.prompt`);
        with keys pending, up goes to the prompt behind them and moves its cursor.
        """
        focused = self.focused
        return isinstance(focused, PromptInput) and not focused.text.strip() and focused.message_queue_size == 0

    def action_edit_last(self) -> None:
        """The ``edit_last`` key: see :meth:`start_edit` (enabled by :meth:`check_action`)."""
        self.start_edit()

    def start_edit(self) -> None:
        """Put the last user message into the prompt; sending it replaces that message and the reply after it.

        Esc (the stop key) cancels and puts back what the prompt held. Not while a reply is being generated.
        """
        engine = self._engine_or_explain()
        if engine is None:
            return
        if self.host.generating:
            self.notify("A reply is still being generated: press Esc to stop it first, then edit.", severity="warning")
            return
        last = next((m for m in reversed(engine.messages) if m.role == "user"), None)
        if last is None:
            self.notify("Nothing to edit yet: send a message first.")
            return
        prompt = self.prompt
        if self.editing is None:
            shown = list(self.chat.query(UserMessage))
            self.editing = EditInProgress(saved_prompt=prompt.text, message=shown[-1] if shown else None)
            if self.editing.message is not None:
                self.editing.message.add_class("editing")
                self.chat.scroll_to_widget(self.editing.message, animate=False)
        prompt.set_text(last.content)
        send = self.effective_keys.get("send", "enter").split(",")[0]
        cancel = self.effective_keys.get("stop", "escape").split(",")[0]
        prompt.border_title = inert(f"editing your last message \u00b7 {send} resends \u00b7 {cancel} cancels")
        prompt.add_class("editing")
        prompt.focus()

    def _end_edit(self, *, restore: bool) -> None:
        """Leave edit mode; ``restore`` puts back what the prompt held before the edit began."""
        editing, self.editing = self.editing, None
        if editing is None:
            return
        if editing.message is not None:
            editing.message.remove_class("editing")
        self.prompt.border_title = None
        self.prompt.remove_class("editing")
        if restore:
            self.prompt.set_text(editing.saved_prompt)

    def _send_edit(self, engine: ChatEngine, text: str) -> None:
        """Replace the last exchange: in the chat pane, in history (before generating), then in the engine."""
        messages = list(engine.messages)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        self._end_edit(restore=False)
        if last_user is None:  # the conversation changed under the edit (e.g. a new chat): send it as new
            self._start_turn(partial(engine.send, text), [*messages, Message("user", text)], user_text=text)
            return
        children = list(self.chat.children)
        first = max((i for i, w in enumerate(children) if isinstance(w, UserMessage)), default=len(children))
        for widget in children[first:]:  # the old message, its reply and the notices about that turn
            widget.remove()
        # _start_turn saves first: if the app dies during the new reply, the old one is not left saved as current
        kept = [*messages[:last_user], Message("user", text)]
        self._start_turn(partial(engine.edit_last, text), kept, user_text=text)

    def _reply_title(self) -> str:
        state = self.control_state()
        if state is None or self.engine is None:
            return "assistant"
        info = self.engine.info()
        if not state.speculative:
            return f"{info.target_name} \u00b7 no speculation"
        drafter = state.drafter or info.draft_name
        k = "auto-K" if state.auto_k else f"K={state.k}"
        return f"{info.target_name} \u00b7 {drafter} \u00b7 {k}"

    def _start_turn(
        self,
        start: Callable[[], Any],
        prompt_messages: list[Message],
        user_text: str | None = None,
        *,
        user_widget: UserMessage | None = None,
    ) -> None:
        """Save ``prompt_messages`` to history, then have the engine generate the reply (``start()``).

        ``prompt_messages`` is the conversation the reply will follow, as the engine will hold it once
        ``start`` has run (with the user message just sent, edited or kept). Saving it before generating keeps
        the promise of :mod:`specchat.history`: if the app dies mid-reply, only the reply is lost (a regenerated
        reply's earlier version is in ``prompt_messages``: it stays saved until the new one joins it).
        :meth:`on_turn_finished` saves the reply (marked stopped if it was stopped); quitting mid-reply
        saves it too (:meth:`_shutdown_engine`). ``user_text`` is drawn as the user's message first;
        ``user_widget`` is a message already in the chat (a queued one): the reply goes right after it.
        """
        if self.host.closing:
            return
        self._save_history(prompt_messages)
        chat = self.chat
        if user_text is not None:
            chat.mount(UserMessage(user_text))
        assistant = AssistantMessage(title=self._reply_title(), show_ghosts=self.show_ghosts, markdown=self.markdown_view)
        stop_key = self.effective_keys.get("stop", "escape").split(",")[0]
        assistant.border_subtitle = inert(f"generating\u2026 {'Esc' if stop_key == 'escape' else stop_key} stops")
        if user_widget is not None and user_widget.is_attached:
            chat.mount(assistant, after=user_widget)
        else:
            chat.mount(assistant)
        chat.anchor()
        self._current = assistant
        self.host.start_turn(lambda turn_id: pump_turn(turn_id, start, self.post_message, self._stats, self._clock))

    def on_pieces_batch(self, message: PiecesBatch) -> None:
        if message.turn_id != self.host.turn_id or self._current is None or self._ui_gone():
            return
        if message.pieces:
            self._current.append(message.pieces)
        for notice in message.notices:
            self.chat.mount(ChatNotice(notice), before=self._current)
        for line in message.auto_k_notices:  # the engine says each change once: one line, one toast each
            notice = ChatNotice(line)
            notice.add_class("auto-k")
            self.chat.mount(notice, before=self._current)
            self.notify(line, title="auto-K", timeout=8)

    def on_stats_updated(self, message: StatsUpdated) -> None:
        if not self._ui_gone():
            self.sidebar.show_stats(message.snapshot)

    def on_turn_finished(self, message: TurnFinished) -> None:
        if self._ui_gone() or not self.host.finish_turn(message.turn_id):
            return
        assistant = self._current
        self._current = None
        if assistant is not None:
            assistant.finish(message.turn, message.error)
            self._show_reply_versions(assistant, message.turn)
        if message.error:
            self.chat.mount(
                ChatNotice(
                    f"The reply ended with an error: {message.error}\n"
                    "The conversation is still usable: send again, or regenerate with "
                    f"{self.effective_keys.get('regenerate', 'ctrl+r')}.",
                    error=True,
                )
            )
        self._save_history()
        if self.engine is not None:  # the engine may have learned its settings (a llama-server's K, drafter)
            self._controls_changed()
        callbacks, self._after_turn = self._after_turn, []
        for callback in callbacks:
            callback()
        self._send_next_queued()

    def _show_reply_versions(self, reply: AssistantMessage, turn: Any) -> None:
        """A finished reply that the engine recorded: mark which version of its reply it is (``reply 2/3``)."""
        last = self.engine.messages[-1] if self.engine is not None and self.engine.messages else None
        if turn is not None and last is not None and last.role == "assistant" and last.stats is turn:
            reply.set_versions(last)

    # -- history ---------------------------------------------------------------------------------------------
    def _save_history(self, messages: list[Message] | None = None) -> None:
        """Make the saved conversation equal ``messages`` (default: the engine's) and create it if needed."""
        store, engine = self.history_store, self.engine
        if store is None or engine is None or self._conversation_deleted:
            return
        messages = list(engine.messages) if messages is None else messages
        if not any(m.role == "user" for m in messages):
            return
        try:
            info = engine.info()
            state = engine.controls.snapshot()
            if self.conversation_id is None:
                self.conversation_id = store.create_conversation(
                    target=info.target_name,
                    draft=info.draft_name,
                    system_prompt=self.settings.system_prompt,
                )
            store.sync(
                self.conversation_id, messages, target=info.target_name, auto_k=state.auto_k, sampling=state.sampling
            )
        except Exception as exc:
            self.notify(f"Could not save the conversation: {describe_exception(exc)}", severity="error", timeout=10)

    def action_history(self) -> None:
        if self.history_store is None:
            self.notify(self.history_note or "History is off in this session.", severity="warning")
            return
        self.push_screen(
            HistoryScreen(self.history_store, self.export_dir, on_deleted=self._on_conversation_deleted),
            self._open_conversation,
        )

    def _on_conversation_deleted(self, conv_id: int) -> None:
        """The open conversation was deleted in the browser: start a new chat, as chat apps do (a reply being
        generated is stopped first), and never save it again under a new id meanwhile (:meth:`_save_history`)."""
        if conv_id != self.conversation_id:
            return
        self.conversation_id = None
        self._conversation_deleted = True
        self.action_new_chat()

    def _open_conversation(self, conv_id: int | None) -> None:
        if conv_id is None:
            return
        if self.host.generating:
            self.notify("Stop the reply first (Esc), then open the conversation.", severity="warning")
            return
        try:
            conv, messages = self.history_store.load(conv_id)
        except Exception as exc:
            self.notify(f"Could not open conversation {conv_id}: {describe_exception(exc)}", severity="error")
            return
        self._end_edit(restore=True)
        self._show_messages(messages)
        self.conversation_id = conv_id
        if self.engine is not None:
            self.engine.load(messages)
            self._colour_saved_replies()
            hint = "send a message to continue it"
        else:
            self.host.pending_messages = messages
            hint = "it continues once a model is loaded" if self.engine_error is None else "read-only: no model"
        self.notify(f"Opened \u201c{conv.title or conv_id}\u201d; {hint}.", title="History", markup=False)

    def _show_messages(self, messages: list[Message]) -> None:
        chat = self.chat
        chat.remove_children()
        for m in messages:
            if m.role == "system":
                if m.content:
                    chat.mount(ChatNotice(f"system: {m.content}"))
            elif m.role == "user":
                chat.mount(UserMessage(m.content))
            else:
                widget = AssistantMessage(title="assistant (saved)", show_ghosts=self.show_ghosts, markdown=self.markdown_view)
                widget.load_saved(m)
                chat.mount(widget)
        chat.scroll_end(animate=False)

    def _colour_saved_replies(self) -> None:
        """Have the engine split every uncoloured saved reply into its tokens' text (on the engine thread).

        History keeps each reply's token ids and kinds but not the text of each token; the loaded engine
        gives that text back (:meth:`ChatEngine.detokenize_pieces`) and
        :meth:`AssistantMessage.show_saved_pieces` redraws the reply in its kind colours if the pieces match
        it exactly (they do not when another target model wrote it: the reply then stays uncoloured).
        """
        jobs = [
            (reply, reply.saved_message.tokens)
            for reply in self.assistant_messages()
            if reply.saved_message is not None and reply.saved_message.tokens and not reply.saved_coloured
        ]
        self.host.detokenize(jobs, lambda results: self.post_message(SavedRepliesDetokenized(results)))

    def on_saved_replies_detokenized(self, message: SavedRepliesDetokenized) -> None:
        if self._ui_gone():
            return
        for reply, pieces in message.results:
            if reply.is_attached:  # not replaced meanwhile by another conversation or a new chat
                reply.show_saved_pieces(pieces)

    # -- actions: conversation -----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # "stop" stays enabled when idle (a no-op): toggling it would re-compose the footer twice per turn,
        # each a layout pass of the whole screen while the engine runs
        if action in APP_ACTIONS and action not in ("help", "quit") and len(self.screen_stack) > 1:
            return False  # a dialog is open: its own keys win (our bindings are priority bindings)
        if action == "edit_last":
            # False lets the key through to the focused widget: up still moves the prompt's cursor
            return self._edit_key_applies()
        if action == "stop_now":  # ctrl+c: only while a reply streams; else it keeps its meaning (copy)
            return self.host.generating
        return True

    def action_stop(self) -> None:
        if self.editing is not None and not self.host.generating:
            self._end_edit(restore=True)
            return
        if self.engine is not None and self.host.generating:
            self.engine.controls.request_stop()
            if self._current is not None:
                self._current.border_subtitle = "stopping\u2026"

    def action_stop_now(self) -> None:
        """The ``stop_now`` key (ctrl+c): stop the reply with no wait for an escape sequence (see keys.py)."""
        self.action_stop()

    def action_regenerate(self) -> None:
        engine = self._engine_or_explain()
        if engine is None:
            return
        if self.host.generating:
            self.notify("A reply is still being generated: press Esc first.", severity="warning")
            return
        messages = list(engine.messages)
        if messages and messages[-1].role == "assistant":
            replies = self.assistant_messages()
            if replies:
                replies[-1].remove()
            # history keeps the old reply until the new one is recorded beside it as its newest version: if
            # the app dies mid-reply, the old reply is still saved, with its own numbers and date
            self._start_turn(engine.regenerate, messages)
            if replies and self._current is not None:
                self._current.keep_versions_of(replies[-1])
        elif messages and messages[-1].role == "user":  # the last turn failed: try again
            self._start_turn(partial(engine.edit_last, messages[-1].content), messages)
        else:
            self.notify("Nothing to regenerate yet: send a message first.")

    def action_reply_prev(self) -> None:
        """The ``reply_prev`` keys: see :meth:`flip_reply` (left reaches it only from an empty prompt:
        :class:`~specchat.tui.widgets.prompt.PromptInput` steps aside)."""
        self.flip_reply(-1)

    def action_reply_next(self) -> None:
        self.flip_reply(+1)

    def flip_reply(self, step: int) -> None:
        """Show the previous (``step`` -1) or next (+1) version of the last reply and continue from it.

        The engine chooses it (:meth:`ChatEngine.select_alternate`: nothing is decoded), the pane draws it with
        its own colours and numbers (:meth:`AssistantMessage.show_version`) and history saves the choice.
        Refused with a notice during a reply (the engine would be choosing a version under a reply being
        generated after it; the keys work again once it ends).
        """
        engine = self._engine_or_explain()
        if engine is None:
            return
        if self.host.generating:
            self.notify("A reply is being generated: flip between versions once it ends (Esc stops it).",
                        severity="warning", timeout=4)
            return
        last = engine.messages[-1] if engine.messages else None
        if last is None or last.role != "assistant" or not last.alternates:
            key = self.effective_keys.get("regenerate", "ctrl+r").split(",")[0]
            self.notify(f"The last reply has one version: regenerate it ({key}) to keep both and compare.",
                        timeout=4)
            return
        count = len(last.alternates) + 1
        index = last.alternate_index + step
        if not 0 <= index < count:
            edge = "first" if step < 0 else "last"
            self.notify(f"Reply {last.alternate_index + 1}/{count} is the {edge} version.", timeout=2)
            return
        chosen = engine.select_alternate(index)
        replies = self.assistant_messages()
        if replies and not replies[-1].show_version(chosen):
            self._colour_saved_replies()
        self._save_history()

    def action_new_chat(self) -> None:
        """A new chat; during a reply: stop it first, and say so (the stopped reply is saved, marked stopped).

        A notice, not a confirmation: nothing is lost (the conversation, with its partial reply, stays in
        history, and messages queued for after the reply go back to the prompt), and a dialog would put a
        step in front of an action the user asked for by name.
        """
        if not self.host.generating:
            self._new_chat_now()
            return
        if self._new_chat_now in self._after_turn:
            return  # already stopping for a new chat
        if self.engine is not None:
            self.engine.controls.request_stop()
        if self._current is not None:
            self._current.border_subtitle = "stopping\u2026 then a new chat"
        note = "Stopping the reply, then starting a new chat; this one stays in history (ctrl+o)."
        queued = self._unqueue_to_prompt()
        if queued:
            note += f" {queued} queued message{'s' if queued > 1 else ''} went back to the prompt."
        self.notify(note, title="New chat", timeout=6)
        self._after_turn.append(self._new_chat_now)

    def _new_chat_now(self) -> None:
        self._conversation_deleted = False
        self._end_edit(restore=True)
        if self.engine is not None:
            self.engine.reset(self.settings.system_prompt or None)
        self.host.pending_messages = None
        self.conversation_id = None
        self.chat.remove_children()
        self.notify("New chat.", timeout=2)

    def _chat_markdown(self) -> str:
        lines = ["# specchat conversation", ""]
        for widget in self.chat.children:
            if isinstance(widget, UserMessage) and widget not in self._queued:
                lines += ["## You", "", widget.text, ""]
            elif isinstance(widget, AssistantMessage):
                lines += ["## Assistant" + (" (stopped)" if widget.stopped else ""), "", widget.reply_text, ""]
        return "\n".join(lines)

    def action_export(self) -> None:
        """Write this chat as Markdown into the exports directory (:func:`specchat.history.write_export`)."""
        try:
            if self.history_store is not None and self.conversation_id is not None:
                conv_id = self.conversation_id
                text = self.history_store.export_markdown(conv_id)
                title = self.history_store.get_conversation(conv_id).title
            else:
                users = [w for w in self.chat.children if isinstance(w, UserMessage)]
                if not users:
                    self.notify("Nothing to export yet.")
                    return
                conv_id, text, title = None, self._chat_markdown(), default_title(users[0].text)
            path = write_export(self.export_dir, conv_id, title, text)
        except Exception as exc:
            self.notify(f"Could not export: {describe_exception(exc)}", severity="error", markup=False)
            return
        self.notify(f"Exported to {path}", title="Export", markup=False)

    def action_copy_reply(self) -> None:
        replies = [r for r in self.assistant_messages() if r.reply_text]
        if not replies:
            self.notify("No reply to copy yet.")
            return
        text = replies[-1].reply_text
        self.copy_to_clipboard(text)
        self.notify(f"Copied the last reply ({len(text)} characters, without ghost text).", timeout=3)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(dict(self.effective_keys), self.sidebar.verify_texts()))

    # -- actions: speculation controls (applied by the engine at its next step) --------------------------
    def _controls_changed(self, note: str | None = None) -> None:
        state = self.control_state()
        self.sidebar.show_controls(state)
        self.sidebar.show_pair(self.engine.info() if self.engine else None, state)
        if note:
            self.notify(note + (" (from the next step)" if self.host.generating else ""), timeout=2)

    def _speculation_engine(self) -> ChatEngine | None:
        """The engine, if its speculation settings can change here; else None, having said why (a
        llama-server sets them with its own flags: :attr:`Controls.fixed`)."""
        engine = self._engine_or_explain()
        if engine is not None and engine.controls.fixed:
            self.notify(engine.controls.fixed, severity="warning", timeout=6)
            return None
        return engine

    def set_k(self, k: int) -> None:
        engine = self._speculation_engine()
        if engine is None:
            return
        k = max(0, min(K_MAX, int(k)))
        state = engine.controls.snapshot()
        engine.controls.set_k(k)
        note = f"K = {k}"
        if state.auto_k:
            engine.controls.set_auto_k(False)
            note += "; auto-K off"
        self._controls_changed(note)

    def action_k_up(self) -> None:
        engine = self._speculation_engine()
        if engine is None:
            return
        state = engine.controls.snapshot()
        if state.k >= K_MAX:
            self.notify(f"K is at its maximum ({K_MAX}).", timeout=2)
            return
        self.set_k(state.k + 1)

    def action_k_down(self) -> None:
        engine = self._speculation_engine()
        if engine is None:
            return
        state = engine.controls.snapshot()
        if state.k <= 0:
            self.notify("K is 0 already (no drafting).", timeout=2)
            return
        self.set_k(state.k - 1)

    def action_toggle_speculation(self) -> None:
        engine = self._speculation_engine()
        if engine is None:
            return
        state = engine.controls.snapshot()
        info = engine.info()
        if not state.speculative and not info.can_speculate:
            self.notify(info.note or "This model cannot speculate.", severity="warning")
            return
        engine.controls.set_speculative(not state.speculative)
        self._controls_changed(f"speculation {'off' if state.speculative else 'on'}")

    def action_toggle_auto_k(self) -> None:
        engine = self._speculation_engine()
        if engine is None:
            return
        state = engine.controls.snapshot()
        engine.controls.set_auto_k(not state.auto_k)
        self._controls_changed(f"auto-K {'off' if state.auto_k else 'on'}")

    def set_drafter(self, name: str) -> None:
        engine = self._speculation_engine()
        if engine is None:
            return
        engine.controls.set_drafter(name)
        if name != NONE and not engine.controls.snapshot().speculative and engine.info().can_speculate:
            engine.controls.set_speculative(True)
        self._controls_changed(f"drafter: {name}")

    def set_temperature(self, temperature: float) -> None:
        engine = self._engine_or_explain()
        if engine is None:
            return
        state = engine.controls.snapshot()
        try:
            engine.controls.set_sampling(replace(state.sampling, temperature=float(temperature)))
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self._controls_changed(f"temperature = {temperature:g}")

    def set_theme(self, name: str) -> None:
        if name not in self.available_themes:
            self.notify(f"Unknown theme {name!r}.", severity="error")
            return
        self.theme = name

    # -- actions: display ---------------------------------------------------------------------------------
    def action_toggle_ghosts(self) -> None:
        self.show_ghosts = not self.show_ghosts
        for reply in self.assistant_messages():
            reply.set_ghosts(self.show_ghosts)
        self.query_one("#legend", Static).update(legend_content(self.show_ghosts))

    def action_toggle_markdown(self) -> None:
        self.markdown_view = not self.markdown_view
        for reply in self.assistant_messages():
            reply.set_markdown(self.markdown_view)
        self.notify(f"Finished replies: {'Markdown' if self.markdown_view else 'tokens'} view", timeout=2)

    # -- model switching (command palette) -------------------------------------------------------------
    def switch_model(self, target: str, draft: str, label: str) -> None:
        """Load another pair (on the engine thread); the conversation carries over to it."""
        if self.make_factory is None:
            self.notify("Switching models is not available in this session.", severity="warning")
            return
        if self.host.generating or self.host.loading:
            self.notify("Wait for the reply or the loading to finish first.", severity="warning")
            return
        try:  # files missing? say what to run instead of unloading a working model
            resolve_pair(target, draft, self.settings.effective_data_dir())
        except UserError as exc:
            self.notify(f"{label}: {exc}", severity="warning", timeout=12)
            return
        self.settings = self.settings.model_copy(update={"target": target, "draft": draft})
        factory = self.make_factory(self.settings)
        old = self.host.unload()
        self._stats.engine_changed()
        self.sidebar.show_stats(self._stats.snapshot())
        self.sidebar.show_pair(None, None)
        self.sidebar.show_controls(None)
        self.notify(f"Loading {label}\u2026")
        self._start_load(factory, close_first=old)

    # -- the race, the tour, fixed K (specchat.tui.screens.race, specchat.tui.screens.tour) --------------------
    def race_text(self) -> str | None:
        """What the race key races: the prompt's text if there is any (what you are about to send), else your
        last message; None when there is neither."""
        if self.prompt.text.strip():
            return self.prompt.text
        engine = self.engine
        last = next((m for m in reversed(engine.messages) if m.role == "user"), None) if engine else None
        return last.content if last is not None else None

    def action_race(self) -> None:
        engine = self._engine_or_explain()
        if engine is None:
            return
        server_b = self.settings.server_b_url if engine.controls.fixed else None
        if engine.controls.fixed and (server_b is None or self.make_factory is None):
            self.notify("A race turns speculation off and on with local models; this session uses a llama-server, "
                        "whose own flags set speculation: give --server-b URL to race it against a second server.",
                        severity="warning", timeout=8)  # fmt: skip
            return
        if self.host.generating:
            self.notify("A reply is still being generated: press Esc first, then race.", severity="warning")
            return
        text = self.race_text()
        if text is None:
            self.notify("Nothing to race yet: type a message in the prompt, or send one first.")
            return
        if server_b is not None and self.make_factory is not None:  # two llama-servers: A (this session), then B
            settings_b = self.settings.model_copy(update={"server_url": server_b, "server_b_url": None})
            factory_b = self.make_factory(settings_b)
            self.push_screen(RaceScreen(text, self._clock, record=(self.host, engine, None),
                                        connect_b=lambda: factory_b(lambda _f, _what: None)))  # fmt: skip
            return
        state = engine.controls.snapshot()
        info = engine.info()
        if not info.can_speculate or (state.drafter or info.draft_name) == NONE:
            why = info.note or "no drafter is selected: choose one with ctrl+p \u2192 Drafter"
            self.notify(f"Nothing to race against: {why}.", severity="warning", timeout=8)
            return
        k = None if state.auto_k else state.k
        if k == 0:
            self.notify("K is 0, so nothing would be drafted: raise K or turn auto-K on, then race.", severity="warning")
            return
        self.push_screen(RaceScreen(text, self._clock, record=(self.host, engine, k)))

    def open_tour(self) -> None:
        """The guided tour (:class:`TourScreen`); it loads the demo pairs itself, next to the chat's models."""
        if self.tour is None or self.make_factory is None:
            self.notify("The tour is not available in this session.", severity="warning")
            return
        if self.settings.server_url:
            self.notify("The tour runs on the offline models; this session uses a llama-server.", severity="warning")
            return
        if self.host.generating:
            self.notify("A reply is still being generated: press Esc first, then open the tour.", severity="warning")
            return
        self.push_screen(TourScreen(self.tour, self.host, self.make_factory, self.settings, self._clock))

    def on_drafting_off(self, message: DraftingOff) -> None:
        """Auto-K turned drafting off in a reply: offer fixed K (the notice itself is in the chat)."""
        if self._ui_gone():
            return
        self.notify(
            f"Auto-K judged drafting with {message.drafter} unprofitable and turned it off. To see its colours "
            f"anyway: ctrl+p → Use fixed K (K {self._fixed_k()}, auto-K off).", title="auto-K", timeout=12,
        )  # fmt: skip

    def _fixed_k(self) -> int:
        state = self.control_state()
        return state.k if state is not None and state.k > 0 else FIXED_K

    def use_fixed_k(self) -> None:
        """Auto-K off, K fixed (the K set, or :data:`FIXED_K` if it is 0): the drafter drafts every round."""
        engine = self._speculation_engine()
        if engine is None:
            return
        k = self._fixed_k()
        engine.controls.set_auto_k(False)
        engine.controls.set_k(k)
        if not engine.controls.snapshot().speculative and engine.info().can_speculate:
            engine.controls.set_speculative(True)
        self._controls_changed(f"K = {k} fixed, auto-K off")

    # -- shutdown -----------------------------------------------------------------------------------------
    async def _shutdown_engine(self) -> None:
        """Stop the reply, wait for the engine thread, close the engine (:meth:`EngineHost.shutdown`); the
        reply this stopped is saved, marked stopped, even if its end is never handled. Idempotent."""
        await self.host.shutdown(save_stopped=self._save_history)

    def action_quit(self) -> None:
        """Stop the reply, then exit once the engine thread is done (the UI stays live meanwhile)."""
        if self.host.closing:
            return
        if self.host.generating:
            self.notify("Stopping the reply\u2026", timeout=2)
        if self.host.loading:
            self.notify("Waiting for the model to finish loading, then quitting\u2026", timeout=5)
        self.run_worker(self._quit_after_shutdown(), group="quit", name="quit", exit_on_error=False)

    async def _quit_after_shutdown(self) -> None:
        try:
            await self._shutdown_engine()
        finally:
            self.exit(return_code=self._exit_code)

    def _add_signal_handlers(self) -> None:
        from specchat.signals import STOP_SIGNALS

        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            try:
                loop.add_signal_handler(sig, self._on_stop_signal, int(sig))
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no such support
                continue
            self._signals_added.append(int(sig))

    def _on_stop_signal(self, signum: int) -> None:
        """SIGINT / SIGTERM / SIGHUP: quit like ctrl+q (the partial reply is saved, marked stopped)."""
        import os
        import signal

        if not self.host.closing:
            self._exit_code = 128 + signum
        if signum == getattr(signal, "SIGHUP", None):
            self._stop_and_save_now()
            if self._running_in_terminal and self._hangup_watchdog is None:
                self._hangup_watchdog = threading.Timer(HANGUP_EXIT_S, os._exit, args=(128 + signum,))
                self._hangup_watchdog.daemon = True
                self._hangup_watchdog.start()
        self.action_quit()

    async def run_async(self, *args: Any, **kwargs: Any) -> Any:
        """Textual's ``run_async`` (what ``run`` runs in a terminal; Pilot tests do not), marking that a SIGHUP
        may arm the exit watchdog, and disarming it once the app has ended normally."""
        self._running_in_terminal = True
        try:
            return await super().run_async(*args, **kwargs)
        finally:
            if self._hangup_watchdog is not None:
                self._hangup_watchdog.cancel()

    def _stop_and_save_now(self) -> None:
        """Stop the reply, wait for the engine thread to end the turn (one draft/verify round), save the
        conversation: all before the event loop draws anything again (see the module docstring)."""
        if self.host.stop_turn_and_wait(timeout=HANGUP_EXIT_S):
            self._save_history()

    async def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals_added:
            loop.remove_signal_handler(sig)
        self._signals_added.clear()
        await self._shutdown_engine()
