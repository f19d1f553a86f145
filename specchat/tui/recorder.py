"""The conversation on screen as history holds it: its id, saving it, opening a saved one, exporting it.

:class:`Recorder` is the chat screen's link to :class:`~specchat.history.HistoryStore`, with no Textual: the
screen (:class:`specchat.tui.screens.chat.ChatScreen`) calls it with the engine and the messages, and shows
what it returns (an error line, a path). Keeping the id here, beside the only code that writes it, is what
keeps history's promise (:mod:`specchat.history`): the conversation is saved before each reply is generated
and again when it ends, so if the app dies mid-reply only the reply is lost.

A conversation deleted in the history browser while it is on screen is *forgotten*: it is never saved again
under a new id behind the user's back (the screen starts a new chat, as chat apps do).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from specchat.engine.protocol import ChatEngine, Message
from specchat.errors import describe_exception
from specchat.history import ConversationRecord, HistoryStore, default_title, write_export


class Recorder:
    """The saved conversation behind the chat on screen (``store`` None: history is off in this session)."""

    def __init__(self, store: HistoryStore | None, export_dir: Path) -> None:
        self.store = store
        self.export_dir = export_dir
        #: the saved conversation shown; None until the first message is saved (or after a new chat)
        self.conversation_id: int | None = None
        self._forgotten = False  # deleted in the browser while shown: see forget()
        self._described: dict[int, tuple[str, str] | None] = {}  # describe()'s answers, by conversation id

    def save(self, engine: ChatEngine, messages: Sequence[Message], system_prompt: str) -> str | None:
        """Make the saved conversation equal ``messages`` (creating it on the first user message); returns
        what went wrong as one line, or None (also when there is nothing to save or history is off)."""
        if self.store is None or self._forgotten or not any(m.role == "user" for m in messages):
            return None
        try:
            info = engine.info()
            state = engine.controls.snapshot()
            if self.conversation_id is None:
                self.conversation_id = self.store.create_conversation(
                    target=info.target_name, draft=info.draft_name, system_prompt=system_prompt
                )
            self.store.sync(
                self.conversation_id, list(messages), target=info.target_name, auto_k=state.auto_k,
                sampling=state.sampling,
            )
        except Exception as exc:
            return f"Could not save the conversation: {describe_exception(exc)}"
        return None

    def open(self, conv_id: int) -> tuple[ConversationRecord, list[Message]]:
        """Load a saved conversation and make it the one recorded (raises if it cannot be read: nothing
        changes then)."""
        assert self.store is not None, "the history browser opens only with a store"
        conv, messages = self.store.load(conv_id)
        self.conversation_id = conv_id
        return conv, messages

    def describe(self, conv_id: int) -> tuple[str, str] | None:
        """(title, when it was last written) of saved conversation ``conv_id``, for naming where a draft came from
        (:mod:`specchat.tui.draft_source`); None when history is off or has no such conversation. Remembered per id:
        the sidebar asks for it with every stats update that names a copy from the history."""
        if self.store is None:
            return None
        cache = self._described
        if conv_id not in cache:
            try:
                record = self.store.get_conversation(conv_id)
                cache[conv_id] = (record.title, record.updated)
            except Exception:  # noqa: BLE001 - deleted meanwhile, or unreadable: the id alone is said
                cache[conv_id] = None
        return cache[conv_id]

    def forget(self, conv_id: int) -> bool:
        """``conv_id`` was deleted in the browser: if it is the one shown, stop recording it (True: the screen
        starts a new chat); it is not saved again under a new id meanwhile."""
        self._described.pop(conv_id, None)  # a draft copied from it before is named by its id alone now
        if conv_id != self.conversation_id:
            return False
        self.conversation_id = None
        self._forgotten = True
        return True

    def new_conversation(self) -> None:
        """A new chat: the next message saved starts a new conversation."""
        self.conversation_id = None
        self._forgotten = False

    def export(self, on_screen: Sequence[tuple[str, str, bool]]) -> Path | None:
        """Write this chat as Markdown into :attr:`export_dir` (:func:`specchat.history.write_export`).

        A saved conversation is exported from history (every version, the numbers); an unsaved one (history
        off) from ``on_screen``, its ``(role, text, stopped)`` exchanges. None: nothing to export yet. Raises
        with the reason if it cannot write."""
        if self.store is not None and self.conversation_id is not None:
            conv_id = self.conversation_id
            text = self.store.export_markdown(conv_id)
            title = self.store.get_conversation(conv_id).title
        else:
            users = [text for role, text, _ in on_screen if role == "user"]
            if not users:
                return None
            conv_id, text, title = None, unsaved_markdown(on_screen), default_title(users[0])
        return write_export(self.export_dir, conv_id, title, text)


def unsaved_markdown(exchanges: Sequence[tuple[str, str, bool]]) -> str:
    """The Markdown of a chat history does not hold: ``(role, text, stopped)`` as headed sections."""
    lines = ["# specchat conversation", ""]
    for role, text, stopped in exchanges:
        if role == "user":
            lines += ["## You", "", text, ""]
        else:
            lines += ["## Assistant" + (" (stopped)" if stopped else ""), "", text, ""]
    return "\n".join(lines)
