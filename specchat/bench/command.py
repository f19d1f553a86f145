"""The ``specchat bench`` command: check the arguments, load the pair, calibrate, run the plan, print and
write the report. Ctrl-C stops the runs: what was measured is summarised, printed and written to
``--json``; exit 130. (Its arguments are declared in :mod:`specchat.commands.bench`.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from specchat.bench.arithmetic import Calibration, arithmetic, calibrate_by_depth, exchange, speed_cap
from specchat.bench.progress import ProgressLine
from specchat.bench.report import (
    build_report,
    format_arithmetic,
    format_drafters,
    format_exchange,
    format_formats,
    format_plot,
    format_table,
    format_verdicts,
    noise_warnings,
    write_json,
)
from specchat.bench.runner import BenchRunner
from specchat.bench.history_suite import DEFAULT_EARLIER, HISTORY_SUITE, earlier_tasks
from specchat.bench.suite import load_suite
from specchat.bench.remote import BenchServer, ab_plan, ab_ratios, format_ratios, remote_plan, run_ab, run_remote_once
from specchat.bench.summary import auto_verdicts, summarize
from specchat.engine.drafter_kinds import K_MAX, NGRAM, SUFFIX, chain_links
from specchat.errors import UserError
from specchat.models.formats import parse_flash_attn, parse_formats

DEFAULT_KS = "0,1,2,3,5,8"
#: the bench's flags that choose local models or K (a llama-server has its own), with their dests
LOCAL_ONLY_FLAGS = (("--target", "target"), ("--draft", "draft"), ("--k", "k"), ("--auto", "auto"),
                    ("--threads", "threads"), ("--n-ctx", "n_ctx"), ("--formats", "formats"),
                    ("--flash-attn", "flash_attn"), ("--interleave", "interleave"))
DEFAULT_N_PREDICT = 256


def parse_k_list(text: str) -> list[int]:
    """``"0,1,3"`` -> [0, 1, 3] (sorted, unique); every K in 0..K_MAX."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        ks = [int(p) for p in parts if p]
    except ValueError:
        raise UserError(f"--k {text!r} is not a comma-separated list of integers: use e.g. --k 0,1,3,5") from None
    if not ks:
        raise UserError("--k is empty: give draft lengths, e.g. --k 0,1,3,5")
    bad = [k for k in ks if not 0 <= k <= K_MAX]
    if bad:
        raise UserError(f"--k {text}: {bad[0]} is out of range; every K must be 0..{K_MAX} (0 = baseline)")
    return sorted(set(ks))


def settings_overrides(args: Any) -> dict[str, Any]:
    o: dict[str, Any] = {}
    if getattr(args, "server", None) is not None:
        o["server_url"] = args.server
    if getattr(args, "server_b", None) is not None:
        o["server_b_url"] = args.server_b
    for flag in ("target", "draft", "threads", "n_ctx", "data_dir"):  # data_dir: specchat --data-dir D bench
        v = getattr(args, flag, None)
        if v is not None:
            o[flag] = v
    o["n_predict"] = args.n_predict if args.n_predict is not None else DEFAULT_N_PREDICT
    sampling = {}
    if getattr(args, "temperature", None) is not None:
        sampling["temperature"] = args.temperature
    if getattr(args, "seed", None) is not None:
        sampling["seed"] = args.seed
    if sampling:
        o["sampling"] = sampling
    return o


