"""A conversation on the local engine: messages -> tokens with the model's own chat template, KV reuse
across turns, stop.

**Tokens of a conversation.** The GGUF's ``tokenizer.chat_template`` (Jinja, rendered in llama-cpp-python's
sandboxed :class:`~llama_cpp.llama_chat_format.Jinja2ChatFormatter`) is rendered with every assistant
reply replaced by a sentinel; the text between sentinels is tokenized (``add_bos=False, special=True``:
the rendered text already carries BOS) and the exact generated ids of each reply are spliced back in
(:func:`~specchat.engine.conversation.spliced_prompt_tokens`). So old replies are never re-tokenized, and
turn n+1's tokens start with turn n's tokens: the target and draft KV caches keep their common prefix and
a new turn decodes only what is new (``prompt_n`` counts only those tokens). A model without a template gets
a plain ``### Role:`` fallback, announced once by a :class:`~specchat.engine.events.Notice` (and by
:attr:`EngineInfo.chat_template`, which the sidebar shows).

**Stop strings.** A model given the fallback format has no end-of-turn token of that format to emit, so it
goes on writing the next ``### User:`` turn itself. The fallback's turn markers (:data:`FALLBACK_STOPS`) are
therefore stop strings, as llama.cpp's server treats a request's ``stop`` words: :func:`cut_at_stop_strings`
holds back the pieces that could begin a marker, and at a whole marker ends the reply before it (the token
where the marker starts and any whitespace-only tokens before it are dropped, so the reply's text and token
ids stay the same text) with ``stop_reason = "stop"``. Models with a template stop at their own
end-of-generation token and get no stop strings.

The message list, regenerate / edit and the context-limit policy are the shared
:class:`~specchat.engine.conversation.Conversation`'s; when old turns are dropped for the context, the
caches rebuild from the new common prefix.

**Greedy replies and batch sizes.** At temperature 0 every emitted token is the argmax of the logits it was
verified with, but the same tokens decoded in other batch splits give slightly different logits, so a
conversation continued on a reused cache and the same messages on a fresh one can reply differently at a
near-tie. Measured on the bundled SmolLM2 Q4_1 (issue 10: a reply stopped, regenerated, then a new message,
against a fresh engine loaded with the same messages): both caches held the same token ids, both replies
were their own argmax at every token, and they parted at token 12 where run A preferred " offering" by 0.25
and run B " with" by 0.19. Decoding those 112 tokens in a fresh model reproduces each run from its batch split
alone: one token at a time or batches of up to 48 give run A's +0.2530 exactly, the prompt in one batch then
one token at a time gives run B's -0.1882, one batch of all 112 gives -0.2292; logits differ by up to 0.86
between splits (batches of 64 and more take another path in llama.cpp's CPU kernels). This is numerics, not a
cache defect: tests compare a reused-cache reply with the argmax of the logits each token was verified with,
and with another run only up to a near-tie (``tests/enginekit.py``: ``VerifiedRows``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from specchat.engine.build import engine_build, this_cpu
from specchat.engine.controls import Controls
from specchat.engine.conversation import Conversation, reply_message, spliced_prompt_tokens
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.detokenize import detokenize_pieces
from specchat.engine.events import ContextTrimmed, EngineError, Event, Notice, Piece, StopReason, Turn
from specchat.engine.model import DecodeError, Model
from specchat.engine.protocol import EngineInfo, Message
from specchat.engine.speculative import SpeculativeDecoder
from specchat.errors import UserError

FALLBACK_NOTICE = (
    "{name} has no chat template: using the plain fallback '### System/User/Assistant:' format "
    "(a reply ends at the next '### Role:' line)"
)
#: the fallback format's turn markers: a reply that reaches one has ended its turn
FALLBACK_STOPS: tuple[str, ...] = ("### User:", "### Assistant:", "### System:")
#: Turn.stop_reason of a reply ended by a stop string
STOP_STRING: StopReason = "stop"


class ChatTemplate:
    """Renders messages to token ids for one model (see the module docstring)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        template = model.meta("tokenizer.chat_template")
        self.has_template = bool(template)
        #: text that ends a reply (the fallback format's turn markers; none with the model's own template)
        self.stop_strings: tuple[str, ...] = () if self.has_template else FALLBACK_STOPS
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
        """Token ids of ``messages`` followed by the assistant generation prompt (replies spliced in by id)."""
        add_bos = self._formatter is None and self.model.add_bos
        return spliced_prompt_tokens(
            messages,
            self._render_text,
            lambda text, at_start: self.model.tokenize(text, add_bos=add_bos and at_start, special=True),
        )


