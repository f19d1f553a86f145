"""The speculative loop: draft -> verify -> accept -> roll back -> emit, one round at a time.

Each round (llama.cpp ``examples/speculative-simple``; Leviathan et al. 2023, Alg. 1), after
:meth:`SpeculativeDecoder._choose_k` read the controls and picked the drafter and K:

1. **draft** - the drafter proposes up to K tokens continuing ``committed + [last]``;
2. **verify** - the target's rows ``[last, d1..dK]`` at positions ``n_past..n_past+K`` with logits on
   all K+1 rows: one batch, or leading single rows first where this CPU measured a small batch dearer
   than its rows one by one (:meth:`SpeculativeDecoder._verify`);
3. **accept** - :func:`specchat.engine.sampling.accept`: at temperature 0 the longest prefix where
   ``d_i == argmax p_i`` plus the target's argmax at the first mismatch (corrected) or after the last
   draft (bonus); at T > 0 exact rejection sampling, bonus sampled from p_{K+1};
4. **roll back** - ``llama_memory_seq_rm`` drops the rejected rows from the target KV and the drafter
   trims its own KV to the committed tokens;
5. **emit** - :class:`_Reply` turns the round's tokens into :class:`Piece` events (ghosts of the rejected
   draft right before the correction); the round's facts become one :class:`Round`, which
   :meth:`SpeculativeDecoder._record` counts (the reply's counters, the cost model) and reports as a :class:`Step`.

The last sampled token is never in the target KV between rounds: it is the first row of the next
verify batch. K = 0, speculation off, or an empty draft make the round a plain single-row decode.
Controls (K, on/off, drafter, sampling, stop) are read once per round, so a change made mid-reply
applies from the next round of the same reply.

Each :class:`Step` also says how its K was chosen and carries the figures of the reply so far and of the
cost model's recent window (:mod:`specchat.engine.telemetry.figures`); when auto-K turns drafting off or back
on, an :class:`~specchat.engine.events.AutoKNotice` says so once, before the round, with the reason.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specchat.engine.calibration import (
    CALIBRATION_ROWS,
    calibrate_draft_cost,
    calibrate_verify_cost,
    draft_cost_ratios,
    has_cached_verify_cost,
    load_cached_verify_cost,
    rescale_cached_verify_cost,
    verify_cost_for,
)
from specchat.engine.calibration_cache import CalibrationCache, depth_bucket
from specchat.engine.chain import DrafterChain, each_link, every_drafter
from specchat.engine.controls import Controls, ControlState
from specchat.engine.detokenize import PieceDecoder
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.drafters import Draft, Drafter, NgramDrafter
from specchat.engine.events import (
    AutoKNotice,
    Calibrating,
    CostEstimate,
    DraftSource,
    Event,
    Figures,
    Piece,
    PieceKind,
    PromptDone,
    Round,
    Step,
    StopReason,
    VerifyCurve,
    VerifySource,
)
from specchat.engine.model import Model
from specchat.engine.sampling import accept, accept_argmax
from specchat.engine.telemetry import AutoK, CostModel, KDecision, TurnCounters
from specchat.engine.telemetry.figures import auto_k_notice, k_status, recent_figures, reply_figures

#: an auto-K probe of a model drafter reads at most this many unseen tokens (see ModelDrafter.limit_catch_up)
PROBE_CATCH_UP = 32
#: the draft of a round that does not draft (K = 0): shared, never changed
_NO_DRAFT = Draft()
#: seconds between refits of the figures a Step shows (the v(K) curve and the break-even α of the cost estimate)
#: while K and the drafter stay the same: the app posts the stats at most ~4 times a second
#: (:mod:`specchat.tui.generation`), and refitting every round cost plain decoding 5 % of its time (0.27 s of
#: 5.2 s over 200 rounds of the bundled Q4_1, cProfile on an AMD EPYC Zen 4: one refit is ~2.7 ms, mostly the
#: break-even bisection's speedup curves) - the gap to llama-server issue 20 measured
FIGURES_REFRESH_S = 0.25


class SpeculativeDecoder:
    """Owns the target model, the drafters and the per-round bookkeeping of one conversation."""

    def __init__(
        self,
        target: Model,
        drafters: dict[str, Drafter],
        controls: Controls,
        *,
        drafter: str | None = None,
        cost_model: CostModel | None = None,
        auto_k: AutoK | None = None,
        calibration_cache: CalibrationCache | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.target = target
        #: seconds, monotonic: what the rounds are timed with (a replayed cost profile passes its virtual clock,
        #: :mod:`specchat.engine.cost_profile`)
        self.clock = clock
        self.drafters = drafters
        #: every drafter that drafts rounds, by name: a chain's links in place of the chain (what the cost model keys)
        self.links = each_link(drafters)
        self.controls = controls
        self.drafter_name = drafter if (drafter in drafters or drafter == NONE) else next(iter(drafters), NONE)
        self.cost_model = cost_model or CostModel()
        self.auto_k = auto_k or AutoK(k_max=K_MAX)
        #: a drafter chain's auto-K policies, one per link (:meth:`AutoK.fork`), and the policy of this round
        self._link_policies: dict[str, AutoK] = {}
        self._policy_now = self.auto_k
        #: whether each chain link was last told to be drafting (AutoKNotice), so links taking turns say nothing
        self._announced_links: dict[str, bool] = {}
        #: where the target's v(K) timings are kept between sessions (None: time them every session)
        self.calibration_cache = calibration_cache
        #: where the cost model's v(K) came from: nothing yet, this file's cached calibration, or timed here
        self.verify_source: VerifySource = "prior"
        #: the cached calibration was re-anchored at this session's single-row time (once, before its first use)
        self._rescaled = False
        #: speculation needs partial KV removal; recurrent/hybrid targets only decode plainly
        self.can_speculate = not target.is_recurrent
        #: the depth bucket (:func:`~specchat.engine.calibration_cache.depth_bucket`) of the calibration the cost
        #: model's v(K) came from (None: none yet); a turn that starts in another bucket calibrates there
        self._verify_depth: int | None = None
        if calibration_cache is not None and self.can_speculate:  # start warm: v(K) known before the first turn
            if load_cached_verify_cost(target, self.cost_model, calibration_cache):
                self.verify_source = "cache"
                self._verify_depth = depth_bucket(len(target.tokens))
        #: the latest v(K) curve in words, refreshed on the engine thread (so another thread, e.g. the UI's
        #: EngineInfo, reads a finished value and never makes the cost model refit under the engine)
        self.verify = self._verify_curve()
        #: (drafter, drafting) as last told to the user by an AutoKNotice (auto-K starts a drafter drafting)
        self._announced: tuple[str, bool] | None = None
        #: this round is auto-K's (its K is the engine's to choose, so the n-gram drafter's length is priced too)
        self._auto_round = False
        #: when the reply being generated started (the clock's seconds), for its figures
        self._t_gen0 = 0.0
        #: the last Step's figures per drafter (a chain's links take turns: each keeps its own between refits)
        self._figures: dict[str, _Figures] = {}
        self._rows_buf: np.ndarray | None = None  # a pieced verify's logits rows (_verify_rows)
        for d in every_drafter(drafters):  # the n-gram drafter sizes its drafts by the verify cost measured here
            if isinstance(d, NgramDrafter) and d.verify_cost is None:
                d.verify_cost = functools.partial(self._measured_v, d.name)
            if isinstance(d, NgramDrafter) and d.boundary is None:  # and stops copying at a turn's end
                d.boundary = target.is_eog

    def _measured_v(self, drafter: str | None = None) -> list[float] | None:
        """The target's v by K as the cost model has measured it, for an auto-K round (None before a multi-row
        timing, and with a fixed K: the user's K is a cap the drafter fills by its confidence alone, as before -
        priced by a v extrapolated from the first few rounds' batch sizes it would stop drafting at once)."""
        return self.cost_model.measured_v(drafter or self.drafter_name) if self._auto_round else None

    def _verify_curve(self) -> VerifyCurve:
        """The target's v(K) curve as the cost model fits it now, with its reason in words."""
        return self.cost_model.verify.curve(self.target.weights, self.verify_source, row_by_row=self.target.row_by_row)

    @property
    def drafter(self) -> Drafter | None:
        return self.drafters.get(self.drafter_name)

    def reset(self) -> None:
        self.target.clear()
        for d in self.drafters.values():
            d.reset()

    def reset_auto_k(self) -> None:
        """auto-K's policy back to its start, a chain's links' too (the cost model keeps its estimates)."""
        self.auto_k.reset()
        self._link_policies.clear()

    # -- the loop ----------------------------------------------------------------------------------
    def generate(
        self, context: Sequence[int], *, max_new: int, rng: np.random.Generator
    ) -> Generator[Event, None, TurnCounters]:
        """Continue ``context`` (the whole conversation so far, as token ids) by up to ``max_new`` tokens.

        Reuses the longest common prefix of the target KV and ``context``. Yields
        :class:`PromptDone`, then per round the :class:`Piece` events and one :class:`Step`; finally
        returns (as the generator's return value) a :class:`TurnCounters` holding the reply.
        """
        if not context:
            raise ValueError("nothing to continue: the context is empty")
        target = self.target
        counters = yield from self._prefill(context)
        reply = _Reply(target.piece)
        last = int(context[-1])
        # what the drafters read, target.tokens + [last]: one list a reply appends to, so that a drafter can tell
        # the text it has read continued from a new one without comparing it whole (NgramDrafter._extend_index)
        text = [*target.tokens, last]
        t_gen0 = self._t_gen0 = self.clock()
        while (stop_reason := self._stop_reason(len(reply.tokens), max_new)) is None:
            st = self.controls.snapshot()
            remaining = max_new - len(reply.tokens)
            drafter, speculative, k, decision = self._choose_k(st, text, remaining, rng)
            notice = self._announce(drafter, decision)
            if notice is not None:
                yield notice
            t_step0 = self.clock()
            decode_ms0 = target.decode_ms_total
            # 1. draft
            draft = self._draft(drafter, text, k, st, rng) if k > 0 else _NO_DRAFT
            d = draft.tokens[:k]
            n_past = len(target.tokens)
            # 2. verify
            greedy = st.sampling.temperature <= 0
            survival = self._survival(drafter, draft, len(d)) if greedy else None
            rows, decodes = self._verify(last, d, survival=survival, argmax=greedy)
            t_verify = sum(ms for _, ms in decodes)
            # 3. accept
            a, final = accept_argmax(rows, d) if greedy else accept(rows, d, draft.q, st.sampling, rng)
            emitted, eog = self._cut([*d[:a], final], remaining)
            # 4. roll back: the KV keeps `last` and the emitted tokens except the new last
            target.trim(n_past + len(emitted))
            if d:
                drafter.rollback(target.tokens)
            last = emitted[-1]
            text.extend(emitted)  # = target.tokens + [last] again
            # 5. emit, and record the round
            yield from reply.emit(emitted, d, a, eog)
            t_step, overhead = self._elapsed(t_step0, decode_ms0, draft)
            rnd = Round(
                drafter=drafter.name if drafter is not None else NONE, k=k, speculative=speculative, drafted=len(d),
                accepted=a, emitted=len(emitted) - int(eog), natural=draft.natural if k > 0 else None,
                t_draft_ms=draft.t_ms, t_verify_ms=t_verify, t_overhead_ms=overhead, t_step_ms=t_step,
                catch_up_ms=draft.catch_up_ms, verify_decodes=tuple(decodes), chain=self._chain_name(),
                source=self._source(drafter) if d else None,
            )
            yield self._record(counters, st, rnd, decision)
            if eog:
                stop_reason = "eos"
                break
        self.verify = self._verify_curve()  # the curve between turns is the whole reply's (EngineInfo.verify)
        self._figures.clear()
        counters.finish(
            predicted_ms=(self.clock() - t_gen0) * 1000.0,
            stop_reason=stop_reason, text=reply.text(), tokens=reply.tokens, kinds=reply.kinds, last=last,
        )
        return counters

    # -- the named steps ---------------------------------------------------------------------------
    def _prefill(self, context: Sequence[int]) -> Generator[Event, None, TurnCounters]:
        """Decode what the target KV is missing of ``context``, all but its last token (the first verify
        batch carries it); yield :class:`PromptDone` (after a :class:`Calibrating` when v(K) is about to be timed:
        seconds the user should not take for a hang). When speculating, the cost model needs v(K) and c first
        (:mod:`specchat.engine.calibration`): with auto-K and v(K) never measured, or measured at another depth
        bucket than this prompt's (:func:`~specchat.engine.calibration_cache.depth_bucket`: the conversation grew
        past 256, 512, 1024, ... tokens), from this target's cached calibration of this depth or timed after the
        prompt (every :data:`CALIBRATION_ROWS`, then cached); with a fixed K,
        only the unit of v and c - the single-row target decode - once (without it the cost model's c and v
        were ratios to an extrapolated unit: the first turn of a new pair read c = 0.2 where it then measured
        0.9); a model drafter's c, if still unknown then, is timed before the prompt (on equal footing with an
        empty KV). That time is not the prompt's."""
        target = self.target
        t0 = self.clock()
        keep = min(target.sync_prefix(context), len(context) - 1)
        if target.is_recurrent and keep < len(target.tokens):
            target.clear()  # a recurrent state cannot be cut back: start over
            keep = 0
        target.trim(keep)
        st = self.controls.snapshot()
        cm = self.cost_model
        speculating = st.speculative and self.can_speculate and self.drafter is not None
        # the conversation has grown into another depth bucket since v(K) was calibrated: a verify's cost per row
        # grows with depth faster than one row's, so the curve is this depth's (cached, or timed here)
        depth = depth_bucket(len(context) - 1)
        moved = self._verify_depth is not None and depth != self._verify_depth
        calibrate = speculating and st.auto_k and (cm.largest_measured_rows() < CALIBRATION_ROWS[-1] or moved)
        # a cached calibration is milliseconds of another hour: re-anchored at this one before its first use
        rescale = speculating and not calibrate and self.verify_source == "cache" and not self._rescaled
        unit = speculating and not calibrate and cm.steps_since_single_row is None
        # c with the unit, and whenever auto-K is to choose without it (v(K) may come from the cache)
        draft = (unit or (speculating and st.auto_k)) and any(
            not d.free and not cm.has_draft_cost(name) for name, d in self.links.items()
        )
        ratios: dict[str, float] = {}
        if draft and not target.tokens:
            t_ratio = self.clock()
            ratios = draft_cost_ratios(target, self.links, int(context[0]))
            t0 += self.clock() - t_ratio
        target.decode(context[keep:-1], logits_last=0)
        prompt_ms = (self.clock() - t0) * 1000.0
        last = int(context[-1])
        if calibrate:
            cache = self.calibration_cache
            if moved and cache is not None and rescale_cached_verify_cost(target, cm, cache, last) is not None:
                self.verify_source = "cache"  # this depth's cached curve, re-anchored at this moment
            else:
                if moved:
                    cm.replace_verify_timings(())  # another depth's timings (calibration and rounds) are not this one's
                if cache is None or not has_cached_verify_cost(target, cache):  # seconds: say so before
                    yield Calibrating(depth=depth, context_n=len(target.tokens))
                self.verify_source = verify_cost_for(target, cm, last, cache)  # type: ignore[assignment]
            self._rescaled = True  # timed now, or (from the cache) as good as the re-anchoring below
            self._verify_depth = depth
        elif rescale and self.calibration_cache is not None:
            self._rescaled = True
            rescale_cached_verify_cost(target, cm, self.calibration_cache, last)
        elif unit:
            calibrate_verify_cost(target, cm, last, rows=(1,), reps=3)
            self.verify_source = "measured"
        if calibrate or unit or rescale:
            self.verify = self._verify_curve()
        if draft:
            calibrate_draft_cost(cm, self.links, last, ratios)
        # after the calibration: the reply's generation starts right after this event (a race's clock, a UI's
        # rolling rate count from it)
        yield PromptDone(prompt_n=len(context) - keep, prompt_ms=prompt_ms, cached_n=keep)
        return TurnCounters(prompt_n=len(context) - keep, prompt_ms=prompt_ms)

    def _survival(self, drafter: Drafter | None, draft: Draft, d: int) -> tuple[float, ...] | None:
        """P(the first j of the ``d`` drafted tokens are all accepted), j = 1..d: the drafter's own estimate
        (:attr:`Draft.survival`), else α̂^j with the cost model's α of this drafter (a model drafter)."""
        if d == 0 or drafter is None:
            return None
        own = draft.survival
        if own is not None and len(own) >= d:
            return tuple(own[:d])
        alpha = self.cost_model.alpha(drafter.name)
        return tuple(alpha ** j for j in range(1, d + 1))

    def _verify(self, last: int, draft: Sequence[int], *, survival: Sequence[float] | None, argmax: bool = False
                ) -> tuple[np.ndarray, list[tuple[int, float]]]:
        """Step 2: the target's logits on the rows ``[last, *draft]`` at ``n_past...``, decoded the cheapest way
        this CPU measured (:meth:`~specchat.engine.telemetry.verify_cost.VerifyCost.plan`: one batch, or
        leading single rows where a small batch costs more than its rows one by one), with each decode's
        (rows, ms). At temperature 0 (``survival`` given: the drafter's P(first j accepted)) a decode whose rows'
        argmax refuses a draft token ends the verify there: the rows after a rejection are never used (step 3
        stops at the first), so they are not paid for, and the plan may cut a doubtful long draft into chunks
        so that a copy breaking early pays for its first chunk only. The rows are the target's own either way -
        a single row is exactly what plain decoding computes. ``argmax`` (temperature 0): each row's argmax instead of
        the row (:meth:`~specchat.engine.model.Model.decode`: read where llama.cpp wrote it, never copied)."""
        tokens = [last, *draft]
        greedy = survival is not None
        plan = self.cost_model.verify.plan(len(tokens), survival) if draft else (1,)
        decodes: list[tuple[int, float]] = []
        rows_out: np.ndarray | None = None
        start = 0
        for i, rows in enumerate(plan):
            t0 = self.clock()
            part = self.target.decode(tokens[start : start + rows], logits_last=rows, argmax=argmax)
            decodes.append((rows, (self.clock() - t0) * 1000.0))
            assert part is not None
            if len(plan) == 1:
                return part, decodes
            if rows_out is None:
                rows_out = np.empty(len(tokens), np.int64) if argmax else self._verify_rows(len(tokens), part.shape[1])
            rows_out[start : start + rows] = part
            start += rows
            if greedy and i < len(plan) - 1:
                judged = tokens[start - rows + 1 : start + 1]  # row j predicts the token after the j-th
                best = part if argmax else part.argmax(axis=1)
                if any(int(best[j]) != t for j, t in enumerate(judged)):
                    break
        assert rows_out is not None
        return rows_out[:start], decodes

    def _verify_rows(self, rows: int, n_vocab: int) -> np.ndarray:
        """The array a verify decoded in several pieces gathers its logits rows in: one per decoder, kept from
        round to round (the rows are read by step 3 of the same round only). A new array per round - the pieces
        concatenated - cost 30-90 ms for 60-65 rows of the bundled SmolLM2 (12.8 MB) on an AMD EPYC Zen 4 (KVM,
        2026-12-05; the summary prompt at K 64: the round's time outside llama_decode), 2-4 single-row decodes:
        fresh pages each time; writing into pages already touched costs ~1 ms."""
        buf = self._rows_buf
        if buf is None or buf.shape[0] < rows or buf.shape[1] != n_vocab:
            buf = self._rows_buf = np.empty((max(rows, K_MAX + 1), n_vocab), dtype=np.float32)
        return buf

    def _stop_reason(self, n_reply: int, max_new: int) -> StopReason | None:
        """Why the reply ends before the next round (a stop request, the token budget, a full context), or None."""
        if self.controls.stop_requested:
            return "stopped"
        if n_reply >= max_new:
            return "length"
        if len(self.target.tokens) + 1 > self.target.n_ctx:  # no row left for the next verify batch
            return "context"
        return None

    def _choose_k(
        self, st: ControlState, text: list[int], remaining: int, rng: np.random.Generator | None = None
    ) -> tuple[Drafter | None, bool, int, KDecision | None]:
        """This round's drafter, whether it speculates, K, and auto-K's decision (None for a fixed K): the
        controls' K, or auto-K's (which may ask to re-time the draft first, or to probe without a full
        catch-up), within the drafter's cap, the context left and the token budget (the round emits up to
        K + 1 tokens). A drafter chain picks its link here (:meth:`DrafterChain.choose`: a free link's draft is
        made while choosing, from ``text``, the reply's one list of what the drafters read), and each link's K is
        its own policy's."""
        if st.drafter is not None and st.drafter != self.drafter_name:
            if st.drafter in self.drafters or st.drafter == NONE:
                self.drafter_name = st.drafter
        drafter = self.drafter
        if not (st.speculative and self.can_speculate and drafter is not None):
            return drafter, False, 0, None
        self._auto_round = st.auto_k
        if isinstance(drafter, DrafterChain):
            link, k, decision = drafter.choose(
                text, lambda d: self._k_for(st, d, text[-1], remaining), st.sampling,
                rng if rng is not None else np.random.default_rng(),
            )
            return link, True, k, decision  # type: ignore[return-value]
        k, decision = self._k_for(st, drafter, text[-1], remaining)
        return drafter, True, k, decision

    def _k_for(self, st: ControlState, drafter: Drafter, last: int, remaining: int) -> tuple[int, KDecision | None]:
        """``drafter``'s K for this round and auto-K's decision (None for a fixed K), by its policy (a chain link's
        own, :meth:`_policy`)."""
        decision = None
        policy = self._policy_now = self._policy(drafter)
        if st.auto_k:
            decision = policy.choose(self.cost_model, drafter.name, free=drafter.free, k_cap=drafter.k_cap)
            if decision.remeasure:
                self.cost_model.observe_draft_cost(drafter.name, drafter.time_one_token(last))
            if decision.probe:
                drafter.limit_catch_up(PROBE_CATCH_UP)  # a probe must not pay for every plain round
            k = decision.k
        else:
            k = st.k
        room = self.target.n_ctx - len(self.target.tokens) - 1  # verify rows available after `last`
        return max(0, min(k, drafter.k_cap, room, remaining - 1)), decision

    def _policy(self, drafter: Drafter) -> AutoK:
        """The auto-K policy that chooses ``drafter``'s K: :attr:`auto_k`, or for a chain's link a fork of it."""
        if not isinstance(self.drafter, DrafterChain):
            return self.auto_k
        policy = self._link_policies.get(drafter.name)
        if policy is None:
            policy = self._link_policies[drafter.name] = self.auto_k.fork()
        return policy

    def _chain_name(self) -> str:
        """The chain whose link drafts the rounds now, "" when the drafter is not a chain."""
        return self.drafter_name if isinstance(self.drafter, DrafterChain) else ""

    def _draft(self, drafter: Drafter, context: list[int], k: int, st: ControlState, rng: np.random.Generator) -> Draft:
        """Step 1: ``drafter``'s draft of up to ``k`` tokens (a chain's free link drafted it already while it was
        chosen)."""
        chain = self.drafter
        prepared = chain.take(context) if isinstance(chain, DrafterChain) else None
        return prepared if prepared is not None else drafter.draft(context, k, st.sampling, rng)

    @staticmethod
    def _source(drafter: Drafter) -> DraftSource | None:
        """Where ``drafter``'s latest draft came from (a drafter that does not say: None)."""
        source = getattr(drafter, "draft_source", None)
        return source() if source is not None else None

    def _announce(self, drafter: Drafter | None, decision: KDecision | None) -> AutoKNotice | None:
        """An :class:`AutoKNotice` when auto-K's decision turned drafting off or back on for ``drafter`` (its
        regime K went to 0 or came back from 0; a probe or a re-timing round is not a change), else None. Said
        once per change, across turns; a new drafter starts drafting (auto-K warms it up) without a notice."""
        if decision is None or drafter is None:
            return None
        policy = self._policy_now
        drafting = policy.k > 0
        if self._chain_name():  # links take turns: each is told apart, and only when its own state changes
            if self._announced_links.setdefault(drafter.name, True) == drafting:
                return None
            self._announced_links[drafter.name] = drafting
            self._announced = (drafter.name, not drafting)
        if self._announced is None or self._announced[0] != drafter.name:
            self._announced = (drafter.name, True)
        if drafting == self._announced[1]:
            return None
        self._announced = (drafter.name, drafting)
        cm = self.cost_model
        return auto_k_notice(
            drafting=drafting, drafter=drafter.name, decision=decision,
            estimate=cm.estimate(drafter.name, policy.k, policy.cap), alpha=cm.window(drafter.name).alpha,
            k=policy.k, measured_gain=cm.measured_gain(drafter.name),
        )

    def _cut(self, tokens: list[int], remaining: int) -> tuple[list[int], bool]:
        """The round's tokens up to end-of-generation and the token budget (never past either), and whether
        the last one is end-of-generation (it ends the reply and is not part of it)."""
        eog_at = next((i for i, t in enumerate(tokens) if self.target.is_eog(t)), None)
        if eog_at is not None:
            tokens = tokens[: eog_at + 1]
        tokens = tokens[:remaining]
        return tokens, eog_at is not None and len(tokens) == eog_at + 1

    def _elapsed(self, t_step0: float, decode_ms0: float, draft: Draft) -> tuple[float, float]:
        """The round's ms since ``t_step0`` and its part outside llama_decode (Python, sampling, the consumer of
        the events): its overhead, which the cost model charges to the round's verify."""
        t_step = (self.clock() - t_step0) * 1000.0
        in_decode = (self.target.decode_ms_total - decode_ms0) + draft.decode_ms
        return t_step, max(0.0, t_step - in_decode)

    def _record(self, counters: TurnCounters, st: ControlState, rnd: Round, decision: KDecision | None) -> Step:
        """Count the round in the reply's counters and the cost model; the :class:`Step` that reports it, with
        how its K was chosen and the figures of the reply so far and of the cost model's recent window (refit by a
        drafting round at most every :data:`FIGURES_REFRESH_S` while the drafter and its cap stay)."""
        now = self.clock()
        counters.add(rnd)
        cm = self.cost_model
        cm.observe(rnd)
        drafter = self.links.get(rnd.drafter)
        cap = drafter.k_cap if drafter is not None else K_MAX
        key = (rnd.drafter, cap)
        fig = self._figures.get(rnd.drafter)
        if fig is not None and (fig.key != key or (rnd.drafted > 0 and now - fig.at >= FIGURES_REFRESH_S)):
            fig = None  # another cap, or a drafting round due for a refit
        if fig is not None and rnd.drafted == 0:
            # a round that drafted nothing moves no α: the last figures stand, however old (plain decoding refit
            # the table for the new single-row time and replayed a curve every token: 1.1 % of a plain round under
            # cProfile, AMD EPYC Zen 4, bundled Q4_1, --threads 1; refit at 4 Hz instead, still ~8 of the ~120 ms
            # an auto-K prose reply spent outside llama_decode, the same CPU, 2026-12-06: the next drafting round
            # refits); the recent window only aged, its ratios unchanged. Only
            # v is the round's K's where K moved without a draft - the token budget caps K on each of a reply's
            # last K_MAX rounds: a 256-token prose reply at auto-K re-estimated on 52 such rounds, ~4 of the ~125 ms
            # its rounds spent outside llama_decode (AMD EPYC Zen 4, Q8_0, --threads 1; estimates 67 -> 19 a reply)
            cost, recent = (fig.cost if fig.k == rnd.k else replace(fig.cost, v=cm.v(rnd.k))), fig.recent
        else:
            if fig is not None:
                # α, the best K and its speedup move every round (one speedup curve: cheap); the v(K) refit and
                # the break-even bisection (c, v and the cap only, not K: auto-K's probes and its off rounds
                # alternate K) stay as last fitted
                cost = cm.estimate(rnd.drafter, rnd.k, cap, verify=self.verify,
                                   alpha_to_pay=fig.cost.alpha_to_pay)
                at = fig.at
            else:
                self.verify = self._verify_curve()
                cost = cm.estimate(rnd.drafter, rnd.k, cap, verify=self.verify)
                at = now
            recent = recent_figures(cm.window(rnd.drafter)) if drafter is not None else None
            self._figures[rnd.drafter] = _Figures(key, at, rnd.k, cost, recent)
        status = k_status(
            speculative=rnd.speculative, k_control=st.k, k_round=rnd.k, k_cap=cap,
            auto_k=self._policy_now if decision is not None else None, decision=decision, best_k=cost.best_k,
            k_used=recent.k_used if recent is not None else None,
        )
        return Step(
            k=rnd.k, drafted=rnd.drafted, accepted=rnd.accepted, emitted=rnd.emitted, t_draft_ms=rnd.t_draft_ms,
            t_verify_ms=rnd.t_verify_ms, t_overhead_ms=rnd.t_overhead_ms, t_step_ms=rnd.t_step_ms,
            speculative=rnd.speculative, auto_k=bool(st.auto_k and rnd.speculative), drafter=rnd.drafter,
            n_past=len(self.target.tokens), cost=cost, natural=rnd.natural, status=status,
            reply=reply_figures(counters, (now - self._t_gen0) * 1000.0), recent=recent, chain=rnd.chain,
            source=rnd.source,
        )

    def close(self) -> None:
        for d in self.drafters.values():
            d.close()
        self.target.close()