def validate_args(args: Any) -> tuple[list[int], list[dict[str, str]]]:
    """Everything checkable before loading a model; raises UserError (one line, exit 2)."""
    ks = parse_k_list(args.k if args.k is not None else DEFAULT_KS)
    if args.runs is None or args.runs <= 0:
        raise UserError(f"--runs {args.runs} must be a positive number of runs per (prompt, K)")
    if args.n_predict is not None and args.n_predict <= 0:
        raise UserError(f"--n-predict {args.n_predict} must be a positive number of tokens")
    if getattr(args, "threads", None) is not None and args.threads <= 0:
        raise UserError(f"--threads {args.threads} must be at least 1")
    if getattr(args, "temperature", None) is not None and not (0.0 <= args.temperature <= 5.0):
        raise UserError(f"--temperature {args.temperature} must be in 0..5 (0 = greedy)")
    suite = load_suite(args.suite)
    if args.suite == HISTORY_SUITE:
        earlier_tasks(getattr(args, "history_size", DEFAULT_EARLIER))  # its range, before anything loads
        for flag, dest in (("--server", "server"), ("--server-b", "server_b"), ("--formats", "formats"),
                           ("--flash-attn", "flash_attn"), ("--interleave", "interleave")):
            if getattr(args, dest, None):
                raise UserError(f"--suite {HISTORY_SUITE} measures local drafters on a history of their own: "
                                f"{flag} does not go with it; drop {flag}")
    elif getattr(args, "history_size", DEFAULT_EARLIER) != DEFAULT_EARLIER:
        raise UserError(f"--history-size is for --suite {HISTORY_SUITE}: drop it, or add --suite {HISTORY_SUITE}")
    if args.json:
        parent = Path(args.json).expanduser().parent
        if not parent.is_dir():
            raise UserError(f"--json {args.json}: directory {parent} does not exist; create it or choose another path")
    if isinstance(getattr(args, "plot", None), str):
        from specchat.bench.chart import check_chart_path

        check_chart_path(args.plot)
    if not any(k > 0 for k in ks) and not args.auto and not args.no_arithmetic:
        pass  # baseline-only is allowed: it measures the target alone
    return ks, suite


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def load_targets(
    settings: Any, formats: list[str] | None, progress: ProgressLine, flash_attn: list[str] | None = None
) -> dict[str, tuple[Any, Any]]:
    """``{label: (session, variant)}``: the configured pair alone (variant None), or with ``formats`` the
    target's re-encodings (:func:`specchat.models.formats.variants_for`: derived when missing; the source's
    one-row-kernel variant on a CPU whose AMX batch kernels crash), each loaded with the configured drafter;
    with ``flash_attn`` every one of them with each of those settings too."""
    from specchat.loading import load_engine

    def load(s: Any, what: str) -> Any:
        return load_engine(s, lambda f, w: progress(int(f * 100), 100, f"{what}: {w}" if what else w), auto_k=False)

    if not formats and not flash_attn:
        return {"": (load(settings, ""), None)}
    from specchat.engine.model import extra_buffer_types_safe
    from specchat.models.formats import variants_for
    from specchat.models.registry import models_dir, resolve_model

    data_dir = settings.effective_data_dir()
    source = resolve_model(settings.target, data_dir)
    mdir = models_dir(data_dir)
    assert mdir is not None
    variants = variants_for(
        source, formats or [], mdir, one_row="none" if extra_buffer_types_safe() else "source", threads=settings.threads,
        progress=lambda msg: progress(0, 1, msg), flash_attn=flash_attn or [settings.flash_attn],
    )
    out: dict[str, tuple[Any, Any]] = {}
    try:
        for v in variants:
            out[v.label] = (load(target_settings(settings, v), v.label), v)
    except BaseException:
        for session, _ in out.values():
            session.close()
        raise
    return out


def target_settings(settings: Any, variant: Any) -> Any:
    """The settings a target of :func:`load_targets` was loaded with: ``settings``, or a variant's file, repack and
    flash attention on top of them."""
    if variant is None:
        return settings
    return settings.model_copy(update={"target": str(variant.path), "repack": variant.repack, "flash_attn": variant.flash_attn})


def load_twins(
    args: Any, settings: Any, targets: dict[str, tuple[Any, Any]], progress: ProgressLine, err: TextIO,
) -> dict[str, Any]:
    """``--interleave rounds`` (the default): a second copy of every target that drafts, for the round-by-round
    pairs of :mod:`specchat.bench.lockstep` (:func:`~specchat.bench.lockstep.load_copies`); ``{}`` with
    ``--interleave replies``."""
    if (getattr(args, "interleave", None) or "rounds") != "rounds":
        return {}
    from specchat.bench.lockstep import load_copies

    copies = {label: (session, target_settings(settings, variant))
              for label, (session, variant) in targets.items() if variant is None or not variant.one_row}
    return load_copies(copies, progress, err)