class ChatSession(Conversation):
    """A conversation on a :class:`SpeculativeDecoder`: implements :class:`~specchat.engine.protocol.ChatEngine`."""

    def __init__(
        self,
        decoder: SpeculativeDecoder,
        *,
        system_prompt: str = "",
        n_predict: int = 512,
        seed: int | None = None,
        draft_label: str = "",
        kernels: str = "",
    ) -> None:
        super().__init__(system_prompt=system_prompt, n_predict=n_predict)
        #: how the target's weights were laid out, when a measurement chose it (:attr:`EngineInfo.kernels`)
        self.kernels = kernels
        self.decoder = decoder
        self.controls: Controls = decoder.controls
        self.template = ChatTemplate(decoder.target)
        self.seed = seed
        self.draft_label = draft_label
        self._notice_pending = not self.template.has_template
        self.reset(system_prompt)

    # -- Conversation ---------------------------------------------------------------------------------
    @property
    def context_size(self) -> int:
        return self.decoder.target.n_ctx

    def prompt_tokens(self, messages: list[Message]) -> list[int]:
        return self.template.tokens(messages)

    # -- ChatEngine -----------------------------------------------------------------------------
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
            chat_template=self.template.has_template,
            kernels=self.kernels,
        )

    def reset(self, system_prompt: str | None = None) -> None:
        super().reset(system_prompt)
        sp = self.controls.snapshot().sampling
        seed = sp.seed if sp.seed is not None else self.seed
        self.rng = np.random.default_rng(seed)

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
    def raw(self, prompt: str) -> Iterator[Event]:
        """Continue ``prompt`` as is, no chat template (``specchat generate --raw``)."""
        target = self.decoder.target
        tokens = target.tokenize(prompt, add_bos=target.add_bos, special=True)
        if not tokens:
            raise UserError("the prompt is empty: give some text with --prompt")
        if len(tokens) + 1 > target.n_ctx:
            raise UserError(f"the prompt is {len(tokens)} tokens but the context holds {target.n_ctx}; raise --n-ctx")
        return self._run(tokens, record=False)

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
            events = self.decoder.generate(tokens, max_new=max_new, rng=self.rng)
            stops = self.template.stop_strings
            if stops:
                counters = yield from cut_at_stop_strings(events, stops, self.controls)
            else:
                counters = yield from events
        except (DecodeError, UserError) as exc:
            self.decoder.reset()  # caches may be inconsistent: rebuild from scratch next turn
            yield EngineError(str(exc))
            return
        st = self.controls.snapshot()
        dec = self.decoder
        drafting = st.speculative and dec.can_speculate and dec.drafter is not None
        turn: Turn = counters.to_turn(
            k=st.k if drafting else 0, drafter=dec.drafter_name or NONE, speculative=st.speculative,
            target=dec.target.name, build=engine_build(), cpu=this_cpu(),
        )
        if record:
            self._messages.append(reply_message(turn))
        yield turn


def _partial_stop_at(text: str, stops: Sequence[str]) -> int:
    """The start of the longest tail of ``text`` that is a proper prefix of a stop string (len(text) if none)."""
    for start in range(max(0, len(text) - max(len(s) for s in stops) + 1), len(text)):
        tail = text[start:]
        if any(s.startswith(tail) for s in stops):
            return start
    return len(text)


def cut_at_stop_strings(events: Iterator[Event], stops: Sequence[str], controls: Controls):
    """Pass a reply's events through, ending the reply before the first stop string (module docstring).

    ``events`` is :meth:`SpeculativeDecoder.generate`'s generator; this is one too, returning its
    :class:`~specchat.engine.telemetry.TurnCounters` with the reply cut. Events are held back (in order)
    while the text could still become a stop string, so no part of a marker is ever shown. At a whole
    marker it asks the decoder to stop at its next round (``controls.request_stop``), drops every later
    piece, and reports ``stop_reason = "stop"``.
    """

    def kept(event: Event) -> bool:
        return isinstance(event, Piece) and event.kind != "rejected"

    held: list[Event] = []
    text = ""  # the reply's text so far (the pieces the target kept)
    ends: list[int] = []  # end offset in ``text`` of each kept token
    n_out = 0  # kept tokens already passed on
    cut: int | None = None  # tokens in the reply, once a stop string was found
    while True:
        try:
            event = next(events)
        except StopIteration as done:
            counters = done.value
            break
        if cut is not None:
            if not isinstance(event, Piece):
                yield event  # the round's Step (its timings are real); the pieces after the cut are dropped
            continue
        held.append(event)
        if kept(event):
            text += event.text
            ends.append(len(text))
        starts = [i for i in (text.find(s) for s in stops) if i >= 0]
        if starts:
            start = min(starts)
            cut = sum(1 for end in ends if end <= start)
            while cut and not text[(ends[cut - 2] if cut > 1 else 0) : ends[cut - 1]].strip():
                cut -= 1  # the blank line(s) before the marker belong to the format, not to the reply
            controls.request_stop()
            limit = cut
        else:
            limit = None
            safe = _partial_stop_at(text, stops)  # text past here might still begin a marker
        released = 0
        for e in held:
            if kept(e):
                if (n_out >= limit) if limit is not None else (ends[n_out] > safe):
                    break
                n_out += 1
            released += 1
            yield e
        held = [] if limit is not None else held[released:]
    if cut is None:
        yield from held
        return counters
    counters.finish(
        stop_reason=STOP_STRING, text=text[: ends[cut - 1]] if cut else "",
        tokens=counters.tokens[:cut], kinds=counters.kinds[:cut],
    )
    counters.predicted_n = cut
    return counters
