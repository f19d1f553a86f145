"""The counterfactual speedup curve: a drafter's recent rounds replayed at every other cap K.

What a round verified at cap K would have given at a smaller cap is known exactly; only the positions it
never reached are filled in with the geometric model of Leviathan et al. 2023. The cost model's live
curve (and so auto-K) and ``specchat bench``'s recommendation both come from :func:`replay_speedups`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specchat.engine.drafter_kinds import K_MAX


class Replay:
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


#: numpy lets go of the GIL around any loop over more than this many elements (``NPY_BEGIN_THREADS_THRESHOLDED``
#: in numpy's ``ndarraytypes.h``), and in the app the UI thread then takes it: the engine waits up to a switch
#: interval (5 ms) to get it back, once per such call. The replay's arrays are (K + 1) x rounds, 65 x 64 when
#: full, about 20 calls a replay, so :func:`replay_speedups` works in blocks of K rows under this size. py-spy
#: on the app streaming a reply (bundled model, n-gram K 3, ``--threads 1``, 200 Hz, 7 s, interleaved runs):
#: the engine thread waited for the GIL 2.8-3.9 % of its time, 2.1 % inside this function, and 0.6-2.1 %
#: (0-0.2 %) with the blocks; llama_decode's share rose from 91.0-93.4 % to 93.1-94.4 %. The blocks cost
#: Python calls: 0.47 ms a full replay against 0.16 ms in one piece (timeit, one thread), at most ten replays
#: a second of generation (:data:`~specchat.engine.telemetry.cost_model.CURVE_REFRESH_MS`): +0.3 %.
GIL_FREE_LOOP = 500
#: the caps K' a replay runs over, made once: ``np.arange`` lets go of the GIL whatever its size (it fills the
#: array with ``NPY_BEGIN_THREADS``), so a replay that called it per block let go ten times; a slice of this is
#: a view (tests/engine/test_telemetry.py: no other thread runs inside a replay)
_CAPS = np.arange(K_MAX + 1)


def replay_speedups(
    drafted: Sequence[int], accepted: Sequence[int], natural: Sequence[int], weights: Sequence[float],
    alpha: float, c: float, v_rows: Sequence[float], k_max: int, prior_weight: float = 0.0,
) -> list[float]:
    """[S(0), ..., S(k_max)] from rounds replayed at every cap K' (see :class:`Replay`): rounds
    (d, a, n) with ``weights``, the geometric tail with ``alpha`` only past each round's draft, cost
    c·d' + v(d') with ``v_rows[j]`` = v of a j-token draft (``v_rows[0]`` = 1), plus ``prior_weight``
    pseudo-rounds of the geometric model at the rounds' own lengths. Computed a block of K' rows at a time,
    each array at most :data:`GIL_FREE_LOOP` elements, so numpy keeps the GIL (the rows are independent)."""
    d = np.asarray(drafted, dtype=np.int64)[None, :]
    a = np.asarray(accepted, dtype=np.int64)[None, :]
    n = np.asarray(natural, dtype=np.int64)[None, :]
    w = np.asarray(weights, dtype=float)
    vt = np.asarray(v_rows, dtype=float)
    al = min(max(alpha, 0.0), 1.0)
    certain = al >= 1.0 - 1e-9
    ws = float(w.sum())
    num = np.empty(k_max + 1)
    den = np.empty(k_max + 1)
    block = max(1, GIL_FREE_LOOP // max(1, d.shape[1]))
    caps = _CAPS if k_max <= K_MAX else np.arange(k_max + 1)
    for lo in range(0, k_max + 1, block):
        hi = min(k_max + 1, lo + block)
        ks = caps[lo:hi]
        kp = ks[:, None]
        dp = np.minimum(kp, n)
        if certain:
            tail = np.maximum(dp - d, 0).astype(float)
            e = ks + 1.0
        else:
            tail = al * (1.0 - al ** np.maximum(dp - d, 0)) / (1.0 - al)
            e = (1.0 - al ** (ks + 1)) / (1.0 - al)
        tokens = np.where(kp <= d, np.minimum(a, kp) + 1.0, np.where(a < d, a + 1.0, d + 1.0 + tail))
        cost = c * dp + vt[dp]
        if ws > 0.0:  # the prior drafts the rounds' own lengths, accepted geometrically
            e_rows = dp + 1.0 if certain else (1.0 - al ** (dp + 1)) / (1.0 - al)
            prior_tokens = (e_rows @ w) / ws
            prior_cost = (cost @ w) / ws
        else:
            prior_tokens, prior_cost = e, c * ks + vt[lo:hi]
        num[lo:hi] = tokens @ w + prior_weight * prior_tokens
        den[lo:hi] = cost @ w + prior_weight * prior_cost
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0).tolist()
    out[0] = 1.0
    return out


__all__ = ["GIL_FREE_LOOP", "Replay", "natural_length", "replay_speedups"]
