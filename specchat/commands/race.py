"""``specchat race``: the same message with speculation off, then on - both speeds, the ratio, and whether the
texts are identical (:mod:`specchat.race`). With ``--server A --server-b B`` (or ``server_url`` and
``server_b_url``): the same message on two llama-servers, A then B, each lane labelled by its server, the
ratio B / A (a llama-server's speculation cannot change per request, so one server cannot race itself).

Greedy, one run after the other. Prints each run's tokens, time and tok/s, the ratio, and the verdict on the
texts (identical, or where and why they part: a near-tie of batch-size numerics); ``--json`` prints one
object with both runs, their texts and every piece's timestamp (a replay needs nothing else). Exit code 0; 1
when the texts part somewhere that is not a near-tie (that would be a defect); 2 for bad input.
"""

from __future__ import annotations

import argparse
import sys

from specchat.engine.drafter_kinds import K_MAX, NGRAM, NONE, SUFFIX
from specchat.errors import UserError

DEFAULT_N_PREDICT = 128


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``specchat race`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    p.description = (
        "Answer one message twice, greedy: with speculation off, then on (one after the other, never at once). "
        "Prints both speeds, the ratio, and whether the texts are identical."
    )
    p.add_argument("--prompt", required=True, help="the user message; '-' reads stdin")
    p.add_argument("--server", metavar="URL", help="server A: a llama-server raced against --server-b")
    p.add_argument("--server-b", metavar="URL", dest="server_b",
                   help="server B: a second llama-server (e.g. the same model without speculation), run after A")
    p.add_argument("--target", help="target model: a .gguf path, 'preset:NAME', a derived name or 'bundled' (default)")
    p.add_argument("--draft", help=f"drafter: a draft .gguf path, '{NGRAM}' (default), '{SUFFIX}' (also drafts from the "
                   f"history) or a chain like '{SUFFIX},DRAFT.gguf'")
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
    if getattr(args, "server_b", None) is not None:
        o["server_b_url"] = args.server_b
    o.setdefault("n_predict", DEFAULT_N_PREDICT)
    return o


#: the race's flags that choose local models or K (a llama-server has its own), with their dests
LOCAL_ONLY_FLAGS = (("--target", "target"), ("--draft", "draft"), ("--k", "k"), ("--auto-k", "auto_k"),
                    ("--threads", "threads"), ("--n-ctx", "n_ctx"))


def race_json(race) -> dict:
    """The race as plain data: both runs (label, figures, text, pieces as [t, kind, text, token]) and the
    verdict; a race of two servers also has ``remote``, ``same_weights``, and each server's K in its lane."""
    out = {
        "prompt": race.prompt, "target": race.target, "drafter": race.drafter, "k": race.k, "auto_k": race.k is None,
        "ratio": race.ratio, "identical": race.identical, "first_difference": race.first_difference,
        "difference": race.difference or None,
    }
    if race.remote:  # each lane is a server: its own K and drafter are in its lane
        out.update(k=None, auto_k=False, remote=True, same_weights=race.same_weights)
    for lane in ("off", "on"):
        run = race.run(lane)
        t = run.turn
        out[lane] = {
            "label": race.label(lane), "target": t.target, "drafter": t.drafter, "k": t.k,
            "tok_s": run.tok_s, "tokens": t.predicted_n, "seconds": run.t_end, "predicted_ms": t.predicted_ms,
            "draft_n": t.draft_n, "draft_n_accepted": t.draft_n_accepted, "acceptance": t.acceptance,
            "k_min": t.k_min, "k_max": t.k_max, "stop_reason": t.stop_reason, "text": run.text,
            "pieces": [[p.t, p.kind, p.text, p.token] for p in run.pieces],
        }
    return out


def run(args: argparse.Namespace) -> int:
    from specchat.commands.generate import _utf8_text, read_prompt
    from specchat.config import load_settings

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
    from specchat.config import refuse_local_flags, server_pair

    servers = server_pair(settings)
    if settings.server_url and servers is None:
        raise UserError(
            f"a race needs two llama-servers: {settings.server_url} cannot turn its speculation off per request; "
            "give --server-b URL (e.g. the same model without speculation), or unset --server / server_url to race here"
        )
    if servers is not None:
        refuse_local_flags(args, servers[0], LOCAL_ONLY_FLAGS)
        return _run_servers(args, settings, prompt)
    k = None if args.auto_k else (args.k if args.k is not None else settings.k)
    if k is not None and k <= 0:
        raise UserError(f"the configured K is {k}: a race drafts, so give --k 1..{K_MAX} or --auto-k")

    from specchat.loading import load_engine, wait_for_history
    from specchat.race import record_race
    from specchat.sanitize import sanitize

    session = load_engine(settings, auto_k=k is None)
    try:
        for line in wait_for_history(session):  # --draft suffix: race with the whole history's index, as generate
            print(f"specchat: {sanitize(line)}", file=sys.stderr)
        if args.system is None and settings.system_prompt:
            session.reset(settings.system_prompt)
        race = record_race(session, prompt, k=k)
    finally:
        session.close()

    mode = "auto-K" if k is None else f"K {k}"
    head = f"race: {race.target} + {race.drafter}, {mode}, greedy, at most {settings.n_predict} tokens per run"
    return _report(args, race, head)


def _run_servers(args: argparse.Namespace, settings, prompt: str) -> int:
    """The race of server A (``server_url``) and server B (``server_b_url``): connect both, then race."""
    from specchat.engine.llama_server import ServerError
    from specchat.loading import connect_server_b, load_engine
    from specchat.race import record_server_race

    try:
        a = load_engine(settings)
    except ServerError as exc:
        raise ServerError(f"server A: {exc}") from None
    try:
        b = connect_server_b(settings)
        try:
            race = record_server_race(a, b, prompt)  # both opened with settings.system_prompt (--system)
        finally:
            b.close()
    finally:
        a.close()
    def side(run_) -> str:
        t = run_.turn
        spec = f"{t.drafter}, K {t.k}" if t.speculative else "no speculation"
        return f"{run_.label.split(': ', 1)[1]} ({spec})"

    head = (
        f"race: server A {side(race.off)} vs server B {side(race.on)}, greedy, at most {settings.n_predict} tokens "
        "per run, A then B"
    )
    return _report(args, race, head)


def _speculation(t) -> str:
    if not t.draft_n:
        return " (no draft)" if not t.speculative else " (no draft verified)"
    acc = "–" if t.acceptance is None else f"{t.acceptance * 100:.0f} %"
    return f" (drafted {t.draft_n}, acceptance {acc}, mean len {t.mean_len:.2f})"


def _report(args: argparse.Namespace, race, head: str) -> int:
    """Print the race (text or ``--json``); the exit code: 1 for a defect (texts part beyond a near-tie)."""
    from specchat.sanitize import json_text, sanitize

    if args.json:
        sys.stdout.write(json_text(race_json(race)) + "\n")
        return 1 if race.defect else 0
    lines = [head]
    labels = {"off": "A", "on": "B"} if race.remote else {"off": "speculation off", "on": "speculation on "}
    for lane in ("off", "on"):
        run_ = race.run(lane)
        t = run_.turn
        extra = _speculation(t) if lane == "on" or race.remote else ""
        lines.append(
            f"{labels[lane]}: {t.predicted_n} tokens in {t.predicted_ms / 1000:.2f} s = {run_.tok_s:.1f} tok/s{extra}"
        )
    ratio = race.ratio
    what = "server B / server A" if race.remote else "speculation on / off"
    lines.append(f"ratio: {ratio:.2f}× ({what})" if ratio is not None else "ratio: – (no baseline speed)")
    if race.identical:
        lines.append(f"texts: identical ({race.off.turn.predicted_n} tokens)")
        lines += ["", sanitize(race.off.text)]
    else:
        lines.append(f"texts: differ - {race.difference}")
        names = ("server A:", "server B:") if race.remote else ("speculation off:", "speculation on:")
        lines += ["", names[0], sanitize(race.off.text), "", names[1], sanitize(race.on.text)]
    print("\n".join(lines))
    return 1 if race.defect else 0
