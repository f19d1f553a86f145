"""Calibration: timing the verify cost v(K) and the draft cost c on the loaded models, into a cost model.

The one path by which v(K) and c are measured outside the rounds. The engine runs it once per cost model,
before auto-K's first round (:meth:`specchat.engine.speculative.SpeculativeDecoder.generate`), so auto-K
does not start from the flat prior v = 1 and a draft as costly as the target is never even warmed up;
``specchat bench`` runs the same functions (every row count, more repetitions) for its arithmetic. Both
feed the timings to a :class:`~specchat.engine.telemetry.CostModel`, whose fit (row medians shrunk toward
a line, made monotone) turns them into v(K) and c - so the bench's figures and the sidebar's come from the
same estimator. The rounds then keep refining the same model.

Why measure at all: Leviathan et al.'s speedup E(α, K) / (c·K + v(K)) assumes v = 1, and on a CPU v is far
from flat and depends on the weight format (README, "The lesson": ``specchat models tune`` measured v(16) ≈ 6.7
for the bundled SmolLM2 Q4_1 here, 2.6 for its F16 re-encoding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from specchat.engine.calibration_cache import CalibrationCache, CalibrationKey
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.telemetry import CostModel

if TYPE_CHECKING:  # only annotations: the bench imports this module before it loads llama.cpp
    from specchat.engine.drafters import Drafter
    from specchat.engine.model import Model

#: verify batch sizes the engine times before auto-K chooses: K = 0, 1 and K = 2, 4, 8, ... up to K_MAX (the cost
#: model interpolates between them). With K_MAX = 64 that is 1, 2, 3, 5, 9, 17, 33, 65 rows, 135 rows a
#: repetition (and its uncounted warm-up row, WARM_UP_ROWS): twice over 4.5 s for the bundled Q4_1 on one
#: thread on this machine under load (median of 3, load average 3.3), hence the cache (:mod:`specchat.engine.calibration_cache`): once per target file,
#: threads and CPU, not once per session. The 2-row batch is timed because a CPU's curve is steepest there and
#: no line or interpolation finds it: on the AMD EPYC Zen 4 (Genoa) 2 rows of the bundled Q4_1 cost 1.84 single
#: rows where 1 -> 3 rows interpolated priced them at 1.63-1.68, and the many short drafts of a prose reply turn on
#: that one price. Replayed over every recorded profile (``tests/engine/test_cost_profiles.py``, 347 cases), auto-K
#: against plain decoding 1.2841 -> 1.2871 (geometric mean), against the best fixed K worst case 0.935 -> 0.945,
#: cases under 0.98 of plain 9 -> 7. Live on that CPU (``--threads 1``, three pairs round by round per run, four runs
#: each way alternating, fresh calibrations, 2026-12-07), auto-K ÷ plain, median of 12 pairs: prose 0.971 -> 0.980,
#: copy-heavy 1.294 -> 1.302. (Stop 48 found the opposite before the drafter's doubt and quoted matches: the Xeon's
#: Q8_0 on the copy-heavy reply drafted 317 for 219 kept against 266 for 220; that case now reads 3.22x either way.)
CALIBRATION_ROWS: tuple[int, ...] = tuple(sorted({1, 2, K_MAX + 1, *(2**i + 1 for i in range(1, K_MAX.bit_length()))}))
#: the denser set ``specchat bench`` and ``specchat models tune`` time: every K up to 16, where auto-K
#: mostly chooses and the curve bends, then 20, 24, 32, 48, 64 for the long n-gram drafts
MEASURE_ROWS: tuple[int, ...] = tuple(
    sorted({1, *(k + 1 for k in range(1, min(16, K_MAX) + 1)), *(k + 1 for k in (20, 24, 32, 48, K_MAX) if k <= K_MAX)})
)

#: one timing: (rows of the batch, ms)
Timing = tuple[int, float]
#: the decode that opens each repetition of :func:`calibrate_verify_cost` uncounted (a single row: the cheapest)
WARM_UP_ROWS = 1


def calibrate_verify_cost(
    target: Model, cost_model: CostModel, last: int, rows: Sequence[int] = CALIBRATION_ROWS, reps: int = 2
) -> list[Timing]:
    """Time verify batches of ``rows`` rows, ``reps`` times over, into ``cost_model`` (v(K) = t(K+1 rows) / t(1 row));
    returns the timings (for the cache).

    Each batch is ``last`` repeated, decoded after the target's KV with logits on every row (as a verify
    batch asks) and removed again, so the KV is unchanged and every batch sees the same context length.
    A repetition stops at the first batch the context has no room for.

    Each repetition starts with one single-row decode that is not counted (:data:`WARM_UP_ROWS`): the first
    decode after another model ran is cold, and the single row - timed first, and the unit of every v - took
    it all. ``specchat models tune`` interleaves six targets (AMD EPYC Zen 5, ``--threads 1``): the F16's single
    row timed 21.6 ms there against 9 ms warm in one process, its 2-row batch 17 ms either way, so the tune
    reported v(1) = 0.79 (clamped to 1.0) where it is 1.8, and the Q8_0's 12.8 ms against 6-7 ms; the cache it
    warms then carried that shape into the app (the re-anchoring scales every timing alike).
    """
    out: list[Timing] = []
    for _ in range(reps):
        target.time_scratch_decode([last] * WARM_UP_ROWS)  # not counted: the cold decode
        for r in rows:
            ms = target.time_scratch_decode([last] * r)
            if ms != ms:  # NaN: no room left in the context for this batch
                break
            cost_model.observe_verify(r, ms)
            out.append((r, ms))
    return out


def replay_timings(cost_model: CostModel, timings: Sequence[Timing]) -> None:
    """Feed stored timings (a cached calibration) to ``cost_model`` as if they had just been measured."""
    for r, ms in timings:
        cost_model.observe_verify(r, ms)


def has_cached_verify_cost(target: Model, cache: CalibrationCache) -> bool:
    """Whether ``cache`` holds this target's calibration at its current depth (so :func:`verify_cost_for` times
    nothing)."""
    return cache.load(CalibrationKey.for_model(target)) is not None


def load_cached_verify_cost(target: Model, cost_model: CostModel, cache: CalibrationCache) -> bool:
    """Replay this target's cached calibration into ``cost_model`` (same file, threads, kernels, CPU and
    llama.cpp: :class:`~specchat.engine.calibration_cache.CalibrationKey`); False when there is none."""
    entry = cache.load(CalibrationKey.for_model(target))
    if entry is None:
        return False
    replay_timings(cost_model, entry.timings)
    return True


#: the bounds of the factor a cached calibration is rescaled by (:func:`rescale_cached_verify_cost`): a factor
#: outside them is a timing gone wrong, not the machine's load
RESCALE_BOUNDS = (0.25, 4.0)


def rescale_cached_verify_cost(target: Model, cost_model: CostModel, cache: CalibrationCache, last: int,
                               reps: int = 3) -> float | None:
    """Re-anchor this target's cached calibration at this moment: time ``reps`` single-row decodes of ``last``
    after the prompt (as the calibration itself was timed), scale every cached timing by their median over the
    cached single-row median, and give ``cost_model`` those instead of the cached ones. Returns the factor
    (None: no cached entry, or the timing failed).

    Why: the cache holds milliseconds, and a shared machine's speed moves by the hour (AMD EPYC Zen 4 here, the
    bundled Q4_1 on one thread: single rows of 6 to 22 ms between sessions a day apart). Replayed unscaled, the
    cached multi-row medians stayed from the calibration's hour while every plain round brought t1 from this one:
    v(K) = t(K+1) / t1 was off by their ratio for every size the rounds did not re-time (a calibration of a fast
    hour replayed in a slow one priced a 17-row verify at 5.3 rows where the rounds cost ~10). The shape of the
    curve is the CPU's and the format's; only its unit moves with the load.

    Once, not continuously: keeping the cached curve as a shape and pricing it at every refit by the single row the
    rounds measure (so v(K) stays the cached ratio while the reply deepens) was tried (AMD EPYC Zen 4, bundled Q4_1,
    ``--threads 1``, one process, auto-K ÷ the adjacent plain reply, 4 interleaved pairs each, 2026-12-05) and lost:
    copy-heavy 1.352 -> 1.259, code 1.201 -> 1.181, prose 1.129 -> 1.104, summary and copy-then-new within 0.5 %.
    Scaled once, the cached milliseconds stay while the reply's single rows grow with its depth, so v(K) falls as the
    reply goes on; the rounds that drafted longer for it paid (the same lesson as VerifyCost's bent prior). The bench's
    auto-K runs (``specchat bench``, which resets the cost model before each) read the calibration its first auto-K
    run timed minutes before in the same process, unscaled."""
    entry = cache.load(CalibrationKey.for_model(target))
    if entry is None:
        return None
    singles = sorted(ms for r, ms in entry.timings if r == 1)
    now = sorted(ms for ms in (target.time_scratch_decode([last]) for _ in range(reps)) if ms == ms and ms > 0)
    if not singles or not now:
        return None
    factor = now[len(now) // 2] / singles[len(singles) // 2]
    lo, hi = RESCALE_BOUNDS
    if not lo <= factor <= hi:
        return None
    cost_model.replace_verify_timings([(r, ms * factor) for r, ms in entry.timings])
    return factor


def verify_cost_for(target: Model, cost_model: CostModel, last: int, cache: CalibrationCache | None = None) -> str:
    """Give ``cost_model`` the target's v(K): from ``cache`` when it holds this target's calibration
    (:func:`load_cached_verify_cost`), else by timing :data:`CALIBRATION_ROWS` (:func:`calibrate_verify_cost`)
    and storing the result. Returns where it came from: ``"cache"`` or ``"measured"``."""
    if cache is not None and load_cached_verify_cost(target, cost_model, cache):
        return "cache"
    timings = calibrate_verify_cost(target, cost_model, last)
    if cache is not None and timings:
        cache.save(CalibrationKey.for_model(target), timings, target.weights)
    return "measured"


def draft_cost_ratios(target: Model, drafters: Mapping[str, Drafter], token: int, reps: int = 5) -> dict[str, float]:
    """c for each drafter that runs a model, timed against the target on equal footing.

    One single-row decode of ``token`` in each, at the same context length (call with the target KV
    empty, before the prompt; a fresh draft KV is empty too), median of ``reps`` interleaved ratios. A
    decode costs more with a longer context (F16 SmolLM2 here: 12 ms at 49 tokens, 15.5 ms at 300), so a
    draft timed with an empty KV against a target holding the prompt would look cheaper than it is.
    """
    out: dict[str, float] = {}
    for name, d in drafters.items():
        if d.free:
            continue
        rs = []
        for _ in range(reps):
            t_draft = d.time_one_token(token)
            t_target = target.time_scratch_decode([token])
            if t_target > 0 and t_draft >= 0:  # NaN (no room) compares False
                rs.append(t_draft / t_target)
        if rs:
            out[name] = sorted(rs)[len(rs) // 2]
    return out


def calibrate_draft_cost(
    cost_model: CostModel,
    drafters: Mapping[str, Drafter],
    last: int,
    ratios: Mapping[str, float] | None = None,
    reps: int = 3,
) -> None:
    """Give ``cost_model`` each model drafter's cost per token (free drafters cost 0 until rounds say more).

    ``ratios`` (from :func:`draft_cost_ratios`) are c itself, timed beside the target (the cost model keeps
    c as ratios: :class:`~specchat.engine.telemetry.CostModel`, draft cost); call after
    :func:`calibrate_verify_cost` so the draft's ms follow from t1. Without a ratio the draft's own
    one-token decode is timed at its current context. Leaves every drafter's state unchanged. With the draft cost known up front, auto-K
    does not warm up a drafter for which no K could pay even at full acceptance (a draft about as
    costly as the target never wins).
    """
    for name, d in drafters.items():
        if d.free:
            continue
        if ratios and name in ratios:
            cost_model.observe_draft_ratio(name, ratios[name])
            continue
        for _ in range(reps):
            cost_model.observe_draft_cost(name, d.time_one_token(last))


__all__ = [
    "CALIBRATION_ROWS", "MEASURE_ROWS", "Timing", "calibrate_draft_cost", "calibrate_verify_cost", "draft_cost_ratios",
    "RESCALE_BOUNDS", "has_cached_verify_cost", "load_cached_verify_cost", "replay_timings", "rescale_cached_verify_cost", "verify_cost_for",
]
