"""Conversations: messages -> tokens with the model's own chat template, KV reuse across turns,
the context-limit policy, regenerate / edit / stop.

**Tokens of a conversation.** The GGUF's ``tokenizer.chat_template`` (Jinja, rendered in llama-cpp-python's
sandboxed :class:`~llama_cpp.llama_chat_format.Jinja2ChatFormatter`) is rendered with every assistant
reply replaced by a sentinel; the text between sentinels is tokenized (``add_bos=False, special=True``:
the rendered text already carries BOS) and the exact generated ids of each reply are spliced back in.
So old replies are never re-tokenized, and turn n+1's tokens start with turn n's tokens: the target and
draft KV caches keep their common prefix and a new turn decodes only what is new (``prompt_n`` counts
only those tokens). A model without a template gets a plain ``### Role:`` fallback, announced once by a
:class:`~specchat.engine.events.Notice`.

**Context limit.** If the rendered conversation plus a reply reserve (``min(n_predict, n_ctx/4)``) does
not fit ``n_ctx``, the oldest messages after the system prompt are dropped from what the model sees
(they stay in :attr:`ChatSession.messages` and in history) and a :class:`ContextTrimmed` is emitted;
the caches then rebuild from the new common prefix. A last user message that alone does not fit is a
clear error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import numpy as np

from specchat.engine.controls import Controls
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.detokenize import detokenize_pieces
from specchat.engine.events import ContextTrimmed, EngineError, Event, Notice, Turn
from specchat.engine.model import DecodeError, Model
from specchat.engine.protocol import EngineInfo, Message
from specchat.engine.speculative import SpeculativeDecoder
from specchat.errors import UserError

_SENTINEL = "\u2063SPECCHAT-REPLY-{}\u2063"
_SENTINEL_RE = re.compile("\u2063SPECCHAT-REPLY-(\\d+)\u2063")

FALLBACK_NOTICE = (
    "{name} has no chat template: using the plain fallback '### System/User/Assistant:' format"
)


class ChatTemplate:
    """Renders messages to token ids for one model (see the module docstring)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        template = model.meta("tokenizer.chat_template")
        self.has_template = bool(template)
        self._formatter = None
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            bos = model.token_text(model.bos) if model.bos >= 0 else ""
            eos = model.token_text(model.eos) if model.eos >= 0 else ""
            self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)

    def _render_text(self, messages: list[dict[str, str]]) -> str:
        if self._formatter is not None:
            return self._formatter(messages=messages).prompt
        parts = []
        for m in messages:
            parts.append(f"### {m['role'].capitalize()}:\n{m['content']}\n\n")
        parts.append("### Assistant:\n")
        return "".join(parts)

    def tokens(self, messages: list[Message]) -> list[int]:
        """Token ids of ``messages`` followed by the assistant generation prompt."""
        rendered_input = []
        replies: dict[int, list[int]] = {}
        for i, m in enumerate(messages):
            if m.role == "assistant" and m.tokens:
                replies[i] = m.tokens
                rendered_input.append({"role": m.role, "content": _SENTINEL.format(i)})
            else:
                rendered_input.append({"role": m.role, "content": m.content})
        text = self._render_text(rendered_input)
        out: list[int] = []
        pos = 0
        add_bos = self._formatter is None and self.model.add_bos
        for match in _SENTINEL_RE.finditer(text):
            out += self.model.tokenize(text[pos : match.start()], add_bos=add_bos and not out, special=True)
            out += replies[int(match.group(1))]
            pos = match.end()
        out += self.model.tokenize(text[pos:], add_bos=add_bos and not out, special=True)
        if len(replies) != len(_SENTINEL_RE.findall(text)):
            # the template rewrote the replies: fall back to re-tokenizing everything
            plain = [{"role": m.role, "content": m.content} for m in messages]
            return self.model.tokenize(self._render_text(plain), add_bos=add_bos, special=True)
        return out


