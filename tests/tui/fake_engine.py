"""A deterministic :class:`~specchat.engine.protocol.ChatEngine` for the TUI's unit tests.

It speaks the real protocol: events in the documented order, one :class:`Step` per round, the
:class:`Controls` snapshot read at every step boundary (so a K change or speculation toggle made mid-reply
shows in the *next* Step), stop requests honoured within one step, and a :class:`Turn` with the usual
timings. Replies come from a script of tokens; which draft tokens are accepted follows a fixed pattern.

Test hooks:
- ``hold_at_steps``: the engine blocks *before* each of these rounds (0-based) until :meth:`release` (or a
  stop request); :meth:`wait_hold` (n) returns once the n-th hold is reached, so a test knows the reply is
  mid-way and exactly where.
- ``fail_at_step``: raise ``RuntimeError`` at round N (an engine crash mid-reply).
- ``steps_seen``: every Step emitted, in order (to assert what the engine did after a control change).
- ``auto_k_script``: with auto-K on, round i's auto-K state is ``auto_k_script[i]`` (the last one repeats): a
  :class:`AutoKRound` (reason, auto-K's regime K, the round's K, the cost model's best K). Its
  :class:`KStatus` is built by the engine's own :func:`k_status`, so the sidebar shows the engine's words.
- ``auto_k_notices``: {round: drafting on?}: an :class:`AutoKNotice` before that round, built by the engine's
  own :func:`auto_k_notice`.

Every Step carries the figures of the reply (the engine's :func:`reply_figures` over a real
:class:`TurnCounters`) and of the recent window (:func:`recent_figures` over a real :class:`CostModel` fed
every drafting round), as the real engine's do.

Token ids come from a vocabulary of the pieces of the engine's own replies and ghosts (sorted, so two fake
engines with the same replies are "the same model" and one with other replies is not), and
:meth:`FakeEngine.detokenize_pieces` maps them back, refusing ids it does not know like the real engine.
"""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from collections.abc import Iterator, Sequence

from typing import NamedTuple

from specchat.engine.controls import Controls, ControlState
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.events import (
    CostEstimate,
    Event,
    Notice,
    Piece,
    PromptDone,
    Step,
    Turn,
    VerifyCurve,
)
from specchat.engine.protocol import EngineInfo, Message
from specchat.engine.telemetry import AutoK, CostModel, KDecision, KReason, TurnCounters
from specchat.engine.telemetry.figures import auto_k_notice, k_status, recent_figures, reply_figures
from specchat.engine.telemetry.verify_cost import verify_reason


class AutoKRound(NamedTuple):
    """One round of a scripted auto-K: why it chose its K, its regime K, the K this round drafts, the best K."""

    reason: KReason
    regime: int
    k_round: int
    best_k: int



#: the drafter's cap the scripted auto-K rounds report
AUTO_K_CAP = 16

DEFAULT_REPLY = (
    "Speculative decoding lets a cheap drafter guess the next tokens; the target model checks them all "
    "in one batch and keeps the longest agreeing prefix.\n\n"
    "```python\ndef add(a, b):\n    return a + b\n```\n\n"
    "Accepted drafts cost almost nothing here, so an n-gram drafter can win."
)
GHOSTS = (" the", " a", "ing", " of", ".", " model", "\n", " to")
# accepted count per round, cycled: a mix of partial, zero and full acceptance
ACCEPT_PATTERN = (2, 0, 3, 1, 5, 5, 0, 2)
#: the first token id of the fake vocabulary
VOCAB_BASE = 100


def tokenize(text: str) -> list[str]:
    """Split like a BPE vocabulary roughly would: words with their leading space, punctuation, newlines."""
    return re.findall(r"\n| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]| +", text)


def verify_curve(weights: str, per_row: float, source: str = "cache") -> VerifyCurve:
    """A target's v(K) = 1 + ``per_row``·K for K = 0..K_MAX, every batch size timed, with the engine's own
    reason line (:func:`verify_reason`)."""
    v = tuple(1.0 + per_row * k for k in range(K_MAX + 1))
    return VerifyCurve(weights=weights, v=v, target_ms=10.0, measured_rows=K_MAX + 1, source=source,  # type: ignore[arg-type]
                       reason=verify_reason(weights, lambda k: v[k], measured=source != "prior"))


