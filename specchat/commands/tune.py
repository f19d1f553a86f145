"""``specchat models tune [MODEL]``: check the arguments, derive and load the variants, measure, recommend,
save and print (the measurement protocol is :mod:`specchat.bench.tune`; the arguments are declared with the
other ``models`` actions in :mod:`specchat.commands.models`). Ctrl-C stops it: nothing is saved, exit 130."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import asdict
from typing import Any

from specchat.commands.arguments import location_overrides
from specchat.errors import UserError


def _check(args: argparse.Namespace) -> None:
    """Everything checkable before a model is touched: one line, exit 2."""
    for flag, value in (("--runs", args.runs), ("--n-predict", args.n_predict), ("--reps", args.reps)):
        if value is None or value < 1:
            raise UserError(f"{flag} {value} must be a positive number")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads} must be at least 1")
    if getattr(args, "plot", None):
        from specchat.bench.chart import check_chart_path

        check_chart_path(args.plot)


def run_tune(args: argparse.Namespace) -> int:
    _check(args)
    from specchat.models.formats import DEFAULT_FORMATS, changes_output, parse_flash_attn, parse_formats, parse_repack

    asked = parse_formats(args.formats) if args.formats is not None else None
    flash_attn = parse_flash_attn(getattr(args, "flash_attn", None) or "auto")
    repack = parse_repack(args.repack if getattr(args, "repack", None) is not None else "auto")
    from specchat.config import load_settings

    overrides: dict[str, Any] = location_overrides(args)
    overrides.update({"threads": args.threads, "n_predict": args.n_predict})
    settings = load_settings(getattr(args, "config", None), overrides)
    data_dir = settings.effective_data_dir()
    from specchat.engine.gguf import read_gguf_info
    from specchat.models.registry import models_dir, resolve_model

    source = resolve_model(args.model or settings.target, data_dir)
    src_fmt = read_gguf_info(source).quantization  # one line if missing / not GGUF / truncated
    formats = asked if asked is not None else [f for f in DEFAULT_FORMATS if not changes_output(f, src_fmt)]
    allow_lossy = any(changes_output(f, src_fmt) for f in formats)

    from specchat.bench.progress import ProgressLine

    show = not args.no_progress and (args.progress or _isatty(sys.stderr))
    progress = ProgressLine(sys.stderr, enabled=show)
    sessions: dict[str, Any] = {}
    copies: dict[str, Any] = {}  # second copies for the runs' pairs (specchat.bench.lockstep)
    try:
        result = _tune(settings, source, formats, allow_lossy, args, progress, sessions, flash_attn, repack, copies)
    except KeyboardInterrupt:
        progress.close()
        print("specchat: interrupted: nothing saved", file=sys.stderr)
        return 130
    finally:
        progress.close()
        for session in [*sessions.values(), *copies.values()]:
            session.close()
    from specchat.bench.tune import format_result
    from specchat.models.tune_results import save_result

    path = save_result(data_dir, result)
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(format_result(result, models_dir(data_dir)))
        print(f"\nsaved to {path}; 'specchat models list' shows it")
    if getattr(args, "plot", None):
        from specchat.bench.chart import check_chart_path, verify_cost_chart

        caption = f"specchat models tune: {result.source}, threads {result.threads}; CPU {result.cpu}"
        chart = verify_cost_chart(check_chart_path(args.plot), [(v.label, v.v) for v in result.variants], caption)
        print(f"wrote the chart to {chart}", file=sys.stderr)
    return 0


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _variant_results(variants: list[Any], costs: dict[str, Any], sessions: dict[str, Any]) -> list[Any]:
    """A :class:`~specchat.bench.tune.VariantResult` per weight format, from its measured verify costs."""
    from specchat.bench import tune as tn

    results: list[tn.VariantResult] = []
    for v in variants:
        cm = costs[v.label]["cost"]
        sp = costs[v.label]["split"]
        target = sessions[v.label].decoder.target
        gain = None
        if sp is not None and cm.target_ms() and sp.target_ms():
            gain = 1.0 - (sp.v(16) * sp.target_ms()) / (cm.v(16) * cm.target_ms())
        results.append(tn.VariantResult(
            label=v.label, file=v.path.name, path=str(v.path), weights=v.weights, repack=v.repack, source=v.source,
            flash_attn=v.flash_attn, lossy=v.lossy, one_row=v.one_row, note=v.note, t1_ms=cm.target_ms(), v=tn._v_at(cm),
            reason=cm.verify.curve(v.weights, "measured", row_by_row=target.row_by_row).reason,
            split_v=tn._v_at(sp) if sp is not None else None, split_gain=gain,
        ))
    return results


def _predict_modes(
    results: list[Any], records: list[dict[str, Any]], costs: dict[str, Any], speculates: bool, labels: list[str]
) -> None:
    """Fill each result's modes per workload (plain, and auto-K where it speculates) with the measured runs
    and the tok/s the cost model predicts from them."""
    from specchat.bench import tune as tn

    modes = tn.summarize_runs(records, labels)
    for r in results:
        cm = costs[r.label]["cost"]
        r.modes = modes.get(r.label, {})
        for workload, prompt in tn.WORKLOADS.items():
            ms = r.modes.setdefault(workload, {})
            ms.setdefault("plain", tn.Mode())
            if speculates and not r.one_row:
                ms.setdefault("auto", tn.Mode())
            auto = [rec for rec in records if rec["target"] == r.label and rec["prompt"] == prompt and rec["mode"] == "auto"]
            rounds = [x for rec in auto for x in rec.get("round_log") or []]
            drafted = sum(rec["draft_n"] for rec in auto)
            draft_ms = sum(rec["draft_ms"] for rec in auto)
            c = draft_ms / drafted / cm.target_ms() if drafted and cm.target_ms() else 0.0
            for name, m in ms.items():
                m.predicted_tok_s = tn.predict(m, cm, rounds, plain=name == "plain", c=c)


def _tune(settings: Any, source: Any, formats: list[str], allow_lossy: bool, args: argparse.Namespace,
          progress: Any, sessions: dict[str, Any], flash_attn: list[str], repack: list[str],
          copies: dict[str, Any]) -> Any:
    from specchat.bench.runner import BenchRunner
    from specchat.bench.suite import DEFAULT_SUITE
    from specchat.engine.calibration_cache import CALIBRATION_DIR, CalibrationCache, cpu_identity
    from specchat.engine.drafter_kinds import NONE
    from specchat.engine.model import extra_buffer_types_safe
    from specchat.loading import load_engine
    from specchat.bench import tune as tn
    from specchat.models.formats import variants_for
    from specchat.models.registry import models_dir

    data_dir = settings.effective_data_dir()
    mdir = models_dir(data_dir)
    assert mdir is not None
    say = lambda msg: progress(0, 1, msg)  # noqa: E731
    variants = variants_for(source, formats, mdir, one_row="none" if extra_buffer_types_safe() else "all",
                            threads=settings.threads, progress=say, flash_attn=flash_attn, repack=repack)
    loaded_with: dict[str, Any] = {}
    for v in variants:
        # the files here, on this CPU: a configured llama-server (server_url) has nothing to do with them; "auto"
        # is loaded as "on", llama.cpp's default where it batches safely, which the app's "auto" follows only until
        # a tune (this one's result, next time) measured the file without it faster
        repack = "on" if v.repack == "auto" and extra_buffer_types_safe() else v.repack
        s = settings.model_copy(
            update={"target": str(v.path), "repack": repack, "flash_attn": v.flash_attn, "server_url": None}
        )
        sessions[v.label] = load_engine(s, lambda f, what, label=v.label: progress(int(f * 100), 100, f"loading {label}"),
                                        auto_k=False)
        loaded_with[v.label] = s
    first = next(iter(sessions.values()))
    drafter = first.decoder.drafter_name or NONE
    speculates = drafter != NONE and first.decoder.can_speculate
    cores = os.cpu_count() or 1
    split = cores if settings.threads < cores else None
    prompts = {p["name"]: p["prompt"] for p in DEFAULT_SUITE}
    cache = CalibrationCache(data_dir / CALIBRATION_DIR)
    costs = tn.measure_verify_costs(sessions, prompts["prose"], reps=args.reps, split_threads_batch=split,
                                    progress=progress, cache=cache)
    results = _variant_results(variants, costs, sessions)
    notes: list[str] = []
    if not speculates:
        notes.append(f"drafter {drafter!r}: only plain decoding was measured; configure draft = \"ngram\" to tune for speculation")
    records: list[dict[str, Any]] = []
    if not args.no_runs:
        suite = [{"name": p, "prompt": prompts[p]} for p in tn.WORKLOADS.values()]
        if speculates and (getattr(args, "interleave", None) or "rounds") == "rounds":
            # each format's auto-K run and its plain run as one pair, round by round on two copies (as `bench`)
            from specchat.bench.lockstep import load_copies

            copies.update(load_copies({v.label: (sessions[v.label], loaded_with[v.label])
                                       for v in variants if not v.one_row}, progress, sys.stderr))
        runner = BenchRunner(
            sessions, suite, [0], args.runs, auto=speculates, progress=progress,
            reference=next(v.label for v in variants if v.source), baseline_only=[v.label for v in variants if v.one_row],
            twins=copies,
        )
        records = runner.run()
        if runner.interrupted:
            raise KeyboardInterrupt
    _predict_modes(results, records, costs, speculates, [v.label for v in variants])
    choices = [c for w in tn.WORKLOADS if (c := tn.recommend(results, w, allow_lossy=allow_lossy)) is not None]
    if args.no_runs and speculates:
        # without runs the drafter's acceptance is unknown: only plain decoding can be compared
        choices = [c for c in choices if c.workload == "plain chat"]
        notes.append("--no-runs: the drafter's acceptance is unknown, so only plain chat is recommended "
                     "(from the one-row times); run without --no-runs for copy-heavy")
    gains = [r.split_gain for r in results if r.split_gain is not None]
    return tn.TuneResult(
        source=source.name, source_path=str(source), threads=settings.threads, split_threads_batch=split,
        drafter=drafter, cpu=cpu_identity(), measured_at=tn.now(), variants=results, choices=choices,
        split_recommended=bool(gains) and statistics.median(gains) >= tn.SPLIT_GAIN, notes=notes,
        interleave=("rounds" if copies else "replies") if records and speculates else "",
    )


__all__ = ["run_tune"]
