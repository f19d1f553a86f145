"""``specchat models list | derive | tune | pull``: the models a user needs, one command away.

* ``list``   bundled, configured, derived and downloaded models (size, architecture, quantisation, vocabulary,
             blocks, read from GGUF headers without loading llama.cpp), the presets and whether they are on
             disk, and which pairs can serve as target + draft (llama.cpp's vocabulary rules).
* ``derive`` write another quantisation (``--quant``) and/or a layer-skip self-draft (``--keep-layers``) of a
             GGUF into ``<data dir>/models/``; ``--demo`` writes the files of the two offline demo presets.
* ``tune``   measure which weight format of a target verifies cheapest on this machine, and recommend one per
             workload (:mod:`specchat.bench.tune`; the command is in :mod:`specchat.commands.tune`).
* ``pull``   download a hub preset's target and draft into ``<data dir>/models/`` (resumable, verified).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from specchat.commands.arguments import add_interleave_argument, add_location_arguments, location_overrides
from specchat.errors import UserError
from specchat.sanitize import sanitize


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The description and actions of ``specchat models`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    parser.description = "List the models on this machine, derive demo drafts/targets, download hub presets."
    actions = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    p_list = actions.add_parser(
        "list",
        help="models on this machine, presets, and compatible target+draft pairs",
        description="Bundled, configured, derived and downloaded models, the presets, and which pairs can serve "
        "as target + draft. Reads GGUF headers only (llama.cpp is not loaded).",
    )
    add_location_arguments(p_list, data_dir=True)
    p_list.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p_derive = actions.add_parser(
        "derive",
        help="write another quantisation or a layer-skip draft of a GGUF",
        description="Write a derived GGUF into <data dir>/models/: another quantisation through llama.cpp "
        "(--quant) and/or a layer-skip self-draft keeping only some blocks (--keep-layers). "
        "--demo writes the files of the offline demo presets from the bundled model.",
    )
    add_location_arguments(p_derive, data_dir=True)
    p_derive.add_argument("--quant", metavar="TYPE", help="F16, Q8_0, Q4_0, Q4_1, Q5_K_M, ... (llama.cpp file types)")
    p_derive.add_argument("--keep-layers", metavar="RANGES", help="blocks to keep, e.g. 0-5,24-29")
    p_derive.add_argument("--from", dest="source", metavar="MODEL", default="bundled",
                          help="source GGUF: a path, 'bundled' (default) or a name from 'specchat models list'")
    p_derive.add_argument("-o", "--output", metavar="NAME",
                          help="output name in <data dir>/models/ (or a path); default: derived from the source")
    p_derive.add_argument("--demo", action="store_true",
                          help="write the demo presets' files (F16 and Q8_0 targets; layer-skip draft) from the bundled model")
    p_derive.add_argument("--threads", type=int, metavar="N", help="threads for quantising (default: settings.threads)")
    p_derive.add_argument("--force", action="store_true", help="overwrite an existing output file")

    p_tune = actions.add_parser(
        "tune",
        help="measure which weight format verifies cheapest here and recommend one per workload",
        description="Derive the lossless-direction re-encodings of a target (F16, Q8_0; lower-bit formats only "
        "with --formats, flagged as changing the output), measure each one's single-row time and verify cost v(K) "
        "at the configured threads (and with the verify batch on every core), run plain chat and copy-heavy "
        "prompts with the configured drafter and auto-K, and recommend a target per workload. Results are saved "
        "in <data dir>/tune and shown by 'specchat models list'; the timings warm the app's calibration cache.",
    )
    add_location_arguments(p_tune, data_dir=True)
    p_tune.add_argument("model", nargs="?", metavar="MODEL",
                        help="the source GGUF: a path, 'bundled' or a name from 'specchat models list' (default: the configured target)")
    p_tune.add_argument("--formats", metavar="LIST",
                        help="weight formats to measure besides the source (default: F16,Q8_0, those with more bits than it)")
    p_tune.add_argument("--flash-attn", metavar="LIST", dest="flash_attn", default="auto,off",
                        help="flash-attention settings to measure every format with (default: auto,off)")
    p_tune.add_argument("--repack", metavar="LIST", default="auto,off",
                        help="repack settings to measure every batched format with: llama.cpp's repacked weight "
                        "layouts (auto) and without them (off); default: auto,off")
    p_tune.add_argument("--threads", type=int, metavar="N", help="threads for single rows (default: settings.threads)")
    p_tune.add_argument("--runs", type=int, default=2, metavar="N", help="runs per (format, workload, mode); default 2")
    p_tune.add_argument("--n-predict", type=int, dest="n_predict", default=128, metavar="N",
                        help="tokens per run (default 128)")
    p_tune.add_argument("--reps", type=int, default=3, metavar="N",
                        help="interleaved repetitions of the verify-cost timings (default 3)")
    add_interleave_argument(p_tune)
    p_tune.add_argument("--no-runs", action="store_true", dest="no_runs",
                        help="only time the verify cost: recommend from predictions, no generation runs")
    p_tune.add_argument("--json", action="store_true", help="print the saved result as JSON instead of the report")
    p_tune.add_argument("--plot", metavar="FILE",
                        help="also draw v(K) per format to FILE.svg or FILE.png (needs matplotlib: pip install 'specchat[plot]')")
    prog = p_tune.add_mutually_exclusive_group()
    prog.add_argument("--progress", action="store_true", help="draw the progress line on stderr even when it is not a terminal")
    prog.add_argument("--no-progress", action="store_true", dest="no_progress", help="no progress line on stderr")

    p_pull = actions.add_parser(
        "pull",
        help="download a hub preset (target + draft) into the data dir",
        description="Download a preset's target and draft GGUFs from the Hugging Face Hub into "
        "<data dir>/models/. Interrupted downloads resume; files are verified (size, GGUF magic, tensor table).",
    )
    add_location_arguments(p_pull, data_dir=True)
    p_pull.add_argument("name", metavar="NAME", help="preset name (see 'specchat models list')")
    p_pull.add_argument("--force", action="store_true", help="delete local copies and download again")


def _settings(args: argparse.Namespace, **extra: Any):
    from specchat.config import load_settings

    overrides: dict[str, Any] = location_overrides(args)
    overrides.update(extra)
    return load_settings(getattr(args, "config", None), overrides)


def run(args: argparse.Namespace) -> int:
    command = args.models_command
    if command == "list":
        return _run_list(args)
    if command == "derive":
        return _run_derive(args)
    if command == "pull":
        return _run_pull(args)
    if command == "tune":
        from specchat.commands.tune import run_tune

        return run_tune(args)
    raise UserError(f"unknown models action {command!r}; use list, derive, tune or pull")  # pragma: no cover


# ------------------------------------------------------------------------------------------------------ list


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return lines


def _preset_lines(presets: list[Any]) -> list[str]:
    """``models list``'s presets: each one's state, and where each of its files comes from and how it is."""
    from specchat.models.presets import DerivedFile, HubFile, NgramDraft, missing_file_note

    out: list[str] = []
    for st in presets:
        p = st.preset
        out.append(f"  {p.name:<20} {p.kind:<6} {st.state}")
        for role, file, chk in (("target", p.target, st.target_check), ("draft", p.draft, st.draft_check)):
            if isinstance(file, NgramDraft):
                out.append(f"      {role:<6} {file.kind} (n-gram lookup over the conversation: no file)")
                continue
            if isinstance(file, HubFile):
                size = f"{file.size:,} bytes" if file.size is not None else "size checked against the hub"
                where = f"{file.repo}, {size}"
            elif isinstance(file, DerivedFile):
                where = f"specchat models derive {file.derive_args}"
            else:
                where = "bundled"
            all_missing = all(c.status == "missing" for c in (st.target_check, st.draft_check))
            if chk.ok or all_missing:  # the preset's line says it all
                state = ""
            elif chk.status == "missing":
                state = f"  [{missing_file_note(p, file)}]"
            else:
                state = f"  [{chk.status}: {chk.detail}]"
            out.append(f"      {role:<6} {file.filename} ({where}){state}")
        out.append(f"      {p.demonstrates}")
    return out


def _run_list(args: argparse.Namespace) -> int:
    from specchat.models.inventory import build_inventory, leftover_parts

    settings = _settings(args)
    data_dir = settings.effective_data_dir()
    inv = build_inventory(data_dir, settings.target, settings.draft)
    parts = leftover_parts(data_dir)
    if args.json:
        from dataclasses import asdict

        data = _inventory_json(inv, parts)
        data["verify_cost"] = _verify_curves(inv, data_dir)
        data["tuned"] = [asdict(t) for t in _tune_results(data_dir)]
        print(json.dumps(data, indent=2))
        return 0

    out: list[str] = [f"Models (data dir: {data_dir})", ""]
    rows = []
    for e in inv.models:
        i = e.info
        if i is None:
            rows.append([e.name, ", ".join(e.roles), "-", "-", "-", "-", "-", "unusable: " + e.error])
            continue
        rows.append([
            e.name, ", ".join(e.roles), human_size(i.file_size), i.architecture or "?", i.quantization,
            str(i.vocab_size), str(i.block_count if i.block_count is not None else "?"), str(e.path),
        ])
    out += ["  " + line for line in _table(rows, ["FILE", "SOURCE", "SIZE", "ARCH", "QUANT", "VOCAB", "BLOCKS", "PATH"])]
    curves = _verify_curves(inv, data_dir)
    if curves:
        out += ["", "Verify cost on this machine: v(K) = t(K+1 rows) / t(1 row), from the cached calibrations"]
        for c in curves:
            vs = " ".join(f"v({k})={c['v'][str(k)]:.1f}" for k in VERIFY_KS if str(k) in c["v"])
            depth = f", after {c['depth']}+ tokens" if c["depth"] else ""
            out.append(f"  {c['file']}  threads {c['threads']}/{c['threads_batch']}, {c['kernels']}, flash attention "
                       f"{c['flash_attn']}{depth}: 1 row {c['target_ms']:.1f} ms, {vs}")
            out.append(f"      {c['reason']}")
    tuned = _tune_results(data_dir)
    if tuned:
        out += ["", "Tuned (specchat models tune): the target to use per workload"]
        for t in tuned:
            out.append(f"  {t.source} (threads {t.threads}, drafter {t.drafter}, {_when(t.measured_at)}):")
            for ch in t.choices:
                mode = "speculation off" if ch.mode == "plain" else f"{t.drafter} + auto-K"
                x = f", {ch.x_source:.2f}× the source baseline" if ch.x_source else ""
                out.append(f"      {ch.workload}: {ch.label}, {mode} ({ch.tok_s:.1f} tok/s{x})")
    out += ["", f"Configured: target = {inv.configured[0]!r}, draft = {inv.configured[1]!r}: {inv.configured_state}"]

    out += ["", "Presets (use one with target = \"preset:NAME\")", ""]
    out += _preset_lines(inv.presets)

    out += ["", "Compatible target <- draft pairs among the files above (draft smaller than target)", ""]
    if inv.pairs:
        for t, d in inv.pairs:
            out.append(f"  {t.name} <- {d.name}")
    else:
        out.append("  none yet: run 'specchat models derive --demo' for two offline demo pairs")
    if parts:
        out += ["", "Interrupted downloads (resumed by 'specchat models pull'):"]
        out += [f"  {p} ({human_size(p.stat().st_size)})" for p in parts]
    print(sanitize("\n".join(out)))  # file names in the data dir are anyone's: shown inert
    return 0


#: the K whose verify cost ``models list`` shows
VERIFY_KS = (1, 4, 16, 64)


def _verify_curves(inv, data_dir: Path) -> list[dict[str, Any]]:
    """The cached calibrations of the listed files as they are now (the newest per file, threads, kernels and
    context depth, shallowest first), fitted by the engine's verify-cost model
    (:meth:`specchat.engine.telemetry.VerifyCost.curve`)."""
    from specchat.engine.calibration_cache import CALIBRATION_DIR, CalibrationCache
    from specchat.engine.telemetry import VerifyCost

    cache = CalibrationCache(data_dir / CALIBRATION_DIR)
    out: list[dict[str, Any]] = []
    for e in inv.models:
        if not e.usable:
            continue
        seen: set[tuple[int, int, bool, str, int]] = set()
        for entry in sorted(cache.for_file(e.path), key=lambda x: x.key.depth):  # stable: newest first per depth
            k = entry.key
            if (k.threads, k.threads_batch, k.repack, k.flash_attn, k.depth) in seen:
                continue
            seen.add((k.threads, k.threads_batch, k.repack, k.flash_attn, k.depth))
            vc = VerifyCost()
            for rows, ms in entry.timings:
                vc.observe(rows, ms)
            curve = vc.curve(entry.weights, "cache", row_by_row=k.row_by_row)
            out.append({
                "file": e.name, "threads": k.threads, "threads_batch": k.threads_batch, "repack": k.repack,
                "flash_attn": k.flash_attn, "kernels": "one row at a time (AMX)" if k.row_by_row else "batched", "target_ms": curve.target_ms,
                "v": {str(i): curve.at(i) for i in range(len(curve.v))}, "reason": curve.reason,
                "measured_rows": curve.measured_rows, "measured_at": entry.measured_at, "depth": k.depth,
            })
    return out


def _tune_results(data_dir: Path) -> list[Any]:
    from specchat.models.tune_results import load_results

    return load_results(data_dir)


def _when(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _inventory_json(inv, parts: list[Path]) -> dict[str, Any]:
    models = []
    for e in inv.models:
        i = e.info
        models.append({
            "file": e.name, "path": str(e.path), "roles": e.roles, "error": e.error or None,
            "size": i.file_size if i else None, "architecture": i.architecture if i else None,
            "quantization": i.quantization if i else None, "vocab_size": i.vocab_size if i else None,
            "block_count": i.block_count if i else None, "n_params": i.n_params if i else None,
        })
    presets = []
    for st in inv.presets:
        presets.append({
            "name": st.preset.name, "kind": st.preset.kind, "state": st.state, "ready": st.ready,
            "target": str(st.target), "draft": str(st.draft) if st.draft is not None else st.preset.draft.kind,  # type: ignore[union-attr]
            "demonstrates": st.preset.demonstrates,
            "compat": None if st.compat is None else {"ok": st.compat.ok, "rule": st.compat.rule},
        })
    return {
        "data_dir": str(inv.data_dir),
        "models": models,
        "configured": {"target": inv.configured[0], "draft": inv.configured[1], "state": inv.configured_state},
        "presets": presets,
        "pairs": [{"target": str(t.path), "draft": str(d.path)} for t, d in inv.pairs],
        "partial_downloads": [str(p) for p in parts],
    }


# ---------------------------------------------------------------------------------------------------- derive


def _say(msg: str) -> None:
    print(f"  {msg}", file=sys.stderr)


def _run_derive(args: argparse.Namespace) -> int:
    from specchat.models import derive as dv
    from specchat.models.registry import models_dir, resolve_model

    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1, not {args.threads}")
    settings = _settings(args, threads=args.threads)
    data_dir = settings.effective_data_dir()
    mdir = models_dir(data_dir)
    assert mdir is not None
    if args.demo:
        if args.quant or args.keep_layers or args.output or args.source != "bundled":
            raise UserError("--demo writes fixed files from the bundled model; drop --quant/--keep-layers/-o/--from")
        results = dv.derive_demo(mdir, threads=settings.threads, force=args.force, progress=_say)
        for path, derived in results:
            if derived is None:
                print(f"{path}: already there (use --force to write it again)")
            else:
                print(f"{path}: {human_size(derived.size)}, {derived.quantization}, {derived.block_count} blocks")
        print("demo pairs: target = \"preset:smollm2-f16-q41\" (high acceptance), "
              "target = \"preset:smollm2-layerskip\" (low acceptance), "
              "target = \"preset:smollm2-q8-ngram\" (n-gram drafts on a target with a batched verify kernel)")
        return 0

    if not args.quant and not args.keep_layers:
        raise UserError("nothing to derive: give --quant TYPE and/or --keep-layers RANGES, or --demo")
    src = resolve_model(args.source, data_dir)
    from specchat.engine.gguf import read_gguf_info

    info = read_gguf_info(src)  # one-line error if missing / not GGUF / truncated
    keep = dv.parse_layers(args.keep_layers, info.block_count or 0) if args.keep_layers else None
    if args.output:
        name = args.output
        if "/" in name or "\\" in name:
            out = Path(name).expanduser()
        else:
            out = mdir / (name if name.endswith(".gguf") else f"{name}.gguf")
    else:
        out = mdir / dv.default_name(src, args.quant, keep)
    derived = dv.derive(src, out, quant=args.quant, keep_layers=args.keep_layers, threads=settings.threads,
                        force=args.force, progress=_say)
    print(f"wrote {derived.path}: {human_size(derived.size)}, {derived.quantization}, {derived.block_count} blocks")
    use = out.stem if out.parent == mdir else str(out)
    print(f"use it as target = {use!r} or draft = {use!r}")
    return 0


# ------------------------------------------------------------------------------------------------------ pull


def _run_pull(args: argparse.Namespace) -> int:
    from specchat.models.presets import PRESETS, HubFile, get_preset
    from specchat.models.registry import models_dir

    preset = get_preset(args.name)
    if preset is None:
        raise UserError(f"unknown preset {args.name!r}; choose one of: {', '.join(PRESETS)}")
    settings = _settings(args)
    mdir = models_dir(settings.effective_data_dir())
    assert mdir is not None
    if preset.kind == "local":
        from specchat.models.derive import derive_demo

        print(f"{preset.name} is derived from the bundled model, nothing to download; deriving it", file=sys.stderr)
        derive_demo(mdir, threads=settings.threads, force=args.force, progress=_say)
    else:
        from specchat.models.hub import pull_file

        # nothing is printed before the hub answers: an unreachable hub is exactly one line
        for role, file in preset.files():
            if isinstance(file, HubFile):
                pull_file(file, mdir, force=args.force, say=lambda msg, role=role: _say(f"{role} {msg}"))
    print(f"{preset.name} is ready; use it with target = \"preset:{preset.name}\" (or SPECCHAT_TARGET=preset:{preset.name})")
    return 0
