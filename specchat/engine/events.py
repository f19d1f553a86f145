"""The dataclasses the engine emits: the only thing the UI knows about the engine.

A turn yields, in order: optional :class:`ContextTrimmed`, :class:`PromptDone`, then for every
draft/verify round some :class:`Piece` events followed by one :class:`Step`, and finally one
:class:`Turn`. Names of the timing fields follow llama-server's ``timings`` object
(``tools/server/server-common.cpp``: ``prompt_n``, ``prompt_ms``, ``predicted_n``, ``predicted_ms``,
``predicted_per_second``, ``draft_n``, ``draft_n_accepted``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

PieceKind = Literal["accepted", "rejected", "corrected", "bonus", "plain"]
#: accepted  - a draft token the target kept
#: rejected  - a draft token the target refused (ghost text, never part of the reply)
#: corrected - the target's own token at the first rejection
#: bonus     - the target's extra token after a fully accepted draft
#: plain     - a token decoded without speculation (K = 0, speculation off, or no draft proposed)
#: the kinds at run time, in that order: the same Literal, not a second list
PIECE_KINDS: tuple[PieceKind, ...] = get_args(PieceKind)

StopReason = Literal["eos", "length", "stopped", "context", "error"]


@dataclass(frozen=True, slots=True)
class Piece:
    """Text of one token, decoded incrementally from its bytes.

    ``text`` may be empty (the token ended mid-character, or it is a control token); a character
    split across tokens appears whole on the token that completed it.
    """

    text: str
    kind: PieceKind
    token: int


VerifySource = Literal["prior", "cache", "measured"]


@dataclass(frozen=True, slots=True)
class VerifyCurve:
    """The target's verify cost v(K) as the cost model fits it now, and what it means in words.

    ``v[K]`` = time of a (K+1)-row verify batch / time of one single-row decode, for K = 0..K_MAX
    (``v[0]`` = 1); ``target_ms`` = that single-row time; ``measured_rows`` = the largest batch timed (v
    beyond it is extrapolated); ``weights`` = the target's weight format (GGUF ``general.file_type``);
    ``source``: ``prior`` (nothing timed yet: v = 1), ``cache`` (this file's stored calibration, see
    :mod:`specchat.engine.calibration_cache`) or ``measured`` (timed in this session); rounds refine both.
    ``reason`` is one line derived from the format and the measured curve, e.g. ``Q4_1: no batched kernel
    on this CPU; verifying 17 rows costs 11 rows`` (:func:`specchat.engine.telemetry.verify_reason`).
    """

    weights: str
    v: tuple[float, ...]
    target_ms: float
    measured_rows: int
    source: VerifySource
    reason: str

    def at(self, k: int) -> float:
        """v(K), clamped to the curve's range."""
        return self.v[max(0, min(k, len(self.v) - 1))]


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """The cost model's current view (see :mod:`specchat.engine.telemetry`).

    ``c`` = draft cost per drafted token / target cost of one single-row decode;
    ``v`` = verify cost of K+1 rows / one row, for the current K; ``alpha`` = estimated per-position
    acceptance; ``best_k`` = argmax of the predicted speedup over 0..K_max (0 = do not draft);
    ``verify`` = the whole v(K) curve and its reason in words (None where no target is known).
    """

    alpha: float
    c: float
    v: float
    best_k: int
    predicted_speedup: float
    target_ms_per_token: float
    draft_ms_per_token: float
    verify: VerifyCurve | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One draft -> verify -> accept round (or one plain decode when not speculating)."""

    k: int  # the draft length asked for this round (0 = plain decode)
    drafted: int  # tokens actually proposed (a drafter may propose fewer than k, or none)
    accepted: int  # of those, how many the target kept
    emitted: int  # tokens added to the reply this round (accepted + 1, or fewer at EOS/limit)
    t_draft_ms: float
    t_verify_ms: float
    t_overhead_ms: float  # time of the round spent outside llama_decode
    t_step_ms: float
    speculative: bool
    auto_k: bool
    drafter: str
    n_past: int  # committed tokens in the target KV after the round
    cost: CostEstimate | None = None
    #: the draft length the drafter would have chosen with no cap (n-gram), None = it fills K (a model)
    natural: int | None = None


@dataclass(frozen=True, slots=True)
class PromptDone:
    """The new prompt tokens were decoded into the caches."""

    prompt_n: int
    prompt_ms: float
    cached_n: int  # tokens reused from the KV cache


@dataclass(frozen=True, slots=True)
class ContextTrimmed:
    """The conversation did not fit ``n_ctx``: the oldest turns were dropped (never the system prompt)."""

    dropped_messages: int
    n_ctx: int


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should know that is not an error (e.g. a model has no chat template)."""

    message: str


@dataclass(slots=True)
class Turn:
    """End-of-turn summary, llama-server compatible timings plus speculation statistics.

    ``mean_len`` = 1 + draft_n_accepted / verify steps with a draft, as llama.cpp's
    ``server_slot::print_timings`` prints it; ``acceptance`` = draft_n_accepted / draft_n.
    """

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float
    draft_n: int
    draft_n_accepted: int
    acceptance: float
    mean_len: float
    accepted_per_pos: list[float]  # accepted at draft position i / steps that drafted position i
    draft_ms_per_step: float
    verify_ms_per_step: float
    overhead_ms: float  # total time of the turn's rounds spent outside llama_decode
    step_ms: float  # total time of the turn's rounds
    n_steps: int
    n_spec_steps: int
    stop_reason: str
    text: str
    tokens: list[int] = field(default_factory=list)
    kinds: list[PieceKind] = field(default_factory=list)
    k: int = 0
    drafter: str = ""
    speculative: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    def acceptance_line(self) -> str:
        """llama.cpp's log line: ``draft acceptance = 0.69930 ( 100 accepted / 143 generated), mean len = 3.08``."""
        return (
            f"draft acceptance = {self.acceptance:0.5f} ({self.draft_n_accepted:5d} accepted / "
            f"{self.draft_n:5d} generated), mean len = {self.mean_len:5.2f}"
        )


@dataclass(frozen=True, slots=True)
class EngineError:
    """The turn ended because of an error; the conversation and caches stay usable."""

    message: str


Event = Piece | Step | PromptDone | ContextTrimmed | Notice | Turn | EngineError
