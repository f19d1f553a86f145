"""The conversation column: user messages, streamed assistant replies, notices.

An :class:`AssistantMessage` holds a :class:`TokenView` (the coloured token stream) and, once finished and
when the Markdown view is on, a :class:`~textual.widgets.Markdown` of the reply text (code blocks
highlighted). Switching views only toggles ``display``: the token view and its colours are never lost.

**Versions.** A regenerated reply keeps the earlier ones (:attr:`Message.alternates`); the reply shows
which version it is (``reply 2/3``) and :meth:`AssistantMessage.show_version` draws another version in
place: its own colours and its own numbers (its :class:`Turn`: tok/s, acceptance, and how it ran, in the
title). A version drawn in colour in this session keeps its pieces, ghosts included, so flipping back draws
it exactly as it streamed; any other version is drawn from its saved text and coloured by the engine like a
reply reopened from history (:meth:`AssistantMessage.show_saved_pieces`).
"""

from __future__ import annotations

from collections.abc import Callable

from textual.containers import Vertical
from textual.widgets import Static

from specchat.engine.controls import ControlState
from specchat.engine.events import Piece, Turn
from specchat.engine.protocol import EngineInfo, Message
from specchat.tui import versions
from specchat.tui.draft_source import Describe, origin_summary
from specchat.tui.sanitize import text as inert
from specchat.tui.widgets.paging import PagedVerticalScroll
from specchat.tui.widgets.token_view import TokenView


def version_title(turn: Turn | None) -> str:
    """A version's title from its own Turn: the target, and how the reply ran (the A/B table's modes,
    :func:`specchat.engine.telemetry.ab.turn_mode`)."""
    if turn is None:
        return "assistant (saved)"
    from specchat.engine.telemetry.ab import turn_mode  # numpy: not at start-up

    mode = turn_mode(turn)
    target = turn.target or "assistant"
    if mode == "off":
        return f"{target} \u00b7 no speculation"
    k = f"K={turn.k_max}" if turn.k_min == turn.k_max else f"K={turn.k_min}\u2013{turn.k_max}"
    how = {"on": k, "barely": "drafter barely ran", "mixed": "speculation switched mid-reply"}[mode]
    return f"{target} \u00b7 {turn.drafter or '?'} \u00b7 {how}"


def reply_title(info: EngineInfo | None, state: ControlState | None) -> str:
    """A reply's title while it is generated: the target, and how it runs (the drafter and K in effect)."""
    if state is None or info is None:
        return "assistant"
    if not state.speculative:
        return f"{info.target_name} \u00b7 no speculation"
    k = "auto-K" if state.auto_k else f"K={state.k}"
    return f"{info.target_name} \u00b7 {state.drafter or info.draft_name} \u00b7 {k}"


def turn_summary(turn: Turn, *, describe: Describe | None = None, current: int | None = None) -> str:
    """A finished reply's figures; with drafts kept, where they came from (:func:`origin_summary`: ``describe``
    names a saved conversation, ``current`` is the id the one on screen is saved under)."""
    parts = [f"{turn.predicted_n} tok", f"{turn.predicted_per_second:.1f} tok/s"]
    if turn.draft_n:
        parts.append(f"acceptance {turn.acceptance * 100:.0f}%")
        parts.append(f"mean len {turn.mean_len:.2f}")
        origins = origin_summary(turn.accepted_by_origin, turn.history_conversations, current=current,
                                 describe=describe)
        if origins:
            parts.append(origins)
    else:
        parts.append("no drafts")
    if turn.prompt_n:
        parts.append(f"prompt {turn.prompt_n} tok in {turn.prompt_ms:.0f} ms")
    return " \u00b7 ".join(parts)


class UserMessage(Static):
    """What the user sent (shown as plain text, never parsed as markup)."""

    def __init__(self, text: str) -> None:
        super().__init__(inert(text), classes="message user-message")
        self.text = text
        self.border_title = "you"


