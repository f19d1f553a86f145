"""Live statistics for the sidebar, computed from the engine's events (pure Python, no Textual).

:class:`LiveStats` is fed by the turn's pump (one turn at a time) and hands out immutable
:class:`StatsSnapshot` objects, which the pump posts to the UI. Definitions follow llama.cpp:

- acceptance, α and mean accepted length are not computed here: the engine sends them with every Step, each
  over a named window (:class:`~specchat.engine.events.Figures`: this reply, auto-K's recent rounds), and the
  sidebar shows those, so no figure has two definitions;
- per-round acceptance (the sparkline) = accepted / drafted of each round that drafted;
- acceptance per draft position i = share of the steps that drafted >= i tokens whose i-th token was kept
  (llama.cpp PR #24536);
- rolling tok/s = tokens emitted by the steps of the last :data:`WINDOW_S` seconds of wall clock / the time
  they took, measured with the injected clock (so tests and snapshots are deterministic);
- per-step tok/s (the sparkline) = emitted / ``t_step_ms`` of that step, the engine's own timing.

The A/B table is the engine's :func:`~specchat.engine.telemetry.ab.ab_summary` over this session's finished
replies (one row per (target, drafter) pair and mode, ratios against the same pair's "off"): recomputed when a
reply ends, never from the steps here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from specchat.engine.events import Calibrating, CostEstimate, DraftSource, Figures, KStatus, PromptDone, Step, Turn

if TYPE_CHECKING:  # the telemetry package imports numpy: not at start-up (the window comes first)
    from specchat.engine.telemetry.ab import ABRow

WINDOW_S = 1.0
HISTORY = 60  # points kept for the sparklines


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    generating: bool = False
    tok_s: float | None = None
    tokens: int = 0
    steps: int = 0
    draft_ms: float | None = None
    verify_ms: float | None = None
    k: int | None = None
    auto_k: bool | None = None
    speculative: bool | None = None
    drafter: str | None = None
    tok_s_history: tuple[float, ...] = ()
    acceptance_history: tuple[float, ...] = ()
    per_position: tuple[float, ...] = ()
    cost: CostEstimate | None = None
    ab: tuple[ABRow, ...] = ()
    prompt_n: int | None = None
    prompt_ms: float | None = None
    cached_n: int | None = None
    last_turn: Turn | None = None
    #: the engine's own view of the last round (issue 11): how K was chosen, with its label and why two K
    #: figures differ; the reply's figures and the recent window's (the cost model's rounds), each from the
    #: same rounds, with the notes that explain differing numbers. None before the first round; ``reply`` is
    #: None again from the start of the next turn until its first round (it is that reply's window).
    status: KStatus | None = None
    reply: Figures | None = None
    recent: Figures | None = None
    #: where the current or last draft came from (kept through plain rounds and across replies, forgotten with a
    #: model switch), and the drafter chain whose link drafted it ("" outside a chain)
    source: DraftSource | None = None
    chain: str = ""
    #: auto-K is timing v(K) before this reply's first round (seconds, once per model and depth), else None
    calibrating: Calibrating | None = None


@dataclass
class LiveStats:
    """Accumulates one turn's steps (and all turns' A/B totals). Not thread-safe: one writer at a time."""

    _window: deque = field(default_factory=deque)  # (t_end, emitted, t_start)
    _last_t: float | None = None
    _tok_hist: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    _acc_hist: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    _tokens: int = 0
    _steps: int = 0
    _spec_steps: int = 0
    _draft_ms: float = 0.0
    _verify_ms: float = 0.0
    _pos_drafted: list[int] = field(default_factory=list)
    _pos_accepted: list[int] = field(default_factory=list)
    _last_step: Step | None = None
    _reply: Figures | None = None  # this reply's figures (the last Step's, reset at the start of a turn)
    _cost: CostEstimate | None = None
    #: this session's finished replies, in order, and the A/B rows over them
    _turns: list[Turn] = field(default_factory=list)
    _ab: tuple[ABRow, ...] = ()
    _prompt: PromptDone | None = None
    _last_turn: Turn | None = None
    _generating: bool = False
    _source: tuple[DraftSource, str] | None = None  # the last draft's source and chain
    _calibrating: Calibrating | None = None  # from the engine's Calibrating until its PromptDone

    # -- turn lifecycle ----------------------------------------------------------------------------
    def start_turn(self, now: float) -> None:
        """Reset the per-turn figures (the sparklines and the A/B table carry over)."""
        self._window.clear()
        self._last_t = now
        self._tokens = self._steps = self._spec_steps = 0
        self._draft_ms = self._verify_ms = 0.0
        self._pos_drafted = []
        self._pos_accepted = []
        self._reply = None
        self._prompt = None
        self._calibrating = None
        self._generating = True

    def engine_changed(self) -> None:
        """Another engine (a model switch) replaces the one the cost model's view came from: forget that view,
        so the break-even line and the verify cost curve of the old target are not shown as the new one's
        (the new engine's ``EngineInfo.verify`` is, until its first round). Between turns only."""
        self._cost = None

    def observe_calibrating(self, event: Calibrating) -> None:
        self._calibrating = event

    def observe_prompt(self, event: PromptDone, now: float) -> None:
        self._prompt = event
        self._calibrating = None  # the calibration, if any, is done: the rounds start
        self._last_t = now  # the rolling rate counts decode time, not prompt time

    def observe_step(self, step: Step, now: float) -> None:
        start = self._last_t if self._last_t is not None else now
        self._last_t = now
        self._window.append((now, step.emitted, start))
        while len(self._window) > 1 and now - self._window[0][0] > WINDOW_S:
            self._window.popleft()
        self._tokens += step.emitted
        self._steps += 1
        self._verify_ms += step.t_verify_ms
        if step.t_step_ms > 0:
            self._tok_hist.append(step.emitted * 1000.0 / step.t_step_ms)
        if step.drafted > 0:
            self._spec_steps += 1
            self._draft_ms += step.t_draft_ms
            self._acc_hist.append(step.accepted / step.drafted)
            while len(self._pos_drafted) < step.drafted:
                self._pos_drafted.append(0)
                self._pos_accepted.append(0)
            for i in range(step.drafted):
                self._pos_drafted[i] += 1
                if i < step.accepted:
                    self._pos_accepted[i] += 1
        if step.cost is not None:
            self._cost = step.cost
        if step.drafted > 0 and step.source is not None:
            self._source = (step.source, step.chain)
        self._last_step = step
        self._reply = step.reply

    def finish_turn(self, turn: Turn | None) -> None:
        self._generating = False
        self._calibrating = None
        if turn is None:
            return
        self._last_turn = turn
        from specchat.engine.telemetry.ab import ab_summary  # numpy: imported with the first reply, not at start-up

        self._turns.append(turn)
        self._ab = ab_summary(self._turns)

    # -- read side ---------------------------------------------------------------------------------
    def rolling_tok_s(self) -> float | None:
        if not self._window:
            return None
        span = self._window[-1][0] - self._window[0][2]
        if span <= 0:
            return None
        return sum(e for _, e, _ in self._window) / span

    def snapshot(self) -> StatsSnapshot:
        step = self._last_step
        per_pos = tuple(
            a / d for a, d in zip(self._pos_accepted, self._pos_drafted, strict=True) if d > 0
        )
        return StatsSnapshot(
            generating=self._generating,
            tok_s=self.rolling_tok_s() if self._generating else None,  # afterwards: the turn's own rate
            tokens=self._tokens,
            steps=self._steps,
            draft_ms=(self._draft_ms / self._spec_steps) if self._spec_steps else None,
            verify_ms=(self._verify_ms / self._steps) if self._steps else None,
            k=step.k if step else None,
            auto_k=step.auto_k if step else None,
            speculative=step.speculative if step else None,
            drafter=step.drafter if step else None,
            tok_s_history=tuple(self._tok_hist),
            acceptance_history=tuple(self._acc_hist),
            per_position=per_pos,
            cost=self._cost,
            ab=self._ab,
            prompt_n=self._prompt.prompt_n if self._prompt else None,
            prompt_ms=self._prompt.prompt_ms if self._prompt else None,
            cached_n=self._prompt.cached_n if self._prompt else None,
            last_turn=self._last_turn,
            status=step.status if step else None,
            reply=self._reply,
            recent=step.recent if step else None,
            source=self._source[0] if self._source else None,
            chain=self._source[1] if self._source else "",
            calibrating=self._calibrating,
        )