@dataclass(frozen=True, slots=True)
class _Figures:
    """A drafter's last :class:`Step` figures: for which (drafter, cap), since when (the last full refit,
    :data:`FIGURES_REFRESH_S`), at which K, the cost estimate and the recent window's figures."""

    key: tuple[str, int]
    at: float
    k: int
    cost: CostEstimate
    recent: Figures | None


class _Reply:
    """The reply so far: its token ids, their piece kinds and their text.

    Text is decoded incrementally from the tokens' bytes (:class:`~specchat.engine.detokenize.PieceDecoder`),
    so a character split across tokens comes out whole, on the token that completed it.
    """

    __slots__ = ("tokens", "kinds", "_parts", "_utf8", "_piece")

    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self.tokens: list[int] = []
        self.kinds: list[PieceKind] = []
        self._parts: list[str] = []
        self._utf8 = PieceDecoder(piece)
        self._piece = piece

    def emit(self, emitted: list[int], draft: list[int], accepted: int, eog: bool) -> Iterator[Piece]:
        """The round's pieces in order: the accepted draft tokens, the rejected rest of the draft as ghosts
        right before the target's correction, then the correction - or the bonus after a fully accepted
        draft, a plain token when nothing was drafted. A final end-of-generation token is not emitted."""
        m = len(draft)
        last = len(emitted) - 1
        for i, token in enumerate(emitted):
            kind: PieceKind
            if i < accepted:
                kind = "accepted"
            elif accepted < m:
                for r in draft[accepted:]:  # the draft tokens the target refused, where they were refused
                    yield Piece(self._piece(r).decode("utf-8", errors="replace"), "rejected", r)
                kind = "corrected"
            else:
                kind = "bonus" if m > 0 else "plain"
            if eog and i == last:
                break
            text = self._utf8.decode(token)
            self.tokens.append(token)
            self.kinds.append(kind)
            self._parts.append(text)
            yield Piece(text, kind, token)

    def text(self) -> str:
        """The whole reply's text, with any unfinished character at the end flushed."""
        tail = self._utf8.finish()
        if tail:
            self._parts.append(tail)
        return "".join(self._parts)
