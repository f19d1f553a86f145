"""``specchat bench``: baseline vs speculation, interleaved, with the arithmetic of why.

See :mod:`specchat.bench` for the measurement protocol.
"""

from __future__ import annotations

import argparse
import sys

from specchat.bench.history_suite import DEFAULT_EARLIER
from specchat.commands.arguments import add_interleave_argument
from specchat.engine.drafter_kinds import K_MAX, NGRAM, SUFFIX
from specchat.errors import UserError


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The description and arguments of ``specchat bench`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    p.description = (
        "Measure predicted tok/s with and without speculation on a prompt suite, each speculative run paired with "
        "a baseline run and the pair interleaved round by round on two copies of the target (--interleave), and "
        "print the cost-model arithmetic of the pair."
    )
    p.add_argument("--server", metavar="URL",
                   help="measure a llama-server as configured (its own models, K and speculation) instead of local models")
    p.add_argument("--server-b", metavar="URL", dest="server_b",
                   help="a second llama-server (server B) measured on the same suite, interleaved with --server (A): "
                   "each server's figures and the ratio B / A")
    p.add_argument("--target", help="target model: path to a .gguf, a derived/preset name, or 'bundled' (default)")
    p.add_argument("--draft", help=f"drafter: path to a draft .gguf, a preset name, '{NGRAM}' (default), '{SUFFIX}' "
                   f"(also drafts from the history) or a chain like '{SUFFIX},DRAFT.gguf'; {SUFFIX} and a chain are "
                   f"measured side by side with {NGRAM}")
    p.add_argument("--k", default=None, metavar="LIST",
                   help=f"comma-separated draft lengths to measure, each 0..{K_MAX} (0 = baseline); default 0,1,2,3,5,8")
    p.add_argument("--suite", default="default", metavar="default|history|FILE",
                   help="prompt suite: 'default', 'history' (earlier conversations of one kind of task saved first in "
                        "the bench's own data dir, then a new one measured: suffix against ngram) or a TOML/JSON file "
                        "with a list of {name, prompt}")
    p.add_argument("--history-size", type=int, default=DEFAULT_EARLIER, dest="history_size", metavar="N",
                   help=f"--suite history: earlier conversations saved before the task (default {DEFAULT_EARLIER})")
    p.add_argument("--runs", type=int, default=3, help="runs per (prompt, K), each paired with a baseline run; default 3")
    p.add_argument("--n-predict", type=int, dest="n_predict", default=None, help="tokens to generate per run (default 256)")
    p.add_argument("--temperature", type=float, help="0 = greedy (default)")
    p.add_argument("--seed", type=int, help="sampling seed (used when --temperature > 0)")
    p.add_argument("--auto", action="store_true", help="also measure auto-K (the cost model chooses K each step)")
    p.add_argument("--json", metavar="FILE", help="write every record, the summary and the arithmetic as JSON")
    p.add_argument("--plot", nargs="?", const=True, default=None, metavar="FILE",
                   help="draw speedup vs K: in the terminal, or with FILE.svg / FILE.png a chart with the cost model's "
                        "prediction and the break-even line (needs matplotlib: pip install 'specchat[plot]')")
    p.add_argument("--formats", metavar="LIST",
                   help="also measure the target re-encoded in these weight formats (e.g. F16,Q8_0; derived into "
                        "<data dir>/models when missing), interleaved in one run, with each run's tok/s as a multiple "
                        "of the target's own baseline in the same round (× the bundled Q4_1 baseline)")
    p.add_argument("--flash-attn", metavar="LIST", dest="flash_attn",
                   help="also measure every target with these flash-attention settings (auto,on,off; the first is "
                        "the configured one's place), interleaved in the same run")
    p.add_argument("--threads", type=int, help="CPU threads for llama.cpp")
    p.add_argument("--n-ctx", type=int, dest="n_ctx", help="context size (default 4096)")
    add_interleave_argument(p)
    p.add_argument("--no-arithmetic", action="store_true", dest="no_arithmetic",
                   help="skip the micro-benchmarks of the cost model (v(K), c)")
    prog = p.add_mutually_exclusive_group()
    prog.add_argument("--progress", action="store_true", help="draw the progress line on stderr even when it is not a terminal")
    prog.add_argument("--no-progress", action="store_true", dest="no_progress", help="no progress line on stderr")


def run(args: argparse.Namespace) -> int:
    from specchat.bench.command import main

    return main(args, out=sys.stdout, err=sys.stderr)


__all__ = ["add_arguments", "run", "UserError"]
