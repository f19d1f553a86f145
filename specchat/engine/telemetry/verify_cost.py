"""The verify cost v(K): what a (K+1)-row verify batch costs relative to one single-row target decode.

Fitted online from timings of target decodes by row count - the engine's calibration batches
(:mod:`specchat.engine.calibration`), every round's verify batch, and plain single-row rounds. Leviathan et
al. 2023 assume v = 1 (a verify call costs one target step); on a CPU it is far from flat and depends on the
weight format (:mod:`specchat.engine.kernels`): the bundled SmolLM2 Q4_1 has no batched x86 kernel, its F16
and Q8_0 re-encodings have one, and ``specchat models tune`` measures them side by side (README, "The
lesson", has this machine's table). So v is measured, never assumed, and :meth:`VerifyCost.curve` says what
the measurement means in words (:func:`verify_reason`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.events import VerifyCurve, VerifySource
from specchat.engine.kernels import SGEMM_FORMATS
from specchat.engine.telemetry.recent import RecentMedian

#: verify batches have 1..K_MAX+1 rows ([last, d1..dK])
MAX_ROWS = K_MAX + 1

#: the verify batch the reason sentence quotes: K = 16, the model drafter's cap and the old K_MAX
REASON_K = 16
#: an extra row costing at least this share of a single-row decode means batching does not pay
NO_BATCH_SHARE = 0.5
#: a verify plan starts with single rows only where that saves at least this share of the one batch's cost:
#: a split is not taken on a timing's noise (the row medians of one machine moved 1-2 % between runs)
SPLIT_MARGIN = 0.03
#: a verify is cut into chunks only where that saves this share of its expected cost: the drafter's survival
#: estimates are rough, and a chunk the copy did not need costs a decode's overhead (the replayed profiles,
#: tests/engine/test_cost_profiles.py: at 3 % auto-K's worst case against the best fixed K fell from 0.943 to
#: 0.921, the Xeon's Q8_0 code lost 6 %; at 10 % and 20 % the worst cases stay as they were and the fixed K gain)
CHUNK_MARGIN = 0.10
#: at temperature 0 no decode of a verify costs more than this many single rows: a longer one is cut into chunks
#: that each cost at most this (:meth:`VerifyCost.plan`), so a copy that breaks inside a long draft pays for one
#: chunk, not the whole batch. The drafter's P(first j kept) is overconfident where a copy ends - replayed over
#: every recorded profile, drafts of more than 32 tokens were predicted kept whole 73 % of the time and were kept
#: 44 % - and that one miss decided the replays' worst cases: the AMD EPYC Zen 3's Q8_0 on the copy-heavy reply
#: verified a 52-token draft in one 25-row batch and kept none (0.907 of fixed K 16), the Zen 5's Q4_1 with flash
#: attention off a 56-token draft at 37 rows for 6 kept (0.902). With the bound (tests/engine/test_cost_profiles.py,
#: 24 formats x 5 replies on four CPUs) auto-K's worst case against the best fixed K (as fixed K ran before the
#: bound) went from 0.902 to 0.952, its geometric mean over plain decoding from 1.377x to 1.382x, and no case lost
#: more than 1.6 %; a bound of 10 rows cost a cheap-batching copy 10 % (the Zen 5's Q8_0), 16-22 rows left the
#: worst cases at 0.92. A fitted constant (12-14 rows did best on these replays), not a plateau. A fully kept long
#: draft pays the pieces (65 rows of the Zen 3's Q4_1: 48.9 single rows as 18 + 18 + 18 + 11, 44.2 as one batch);
#: the table the drafter prices by and the sidebar shows stays the one-batch plan's (pricing by the pieces did
#: worse on the replays: worst case 0.937)
BREAK_RISK_ROWS = 14.0
#: the chunk sizes (rows) a verify may be split into at temperature 0 (:meth:`VerifyCost.plan` with ``survival``),
#: besides "the rest in one batch": powers of two and their halves, so the search is ~10 sizes per position
CHUNK_ROWS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
#: a single-row timing refits v(K) only when the single row's median has moved this share from the t1 of the last
#: fit (or its window is still filling): every plain round adds one, the median of 31 moves a little with nearly
#: each, and the refit (a weighted line, isotonic regression and the plan over 65 row counts) ran once per round
#: for a change far inside the timings' own noise (the row medians of one machine moved 1-2 % between runs) - the
#: largest part of auto-K's bookkeeping in a plain round (the bench's prose prompt, AMD EPYC Zen 4, bundled Q4_1,
#: ``--threads 1``: 14.8 ms of a 3.4 s reply). A multi-row timing always refits: they are rare and each one moves
#: its row count's median
REFIT_TOLERANCE = 0.01


def _rows_text(x: float) -> str:
    return f"{x:.1f}" if x < 9.95 else f"{x:.0f}"


def verify_reason(weights: str, v: Callable[[int], float], *, measured: bool, row_by_row: bool = False,
                  k: int = REASON_K, single_rows_up_to: int = 1) -> str:
    """One line on what verifying costs with this target, from its weight format and its measured v(K).

    The headline comes from the measurement: each extra row of a (k+1)-row batch costs
    (v(k) − 1) / k single-row decodes; at :data:`NO_BATCH_SHARE` or more, batching does not pay
    ("no batched kernel on this CPU"). The format says why: llama.cpp has a batched x86 kernel for
    :data:`specchat.engine.kernels.SGEMM_FORMATS`; a format outside them whose batches still share weight reads is said to, and a
    format inside them whose kernel does not pay here is called out. ``row_by_row``: the target decodes every
    batch one row at a time (:attr:`specchat.engine.model.Model.row_by_row`), so v(k) ≈ k + 1 by design.
    ``single_rows_up_to`` > 1: verifies of up to that many rows are decoded one row at a time, cheaper here
    than one batch (:meth:`VerifyCost.plan`), and the sentence says so.
    """
    rows = k + 1
    if not measured:
        return f"{weights}: verify cost not measured yet (v = 1 assumed until the first timings)"
    cost = max(1.0, float(v(k)))
    tail = f"verifying {rows} rows costs {_rows_text(cost)} rows"
    if row_by_row:
        return f"{weights}: one row at a time (AMX kernels, whose batches crash on this CPU); {tail}"
    share = (cost - 1.0) / k
    has_kernel = weights.upper() in SGEMM_FORMATS
    if share >= NO_BATCH_SHARE:
        what = "its batched kernel does not pay on this CPU" if has_kernel else "no batched kernel on this CPU"
    elif has_kernel:
        what = "batched kernel (llamafile sgemm)"
    else:
        what = "no batched kernel, but a batch shares the weight reads on this CPU"
    if single_rows_up_to > 1:
        tail += f"; up to {single_rows_up_to} rows verified one at a time (cheaper here than a batch)"
    return f"{weights}: {what}; {tail}"


class VerifyCost:
    """Target ms per batch row count (1..``max_rows``), each the median of its last ``window`` samples
    (:class:`~specchat.engine.telemetry.recent.RecentMedian`), turned into v(K) and t1.

    A line T(n) = a + b·(n − 1), b ≥ 0, is fitted to the row medians by least squares weighted by their
    sample counts - one row's cost plus a cost per extra row, the shape of a CPU decode once the weights
    are read, and Leviathan et al.'s flat v = 1 when b = 0. Each row's median is shrunk toward that line
    with the weight of ``shrink`` samples: a row measured once, e.g. in a busy moment, is mostly the line,
    and since auto-K rarely returns to a K that looked bad, one unlucky sample must not condemn it; a row
    measured 31 times is mostly itself, so a curve that is not a line still shows. A line lies under a concave
    curve's small end (AMD EPYC Zen 4, Q8_0 re-encoding, two calibration samples per size: 3 and 5 rows priced at
    0.76 and 0.77 of their cost); a prior bent to follow it, a + b·(n − 1) + c·ln n, priced them at 0.87 and 0.89
    and gained on the replayed profiles (auto-K ÷ plain 1.2994 → 1.3076 over 216 cases), but live on that CPU
    (one process, auto-K replies interleaved, medians of 3, ``--threads 1``) it lost: geometric mean over the
    default suite 1.055 → 1.047 (bundled Q4_1) and 1.087 → 1.060 (Q8_0) with the drafter's quoted matches
    (:data:`specchat.engine.drafters.QUOTED`), copy-heavy 1.26 → 1.23 and 1.57 → 1.38 - the truer small-batch
    prices made auto-K draft less of a copy that was paying. Not taken. t1 = the median
    single-row time, not shrunk (the line's intercept before any single-row sample). v(n) = T(n)/t1 is
    made non-decreasing by weighted isotonic regression (pool-adjacent-violators), clamped at ≥ 1 (a
    batch does at least one row's work), interpolated linearly between measured row counts and
    extrapolated beyond the largest measured count along the line's slope b/t1. **Prior:** with no
    multi-row measurement v(n) = 1 for every n (Leviathan et al.'s assumption). It is optimistic, so
    auto-K tries drafting first, and the first verify of each size corrects it.
    """

    def __init__(self, max_rows: int = MAX_ROWS, *, window: int = 31, shrink: float = 4.0) -> None:
        self.max_rows = max_rows
        self.window = window
        self.shrink = shrink
        #: how many times the table has changed (fits and resets; never decreases): a key for what is derived from it
        self.version = 0
        self.reset()

    def reset(self) -> None:
        self.version += 1
        self._rows = [RecentMedian(self.window) for _ in range(self.max_rows + 1)]  # index = rows
        self._v_by_k: list[float] = [1.0] * self.max_rows  # index K -> v of K+1 rows, verified by the plan
        self._batch_v_by_k: list[float] = [1.0] * self.max_rows  # index K -> v of K+1 rows as one batch
        self._singles: list[int] = [0] * (self.max_rows + 1)  # index rows -> the plan's leading single rows
        self._dirty = False
        self._largest = 0  # the largest row count with a timing
        self._slope = 0.0
        self._t1: float | None = None
        self._since_single = -1  # observations since the last single-row sample; -1 = never
        self._measured = 1  # the largest batch (rows) with a timing when the plan was last made
        self._bound_rows = self.max_rows  # the flat prior: every batch costs one row

    # -- observations ------------------------------------------------------------------------------
    def observe(self, rows: int, ms: float) -> None:
        """One target decode of ``rows`` rows took ``ms`` (a batch larger than ``max_rows`` only counts as
        an observation since the last single row)."""
        if rows < 1:
            raise ValueError(f"a verify batch has at least one row, got {rows}")
        if ms < 0:
            raise ValueError(f"negative time {ms}")
        if rows <= self.max_rows:
            r = self._rows[rows]
            r.add(ms)
            self._largest = max(self._largest, rows)
            if rows > 1 or self._single_row_moved(r):
                self._dirty = True
        if rows == 1:
            self._since_single = 0
        elif self._since_single >= 0:
            self._since_single += 1

    def _single_row_moved(self, single: RecentMedian) -> bool:
        """Whether the single row's median has moved :data:`REFIT_TOLERANCE` from the last fit's t1 (or its window
        is still filling, or nothing was fitted): only then does a single-row timing refit v(K)."""
        t1 = self._t1
        if t1 is None or single.value is None or single.weight < self.window:
            return True
        return abs(single.value - t1) >= REFIT_TOLERANCE * t1

    # -- estimates ---------------------------------------------------------------------------------
    def largest_measured_rows(self) -> int:
        """The largest verify batch (rows) with a timing; 0 when none. v beyond it is extrapolated."""
        return self._largest

    @property
    def since_single_row(self) -> int | None:
        """Observations since the last single-row timing (None = never measured)."""
        return None if self._since_single < 0 else self._since_single

    def target_ms(self) -> float | None:
        """t1: target ms of a single-row decode (None before any target timing)."""
        if self._dirty:
            self._refresh()
        return self._t1

    def table(self) -> list[float]:
        """v by K for K = 0..max_rows - 1 (``table()[K]`` = v of K+1 rows verified the cheapest way,
        :meth:`plan`; ``[0]`` = 1)."""
        if self._dirty:
            self._refresh()
        return self._v_by_k

    def batch_table(self) -> list[float]:
        """v by K of K+1 rows decoded as one batch, as measured (the plan's input)."""
        if self._dirty:
            self._refresh()
        return self._batch_v_by_k

    def plan(self, rows: int, survival: Sequence[float] | None = None) -> tuple[int, ...]:
        """The cheapest way measured to verify ``rows`` rows: the sizes of the decodes, in order - s single
        rows, then one batch of the rest (``(rows,)``: one batch; ``(1,) * rows``: row by row).

        ``survival`` (temperature 0 only: a rejection found in one decode ends the verify there, so the decodes
        after it are never paid for): ``survival[j - 1]`` = the drafter's estimate that its first j tokens are all
        accepted. The plan is then the one of least *expected* cost (:meth:`chunked_plan`), when that saves
        :data:`CHUNK_MARGIN` of the one above, and no decode of it costs more than :data:`BREAK_RISK_ROWS`
        single rows (:meth:`bounded`).

        The family is "s single rows, then one batch": cost(n) = min over s of s + v_batch(n − s − 1), found for
        every n in one pass as n + min over m ≤ n of (v_batch(m − 1) − m). It covers what CPUs measured: a
        batch's cost per row falls as it grows (concave, so never two batches), except that a small batch can
        cost more than its rows one by one (the bundled Q4_1 on issue 20's AMD EPYC, a Zen 5: 2 rows 2.5, 5 rows
        5.2 single rows; Q8_0 there: 2 rows 2.7). Single rows come first, so at temperature 0 a rejection found in them
        ends the verify before the batch (:meth:`specchat.engine.speculative.SpeculativeDecoder._verify`).
        llama.cpp's own answer, a smaller ``n_ubatch``, splits every batch of the context alike; this is per K."""
        if rows <= 1:
            return (1,)
        if self._dirty:
            self._refresh()
        s = self._singles[rows] if rows <= self.max_rows else 0
        base = (1,) * s + ((rows - s,) if rows > s else ())
        if survival is None:
            return base
        if rows > self._measured or not survival or survival[-1] >= 0.999:
            return self.bounded(base)
        chunked, expected = self.chunked_plan(rows, survival)
        if expected < (1.0 - CHUNK_MARGIN) * self.expected_cost(base, survival):
            return self.bounded(chunked)
        return self.bounded(base)

    def bounded(self, plan: Sequence[int]) -> tuple[int, ...]:
        """``plan`` with every decode that costs more than :data:`BREAK_RISK_ROWS` single rows cut into chunks of
        the most rows that cost at most that (the rest last): what a break inside one can cost is bounded."""
        if self._dirty:
            self._refresh()
        batch, m = self._batch_v_by_k, self._bound_rows
        out: list[int] = []
        for rows in plan:
            while rows > m and batch[min(rows, len(batch)) - 1] > BREAK_RISK_ROWS:
                out.append(m)
                rows -= m
            out.append(rows)
        return tuple(out)

    def _survival_at(self, survival: Sequence[float], j: int) -> float:
        return 1.0 if j <= 0 else float(survival[min(j, len(survival)) - 1])

    def expected_cost(self, plan: Sequence[int], survival: Sequence[float]) -> float:
        """The expected cost (single rows) of verifying with ``plan`` at temperature 0: each decode is paid when
        every draft token the decodes before it judged was accepted (row i judges draft token i + 1)."""
        batch = self._batch_v_by_k
        total, start = 0.0, 0
        for rows in plan:
            total += self._survival_at(survival, start) * (1.0 if rows == 1 else batch[rows - 1])  # batch[0] is v = 1
            start += rows
        return total

    def chunked_plan(self, rows: int, survival: Sequence[float]) -> tuple[tuple[int, ...], float]:
        """The verify of ``rows`` rows with the least expected cost at temperature 0, and that cost: decodes of
        :data:`CHUNK_ROWS` rows (or the rest in one), each paid only when the drafts judged before it were all
        accepted (dynamic programming over the row where each decode starts, from the end: E(s) = min over m of
        v(m rows) + P(first s + m accepted | first s accepted) · E(s + m)).

        Where a batch's cost per row barely falls with its size (the bundled Q4_1 on an AMD EPYC Zen 4, one
        thread: 17 rows cost 12.7 rows, 65 rows 44) a long copy's verify is cut into chunks, and a copy that breaks
        early pays for its first chunk only (the bench's copy-heavy reply: a 60-token draft kept 11 tokens and
        paid ~42 rows, where a 17-row chunk costs ~13); where it falls steeply (F16 with its batched kernel) one
        batch stays cheapest for a confident draft."""
        batch = [1.0, *self._batch_v_by_k[1:]]  # [m - 1] = one decode of m rows
        n = rows
        surv = [self._survival_at(survival, j) for j in range(n + 1)]
        cost = [0.0] * (n + 1)
        step = [0] * (n + 1)
        for s in range(n - 1, -1, -1):
            p_s = surv[s]
            best, best_m = batch[n - s - 1], n - s  # the rest in one batch: nothing after it
            if p_s <= 0.0:
                cost[s], step[s] = best, best_m
                continue
            for m in CHUNK_ROWS:
                if s + m >= n:
                    break
                c = batch[m - 1] + surv[s + m] / p_s * cost[s + m]
                if c < best:
                    best, best_m = c, m
            cost[s], step[s] = best, best_m
        plan: list[int] = []
        s = 0
        while s < n:
            plan.append(step[s])
            s += step[s]
        return tuple(plan), cost[0]

    def single_rows_up_to(self) -> int:
        """The largest verify (rows) the plan decodes row by row, 1 when every multi-row verify is one batch."""
        if self._dirty:
            self._refresh()
        return max((n for n in range(2, self.max_rows + 1) if self._singles[n] >= n), default=1)

    def curve(self, weights: str, source: VerifySource, *, row_by_row: bool = False) -> VerifyCurve:
        """The fitted v(K) for K = 0..max_rows − 1 with the reason in words (:func:`verify_reason`)."""
        table = tuple(self.table())
        measured = self.largest_measured_rows() > 1
        return VerifyCurve(
            weights=weights, v=table, target_ms=self.target_ms() or 0.0, measured_rows=self.largest_measured_rows(),
            source=source if measured else "prior",
            reason=verify_reason(weights, self.v, measured=measured, row_by_row=row_by_row,
                                 single_rows_up_to=self.single_rows_up_to() if measured else 1),
        )

    def v(self, k: int) -> float:
        """v(K): predicted verify cost of K+1 rows relative to one row (v(0) = 1)."""
        if self._dirty:
            self._refresh()
        if k <= 0:
            return 1.0
        if k < len(self._v_by_k):
            return self._v_by_k[k]
        # beyond the table: continue along the fitted per-row slope
        return self._v_by_k[-1] + self._slope * (k - len(self._v_by_k) + 1)

    def _refresh(self) -> None:
        """Fit the verify-cost model to the row medians (see the class docstring)."""
        self._dirty = False
        self.version += 1
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
            self._t1, self._slope = None, 0.0
            self._plan_from(v_rows, 1)
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
        s0 = self.shrink
        shrunk = [(w * t + s0 * (a + b * (n - 1))) / (w + s0) for n, t, w in zip(xs, ts, ws)]
        # the single-row time is the unit of v and c: its own median when measured (plain rounds and
        # no-draft rounds give it plenty of samples); a line through concave multi-row costs (a 2-row batch
        # can cost 2.6 rows, 17 rows 6.6, e.g. F16 here) would drag it far off
        t1 = ts[0] if xs[0] == 1 else a
        self._t1 = t1
        self._slope = b / t1
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
                    v_rows[n] = vm + self._slope * (n - m)
                    continue
                while px[j + 1] < n:
                    j += 1
                x0, x1, y0, y1 = px[j], px[j + 1], py[j], py[j + 1]
                v_rows[n] = y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        else:  # only single rows measured: the flat prior
            self._slope = 0.0
        self._plan_from(v_rows, xs[-1])

    def _plan_from(self, v_rows: list[float], measured: int) -> None:
        """The cheapest plan per row count (:meth:`plan`) from the one-batch costs ``v_rows`` (index rows):
        a prefix minimum of v_batch(m) − m, a split kept only where it saves :data:`SPLIT_MARGIN` and only up
        to the largest batch ``measured``: beyond it v is the line's extrapolation, and a split taken on an
        extrapolation would never time the batch that could refute it (a fixed K's first 2-row verify at 2.7
        rows made every size look dear and the verify row by row for good)."""
        self._batch_v_by_k = v_rows[1:]
        self._measured = measured
        #: the most rows one decode of a greedy verify may have (:meth:`bounded`)
        self._bound_rows = max(r for r in range(1, self.max_rows + 1) if r == 1 or v_rows[r] <= BREAK_RISK_ROWS)
        plan_v = list(v_rows)
        singles = [0] * (self.max_rows + 1)
        best_m, best_g = 1, 0.0  # one row as a "batch" of one: g = v(1 row) − 1 = 0
        for n in range(2, self.max_rows + 1):
            g = v_rows[n] - n
            if g <= best_g:
                best_m, best_g = n, g
            split = n + best_g  # n − best_m single rows, then a batch of best_m (row by row when best_m = 1)
            if n <= measured and best_m < n and split < (1.0 - SPLIT_MARGIN) * v_rows[n]:
                plan_v[n] = split
                singles[n] = n - best_m if best_m > 1 else n
        self._singles = singles
        self._v_by_k = plan_v[1:]


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


__all__ = ["BREAK_RISK_ROWS", "CHUNK_MARGIN", "CHUNK_ROWS", "MAX_ROWS", "NO_BATCH_SHARE", "REASON_K", "SPLIT_MARGIN", "VerifyCost", "verify_reason"]
