"""``specchat bench --server URL``: the same runs, records, table and JSON, measured on a llama-server; with
``--server-b URL`` two llama-servers on one suite, interleaved, and the ratio B / A.

A llama-server's speculation is fixed by its own flags (see :mod:`specchat.engine.remote`), so there is no
baseline to pair with on the same server: every run measures the server as it is configured - mode
``spec`` with the server's K if it speculates, ``baseline`` (K = 0) if not - and ``speedup`` stays empty
(compare two benches, or two servers once the A/B of servers exists). The cost-model arithmetic needs this
machine's own decodes and is skipped. Every run starts a fresh conversation with the server's prompt cache
off (``"cache_prompt": false``), so each run processes its prompt like the first - the counterpart of the
local bench clearing its KV caches. If the server's K is not known yet (``/metrics`` lists it once the
server has speculated), one unrecorded warm-up reply comes first.

**Two servers** (``--server A --server-b B``, e.g. B the same model without speculation): each is measured as
configured, on the same suite, interleaved by prompt and run - A B A B ..., the counterpart of the local
bench's baseline/speculation pairs: slow drift of a shared machine hits both runs of a pair alike, and the
two never run at once. The A and B runs of one (prompt, run) form a pair; the ratio is B's tok/s / A's per
pair, summarised per prompt and over all pairs as the median (with min..max), like the local speedup.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specchat.bench.progress import Progress
from specchat.bench.runner import PlanItem, RunStats, make_record, measure_reply


def remote_plan(suite: Sequence[dict[str, str]], runs: int, k: int) -> list[PlanItem]:
    """``runs`` runs of every prompt in the server's one mode (``spec`` with K = k, or ``baseline`` for k = 0)."""
    mode = "spec" if k > 0 else "baseline"
    plan = []
    for item in suite:
        for r in range(runs):
            plan.append(PlanItem(item["name"], mode, k, r, len(plan)))
    return plan


def run_remote_once(session: Any, prompt: str, mode: str, k: int | None) -> tuple[Any, RunStats]:
    """One measured reply on a fresh conversation; ``mode`` and ``k`` are the server's own (nothing to set)."""
    session.reset()
    return measure_reply(session, prompt)


@dataclass(frozen=True, slots=True)
class BenchServer:
    """One side of a bench of two servers: ``name`` "A" or "B", its session and its K (0: no speculation)."""

    name: str
    session: Any
    k: int
    drafter: str


def ab_plan(suite: Sequence[dict[str, str]], runs: int, a: BenchServer, b: BenchServer) -> list[tuple[BenchServer, PlanItem]]:
    """Per prompt, per run index: A's run, then B's, sharing one pair index (A B A B ...)."""
    plan: list[tuple[BenchServer, PlanItem]] = []
    pair = 0
    for item in suite:
        for r in range(runs):
            for server in (a, b):
                mode = "spec" if server.k > 0 else "baseline"
                plan.append((server, PlanItem(item["name"], mode, server.k, r, pair)))
            pair += 1
    return plan


def run_ab(
    plan: Sequence[tuple[BenchServer, PlanItem]],
    prompts: dict[str, str],
    *,
    progress: Progress | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """Run the plan; returns each server's records (by name) and whether a KeyboardInterrupt stopped it (what
    was measured is kept). ``on_record(record)`` is called after each run (its ``server`` key names it)."""
    records: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    try:
        for i, (server, item) in enumerate(plan):
            if progress:
                progress(i, len(plan), f"{item.prompt} server {server.name} run {item.run + 1}")
            turn, stats = run_remote_once(server.session, prompts[item.prompt], item.mode, item.k)
            record = make_record(item, turn, stats, server.drafter)
            records[server.name].append(record)
            if on_record:
                on_record({**record, "server": server.name})
        if progress:
            progress(len(plan), len(plan), "done")
    except KeyboardInterrupt:
        return records, True
    return records, False


def _ratio_summary(ratios: list[float]) -> dict[str, Any]:
    if not ratios:
        return {"b_over_a": None, "min": None, "max": None, "pairs": 0}
    return {"b_over_a": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "pairs": len(ratios)}


def ab_ratios(a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """B's tok/s / A's for every pair both measured (a pair whose A run has no speed is left out), and their
    median, min and max per prompt and over all pairs."""
    a_of = {r["pair"]: r for r in a}
    pairs = []
    for rb in b:
        ra = a_of.get(rb["pair"])
        if ra is not None and ra["predicted_per_second"] > 0:
            pairs.append({"prompt": rb["prompt"], "run": rb["run"], "pair": rb["pair"],
                          "b_over_a": rb["predicted_per_second"] / ra["predicted_per_second"]})
    prompts = list(dict.fromkeys(p["prompt"] for p in pairs))
    per_prompt = [{"prompt": name, **_ratio_summary([p["b_over_a"] for p in pairs if p["prompt"] == name])} for name in prompts]
    return {**_ratio_summary([p["b_over_a"] for p in pairs]), "per_prompt": per_prompt, "per_pair": pairs}


def format_ratios(ratios: dict[str, Any]) -> str:
    """The ratio table: per prompt and over all pairs, B / A as the median of the pair ratios."""
    rows = [*ratios["per_prompt"], {"prompt": "all prompts", **{k: v for k, v in ratios.items() if k not in ("per_prompt", "per_pair")}}]
    w = max(12, *(len(r["prompt"]) for r in rows))
    lines = [f"{'prompt':<{w}} {'B / A':>7} {'(pair min..max)':>16} {'pairs':>5}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        if r["b_over_a"] is None:
            lines.append(f"{r['prompt']:<{w}} {'-':>7} {'':>16} {r['pairs']:>5}")
        else:
            rng = f"{r['min']:.2f}..{r['max']:.2f}"
            lines.append(f"{r['prompt']:<{w}} {r['b_over_a']:>6.2f}× {rng:>16} {r['pairs']:>5}")
    return "\n".join(lines)


__all__ = ["BenchServer", "ab_plan", "ab_ratios", "format_ratios", "remote_plan", "run_ab", "run_remote_once"]
