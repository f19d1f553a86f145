"""One conversation, whatever generates its replies: the message list, regenerate / edit / load, and the
context-limit policy.

Both engines behind :class:`~specchat.engine.protocol.ChatEngine` keep a conversation the same way: the
local :class:`~specchat.engine.chat.ChatSession` (llama.cpp in this process) and the remote
:class:`~specchat.engine.remote.RemoteSession` (a llama-server). A subclass says how many tokens its
context holds (:meth:`Conversation.context_size`), turns messages into prompt token ids
(:meth:`Conversation.prompt_tokens`) and generates a reply from them (:meth:`Conversation._run`).

**Tokens of a conversation.** The chat template is rendered with every assistant reply replaced by a
sentinel; the text between sentinels is tokenized and the exact generated ids of each reply are spliced
back in (:func:`spliced_prompt_tokens`). So old replies are never re-tokenized, and turn n+1's tokens
start with turn n's tokens: a KV cache keeps their common prefix and a new turn decodes only what is new.

**Regenerate keeps the previous reply.** The replies to one user message are its *versions*
(:meth:`Message.versions`): regenerating records the new reply as the newest version, chosen, with the
earlier ones as its alternates; if no reply comes (an error before any token), the previous reply stays.
:meth:`Conversation.select_alternate` chooses which version of a reply (the last or an earlier one) the
conversation continues from - only the message list changes; the next turn's prompt holds the chosen
version's exact ids, so a KV cache (local or the server's) keeps its common prefix with it and decodes the
rest, as after an edit. The messages after an earlier reply stay as they are: they were written after the
version chosen then, and the next turn sees them after the version chosen now.

**Context limit.** If the rendered conversation plus a reply reserve (``min(n_predict, n_ctx/4)``) does
not fit ``n_ctx``, the oldest messages after the system prompt are dropped from what the model sees
(they stay in :attr:`Conversation.messages` and in history) and the run reports how many were dropped
(a :class:`~specchat.engine.events.ContextTrimmed` event). A last user message that alone does not fit is
a clear error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from specchat.engine.controls import Controls
from specchat.engine.events import Event, Turn
from specchat.engine.protocol import Message
from specchat.errors import UserError


_SENTINEL = "\u2063SPECCHAT-REPLY-{}\u2063"
_SENTINEL_RE = re.compile("\u2063SPECCHAT-REPLY-(\\d+)\u2063")


def spliced_prompt_tokens(
    messages: list[Message],
    render: Callable[[list[dict[str, str]]], str],
    tokenize: Callable[[str, bool], list[int]],
    splice: Callable[[Message], bool] = lambda m: True,
) -> list[int]:
    """Token ids of ``messages`` followed by the assistant generation prompt, each reply's own ids spliced in.

    ``render(messages)`` renders the chat template (role/content dicts); ``tokenize(text, at_start)``
    tokenizes a piece of the rendered text (``at_start``: no token precedes it, so a BOS may be added). A
    reply is spliced only if it kept all its ids (none negative) and ``splice(reply)`` (whose ids are in
    this vocabulary); other replies are tokenized as text. If the template rewrote the sentinels,
    everything is rendered and tokenized as text instead.
    """
    rendered_input = []
    replies: dict[int, list[int]] = {}
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tokens and min(m.tokens) >= 0 and splice(m):
            replies[i] = m.tokens
            rendered_input.append({"role": m.role, "content": _SENTINEL.format(i)})
        else:
            rendered_input.append({"role": m.role, "content": m.content})
    text = render(rendered_input)
    if len(replies) != len(_SENTINEL_RE.findall(text)):
        # the template rewrote the replies: fall back to re-tokenizing everything
        plain = [{"role": m.role, "content": m.content} for m in messages]
        return tokenize(render(plain), True)
    out: list[int] = []
    pos = 0
    for match in _SENTINEL_RE.finditer(text):
        out += tokenize(text[pos : match.start()], not out)
        out += replies[int(match.group(1))]
        pos = match.end()
    out += tokenize(text[pos:], not out)
    return out


def reply_message(turn: Turn) -> Message:
    """The assistant message recorded for a finished (or stopped, or failed) reply.

    ``stopped`` marks every reply that did not end by itself: stopped by the user, or cut by an error
    (``turn.stop_reason`` keeps which).
    """
    return Message(
        "assistant",
        turn.text,
        tokens=list(turn.tokens),
        kinds=list(turn.kinds),
        stats=turn,
        stopped=turn.stop_reason in ("stopped", "error"),
    )


class Conversation:
    """The messages of one chat and the :class:`ChatEngine` calls that change them (see the module docstring)."""

    controls: Controls
    #: what to do when even the last message alone does not fit the context
    context_hint = "shorten it or raise n_ctx"

    def __init__(self, *, system_prompt: str = "", n_predict: int = 512) -> None:
        self.n_predict = n_predict
        self.system_prompt = system_prompt
        self._messages: list[Message] = []
        self._window_start = 0  # first non-system message the model still sees

    # -- what a subclass provides -------------------------------------------------------------------
    @property
    def context_size(self) -> int:
        """Tokens the model's context holds (``n_ctx``)."""
        raise NotImplementedError

    def prompt_tokens(self, messages: list[Message]) -> list[int]:
        """Token ids of ``messages`` followed by the assistant generation prompt."""
        raise NotImplementedError

    def _run(self, tokens: list[int], *, record: bool, dropped: int = 0) -> Iterator[Event]:
        """Generate a reply to ``tokens``; with ``record``, append it to the messages before its Turn."""
        raise NotImplementedError

    # -- ChatEngine ---------------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        return self._messages

    def reset(self, system_prompt: str | None = None) -> None:
        if system_prompt is None:
            system_prompt = self.system_prompt
        self.system_prompt = system_prompt
        self._messages = [Message("system", system_prompt)] if system_prompt else []
        self._window_start = 0

    def load(self, messages: list[Message]) -> None:
        self._messages = list(messages)
        sys_msgs = [m for m in messages if m.role == "system"]
        self.system_prompt = sys_msgs[0].content if sys_msgs else ""
        self._window_start = 0

    def send(self, user_text: str) -> Iterator[Event]:
        self._messages.append(Message("user", user_text))
        return self._reply()

    def regenerate(self) -> Iterator[Event]:
        previous = None
        if self._messages and self._messages[-1].role == "assistant":
            previous = self._messages.pop()
        try:
            if not self._messages or self._messages[-1].role != "user":
                raise UserError("nothing to regenerate: send a message first")
            events = self._reply()
        except UserError:
            if previous is not None:
                self._messages.append(previous)
            raise
        return events if previous is None else self._as_new_version(events, previous)

    def _as_new_version(self, events: Iterator[Event], previous: Message) -> Iterator[Event]:
        """Pass a regenerated reply's events through; the reply :meth:`_run` records becomes the newest version
        of ``previous`` (before its Turn is passed on), or ``previous`` comes back when none is recorded."""
        n = len(self._messages)

        def version() -> bool:
            if len(self._messages) > n and self._messages[-1].role == "assistant":
                self._messages[-1] = previous.with_new_version(self._messages[-1])
                return True
            return False

        done = False
        for event in events:
            if not done and isinstance(event, Turn):
                done = version()
            yield event
        if not done and not version():
            self._messages.append(previous)

    def select_alternate(self, index: int, at: int | None = None) -> Message:
        """Make version ``index`` of a reply the one the conversation continues from (see the module
        docstring and :meth:`ChatEngine.select_alternate`); ``at`` is the reply's place in :attr:`messages`
        (default: the last message)."""
        where = len(self._messages) - 1 if at is None else at
        is_reply = isinstance(where, int) and 0 <= where < len(self._messages)
        if not is_reply or self._messages[where].role != "assistant":
            if at is None:
                raise UserError("no reply to choose a version of: the conversation does not end with a reply")
            raise UserError(f"no reply to choose a version of at message {at!r}: it is not a reply here")
        reply = self._messages[where]
        n = len(reply.alternates) + 1
        if not (isinstance(index, int) and 0 <= index < n):
            which = "the last reply" if at is None else f"the reply at message {at}"
            raise UserError(f"{which} has {n} version(s), numbered 0..{n - 1}; {index!r} is not one")
        self._messages[where] = reply.with_version(index)
        return self._messages[where]

    def edit_last(self, user_text: str) -> Iterator[Event]:
        while self._messages and self._messages[-1].role == "assistant":
            self._messages.pop()
        if not self._messages or self._messages[-1].role != "user":
            raise UserError("no user message to edit: send a message first")
        self._messages[-1] = Message("user", user_text)
        return self._reply()

    # -- the context window -------------------------------------------------------------------------
    def _visible(self) -> list[Message]:
        head = [m for m in self._messages[:1] if m.role == "system"]
        body = self._messages[len(head) :]
        return head + body[self._window_start :]

    def _fit_context(self) -> tuple[list[int], int]:
        """Tokens of the conversation that fit ``n_ctx`` with a reply reserve; and how many were dropped now."""
        n_ctx = self.context_size
        reserve = max(1, min(self.n_predict, n_ctx // 4))
        dropped = 0
        while True:
            visible = self._visible()
            tokens = self.prompt_tokens(visible)
            if len(tokens) + reserve <= n_ctx:
                return tokens, dropped
            head = 1 if visible and visible[0].role == "system" else 0
            if len(visible) - head <= 1:
                raise UserError(
                    f"the message is too long: {len(tokens)} tokens with the system prompt, but the context "
                    f"holds {n_ctx} and {reserve} are kept for the reply; {self.context_hint}"
                )
            # drop the oldest user turn together with the reply that followed it
            self._window_start += 1
            dropped += 1
            body = self._visible()[head:]
            while body and body[0].role != "user" and len(body) > 1:
                self._window_start += 1
                dropped += 1
                body = self._visible()[head:]

    def _reply(self) -> Iterator[Event]:
        tokens, dropped = self._fit_context()
        return self._run(tokens, record=True, dropped=dropped)


__all__ = ["Conversation", "reply_message", "spliced_prompt_tokens"]
