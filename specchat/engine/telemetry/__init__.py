"""Telemetry of speculative decoding: measuring the rounds and predicting what speculation pays.

One concept per module (no llama_cpp, no Textual; all of it is cheap enough to run on every round):

* :mod:`~specchat.engine.telemetry.speedup` - the arithmetic: E(α, K), S(K), the best K, the break-even
  sentence (Leviathan et al. 2023 with a measured verify cost), the least cost of a longer verify;
* :mod:`~specchat.engine.telemetry.counters` - one reply's statistics under llama-server's names
  (:class:`TurnCounters` -> :class:`~specchat.engine.events.Turn`);
* :mod:`~specchat.engine.telemetry.rolling` - the live speed over the most recent rounds (:class:`Rolling`);
* :mod:`~specchat.engine.telemetry.recent` - a robust timing, the median of recent samples;
* :mod:`~specchat.engine.telemetry.verify_cost` - v(K) fitted from timings by row count (:class:`VerifyCost`);
* :mod:`~specchat.engine.telemetry.replay` - a drafter's recent rounds replayed at every cap K;
* :mod:`~specchat.engine.telemetry.cost_model` - α, c and v online, the predicted curve (:class:`CostModel`);
* :mod:`~specchat.engine.telemetry.auto_k` - the policy choosing each round's K (:class:`AutoK`,
  :class:`KDecision`, :class:`KReason`);
* :mod:`~specchat.engine.telemetry.figures` - what a reader is shown: the figures of this reply and of the
  recent window (each from the same rounds), how K was chosen, the sentences that explain them;
* :mod:`~specchat.engine.telemetry.ab` - A/B per (target, drafter) pair over finished replies.

The names below are the package's public API; import them from here.
"""

from specchat.engine.telemetry.auto_k import AutoK, KDecision, KReason
from specchat.engine.telemetry.cost_model import AlphaWindow, CostModel
from specchat.engine.telemetry.counters import TurnCounters
from specchat.engine.telemetry.replay import natural_length, replay_speedups
from specchat.engine.telemetry.rolling import Rolling
from specchat.engine.telemetry.speedup import (
    CheapestFrom,
    best_k,
    break_even_alpha,
    break_even_line,
    cheapest_from,
    expected_tokens,
    predicted_speedup,
    speedup_curve,
)
from specchat.engine.telemetry.verify_cost import MAX_ROWS, VerifyCost, verify_reason

__all__ = [
    "MAX_ROWS",
    "AlphaWindow",
    "AutoK",
    "CheapestFrom",
    "CostModel",
    "KDecision",
    "KReason",
    "Rolling",
    "TurnCounters",
    "VerifyCost",
    "best_k",
    "break_even_alpha",
    "break_even_line",
    "cheapest_from",
    "expected_tokens",
    "natural_length",
    "predicted_speedup",
    "replay_speedups",
    "speedup_curve",
    "verify_reason",
]