class ChatNotice(Static):
    """A line in the chat that is not a message: notices, errors, context trimming."""

    def __init__(self, text: str, *, error: bool = False) -> None:
        super().__init__(inert(text), classes="notice error" if error else "notice")
        self.text = text


class AssistantMessage(Vertical):
    """One reply: streamed into a TokenView; optionally shown as Markdown once finished.

    The border title (model and drafter names) and subtitle (the stop reason) are shown as text, never markup.
    """

    def __init__(self, *, title: str = "assistant", show_ghosts: bool = True, markdown: bool = False) -> None:
        super().__init__(classes="message assistant-message streaming")
        self.border_title = inert(title)
        self.border_subtitle = "generating\u2026"
        self.tokens = TokenView(show_ghosts=show_ghosts, classes="reply-tokens")
        self._markdown = None  # textual.widgets.Markdown, created on first use
        self._want_markdown = markdown
        self.finished = False
        self.stopped = False
        self.error: str | None = None
        self.turn: Turn | None = None
        self.saved_message: Message | None = None  # a reply reopened from history
        self.saved_coloured = False  # ... drawn token by token in its kind colours
        #: the pieces drawn now, as streamed (ghosts included); none while a saved reply is drawn uncoloured
        self.pieces: list[Piece] = []
        #: which version of its reply this is (:meth:`Message.versions` index) and how many there are
        self.version = (0, 1)
        #: the pieces of each version drawn in colour in this session, by version index
        self.version_pieces: dict[int, list[Piece]] = {}
        #: its place in the engine's messages once the engine recorded it (None: not recorded, e.g. a failed turn)
        self.place: int | None = None

    def compose(self):
        yield self.tokens

    def on_mount(self) -> None:
        # a reply finished before it was mounted (reopened from history) with the Markdown view on
        if self._want_markdown and self.finished:
            self.set_markdown(True)

    # -- streaming -----------------------------------------------------------------------------------
    def append(self, pieces: list[Piece]) -> None:
        self.pieces.extend(pieces)
        self.tokens.append_pieces(pieces)

    def finish(self, turn: Turn | None, error: str | None = None, *, stopped: bool = False) -> None:
        """The reply is complete; ``stopped`` marks it stopped even if ``turn`` does not say so (a saved reply)."""
        self.finished = True
        self.tokens.set_streaming(False)
        self.turn = turn
        self.error = error
        self.remove_class("streaming")
        self.stopped = stopped or bool(turn is not None and turn.stop_reason == "stopped")
        if self.stopped:
            self.add_class("stopped")
        if error:
            self.add_class("failed")
        self._show_subtitle()
        if self._want_markdown:
            self.set_markdown(True)

    def _show_subtitle(self) -> None:
        turn, error = self.turn, self.error
        index, count = self.version
        subtitle = [f"reply {index + 1}/{count}"] if count > 1 else []
        if self.stopped:
            subtitle.append("stopped")
        elif turn is not None and turn.stop_reason not in ("eos", "stop", ""):  # "stop": a turn marker (engine.chat)
            subtitle.append(f"ended: {turn.stop_reason}")
        if error:
            subtitle.append("error")
        if turn is not None:
            log = next((a for a in self.ancestors if isinstance(a, ChatLog)), None)
            current = log.current_conversation() if log is not None and log.current_conversation else None
            describe = log.describe_conversation if log is not None else None
            subtitle.append(turn_summary(turn, describe=describe, current=current))
            # on hover, too: a narrow pane cuts the subtitle before the sources
            origins = origin_summary(turn.accepted_by_origin, turn.history_conversations, current=current,
                                     describe=describe)
            self.tooltip = inert(origins) if origins else None
        if self.ghosts_not_saved:
            subtitle.append("ghosts not saved")
        self.border_subtitle = inert(" \u00b7 ".join(subtitle))

    @property
    def ghosts_not_saved(self) -> bool:
        """This reply is drawn from history, and it had rejected drafts: history keeps a reply's tokens and
        their kinds, not the drafts that were rejected, so its ghosts cannot be shown (said on the reply rather
        than letting a reply that drafted look as if nothing was ever rejected)."""
        turn = self.turn
        return (
            self.saved_message is not None and turn is not None and turn.draft_n > turn.draft_n_accepted
        )

    # -- versions (regenerate) ----------------------------------------------------------------------------
    def set_versions(self, message: Message) -> None:
        """This widget shows ``message`` (the chosen version of its reply): note which one of how many, and keep
        its pieces if they are drawn in colour (streamed, or coloured from history)."""
        self.version = (message.alternate_index if message.alternates else 0, len(message.alternates) + 1)
        if self.pieces and (self.saved_message is None or self.saved_coloured):
            self.version_pieces[self.version[0]] = list(self.pieces)
        if self.version[1] > 1:  # every version titled alike, from its own Turn (not the settings it began with)
            self.border_title = inert(version_title(message.stats))
        if self.finished:
            self._show_subtitle()

    def keep_versions_of(self, other: AssistantMessage) -> None:
        """Take over the pieces of the versions ``other`` drew (a regenerated reply replaces its widget)."""
        self.version_pieces = {**other.version_pieces, **self.version_pieces}

    def show_version(self, message: Message) -> bool:
        """Draw ``message``, another version of this reply, in place: its pieces if this session drew it in
        colour (True), else its saved text, uncoloured until :meth:`show_saved_pieces` (False)."""
        index = message.alternate_index if message.alternates else 0
        pieces = self.version_pieces.get(index)
        self.tokens.clear()
        self.pieces = []
        if pieces is not None:
            self.saved_message, self.saved_coloured = None, False
            self.append(pieces)
        else:
            self.saved_message, self.saved_coloured = message, False
            self.tokens.append_saved(message.content)
        if self._markdown is not None:  # the Markdown view of the other version is stale
            self._markdown.remove()
            self._markdown = None
        self.turn, self.error = message.stats, None
        self.stopped = message.stopped
        self.set_class(self.stopped, "stopped")
        self.remove_class("failed")
        self.set_versions(message)
        if self._want_markdown:
            self.set_markdown(True)
        return pieces is not None

    def load_saved(self, message: Message) -> None:
        """Show a saved reply, uncoloured: history stores its token ids and kinds but not per-token text.

        The app then asks the engine for the text of each token and calls :meth:`show_saved_pieces`.
        """
        self.saved_message = message
        self.tokens.append_saved(message.content)
        self.set_versions(message)
        self.finish(message.stats, None, stopped=message.stopped)

    def show_saved_pieces(self, pieces: list[str]) -> bool:
        """Redraw the saved reply token by token in its kind colours; ``pieces`` is one text per stored token.

        Refused (returns False, the reply stays as it is) unless the pieces fit the saved message: one per
        token and per kind, and together exactly its text. A conversation saved with another target model
        gives other pieces for the same ids, so this check is what keeps a wrong split off the screen.
        """
        message = self.saved_message
        if message is None or self.saved_coloured:
            return False
        if not (len(pieces) == len(message.tokens) == len(message.kinds)) or "".join(pieces) != message.content:
            return False
        self.tokens.clear()
        self.pieces = []
        saved = zip(pieces, message.kinds, message.tokens)
        self.append([Piece(text, kind, token) for text, kind, token in saved])  # type: ignore[arg-type]
        self.saved_coloured = True
        self.version_pieces[self.version[0]] = list(self.pieces)
        return True

    # -- views ------------------------------------------------------------------------------------------
    @property
    def reply_text(self) -> str:
        return self.tokens.reply_text

    @property
    def markdown_shown(self) -> bool:
        return self._markdown is not None and self._markdown.display

    def set_markdown(self, on: bool) -> None:
        """Show the finished reply as Markdown (``on``) or as tokens; before the reply is finished or mounted,
        only remember the choice (:meth:`finish` and :meth:`on_mount` apply it)."""
        self._want_markdown = on
        if not self.finished or not self.is_attached:
            return
        if on:
            if self._markdown is None:
                from textual.widgets import (
                    Markdown,  # markdown-it + pygments: imported on first use (start-up)
                )

                self._markdown = Markdown(self.reply_text, classes="reply-markdown")
                self.mount(self._markdown)
            self._markdown.display = True
            self.tokens.display = False
        else:
            if self._markdown is not None:
                self._markdown.display = False
            self.tokens.display = True

    def set_ghosts(self, show: bool) -> None:
        self.tokens.set_show_ghosts(show)


