"""Helpers for engine tests: build a decoder / session on real GGUF files and run turns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specchat.engine.calibration import CALIBRATION_ROWS
from specchat.engine.calibration_cache import CalibrationCache
from specchat.engine.chain import DrafterChain
from specchat.engine.chat import ChatSession
from specchat.engine.controls import Controls, ControlState, SamplingParams
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.drafters import ModelDrafter, NgramDrafter
from specchat.engine.events import Piece, Step, Turn
from specchat.engine.model import Model
from specchat.engine.speculative import SpeculativeDecoder
from specchat.engine.suffix import SuffixIndex
from specchat.engine.suffix_drafter import SuffixDrafter
from specchat.engine.telemetry import CostModel


#: a whole verify batch of the largest K in one decode, as the loader sizes it
N_BATCH = K_MAX + 1


def pin_cheap_batches(cost_model: CostModel, per_row: float = 0.1) -> None:
    """Pin the verify costs to a cheap batch (each row past the first ``per_row`` of a single row, at this
    moment's measured t1) and ignore every later timing: auto-K's priced free drafters propose only where a batch
    pays, and on an AMD EPYC (Zen 4 and Zen 5) a batch of 2-4 rows of the bundled Q4_1 costs as much as its rows
    one by one, so a test of what the loop does *when* it drafts must not rest on this CPU's costs. A larger
    batch than the calibration's is timed too, so the decoder does not calibrate over the pin."""
    t1 = cost_model.target_ms()
    assert t1, "pin after a round timed the single row"
    for _ in range(8):
        for rows in sorted({2, 3, *CALIBRATION_ROWS}):
            cost_model.verify.observe(rows, t1 * (1.0 + per_row * (rows - 1)))
    cost_model.verify.observe = lambda rows, ms: None  # type: ignore[method-assign]


def build_decoder(
    target: Path,
    draft: Path | None = None,
    *,
    k: int = 3,
    drafter: str = "model",
    speculative: bool = True,
    sampling: SamplingParams | None = None,
    n_ctx: int = 1024,
    threads: int = 1,  # tiny models: one thread avoids OpenMP spin-waits on a busy 2-core box
    calibration_cache: CalibrationCache | None = None,
    repack: bool | None = None,
) -> SpeculativeDecoder:
    tgt = Model(target, n_ctx=n_ctx, n_batch=N_BATCH, threads=threads, repack=repack)
    drafters = {"ngram": NgramDrafter(1, 4)}
    if drafter == "suffix":  # over an empty history index of its own (a test adds documents: its ``corpus``)
        drafters["suffix"] = SuffixDrafter(SuffixIndex())
    if "," in drafter:  # a drafter chain of these links, e.g. "ngram,model" (the model link on ``draft``)
        links = [NgramDrafter(1, 4) if name == "ngram" else
                 ModelDrafter(Model(draft, n_ctx=n_ctx, n_batch=N_BATCH, threads=threads), name)
                 for name in drafter.split(",")]
        drafters[drafter] = DrafterChain(links)
    elif draft is not None:
        drafters["model"] = ModelDrafter(Model(draft, n_ctx=n_ctx, n_batch=N_BATCH, threads=threads), "model")
    controls = Controls(ControlState(k=k, speculative=speculative, sampling=sampling or SamplingParams()))
    return SpeculativeDecoder(tgt, drafters, controls, drafter=drafter, calibration_cache=calibration_cache)


def run_turn(dec: SpeculativeDecoder, context: list[int], max_new: int, seed: int = 0):
    """Run one generation; return (turn counters, events)."""
    events = []
    gen = dec.generate(context, max_new=max_new, rng=np.random.default_rng(seed))
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return stop.value, events


def session_turn(session: ChatSession, text: str) -> tuple[Turn, list]:
    events = list(session.send(text))
    turns = [e for e in events if isinstance(e, Turn)]
    assert len(turns) == 1, events[-3:]
    return turns[0], events


def steps(events) -> list[Step]:
    return [e for e in events if isinstance(e, Step)]


def pieces(events) -> list[Piece]:
    return [e for e in events if isinstance(e, Piece)]


def plain_then_speculative(session: ChatSession, prompt: str) -> tuple[list[int], list]:
    """``prompt`` with speculation off, then on a fresh conversation with speculation on: (the plain reply's
    ids, the speculative turn's events). Greedy exactness: its accepted ids must equal the plain ones."""
    controls = session.decoder.controls
    controls.set_speculative(False)
    plain = [p.token for p in pieces(session.send(prompt)) if p.kind != "rejected"]
    session.reset()
    controls.set_speculative(True)
    return plain, list(session.send(prompt))


#: the near-tie bound for the tiny test models: their batched and single-row logits differ by up to ~0.017
#: (tests/conftest.py), and ``greedy_prompts`` have no top-2 margin below 0.1
TINY_NEAR_TIE = 0.1


class VerifiedRows:
    """What every position of a model's output was verified with: the logits row that last predicted it.

    Wraps ``model.decode`` (the only way the engine reads logits): after each decode, row i of the returned
    logits predicts position ``len(model.tokens) - logits_last + i + 1``; :attr:`rows` maps that position to a
    copy of the row (:meth:`take` hands them over and starts afresh, e.g. per turn). At temperature 0 the engine
    must emit exactly the argmax of that row (DESIGN: "every emitted token equals the argmax of the logits it
    was verified with"): the invariant a KV-reuse test relies on, where comparing two runs token for token
    cannot. Two runs that split the same tokens into other batches compute slightly different logits (see
    :mod:`specchat.engine.chat`, "Greedy replies and batch sizes"), and at a near-tie the argmax flips.
    """

    def __init__(self, model: Model) -> None:
        self.rows: dict[int, np.ndarray] = {}
        real = model.decode

        def decode(tokens, *, logits_last: int = 1, argmax: bool = False):
            out = real(tokens, logits_last=logits_last)  # the rows, also where the engine asks for their argmax only
            if out is not None and logits_last:
                n = len(model.tokens)
                for i in range(logits_last):
                    self.rows[n - logits_last + i + 1] = out[i].copy()
            return out.argmax(axis=1) if argmax and out is not None else out

        model.decode = decode  # type: ignore[method-assign]

    def take(self) -> dict[int, np.ndarray]:
        rows, self.rows = self.rows, {}
        return rows


def argmax_violations(rows: dict[int, np.ndarray], start: int, tokens: list[int]) -> list[int]:
    """Indices of ``tokens`` (a reply starting at position ``start``) that are not the argmax of their row."""
    return [i for i, tok in enumerate(tokens) if int(rows[start + i].argmax()) != tok]


def assert_same_greedy_reply_up_to_near_ties(
    a: tuple[dict[int, np.ndarray], int, list[int]], b: tuple[dict[int, np.ndarray], int, list[int]], near_tie: float
) -> int | None:
    """Two greedy replies to the same tokens, ``(rows, start position, reply tokens)`` each: every token is the
    argmax of the row it was verified with, and the replies are identical up to their first difference, where
    the two candidates must be within ``near_tie`` of each other in *both* runs' logits (a batch-split
    near-tie, not a cache defect). Returns the index of the first difference, or None."""
    (rows_a, start_a, toks_a), (rows_b, start_b, toks_b) = a, b
    assert argmax_violations(rows_a, start_a, toks_a) == []
    assert argmax_violations(rows_b, start_b, toks_b) == []
    diff = next((i for i, (x, y) in enumerate(zip(toks_a, toks_b)) if x != y), None)
    if diff is None:
        return None
    ta, tb = toks_a[diff], toks_b[diff]
    row_a, row_b = rows_a[start_a + diff], rows_b[start_b + diff]
    gap_a, gap_b = float(row_a[ta] - row_a[tb]), float(row_b[tb] - row_b[ta])
    assert 0 <= gap_a < near_tie and 0 <= gap_b < near_tie, (
        f"the replies differ at token {diff} by more than a near-tie: run A prefers its token by {gap_a:.4f}, "
        f"run B its own by {gap_b:.4f} (near-tie bound {near_tie})"
    )
    return diff


def assert_identical_or_a_near_tie(race) -> None:
    """A race's two greedy texts are the same, or part where the target scores the two tokens within NEAR_TIE
    of each other: the near-tie itself (:attr:`~specchat.race.RaceResult.parting_logits`), not the sentence
    that names it (a defect's sentence, "not a near-tie: a defect", contains "a near-tie" too)."""
    from specchat.race import NEAR_TIE

    if race.identical:
        assert race.parting_logits is None and race.difference == "" and race.off.turn.tokens == race.on.turn.tokens
        return
    assert race.parting_logits is not None, f"the texts part but the target's logits were not measured: {race.difference}"
    off_logit, on_logit = race.parting_logits
    gap = off_logit - on_logit
    assert abs(gap) <= NEAR_TIE, (
        f"the texts part at token {race.first_difference + 1} where the target's logits are {off_logit:.3f} and "
        f"{on_logit:.3f}, {abs(gap):.3f} apart: not a near-tie (bound {NEAR_TIE}): {race.difference}"
    )
    assert not race.defect and "not a near-tie" not in race.difference, race.difference
    if race.first_difference < min(len(race.off.turn.tokens), len(race.on.turn.tokens)):
        assert f"scores them {abs(gap):.2f} apart" in race.difference, race.difference  # the sentence says that gap
