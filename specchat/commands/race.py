"""``specchat race``: the same message with speculation off, then on - both speeds, the ratio, and whether the
texts are identical (:mod:`specchat.race`).

Greedy, one run after the other. Prints each run's tokens, time and tok/s, the ratio, and the verdict on the
texts (identical, or where and why they part: a near-tie of batch-size numerics); ``--json`` prints one
object with both runs, their texts and every piece's timestamp (a replay needs nothing else). Exit code 0; 1
when the texts part somewhere that is not a near-tie (that would be a defect); 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys

from specchat.engine.drafter_kinds import K_MAX, NGRAM, NONE
from specchat.errors import UserError

DEFAULT_N_PREDICT = 128


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``specchat race`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    p.description = (
        "Answer one message twice, greedy: with speculation off, then on (one after the other, never at once). "
        "Prints both speeds, the ratio, and whether the texts are identical."
    )
    p.add_argument("--prompt", required=True, help="the user message; '-' reads stdin")
    p.add_argument("--target", help="target model: a .gguf path, 'preset:NAME', a derived name or 'bundled' (default)")
    p.add_argument("--draft", help=f"drafter: a draft .gguf path or '{NGRAM}' (default)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--k", type=int, help=f"fixed draft length K, 1..{K_MAX} (default: the configured K)")
    mode.add_argument("--auto-k", action="store_true", help="let auto-K choose K in the speculative run")
    p.add_argument("--n-predict", type=int, dest="n_predict", help=f"maximum tokens per run (default {DEFAULT_N_PREDICT})")
    p.add_argument("--threads", type=int)
    p.add_argument("--n-ctx", type=int, dest="n_ctx")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--json", action="store_true", help="print one JSON object with both runs and their pieces")


def _overrides(args: argparse.Namespace) -> dict:
    from specchat.commands.generate import settings_overrides

    o = settings_overrides(args)
    o.setdefault("n_predict", DEFAULT_N_PREDICT)
    return o


def race_json(race) -> dict:
    """The race as plain data: both runs (figures, text, pieces as [t, kind, text, token]) and the verdict."""
    out = {
        "prompt": race.prompt, "target": race.target, "drafter": race.drafter, "k": race.k, "auto_k": race.k is None,
        "ratio": race.ratio, "identical": race.identical, "first_difference": race.first_difference,
        "difference": race.difference or None,
    }  # fmt: skip
    for lane in ("off", "on"):
        run = race.run(lane)
        t = run.turn
        out[lane] = {
            "tok_s": run.tok_s, "tokens": t.predicted_n, "seconds": run.t_end, "predicted_ms": t.predicted_ms,
            "draft_n": t.draft_n, "draft_n_accepted": t.draft_n_accepted, "acceptance": t.acceptance,
            "k_min": t.k_min, "k_max": t.k_max, "stop_reason": t.stop_reason, "text": run.text,
            "pieces": [[p.t, p.kind, p.text, p.token] for p in run.pieces],
        }  # fmt: skip
    return out


def run(args: argparse.Namespace) -> int:
    from specchat.commands.generate import _utf8_text, read_prompt
    from specchat.config import load_settings
    from specchat.sanitize import json_text, sanitize

    prompt = read_prompt(args.prompt)
    if args.system is not None:
        _utf8_text(args.system, "--system")
    if args.draft is not None and args.draft.strip().lower() == NONE:
        raise UserError(f"--draft {NONE} leaves nothing to race: give --draft {NGRAM} or a draft model")
    if args.k is not None and not (1 <= args.k <= K_MAX):
        raise UserError(f"--k {args.k} is out of range: a race drafts, so K must be 1..{K_MAX}")
    if args.n_predict is not None and args.n_predict <= 0:
        raise UserError(f"--n-predict {args.n_predict} must be a positive number of tokens")
    settings = load_settings(getattr(args, "config", None), _overrides(args))
    k = None if args.auto_k else (args.k if args.k is not None else settings.k)
    if k is not None and k <= 0:
        raise UserError(f"the configured K is {k}: a race drafts, so give --k 1..{K_MAX} or --auto-k")

    from specchat.loading import load_engine
    from specchat.race import record_race

    session = load_engine(settings, auto_k=k is None)
    try:
        if args.system is None and settings.system_prompt:
            session.reset(settings.system_prompt)
        race = record_race(session, prompt, k=k)
    finally:
        session.close()

    defect = not race.identical and "not a near-tie" in race.difference
    if args.json:
        sys.stdout.write(json_text(race_json(race)) + "\n")
        return 1 if defect else 0
    mode = "auto-K" if k is None else f"K {k}"
    lines = [f"race: {race.target} + {race.drafter}, {mode}, greedy, at most {settings.n_predict} tokens per run"]
    for lane, label in (("off", "speculation off"), ("on", "speculation on ")):
        run_ = race.run(lane)
        t = run_.turn
        extra = ""
        if lane == "on":
            acc = "–" if t.acceptance is None else f"{t.acceptance * 100:.0f} %"
            extra = f" (drafted {t.draft_n}, acceptance {acc}, mean len {t.mean_len:.2f})"
        lines.append(f"{label}: {t.predicted_n} tokens in {t.predicted_ms / 1000:.2f} s = {run_.tok_s:.1f} tok/s{extra}")
    ratio = race.ratio
    lines.append(f"ratio: {ratio:.2f}× (speculation on / off)" if ratio is not None else "ratio: – (no baseline speed)")
    if race.identical:
        lines.append(f"texts: identical ({race.off.turn.predicted_n} tokens)")
        lines += ["", sanitize(race.off.text)]
    else:
        lines.append(f"texts: differ - {race.difference}")
        lines += ["", "speculation off:", sanitize(race.off.text), "", "speculation on:", sanitize(race.on.text)]
    print("\n".join(lines))
    return 1 if defect else 0