def _chart(plot: str, label: str | None, rows: Any, arith: Any, meta: dict[str, Any]) -> Path:
    """``--plot FILE``: the speedup chart of one target (with several, FILE-<label>.svg each), captioned with the
    target, drafter, threads and this CPU."""
    from specchat.bench.chart import check_chart_path, speedup_chart
    from specchat.engine.build import engine_build, this_cpu

    path = check_chart_path(plot)
    if label:
        path = path.with_name(f"{path.stem}-{label.replace(' ', '_')}{path.suffix}")
    caption = (f"specchat bench: {label or meta.get('target', '?')} + {meta.get('drafter', '?')}, threads "
               f"{meta.get('threads', '?')}, {meta.get('n_predict', '?')} tokens, medians of interleaved pairs; "
               f"CPU {this_cpu()}; {engine_build()}")
    return speedup_chart(path, rows, arith, caption)


def main(
    args: Any,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    *,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """``specchat bench``; returns the exit code (0, or 130 after Ctrl-C with the partial report)."""
    ks, suite = validate_args(args)
    formats = parse_formats(args.formats) if getattr(args, "formats", None) else None
    flash_attn = parse_flash_attn(args.flash_attn) if getattr(args, "flash_attn", None) else None
    from specchat.config import load_settings, refuse_local_flags, server_pair

    settings = load_settings(getattr(args, "config", None), settings_overrides(args))
    if settings.server_url:
        refuse_local_flags(args, settings.server_url, LOCAL_ONLY_FLAGS)
    show = not getattr(args, "no_progress", False) and (getattr(args, "progress", False) or _isatty(err))
    progress = ProgressLine(err, enabled=show)
    if getattr(args, "suite", None) == HISTORY_SUITE:
        return _main_history(args, ks, suite, settings, progress, out, err, on_record)
    try:
        targets, session_b = _load_sessions(settings, bool(server_pair(settings)), formats, flash_attn, progress)
    except KeyboardInterrupt:
        progress.close()
        print("specchat: interrupted while loading; nothing measured", file=err)
        return 130
    finally:
        progress.close()
    if session_b is not None:
        ((session, _),) = targets.values()
        return _main_servers(args, session, session_b, suite, settings, progress, out, err, on_record)
    if settings.server_url:
        ((session, _),) = targets.values()
        return _main_remote(args, session, suite, settings, progress, out, err, on_record)
    return _main_local(args, targets, ks, suite, settings, progress, out, err, on_record)


def _main_history(
    args: Any, ks: list[int], suite: list[dict[str, str]], settings: Any, progress: ProgressLine, out: TextIO,
    err: TextIO, on_record: Callable[[dict[str, Any]], None] | None,
) -> int:
    """``--suite history`` (:mod:`specchat.bench.history_suite`): the earlier conversations saved in the bench's own
    data dir first, by the measured session itself (greedy, plain), then the new task measured like any suite - the
    ``suffix`` drafter (or the chain asked for) against ``ngram``, each against plain decoding."""
    from specchat.bench.history_suite import BenchHistory, bench_settings, seed_history

    history = BenchHistory()
    targets: dict[str, tuple[Any, Any]] = {}
    try:
        local = bench_settings(settings, history)
        try:
            targets = load_targets(local, None, progress)
            ((session, _),) = targets.values()
            saved = seed_history(session, history.db_path, earlier_tasks(getattr(args, "history_size", DEFAULT_EARLIER)), progress)
        except BaseException as exc:
            progress.close()
            for s, _v in targets.values():
                s.close()
            if isinstance(exc, KeyboardInterrupt):
                print("specchat: interrupted while saving the earlier conversations; nothing measured", file=err)
                return 130
            raise
        progress.close()
        print(f"history: {saved} earlier conversation(s) of the same kind of task saved in the bench's own data dir "
              f"(greedy replies of the target itself); the measured tasks are not among them", file=out)
        return _main_local(args, targets, ks, suite, local, progress, out, err, on_record)
    finally:
        history.close()


def _load_sessions(
    settings: Any, two_servers: bool, formats: list[str] | None, flash_attn: list[str] | None, progress: ProgressLine
) -> tuple[dict[str, tuple[Any, Any]], Any]:
    """The targets (:func:`load_targets`) and, with ``--server-b``, server B's session (else None); a failure
    to reach server A says so when there are two."""
    from specchat.engine.llama_server import ServerError
    from specchat.loading import connect_server_b

    try:
        targets = load_targets(settings, formats, progress, flash_attn)
    except ServerError as exc:
        if two_servers:
            raise ServerError(f"server A: {exc}") from None
        raise
    if not two_servers:
        return targets, None
    try:
        return targets, connect_server_b(settings, lambda f, what: progress(int(f * 100), 100, what))
    except BaseException:
        for session, _ in targets.values():
            session.close()
        raise


def _main_local(
    args: Any, targets: dict[str, tuple[Any, Any]], ks: list[int], suite: list[dict[str, str]], settings: Any,
    progress: ProgressLine, out: TextIO, err: TextIO, on_record: Callable[[dict[str, Any]], None] | None,
) -> int:
    """``specchat bench`` on local models: each K (and auto) against the adjacent baseline, per weight format."""
    sessions = {label: session for label, (session, _v) in targets.items()}
    variants = {label: v for label, (_s, v) in targets.items() if v is not None}
    compared = compared_drafters(sessions) if not variants else []
    if compared:  # one session under each drafter's name: suffix against ngram, side by side
        sessions = dict.fromkeys(compared, next(iter(sessions.values())))
    reference = next((label for label, v in variants.items() if v.source), None)
    interrupted = False
    twins: dict[str, Any] = {}
    try:
        first = next(iter(sessions.values()))
        dec = first.decoder
        if (any(k > 0 for k in ks) or args.auto) and (dec.drafter is None or not dec.can_speculate):
            why = "the target cannot roll back its KV (recurrent/hybrid)" if not dec.can_speculate else "no drafter is configured"
            raise UserError(f"cannot bench speculation: {why}; use --draft {NGRAM} or a draft .gguf, or --k 0 for the baseline alone")
        meta = _local_meta(dec, ks, args, settings, suite, variants)
        many = len(sessions) > 1
        _print_local_header(out, dec, ks, args, settings, variants if many else {}, reference)
        if compared:
            print(f"drafters compared: {' against '.join(compared)}, each run paired with its own baseline", file=out)
            meta["compared"] = compared
        cals: dict[str, Calibration] = {}
        at_depth: dict[str, dict[str, Calibration]] = {}
        if not args.no_arithmetic and dec.can_speculate:  # v(K) needs KV trimming
            interrupted = _calibrate_all(sessions, suite, progress, many, cals, at_depth)
        records: list[dict[str, Any]] = []
        if not interrupted and (any(k > 0 for k in ks) or args.auto):
            try:
                loaded = load_twins(args, settings, targets, progress, err)
            except KeyboardInterrupt:
                interrupted, loaded = True, {}
            twins = {label: loaded[key] for label, key in _twin_keys(sessions, targets).items() if key in loaded}
        meta["interleave"] = "rounds" if twins else "replies"
        if twins:
            print("pairs: interleaved round by round on two copies of each target, each pair twice with the copies "
                  "swapped (tok/s: the geometric mean over the copies)", file=out)
        elif not interrupted and (any(k > 0 for k in ks) or args.auto):
            print("pairs: one reply after the other (A B A B ...)", file=out)
        if not interrupted:
            runner = BenchRunner(
                sessions if many else first, suite, ks, args.runs, auto=bool(args.auto), progress=progress,
                on_record=on_record, reference=reference,
                baseline_only=[label for label, v in variants.items() if v.one_row],
                drafters={name: name for name in compared}, twins=twins,
            )
            records = runner.run()
            interrupted = runner.interrupted
        progress.close()
        rows = summarize(records)
        ariths = {label: arithmetic(cal, [r for r in rows if r.target == label], at_depth.get(label))
                  for label, cal in cals.items()}
        if interrupted:
            print(f"interrupted: {len(records)} run(s) measured so far", file=out)
        _print_local_results(out, err, list(sessions), rows, ariths, at_depth, variants if many else {}, args.plot,
                             reference, meta, dec.target.name, records)
        if compared and rows:
            print(format_drafters(rows, compared), file=out)
            rates = format_exchange(rows, compared, _exchanges(rows, at_depth))
            if rates:
                print(rates, file=out)
        if args.json:
            arith: Any = ariths.get("") if not many else ariths
            write_json(args.json, build_report(meta=meta, records=records, rows=rows, arith=arith, interrupted=interrupted))
            print(f"\nwrote {len(records)} record(s) to {args.json}", file=err)
        out.flush()
    finally:
        progress.close()
        for session in {id(s): s for s in [*sessions.values(), *twins.values()]}.values():
            session.close()
    return 130 if interrupted else 0


def _twin_keys(sessions: dict[str, Any], targets: dict[str, tuple[Any, Any]]) -> dict[str, str]:
    """Which loaded target's copy each runner label uses: its own, or - the drafters compared on one session under
    several labels - that session's."""
    by_id = {id(session): label for label, (session, _v) in targets.items()}
    return {label: by_id[id(session)] for label, session in sessions.items() if id(session) in by_id}


def compared_drafters(sessions: dict[str, Any]) -> list[str]:
    """The drafters a local bench of one session compares: the configured ``suffix`` drafter or drafter chain, then
    ``ngram`` (loaded beside every drafter), issue 23's "suffix against ngram and plain decoding"; [] otherwise."""
    if len(sessions) != 1:
        return []
    dec = next(iter(sessions.values())).decoder
    name = dec.drafter_name
    if (name == SUFFIX or chain_links(name)) and NGRAM in dec.drafters:
        return [name, NGRAM]
    return []


def _local_meta(
    dec: Any, ks: list[int], args: Any, settings: Any, suite: list[dict[str, str]], variants: dict[str, Any]
) -> dict[str, Any]:
    """The ``--json`` report's ``meta`` for a local bench: what ran, how, on which weight formats."""
    return {
        "target": dec.target.name,
        "drafter": dec.drafter_name,
        "ks": ks,
        "auto": bool(args.auto),
        "runs": args.runs,
        "n_predict": settings.n_predict,
        "temperature": settings.sampling.temperature,
        "seed": settings.sampling.seed,
        "threads": settings.threads,
        "threads_batch": settings.threads_batch,
        "n_ctx": settings.n_ctx,
        "suite": [p["name"] for p in suite],
        "formats": [
            {"label": label, "file": v.path.name, "weights": v.weights, "repack": v.repack, "source": v.source,
             "flash_attn": v.flash_attn, "lossy": v.lossy, "one_row": v.one_row, "note": v.note}
            for label, v in variants.items()
        ],
    }


def _print_local_header(
    out: TextIO, dec: Any, ks: list[int], args: Any, settings: Any, many: dict[str, Any], reference: str | None
) -> None:
    """What the bench will run; ``many``: the weight formats, when there is more than one."""
    print(
        f"specchat bench: target {dec.target.name}, drafter {dec.drafter_name}, K {','.join(map(str, ks))}"
        f"{' + auto' if args.auto else ''}; {args.runs} run(s) per (prompt, K), each paired with a baseline run; "
        f"n_predict {settings.n_predict}, T = {settings.sampling.temperature:g}, "
        f"threads {settings.threads}",
        file=out,
    )
    if many:
        print(f"formats: {', '.join(f'{label} ({v.path.name}; {v.note})' for label, v in many.items())}; "
              f"every round opens with one {reference} baseline run, the unit of '× {reference}'", file=out)
    out.flush()


def _calibrate_all(
    sessions: dict[str, Any], suite: list[dict[str, str]], progress: ProgressLine, many: bool,
    cals: dict[str, Calibration], at_depth: dict[str, dict[str, Calibration]],
) -> bool:
    """Measure v(K) for each target into ``cals`` (at the first prompt's depth) and ``at_depth`` (every prompt's
    calibration at its own depth bucket, :func:`calibrate_by_depth`); True if Ctrl-C stopped it (what was measured
    is kept)."""
    try:
        done: dict[int, dict[str, Calibration]] = {}  # one session under several drafters' names is timed once
        for label, session in sessions.items():
            prog = progress if not many else (lambda i, n, what, label=label: progress(i, n, f"{label} {what}"))
            if id(session) not in done:
                done[id(session)] = calibrate_by_depth(session, suite, progress=prog)
            at_depth[label] = done[id(session)]
            cals[label] = done[id(session)][suite[0]["name"]]
    except KeyboardInterrupt:
        return True
    return False


def _print_local_results(
    out: TextIO, err: TextIO, labels: list[str], rows: list[Any], ariths: dict[str, Any],
    at_depth: dict[str, dict[str, Calibration]],
    many: dict[str, Any], plot: bool | str | None, reference: str | None, meta: dict[str, Any], target: str,
    records: Sequence[dict[str, Any]] = (),
) -> None:
    """Per target: its table, noise warnings, auto-K's verdict against the best choice (from ``records``),
    arithmetic and plot (``--plot``: in the terminal; ``--plot FILE``: a chart per target, :func:`_chart`); with
    ``many`` formats, the comparison (with each target's free-drafter speed cap per prompt, from its calibration at
    that prompt's depth)."""
    for label in labels:
        mine = [r for r in rows if r.target == label]
        if many:
            v = many[label]
            print(f"\n== {label}: {v.path.name} ({v.note}) ==", file=out)
        elif len(labels) > 1:  # the drafters compared on one target
            print(f"\n== drafter {label} ==", file=out)
        if mine:
            print("", file=out)
            print(format_table(mine), file=out)
            print("speedup = median over pairs of (speculative tok/s / the adjacent baseline's tok/s)", file=out)
            for w in noise_warnings(mine):
                print(w, file=out)
            verdicts = format_verdicts([v for v in auto_verdicts(records) if v.target == label])
            if verdicts:
                print(verdicts, file=out)
        if label in ariths:
            print(format_arithmetic(ariths[label]), file=out)
        if plot is True and mine:
            print(format_plot(mine), file=out)
        if isinstance(plot, str) and mine:
            chart = _chart(plot, label if many else None, mine, ariths.get(label), meta)
            print(f"wrote the chart of {label or target} to {chart}", file=err)
    if many and rows and reference is not None:
        caps = {
            (prompt, label): cap
            for prompt in dict.fromkeys(r.prompt for r in rows) for label, by_prompt in at_depth.items()
            if prompt in by_prompt
            and (cap := speed_cap([r for r in rows if r.target == label and r.prompt == prompt],
                                  by_prompt[prompt].cost_model.verify.table())) is not None
        }
        print(format_formats(rows, labels, reference, caps), file=out)


def _exchanges(rows: Sequence[Any], at_depth: dict[str, dict[str, Calibration]]) -> dict[tuple[str, str, str, int | None], Any]:
    """Each drafter's rounds per (drafter, prompt, mode, K), priced at its calibration at that prompt's depth
    (:func:`~specchat.bench.arithmetic.exchange`); nothing without a calibration (``--no-arithmetic``)."""
    out: dict[tuple[str, str, str, int | None], Any] = {}
    for r in rows:
        cal = at_depth.get(r.target, {}).get(r.prompt)
        if r.mode != "baseline" and cal is not None:
            ex = exchange(r, cal.cost_model.verify.table(), cal.target_ms)
            if ex is not None:
                out[(r.target, r.prompt, r.mode, r.k)] = ex
    return out


def _main_remote(
    args: Any, session: Any, suite: list[dict[str, str]], settings: Any, progress: ProgressLine,
    out: TextIO, err: TextIO, on_record: Callable[[dict[str, Any]], None] | None,
) -> int:
    """``specchat bench --server URL`` (see :mod:`specchat.bench.remote`): the server's one configuration."""
    try:
        info, k = _prepare_server(session, suite, progress)
        plan = remote_plan(suite, args.runs, k)
        meta = _server_meta(info, k, args, settings, suite)
        print(
            f"specchat bench: llama-server {info.target_name}, drafter {info.draft_name}, its K {k or 'none'}; "
            f"{args.runs} run(s) per prompt, the server's one configuration (no baseline pairs: its speculation "
            f"is set by its own flags); n_predict {settings.n_predict}, T = {settings.sampling.temperature:g}",
            file=out,
        )
        out.flush()
        runner = BenchRunner(
            session, suite, [k], args.runs, progress=progress, on_record=on_record, run_fn=run_remote_once,
            plan=plan, drafter=info.draft_name,
        )
        records = runner.run()
        progress.close()
        rows = summarize(records)
        if runner.interrupted:
            print(f"interrupted: {len(records)} run(s) measured so far", file=out)
        if rows:
            print("", file=out)
            print(format_table(rows), file=out)
            for w in noise_warnings(rows):
                print(w, file=out)
        if args.plot is True and rows:
            print(format_plot(rows), file=out)
        if isinstance(args.plot, str) and rows:
            print(f"wrote the chart to {_chart(args.plot, None, rows, None, meta)}", file=err)
        if args.json:
            write_json(args.json, build_report(meta=meta, records=records, rows=rows, arith=None, interrupted=runner.interrupted))
            print(f"\nwrote {len(records)} record(s) to {args.json}", file=err)
        out.flush()
        return 130 if runner.interrupted else 0
    finally:
        progress.close()
        session.close()


def _prepare_server(session: Any, suite: list[dict[str, str]], progress: ProgressLine, name: str = "") -> tuple[Any, int]:
    """Prompt cache off (every run decodes its prompt in full); the server's K, learned by one unrecorded
    warm-up reply if /metrics does not list it yet. Returns (its EngineInfo, its K or 0)."""
    session.cache_prompt = False
    info = session.info()
    if info.can_speculate and not session.controls.snapshot().k:
        # the server's K shows in /metrics once it has speculated: one unrecorded warm-up reply
        progress(0, 1, f"warm-up reply (learns {'server ' + name if name else 'the server'}'s K)")
        run_remote_once(session, suite[0]["prompt"], "spec", None)
        info = session.info()
    return info, (session.controls.snapshot().k if info.can_speculate else 0)


def _server_meta(info: Any, k: int, args: Any, settings: Any, suite: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "target": info.target_name,
        "drafter": info.draft_name,
        "ks": [k],
        "auto": False,
        "runs": args.runs,
        "n_predict": settings.n_predict,
        "temperature": settings.sampling.temperature,
        "seed": settings.sampling.seed,
        "threads": None,  # the server's own
        "n_ctx": info.n_ctx,
        "suite": [p["name"] for p in suite],
    }


def _main_servers(
    args: Any, a: Any, b: Any, suite: list[dict[str, str]], settings: Any, progress: ProgressLine,
    out: TextIO, err: TextIO, on_record: Callable[[dict[str, Any]], None] | None,
) -> int:
    """``specchat bench --server A --server-b B`` (see :mod:`specchat.bench.remote`): both servers on the suite,
    interleaved by prompt; a table per server, the ratio B / A; ``--json``: {"a": report, "b": report, "ratio"}."""
    try:
        sides = []
        for name, session in (("A", a), ("B", b)):
            info, k = _prepare_server(session, suite, progress, name)
            sides.append((BenchServer(name, session, k, info.draft_name), info))
        (sa, info_a), (sb, info_b) = sides
        def spec(side: BenchServer, info: Any) -> str:
            return f"drafter {info.draft_name}, its K {side.k}" if side.k else "no speculation"

        print(
            f"specchat bench: server A {info_a.target_name} ({spec(sa, info_a)}) vs server B {info_b.target_name} "
            f"({spec(sb, info_b)}); {args.runs} run(s) per prompt on each, interleaved A B A B; n_predict "
            f"{settings.n_predict}, T = {settings.sampling.temperature:g}",
            file=out,
        )
        out.flush()
        records, interrupted = run_ab(ab_plan(suite, args.runs, sa, sb), {p["name"]: p["prompt"] for p in suite},
                                      progress=progress, on_record=on_record)
        progress.close()
        ratios = ab_ratios(records["A"], records["B"])
        if interrupted:
            print(f"interrupted: {len(records['A']) + len(records['B'])} run(s) measured so far", file=out)
        reports = {}
        for side, info in sides:
            rows = summarize(records[side.name])
            meta = {"server": side.session.server.url, **_server_meta(info, side.k, args, settings, suite)}
            reports[side.name.lower()] = build_report(meta=meta, records=records[side.name], rows=rows, arith=None,
                                                      interrupted=interrupted)
            if rows:
                print(f"\nserver {side.name}: {info.target_name}", file=out)
                print(format_table(rows), file=out)
                for w in noise_warnings(rows):
                    print(w, file=out)
        print("\n" + format_ratios(ratios), file=out)
        print("B / A = median over pairs of (server B's tok/s / server A's tok/s in the same prompt and run)", file=out)
        if args.json:
            report = {"specchat_bench": 1, "interrupted": interrupted, "a": reports["a"], "b": reports["b"], "ratio": ratios}
            write_json(args.json, report)
            print(f"\nwrote {len(records['A'])} + {len(records['B'])} record(s) to {args.json}", file=err)
        out.flush()
        return 130 if interrupted else 0
    finally:
        progress.close()
        a.close()
        b.close()


__all__ = ["DEFAULT_KS", "DEFAULT_N_PREDICT", "load_targets", "main", "parse_k_list", "settings_overrides", "validate_args"]