def live_curve(curve: VerifyCurve, round_no: int) -> VerifyCurve:
    """``curve`` as a round's cost carries it: measured in this session, and moved by up to 0.4 % from round
    to round, as the real fit moves with every verify batch timed (below the sidebar's rounding)."""
    scale = 1.0 + 0.002 * (round_no % 3)
    return replace(curve, source="measured", v=(1.0, *(v * scale for v in curve.v[1:])))


#: the target's verify cost as the fake engine's info has it before the first round (this file's cached
#: calibration): a format without a batched kernel, v(16) = 10.9; its Steps carry the same curve "measured"
DEFAULT_VERIFY = verify_curve("Q4_1", 0.62)

#: the cost model's view the fake engine reports in every Step (a cheap drafter that pays)
DEFAULT_COST = CostEstimate(
    alpha=0.62, c=0.04, v=1.05, best_k=5, predicted_speedup=1.9, target_ms_per_token=10.0, draft_ms_per_token=0.4
)

#: a drafter that costs almost a target token: no K pays below 97 % acceptance per position (auto-K: off)
COSTLY_COST = CostEstimate(
    alpha=0.62, c=0.98, v=1.8, best_k=0, predicted_speedup=1.0, target_ms_per_token=10.0, draft_ms_per_token=9.8,
    alpha_to_pay=0.97,
)

#: the four states a reader sees with auto-K on, each as a script of one repeated round, and the cost model's
#: view that goes with it (the best K auto-K holds against is the cost model's)
AUTO_K_STATES: dict[str, tuple[AutoKRound, CostEstimate]] = {
    "warming up": (AutoKRound(KReason.WARM_UP, 1, 1, DEFAULT_COST.best_k), DEFAULT_COST),
    "holding": (AutoKRound(KReason.HOLD, 16, 16, DEFAULT_COST.best_k), DEFAULT_COST),
    "off for cost": (AutoKRound(KReason.CANNOT_PAY, 0, 0, 0), COSTLY_COST),
    "probing": (AutoKRound(KReason.PROBE, 0, 3, 0), COSTLY_COST),
}


