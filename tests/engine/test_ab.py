"""A/B per (target, drafter) pair (issue 11): replies grouped by pair and by how they ran, never mixing pairs;
a reply whose drafter barely ran is not "speculation on" evidence."""

from __future__ import annotations

import pytest

from specchat.engine.events import Turn
from specchat.engine.telemetry.ab import BARELY_RAN_SHARE, ab_summary, barely_ran, turn_mode


def turn(target: str, drafter: str, *, on: int, steps: int = 20, drafting: int | None = None, tokens: int = 40,
         ms: float = 400.0, drafted: int = 0, accepted: int = 0, speculative: bool | None = None) -> Turn:
    drafting = (steps if on else 0) if drafting is None else drafting
    return Turn(
        prompt_n=5, prompt_ms=1.0, predicted_n=tokens, predicted_ms=ms, predicted_per_second=tokens / ms * 1000 if ms else 0.0,
        draft_n=drafted, draft_n_accepted=accepted, acceptance=accepted / drafted if drafted else None, mean_len=1.0,
        accepted_per_pos=[], draft_ms_per_step=0.0, verify_ms_per_step=0.0, overhead_ms=0.0, step_ms=ms,
        n_steps=steps, n_spec_steps=drafting, stop_reason="length", text="x", target=target, drafter=drafter,
        speculative=bool(on) if speculative is None else speculative, spec_on_steps=on,
    )


def test_turn_modes_and_the_barely_ran_rule() -> None:
    assert turn_mode(turn("t", "ngram", on=0)) == "off"
    assert turn_mode(turn("t", "ngram", on=20, drafting=12, drafted=30)) == "on"
    assert turn_mode(turn("t", "ngram", on=8)) == "mixed"  # switched mid-reply: neither
    # auto-K kept a costly drafter off and probed once in 20 rounds: speculation "on", drafter barely ran
    probed = turn("t", "draft.gguf", on=20, drafting=1, drafted=3)
    assert turn_mode(probed) == "barely" and barely_ran(probed)
    edge = int(BARELY_RAN_SHARE * 20)  # 2 of 20 rounds drafted: exactly at the threshold, it ran
    assert turn_mode(turn("t", "ngram", on=20, drafting=edge, drafted=4)) == "on"
    # drafting every round with everything rejected is evidence (that it hurts), not "barely ran"
    assert turn_mode(turn("t", "skip", on=20, drafting=20, drafted=80, accepted=0)) == "on"
    # a reply saved before Turn counted rounds per setting: its speculation flag stands for every round
    assert turn_mode(turn("t", "ngram", on=0, drafting=15, drafted=40, speculative=True)) == "on"


def test_ab_summary_never_mixes_pairs() -> None:
    turns = [
        turn("bundled", "ngram", on=0, tokens=100, ms=1000.0),  # 100 tok/s baseline of (bundled, ngram)
        turn("bundled", "ngram", on=20, drafting=15, tokens=150, ms=1000.0, drafted=90, accepted=70),
        turn("bundled", "self", on=20, drafting=20, tokens=60, ms=1000.0, drafted=80, accepted=80),
        turn("bundled", "self", on=0, tokens=120, ms=1000.0),  # this pair's own baseline: 120 tok/s
        turn("f16", "ngram", on=20, drafting=10, tokens=300, ms=1000.0, drafted=40, accepted=30),  # no baseline
        turn("bundled", "ngram", on=20, drafting=1, tokens=99, ms=1000.0, drafted=2, accepted=1),  # barely ran
        turn("bundled", "ngram", on=5, tokens=10, ms=100.0),  # mixed
        turn("bundled", "ngram", on=0, tokens=0, ms=0.0),  # stopped before a token: no speed
    ]
    rows = ab_summary(turns)
    by = {(r.target, r.drafter, r.mode): r for r in rows}
    assert [(r.target, r.drafter, r.mode) for r in rows] == [
        ("bundled", "ngram", "off"), ("bundled", "ngram", "on"), ("bundled", "ngram", "barely"),
        ("bundled", "ngram", "mixed"), ("bundled", "self", "off"), ("bundled", "self", "on"), ("f16", "ngram", "on"),
    ]
    assert by["bundled", "ngram", "off"].turns == 1 and by["bundled", "ngram", "off"].ratio is None
    assert by["bundled", "ngram", "on"].ratio == pytest.approx(1.5)
    assert by["bundled", "ngram", "on"].drafted == 90 and by["bundled", "ngram", "on"].accepted == 70
    assert by["bundled", "ngram", "barely"].ratio == pytest.approx(0.99)
    assert by["bundled", "ngram", "mixed"].ratio is None
    # the self-draft is compared with its own baseline (120 tok/s), never with the n-gram pair's (100)
    assert by["bundled", "self", "on"].ratio == pytest.approx(60 / 120)
    # a pair without a baseline has no ratio rather than someone else's
    assert by["f16", "ngram", "on"].ratio is None
    assert by["bundled", "self", "on"].tokens == 60 and by["bundled", "ngram", "on"].tokens == 150
    assert sum(r.turns for r in rows) == len(turns) - 1  # all but the reply without a speed
