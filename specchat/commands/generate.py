"""``specchat generate``: one reply, headless and scriptable.

Streams the reply to stdout (coloured by piece kind on a terminal; rejected drafts appear as dim,
struck-through ghosts only when colour is on, so piped text is exactly the reply), then prints
llama.cpp's acceptance line on stderr. ``--json`` prints one JSON object instead: the Turn fields
(llama-server timing names) plus ``text``, ``tokens`` and ``kinds``.

The reply is the model's text, so on a terminal it is made inert (:mod:`specchat.sanitize`: an ESC the model
wrote shows as ``␛``, it does not drive the terminal); piped, it is written exactly as generated. The JSON is
the same value either way, with the characters a terminal would act on written as ``\\uXXXX`` escapes.
An empty prompt, or a prompt or system prompt that is not valid UTF-8 (``--prompt -`` reads stdin as bytes), is
refused with one line before any model loads.
"""

from __future__ import annotations

import argparse
import os
import sys

from specchat.commands.arguments import warn_k_above_cap
from specchat.engine.drafter_kinds import K_MAX, NGRAM, NONE, SUFFIX
from specchat.errors import UserError

ANSI = {
    "accepted": "\x1b[32m",
    "corrected": "\x1b[33m",
    "bonus": "\x1b[34;1m",
    "plain": "",
    "rejected": "\x1b[2;9;31m",
}
RESET = "\x1b[0m"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``specchat generate`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    p.add_argument("--prompt", required=True, help="the user message (or the raw prompt with --raw); '-' reads stdin")
    p.add_argument("--server", metavar="URL", help="a llama-server's URL: it generates the reply with its own models and speculation")
    p.add_argument("--target", help="target model: path to a .gguf, a derived/preset name, or 'bundled' (default)")
    p.add_argument("--draft", help=f"drafter: path to a draft .gguf, '{NGRAM}' (default), '{SUFFIX}' (also drafts from the history), "
                   f"a chain like '{SUFFIX},DRAFT.gguf' (the first that proposes drafts each round) or '{NONE}'")
    p.add_argument("--k", type=int, help=f"draft length K, 0..{K_MAX} (0 = no speculation); default 3")
    p.add_argument("--auto-k", action="store_true", default=None, help="let the cost model choose K each step")
    p.add_argument("--temperature", type=float, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, dest="top_k")
    p.add_argument("--top-p", type=float, dest="top_p")
    p.add_argument("--seed", type=int)
    p.add_argument("--n-predict", type=int, dest="n_predict", help="maximum tokens to generate")
    p.add_argument("--threads", type=int)
    p.add_argument("--n-ctx", type=int, dest="n_ctx")
    p.add_argument("--system", help="system prompt")
    p.add_argument("--conversation", metavar="FILE.json", help="continue a saved conversation (history export JSON)")
    p.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object with the reply and its timings")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")


def settings_overrides(args: argparse.Namespace) -> dict:
    """Only the flags the user gave: they beat config file and environment."""
    o: dict = {}
    for flag, key in (("server", "server_url"), ("target", "target"), ("draft", "draft"), ("k", "k"),
                      ("n_predict", "n_predict"), ("threads", "threads"), ("n_ctx", "n_ctx"), ("system", "system_prompt")):
        v = getattr(args, flag, None)
        if v is not None:
            o[key] = v
    if getattr(args, "data_dir", None) is not None:  # specchat --data-dir DIR generate ...: where names resolve
        o["data_dir"] = args.data_dir
    sampling = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p", "seed") if getattr(args, k, None) is not None}
    if sampling:
        o["sampling"] = sampling
    return o


#: flags of the local engine (a llama-server has its own settings), with their argparse destinations
LOCAL_ONLY_FLAGS = (("--target", "target"), ("--draft", "draft"), ("--k", "k"), ("--auto-k", "auto_k"),
                    ("--threads", "threads"), ("--n-ctx", "n_ctx"))


def load_conversation(path: str) -> list:
    """Messages of a saved conversation (a ``specchat history export --format json`` file)."""
    from specchat.history import messages_from_export, read_export_file

    _conv, messages = messages_from_export(read_export_file(path), source=str(path))
    return messages


def _utf8_text(value: str, what: str) -> str:
    """``value`` if it is valid Unicode; a command-line argument that was not UTF-8 holds lone surrogates
    (Python's ``surrogateescape``), which no tokenizer can encode: refused with one line."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(
            f"{what} is not valid UTF-8 text (a byte 0x{ord(value[exc.start]) & 0xFF:02x} at character {exc.start}); "
            "give UTF-8 text"
        ) from None
    return value


def read_prompt(value: str) -> str:
    """The prompt text: ``value``, or stdin (read as bytes, decoded as strict UTF-8) for ``-``; never empty."""
    if value == "-":
        from specchat.sanitize import read_stdin_text

        try:
            prompt = read_stdin_text()
        except UnicodeDecodeError as exc:
            raise UserError(
                f"--prompt -: stdin is not valid UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                f"{exc.start}); give UTF-8 text"
            ) from None
    else:
        prompt = _utf8_text(value, "--prompt")
    if not prompt.strip():
        if value == "-":
            raise UserError("--prompt -: stdin is empty; pipe the message in, or give it as --prompt TEXT")
        raise UserError("--prompt is empty: give the message to reply to, e.g. --prompt 'Hello'")
    return prompt


def run(args: argparse.Namespace) -> int:
    from specchat.config import load_settings, refuse_local_flags
    from specchat.sanitize import json_text, sanitize

    prompt = read_prompt(args.prompt)
    if args.system is not None:
        _utf8_text(args.system, "--system")
    if args.k is not None and not (0 <= args.k <= K_MAX):
        raise UserError(f"--k {args.k} is out of range: K must be 0..{K_MAX} (0 = no speculation)")
    if args.n_predict is not None and args.n_predict <= 0:
        raise UserError(f"--n-predict {args.n_predict} must be a positive number of tokens")
    settings = load_settings(getattr(args, "config", None), settings_overrides(args))
    if settings.server_url:
        refuse_local_flags(args, settings.server_url, LOCAL_ONLY_FLAGS)
    conversation = load_conversation(args.conversation) if args.conversation else None

    from specchat.engine.events import Calibrating, EngineError, Notice, Piece, Turn
    from specchat.loading import load_engine, wait_for_history

    auto_k = bool(args.auto_k)
    session = load_engine(settings, auto_k=auto_k)
    for line in wait_for_history(session):  # --draft suffix: draft from the whole history, so wait for its index
        print(f"specchat: {sanitize(line)}", file=sys.stderr)
    warn_k_above_cap(settings, auto_k=auto_k)
    if settings.k == 0 and not session.controls.fixed:
        session.controls.set_speculative(False)
    note = session.info().note
    if note:
        print(f"specchat: {sanitize(note)}", file=sys.stderr)
    terminal = sys.stdout.isatty()
    color = args.color == "always" or (args.color == "auto" and terminal and not os.environ.get("NO_COLOR"))
    shown = sanitize if terminal or color else (lambda text: text)  # coloured output is for a terminal
    try:
        if conversation is not None:
            session.load(conversation)
        if args.raw:
            events = session.raw(prompt)
        else:
            if conversation is None and args.system is None and settings.system_prompt:
                session.reset(settings.system_prompt)
            events = session.send(prompt)
        turn: Turn | None = None
        out = sys.stdout
        for ev in events:
            if isinstance(ev, Piece):
                if args.json:
                    continue
                text = shown(ev.text)
                if color:
                    if text:
                        out.write(f"{ANSI[ev.kind]}{text}{RESET}" if ANSI[ev.kind] else text)
                elif ev.kind != "rejected":
                    out.write(text)
                out.flush()
            elif isinstance(ev, Turn):
                turn = ev
            elif isinstance(ev, Notice):
                print(f"specchat: {sanitize(ev.message)}", file=sys.stderr)
            elif isinstance(ev, Calibrating):  # seconds before the first token: say why, as the app does
                print(f"specchat: {ev.sentence}", file=sys.stderr)
            elif isinstance(ev, EngineError):
                raise UserError(f"generation failed: {ev.message}")
        if turn is None:  # pragma: no cover - a generation always ends with a Turn
            raise UserError("generation produced no result")
        if args.json:
            sys.stdout.write(json_text(turn.to_dict()) + "\n")
        else:
            sys.stdout.write("\n")
        if session.controls.fixed and turn.speculative and turn.draft_n == 0:  # a llama-server: see remote.py
            print("draft acceptance: not reported by the server (no draft was verified in this reply)", file=sys.stderr)
        else:
            print(turn.acceptance_line(), file=sys.stderr)
        print(
            f"prompt: {turn.prompt_n} tokens in {turn.prompt_ms:.1f} ms; predicted: {turn.predicted_n} tokens in "
            f"{turn.predicted_ms:.1f} ms ({turn.predicted_per_second:.2f} tok/s); stop: {turn.stop_reason}",
            file=sys.stderr,
        )
    finally:
        session.close()
    return 0
