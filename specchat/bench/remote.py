"""``specchat bench --server URL``: the same runs, records, table and JSON, measured on a llama-server.

A llama-server's speculation is fixed by its own flags (see :mod:`specchat.engine.remote`), so there is no
baseline to pair with on the same server: every run measures the server as it is configured - mode
``spec`` with the server's K if it speculates, ``baseline`` (K = 0) if not - and ``speedup`` stays empty
(compare two benches, or two servers once the A/B of servers exists). The cost-model arithmetic needs this
machine's own decodes and is skipped. Every run starts a fresh conversation with the server's prompt cache
off (``"cache_prompt": false``), so each run processes its prompt like the first - the counterpart of the
local bench clearing its KV caches. If the server's K is not known yet (``/metrics`` lists it once the
server has speculated), one unrecorded warm-up reply comes first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specchat.bench.runner import PlanItem, RunStats, measure_reply


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


__all__ = ["remote_plan", "run_remote_once"]
