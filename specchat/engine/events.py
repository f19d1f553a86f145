"""The dataclasses the engine emits: the only thing the UI knows about the engine.

A turn yields, in order: optional :class:`ContextTrimmed`, :class:`PromptDone`, then for every
draft/verify round some :class:`Piece` events followed by one :class:`Step`, and finally one
:class:`Turn` - or an :class:`EngineError` instead when the turn failed; a remote engine whose server
failed mid-reply yields the partial reply's Turn (``stop_reason`` "error") and then the EngineError. A
:class:`Notice` may come before a round (e.g. :class:`AutoKNotice`: auto-K turned drafting off or back on).

Every figure says over which rounds it was computed: a :class:`Step` carries the reply so far and the recent
window as two :class:`Figures` (each one all from the same rounds), and a :class:`KStatus` saying how the
round's K was chosen. A figure that does not exist yet (no drafts: no acceptance) is ``None``, never 0.

Names of the timing fields follow llama-server's ``timings`` object
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

StopReason = Literal["eos", "length", "stopped", "context", "error", "stop"]
#: eos - the model's end-of-generation token; length - n_predict reached; stopped - the user stopped it;
#: context - no room left in n_ctx; error - the engine failed mid-reply; stop - a stop string ended it (the
#: fallback chat format's turn markers, :func:`specchat.engine.chat.cut_at_stop_strings`)


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
    #: the smallest α at which some K up to the drafter's cap is predicted to beat plain decoding (S > 1):
    #: ``math.inf`` when none does even at α = 1, None when not computed
    #: (:func:`specchat.engine.telemetry.speedup.break_even_alpha`)
    alpha_to_pay: float | None = None
    #: ``alpha`` is still the cost model's prior: no round of this drafter has drafted yet
    alpha_is_prior: bool = False


KState = Literal["warming up", "holding", "off for cost", "probing", "fixed K", "speculation off"]
#: warming up      - auto-K's first rounds with this drafter (a small K, or the cap of a free drafter)
#: holding         - auto-K keeps its K (it moves only when another K is clearly better, and not right
#:                   after a move: see ``dwell``)
#: off for cost    - auto-K does not draft: no K is predicted to pay (it probes now and then)
#: probing         - while off, one round drafts to see whether the text became predictable
#: fixed K         - auto-K is off: every round drafts up to the K control
#: speculation off - speculation is switched off, or there is no drafter: plain decoding
K_STATES: tuple[KState, ...] = get_args(KState)


@dataclass(frozen=True, slots=True)
class KStatus:
    """How a round's K was chosen, in numbers and in words (built by
    :func:`specchat.engine.telemetry.figures.k_status`).

    ``k`` is the K the rounds draft up to now (auto-K's current K, 0 when it is off, or the K control);
    ``k_round`` the K this round asked for (a probe drafts while ``k`` = 0, a re-timing round is plain while
    ``k`` > 0); ``k_cap`` the drafter's own cap; ``best_k`` the cost model's best K right now (auto-K only
    moves to it when it beats K by its margin on consecutive rounds, and never reverses a move before
    ``dwell_min`` rounds at the new K: ``dwell`` counts them, up to ``dwell_min``). ``label`` is the one line
    to show, e.g. ``K 16 (auto: holding, best now 4)``; ``note`` says in words why two K figures differ, or is
    empty.
    """

    state: KState
    k: int
    k_round: int
    k_cap: int
    best_k: int | None = None
    reason: str = ""  # auto-K's reason for this round (a KReason value), "" without auto-K
    dwell: int | None = None
    dwell_min: int | None = None
    label: str = ""
    note: str = ""


FiguresWindow = Literal["reply", "recent"]


@dataclass(frozen=True, slots=True)
class Figures:
    """Speculation figures over one window, every one of them computed from the same rounds.

    ``window`` is ``reply`` (every round of this reply so far, exact counts) or ``recent`` (the cost model's
    window: this drafter's recent rounds weighted by age in tokens of text, the very rounds auto-K's α comes
    from, so counts are weighted and not whole numbers); ``window_label`` says it in words.

    * ``rounds`` - rounds that asked the drafter for tokens; ``drafting_rounds`` - of those, rounds that
      drafted at least one token; ``rejections`` - rounds whose draft the target cut short;
    * ``acceptance`` = accepted / drafted (every drafted token counts);
    * ``alpha`` = accepted / (accepted + rejections): the per-position acceptance the cost model uses
      (a rejection ends a round, so the tokens drafted after it are not evidence about α); in the recent
      window it *is* the cost model's α, prior included (``prior_share`` = the prior's share of its weight);
    * ``mean_len`` = 1 + accepted / drafting rounds (llama.cpp's mean accepted length);
    * ``k_used`` = drafted / drafting rounds: how far the drafter drafted, next to the K asked (a cap);
    * ``tok_s``: generated tokens per second of the reply (reply window only).

    Each is None until the window has what it needs (no drafts: no acceptance). ``notes`` explain, one
    line each, where two of these numbers legitimately differ.
    """

    window: FiguresWindow
    window_label: str
    rounds: float = 0.0
    drafting_rounds: float = 0.0
    drafted: float = 0.0
    accepted: float = 0.0
    rejections: float = 0.0
    acceptance: float | None = None
    alpha: float | None = None
    mean_len: float | None = None
    k_used: float | None = None
    tok_s: float | None = None
    prior_share: float = 0.0
    notes: tuple[str, ...] = ()


DraftOrigin = Literal["conversation", "history", "model"]
#: conversation - copied from this conversation (prompt lookup: the n-gram drafter, the suffix drafter's own index)
#: history      - copied from a saved conversation (the suffix drafter's index of the history database)
#: model        - proposed by a draft model


@dataclass(frozen=True, slots=True)
class DraftSource:
    """Where a round's draft came from (issue 23: "show where a draft came from"): ``origin``, the link of a drafter
    chain or the drafter that proposed it (``drafter``), and for a ``history`` draft the saved message it copies
    (``conversation``/``message``: the history database's ids). The UI names it in words with the conversation's
    title and age, which only the history knows (:func:`specchat.tui.widgets.sidebar_text.source_text`)."""

    origin: DraftOrigin
    drafter: str
    conversation: int | None = None
    message: int | None = None


@dataclass(frozen=True, slots=True)
class Round:
    """One round's facts, built once by the loop (:meth:`specchat.engine.speculative.SpeculativeDecoder.generate`)
    and read by everything that counts it: the reply's :class:`~specchat.engine.telemetry.TurnCounters` (``add``),
    the :class:`~specchat.engine.telemetry.CostModel` (``observe``) and the :class:`Step` that reports it - as
    llama.cpp passes a round's inputs as one struct (``common_speculative_params``)."""

    drafter: str  # the drafter asked (drafter_kinds.NONE when there is none)
    k: int  # the draft length asked for (0 = a plain decode)
    speculative: bool  # speculation was on for this round
    drafted: int  # tokens proposed
    accepted: int  # of those, kept by the target
    emitted: int  # tokens added to the reply (never an end-of-generation token)
    #: the draft length the drafter would have chosen with no cap (n-gram), None = it fills K (a model)
    natural: int | None
    t_draft_ms: float
    t_verify_ms: float
    t_overhead_ms: float  # the round's time outside llama_decode
    t_step_ms: float
    catch_up_ms: float = 0.0  # the part of t_draft_ms spent reading context the drafter had missed
    #: the verify's decodes as (rows, ms): one batch, or single rows then a batch (VerifyCost.plan)
    verify_decodes: tuple[tuple[int, float], ...] = ()
    #: the drafter chain ``drafter`` is a link of (its name, e.g. ``suffix,draft.gguf``; :mod:`specchat.engine.chain`),
    #: "" outside a chain. Inside one, ``drafter`` names the link that drafted (or was asked) this round, so the cost
    #: model keeps each link's α and c apart
    chain: str = ""
    #: where the draft came from (None: nothing was drafted)
    source: DraftSource | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One draft -> verify -> accept round (or one plain decode when not speculating)."""

    k: int  # the draft length asked for this round (0 = plain decode)
    drafted: int  # tokens actually proposed (a drafter may propose fewer than k, or none)
    accepted: int  # of those, how many the target kept
    emitted: int  # tokens added to the reply this round (accepted + 1, or fewer at EOS/limit; never the EOS token)
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
    #: how this round's K was chosen (auto-K's state, or fixed K), see :class:`KStatus`
    status: KStatus | None = None
    #: the reply so far and the recent window, each from its own rounds (see :class:`Figures`)
    reply: Figures | None = None
    recent: Figures | None = None
    #: the drafter chain whose link ``drafter`` is ("" outside a chain), and where this round's draft came from
    #: (None: nothing was drafted), as in :class:`Round`
    chain: str = ""
    source: DraftSource | None = None


@dataclass(frozen=True, slots=True)
class PromptDone:
    """The new prompt tokens were decoded into the caches."""

    prompt_n: int
    prompt_ms: float
    cached_n: int  # tokens reused from the KV cache


@dataclass(frozen=True, slots=True)
class Calibrating:
    """Auto-K is about to time this target's verify cost v(K) after the prompt, before the reply's first round
    (:mod:`specchat.engine.calibration`): the first turn of a target file, threads, kernels and CPU, and the first
    turn whose context reaches another depth bucket (256, 512, 1024, ... tokens:
    :func:`~specchat.engine.calibration_cache.depth_bucket`). It takes seconds - 2.2-3.4 s on an AMD EPYC Zen 4
    for the bundled Q4_1 at 300-1200 tokens - once: the result is cached. Not sent when the cache has this
    depth's curve. :class:`PromptDone` follows when it is done."""

    depth: int  # the depth bucket timed (0 = below 256 tokens)
    context_n: int  # tokens in the target's KV while timing

    @property
    def label(self) -> str:
        """What is being timed, in a few words: ``timing v(K) after 512+ tokens``."""
        where = "for this model" if self.depth == 0 else f"after {self.depth}+ tokens"
        return f"timing v(K) {where}"

    @property
    def sentence(self) -> str:
        """The label with when and how often: what a UI or ``generate`` says while it runs."""
        return f"{self.label} before the first round (once; cached after)"


@dataclass(frozen=True, slots=True)
class ContextTrimmed:
    """The conversation did not fit ``n_ctx``: the oldest turns were dropped (never the system prompt)."""

    dropped_messages: int
    n_ctx: int


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the user should know that is not an error (e.g. a model has no chat template)."""

    message: str


@dataclass(frozen=True, slots=True)
class AutoKNotice(Notice):
    """Auto-K turned drafting off or back on: said once per change, with the reason in one line (``message``,
    e.g. ``auto-K: drafting off — the draft costs 0.98× a target token; it cannot pay even at 100 %
    acceptance``). A :class:`Notice`, so a UI that shows notices shows it; ``drafting`` is the new state."""

    drafting: bool = False
    drafter: str = ""
    reason: str = ""  # the auto-K reason (a KReason value) of the round that changed it
    #: the numbers the line quotes, as the cost model had them then: the draft cost c, the break-even α
    #: (``math.inf``: nothing pays), the recent α (None: no evidence yet), the K drafting resumed at (0 = off)
    c: float = 0.0
    alpha_to_pay: float | None = None
    alpha: float | None = None
    k: int = 0
    #: what the drafter's recent drafting rounds delivered against plain decoding, as timed (None: not measured)
    measured_gain: float | None = None


@dataclass(slots=True)
class Turn:
    """End-of-turn summary, llama-server compatible timings plus speculation statistics.

    ``mean_len`` = 1 + draft_n_accepted / verify steps with a draft, as llama.cpp's
    ``server_slot::print_timings`` prints it; ``acceptance`` = draft_n_accepted / draft_n, None when nothing
    was drafted. ``target`` and ``drafter`` name the pair; ``spec_on_steps`` counts the rounds that ran with
    speculation on (all of them, none, or - when it was switched mid-reply - some), ``asked_steps`` the
    rounds that asked the drafter for tokens, ``n_spec_steps`` those that got a draft, ``rejections`` those
    whose draft was cut short by a rejection.
    """

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    predicted_per_second: float
    draft_n: int
    draft_n_accepted: int
    acceptance: float | None
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
    k: int = 0  # the K control when the turn ended (auto-K chooses its own K per round: see k_min/k_max)
    drafter: str = ""
    speculative: bool = False
    #: the smallest and largest K the turn's drafting rounds asked for (auto-K's choices, or a K changed
    #: mid-reply); both 0 when no round drafted, and in turns saved before these fields existed
    k_min: int = 0
    k_max: int = 0
    target: str = ""
    rejections: int = 0
    asked_steps: int = 0
    spec_on_steps: int = 0
    #: what produced the reply: the llama.cpp build (:func:`specchat.engine.build.engine_build`) and the CPU
    #: (:func:`specchat.engine.calibration_cache.cpu_identity`); a llama-server's reply: its build_info
    #: (:func:`specchat.engine.build.server_build`) and the CPU where known; "" for older saved turns
    build: str = ""
    cpu: str = ""
    #: the accepted draft tokens by where they came from (:data:`DraftOrigin`: ``conversation``, ``history``,
    #: ``model``); {} when nothing was accepted, and in turns saved before this field existed
    accepted_by_origin: dict[str, int] = field(default_factory=dict)
    #: the saved conversations (history ids) the accepted history drafts copied, most tokens first
    history_conversations: list[int] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def acceptance_line(self) -> str:
        """llama.cpp's log line: ``draft acceptance = 0.69930 ( 100 accepted / 143 generated), mean len = 3.08``;
        with nothing drafted (llama.cpp then prints no line): ``draft acceptance: no tokens were drafted``."""
        if not self.draft_n or self.acceptance is None:
            return "draft acceptance: no tokens were drafted"
        return (
            f"draft acceptance = {self.acceptance:0.5f} ({self.draft_n_accepted:5d} accepted / "
            f"{self.draft_n:5d} generated), mean len = {self.mean_len:5.2f}"
        )


@dataclass(frozen=True, slots=True)
class EngineError:
    """The turn ended because of an error; the conversation and caches stay usable."""

    message: str


Event = Piece | Step | PromptDone | Calibrating | ContextTrimmed | Notice | AutoKNotice | Turn | EngineError
