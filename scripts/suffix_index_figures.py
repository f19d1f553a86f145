"""The suffix index's scale figures (issue 23): build, save/load, add a reply, a lookup, bytes per token.

Generates a synthetic history - ``--conversations`` conversations of ``--tokens`` tokens on average, drawn from a
Zipf-distributed vocabulary of 49,152 ids (SmolLM2's size) with ~30 % of each reply copied from earlier replies of
its "task", as repeated work would - then times one build, one save and one load, the mean of 200 adds of a
500-token reply and the median of 2,000 lookups (contexts taken from the corpus and from fresh text). One core:
run it under ``taskset -c 1``. Prints the figures, the CPU model and the load average (on a shared machine the
wall times include waiting for the core; the build's and load's CPU time is printed beside them).

    taskset -c 1 python scripts/suffix_index_figures.py --conversations 10000 --tokens 500
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from specchat.engine.suffix import SuffixIndex


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def synthetic_docs(n_docs: int, mean_tokens: int, seed: int = 0) -> list[tuple[tuple[int, int], np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    vocab = 49_152
    docs = []
    tasks: dict[int, list[np.ndarray]] = {}
    for i in range(n_docs):
        n = max(8, int(rng.exponential(mean_tokens)))
        toks = (rng.zipf(1.3, n) - 1) % vocab
        task = int(rng.integers(0, 200))
        earlier = tasks.setdefault(task, [])
        if earlier and n > 40:  # a repeated task: copy a stretch of an earlier reply of the same kind
            src = earlier[int(rng.integers(0, len(earlier)))]
            m = min(len(src), int(0.3 * n))
            at = int(rng.integers(0, n - m + 1))
            toks[at : at + m] = src[:m]
        earlier.append(toks)
        docs.append(((i // 2, i), toks.astype(np.int32), 0))
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conversations", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=500, help="mean tokens per message")
    args = ap.parse_args()
    docs = synthetic_docs(args.conversations, args.tokens)
    total = sum(len(t) for _k, t, _c in docs)
    t0, c0 = time.perf_counter(), time.process_time()
    index = SuffixIndex.build(docs)
    build_s, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    nbytes = index.nbytes()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.npz"
        t0 = time.perf_counter()
        index.save(path)
        save_s = time.perf_counter() - t0
        t0, c0 = time.perf_counter(), time.process_time()
        index, _meta = SuffixIndex.load(path)
        load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
        file_bytes = path.stat().st_size
    rng = np.random.default_rng(1)
    adds = []
    for i in range(200):
        reply = ((rng.zipf(1.3, 500) - 1) % 49_152).tolist()
        t0 = time.perf_counter()
        index.add((10**9, i), reply)
        adds.append(time.perf_counter() - t0)
    looks = []
    hits = 0
    for i in range(2000):
        if i % 2:
            _k, src, _c = docs[int(rng.integers(0, len(docs)))]
            if len(src) < 70:
                continue
            at = int(rng.integers(64, len(src)))
            ctx = src[at - 64 : at].tolist()
        else:
            ctx = ((rng.zipf(1.3, 64) - 1) % 49_152).tolist()
        t0 = time.perf_counter()
        cand = index.lookup(ctx, 64)
        looks.append(time.perf_counter() - t0)
        hits += cand is not None and bool(cand.tokens)
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"CPU: {cpu_name()}, one core (load average {load1:.1f} on {os.cpu_count()} cores)")
    print(f"corpus: {len(docs):,} messages, {total:,} tokens")
    print(f"build: {build_s:.2f} s ({build_cpu:.2f} s CPU)   save: {save_s:.2f} s   load: {load_s:.2f} s ({load_cpu:.2f} s CPU;"
          f" {file_bytes / total:.1f} B/token on disk)")
    print(f"memory: {nbytes / total:.1f} bytes per indexed token ({nbytes / 2**20:.0f} MiB)")
    adds.sort()
    print(f"add a 500-token reply: mean {statistics.fmean(adds) * 1e3:.2f} ms, median {adds[len(adds) // 2] * 1e3:.2f} ms,"
          f" p95 {adds[int(0.95 * len(adds))] * 1e3:.2f} ms, max {adds[-1] * 1e3:.2f} ms")
    print(f"lookup: median {statistics.median(looks) * 1e3:.3f} ms, p95 {sorted(looks)[int(0.95 * len(looks))] * 1e3:.3f} ms"
          f" ({hits} of {len(looks)} drafted)")


if __name__ == "__main__":
    main()
