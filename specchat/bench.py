"""``specchat bench``: baseline vs speculation, interleaved A B A B on the same loaded models.

(First version: baseline vs each K of --k; the arithmetic, --auto, --plot and --json follow.)
"""

from __future__ import annotations

import statistics
import sys
import time

from specchat.errors import UserError

DEFAULT_SUITE = [
    {"name": "code", "prompt": "Write a Python function that checks whether a number is prime, with a docstring and tests."},
    {"name": "prose", "prompt": "Write a short story about a lighthouse keeper."},
]


def parse_k_list(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--k {text!r} is not a comma-separated list of integers: use e.g. --k 0,1,3,5") from None
    if not ks:
        raise UserError("--k is empty: give draft lengths, e.g. --k 0,1,3,5")
    bad = [k for k in ks if not 0 <= k <= 16]
    if bad:
        raise UserError(f"--k {text}: {bad[0]} is out of range; every K must be 0..16 (0 = baseline)")
    return sorted(set(ks))


def _one(session, prompt: str, k: int) -> object:
    from specchat.engine.events import EngineError, Turn

    session.reset()
    session.decoder.reset()
    if k == 0:
        session.controls.set_speculative(False)
    else:
        session.controls.set_speculative(True)
        session.controls.set_k(k)
    turn = None
    for ev in session.send(prompt):
        if isinstance(ev, Turn):
            turn = ev
        elif isinstance(ev, EngineError):
            raise UserError(f"generation failed: {ev.message}")
    return turn


def main(args, out=sys.stdout, err=sys.stderr) -> int:
    from specchat.config import load_settings
    from specchat.engine.loader import load_engine

    ks = parse_k_list(args.k)
    if args.runs <= 0:
        raise UserError(f"--runs {args.runs} must be a positive number of runs")
    o: dict = {}
    for flag in ("target", "draft", "threads", "n_ctx"):
        if getattr(args, flag, None) is not None:
            o[flag] = getattr(args, flag)
    o["n_predict"] = args.n_predict or 128
    if args.temperature is not None:
        o["sampling"] = {"temperature": args.temperature}
    settings = load_settings(getattr(args, "config", None), o)
    session = load_engine(settings, auto_k=False)
    try:
        for item in DEFAULT_SUITE:
            for k in [k for k in ks if k > 0]:
                ratios, tps = [], []
                for _ in range(args.runs):
                    a = _one(session, item["prompt"], 0)
                    b = _one(session, item["prompt"], k)
                    tps.append(b.predicted_per_second)
                    if a.predicted_per_second > 0:
                        ratios.append(b.predicted_per_second / a.predicted_per_second)
                print(f"{item['name']:8s} K={k:2d} median {statistics.median(tps):8.2f} tok/s  "
                      f"speedup {statistics.median(ratios) if ratios else float('nan'):.2f}x", file=out)
    finally:
        session.close()
    return 0
