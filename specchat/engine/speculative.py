"""The speculative loop: draft -> verify -> accept -> roll back, one round at a time.

Each round (llama.cpp ``examples/speculative-simple``; Leviathan et al. 2023, Alg. 1):

1. **draft** - the drafter proposes up to K tokens continuing ``committed + [last]``;
2. **verify** - one target batch ``[last, d1..dK]`` at positions ``n_past..n_past+K`` with logits on
   all K+1 rows;
3. **accept** - at temperature 0 keep the longest prefix where ``d_i == argmax p_i`` and add the target's
   argmax at the first mismatch (corrected) or after the last draft (bonus); at T > 0 exact rejection
   sampling (:func:`specchat.engine.sampling.accept_or_resample`), bonus sampled from p_{K+1};
4. **roll back** - ``llama_memory_seq_rm`` drops the rejected rows from the target KV and the drafter
   trims its own KV to the committed tokens.

The last sampled token is never in the target KV between rounds: it is the first row of the next
verify batch. K = 0, speculation off, or an empty draft make the round a plain single-row decode.
Controls (K, on/off, drafter, sampling, stop) are read once per round, so a change made mid-reply
applies from the next round of the same reply.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np

from specchat.engine.controls import K_MAX, Controls
from specchat.engine.detokenize import PieceDecoder
from specchat.engine.drafters import Draft, Drafter
from specchat.engine.events import Event, Piece, PromptDone, Step
from specchat.engine.model import Model
from specchat.engine.sampling import accept_or_resample, sample, warp
from specchat.engine.telemetry import AutoK, CostModel, TurnCounters

#: the drafter name that means "no drafting": every round is a plain decode (the baseline)
NO_DRAFTER = "none"
#: verify batch sizes timed once before auto-K chooses (K = 0, 2, 4, 8, 16)
CALIBRATION_ROWS = (1, 3, 5, 9, 17)
#: an auto-K probe of a model drafter reads at most this many unseen tokens (see ModelDrafter.limit_catch_up)
PROBE_CATCH_UP = 32


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
    ) -> None:
        self.target = target
        self.drafters = drafters
        self.controls = controls
        self.drafter_name = drafter if (drafter in drafters or drafter == NO_DRAFTER) else next(iter(drafters), NO_DRAFTER)
        self.cost_model = cost_model or CostModel()
        self.auto_k = auto_k or AutoK(k_max=K_MAX)
        #: speculation needs partial KV removal; recurrent/hybrid targets only decode plainly
        self.can_speculate = not target.is_recurrent

    @property
    def drafter(self) -> Drafter | None:
        return self.drafters.get(self.drafter_name)

    def reset(self) -> None:
        self.target.clear()
        for d in self.drafters.values():
            d.reset()

    # ---------------------------------------------------------------------------------------------
    def generate(
        self, context: Sequence[int], *, max_new: int, rng: np.random.Generator
    ) -> Iterator[Event]:
        """Continue ``context`` (the whole conversation so far, as token ids) by up to ``max_new`` tokens.

        Reuses the longest common prefix of the target KV and ``context``. Yields
        :class:`PromptDone`, then per round the :class:`Piece` events and one :class:`Step`; finally
        returns (as the generator's return value) a :class:`TurnCounters` holding the reply.
        """
        target = self.target
        controls = self.controls
        if not context:
            raise ValueError("nothing to continue: the context is empty")
        # -- prompt: decode what the KV is missing, all but the last token ---------------------------
        t0 = time.perf_counter()
        keep = min(target.sync_prefix(context), len(context) - 1)
        if target.is_recurrent and keep < len(target.tokens):
            target.clear()  # a recurrent state cannot be cut back: start over
            keep = 0
        target.trim(keep)
        st0 = controls.snapshot()
        calibrate = (
            st0.auto_k and st0.speculative and self.can_speculate and self.drafter is not None
            and self.cost_model.largest_measured_rows() < CALIBRATION_ROWS[-1]
        )  # fmt: skip
        ratios: dict[str, float] = {}
        if calibrate and not target.tokens:  # an empty target KV: time the drafts against it on equal footing
            t_ratio = time.perf_counter()
            ratios = self.draft_cost_ratios(int(context[0]))
            t0 += time.perf_counter() - t_ratio  # not part of the prompt's time
        target.decode(context[keep:-1], logits_last=0)
        prompt_ms = (time.perf_counter() - t0) * 1000.0
        counters = TurnCounters(prompt_n=len(context) - keep, prompt_ms=prompt_ms)
        yield PromptDone(prompt_n=len(context) - keep, prompt_ms=prompt_ms, cached_n=keep)

        last = int(context[-1])
        if calibrate:
            self.calibrate_verify_cost(last)
            self.calibrate_draft_cost(last, ratios)
        utf8 = PieceDecoder(target.piece)
        reply: list[int] = []
        kinds: list[str] = []
        text_parts: list[str] = []
        stop_reason = "length"
        t_gen0 = time.perf_counter()
        while True:
            if controls.stop_requested:
                stop_reason = "stopped"
                break
            remaining = max_new - len(reply)
            if remaining <= 0:
                stop_reason = "length"
                break
            room = target.n_ctx - len(target.tokens) - 1  # verify rows available after `last`
            if room < 0:
                stop_reason = "context"
                break
            st = controls.snapshot()
            if st.drafter is not None and st.drafter != self.drafter_name:
                if st.drafter in self.drafters or st.drafter == NO_DRAFTER:
                    self.drafter_name = st.drafter
            drafter = self.drafter
            sampling = st.sampling
            speculative = st.speculative and self.can_speculate and drafter is not None
            if speculative and st.auto_k:
                k = self.auto_k.choose(self.cost_model, drafter.name, free=drafter.free)
                if self.auto_k.remeasure:
                    self.cost_model.observe_draft_cost(drafter.name, drafter.time_one_token(last))
                if k > 0 and self.auto_k.last_reason == "probe":
                    drafter.limit_catch_up(PROBE_CATCH_UP)  # a probe must not pay for every plain round
            elif speculative:
                k = st.k
            else:
                k = 0
            k_eff = max(0, min(k, room, remaining - 1))

            t_step0 = time.perf_counter()
            dec_t0 = target.decode_ms_total
            if k_eff > 0:
                draft = drafter.draft(target.tokens + [last], k_eff, sampling, rng)
            else:
                draft = Draft()
            d = draft.tokens[:k_eff]
            m = len(d)
            n_past = len(target.tokens)

            t_v0 = time.perf_counter()
            logits = target.decode([last, *d], logits_last=m + 1)
            t_verify = (time.perf_counter() - t_v0) * 1000.0

            # -- accept -----------------------------------------------------------------------
            a = 0
            if sampling.temperature <= 0:
                best = logits.argmax(axis=1)
                while a < m and int(best[a]) == d[a]:
                    a += 1
                final = int(best[a])
            else:
                final = -1
                for i in range(m):
                    p = warp(logits[i], sampling)
                    ok, tok = accept_or_resample(p, draft.q[i] if draft.q else None, d[i], rng)
                    if ok:
                        a += 1
                        continue
                    final = tok
                    break
                if a == m:
                    final = sample(warp(logits[m], sampling), rng)
            emitted = [*d[:a], final]
            # stop at end-of-generation and at the token budget (never emit past either)
            eog_at = next((i for i, t in enumerate(emitted) if target.is_eog(t)), None)
            if eog_at is not None:
                emitted = emitted[: eog_at + 1]
            emitted = emitted[:remaining]
            # -- roll back: the KV keeps `last` and the emitted tokens except the new last -----------
            target.trim(n_past + len(emitted))
            if drafter is not None and m > 0:
                drafter.rollback(target.tokens)
            last = emitted[-1]

            # -- pieces -------------------------------------------------------------------------
            ends_with_eog = eog_at is not None and len(emitted) == eog_at + 1
            for i, tok in enumerate(emitted):
                if i < a:
                    kind = "accepted"
                else:
                    if a < m:
                        # the draft tokens the target refused, shown where they were refused
                        for r in d[a:]:
                            yield Piece(target.piece(r).decode("utf-8", errors="replace"), "rejected", r)
                        kind = "corrected"
                    else:
                        kind = "bonus" if m > 0 else "plain"
                if ends_with_eog and i == len(emitted) - 1:
                    break  # the end-of-generation token is not part of the reply
                text = utf8.decode(tok)
                reply.append(tok)
                kinds.append(kind)
                text_parts.append(text)
                yield Piece(text, kind, tok)
            t_step = (time.perf_counter() - t_step0) * 1000.0
            in_decode = (target.decode_ms_total - dec_t0) + draft.decode_ms
            overhead = max(0.0, t_step - in_decode)
            counters.add_step(
                drafted=m, accepted=a, emitted=len(emitted) - (1 if ends_with_eog else 0),
                t_draft_ms=draft.t_ms, t_verify_ms=t_verify, t_overhead_ms=overhead, t_step_ms=t_step,
                k=k if k_eff > 0 else 0,  # the K chosen (control or auto-K), not its cap by the tokens left
            )
            if k_eff > 0:  # the drafter was asked (it may have proposed nothing: that round counts too)
                self.cost_model.observe_step(
                    drafter.name, k_eff, m, a, draft.t_ms, t_verify, m + 1, t_overhead_ms=overhead,
                    natural=draft.natural,
                )
            else:
                self.cost_model.observe_plain(t_verify + overhead)
            cost = self.cost_model.estimate(drafter.name if drafter else "none", k_eff, K_MAX)
            yield Step(
                k=k_eff, drafted=m, accepted=a, emitted=len(emitted), t_draft_ms=draft.t_ms,
                t_verify_ms=t_verify, t_overhead_ms=overhead, t_step_ms=t_step, speculative=speculative,
                auto_k=bool(st.auto_k and speculative), drafter=drafter.name if drafter else "none",
                n_past=len(target.tokens), cost=cost, natural=draft.natural if k_eff > 0 else None,
            )
            if ends_with_eog:
                stop_reason = "eos"
                break
        tail = utf8.finish()
        if tail:
            text_parts.append(tail)
        counters.finish(
            predicted_ms=(time.perf_counter() - t_gen0) * 1000.0,
            stop_reason=stop_reason, text="".join(text_parts), tokens=reply, kinds=kinds, last=last,
        )
        return counters

    def calibrate_verify_cost(self, last: int, rows: Sequence[int] | None = None, reps: int = 2) -> None:
        """Measure v(K), the verify cost of K+1 rows relative to one row, before auto-K relies on it.

        Leviathan et al.'s speedup E(α,K) / (cK + v(K)) assumes v = 1; on a CPU it is not (the bundled
        SmolLM2 on this llama-cpp-python build: v(4) ~ 2.7, v(16) ~ 9). Without this, auto-K's warm-up
        sees only 2-row batches and extrapolates. Decodes ``last`` repeated ``rows`` times at the next
        positions and removes them again, so the KV is unchanged; runs once per cost model.
        """
        for _ in range(reps):
            for r in rows or CALIBRATION_ROWS:
                ms = self.target.time_scratch_decode([last] * r)
                if ms != ms:  # NaN: no room left in the context for this batch
                    break
                self.cost_model.observe_verify(r, ms)

    def draft_cost_ratios(self, token: int, reps: int = 5) -> dict[str, float]:
        """c for each drafter that runs a model, timed against the target on equal footing: one single-row
        decode of ``token`` in each, at the same context length (call with the target KV empty, before the
        prompt; a fresh draft KV is empty too), median of ``reps`` interleaved ratios. A decode costs more
        with a longer context (F16 SmolLM2 here: 12 ms at 49 tokens, 15.5 ms at 300), so a draft timed
        with an empty KV against a target holding the prompt would look cheaper than it is."""
        out: dict[str, float] = {}
        for name, d in self.drafters.items():
            if d.free:
                continue
            rs = []
            for _ in range(reps):
                t_draft = d.time_one_token(token)
                t_target = self.target.time_scratch_decode([token])
                if t_target > 0 and t_draft >= 0:  # NaN (no room) compares False
                    rs.append(t_draft / t_target)
            if rs:
                out[name] = sorted(rs)[len(rs) // 2]
        return out

    def calibrate_draft_cost(self, last: int, ratios: dict[str, float] | None = None, reps: int = 3) -> None:
        """Give the cost model each model drafter's cost per token before auto-K's first round.

        With the draft cost known up front, auto-K does not warm up (nor prefill the prompt into the draft
        model) when no K could pay even at 100 % acceptance - the seed's lesson: a draft about as costly
        as the target never wins. ``ratios`` (from :meth:`draft_cost_ratios`) scale the single-row target
        time; without one, the draft's own one-token decode is timed at its current context. Leaves
        every drafter's state unchanged; runs once per cost model.
        """
        t1 = self.cost_model.target_ms()
        for name, d in self.drafters.items():
            if d.free:
                continue
            if name in (ratios or {}) and t1:
                self.cost_model.observe_draft_cost(name, ratios[name] * t1)
                continue
            for _ in range(reps):
                self.cost_model.observe_draft_cost(name, d.time_one_token(last))

    def close(self) -> None:
        for d in self.drafters.values():
            d.close()
        self.target.close()
