"""``specchat demo --headless``: the guided tour of when speculation helps and when it hurts, played without
the app (:mod:`specchat.demo`): every scene's pair, K, speeds with and without speculation, acceptance and
ghosts, and the sentence it teaches. Derives the demo models first if they are missing (with progress).

Without ``--headless`` the app opens on its tour screen (:mod:`specchat.tui.screens.tour`): the same scenes,
each raced and replayed side by side with its sentence on screen; closing the tour leaves the chat.
"""

from __future__ import annotations

import argparse
import json
import sys

from specchat.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``specchat demo`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    p.description = (
        "The guided tour of when speculation helps and when it hurts, on the offline models: each scene answers "
        "its prompt with speculation off, then on, and prints both speeds, acceptance and ghost drafts."
    )
    p.add_argument("--headless", action="store_true",
                   help="play the tour without the app (prints the figures); without it the app opens on the tour")
    p.add_argument("--scene", action="append", metavar="N", type=int,
                   help="play only scene N (1-based; repeat for several; default: all)")
    p.add_argument("--n-predict", type=int, dest="n_predict", help="tokens per reply for every scene (default: each scene's)")
    p.add_argument("--threads", type=int)
    p.add_argument("--list", action="store_true", help="list the scenes and exit")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")


def run(args: argparse.Namespace) -> int:
    from specchat import demo

    scenes = list(demo.SCENES)
    if args.list:
        for i, s in enumerate(scenes, start=1):
            print(f"{i}. {s.name} — {s.pair.label}, {s.mode}: {s.sentence}")
        return 0
    if args.scene:
        bad = [n for n in args.scene if not 1 <= n <= len(scenes)]
        if bad:
            raise UserError(f"--scene {bad[0]}: there are scenes 1..{len(scenes)} (see 'specchat demo --list')")
        scenes = [scenes[n - 1] for n in args.scene]
    if args.n_predict is not None and args.n_predict <= 0:
        raise UserError(f"--n-predict {args.n_predict} must be a positive number of tokens")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1, not {args.threads}")
    if not args.headless:
        if args.json:
            raise UserError("--json prints the figures of a headless tour: add --headless")
        from specchat.commands import tui

        extra = {"threads": args.threads} if args.threads is not None else {}
        return tui.run(args, tour_at_start=True, tour_scenes=tuple(scenes), tour_n_predict=args.n_predict, extra=extra)

    from specchat.config import load_settings

    overrides = {k: v for k, v in (("threads", args.threads), ("data_dir", getattr(args, "data_dir", None))) if v is not None}
    settings = load_settings(getattr(args, "config", None), overrides)
    from specchat.loading import load_engine
    from specchat.models.derive import derive_demo

    from specchat.commands.tui import pick_helps_pair

    results = demo.run_tour(
        settings, scenes, load=load_engine, derive=derive_demo, n_predict=args.n_predict,
        progress=lambda msg: print(f"  {msg}", file=sys.stderr), pick=pick_helps_pair,
    )
    if args.json:
        print(json.dumps([r.figures() for r in results], indent=2, ensure_ascii=False))
    else:
        from specchat.sanitize import sanitize

        sys.stdout.write(sanitize(demo.format_results(results)))
    return 0