class FakeEngine:
    """Scripted engine. ``replies`` are used in turn (the last one repeats)."""

    def __init__(
        self,
        replies: list[str] | None = None,
        *,
        k: int = 3,
        speculative: bool = True,
        auto_k: bool = False,
        drafters: tuple[str, ...] = ("ngram", "none"),
        target_name: str = "fake-target-135M",
        hold_at_steps: tuple[int, ...] = (),
        fail_at_step: int | None = None,
        cost: CostEstimate | None = DEFAULT_COST,
        notice: str | None = None,
        auto_k_script: tuple[AutoKRound, ...] = (),
        auto_k_notices: dict[int, bool] | None = None,
        accept_pattern: tuple[int, ...] = ACCEPT_PATTERN,
        verify: VerifyCurve | None = DEFAULT_VERIFY,
        build: str = "",
        cpu: str = "",
    ) -> None:
        #: stamped on every Turn, as the real engine stamps its llama.cpp build and CPU (specchat.engine.build)
        self.build, self.cpu = build, cpu
        self.controls = Controls(ControlState(k=k, speculative=speculative, auto_k=auto_k, drafter=drafters[0]))
        self._messages: list[Message] = []
        self.replies = list(replies or [DEFAULT_REPLY])
        self._reply_index = 0
        self._drafters = drafters
        self._target_name = target_name
        self.hold_at_steps = set(hold_at_steps)
        self.fail_at_step = fail_at_step
        self.cost = cost
        self.notice = notice
        self.auto_k_script = auto_k_script
        self.auto_k_notices = dict(auto_k_notices or {})
        self.accept_pattern = accept_pattern  # accepted count per round, cycled
        #: the target's v(K): EngineInfo.verify as given (None: an engine that reports none), and in every Step's
        #: cost as measured in this session, as the real engine's
        self.verify = verify
        self.cost_model = CostModel()  # the recent window: this session's drafting rounds, as the real engine's
        self._release = threading.Semaphore(0)
        self._hold_cond = threading.Condition()
        self.holds_reached = 0
        self.steps_seen: list[Step] = []
        self.turns: list[Turn] = []
        self.calls: list[str] = []
        self.closed = False
        self.generating = threading.Event()
        self.loaded: list[Message] | None = None
        self.threads: set[int] = set()  # threads that ran engine work (generation, close, detokenize)
        self.detokenized: list[list[int]] = []  # every detokenize_pieces call's ids
        words = sorted({piece for reply in self.replies for piece in tokenize(reply)} | set(GHOSTS))
        self.vocab: list[str] = words  # token id - VOCAB_BASE -> piece text
        self._ids = {piece: VOCAB_BASE + i for i, piece in enumerate(words)}

    # -- protocol ------------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        return self._messages

    def info(self) -> EngineInfo:
        state = self.controls.snapshot()
        return EngineInfo(
            target_name=self._target_name,
            draft_name=state.drafter or self._drafters[0],
            drafters=self._drafters,
            n_ctx=4096,
            k_max=K_MAX,
            can_speculate=True,
            verify=self.verify,
            weights=self.verify.weights if self.verify is not None else "",
        )

    def send(self, user_text: str) -> Iterator[Event]:
        self.calls.append(f"send:{user_text}")
        self._messages.append(Message("user", user_text))
        return self._generate()

    def regenerate(self) -> Iterator[Event]:
        """As :meth:`Conversation.regenerate`: the new reply becomes the newest, chosen version; the previous one
        is kept as its alternate (and comes back if no reply is recorded)."""
        self.calls.append("regenerate")
        if not self._messages or self._messages[-1].role != "assistant":
            raise ValueError("nothing to regenerate")
        previous = self._messages.pop()
        return self._as_new_version(self._generate(), previous)

    def _as_new_version(self, events: Iterator[Event], previous: Message) -> Iterator[Event]:
        n = len(self._messages)
        try:
            yield from events
        finally:
            if len(self._messages) > n:
                self._messages[-1] = previous.with_new_version(self._messages[-1])
            else:
                self._messages.append(previous)

    def select_alternate(self, index: int, at: int | None = None) -> Message:
        """As :meth:`Conversation.select_alternate` (``at``: the reply's place, default the last message)."""
        self.calls.append(f"select_alternate:{index}" if at is None else f"select_alternate:{index}@{at}")
        where = len(self._messages) - 1 if at is None else at
        reply = self._messages[where] if 0 <= where < len(self._messages) else None
        if reply is None or reply.role != "assistant" or not 0 <= index <= len(reply.alternates):
            raise ValueError(f"no reply version {index} at {where}")
        self._messages[where] = reply.with_version(index)
        return self._messages[where]

    def edit_last(self, user_text: str) -> Iterator[Event]:
        self.calls.append(f"edit:{user_text}")
        while self._messages and self._messages[-1].role == "assistant":
            self._messages.pop()
        if self._messages and self._messages[-1].role == "user":
            self._messages.pop()
        self._messages.append(Message("user", user_text))
        return self._generate()

    def reset(self, system_prompt: str | None = None) -> None:
        self.calls.append("reset")
        self._messages = [Message("system", system_prompt)] if system_prompt else []

    def load(self, messages: list[Message]) -> None:
        self.calls.append("load")
        self.loaded = list(messages)
        self._messages = list(messages)

    def detokenize_pieces(self, tokens: Sequence[int]) -> list[str]:
        self.threads.add(threading.get_ident())
        self.detokenized.append(list(tokens))
        out = []
        for token in tokens:
            if not VOCAB_BASE <= token < VOCAB_BASE + len(self.vocab):
                raise ValueError(f"token id {token} is not in the vocabulary of {self._target_name}")
            out.append(self.vocab[token - VOCAB_BASE])
        return out

    def close(self) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append("close")
        self.closed = True

    # -- test hooks ----------------------------------------------------------------------------
    def release(self) -> None:
        """Let the engine continue past the hold it is waiting at (or the next one it reaches)."""
        self._release.release()

    def wait_hold(self, n: int = 1, timeout: float = 30.0) -> bool:
        """Block until the engine has reached its n-th hold in total (call from a test thread)."""
        with self._hold_cond:
            return self._hold_cond.wait_for(lambda: self.holds_reached >= n, timeout)

    # -- generation ----------------------------------------------------------------------------
    def token_id(self, piece: str) -> int:
        """The id of a piece (a piece of a reply set after construction joins the vocabulary)."""
        if piece not in self._ids:
            self._ids[piece] = VOCAB_BASE + len(self.vocab)
            self.vocab.append(piece)
        return self._ids[piece]

    def _next_reply(self) -> list[str]:
        text = self.replies[min(self._reply_index, len(self.replies) - 1)]
        self._reply_index += 1
        return tokenize(text)

    def _wait_release(self) -> None:
        with self._hold_cond:
            self.holds_reached += 1
            self._hold_cond.notify_all()
        while not self._release.acquire(timeout=0.01):
            if self.controls.stop_requested:
                return

    def _generate(self) -> Iterator[Event]:
        self.threads.add(threading.get_ident())
        self.controls.clear_stop()
        tokens = self._next_reply()
        self.generating.set()
        try:
            yield from self._rounds(tokens)
        finally:
            self.generating.clear()

    def _auto_round(self, round_no: int) -> AutoKRound | None:
        if not self.auto_k_script:
            return None
        return self.auto_k_script[min(round_no, len(self.auto_k_script) - 1)]

    def _rounds(self, tokens: list[str]) -> Iterator[Event]:
        if self.notice:
            yield Notice(self.notice)
        prompt_n = sum(len(tokenize(m.content)) for m in self._messages)
        yield PromptDone(prompt_n=prompt_n, prompt_ms=5.0 * prompt_n / 10, cached_n=0)
        counters = TurnCounters(prompt_n=prompt_n, prompt_ms=5.0)
        out: list[str] = []
        ids: list[int] = []
        kinds: list[str] = []
        steps: list[Step] = []
        spec_on = 0  # rounds that ran with the speculation setting on (Turn.spec_on_steps)
        pos = 0
        round_no = 0
        stop_reason = "eos"
        while pos < len(tokens):
            if round_no in self.hold_at_steps:
                self._wait_release()
            if self.controls.stop_requested:
                stop_reason = "stopped"
                break
            if self.fail_at_step is not None and round_no == self.fail_at_step:
                raise RuntimeError("llama_decode returned -3 (fake failure)")
            state = self.controls.snapshot()
            spec_on += state.speculative
            drafter = state.drafter or self._drafters[0]
            can_draft = state.speculative and drafter != "none"
            auto = self._auto_round(round_no) if state.auto_k and can_draft else None
            k = auto.k_round if auto is not None else state.k
            speculate = can_draft and k > 0
            if round_no in self.auto_k_notices and auto is not None:
                drafting = self.auto_k_notices[round_no]
                yield auto_k_notice(
                    drafting=drafting, drafter=drafter, decision=KDecision(auto.k_round, auto.reason),
                    estimate=self.cost or DEFAULT_COST, alpha=self.cost_model.window(drafter).alpha,
                    k=auto.regime if drafting else 0,
                )
            emitted_pieces: list[Piece] = []
            drafted = accepted = 0
            if speculate:
                want = self.accept_pattern[round_no % len(self.accept_pattern)]
                remaining = len(tokens) - pos
                drafted = min(k, remaining)
                accepted = min(want, drafted)
                for i in range(accepted):
                    emitted_pieces.append(Piece(tokens[pos + i], "accepted", self.token_id(tokens[pos + i])))
                if accepted < drafted:
                    for j in range(drafted - accepted):
                        ghost = GHOSTS[(round_no + j) % len(GHOSTS)]
                        emitted_pieces.append(Piece(ghost, "rejected", self.token_id(ghost)))
                    nxt = pos + accepted
                    emitted_pieces.append(Piece(tokens[nxt], "corrected", self.token_id(tokens[nxt])))
                elif pos + accepted < len(tokens):
                    nxt = pos + accepted
                    emitted_pieces.append(Piece(tokens[nxt], "bonus", self.token_id(tokens[nxt])))
            else:
                emitted_pieces.append(Piece(tokens[pos], "plain", self.token_id(tokens[pos])))
            emitted = 0
            for piece in emitted_pieces:
                yield piece
                if piece.kind != "rejected":
                    out.append(piece.text)
                    ids.append(piece.token)
                    kinds.append(piece.kind)
                    emitted += 1
            pos += emitted
            t_draft = 0.4 * drafted if speculate else 0.0
            t_verify = 10.0 + 0.1 * drafted
            t_step = t_draft + t_verify + 0.5
            counters.add_step(
                drafted=drafted, accepted=accepted, emitted=emitted, t_draft_ms=t_draft, t_verify_ms=t_verify,
                t_overhead_ms=0.5, t_step_ms=t_step, k=k if speculate else 0, speculative=can_draft,
            )
            if speculate:
                self.cost_model.observe_step(drafter, k, drafted, accepted, t_draft, t_verify, drafted + 1)
            recent = recent_figures(self.cost_model.window(drafter)) if can_draft else None
            if auto is not None:
                policy = AutoK()
                policy.k = auto.regime
                status = k_status(
                    speculative=True, k_control=state.k, k_round=auto.k_round, k_cap=AUTO_K_CAP, auto_k=policy,
                    decision=KDecision(auto.k_round, auto.reason), best_k=auto.best_k,
                    k_used=recent.k_used if recent is not None else None,
                )
            else:
                status = k_status(speculative=can_draft, k_control=state.k, k_round=k if can_draft else 0, k_cap=K_MAX)
            cost = self.cost
            if cost is not None and recent is not None and recent.alpha is not None:
                cost = replace(cost, alpha=recent.alpha)  # the break-even line's α is the recent window's
            if cost is not None and self.verify is not None:
                cost = replace(cost, verify=live_curve(self.verify, round_no))
            step = Step(
                k=k if speculate else 0,
                drafted=drafted,
                accepted=accepted,
                emitted=emitted,
                t_draft_ms=t_draft,
                t_verify_ms=t_verify,
                t_overhead_ms=0.5,
                t_step_ms=t_step,
                speculative=speculate,
                auto_k=state.auto_k and can_draft,
                drafter=drafter if speculate else "none",
                n_past=prompt_n + pos,
                cost=cost,
                status=status,
                reply=reply_figures(counters, counters.step_ms),
                recent=recent,
            )
            steps.append(step)
            self.steps_seen.append(step)
            yield step
            round_no += 1
        text = "".join(out)
        draft_n = sum(s.drafted for s in steps)
        draft_acc = sum(s.accepted for s in steps)
        spec_steps = sum(1 for s in steps if s.drafted)
        step_ms = sum(s.t_step_ms for s in steps)
        turn = Turn(
            prompt_n=prompt_n,
            prompt_ms=5.0,
            predicted_n=len(ids),
            predicted_ms=step_ms,
            predicted_per_second=(len(ids) * 1000.0 / step_ms) if step_ms else 0.0,
            draft_n=draft_n,
            draft_n_accepted=draft_acc,
            acceptance=(draft_acc / draft_n) if draft_n else 0.0,
            mean_len=(1 + draft_acc / spec_steps) if spec_steps else 1.0,
            accepted_per_pos=[],
            draft_ms_per_step=(sum(s.t_draft_ms for s in steps) / spec_steps) if spec_steps else 0.0,
            verify_ms_per_step=(sum(s.t_verify_ms for s in steps) / len(steps)) if steps else 0.0,
            overhead_ms=0.5 * len(steps),
            step_ms=step_ms,
            n_steps=len(steps),
            n_spec_steps=spec_steps,
            stop_reason=stop_reason,
            text=text,
            tokens=ids,
            kinds=kinds,
            k=self.controls.snapshot().k,
            drafter=self.controls.snapshot().drafter or "",
            speculative=self.controls.snapshot().speculative,
            k_min=min((s.k for s in steps if s.k), default=0),  # as TurnCounters: the rounds that drafted
            k_max=max((s.k for s in steps if s.k), default=0),
            target=self._target_name,
            asked_steps=spec_steps,
            spec_on_steps=spec_on,
            build=self.build,
            cpu=self.cpu,
        )
        self._messages.append(
            Message("assistant", text, tokens=ids, kinds=kinds, stats=turn, stopped=stop_reason == "stopped")
        )
        self.turns.append(turn)
        yield turn


class FakeClock:
    """An injected clock: every call advances by ``step`` seconds (deterministic rates and flushes)."""

    def __init__(self, step: float = 0.05, start: float = 1000.0) -> None:
        self.step = step
        self.now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.now += self.step
            return self.now