class ChatSession:
    """A conversation on a :class:`SpeculativeDecoder`: implements :class:`~specchat.engine.protocol.ChatEngine`."""

    def __init__(
        self,
        decoder: SpeculativeDecoder,
        *,
        system_prompt: str = "",
        n_predict: int = 512,
        seed: int | None = None,
        draft_label: str = "",
    ) -> None:
        self.decoder = decoder
        self.controls: Controls = decoder.controls
        self.template = ChatTemplate(decoder.target)
        self.n_predict = n_predict
        self.seed = seed
        self.draft_label = draft_label
        self._messages: list[Message] = []
        self._window_start = 0  # first non-system message the model still sees
        self._notice_pending = not self.template.has_template
        self.reset(system_prompt)

    # -- ChatEngine -----------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        return self._messages

    def info(self) -> EngineInfo:
        d = self.decoder
        return EngineInfo(
            target_name=d.target.name,
            draft_name=d.drafter_name or NONE,
            drafters=tuple(d.drafters) + (NONE,),
            n_ctx=d.target.n_ctx,
            k_max=K_MAX,
            can_speculate=d.can_speculate,
            note="" if d.can_speculate else f"{d.target.name} is recurrent/hybrid: speculation is off",
            verify=d.verify if d.can_speculate else None,
            weights=d.target.weights,
        )

    def reset(self, system_prompt: str | None = None) -> None:
        if system_prompt is None:
            system_prompt = self.system_prompt
        self.system_prompt = system_prompt
        self._messages = [Message("system", system_prompt)] if system_prompt else []
        self._window_start = 0
        sp = self.controls.snapshot().sampling
        seed = sp.seed if sp.seed is not None else self.seed
        self.rng = np.random.default_rng(seed)

    def load(self, messages: list[Message]) -> None:
        self._messages = list(messages)
        sys_msgs = [m for m in messages if m.role == "system"]
        self.system_prompt = sys_msgs[0].content if sys_msgs else ""
        self._window_start = 0

    def send(self, user_text: str) -> Iterator[Event]:
        self._messages.append(Message("user", user_text))
        return self._reply()

    def regenerate(self) -> Iterator[Event]:
        if self._messages and self._messages[-1].role == "assistant":
            self._messages.pop()
        if not self._messages or self._messages[-1].role != "user":
            raise UserError("nothing to regenerate: send a message first")
        return self._reply()

    def edit_last(self, user_text: str) -> Iterator[Event]:
        while self._messages and self._messages[-1].role == "assistant":
            self._messages.pop()
        if not self._messages or self._messages[-1].role != "user":
            raise UserError("no user message to edit: send a message first")
        self._messages[-1] = Message("user", user_text)
        return self._reply()

    def detokenize_pieces(self, tokens: Sequence[int]) -> list[str]:
        """Per-token text of a reply, decoded the way :meth:`SpeculativeDecoder.generate` streams it
        (:func:`specchat.engine.detokenize.detokenize_pieces`).

        Call on the engine thread (it reads the target's vocabulary). Ids are checked against the vocabulary
        first: llama.cpp does not bounds-check ``llama_token_to_piece``.
        """
        target = self.decoder.target
        for token in tokens:
            if not 0 <= int(token) < target.n_vocab:
                raise ValueError(
                    f"token id {token} is not in the vocabulary of {target.name} ({target.n_vocab} tokens)"
                )
        return detokenize_pieces(target.piece, tokens)

    def close(self) -> None:
        self.controls.request_stop()
        self.decoder.close()

    # -- generation -----------------------------------------------------------------------------
    def _visible(self) -> list[Message]:
        head = [m for m in self._messages[:1] if m.role == "system"]
        body = self._messages[len(head) :]
        return head + body[self._window_start :]

    def _fit_context(self) -> tuple[list[int], int]:
        """Tokens of the conversation that fit ``n_ctx`` with a reply reserve; and how many were dropped now."""
        n_ctx = self.decoder.target.n_ctx
        reserve = max(1, min(self.n_predict, n_ctx // 4))
        dropped = 0
        while True:
            visible = self._visible()
            tokens = self.template.tokens(visible)
            if len(tokens) + reserve <= n_ctx:
                return tokens, dropped
            head = 1 if visible and visible[0].role == "system" else 0
            if len(visible) - head <= 1:
                raise UserError(
                    f"the message is too long: {len(tokens)} tokens with the system prompt, but the context "
                    f"holds {n_ctx} and {reserve} are kept for the reply; shorten it or raise n_ctx"
                )
            # drop the oldest user turn together with the reply that followed it
            self._window_start += 1
            dropped += 1
            body = self._visible()[head:]
            while body and body[0].role != "user" and len(body) > 1:
                self._window_start += 1
                dropped += 1
                body = self._visible()[head:]

    def raw(self, prompt: str) -> Iterator[Event]:
        """Continue ``prompt`` as is, no chat template (``specchat generate --raw``)."""
        target = self.decoder.target
        tokens = target.tokenize(prompt, add_bos=target.add_bos, special=True)
        if not tokens:
            raise UserError("the prompt is empty: give some text with --prompt")
        if len(tokens) + 1 > target.n_ctx:
            raise UserError(f"the prompt is {len(tokens)} tokens but the context holds {target.n_ctx}; raise --n-ctx")
        return self._run(tokens, record=False)

    def _reply(self) -> Iterator[Event]:
        tokens, dropped = self._fit_context()
        return self._run(tokens, record=True, dropped=dropped)

    def _run(self, tokens: list[int], *, record: bool, dropped: int = 0) -> Iterator[Event]:
        self.controls.clear_stop()
        if self._notice_pending:
            self._notice_pending = False
            yield Notice(FALLBACK_NOTICE.format(name=self.decoder.target.name))
        if dropped:
            yield ContextTrimmed(dropped_messages=dropped, n_ctx=self.decoder.target.n_ctx)
        n_ctx = self.decoder.target.n_ctx
        max_new = max(1, min(self.n_predict, n_ctx - len(tokens)))
        try:
            counters = yield from self.decoder.generate(tokens, max_new=max_new, rng=self.rng)
        except (DecodeError, UserError) as exc:
            self.decoder.reset()  # caches may be inconsistent: rebuild from scratch next turn
            yield EngineError(str(exc))
            return
        st = self.controls.snapshot()
        turn: Turn = counters.to_turn(k=st.k, drafter=self.decoder.drafter_name or NONE, speculative=st.speculative)
        if record:
            self._messages.append(
                Message(
                    "assistant",
                    turn.text,
                    tokens=list(turn.tokens),
                    kinds=list(turn.kinds),
                    stats=turn,
                    stopped=turn.stop_reason == "stopped",
                )
            )
        yield turn
