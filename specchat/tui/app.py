"""The application: start-up, themes and the remembered UI state, the key table and the palette, loading and
switching models, notifications, help, and quitting.

The conversation on screen is :class:`~specchat.tui.screens.chat.ChatScreen`'s, the app's default screen (as
posting keeps its UI on a ``MainScreen`` under a thin App): the app builds it and routes the conversation's
keys to it (:meth:`SpecChatApp.run_action`). The app never imports llama_cpp or the engine's model code: it
receives an *engine factory* (``Callable[[progress], ChatEngine]``), and its
:class:`~specchat.tui.engine_host.EngineHost` runs it on the engine thread after the first frame, so the
window appears before the models load; every turn runs on that thread too (:mod:`specchat.tui.generation`:
batched pieces and coalescing stats messages, never a per-token ``call_from_thread``). Stop and quit go
through ``engine.controls.request_stop()``; quitting waits for the host so no thread outlives the app.

The suffix drafter's history index is built on a thread of its own, made inside the engine factory (a lazy one at
its first draft): before the load the sidebar watches the history file it is built from
(:meth:`~specchat.tui.widgets.sidebar.Sidebar.watch_history_index`), and the corpus's thread posts its progress
(the sidebar's line) and notices (a warning notification, once per notice): nothing of the index is read on the UI
thread but the finished value a message carries.

Signals (``stop_signals=True``, as ``specchat`` runs it) quit the way ctrl+q does, the partial reply saved
marked stopped, with exit code 128 + the signal number; a SIGHUP saves first and arms a watchdog, because a
dead terminal blocks Textual's exit (:mod:`specchat.tui.lifecycle`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand

from specchat.config import Settings
from specchat.engine.protocol import ChatEngine
from specchat.errors import UserError
from specchat.history import HistoryStore
from specchat.models.registry import resolve_pair
from specchat.tui.commands import SpecChatCommands
from specchat.tui.engine_host import EngineFactory, EngineHost
from specchat.tui.heap import freeze_startup_heap
from specchat.tui.keys import APP_KEYS, PROMPT_KEYS, app_bindings, first_key, resolve_keymap
from specchat.tui.lifecycle import HANGUP_EXIT_S, StopSignals, is_hangup
from specchat.tui.messages import EngineFailed, EngineReady, LoadProgress
from specchat.tui.outcomes import Refusal
from specchat.tui.priority import yield_cpu_to_engine
from specchat.tui.recorder import Recorder
from specchat.tui.sanitize import sanitize, sanitize_line
from specchat.tui.screens.chat import ChatScreen
from specchat.tui.screens.help import HelpScreen
from specchat.tui.screens.tour import TourOptions, TourScreen
from specchat.tui.servers import ServerSwitch
from specchat.tui.state import UiState, save_state
from specchat.tui.themes import DEFAULT_THEME, TOKEN_DEFAULTS, load_themes, theme_dirs

#: the actions of the key table that are the application's; every other one is the chat screen's
APP_OWN_ACTIONS = frozenset({"help", "quit", "switch_server"})
CHAT_ACTIONS = frozenset(spec.action for spec in APP_KEYS) - APP_OWN_ACTIONS


class SpecChatApp(App[None]):
    """The application around the chat screen. See the module docstring."""

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
        #: the stop signals' handlers, the exit code and the hang-up watchdog (specchat.tui.lifecycle)
        self.lifecycle = StopSignals()
        self._running_in_terminal = False
        #: what the tour needs (the demo files' deriver, its reply length; None: no tour in this session)
        self.tour = tour
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
        self.effective_keys: dict[str, str] = {s.id: s.keys for s in (*APP_KEYS, *PROMPT_KEYS)}
        self.theme_errors: list[str] = []
        self.keymap_problems: list[str] = []
        self._chat_screen: ChatScreen | None = None
        #: with --server and --server-b: which llama-server answers (specchat.tui.servers)
        self.servers = ServerSwitch(settings)
        self._unwatch_index: Callable[[], None] | None = None  # the sidebar's watch of the history's index

    def _spawn(self, work: Any, *, group: str, name: str, description: str) -> None:
        """The host's work runs as a Textual worker (quitting and tests wait for the app's workers)."""
        self.run_worker(work, group=group, name=name, description=description, exit_on_error=False)

    def get_default_screen(self) -> ChatScreen:
        """The chat screen, built once (its widgets mount in its own task: :meth:`on_mount` waits for them)."""
        recorder = Recorder(self.history_store, self.export_dir)
        self._chat_screen = ChatScreen(self.host, recorder, self._clock, history_note=self.history_note)
        return self._chat_screen

    @property
    def chat_screen(self) -> ChatScreen:
        assert self._chat_screen is not None, "the chat screen is built when the app starts"
        return self._chat_screen

    @property
    def engine(self) -> ChatEngine | None:
        """The engine in use (None while loading, or when none could be loaded: :attr:`engine_error`)."""
        return self.host.engine

    @property
    def engine_error(self) -> str | None:
        return self.host.error

    @property
    def generating(self) -> bool:
        """A reply is being generated (from sending until its end is handled)."""
        return self.host.generating

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

    # -- start-up ----------------------------------------------------------------------------------------
    def get_driver_class(self):
        """Textual's driver, except on Linux terminals: :class:`specchat.tui.driver.FastEscapeLinuxDriver`."""
        driver_class = super().get_driver_class()
        try:
            from textual.drivers.linux_driver import LinuxDriver

            from specchat.tui.driver import FastEscapeLinuxDriver
        except ImportError:  # not on Linux (or another Textual): Textual's own driver
            return driver_class
        return FastEscapeLinuxDriver if driver_class is LinuxDriver else driver_class

    async def on_mount(self) -> None:
        """Start-up: signals, priorities, themes, keymap; then, once the chat screen's widgets are mounted (as
        when the app composed them itself: before a test's pilot or the first key), the models load on the
        engine thread and the tour opens if asked."""
        if self.stop_signals:
            self.lifecycle.install(self._on_stop_signal)
        yield_cpu_to_engine(self.settings.threads, self.host.start_thread)
        self._setup_themes()
        self._setup_keymap()
        if self._state_note:
            self.notify(f"UI state: {self._state_note}", severity="warning", timeout=10)
        await self.chat_screen.mounted.wait()
        # before the load: the factory may start the suffix drafter's corpus
        self._unwatch_index = self.chat_screen.sidebar.watch_history_index(self.settings.history_path())
        self._start_load(self.engine_factory)
        if self.tour is not None and self.tour.open_at_start:
            self.open_tour()

    # -- themes and the remembered UI state ----------------------------------------------------------------
    def get_theme_variable_defaults(self) -> dict[str, str]:
        defaults = dict(TOKEN_DEFAULTS)
        try:
            foreground = self.current_theme.foreground
        except Exception:
            foreground = None
        if foreground:
            defaults["token-plain"] = foreground
        return defaults

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

    def _on_theme_changed(self, theme: Any) -> None:
        name = getattr(theme, "name", None)
        if name and name != self.ui_state.theme:
            self.ui_state.theme = name
            self.save_ui_state()

    def set_theme(self, name: str) -> None:
        if name not in self.available_themes:
            self.notify(f"Unknown theme {name!r}.", severity="error")
            return
        self.theme = name

    def save_ui_state(self) -> None:
        """Write the theme and the sidebar's state to :attr:`state_path` (once-per-session warning if not)."""
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

    def on_resize(self, event: Any) -> None:
        """The sidebar follows the terminal's width, whichever screen is on top (a dialog's resize is not the
        chat screen's); before the chat screen is mounted it applies the width itself."""
        if self._chat_screen is not None and self._chat_screen.is_mounted:
            self._chat_screen.apply_sidebar(event.size.width)

    # -- the key table, the keymap, the palette ------------------------------------------------------------
    def _setup_keymap(self) -> None:
        keymap, problems = resolve_keymap(self.settings.keymap)
        self.keymap_problems = problems
        for problem in problems:
            self.notify(f"Config: {problem}", title="Keymap", severity="warning", timeout=15)
        if keymap:
            self.set_keymap(keymap)
        self.effective_keys.update(keymap)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The conversation's keys are enabled when the chat screen says so (on top, edit from an empty prompt)."""
        if action in CHAT_ACTIONS:
            return self.chat_screen.check_action(action, parameters)
        return True

    async def run_action(self, action: Any, default_namespace: Any = None, namespaces: Any = None) -> bool:
        """Run the conversation's actions on the chat screen.

        The key table stays the app's, one set of bindings (:data:`~specchat.tui.keys.APP_KEYS`), so the
        keymap resolves clashes in one place: Textual's ``BindingsMap.apply_keymap`` takes a key the keymap
        gives away from its other binding only within one node's bindings, and a key moved from help to a
        screen's binding would still open help. The bindings, the footer and the palette all come here.
        """
        if isinstance(action, str) and action in CHAT_ACTIONS and default_namespace in (None, self):
            default_namespace = self.chat_screen
        return await super().run_action(action, default_namespace, namespaces)

    def get_system_commands(self, screen):
        """The palette also lists every key action (so nothing depends on a function key working)."""
        yield from super().get_system_commands(screen)
        chat = self.chat_screen
        # the palette edits, flips and chooses whatever the prompt holds (the keys only in an empty prompt)
        direct = {"edit_last": chat.start_edit, "reply_prev": partial(chat.flip_reply, -1),
                  "reply_next": partial(chat.flip_reply, 1), "reply_earlier": partial(chat.choose_reply, -1),
                  "reply_later": partial(chat.choose_reply, 1)}
        for spec in APP_KEYS:
            if spec.action in ("stop", "stop_now") and not self.host.generating:
                continue
            callback = direct.get(spec.action, partial(self.run_action, spec.action))
            yield SystemCommand(spec.description, f"{spec.help} [{self.effective_keys.get(spec.id, spec.keys)}]",
                                callback)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(dict(self.effective_keys), self.chat_screen.sidebar.verify_texts()))

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

    # -- loading and switching the models --------------------------------------------------------------------
    def _start_load(self, factory: EngineFactory, close_first: ChatEngine | None = None) -> None:
        """Have the host load an engine (closing ``close_first`` first); the sidebar shows the progress."""
        if self.host.closing:
            return
        self.chat_screen.sidebar.show_loading(0.0, "starting")
        self.host.load(
            factory,
            progress=lambda fraction, what: self.post_message(LoadProgress(fraction, what)),
            loaded=lambda engine, seconds: self.post_message(EngineReady(engine, seconds)),
            failed=lambda message: self.post_message(EngineFailed(message)),
            close_first=close_first,
        )

    def _ui_gone(self) -> bool:
        """Closing (the screens may be gone already): the engine thread's late messages are not drawn."""
        return self.host.closing or not self.is_running

    def on_load_progress(self, message: LoadProgress) -> None:
        if self._ui_gone():
            return
        if self.engine is None and self.engine_error is None:
            self.chat_screen.sidebar.show_loading(message.fraction, message.what)

    def on_engine_ready(self, message: EngineReady) -> None:
        engine = message.engine
        info = engine.info()  # before the pending conversation (if any) is loaded into it, as always
        if not self.host.accept(engine):
            return  # closing: _shutdown_engine closes it
        if self.servers.available:  # a llama-server of the two answers: the A/B table compares them once both have
            self.servers.connected(self.servers.side_of(self.settings.server_url), info.target_name)
            self.chat_screen.sidebar.show_servers(self.servers.versus())
        self.chat_screen.engine_ready(engine, info, message.load_seconds)
        self.call_after_refresh(freeze_startup_heap)  # after "ready" is on screen: a one-off collection

    def on_engine_failed(self, message: EngineFailed) -> None:
        back = self.servers.failed()
        if back is not None:  # the other server could not be reached: the one we came from answers again
            self.settings = self.servers.swapped(self.settings)
            self.host.disown(id(self.servers))
            self.notify(f"{message.message}; server {self.servers.side_of(self.settings.server_url)} answers again.",
                        severity="error", timeout=12)
            self.post_message(EngineReady(back, 0.0))
            return
        self.host.fail(message.message)
        if not self._ui_gone():
            self.chat_screen.engine_failed(message.message)

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
        self.chat_screen.engine_unloaded()
        self.notify(f"Loading {label}\u2026")
        self._start_load(factory, close_first=old)

    def action_switch_server(self) -> None:
        """The other llama-server answers the next messages (``--server-b``; :mod:`specchat.tui.servers`)."""
        refusal = self.servers.refusal(self.engine, self.host.generating, self.host.loading)
        if refusal is None and self.make_factory is None and self.servers.idle is None:
            refusal = Refusal("Switching servers is not available in this session.", "warning", None)
        if refusal is not None:
            self.notify(refusal.message, severity=refusal.severity, timeout=refusal.timeout)
            return
        self.settings = self.servers.swapped(self.settings)
        leaving = self.host.unload()  # its conversation carries over
        self.chat_screen.engine_unloaded()
        ready = self.servers.begin(leaving)
        self.host.own(id(self.servers), leaving.close)  # the session not in use is closed when the app quits
        side, key = self.servers.side_of(self.settings.server_url), first_key(self.effective_keys, "switch_server", "alt+s")
        self.notify(f"Server {side} ({self.settings.server_url}) answers from now on; {key} switches back.",
                    title="Servers", timeout=6)
        if ready is not None:
            self.post_message(EngineReady(ready, 0.0))
        else:
            self._start_load(self.make_factory(self.settings.model_copy(update={"server_b_url": None})))

    # -- quitting ------------------------------------------------------------------------------------------
    async def _shutdown_engine(self) -> None:
        """Stop the reply, wait for the engine thread, close the engine (:meth:`EngineHost.shutdown`); the
        reply this stopped is saved, marked stopped, even if its end is never handled. Idempotent."""
        await self.host.shutdown(save_stopped=lambda: self.chat_screen.save_history())

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
            self.exit(return_code=self.lifecycle.exit_code)

    def _on_stop_signal(self, signum: int) -> None:
        """SIGINT / SIGTERM / SIGHUP: quit like ctrl+q (the partial reply is saved, marked stopped). On SIGHUP
        the reply is stopped and saved first, before the loop draws again (the terminal may be gone)."""
        if not self.host.closing:
            self.lifecycle.record(signum)
        if is_hangup(signum):
            if self.host.stop_turn_and_wait(timeout=HANGUP_EXIT_S):
                self.chat_screen.save_history()
            if self._running_in_terminal:
                self.lifecycle.arm_watchdog(signum)
        self.action_quit()

    async def run_async(self, *args: Any, **kwargs: Any) -> Any:
        """Textual's ``run_async`` (what ``run`` runs in a terminal; Pilot tests do not), marking that a SIGHUP
        may arm the exit watchdog, and disarming it once the app has ended normally."""
        self._running_in_terminal = True
        try:
            return await super().run_async(*args, **kwargs)
        finally:
            self.lifecycle.disarm()

    async def on_unmount(self) -> None:
        self.lifecycle.remove()
        if self._unwatch_index is not None:
            self._unwatch_index()
        await self._shutdown_engine()
