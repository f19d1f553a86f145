"""``specchat models tune``: which weight format (and kernels, and thread split) should this machine verify with?

The verify cost of a target is a property of its weight format on this CPU (:mod:`specchat.engine.kernels`),
so the right target file depends on the workload: plain chat, where the drafter rarely proposes anything and
one-row speed is all that counts, or copy-heavy text, where long drafts are accepted and a cheap verify batch
pays. Tune measures instead of guessing, in the bench's way (interleaved, medians, ratios):

1. **variants** (:func:`specchat.models.formats.variants_for`): the source file, its re-encodings (F16 and Q8_0
   by default: the lossless direction; lower-bit formats only when named, flagged as changing the output),
   derived into ``<data dir>/models`` when missing; on a CPU whose AMX batch kernels crash, every AMX format's
   one-row-kernel variant too;
2. **verify cost** of each: the engine's calibration (:func:`specchat.engine.calibration.calibrate_verify_cost`
   over :data:`TUNE_ROWS`) into an engine cost model, interleaved across the
   variants ``reps`` times, at the configured threads - and, where ``threads`` < the cores, with the batch on
   every core (``threads_batch``): on 2 cores a verify batch may want both while a single row wants one. The
   timings go into the calibration cache (:mod:`specchat.engine.calibration_cache`), so the app starts warm on
   any of these files;
3. **runs**: the bench's runner (:class:`specchat.bench.runner.BenchRunner`) on two workloads from the bench's
   suite, plain chat (``prose``) and copy-heavy (``copy-heavy``): per round one baseline of the source, then
   every variant's baseline and auto-K run with the configured drafter, so every run is also a multiple of the
   source's baseline in the same round;
4. **prediction** per variant and workload: the cost model's best speedup for the auto-K runs' rounds (their
   acceptance, replayed at every K with the calibrated v(K): :func:`specchat.engine.telemetry.replay_speedups`)
   times the one-row speed - next to the measured tok/s;
5. **recommendation** (:func:`recommend`) per workload: the fastest measured variant and mode, with ties
   (within :data:`TIE_MARGIN`) going to the source (no re-encoding needed), and re-quantised variants only
   recommended when the user asked for them, flagged.

Results are saved as ``<data dir>/tune/<source file name>.json`` (:mod:`specchat.models.tune_results`);
``specchat models list`` shows them, and the loader follows their measured ``repack`` for ``repack = "auto"``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specchat.engine.calibration import CALIBRATION_ROWS
from specchat.models.tune_results import PLAIN_CHAT, TIE_MARGIN, Choice, Mode, TuneResult, VariantResult, _speed

#: the workloads and the bench suite prompt each is measured on
WORKLOADS: dict[str, str] = {PLAIN_CHAT: "prose", "copy-heavy": "copy-heavy"}
#: a thread split must make a 17-row verify batch at least this much cheaper to be recommended
SPLIT_GAIN = 0.10
#: the K whose verify cost the summary quotes
SHOWN_K = (1, 4, 8, 16, 32, 64)
#: the verify batches tune times: the engine's calibration sizes (K = 0, 2, 4, ..., 64) and K = 1, so the
#: cached curve is the one a session would have measured (135 rows a repetition)
TUNE_ROWS: tuple[int, ...] = tuple(sorted({2, *CALIBRATION_ROWS}))
#: a one-row-kernel target decodes a batch as that many single rows (v(K) = K + 1 by construction): timing up
#: to 17 rows shows it, the fit's line carries it on
ONE_ROW_ROWS: tuple[int, ...] = tuple(r for r in TUNE_ROWS if r <= 17)


# -- the decision ------------------------------------------------------------------------------------------


def recommend(variants: Sequence[VariantResult], workload: str, *, allow_lossy: bool = False,
              margin: float = TIE_MARGIN) -> Choice | None:
    """The variant and mode to use for ``workload``: the fastest by measured tok/s (the prediction where a
    variant was not run), unless the source file (in either kernels) is within ``margin`` of it: then the
    source, which changes nothing in the output and needs no new file. Re-quantised variants (``lossy``)
    only with ``allow_lossy``. None when nothing was measured."""
    cands = [(v, b) for v in variants if allow_lossy or not v.lossy if (b := v.best(workload)) is not None]
    if not cands:
        return None

    def speed(c: tuple[VariantResult, tuple[str, Mode]]) -> float:
        return _speed(c[1][1]) or 0.0

    top = max(cands, key=speed)
    pick, why = top, "fastest measured" if top[1][1].tok_s is not None else "fastest predicted"
    source_path = next((v.path for v in variants if v.source), None)
    from_source = [c for c in cands if c[0].path == source_path]
    if top[0].path != source_path and from_source:
        best_source = max(from_source, key=speed)
        if speed(best_source) >= (1.0 - margin) * speed(top):
            pick, why = best_source, f"within {margin:.0%} of the fastest ({top[0].label}): keep the source file"
    v, (mode, m) = pick
    return Choice(workload=workload, label=v.label, mode=mode, tok_s=_speed(m) or 0.0, x_source=m.x_source,
                  measured=m.tok_s is not None, why=why)


def settings_for(choice: Choice, variant: VariantResult, drafter: str, models_dir: Path | None) -> str:
    """The config lines that select ``choice`` (``target``, ``draft``, ``repack``, and ``flash_attn`` unless it is
    llama.cpp's choice)."""
    from specchat.engine.drafter_kinds import NONE

    p = Path(variant.path)
    target = "bundled" if _is_bundled(p) else (p.stem if models_dir and p.parent == models_dir else str(p))
    draft = NONE if choice.mode == "plain" else drafter
    fa = f', flash_attn = "{variant.flash_attn}"' if variant.flash_attn != "auto" else ""
    return f'target = "{target}", draft = "{draft}", repack = "{variant.repack}"{fa}'


def _is_bundled(path: Path) -> bool:
    try:
        from specchat.models.bundled import bundled_model_path

        return path.resolve() == bundled_model_path().resolve()
    except Exception:
        return False


# -- measuring ---------------------------------------------------------------------------------------------


Progress = Callable[[int, int, str], None]


def measure_verify_costs(
    sessions: Mapping[str, Any], prompt: str, *, reps: int, split_threads_batch: int | None,
    progress: Progress | None = None, cache: Any = None,
) -> dict[str, dict[str, Any]]:
    """The engine's calibration of every session's target, interleaved: ``reps`` rounds, each timing
    :data:`~specchat.engine.calibration.MEASURE_ROWS` on every target (and again with the batch on
    ``split_threads_batch`` threads, for a target that batches). Each target holds ``prompt`` (chat-formatted)
    in its KV while timed. Returns ``{label: {"cost": CostModel, "split": CostModel | None, "timings": ...}}``
    and stores each target's timings in ``cache`` (a :class:`~specchat.engine.calibration_cache.CalibrationCache`)."""
    from specchat.engine.calibration import calibrate_verify_cost
    from specchat.engine.calibration_cache import CalibrationKey
    from specchat.engine.protocol import Message
    from specchat.engine.telemetry import CostModel

    out: dict[str, dict[str, Any]] = {}
    lasts: dict[str, int] = {}
    for label, session in sessions.items():
        target = session.decoder.target
        session.decoder.reset()
        session.reset()
        ctx = session.template.tokens([Message("user", prompt)])
        ctx = ctx[: max(2, min(len(ctx), target.n_ctx - TUNE_ROWS[-1] - 2))]
        target.decode(ctx[:-1], logits_last=0)
        lasts[label] = int(ctx[-1])
        split = split_threads_batch is not None and not target.row_by_row
        out[label] = {"cost": CostModel(), "split": CostModel() if split else None, "timings": [], "split_timings": []}
    for rep in range(reps):
        for i, (label, session) in enumerate(sessions.items()):
            if progress:
                progress(rep * len(sessions) + i, reps * len(sessions), f"verify cost v(K): {label}")
            target = session.decoder.target
            entry = out[label]
            rows = ONE_ROW_ROWS if target.row_by_row else TUNE_ROWS
            entry["timings"] += calibrate_verify_cost(target, entry["cost"], lasts[label], rows, reps=1)
            if entry["split"] is not None:
                threads = target.threads
                target.set_threads(threads, split_threads_batch)
                try:
                    entry["split_timings"] += calibrate_verify_cost(target, entry["split"], lasts[label], rows, reps=1)
                finally:
                    target.set_threads(threads, threads)
    for label, session in sessions.items():
        target = session.decoder.target
        if cache is not None:
            cache.save(CalibrationKey.for_model(target), out[label]["timings"], target.weights)
            if out[label]["split"] is not None:
                threads = target.threads
                target.set_threads(threads, split_threads_batch)
                cache.save(CalibrationKey.for_model(target), out[label]["split_timings"], target.weights)
                target.set_threads(threads, threads)
        session.decoder.reset()
        session.reset()
    return out


def _v_at(cost: Any) -> dict[str, float]:
    from specchat.engine.drafter_kinds import K_MAX

    return {str(k): cost.v(k) for k in SHOWN_K if k <= K_MAX}


def summarize_runs(records: Sequence[dict[str, Any]], labels: Sequence[str]) -> dict[str, dict[str, dict[str, Mode]]]:
    """``{label: {workload: {"plain"|"auto": Mode}}}`` from the runner's records (baselines are "plain")."""
    from specchat.bench.summary import alpha_mle

    prompt_to_workload = {p: w for w, p in WORKLOADS.items()}
    out: dict[str, dict[str, dict[str, Mode]]] = {label: {} for label in labels}
    for label in labels:
        for prompt, workload in prompt_to_workload.items():
            for mode, name in (("baseline", "plain"), ("auto", "auto")):
                rs = [r for r in records if r["target"] == label and r["prompt"] == prompt and r["mode"] == mode]
                if not rs:
                    continue
                xs = [r["x_reference"] for r in rs if r.get("x_reference") is not None]
                drafted = sum(r["draft_n"] for r in rs)
                out[label].setdefault(workload, {})[name] = Mode(
                    tok_s=statistics.median(r["predicted_per_second"] for r in rs),
                    x_source=statistics.median(xs) if xs else None, runs=len(rs),
                    alpha=alpha_mle(sum(r["draft_n_accepted"] for r in rs), sum(r["rejections"] for r in rs)) if drafted else None,
                    mean_k=statistics.fmean(r["k_mean"] for r in rs) if mode == "auto" else None,
                )
    return out


def predict(mode: Mode, cost: Any, rounds: Sequence[Sequence[int | None]], plain: bool, c: float = 0.0) -> float | None:
    """Predicted tok/s: one-row speed × the best speedup of the runs' rounds replayed at every K with this
    target's calibrated v(K) and the draft cost ``c`` (auto-K's own estimate), or the one-row speed for plain
    decoding; None for speculation without runs (the acceptance is unknown)."""
    from specchat.engine.drafter_kinds import K_MAX
    from specchat.engine.telemetry import natural_length, replay_speedups

    t1 = cost.target_ms()
    if not t1:
        return None
    if plain:
        return 1000.0 / t1
    if not rounds or mode.alpha is None:
        return None  # how much the drafter carries is only known from runs
    vt = [cost.v(k) for k in range(K_MAX + 1)]
    d = [int(x[1]) for x in rounds]
    a = [int(x[2]) for x in rounds]
    n = [natural_length(int(x[0]), int(x[1]), x[3]) for x in rounds]
    curve = replay_speedups(d, a, n, [1.0] * len(rounds), mode.alpha, c, vt, K_MAX)
    return 1000.0 / t1 * max(curve)


def now() -> float:
    return time.time()


__all__ = [
    "WORKLOADS", "measure_verify_costs", "predict", "recommend", "settings_for", "summarize_runs",
]


# -- the report --------------------------------------------------------------------------------------------


def _f(x: float | None, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def format_result(result: TuneResult, models_dir: Path | None = None) -> str:
    """The tune report: the verify cost of every variant, the thread split, the workloads' tok/s (measured
    and predicted, × the source's baseline) and the recommendation per workload with its config lines."""
    lines = [f"specchat models tune: {result.source}, threads {result.threads}, drafter {result.drafter}", ""]
    ks = [k for k in SHOWN_K if any(str(k) in v.v for v in result.variants)]
    w = max([14, *(len(v.label) for v in result.variants)])  # "Q4_1 repack-off fa-off" is longer than "Q4_1"
    head = f"  {'variant':<{w}} {'1 row':>8} " + " ".join(f"{'v(' + str(k) + ')':>6}" for k in ks) + "  file"
    lines += ["Verify cost: v(K) = t(K+1 rows) / t(1 row), the engine's fit of the interleaved timings", head]
    for v in result.variants:
        lines.append(
            f"  {v.label:<{w}} {_f(v.t1_ms, '.1f') + ' ms':>8} " + " ".join(f"{_f(v.v.get(str(k)), '.2f'):>6}" for k in ks)
            + f"  {v.file} ({v.note})"
        )
    lines += [f"  {v.reason}" for v in result.variants if v.reason]
    split = [v for v in result.variants if v.split_gain is not None]
    if split and result.split_threads_batch:
        gains = ", ".join(f"{v.label} {v.split_gain:+.0%}" for v in split)
        verdict = (f"it pays: set threads_batch = {result.split_threads_batch} - as long as nothing else keeps these "
                   f"cores busy (then its OpenMP threads collapse: README, 'Measuring on a shared machine')"
                   if result.split_recommended
                   else f"it does not pay here (needs {SPLIT_GAIN:.0%}): leave threads_batch unset")
        lines += ["", f"Thread split: a 17-row verify batch on {result.split_threads_batch} threads instead of "
                      f"{result.threads} (single rows stay on {result.threads}): {gains}; {verdict}"]
    if any(v.modes for v in result.variants):
        lines += ["", "Workloads: median tok/s (× the source's baseline in the same round; predicted from v(K) and the runs' acceptance)"]
        if result.interleave == "rounds":
            lines.append("  each format's auto-K run and its plain run interleaved round by round on two copies of the "
                         "file, twice with the copies swapped (tok/s: their geometric mean)")
        elif result.interleave == "replies":
            lines.append("  each format's auto-K run right after its plain run (one reply after the other)")
        for workload in WORKLOADS:
            lines.append(f"  {workload}:")
            for v in result.variants:
                ms = v.modes.get(workload, {})
                cells = []
                for name in ("plain", "auto"):
                    m = ms.get(name)
                    if m is None:
                        continue
                    acc = f", α {m.alpha:.2f}, mean K {m.mean_k:.1f}" if name == "auto" and m.alpha is not None else ""
                    cells.append(f"{name} {_f(m.tok_s, '.1f')} tok/s ({_f(m.x_source, '.2f')}×; predicted "
                                 f"{_f(m.predicted_tok_s, '.1f')}{acc})")
                if cells:
                    lines.append(f"    {v.label:<{w}} " + "; ".join(cells))
    if result.choices:
        lines += ["", "Recommended:"]
        for c in result.choices:
            v = result.variant(c.label)
            what = "speculation off" if c.mode == "plain" else f"{result.drafter} drafts with auto-K"
            lines.append(f"  {c.workload}: {c.label}, {what}: {c.tok_s:.1f} tok/s"
                         f"{f' ({c.x_source:.2f}× the source baseline)' if c.x_source else ''} - {c.why}")
            lines.append(f"    {settings_for(c, v, result.drafter, models_dir)}"
                         + ("  [re-quantised: changes the model's output]" if v.lossy else ""))
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
