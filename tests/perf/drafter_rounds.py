"""What the n-gram drafter costs a round as the speculative loop sees it: with the caches evicted, as a decode does.

    .venv/bin/python tests/perf/drafter_rounds.py [--rev REV] [--reps 8] [--evict-mb 48]
                                                  [--profile amd-epyc-zen4-genoa] [--format Q4_1]

Each ``llama_decode`` streams the target's weights (~85 MB for the bundled Q4_1) through every cache, so the Python
that runs between two decodes finds its code and data cold: on an AMD EPYC Zen 4 (Genoa, KVM, ``--threads 1``) the
drafter's step on a prose reply cost 66 µs a round in the loop and 16 µs replayed warm without a model. This script
replays :class:`~specchat.engine.drafters.NgramDrafter` over the recorded greedy replies of the bench's default suite
(``tests/data/traces-smollm2.json``: the prompt, then each round drafts from the text so far, keeps the prefix the
reply agrees with and the next token, as a greedy verify would), priced by a recorded CPU's verify costs
(``tests/data/cpu-profiles``), and reads ``--evict-mb`` of memory before every round, as a decode would. It then
reports the median µs a round over ``--reps`` replies, per prompt. The replay's figures match the loop's
(``draft`` wrapped in a reply), while a warm replay (``--evict-mb 0``) reads a quarter of them.

``--rev REV``: the drafter of that git revision as well, alternating with the working tree's reply by reply in one
process, with the ratio of each pair and whether both drafted exactly the same (a hash of every draft). This is the
way to measure a change to the drafter's hot path. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specchat.engine import drafters as current  # noqa: E402
from specchat.engine.cost_profile import CostProfile, ReplyTrace  # noqa: E402
from specchat.engine.drafter_kinds import K_MAX  # noqa: E402
from specchat.engine.sampling import SamplingParams  # noqa: E402

DATA = ROOT / "tests" / "data"


def drafters_at(rev: str) -> ModuleType:
    """``specchat/engine/drafters.py`` as it is at git revision ``rev``, imported beside the working tree's."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:specchat/engine/drafters.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "drafters_at_rev.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("specchat.engine.drafters_at_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def reply(module: ModuleType, trace: ReplyTrace, table: list[float], evict: np.ndarray | None) -> tuple[float, str]:
    """One replayed reply: the median µs of the drafter's step a round, and a hash of every draft it made."""
    d = module.NgramDrafter(1, 4, verify_cost=lambda: table, boundary=lambda t: t == trace.eos)
    ids = [*trace.prompt, *trace.reply]
    text, i = list(trace.prompt), len(trace.prompt)
    sampling, rng, h, times = SamplingParams(), np.random.default_rng(0), hashlib.sha1(), []
    while i < len(ids):
        if evict is not None:
            evict.sum()
        t0 = time.perf_counter()
        draft = d.draft(text, K_MAX, sampling, rng)
        a = 0
        while a < len(draft.tokens) and i + a < len(ids) and ids[i + a] == draft.tokens[a]:
            a += 1
        text.extend(ids[i : i + a + 1])
        i += a + 1
        if draft.tokens:
            d.rollback(text)
        times.append((time.perf_counter() - t0) * 1e6)
        h.update(repr((draft.tokens, draft.natural)).encode())
    return statistics.median(times), h.hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", help="also the drafter at this git revision, alternating reply by reply")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--evict-mb", type=int, default=48, help="memory read before every round (0: warm)")
    ap.add_argument("--profile", default="amd-epyc-zen4-genoa", help="a file stem in tests/data/cpu-profiles")
    ap.add_argument("--format", default="Q4_1", help="a format label of that profile")
    args = ap.parse_args()
    cost = CostProfile.load(DATA / "cpu-profiles" / f"{args.profile}.json").format(args.format)
    table = [cost.rows_ms(k + 1) / cost.t1_ms for k in range(K_MAX + 1)]
    evict = np.ones(args.evict_mb * 1024 * 1024 // 8) if args.evict_mb > 0 else None
    sides = {"tree": current, **({args.rev: drafters_at(args.rev)} if args.rev else {})}
    print(f"n-gram drafter's step, median µs a round; {args.profile} {args.format}'s verify costs; "
          f"{args.evict_mb} MB read before each round; {args.reps} replies each")
    for name, trace in ReplyTrace.load_all(DATA / "traces-smollm2.json").items():
        got: dict[str, list[float]] = {side: [] for side in sides}
        hashes: dict[str, set[str]] = {side: set() for side in sides}
        for rep in range(args.reps):
            for side in (list(sides) if rep % 2 == 0 else list(sides)[::-1]):
                us, h = reply(sides[side], trace, table, evict)
                got[side].append(us)
                hashes[side].add(h)
        line = "  ".join(f"{side} {statistics.median(v):.1f}" for side, v in got.items())
        if args.rev:
            ratios = [a / b for a, b in zip(got["tree"], got[args.rev])]
            same = "same drafts" if hashes["tree"] == hashes[args.rev] else "DRAFTS DIFFER"
            line += f"  tree ÷ {args.rev} {statistics.median(ratios):.3f} (median of {len(ratios)} pairs), {same}"
        print(f"{name:14s} {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
