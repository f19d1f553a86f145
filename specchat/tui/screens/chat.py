"""The chat screen: the conversation on screen, and everything that changes it.

:class:`ChatScreen` is the app's default screen (as posting keeps its UI on a ``MainScreen`` under a thin
App, and Toad and oterm keep a conversation's state in the widget that shows it). It owns the widgets (the
legend, the chat pane, the prompt, the sidebar or the status bar that replaces it on a narrow terminal, the
footer) and the state of the conversation they show: the reply being generated, the messages queued behind
it, an edit in progress, the live statistics, the view toggles. It sends (:meth:`ChatScreen.submit_prompt`),
queues, edits, regenerates and flips between reply versions, starts a new chat, copies (and opens the
prompt in an editor: :mod:`specchat.tui.screens.everyday`), exports and races,
and it handles the engine's messages for a turn (pieces, stats, the turn's end, saved replies split into
tokens), which the pump posts to it from the engine thread (:mod:`specchat.tui.generation`).

What is not the conversation's stays with :class:`specchat.tui.app.SpecChatApp`: start-up, themes and the
remembered UI state, the key table, the keymap and the palette (the app routes the conversation's actions
here: :meth:`SpecChatApp.run_action`), loading and switching models, notifications, help and quitting. The
screen reads what it needs of the app through :class:`ChatApp`. Plain modules do the rest with explicit
arguments: the speculation keys (:mod:`specchat.tui.speculation`) and history (:mod:`specchat.tui.recorder`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from specchat.config import Settings
from specchat.engine.controls import ControlState
from specchat.engine.protocol import ChatEngine, EngineInfo, Message
from specchat.errors import describe_exception
from specchat.tui import speculation, versions
from specchat.tui.engine_host import EngineFactory, EngineHost
from specchat.tui.keys import first_key
from specchat.tui.generation import pump_turn
from specchat.tui.outcomes import Outcome, Refusal
from specchat.tui.messages import DraftingOff, PiecesBatch, SavedRepliesDetokenized, StatsUpdated, TurnFinished
from specchat.tui.recorder import Recorder
from specchat.tui.sanitize import text as inert
from specchat.tui.screens.everyday import EverydayKeys
from specchat.tui.screens.history import HistoryScreen
from specchat.tui.screens.race import race_for, race_text
from specchat.tui.state import UiState
from specchat.tui.stats import LiveStats
from specchat.tui.widgets.chat import AssistantMessage, ChatLog, ChatNotice, UserMessage, reply_title
from specchat.tui.widgets.prompt import PromptInput
from specchat.tui.widgets.sidebar import Sidebar
from specchat.tui.widgets.token_view import legend_content

#: below this terminal width the sidebar (36 columns) hides by itself and a one-line status bar replaces it:
#: at 100 columns the chat keeps 64 (a reply box of ~60), at 80 it would keep 44 and at 60 only ~22
SIDEBAR_MIN_WIDTH = 100


class ChatApp(Protocol):
    """What the chat screen reads from the app (:class:`specchat.tui.app.SpecChatApp`): not imported, so the
    app can own the screen without an import circle."""

    settings: Settings
    make_factory: Callable[[Settings], EngineFactory] | None
    ui_state: UiState
    effective_keys: dict[str, str]

    def save_ui_state(self) -> None: ...


class ChatScreen(EverydayKeys, Screen[None]):
    """The conversation on screen. See the module docstring.

    ``host`` is the app's engine host (the engine thread, the engine, the turn); ``recorder`` the link to
    history. :attr:`mounted` is set once the widgets are mounted (the app starts loading the models then).
    """

    def __init__(
        self,
        host: EngineHost,
        recorder: Recorder,
        clock: Callable[[], float],
        *,
        history_note: str | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.recorder = recorder
        self._clock = clock
        self._history_note = history_note
        #: set by on_mount: the app's start-up waits for it (the sidebar shows the loading, the chat its notices)
        self.mounted = asyncio.Event()
        self.stats = LiveStats()
        self.show_ghosts = True
        self.markdown_view = False
        self._current: AssistantMessage | None = None  # the reply being generated
        self._after_turn: list[Callable[[], None]] = []

    @property
    def session(self) -> ChatApp:
        return self.app  # type: ignore[return-value]

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

    def on_mount(self) -> None:
        self.sidebar.on_change = self._update_status_bar
        # where drafts came from, in words: a saved conversation's title and age, and the one on screen
        self.chat.describe_conversation = self.sidebar.describe_conversation = self.recorder.describe
        self.chat.current_conversation = self.sidebar.current_conversation = lambda: self.recorder.conversation_id
        self.apply_sidebar()
        self.sidebar.show_pair(None, None)
        self.sidebar.show_controls(None)
        if self._history_note:
            self.chat.mount(ChatNotice(self._history_note))
        self.mounted.set()

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
    def engine(self) -> ChatEngine | None:
        return self.host.engine

    def assistant_messages(self) -> list[AssistantMessage]:
        return self.chat.assistant_messages()

    def control_state(self) -> ControlState | None:
        return self.engine.controls.snapshot() if self.engine is not None else None

    def _ui_gone(self) -> bool:
        """The app is closing (its screens may be gone already): messages posted by the engine thread are not
        drawn any more. A reply still being generated is saved by the host's shutdown, marked stopped.
        (Found by the state fuzz: a StatsUpdated handled after the screen was gone raised NoMatches.)"""
        return self.host.closing or not self.app.is_running

    def refuse(self, refusal: Refusal) -> None:
        self.notify(refusal.message, severity=refusal.severity, timeout=refusal.timeout)  # type: ignore[arg-type]

    def engine_or_explain(self) -> ChatEngine | None:
        if self.engine is not None:
            return self.engine
        if self.host.error is not None:
            self.notify(f"No model is loaded: {self.host.error}", severity="error", timeout=10)
        else:
            self.notify("The model is still loading; try again in a moment.", severity="warning")
        return None

    def idle_engine(self, busy: str, timeout: float | None = None) -> ChatEngine | None:
        """The engine, if one is loaded and no reply is being generated; else None, having said why (``busy``:
        the warning while a reply is generated)."""
        engine = self.engine_or_explain()
        if engine is not None and self.host.generating:
            self.notify(busy, severity="warning", timeout=timeout)
            return None
        return engine

    # -- the sidebar, or the status bar on a narrow terminal ------------------------------------------------
    def sidebar_visible(self, width: int | None = None) -> bool:
        """Shown unless hidden with its key, or the terminal is narrower than :data:`SIDEBAR_MIN_WIDTH`."""
        width = self.app.size.width if width is None else width
        return self.session.ui_state.sidebar is not False and width >= SIDEBAR_MIN_WIDTH

    def apply_sidebar(self, width: int | None = None) -> None:
        visible = self.sidebar_visible(width)
        self.sidebar.display = visible
        self.query_one("#status-bar", Static).display = not visible
        self._update_status_bar()

    def _update_status_bar(self) -> None:
        bar = self.query_one("#status-bar", Static)
        if bar.display:
            bar.update(Content(self.sidebar.summary()))

    def action_toggle_sidebar(self) -> None:
        width = self.app.size.width
        if width < SIDEBAR_MIN_WIDTH:
            self.notify(
                f"The terminal is {width} columns wide; the sidebar needs {SIDEBAR_MIN_WIDTH}. "
                "The status bar shows tok/s, acceptance and K.", timeout=5,
            )
            return
        self.session.ui_state.sidebar = not self.sidebar_visible()
        self.apply_sidebar()
        self.session.save_ui_state()

    # -- the models' state, as the app loads and switches them --------------------------------------------
    def engine_ready(self, engine: ChatEngine, info: EngineInfo, load_seconds: float) -> None:
        """The app took a loaded engine: show it, and colour the saved replies already on screen."""
        state = engine.controls.snapshot()
        self.sidebar.show_ready(f"ready \u00b7 loaded in {load_seconds:.1f} s")
        self.sidebar.show_pair(info, state)
        self.sidebar.show_controls(state)
        if info.note:
            self.chat.mount(ChatNotice(info.note))
        self._colour_saved_replies()  # a conversation opened while loading, or carried over to a new model

    def engine_failed(self, message: str) -> None:
        self.sidebar.show_error("model error \u2013 see the chat")
        self.chat.mount(
            ChatNotice(
                f"Could not load the model: {message}\n"
                "You can still read saved chats (ctrl+o). Fix the setting and restart specchat, or pick "
                "another model with ctrl+p \u2192 Model.",
                error=True,
            )
        )

    def engine_unloaded(self) -> None:
        """The app unloaded the engine to load another pair: the numbers start again."""
        self.stats.engine_changed()
        self.sidebar.show_stats(self.stats.snapshot())
        self.sidebar.show_pair(None, None)
        self.sidebar.show_controls(None)
        self.sidebar.show_history_index(None)  # the next engine's suffix corpus, if it has one, reports its own

    # -- sending -----------------------------------------------------------------------------------------
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
        engine = self.engine_or_explain()
        if engine is None:
            return False
        if self.host.generating:
            self.chat.queue(text)
            return True
        if self.editing:
            self._send_edit(engine, text)
            return True
        self._start_turn(partial(engine.send, text), [*engine.messages, Message("user", text)], user_text=text)
        return True

    def _send_next_queued(self) -> None:
        """Start the reply to the oldest queued message (its widget stays where it is, now a sent message)."""
        engine = self.engine
        if engine is None or self.host.generating or self.host.closing:
            return
        widget = self.chat.next_queued()
        if widget is not None:
            messages = [*engine.messages, Message("user", widget.text)]
            self._start_turn(partial(engine.send, widget.text), messages, user_widget=widget)

    def _unqueue_to_prompt(self) -> int:
        """Take the queued messages off the chat and put their text back in the prompt (before what it holds)."""
        texts = self.chat.unqueue()
        if texts:
            prompt = self.prompt
            prompt.set_text("\n\n".join([*texts, prompt.text] if prompt.text.strip() else texts))
        return len(texts)

    # -- editing the last message -----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The conversation's keys (routed here by the app) act only while this screen is on top: a dialog's
        own keys win (the app's bindings are priority bindings). ``edit_last`` acts only from an empty prompt.

        "stop" stays enabled when idle (a no-op): toggling it would re-compose the footer twice per turn, each
        a layout pass of the whole screen while the engine runs."""
        if self.app.screen is not self:
            return False
        if action == "edit_last":
            # False lets the key through to the focused widget: up still moves the prompt's cursor
            return self._edit_key_applies()
        if action == "stop_now":  # ctrl+c: while a reply streams or a send is on its way; else it copies
            return self.host.generating or any(p.submits_pending for p in self.query(PromptInput))
        return True

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
        engine = self.idle_engine("A reply is still being generated: press Esc to stop it first, then edit.")
        if engine is None:
            return
        last = next((m for m in reversed(engine.messages) if m.role == "user"), None)
        if last is None:
            self.notify("Nothing to edit yet: send a message first.")
            return
        if not self.editing:
            self.chat.mark_editing(True)
        keys = self.session.effective_keys
        send, cancel = first_key(keys, "send", "enter"), first_key(keys, "stop", "escape")
        self.prompt.begin_edit(last.content, f"editing your last message \u00b7 {send} resends \u00b7 {cancel} cancels")

    @property
    def editing(self) -> bool:
        """The last user message is in the prompt for editing (:meth:`start_edit`)."""
        return self.prompt.editing

    def _end_edit(self, *, restore: bool) -> None:
        """Leave edit mode; ``restore`` puts back what the prompt held before the edit began."""
        if self.editing:
            self.chat.mark_editing(False)
            self.prompt.end_edit(restore=restore)

    def _send_edit(self, engine: ChatEngine, text: str) -> None:
        """Replace the last exchange: in the chat pane, in history (before generating), then in the engine."""
        messages = list(engine.messages)
        last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
        self._end_edit(restore=False)
        if last_user is None:  # the conversation changed under the edit (e.g. a new chat): send it as new
            self._start_turn(partial(engine.send, text), [*messages, Message("user", text)], user_text=text)
            return
        self.chat.remove_last_exchange()
        # _start_turn saves first: if the app dies during the new reply, the old one is not left saved as current
        kept = [*messages[:last_user], Message("user", text)]
        self._start_turn(partial(engine.edit_last, text), kept, user_text=text)

    # -- a turn: started here, its messages from the engine thread -------------------------------------------
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
        saves it too (the host's shutdown). ``user_text`` is drawn as the user's message first;
        ``user_widget`` is a message already in the chat (a queued one): the reply goes right after it.
        """
        if self.host.closing:
            return
        self.save_history(prompt_messages)
        chat = self.chat
        if user_text is not None:
            chat.mount(UserMessage(user_text))
        title = reply_title(self.engine.info() if self.engine else None, self.control_state())
        assistant = AssistantMessage(title=title, show_ghosts=self.show_ghosts, markdown=self.markdown_view)
        stop_key = first_key(self.session.effective_keys, "stop", "escape")
        assistant.border_subtitle = inert(f"generating\u2026 {'Esc' if stop_key == 'escape' else stop_key} stops")
        chat.add_reply(assistant, after=user_widget)
        self._current = assistant
        self.host.start_turn(lambda turn_id: pump_turn(turn_id, start, self.post_message, self.stats, self._clock))

    def on_pieces_batch(self, message: PiecesBatch) -> None:
        if message.turn_id != self.host.turn_id or self._current is None or self._ui_gone():
            return
        if message.pieces:
            self._current.append(message.pieces)
        self.chat.add_notices(message.notices, self._current)
        # the engine says each auto-K change once: one line, one toast each
        self.chat.add_notices(message.auto_k_notices, self._current, kind="auto-k")
        for line in message.auto_k_notices:
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
            self.chat.mark_recorded(assistant, self.engine.messages if self.engine is not None else [], message.turn)
        if message.error:
            self.chat.mount(
                ChatNotice(
                    f"The reply ended with an error: {message.error}\n"
                    "The conversation is still usable: send again, or regenerate with "
                    f"{self.session.effective_keys.get('regenerate', 'ctrl+r')}.",
                    error=True,
                )
            )
        self.save_history()
        if message.turn is not None and self.recorder.store is not None:  # this pair on other builds, off the UI thread
            self.sidebar.compare_builds(self.recorder.store.path, message.turn)
        if self.engine is not None:  # the engine may have learned its settings (a llama-server's K, drafter)
            self.controls_changed()
        callbacks, self._after_turn = self._after_turn, []
        for callback in callbacks:
            callback()
        self._send_next_queued()

    def on_drafting_off(self, message: DraftingOff) -> None:
        """Auto-K turned drafting off in a reply: offer fixed K (the notice itself is in the chat)."""
        if self._ui_gone():
            return
        self.notify(
            f"Auto-K judged drafting with {message.drafter} unprofitable and turned it off. To see its colours "
            f"anyway: ctrl+p → Use fixed K (K {speculation.fixed_k(self.control_state())}, auto-K off).",
            title="auto-K", timeout=12,
        )

    # -- history: saving, opening, the browser -------------------------------------------------------------
    def save_history(self, messages: list[Message] | None = None) -> None:
        """Make the saved conversation equal ``messages`` (default: the engine's) and create it if needed."""
        engine = self.engine
        if engine is None:
            return
        problem = self.recorder.save(
            engine, list(engine.messages) if messages is None else messages, self.session.settings.system_prompt
        )
        if problem:
            self.notify(problem, severity="error", timeout=10)

    def action_history(self) -> None:
        store = self.recorder.store
        if store is None:
            self.notify(self._history_note or "History is off in this session.", severity="warning")
            return
        self.app.push_screen(
            HistoryScreen(store, self.recorder.export_dir, on_deleted=self._on_conversation_deleted),
            self._open_conversation,
        )

    def _on_conversation_deleted(self, conv_id: int) -> None:
        """The open conversation was deleted in the browser: start a new chat, as chat apps do (a reply being
        generated is stopped first), and never save it again under a new id meanwhile (:class:`Recorder`)."""
        if self.recorder.forget(conv_id):
            self.action_new_chat()

    def _open_conversation(self, conv_id: int | None) -> None:
        if conv_id is None:
            return
        if self.host.generating:
            self.notify("Stop the reply first (Esc), then open the conversation.", severity="warning")
            return
        try:
            conv, messages = self.recorder.open(conv_id)
        except Exception as exc:
            self.notify(f"Could not open conversation {conv_id}: {describe_exception(exc)}", severity="error")
            return
        self._end_edit(restore=True)
        self.chat.show_messages(messages, show_ghosts=self.show_ghosts, markdown=self.markdown_view)
        if self.engine is not None:
            self.engine.load(messages)
            self._colour_saved_replies()
            hint = "send a message to continue it"
        else:
            self.host.pending_messages = messages
            hint = "it continues once a model is loaded" if self.host.error is None else "read-only: no model"
        self.notify(f"Opened \u201c{conv.title or conv_id}\u201d; {hint}.", title="History", markup=False)

    def _colour_saved_replies(self) -> None:
        """Have the engine split every uncoloured saved reply into its tokens' text (on the engine thread).

        History keeps each reply's token ids and kinds but not the text of each token; the loaded engine
        gives that text back (:meth:`ChatEngine.detokenize_pieces`) and
        :meth:`AssistantMessage.show_saved_pieces` redraws the reply in its kind colours if the pieces match
        it exactly (they do not when another target model wrote it: the reply then stays uncoloured).
        """
        jobs = self.chat.uncoloured_saved_replies()
        self.host.detokenize(jobs, lambda results: self.post_message(SavedRepliesDetokenized(results)))

    def on_saved_replies_detokenized(self, message: SavedRepliesDetokenized) -> None:
        if self._ui_gone():
            return
        for reply, pieces in message.results:
            if reply.is_attached:  # not replaced meanwhile by another conversation or a new chat
                reply.show_saved_pieces(pieces)

    # -- the conversation's keys ---------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.editing and not self.host.generating:
            self._end_edit(restore=True)
            return
        if self.engine is not None and self.host.generating:
            self.engine.controls.request_stop()
            if self._current is not None:
                self._current.border_subtitle = "stopping\u2026"

    def action_stop_now(self) -> None:
        """The ``stop_now`` key (ctrl+c): stop the reply with no wait for an escape sequence (see keys.py), in
        order with the keys before it: "hi", Enter, ctrl+c in one burst sends "hi", then stops its reply (a
        priority binding runs here before the prompt has sent: :meth:`PromptInput.after_queued`)."""
        self.prompt.after_queued(self.action_stop)

    def action_regenerate(self) -> None:
        engine = self.idle_engine("A reply is still being generated: press Esc first.")
        if engine is None:
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
        """Show the previous (``step`` -1) or next (+1) version of the chosen reply (the last, or an earlier one:
        :meth:`choose_reply`) and continue from it: the engine chooses it (:meth:`ChatEngine.select_alternate`:
        nothing is decoded), the pane draws it with its own colours and numbers (:meth:`AssistantMessage.show_version`),
        history saves the choice. Refused during a reply (the engine would choose a version under a reply being
        generated after it; the keys work again once it ends)."""
        engine = self.idle_engine("A reply is being generated: flip between versions once it ends (Esc stops it).", 4)
        if engine is None:
            return
        at, reply = self.chat.chosen_reply()
        chosen = versions.flip(engine, step, first_key(self.session.effective_keys, "regenerate", "ctrl+r"), at)
        if isinstance(chosen, Refusal):
            self.refuse(chosen)
            return
        if reply is not None and not reply.show_version(chosen):
            self._colour_saved_replies()
        self.save_history()

    def action_reply_earlier(self) -> None:
        self.choose_reply(-1)

    def action_reply_later(self) -> None:
        self.choose_reply(+1)

    def choose_reply(self, step: int) -> None:
        """The ``reply_earlier`` / ``reply_later`` keys: choose the reply before (``step`` -1) or after (+1) the
        chosen one as the one the flip keys flip (:meth:`ChatLog.choose_reply`), and say which it is."""
        engine = self.idle_engine("A reply is being generated: choose a reply once it ends (Esc stops it).", 4)
        if engine is not None:
            keys = self.session.effective_keys
            flip = f"{first_key(keys, 'reply_prev', 'left')} / {first_key(keys, 'reply_next', 'right')}"
            self.notify(self.chat.choose_reply(engine.messages, step, flip), timeout=3)

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
        self._end_edit(restore=True)
        if self.engine is not None:
            self.engine.reset(self.session.settings.system_prompt or None)
        self.host.pending_messages = None
        self.recorder.new_conversation()
        self.chat.remove_children()
        self.chat.chosen = None
        self.notify("New chat.", timeout=2)

    def action_export(self) -> None:
        """Write this chat as Markdown into the exports directory (:meth:`Recorder.export`)."""
        try:
            path = self.recorder.export(self.chat.exchanges())
        except Exception as exc:
            self.notify(f"Could not export: {describe_exception(exc)}", severity="error", markup=False)
            return
        if path is None:
            self.notify("Nothing to export yet.")
            return
        self.notify(f"Exported to {path}", title="Export", markup=False)

    # -- display -------------------------------------------------------------------------------------------
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

    # -- speculation: keys and palette entries (specchat.tui.speculation; applied at the next round) ----------
    def controls_changed(self, note: str | None = None) -> None:
        """Redraw the controls and the pair; ``note`` says what changed (a toast)."""
        state = self.control_state()
        self.sidebar.show_controls(state)
        self.sidebar.show_pair(self.engine.info() if self.engine else None, state)
        if note:
            self.notify(note + (" (from the next step)" if self.host.generating else ""), timeout=2)

    def speculate(self, change: Callable[[ChatEngine], Outcome]) -> None:
        """Apply one of :mod:`specchat.tui.speculation`'s changes to the engine and show its outcome."""
        engine = self.engine_or_explain()
        if engine is None:
            return
        outcome = change(engine)
        if isinstance(outcome, Refusal):
            self.refuse(outcome)
        else:
            self.controls_changed(outcome.note)

    def action_k_up(self) -> None:
        self.speculate(speculation.k_up)

    def action_k_down(self) -> None:
        self.speculate(speculation.k_down)

    def action_toggle_speculation(self) -> None:
        self.speculate(speculation.toggle_speculation)

    def action_toggle_auto_k(self) -> None:
        self.speculate(speculation.toggle_auto_k)

    def set_k(self, k: int) -> None:
        self.speculate(partial(speculation.set_k, k=k))

    def set_drafter(self, name: str) -> None:
        self.speculate(partial(speculation.set_drafter, name=name))

    def set_temperature(self, temperature: float) -> None:
        self.speculate(partial(speculation.set_temperature, temperature=temperature))

    def use_fixed_k(self) -> None:
        self.speculate(speculation.use_fixed_k)

    # -- the race (specchat.tui.screens.race) ------------------------------------------------------------------
    def race_text(self) -> str | None:
        """What the race key races (:func:`~specchat.tui.screens.race.race_text`)."""
        return race_text(self.prompt.text, self.engine.messages if self.engine is not None else [])

    def action_race(self) -> None:
        """Race the prompt's text or the last message, speculation off then on (:func:`race_for` says which
        race this session can run, or why none)."""
        engine = self.engine_or_explain()
        if engine is None:
            return
        screen = race_for(engine, self.race_text(), self.host, self._clock, self.session.settings,
                          self.session.make_factory)
        if isinstance(screen, Refusal):
            self.refuse(screen)
        else:
            self.app.push_screen(screen)
