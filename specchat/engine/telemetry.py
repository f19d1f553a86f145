"""Telemetry of speculative decoding: per-turn counters, rolling rates, the cost model and auto-K.

No llama_cpp, no Textual; everything here is called once per draft/verify round and is cheap (tens of
microseconds: the replay curve is one small numpy product), so the engine can call it on every step
boundary.

* :class:`TurnCounters` accumulates one reply like llama.cpp's ``server_slot`` statistics
  (``tools/server/server-context.cpp``: ``n_draft_total``, ``n_draft_accepted``, ``n_draft_verif_steps``,
  per-position accepted counts) and turns them into a :class:`~specchat.engine.events.Turn` with
  llama-server's timing names.
* :class:`Rolling` gives the live tok/s (time-weighted over the last few seconds of steps) and acceptance
  (over the last drafting steps) for the UI.
* :class:`CostModel` is the arithmetic of Leviathan et al. 2023 ("Fast Inference from Transformers via
  Speculative Decoding", arXiv 2211.17192, §3.3-3.4) with a *measured* verify cost instead of the
  paper's "a verify call costs one target step":

      E(α, K) = (1 − α^(K+1)) / (1 − α)          expected tokens per round (K + 1 at α = 1)
      S(K)    = E(α, K) / (c·K + v(K)),  S(0) = 1  predicted speedup over plain decoding

  where α is the per-position acceptance, c = draft ms per drafted token / target ms of a single-row
  decode, and v(K) = target ms of a (K+1)-row verify batch / target ms of a single-row decode. v must
  be measured, not assumed: DESIGN.md records v ≈ 1 up to 17 rows for the bundled 135M model, while
  llama-cpp-python 0.3.36 on 2 busy cores here measured v ≈ 1.5-1.75 for 2 rows and 7-8 for 17 rows
  (see the telemetry report). A draft that costs about as much as the target (c ≈ 1) can never pay,
  whatever v and α are: S(K) ≤ (K+1) / (K+1).
  The live curve replays the drafter's recent rounds at every other K (:class:`_Replay`): exact
  where a round was verified, the geometric model only for positions it never reached.
* :class:`AutoK` picks K* = argmax over 0..K_max of S(K) online, with hysteresis and probing.
* :func:`break_even_line` explains the estimate in one sentence.

The acceptance log line is :meth:`specchat.engine.events.Turn.acceptance_line` (not repeated here).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from specchat.engine.controls import K_MAX
from specchat.engine.events import CostEstimate, Step, Turn

#: verify batches have 1..K_MAX+1 rows ([last, d1..dK])
MAX_ROWS = K_MAX + 1


# =================================================================================================
# The arithmetic (Leviathan et al. 2023, §3.3 eq. 1 and Theorem 3.8, with a measured verify cost)
# =================================================================================================


def expected_tokens(alpha: float, k: int) -> float:
    """E(α, K) = (1 − α^(K+1)) / (1 − α): expected tokens a round emits (accepted prefix + 1).

    Leviathan et al. 2023, eq. 1, assuming each draft position is accepted independently with
    probability α. Equals K + 1 at α = 1 and 1 at α = 0.
    """
    if k < 0:
        raise ValueError(f"K must be >= 0, got {k}")
    if alpha <= 0.0:
        return 1.0
    if alpha >= 1.0 - 1e-9:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float, v: float) -> float:
    """S(K) = E(α, K) / (c·K + v) for K ≥ 1, and S(0) = 1 (plain decoding is the unit).

    ``c`` is the draft cost per drafted token and ``v`` the verify cost of K+1 rows, both relative to
    one single-row target decode.
    """
    if k == 0:
        return 1.0
    return expected_tokens(alpha, k) / (c * k + v)


def speedup_curve(alpha: float, c: float, v: Sequence[float], k_max: int) -> list[float]:
    """[S(0), S(1), ..., S(k_max)] where ``v[K]`` is the verify cost of K+1 rows (``v[0]`` unused).

    E is accumulated as 1 + α + ... + α^K, so this is O(k_max) with no powers.
    """
    out = [1.0]
    e = 1.0
    term = 1.0
    a = min(max(alpha, 0.0), 1.0)
    for k in range(1, k_max + 1):
        term *= a
        e += term
        out.append(e / (c * k + v[k]))
    return out


def best_k(curve: Sequence[float]) -> int:
    """argmax of a speedup curve; ties (within 1e-9 relative) go to the smaller K (0 = do not draft)."""
    best = 0
    for k in range(1, len(curve)):
        if curve[k] > curve[best] * (1.0 + 1e-9):
            best = k
    return best


# =================================================================================================
# Per-turn counters
# =================================================================================================


class TurnCounters:
    """One reply's statistics, accumulated like llama.cpp's ``server_slot`` (``n_draft_total``,
    ``n_draft_accepted``, ``n_draft_verif_steps``, ``n_draft_accepted_per_pos``).

    Definitions used by :meth:`to_turn`:

    * ``draft_n`` = tokens drafted and verified; ``draft_n_accepted`` = of those, kept by the target;
    * ``acceptance`` = draft_n_accepted / draft_n (0 when nothing was drafted);
    * ``mean_len`` = 1 + draft_n_accepted / n_spec_steps, as ``server_slot::print_timings`` prints it
      (n_spec_steps = verify steps that had a draft); 1.0 when no step drafted (one token per step);
    * ``accepted_per_pos[i]`` = steps whose draft position i was accepted / steps that *drafted at least
      i+1 tokens*. llama.cpp divides by all verify steps instead; with drafters that often propose fewer
      than K tokens (n-gram lookup) that mixes "not drafted" with "rejected", so we condition on the
      position having been drafted. :meth:`accepted_per_pos_llama` gives llama.cpp's figure;
    * ``predicted_n`` = tokens added to the reply; ``predicted_ms`` = generation wall time given to
      :meth:`finish` (llama-server's ``t_token_generation``), else the sum of step times;
      ``predicted_per_second`` = predicted_n / predicted_ms · 1000;
    * ``draft_ms_per_step`` and ``verify_ms_per_step`` are means over *all* steps, so that
      draft + verify + overhead per step = step time per step;
    * ``k_min``/``k_max`` = the range of the K asked in the rounds that asked the drafter (``k`` of
      :meth:`add_step`; 0/0 when none did): the K "used" over a turn whose K changed (auto-K, a key).
    """

    __slots__ = (
        "prompt_n", "prompt_ms", "n_steps", "n_spec_steps", "draft_n", "draft_n_accepted",
        "acc_per_pos", "drafted_per_pos", "draft_ms", "verify_ms", "overhead_ms", "step_ms",
        "predicted_n", "predicted_ms", "stop_reason", "text", "tokens", "kinds", "last", "k_min", "k_max",
    )  # fmt: skip

    def __init__(self, prompt_n: int = 0, prompt_ms: float = 0.0) -> None:
        self.prompt_n = int(prompt_n)
        self.prompt_ms = float(prompt_ms)
        self.n_steps = 0
        self.n_spec_steps = 0
        self.draft_n = 0
        self.draft_n_accepted = 0
        self.acc_per_pos = [0] * K_MAX  # steps whose draft position i was accepted
        self.drafted_per_pos = [0] * K_MAX  # steps that drafted at least i+1 tokens
        self.draft_ms = 0.0
        self.verify_ms = 0.0
        self.overhead_ms = 0.0
        self.step_ms = 0.0
        self.predicted_n = 0
        self.predicted_ms: float | None = None
        self.stop_reason = "length"
        self.text = ""
        self.tokens: list[int] = []
        self.kinds: list[str] = []
        self.last: int | None = None
        self.k_min = 0
        self.k_max = 0

    def add_step(
        self,
        *,
        drafted: int,
        accepted: int,
        emitted: int,
        t_draft_ms: float = 0.0,
        t_verify_ms: float = 0.0,
        t_overhead_ms: float = 0.0,
        t_step_ms: float = 0.0,
        k: int = 0,
    ) -> None:
        """Count one draft/verify round (or one plain decode: ``drafted = 0``).

        ``emitted`` = tokens this round added to the reply. Accepted positions are the prefix
        0..accepted-1 of the draft (the acceptance rule stops at the first rejection). ``k`` = the K this
        round asked the drafter for (0 = it was not asked).
        """
        if drafted < 0 or not (0 <= accepted <= drafted) or emitted < 0:
            raise ValueError(f"inconsistent step: drafted={drafted} accepted={accepted} emitted={emitted}")
        self.n_steps += 1
        if k > 0:
            self.k_min = min(self.k_min, k) if self.k_min else k
            self.k_max = max(self.k_max, k)
        if drafted > 0:
            self.n_spec_steps += 1
            self.draft_n += drafted
            self.draft_n_accepted += accepted
            n = len(self.drafted_per_pos)
            if drafted > n:  # a caller with a larger K than K_MAX: grow, do not drop
                self.drafted_per_pos.extend([0] * (drafted - n))
                self.acc_per_pos.extend([0] * (drafted - n))
            for i in range(drafted):
                self.drafted_per_pos[i] += 1
            for i in range(accepted):
                self.acc_per_pos[i] += 1
        self.draft_ms += t_draft_ms
        self.verify_ms += t_verify_ms
        self.overhead_ms += t_overhead_ms
        self.step_ms += t_step_ms
        self.predicted_n += emitted

    def add(self, step: Step) -> None:
        """Count a :class:`Step` event."""
        self.add_step(
            drafted=step.drafted, accepted=step.accepted, emitted=step.emitted,
            t_draft_ms=step.t_draft_ms, t_verify_ms=step.t_verify_ms,
            t_overhead_ms=step.t_overhead_ms, t_step_ms=step.t_step_ms, k=step.k,
        )  # fmt: skip

    def finish(
        self,
        *,
        predicted_ms: float | None = None,
        stop_reason: str | None = None,
        text: str | None = None,
        tokens: Iterable[int] | None = None,
        kinds: Iterable[str] | None = None,
        last: int | None = None,
    ) -> None:
        """Record the end of the reply (wall time of generation, why it stopped, the reply itself)."""
        if predicted_ms is not None:
            self.predicted_ms = float(predicted_ms)
        if stop_reason is not None:
            self.stop_reason = stop_reason
        if text is not None:
            self.text = text
        if tokens is not None:
            self.tokens = list(tokens)
        if kinds is not None:
            self.kinds = list(kinds)
        if last is not None:
            self.last = last

    # -- derived figures ---------------------------------------------------------------------------
    @property
    def acceptance(self) -> float:
        return self.draft_n_accepted / self.draft_n if self.draft_n else 0.0

    @property
    def mean_len(self) -> float:
        return 1.0 + self.draft_n_accepted / self.n_spec_steps if self.n_spec_steps else 1.0

    def accepted_per_pos(self) -> list[float]:
        """Acceptance at draft position i among steps that drafted position i (see class docstring)."""
        out = []
        for acc, n in zip(self.acc_per_pos, self.drafted_per_pos):
            if n == 0:
                break
            out.append(acc / n)
        return out

    def accepted_per_pos_llama(self) -> list[float]:
        """llama.cpp's ``acc per pos``: accepted count at position i / all verify steps with a draft."""
        if not self.n_spec_steps:
            return []
        return [acc / self.n_spec_steps for acc, n in zip(self.acc_per_pos, self.drafted_per_pos) if n]

    def to_turn(
        self,
        *,
        k: int = 0,
        drafter: str = "",
        speculative: bool = False,
        **overrides,
    ) -> Turn:
        """The :class:`Turn` event; ``overrides`` may set any of :meth:`finish`'s fields first."""
        if overrides:
            self.finish(**overrides)
        predicted_ms = self.predicted_ms if self.predicted_ms is not None else self.step_ms
        n = self.n_steps
        return Turn(
            prompt_n=self.prompt_n,
            prompt_ms=self.prompt_ms,
            predicted_n=self.predicted_n,
            predicted_ms=predicted_ms,
            predicted_per_second=self.predicted_n / predicted_ms * 1000.0 if predicted_ms > 0 else 0.0,
            draft_n=self.draft_n,
            draft_n_accepted=self.draft_n_accepted,
            acceptance=self.acceptance,
            mean_len=self.mean_len,
            accepted_per_pos=self.accepted_per_pos(),
            draft_ms_per_step=self.draft_ms / n if n else 0.0,
            verify_ms_per_step=self.verify_ms / n if n else 0.0,
            overhead_ms=self.overhead_ms,
            step_ms=self.step_ms,
            n_steps=n,
            n_spec_steps=self.n_spec_steps,
            stop_reason=self.stop_reason,
            text=self.text,
            tokens=list(self.tokens),
            kinds=list(self.kinds),
            k=k,
            drafter=drafter,
            speculative=speculative,
            k_min=self.k_min,
            k_max=self.k_max,
        )


# =================================================================================================
# Rolling rates for the UI
# =================================================================================================


class Rolling:
    """Live rates over recent steps.

    * :attr:`tok_per_s` - tokens emitted / time over the fewest most recent steps that together cover
      ``window_ms`` (all steps while they cover less), i.e. weighted by time, not a mean of per-step rates.
      Only step time counts: a pause between replies does not lower it.
    * :attr:`acceptance` - accepted / drafted over the last ``acceptance_steps`` steps that drafted.
    * :attr:`mean_len` - 1 + accepted / those steps (llama.cpp's mean len, recent).
    """

    __slots__ = ("window_ms", "_tok", "_tok_n", "_tok_ms", "_acc", "_acc_d", "_acc_a")

    def __init__(self, window_ms: float = 3000.0, acceptance_steps: int = 32) -> None:
        if window_ms <= 0 or acceptance_steps < 1:
            raise ValueError("window_ms must be > 0 and acceptance_steps >= 1")
        self.window_ms = float(window_ms)
        self._tok: deque[tuple[int, float]] = deque()
        self._tok_n = 0
        self._tok_ms = 0.0
        self._acc: deque[tuple[int, int]] = deque(maxlen=acceptance_steps)
        self._acc_d = 0
        self._acc_a = 0

    def reset(self) -> None:
        self._tok.clear()
        self._tok_n, self._tok_ms = 0, 0.0
        self._acc.clear()
        self._acc_d = self._acc_a = 0

    def add_step(self, *, emitted: int, t_step_ms: float, drafted: int = 0, accepted: int = 0) -> None:
        self._tok.append((emitted, t_step_ms))
        self._tok_n += emitted
        self._tok_ms += t_step_ms
        while len(self._tok) > 1 and self._tok_ms - self._tok[0][1] >= self.window_ms:
            n, ms = self._tok.popleft()
            self._tok_n -= n
            self._tok_ms -= ms
        if drafted > 0:
            if len(self._acc) == self._acc.maxlen:
                d, a = self._acc[0]
                self._acc_d -= d
                self._acc_a -= a
            self._acc.append((drafted, accepted))
            self._acc_d += drafted
            self._acc_a += accepted

    def add(self, step: Step) -> None:
        self.add_step(emitted=step.emitted, t_step_ms=step.t_step_ms, drafted=step.drafted, accepted=step.accepted)

    @property
    def tok_per_s(self) -> float:
        return self._tok_n / self._tok_ms * 1000.0 if self._tok_ms > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return self._acc_a / self._acc_d if self._acc_d else 0.0

    @property
    def mean_len(self) -> float:
        return 1.0 + self._acc_a / len(self._acc) if self._acc else 1.0


# =================================================================================================
# The cost model
# =================================================================================================


class _Recent:
    """A timing: the median of the last ``window`` samples.

    On a shared CPU a decode time carries spikes (contention, a first decode paging the weights in);
    the median ignores them as long as they are fewer than half the window, follows a lasting change
    within half a window, and - unlike a low quantile - has no bias that depends on how many samples a
    row count has, so ratios of timings (c, v) compare like with like.
    """

    __slots__ = ("samples", "ordered", "value", "n", "_window")

    def __init__(self, window: int) -> None:
        self.samples: deque[float] = deque()
        self.ordered: list[float] = []  # the same samples, sorted
        self.value: float | None = None
        self.n = 0  # samples ever added
        self._window = window

    def add(self, x: float) -> None:
        if len(self.samples) == self._window:
            old = self.samples.popleft()
            del self.ordered[bisect_left(self.ordered, old)]
        self.samples.append(x)
        insort(self.ordered, x)
        self.n += 1
        o, m = self.ordered, len(self.ordered)
        self.value = o[m // 2] if m % 2 else 0.5 * (o[m // 2 - 1] + o[m // 2])

    @property
    def weight(self) -> int:
        return len(self.samples)


class _Replay:
    """The recent rounds of one drafter, replayed at every other K: a counterfactual speedup curve.

    A round asked for K tokens, the drafter proposed d of them (it would have proposed n with no cap:
    n = d for a drafter that stopped by itself, K_MAX when it always fills K) and the target accepted
    the first a. Had the cap been K' instead, the drafter would have proposed d' = min(K', n), the
    first min(d, d') of them the same tokens, so the round would have emitted

    * min(a, K') + 1 tokens when K' ≤ d (the outcome is known: the first K' positions were verified);
    * a + 1 when K' > d and a < d (the rejection at a + 1 happens at any larger cap too);
    * d + 1 + α + … + α^(d' − d) when K' > d and a = d (positions past d were never verified: the
      geometric model of Leviathan et al. 2023 with the estimated α fills in only this censored part),

    at a cost of c·d' + v(d') target steps (v(0) = 1). S(K') = Σ w·tokens / Σ w·cost over the recent
    rounds, weighted by age in tokens of text (half-life ``half_life``), plus ``prior_weight`` pseudo-
    rounds of the geometric model: the rounds' own d' drafted, E(α, d') tokens expected (with no rounds
    yet: E(α, K') / (c·K' + v(K')), every round drafting K'). Unlike E(α, K) alone this keeps
    what the text really did: an n-gram drafter that drafts only confident copies, and acceptance that
    is all-or-nothing (a copy either continues or diverges) rather than geometric.
    """

    __slots__ = ("d", "a", "n", "t", "_next", "size", "count")

    def __init__(self, size: int) -> None:
        self.size = size
        self.d = np.zeros(size, dtype=np.int64)
        self.a = np.zeros(size, dtype=np.int64)
        self.n = np.zeros(size, dtype=np.int64)
        self.t = np.zeros(size)  # text clock of the round (slots >= count are unused)
        self._next = 0
        self.count = 0

    def add(self, drafted: int, accepted: int, natural: int, clock: float) -> None:
        i = self._next
        self.d[i], self.a[i], self.n[i], self.t[i] = drafted, accepted, natural, clock
        self._next = (i + 1) % self.size
        self.count = min(self.count + 1, self.size)

    def __len__(self) -> int:
        return self.count

    def curve(
        self, alpha: float, c: float, v_rows: Sequence[float], k_max: int, clock: float, half_life: float,
        prior_weight: float,
    ) -> list[float]:
        """[S(0), ..., S(k_max)]; ``v_rows[j]`` is v of a j-token draft (``v_rows[0]`` = 1)."""
        m = self.count
        w = 0.5 ** ((clock - self.t[:m]) / half_life)
        return replay_speedups(self.d[:m], self.a[:m], self.n[:m], w, alpha, c, v_rows, k_max, prior_weight)


def natural_length(k: int, drafted: int, natural: int | None) -> int:
    """The draft length a round's drafter would have chosen with no cap (``natural``, e.g. from the n-gram
    drafter), or for a drafter that fills K (``None``): K_MAX if it drafted all k, else what it drafted
    (it stopped at the end of generation). Clamped to drafted..K_MAX."""
    if natural is None:
        natural = K_MAX if drafted >= k else drafted
    return min(max(natural, drafted), K_MAX)


def replay_speedups(
    drafted: Sequence[int], accepted: Sequence[int], natural: Sequence[int], weights: Sequence[float],
    alpha: float, c: float, v_rows: Sequence[float], k_max: int, prior_weight: float = 0.0,
) -> list[float]:
    """[S(0), ..., S(k_max)] from rounds replayed at every cap K' (see :class:`_Replay`): rounds
    (d, a, n) with ``weights``, the geometric tail with ``alpha`` only past each round's draft, cost
    c·d' + v(d') with ``v_rows[j]`` = v of a j-token draft (``v_rows[0]`` = 1), plus ``prior_weight``
    pseudo-rounds of the geometric model at the rounds' own lengths."""
    ks = np.arange(k_max + 1)
    kp = ks[:, None]
    d = np.asarray(drafted, dtype=np.int64)[None, :]
    a = np.asarray(accepted, dtype=np.int64)[None, :]
    n = np.asarray(natural, dtype=np.int64)[None, :]
    w = np.asarray(weights, dtype=float)
    dp = np.minimum(kp, n)
    al = min(max(alpha, 0.0), 1.0)
    if al >= 1.0 - 1e-9:
        tail = np.maximum(dp - d, 0).astype(float)
        e = ks + 1.0
    else:
        tail = al * (1.0 - al ** np.maximum(dp - d, 0)) / (1.0 - al)
        e = (1.0 - al ** (ks + 1)) / (1.0 - al)
    tokens = np.where(kp <= d, np.minimum(a, kp) + 1.0, np.where(a < d, a + 1.0, d + 1.0 + tail))
    vt = np.asarray(v_rows, dtype=float)
    cost = c * dp + vt[dp]
    ws = float(w.sum())
    if ws > 0.0:  # the prior drafts the rounds' own lengths, accepted geometrically
        e_rows = (1.0 - al ** (dp + 1)) / (1.0 - al) if al < 1.0 - 1e-9 else dp + 1.0
        prior_tokens = (e_rows @ w) / ws
        prior_cost = (cost @ w) / ws
    else:
        prior_tokens, prior_cost = e, c * ks + vt[: k_max + 1]
    num = tokens @ w + prior_weight * prior_tokens
    den = cost @ w + prior_weight * prior_cost
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0).tolist()
    out[0] = 1.0
    return out


class _DrafterStats:
    __slots__ = ("acc", "rej", "clock", "draft", "spec_steps", "last", "replay")

    def __init__(self, clock: float, prior_alpha: float, prior_weight: float, window: int, replay: int) -> None:
        # prior as pseudo-observations: prior_weight rejections and the matching accepted count
        self.rej = prior_weight
        self.acc = prior_weight * prior_alpha / (1.0 - prior_alpha)
        self.clock = clock
        self.draft = _Recent(window)  # ms per drafted token
        self.spec_steps = 0
        self.last: tuple[int, int] = (0, 0)
        self.replay = _Replay(replay)


class CostModel:
    """Online estimates of α (per drafter), draft cost per token (per drafter), single-row target cost
    and the verify-cost table v(rows); predicts S(K) and the best K.

    **α, the per-position acceptance.** Under Leviathan et al.'s model each draft position is accepted
    independently with probability α and the round stops at the first rejection, so a round that drafted
    d tokens and accepted a has likelihood α^a·(1 − α) if a < d, and α^d if a = d (a right-censored
    geometric). The maximum-likelihood estimate over many rounds is

        α̂ = Σ a / (Σ a + Σ [a < d])        (accepted tokens / (accepted tokens + rejections))

    which, unlike accepted/drafted, is not biased down by long drafts (accepted/drafted → α(1−α^K)/(K(1−α))).
    Both sums are exponentially weighted by age measured in *tokens of text* (half-life
    ``alpha_half_life`` tokens; a round ages them by the accepted + 1 tokens it emitted, a plain round by
    one): predictability is a property of the text, so the window covers about the same stretch of text
    at K = 1 (many rounds, little evidence each) as at K = 16 (few rounds, much evidence each). Plain
    rounds age the evidence too, so while not drafting the ratio stays but a new probe moves it quickly;
    ageing stops at ``alpha_min_weight`` (accepted tokens + rejections), so a single lucky probe cannot
    outweigh everything seen before: one accepted token of four is no proof, four of four is.
    Start: ``prior_alpha`` as ``prior_weight`` pseudo-rejections, which ages away.

    **Timings** are medians of the last ``timing_window`` samples (see :class:`_Recent`), robust to
    the spikes of a shared CPU.

    **Draft cost** per drafter: draft ms / drafted tokens (rounds with a draft only). An n-gram lookup
    measures ~0. Before any measurement: 0 (the first drafting round measures it).

    **Verify cost.** Target ms per batch row count (1..``max_rows``); single-row samples come from plain
    rounds and from drafting rounds whose drafter proposed nothing. A line T(n) = a + b·(n − 1), b ≥ 0,
    is fitted to the row medians by least squares weighted by their sample counts - one row's cost plus a
    cost per extra row, the shape of a CPU decode once the weights are read, and the flat v = 1 of
    DESIGN.md when b = 0. Each row's median is shrunk toward that line with the weight of ``v_shrink``
    samples: a row measured once, e.g. in a busy moment, is mostly the line, and since auto-K rarely
    returns to a K that looked bad, one unlucky sample must not condemn it; a row measured 31 times is
    mostly itself, so a curve that is not a line still shows. t1 = the median single-row time, not
    shrunk (the line's intercept before any single-row sample). v(n) = T(n)/t1 is made non-decreasing by weighted
    isotonic regression (pool-adjacent-violators), clamped at ≥ 1 (a batch does at least one row's
    work), interpolated linearly between measured row counts and extrapolated beyond the largest
    measured count along the line's slope b/t1. **Prior:** with no multi-row measurement
    v(n) = 1 for every n (Leviathan et al.'s assumption). It is optimistic, so auto-K tries drafting
    first, and the first verify of each size corrects it.

    Pass ``t_overhead_ms`` (the round's time outside llama_decode) so the prediction covers the whole
    step; ``observe_plain`` should then get the whole plain step time too.
    """

    def __init__(
        self,
        *,
        max_rows: int = MAX_ROWS,
        alpha_half_life: float = 48.0,
        timing_window: int = 31,
        v_shrink: float = 4.0,
        prior_alpha: float = 0.6,
        prior_weight: float = 1.0,
        alpha_min_weight: float = 8.0,
        replay_rounds: int = 64,
        replay_half_life: float = 128.0,
        replay_prior: float = 1.0,
    ) -> None:
        if not (0.0 < prior_alpha < 1.0):
            raise ValueError("prior_alpha must be in (0, 1)")
        self.max_rows = max_rows
        self.alpha_half_life = alpha_half_life
        self.timing_window = timing_window
        self.v_shrink = v_shrink
        self.prior_alpha = prior_alpha
        self.prior_weight = prior_weight
        self.alpha_min_weight = alpha_min_weight
        self.replay_rounds = max(1, replay_rounds)
        self.replay_half_life = replay_half_life
        self.replay_prior = replay_prior
        self._alpha_decay = 0.5 ** (1.0 / alpha_half_life)
        self.reset()

    def reset(self) -> None:
        self._clock = 0.0  # tokens of text seen (α ages with text, not with rounds)
        self._drafters: dict[str, _DrafterStats] = {}
        self._rows = [_Recent(self.timing_window) for _ in range(self.max_rows + 1)]  # index = rows
        self._v_by_k: list[float] = [1.0] * self.max_rows  # index K -> v of K+1 rows
        self._v_dirty = False
        self._v_slope = 0.0
        self._t1: float | None = None
        self._since_single = -1  # observations since the last single-row sample; -1 = never
        self._curve_key: tuple | None = None
        self._curve: list[float] = []

    # -- observations ------------------------------------------------------------------------------
    def _stats(self, drafter: str) -> _DrafterStats:
        st = self._drafters.get(drafter)
        if st is None:
            st = _DrafterStats(
                self._clock, self.prior_alpha, self.prior_weight, self.timing_window, self.replay_rounds
            )
            self._drafters[drafter] = st
        elif st.clock != self._clock:
            f = self._alpha_decay ** (self._clock - st.clock)
            tot = st.acc + st.rej
            if tot * f < self.alpha_min_weight:  # age, but keep some evidence: one probe is not all
                f = min(1.0, self.alpha_min_weight / tot) if tot > 0.0 else 1.0
            st.acc *= f
            st.rej *= f
            st.clock = self._clock
        return st

    def _observe_rows(self, rows: int, ms: float) -> None:
        if rows < 1:
            raise ValueError(f"a verify batch has at least one row, got {rows}")
        if ms < 0:
            raise ValueError(f"negative time {ms}")
        if rows <= self.max_rows:
            self._rows[rows].add(ms)
            self._v_dirty = True
        if rows == 1:
            self._since_single = 0
        elif self._since_single >= 0:
            self._since_single += 1

    def observe_step(
        self,
        drafter: str,
        k: int,
        drafted: int,
        accepted: int,
        t_draft_ms: float,
        t_verify_ms: float,
        rows_verified: int,
        t_overhead_ms: float = 0.0,
        natural: int | None = None,
    ) -> None:
        """One round with drafter ``drafter`` asked for ``k`` tokens and proposed ``drafted``, of which
        the target accepted ``accepted``; the verify batch had ``rows_verified`` rows (drafted + 1).

        ``natural``: the draft length the drafter would have chosen with no cap (a drafter that decides
        its own length, e.g. n-gram; 0 = it found nothing to propose); None = it always fills K. A round
        with ``drafted`` = 0 (the drafter was asked but proposed nothing) counts for the replay curve.
        """
        if drafted < 0 or not (0 <= accepted <= drafted):
            raise ValueError(f"inconsistent step: drafted={drafted} accepted={accepted}")
        natural = natural_length(k, drafted, natural)
        self._clock += accepted + 1  # the clock counts tokens of text (the round emitted accepted + 1)
        self._curve_key = None
        st = self._stats(drafter)
        if k > 0:
            st.replay.add(drafted, accepted, natural, self._clock)
        if drafted > 0:
            st.acc += accepted
            if accepted < drafted:
                st.rej += 1.0
            st.draft.add(max(0.0, t_draft_ms) / drafted)
            st.spec_steps += 1
            st.last = (drafted, accepted)
        self._observe_rows(rows_verified, t_verify_ms + t_overhead_ms)

    def observe_draft_cost(self, drafter: str, ms_per_token: float) -> None:
        """A draft-cost measurement outside generation (one timed draft decode, see
        SpeculativeDecoder.calibrate_draft_cost): ``drafter`` takes ``ms_per_token`` per drafted token."""
        if not ms_per_token >= 0.0:  # also refuses NaN (the draft's context was full: nothing measured)
            return
        self._curve_key = None
        self._stats(drafter).draft.add(ms_per_token)

    def has_draft_cost(self, drafter: str) -> bool:
        """True once the draft cost of ``drafter`` was measured (by a round or a calibration)."""
        st = self._drafters.get(drafter)
        return st is not None and st.draft.value is not None

    def observe_verify(self, rows: int, t_ms: float) -> None:
        """A verify-cost measurement outside generation: one target decode of ``rows`` rows took ``t_ms``
        (the engine's one-off calibration of v(K); see SpeculativeDecoder.calibrate_verify_cost)."""
        self._clock += 1
        self._curve_key = None
        self._observe_rows(rows, t_ms)

    def largest_measured_rows(self) -> int:
        """The largest verify batch (rows) with a timing; 0 when none. v beyond it is extrapolated."""
        return max((n for n in range(1, self.max_rows + 1) if self._rows[n].value is not None), default=0)

    def observe_plain(self, t_ms: float) -> None:
        """One plain single-row decode (K = 0, speculation off) that took ``t_ms``."""
        self._clock += 1
        self._curve_key = None
        self._observe_rows(1, t_ms)

    # -- estimates ---------------------------------------------------------------------------------
    def alpha(self, drafter: str) -> float:
        st = self._drafters.get(drafter)
        if st is None:
            return self.prior_alpha
        tot = st.acc + st.rej
        return st.acc / tot if tot > 0.0 else self.prior_alpha

    def draft_ms_per_token(self, drafter: str) -> float:
        st = self._drafters.get(drafter)
        if st is None:
            return 0.0
        v = st.draft.value
        return v if v is not None else 0.0

    def target_ms(self) -> float | None:
        """t1: target ms of a single-row decode (None before any target timing)."""
        if self._v_dirty:
            self._refresh_v()
        return self._t1

    def spec_steps(self, drafter: str) -> int:
        """Rounds observed in which ``drafter`` proposed at least one token."""
        st = self._drafters.get(drafter)
        return st.spec_steps if st else 0

    def last_draft(self, drafter: str) -> tuple[int, int]:
        """(drafted, accepted) of ``drafter``'s latest round with a draft; (0, 0) if none."""
        st = self._drafters.get(drafter)
        return st.last if st else (0, 0)

    @property
    def steps_since_single_row(self) -> int | None:
        """Observations since the last single-row target timing (None = never measured)."""
        return None if self._since_single < 0 else self._since_single

    def _refresh_v(self) -> None:
        """Fit the verify-cost model to the row medians (see the class docstring)."""
        self._v_dirty = False
        xs: list[int] = []
        ts: list[float] = []
        ws: list[float] = []
        for n in range(1, self.max_rows + 1):
            r = self._rows[n]
            if r.value is not None:
                xs.append(n)
                ts.append(r.value)
                ws.append(r.weight)
        v_rows = [1.0] * (self.max_rows + 1)
        if not xs:
            self._t1, self._v_slope, self._v_by_k = None, 0.0, v_rows[1:]
            return
        # weighted least squares T(n) = a + b (n - 1), b >= 0: one row's cost plus a cost per extra row
        wsum = sum(ws)
        xbar = sum(w * (n - 1) for n, w in zip(xs, ws)) / wsum
        tbar = sum(w * t for t, w in zip(ts, ws)) / wsum
        sxx = sum(w * (n - 1 - xbar) ** 2 for n, w in zip(xs, ws))
        b = sum(w * (n - 1 - xbar) * (t - tbar) for n, t, w in zip(xs, ts, ws)) / sxx if sxx > 0 else 0.0
        b = max(0.0, b)
        a = tbar - b * xbar
        if a <= 0.0:  # a steep, noisy fit: anchor at the cheapest measured batch instead
            a = min(ts)
            b = max(0.0, (tbar - a) / xbar) if xbar > 0 else 0.0
        # shrink each row's median toward the line by its sample count
        s0 = self.v_shrink
        shrunk = [(w * t + s0 * (a + b * (n - 1))) / (w + s0) for n, t, w in zip(xs, ts, ws)]
        # the single-row time is the unit of v and c: its own median when measured (plain rounds and
        # no-draft rounds give it plenty of samples); a line through concave multi-row costs (a 2-row batch
        # can cost 2.6 rows, 17 rows 6.6, e.g. F16 here) would drag it far off
        t1 = ts[0] if xs[0] == 1 else a
        self._t1 = t1
        self._v_slope = b / t1
        pairs = [(n, t / t1, w) for n, t, w in zip(xs, shrunk, ws) if n >= 2]
        if pairs:
            fit = _isotonic([y for _, y, _ in pairs], [w for _, _, w in pairs])
            px = [1, *(n for n, _, _ in pairs)]
            py = [1.0, *(max(1.0, y) for y in fit)]
            for i in range(1, len(py)):  # keep monotone after the clamp
                py[i] = max(py[i], py[i - 1])
            j = 0
            m, vm = px[-1], py[-1]
            for n in range(2, self.max_rows + 1):
                if n >= m:
                    v_rows[n] = vm + self._v_slope * (n - m)
                    continue
                while px[j + 1] < n:
                    j += 1
                x0, x1, y0, y1 = px[j], px[j + 1], py[j], py[j + 1]
                v_rows[n] = y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        else:  # only single rows measured: the flat prior
            self._v_slope = 0.0
        self._v_by_k = v_rows[1:]

    def v(self, k: int) -> float:
        """v(K): predicted verify cost of K+1 rows relative to one row (v(0) = 1)."""
        if self._v_dirty:
            self._refresh_v()
        if k <= 0:
            return 1.0
        if k < len(self._v_by_k):
            return self._v_by_k[k]
        # beyond the table: continue along the fitted per-row slope
        return self._v_by_k[-1] + self._v_slope * (k - len(self._v_by_k) + 1)

    def c(self, drafter: str) -> float:
        """c = draft ms per drafted token / single-row target ms (0 before either is measured)."""
        t1 = self.target_ms()
        return self.draft_ms_per_token(drafter) / t1 if t1 else 0.0

    def speedups(self, drafter: str, k_max: int = K_MAX, alpha: float | None = None) -> list[float]:
        """[S(0), ..., S(k_max)] with the current estimates (``alpha`` overrides α̂, e.g. α = 1 for a
        ceiling). Cached until the next observation."""
        if k_max >= self.max_rows:
            raise ValueError(f"k_max must be < {self.max_rows}, got {k_max}")
        key = (drafter, k_max, alpha)
        if key == self._curve_key:
            return self._curve
        if self._v_dirty:
            self._refresh_v()
        a = self.alpha(drafter) if alpha is None else alpha
        st = self._drafters.get(drafter)
        if alpha is None and st is not None and len(st.replay):
            curve = st.replay.curve(
                a, self.c(drafter), self._v_by_k, k_max, self._clock, self.replay_half_life, self.replay_prior
            )
        else:
            curve = speedup_curve(a, self.c(drafter), self._v_by_k, k_max)
        self._curve_key, self._curve = key, curve
        return curve

    def estimate(self, drafter: str, k_current: int, k_max: int = K_MAX) -> CostEstimate:
        """The current view for ``drafter`` at K = ``k_current``, and the best K over 0..``k_max``."""
        curve = self.speedups(drafter, k_max)
        b = best_k(curve)
        t1 = self.target_ms()
        return CostEstimate(
            alpha=self.alpha(drafter),
            c=self.c(drafter),
            v=self.v(k_current),
            best_k=b,
            predicted_speedup=curve[b],
            target_ms_per_token=t1 or 0.0,
            draft_ms_per_token=self.draft_ms_per_token(drafter),
        )


def _isotonic(ys: Sequence[float], ws: Sequence[float]) -> list[float]:
    """Weighted least-squares non-decreasing fit (pool adjacent violators, Ayer et al. 1955)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for y, w in zip(ys, ws):
        blocks.append([y, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks[-1]
            wt = w1 + w2
            blocks[-1] = [(m1 * w1 + m2 * w2) / wt, wt, n1 + n2]
    out: list[float] = []
    for m, _, n in blocks:
        out.extend([m] * int(n))
    return out


# =================================================================================================
# Auto-K
# =================================================================================================


class AutoK:
    """Choose K at each step boundary: K* = argmax over 0..k_max of the cost model's S(K), 0 = do not draft.

    Deterministic (no RNG). The policy:

    * **warm-up** - until the cost model has seen ``warmup_steps`` drafting rounds of this drafter, use
      ``k_init`` (default 1: the first rounds measure the draft cost at the least risk, instead of
      trusting a prior). A *free* drafter that chooses its own length (n-gram: it proposes only
      confident continuations, nothing when nothing matches) warms up at ``k_max`` instead: drafting
      costs nothing, it proposes only what it trusts, and a round verified at a large cap tells the
      cost model's replay exactly what every smaller cap would have given (so K can only move down
      on evidence, never creep up on the geometric extrapolation of short rounds);
    * **hysteresis** - move from K to the best K only when it is predicted to beat K by more than
      ``margin`` (relative), on ``patience`` consecutive boundaries, and never reverse the last move
      before ``min_dwell`` boundaries at the new K (its evidence must come in first; moving on the same
      way, e.g. ramping up as acceptance evidence grows, is not held back). For a free drafter that
      chooses its own length the dwell is ``free_dwell``: a cap that is too high costs little (it
      drafts only what it trusts), one that is too low loses the long copies, so it may come back up
      sooner. Near the optimum S(K) is
      flat, so estimation noise does not make K flap. Speculation is switched on only when some K is
      predicted to beat plain decoding by ``margin``, and off when none beats it by ``margin / 2`` (a
      band, so it does not flap at the break-even point either);
    * **probing** - at K = 0 no new acceptance evidence arrives (the old evidence keeps ageing in the
      cost model), so now and then one round drafts ``probe_k`` tokens, the K that would be best if α
      were ``probe_alpha``. If the model then predicts a gain, K switches on at once. Otherwise the
      interval between probes doubles from ``probe_min`` up to ``probe_max`` while probes fail, but
      stays where the probes' expected loss (c·K + v(K) − E(α̂, K) plain rounds each) is under
      ``probe_budget`` of the time: free n-gram probes keep coming every ``probe_min`` rounds. A
      promising probe - its own acceptance, accepted / (accepted + 1 rejection) or 1 if all were
      accepted, reaches the break-even α - resets the doubling, so evidence gathers quickly once the
      text became predictable. Probing never stops: even a draft that cannot pay today is re-measured
      every ``probe_max`` rounds, since costs measured under contention can be wrong. A probe whose
      drafter proposed nothing (no n-gram match) is retried on the next round;
    * **cannot pay** - when the draft cost is known (the engine times one draft decode before the first
      round, :meth:`SpeculativeDecoder.calibrate_draft_cost`) and no K would beat plain decoding by
      ``margin`` even at a per-position acceptance of ``cannot_pay_alpha`` (0.9; a model drafter's
      warm-up first prefills the whole prompt into its KV, which a gain only reachable above 90 %
      acceptance rarely repays), a costly drafter is not used at all: no warm-up, no probes; every ``probe_max`` rounds ``remeasure`` asks the engine to time
      the draft again, and drafting resumes (warm-up, then the rules above) once some K could pay;
    * **calibration** - v and c are ratios to the single-row target time; when no single-row timing came
      in ``calibrate_every`` observations (a model drafter always drafts, so plain rounds never happen),
      one plain round re-measures it.
    """

    def __init__(
        self,
        k_max: int = K_MAX,
        *,
        k_init: int = 1,
        margin: float = 0.05,
        patience: int = 2,
        min_dwell: int = 16,
        free_dwell: int = 4,
        warmup_steps: int = 2,
        probe_min: int = 8,
        probe_max: int = 128,
        probe_alpha: float = 0.8,
        probe_budget: float = 0.01,
        calibrate_every: int = 64,
        cannot_pay_alpha: float = 0.9,
    ) -> None:
        if not (1 <= k_max <= K_MAX):
            raise ValueError(f"k_max must be in 1..{K_MAX}, got {k_max}")
        if k_init < 1:
            raise ValueError(f"k_init must be >= 1, got {k_init}")
        if probe_min < 1 or probe_budget <= 0:
            raise ValueError("probe_min must be >= 1 and probe_budget > 0")
        self.k_max = k_max
        self.k_init = min(k_init, k_max)
        self.margin = margin
        self.patience = max(1, patience)
        self.min_dwell = max(0, min_dwell)
        self.free_dwell = max(0, free_dwell)
        self.warmup_steps = warmup_steps
        self.probe_min = probe_min
        self.probe_max = max(probe_max, probe_min)
        self.probe_alpha = probe_alpha
        self.probe_budget = probe_budget
        self.calibrate_every = calibrate_every
        self.cannot_pay_alpha = cannot_pay_alpha
        self.reset()

    def reset(self) -> None:
        """Forget the policy state (K back to ``k_init``); the cost model keeps its estimates."""
        #: the regime: the K used outside probes and calibration rounds
        self.k = self.k_init
        #: why the last choice was made: warm-up, calibrate, probe, probe paid, probe failed, switch, hold
        self.last_reason = "start"
        self._drafter: str | None = None
        self._streak = 0
        self._dwell = self.min_dwell  # boundaries since the regime last changed (free to move at start)
        self._last_dir = 0  # direction of that change: +1 up, -1 down
        self._plain = 0
        self._fails = 0
        self._interval = self.probe_min
        self._probe_pending = False
        self._probe_before = 0
        #: set by choose() when the decoder should re-time the drafter (SpeculativeDecoder does, then clears it)
        self.remeasure = False

    @property
    def probe_interval(self) -> int:
        """Plain rounds between probes while K = 0."""
        return self._interval

    # -- helpers -----------------------------------------------------------------------------------
    def _probe_size(self, cm: CostModel, drafter: str) -> int:
        return max(1, best_k(cm.speedups(drafter, self.k_max, alpha=self.probe_alpha)))

    def _set_interval(self, cm: CostModel, drafter: str) -> None:
        kp = self._probe_size(cm, drafter)
        loss = cm.c(drafter) * kp + cm.v(kp) - expected_tokens(cm.alpha(drafter), kp)
        cap = max(self.probe_min, min(self.probe_max, int(loss / self.probe_budget)))
        self._interval = min(self.probe_min * 2 ** min(self._fails, 30), cap)

    def _break_even_alpha(self, cm: CostModel, drafter: str) -> float:
        """The smallest α at which some K would beat plain decoding by ``margin`` (bisection)."""
        gain = 1.0 + self.margin
        if max(cm.speedups(drafter, self.k_max, alpha=1.0)) <= gain:
            return 1.0 + 1e-9  # nothing pays, not even α = 1
        lo, hi = 0.0, 1.0
        for _ in range(14):
            mid = 0.5 * (lo + hi)
            if max(cm.speedups(drafter, self.k_max, alpha=mid)) > gain:
                hi = mid
            else:
                lo = mid
        return hi

    def _cannot_pay(self, cm: CostModel, drafter: str) -> bool:
        """No K is predicted to beat plain decoding by ``margin`` even at α = ``cannot_pay_alpha``."""
        return max(cm.speedups(drafter, self.k_max, alpha=self.cannot_pay_alpha)) <= 1.0 + self.margin

    def _go_off(self, cm: CostModel, drafter: str) -> None:
        self.k = 0
        self._dwell = 0
        self._plain = 0
        self._streak = 0
        self._fails = 0
        self._set_interval(cm, drafter)

    def _probe(self, cm: CostModel, drafter: str) -> int:
        self._probe_pending = True
        self._probe_before = cm.spec_steps(drafter)
        self.last_reason = "probe"
        return self._probe_size(cm, drafter)

    # -- the policy --------------------------------------------------------------------------------
    def choose(self, cost_model: CostModel, drafter: str, *, free: bool = False) -> int:
        """The K for the next round with ``drafter`` (call once per step boundary, then observe it).

        ``free``: the drafter costs ~nothing and chooses its own draft length (see the warm-up)."""
        cm = cost_model
        if drafter != self._drafter:
            self.reset()
            self._drafter = drafter
        self.remeasure = False
        if not free and cm.has_draft_cost(drafter) and self._cannot_pay(cm, drafter):
            # no K beats plain decoding even if every draft were accepted: do not draft at all (no
            # warm-up, no α probes - a model drafter's probe would also have to catch its KV up on
            # every token since its last round); re-time the draft every probe_max rounds instead
            if self.k != 0:
                self._go_off(cm, drafter)
                self._last_dir = -1
            self._plain += 1
            if self._plain >= self.probe_max:
                self._plain = 0
                self.remeasure = True
                self.last_reason = "re-measure"
            else:
                self.last_reason = "cannot pay"
            return 0
        n_spec = cm.spec_steps(drafter)
        if n_spec < self.warmup_steps:
            self.k = self.k_max if free else self.k_init
            self.last_reason = "warm-up"
            return self.k
        since = cm.steps_since_single_row
        if self.k > 0 and not self._probe_pending and (since is None or since >= self.calibrate_every):
            self.last_reason = "calibrate"
            return 0

        curve = cm.speedups(drafter, self.k_max)
        best = best_k(curve)
        gain = 1.0 + self.margin

        if self._probe_pending:
            if n_spec == self._probe_before:
                return self._probe(cm, drafter)  # nothing was drafted: no evidence yet, try again
            self._probe_pending = False
            if best > 0 and curve[best] > gain:
                self.k = best
                self._dwell = 0
                self._last_dir = 1
                self._streak = 0
                self._fails = 0
                self.last_reason = "probe paid"
                return self.k
            # a probe whose own acceptance would pay is promising: probe again soon to gather evidence
            drafted, accepted = cm.last_draft(drafter)
            alpha_probe = accepted / (accepted + 1) if accepted < drafted else 1.0
            self._fails = 0 if alpha_probe >= self._break_even_alpha(cm, drafter) else self._fails + 1
            self._set_interval(cm, drafter)
            self._plain = 0
            self.last_reason = "probe failed"
            return 0

        if self.k > 0 and curve[best] <= 1.0 + self.margin / 2:
            want = 0  # no K beats plain decoding by enough to be worth drafting
        elif best > 0 and curve[best] > gain * curve[self.k]:
            want = best
        else:
            want = self.k
        self._dwell += 1
        direction = (want > self.k) - (want < self.k)
        dwell = self.free_dwell if free else self.min_dwell
        if direction and (direction == self._last_dir or self._dwell > dwell):
            self._streak += 1
            if self._streak >= self.patience:
                self._last_dir = direction
                if want == 0:
                    self._go_off(cm, drafter)
                else:
                    self.k = want
                    self._dwell = 0
                    self._streak = 0
                self.last_reason = "switch"
                return self.k
        else:
            self._streak = 0
        if self.k == 0:
            self._plain += 1
            if self._plain >= self._interval and self._dwell > self.min_dwell:
                self._plain = 0
                return self._probe(cm, drafter)
        self.last_reason = "hold"
        return self.k


# =================================================================================================
# The advisor's sentence
# =================================================================================================


def break_even_line(estimate: CostEstimate) -> str:
    """One sentence on whether speculation pays, from a :class:`CostEstimate`.

    Since E(α, K) = 1 + α + … + α^K ≤ 1 + K·α and v ≥ 1, S(K) > 1 needs α > c: a draft that costs c
    target-steps per token must be accepted more often than c. With c ≥ 1 nothing can pay (the seed's
    lesson: a draft as expensive as the target loses even at 100 % acceptance).
    """
    c = estimate.c
    head = f"draft costs {c:.2f}× target per token"
    if c >= 1.0:
        return f"{head}: speculation cannot pay here; best K = off"
    a = estimate.alpha
    if estimate.best_k == 0:
        if a <= c:
            why = f"needs α > {c:.2f} to pay"
        else:
            why = "the verify cost of a batch eats the gain"
        return f"{head}, α = {a:.2f}: {why}; best K = off"
    return f"{head}, α = {a:.2f}: best K = {estimate.best_k}, predicted {estimate.predicted_speedup:.1f}×"


__all__ = [
    "MAX_ROWS",
    "AutoK",
    "CostModel",
    "Rolling",
    "TurnCounters",
    "best_k",
    "break_even_line",
    "expected_tokens",
    "natural_length",
    "predicted_speedup",
    "replay_speedups",
    "speedup_curve",
]
