"""What one target decode costs after a decode of another shape: the verify prices the loop really pays.

    .venv/bin/python tests/perf/decode_shapes.py [--reps 12] [--threads 1] [--target bundled] [--depth 300]

llama.cpp reuses a decode's compute graph only for a batch of the same shape (``llm_graph_result::can_reuse``), so
a speculative loop's single-row round right after a drafting round's verify pays a graph rebuild that no verify
timing carries, and its drafting rounds are priced by v(K) = t(K + 1 rows) / t(1 row) from the cost model's fit
(:class:`~specchat.engine.telemetry.verify_cost.VerifyCost`). This script decodes, at one context depth, single rows
after single rows (the plain rounds), batches of 2 and 4 rows after a single row (a verify) and the single row after
each (the next plain round), and the engine's calibration batches (:func:`~specchat.engine.calibration.calibrate_verify_cost`:
scratch decodes of one token repeated), then prints each one's median ms and, last, the v(K) the cost model fits from
a calibration timed here, beside the ratio the loop's shapes measured. Not a test: it asserts no time.

Measured on an AMD EPYC Zen 4 (Genoa, CPU family 25 model 17, KVM, ``--threads 1``), bundled Q4_1, 2026-12-07: a
single row 12.53 ms after a single row and 13.00-13.14 ms after a batch (+0.5-0.6 ms: the rebuild the drafting
round leaves to the next plain round); 2 rows 24.98 ms (1.99 single rows), 4 rows 40.38 ms (3.22); the calibration's
shapes cost the same (2 rows 25.15 ms), while the cost model's fit priced 2 rows at 1.82 and 4 rows at 2.87 (its
row medians are shrunk toward a line that lies under this CPU's concave curve: README, issue 20).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from specchat.bench.suite import DEFAULT_SUITE  # noqa: E402
from specchat.config.schema import Settings  # noqa: E402
from specchat.engine.calibration import calibrate_verify_cost  # noqa: E402
from specchat.engine.telemetry import CostModel  # noqa: E402
from specchat.loading import load_engine  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--target", default="bundled", help="a .gguf, a derived name, or 'bundled'")
    ap.add_argument("--depth", type=int, default=300, help="context tokens decoded before the timings")
    args = ap.parse_args()
    session = load_engine(Settings(threads=args.threads, target=args.target))
    model = session.decoder.target
    text = " ".join(p["prompt"] for p in DEFAULT_SUITE)
    ids = model.tokenize(text * (1 + (args.depth + 200) // max(1, len(model.tokenize(text)))))
    model.decode(ids[: args.depth], logits_last=1)
    base = len(model.tokens)
    tok = ids[args.depth :]
    times: dict[str, list[float]] = {}

    def decode(label: str, tokens: list[int]) -> None:
        t0 = time.perf_counter()
        model.decode(tokens, logits_last=len(tokens), argmax=True)
        times.setdefault(label, []).append((time.perf_counter() - t0) * 1000.0)

    for _ in range(args.reps):
        model.trim(base)
        for i in range(4):
            decode("1 row after 1 row" if i >= 2 else "(warm-up)", tok[i : i + 1])
        decode("2 rows after 1 row", tok[4:6])
        decode("1 row after 2 rows", tok[6:7])
        decode("1 row after 1 row", tok[7:8])
        decode("4 rows after 1 row", tok[8:12])
        decode("1 row after 4 rows", tok[12:13])
        decode("1 row after 1 row", tok[13:14])
        decode("2 rows after 2 rows", tok[14:16])
        decode("2 rows after 2 rows", tok[16:18])
    times.pop("(warm-up)")
    model.trim(base)
    cm = CostModel()
    timings = calibrate_verify_cost(model, cm, tok[0])  # as the engine times it: every CALIBRATION_ROWS size twice
    for r in (1, 2, 3, 5):
        times[f"calibration: {r} row(s)"] = [ms for n, ms in timings if n == r]
    one = statistics.median(times["1 row after 1 row"])
    print(f"{model.weights}, --threads {args.threads}, depth {base}: median ms of {args.reps} each")
    for label, ms in times.items():
        print(f"  {label:26s} {statistics.median(ms):7.2f} ms  {statistics.median(ms) / one:5.2f} single rows")
    cm.verify.observe(1, one)  # the plain rounds' single row, as the loop gives it to the fit
    print("  the cost model's fit of that calibration: " + ", ".join(f"v({k}) = {cm.v(k):.2f}" for k in (1, 2, 3, 4)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
