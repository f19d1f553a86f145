"""Helpers for engine tests: build a decoder / session on real GGUF files and run turns."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specchat.engine.calibration_cache import CalibrationCache
from specchat.engine.chat import ChatSession
from specchat.engine.controls import Controls, ControlState, SamplingParams
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.drafters import ModelDrafter, NgramDrafter
from specchat.engine.events import Piece, Step, Turn
from specchat.engine.model import Model
from specchat.engine.speculative import SpeculativeDecoder


#: a whole verify batch of the largest K in one decode, as the loader sizes it
N_BATCH = K_MAX + 1


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
) -> SpeculativeDecoder:
    tgt = Model(target, n_ctx=n_ctx, n_batch=N_BATCH, threads=threads)
    drafters = {"ngram": NgramDrafter(1, 4)}
    if draft is not None:
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
