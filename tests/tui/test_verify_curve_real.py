"""The target's verify cost reaches the TUI (issue 12), on the real engine (the tiny generated GGUF): the v(K)
curve and its reason in words ride on ``EngineInfo.verify`` (before the first turn, from this file's cached
calibration) and on every ``StatsUpdated``'s ``snapshot.cost.verify`` (the live curve), through the pump the app
runs on its engine thread. These are the fields the sidebar and the glossary read."""

from __future__ import annotations

import time
from pathlib import Path

from specchat.config import Settings
from specchat.engine.drafter_kinds import K_MAX
from specchat.loading import load_engine
from specchat.tui.generation import pump_turn
from specchat.tui.messages import StatsUpdated
from specchat.tui.stats import LiveStats

from tinymodels import GREEDY_PROMPTS


def test_the_verify_curve_and_its_reason_reach_the_tui_through_events(tmp_path: Path, tiny_target: Path) -> None:
    settings = Settings(target=str(tiny_target), draft="ngram", auto_k=True, n_predict=16, n_ctx=512, threads=1,
                        data_dir=tmp_path)
    first = load_engine(settings)
    try:
        info = first.info()
        assert info.weights == "F32" and info.verify is not None and info.verify.source == "prior"
        posted: list = []
        turn = pump_turn(1, first.send(GREEDY_PROMPTS[0]), posted.append, LiveStats(), time.perf_counter)
        assert turn is not None
        costs = [m.snapshot.cost for m in posted if isinstance(m, StatsUpdated) and m.snapshot.cost is not None]
        assert costs, "no StatsUpdated carried the cost model's view"
        curve = costs[-1].verify
        assert curve is not None and curve.source == "measured" and curve.weights == "F32"
        assert len(curve.v) == K_MAX + 1 and curve.v[0] == 1.0 and curve.measured_rows == K_MAX + 1
        assert curve.reason.startswith("F32: ") and "verifying 17 rows costs" in curve.reason
        assert first.info().verify == first.decoder.verify  # EngineInfo follows the live curve
    finally:
        first.close()
    second = load_engine(settings)  # the same file, threads and CPU: the app starts warm
    try:
        warm = second.info().verify
        assert warm is not None and warm.source == "cache" and warm.measured_rows == K_MAX + 1
        assert warm.reason.startswith("F32: ") and "verifying 17 rows costs" in warm.reason
    finally:
        second.close()