class ChatLog(PagedVerticalScroll):
    """The scrolling conversation; stays pinned to the bottom while a reply streams (until you scroll up).

    It keeps what only it shows (as Toad keeps a conversation's state in the widget that shows it): the
    messages queued behind the reply being generated, in order (:meth:`queue`, :meth:`next_queued`,
    :meth:`unqueue`), a saved conversation drawn whole (:meth:`show_messages`), and the exchanges as shown
    (:meth:`exchanges`, what an unsaved chat exports)."""

    can_focus = True

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._queued: list[UserMessage] = []
        self._editing: UserMessage | None = None  # highlighted while it is edited in the prompt
        #: the reply whose versions the flip keys flip, by its place in the engine's messages (None: the last)
        self.chosen: int | None = None
        #: a saved conversation's title and time, and the id of the one shown: a reply's summary names where its
        #: kept drafts came from with them (the chat screen sets both)
        self.describe_conversation: Describe | None = None
        self.current_conversation: Callable[[], int | None] | None = None

    def on_mount(self) -> None:
        self.anchor()

    def mark_editing(self, on: bool) -> None:
        """Highlight the last message sent while it is edited in the prompt (and scroll to it), or stop."""
        if self._editing is not None:
            self._editing.remove_class("editing")
        sent = [w for w in self.query(UserMessage) if w not in self._queued]
        self._editing = sent[-1] if on and sent else None
        if self._editing is not None:
            self._editing.add_class("editing")
            self.scroll_to_widget(self._editing, animate=False)

    def assistant_messages(self) -> list[AssistantMessage]:
        return list(self.query(AssistantMessage))

    def mark_recorded(self, reply: AssistantMessage, messages: list[Message], turn: Turn | None) -> None:
        """A finished reply that the engine recorded as its last message: note its place there and which version
        of its reply it is (``reply 2/3``)."""
        last = messages[-1] if messages else None
        if turn is not None and last is not None and last.role == "assistant" and last.stats is turn:
            reply.place = len(messages) - 1
            reply.set_versions(last)

    def reply_at(self, place: int | None) -> AssistantMessage | None:
        """The reply shown for the engine's message at ``place``; None: the last reply shown (recorded or not)."""
        replies = self.assistant_messages()
        if place is None:
            return replies[-1] if replies else None
        return next((r for r in replies if r.place == place), None)

    def chosen_reply(self) -> tuple[int | None, AssistantMessage | None]:
        """The chosen reply, whose versions the flip keys flip: its place (None: the last) and its widget."""
        if self.reply_at(self.chosen) is None:  # not shown (cannot happen): the last reply
            self.chosen = None
        return self.chosen, self.reply_at(self.chosen)

    def choose_reply(self, messages: list[Message], step: int, flip_keys: str) -> str:
        """Choose the reply ``step`` before (-1) or after (+1) the chosen one among the replies of ``messages``
        (the engine's: :func:`versions.move`), mark it and scroll to it; returns the notice that says which it is
        and whether ``flip_keys`` flip it. Only an earlier reply is marked: the last is the chosen one unless
        another is (a new reply makes it the chosen one again: :meth:`add_reply`)."""
        places = versions.reply_places(messages)
        if not places:
            return "No reply yet: send a message first."
        self.chosen = versions.move(places, self.chosen, step)
        self._mark_chosen()
        place, reply = self.chosen_reply()
        if reply is not None:
            self.scroll_to_widget(reply, animate=False)
        return versions.chosen_note(messages, places, place, flip_keys)

    def _mark_chosen(self) -> None:
        for widget in self.query(".chosen-reply"):
            widget.remove_class("chosen-reply")
        reply = self.reply_at(self.chosen) if self.chosen is not None else None
        if reply is not None:
            reply.add_class("chosen-reply")

    def add_reply(self, reply: AssistantMessage, after: UserMessage | None = None) -> None:
        """Show a reply being generated at the end, or right after ``after`` (a queued message now sent); it is
        the chosen reply (:meth:`choose_reply`) from now on."""
        self.chosen = None
        self._mark_chosen()
        if after is not None and after.is_attached:
            self.mount(reply, after=after)
        else:
            self.mount(reply)
        self.anchor()

    def queue(self, text: str) -> None:
        """Show ``text`` at the end, marked queued: it is sent when the reply being generated ends."""
        widget = UserMessage(text)
        widget.add_class("queued")
        widget.border_title = "you \u00b7 queued: sent when this reply ends"
        self._queued.append(widget)
        self.mount(widget)
        self.anchor()

    def next_queued(self) -> UserMessage | None:
        """The oldest queued message, now shown as sent (it stays where it is; its reply goes after it)."""
        if not self._queued:
            return None
        widget = self._queued.pop(0)
        widget.remove_class("queued")
        widget.border_title = "you"
        return widget

    def unqueue(self) -> list[str]:
        """Take the queued messages off the chat; their texts, in order."""
        texts = [w.text for w in self._queued]
        for widget in self._queued:
            widget.remove()
        self._queued = []
        return texts

    def remove_last_exchange(self) -> None:
        """Remove the last user message and everything after it (its reply, the notices about that turn)."""
        children = list(self.children)
        first = max((i for i, w in enumerate(children) if isinstance(w, UserMessage)), default=len(children))
        for widget in children[first:]:
            widget.remove()

    def show_messages(self, messages: list[Message], *, show_ghosts: bool, markdown: bool) -> None:
        """Draw a saved conversation in place of what is shown (its replies uncoloured until the engine splits
        them into tokens: :meth:`AssistantMessage.show_saved_pieces`)."""
        self.remove_children()
        self.chosen = None
        for place, m in enumerate(messages):
            if m.role == "system":
                if m.content:
                    self.mount(ChatNotice(f"system: {m.content}"))
            elif m.role == "user":
                self.mount(UserMessage(m.content))
            else:
                widget = AssistantMessage(title="assistant (saved)", show_ghosts=show_ghosts, markdown=markdown)
                widget.load_saved(m)
                widget.place = place
                self.mount(widget)
        self.scroll_end(animate=False)

    def uncoloured_saved_replies(self) -> list[tuple[AssistantMessage, list[int]]]:
        """Each saved reply not drawn in its kind colours yet, with its token ids (for the engine to split)."""
        return [
            (reply, reply.saved_message.tokens)
            for reply in self.assistant_messages()
            if reply.saved_message is not None and reply.saved_message.tokens and not reply.saved_coloured
        ]

    def add_notices(self, notices: list[str], reply: AssistantMessage, *, kind: str = "") -> None:
        """Show each notice about a reply above it (``kind``: a class, e.g. ``auto-k``)."""
        for line in notices:
            notice = ChatNotice(line)
            if kind:
                notice.add_class(kind)
            self.mount(notice, before=reply)

    def exchanges(self) -> list[tuple[str, str, bool]]:
        """``(role, text, stopped)`` of each sent message and reply shown (queued messages left out)."""
        out: list[tuple[str, str, bool]] = []
        for widget in self.children:
            if isinstance(widget, UserMessage) and widget not in self._queued:
                out.append(("user", widget.text, False))
            elif isinstance(widget, AssistantMessage):
                out.append(("assistant", widget.reply_text, widget.stopped))
        return out
