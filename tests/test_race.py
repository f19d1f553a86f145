"""The race (issue 11): the same message with speculation off, then on, recorded with timestamps; the replay by
an injected clock, exact to the recorded times; ``specchat race`` headless."""

from __future__ import annotations

import json

import pytest

from enginekit import assert_identical_or_a_near_tie, build_decoder
from specchat.cli import main
from specchat.engine.chat import ChatSession
from specchat.engine.controls import SamplingParams
from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.race import RaceCancelled, RaceReplay, RaceResult, RaceRun, TimedPiece, play, record_race, timeline

COPY = "Repeat this line exactly, twice: the quick brown fox jumps over the lazy dog near the river bank."


def _turn(tokens: list[int]) -> Turn:
    return Turn(prompt_n=1, prompt_ms=1.0, predicted_n=len(tokens), predicted_ms=1.0, predicted_per_second=1.0,
                draft_n=0, draft_n_accepted=0, acceptance=None, mean_len=1.0, accepted_per_pos=[],
                draft_ms_per_step=0.0, verify_ms_per_step=0.0, overhead_ms=0.0, step_ms=1.0, n_steps=1,
                n_spec_steps=0, stop_reason="eos", text="", tokens=tokens)


def _race() -> RaceResult:
    off = RaceRun("off", tuple(TimedPiece(t, "x", "plain", 1) for t in (0.10, 0.20, 0.30, 0.40)), _turn([1] * 4), 0.45)
    on = RaceRun(
        "on",
        (TimedPiece(0.12, "a", "accepted", 1), TimedPiece(0.12, "b", "rejected", 2), TimedPiece(0.12, "x", "corrected", 1),
         TimedPiece(0.20, "y", "bonus", 1), TimedPiece(0.25, "z", "plain", 1)),
        _turn([1] * 4), 0.27,
    )
    return RaceResult("p", "t", "ngram", 4, off, on)


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_replay_hands_out_exactly_the_pieces_recorded_by_now():
    race, clock = _race(), FakeClock()
    replay = RaceReplay(race, clock)
    assert replay.due() == [] and not replay.started
    replay.start()
    assert replay.due() == [] and replay.next_at() == pytest.approx(100.10)
    clock.t = 100.0999
    assert replay.due() == []  # 0.1 ms early: nothing
    clock.t = 100.10
    assert [(e.lane, e.piece.t) for e in replay.due()] == [("off", 0.10)]
    clock.t = 100.12
    assert [(e.lane, e.piece.kind) for e in replay.due()] == [("on", "accepted"), ("on", "rejected"), ("on", "corrected")]
    clock.t = 100.20  # a tie goes to the baseline lane first
    assert [(e.lane, e.piece.t) for e in replay.due()] == [("off", 0.20), ("on", 0.20)]
    assert not replay.finished("on")
    clock.t = 100.27
    assert [(e.lane, e.piece.t) for e in replay.due()] == [("on", 0.25)]
    assert replay.finished("on") and not replay.finished("off") and not replay.done
    clock.t = 101.0
    assert [e.piece.t for e in replay.due()] == [0.30, 0.40]
    assert replay.due() == [] and replay.next_at() is None and replay.done
    # every piece exactly once, in time order
    assert [e.piece.t for e in timeline(race)] == sorted(e.piece.t for e in timeline(race))
    assert len(timeline(race)) == 9


def test_replay_speed_and_the_blocking_player():
    race, clock = _race(), FakeClock(0.0)
    fast = RaceReplay(race, clock, speed=2.0)
    fast.start()
    clock.t = 0.06  # 0.06 s of replay at 2x = 0.12 s of race
    assert len(fast.due()) == 4
    slept = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.t += s

    clock.t = 0.0
    events = list(play(race, clock, sleep))
    assert len(events) == 9 and clock.t == pytest.approx(0.45)  # it waits for the slower lane to end
    assert all(s > 0 for s in slept)
    with pytest.raises(ValueError):
        RaceReplay(race, clock, speed=0)


def test_a_race_on_the_bundled_model(bundled_model):
    """Greedy, so both runs give the same text (or part at a near-tie, which is said); the speculative run drafts;
    timestamps start at each run's generation and only grow; the conversation and controls are as before."""
    dec = build_decoder(bundled_model, drafter="ngram", k=4, n_ctx=1024)
    session = ChatSession(dec, n_predict=40)
    try:
        session.controls.set_sampling(SamplingParams(temperature=0.8, seed=1))
        earlier = [Message("user", "Hi"), Message("assistant", "Hello!", tokens=[19556, 17], kinds=["plain", "plain"])]
        session.load(earlier)
        seen = []
        race = record_race(session, COPY, k=4, on_piece=lambda lane, p: seen.append(lane))
        assert race.off.turn.draft_n == 0 and race.on.turn.draft_n > 0
        assert {p.kind for p in race.off.pieces} == {"plain"}
        for run in (race.off, race.on):
            ts = [p.t for p in run.pieces]
            assert ts == sorted(ts) and ts[0] >= 0.0 and ts[-1] <= run.t_end
            assert "".join(p.text for p in run.pieces if p.kind != "rejected") == run.text
        assert seen == ["off"] * len(race.off.pieces) + ["on"] * len(race.on.pieces)
        # the texts may part only at a near-tie of batch-size numerics: the target's two logits there
        assert_identical_or_a_near_tie(race)
        if race.identical:
            assert race.off.text == race.on.text
        assert race.ratio == pytest.approx(race.on.tok_s / race.off.tok_s)
        # the caller's conversation and controls are untouched
        assert session.messages == earlier
        st = session.controls.snapshot()
        assert (st.k, st.speculative, st.auto_k, st.sampling.temperature) == (4, True, False, 0.8)
    finally:
        session.close()


def test_a_cancelled_race_stops_within_a_round_and_restores_the_conversation(bundled_model):
    """Cancelled at every kind of moment - before the first run, during the baseline, on the speculative run's
    first piece (right after the baseline ended: a stop request made between the runs alone would be cleared
    when the second run starts), during the speculative run, and by a plain stop request (Esc in the app) -
    the race raises RaceCancelled within one round of the request, and the conversation and the controls are as
    before. The session then answers a normal message as usual."""
    dec = build_decoder(bundled_model, drafter="ngram", k=4, n_ctx=1024)
    session = ChatSession(dec, n_predict=24)
    try:
        earlier = [Message("user", "Hi"), Message("assistant", "Hello!", tokens=[19556, 17], kinds=["plain", "plain"])]
        session.load(earlier)
        # (lane, piece index) at which the cancel is asked for; None: before anything ran
        for at in [None, ("off", 0), ("off", 5), ("on", 0), ("on", 3)]:
            seen: list[tuple[str, int]] = []
            flag = {"cancel": at is None}

            def on_piece(lane, piece, at=at, seen=seen, flag=flag):
                seen.append((lane, sum(1 for s in seen if s[0] == lane)))
                if seen[-1] == at:
                    flag["cancel"] = True

            with pytest.raises(RaceCancelled):
                record_race(session, COPY, k=4, on_piece=on_piece, cancelled=lambda flag=flag: flag["cancel"])
            if at is None:
                assert seen == []
            else:
                lane, i = at
                after = [s for s in seen if s[0] == lane and s[1] > i]
                assert len(after) <= 4 + 1  # the round in flight (at most K drafts + 1) ends, then the run stops
                assert "on" not in [s[0] for s in seen] or lane == "on"  # a cancelled baseline starts no second run
            assert session.messages == earlier
            st = session.controls.snapshot()
            assert (st.k, st.speculative, st.auto_k, st.sampling.temperature) == (4, True, False, 0.0)
        # a stop request during a run (Esc) cancels too, rather than racing a stopped baseline
        with pytest.raises(RaceCancelled):
            record_race(session, COPY, k=4, on_piece=lambda lane, p: session.controls.request_stop())
        assert session.messages == earlier
        events = list(session.send("Say hello."))
        assert events[-1].stop_reason in ("eos", "length") and session.messages[-1].role == "assistant"
    finally:
        session.close()


def test_a_parting_is_judged_by_the_target(bundled_model):
    """Where the runs part, the target scores both tokens: its runner-up is a near-tie exactly when the logit gap
    is within NEAR_TIE, its least likely token is a defect (and the result says so)."""
    from dataclasses import replace

    import numpy as np

    from specchat.race import NEAR_TIE, local_difference
    from specchat.race.verdict import local_parting

    dec = build_decoder(bundled_model, drafter="ngram", k=4, n_ctx=1024)
    session = ChatSession(dec, n_predict=8)
    try:
        race = record_race(session, COPY, k=4)
        prompt_ids = session.template.tokens([Message("user", COPY)])
        at = 3
        dec.reset()
        row = np.asarray(dec.target.decode(prompt_ids + list(race.off.turn.tokens[:at]), logits_last=1)[0])
        dec.reset()
        ranked = [int(t) for t in np.argsort(-row)]
        assert ranked[0] == race.off.turn.tokens[at]  # greedy: the target's own first choice

        def on_chose(token: int) -> RaceRun:
            tokens = list(race.on.turn.tokens)
            tokens[at] = token
            return replace(race.on, turn=replace(race.on.turn, tokens=tokens))

        for token in (ranked[1], ranked[-1]):
            gap = float(row[ranked[0]] - row[token])
            first, difference = local_difference(session, prompt_ids, race.off, on_chose(token))
            assert first == at and f"the texts part at token {at + 1}" in difference
            assert f"scores them {gap:.2f} apart" in difference
            _, _, logits = local_parting(session, prompt_ids, race.off, on_chose(token))  # the near-tie itself
            assert logits == pytest.approx((float(row[ranked[0]]), float(row[token])), abs=1e-3)
            assert ("not a near-tie: a defect" in difference) == (gap > NEAR_TIE)
            assert replace(race, first_difference=first, difference=difference).defect == (gap > NEAR_TIE)
        assert row[ranked[0]] - row[ranked[-1]] > NEAR_TIE
        shorter = replace(race.on, turn=replace(race.on.turn, tokens=list(race.on.turn.tokens[:at])))
        assert local_difference(session, prompt_ids, race.off, shorter) == (
            at, f"one reply stopped after {at} tokens and the other went on: the end-of-text token was a near-tie"
        )
    finally:
        session.close()


def test_specchat_race_json(capsys, isolated_config):
    rc = main(["race", "--prompt", COPY, "--k", "4", "--n-predict", "24", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["k"] == 4 and data["auto_k"] is False and data["drafter"] == "ngram"
    assert data["off"]["draft_n"] == 0 and data["on"]["tokens"] > 0
    assert data["identical"] == (data["off"]["text"] == data["on"]["text"])
    assert data["ratio"] == pytest.approx(data["on"]["tok_s"] / data["off"]["tok_s"])
    assert all(len(p) == 4 for p in data["on"]["pieces"])


def test_specchat_race_text(capsys, isolated_config):
    assert main(["race", "--prompt", "Say hi.", "--auto-k", "--n-predict", "8"]) == 0
    out, _ = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("race: SmolLM2-135M-Instruct.Q4_1.gguf + ngram, auto-K, greedy")
    assert lines[1].startswith("speculation off: ") and lines[2].startswith("speculation on : ")
    assert lines[3].startswith("ratio: ") and lines[4].startswith("texts: ")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--draft", "none"], "--draft none leaves nothing to race"),
        (["--k", "0"], "--k 0 is out of range: a race drafts"),
        (["--n-predict", "0"], "--n-predict 0 must be a positive number"),
        (["--prompt", " "], "--prompt is empty"),
    ],
)
def test_specchat_race_bad_input_is_one_line(capsys, isolated_config, args, message):
    argv = ["race", "--prompt", "hi", *args] if args[0] != "--prompt" else ["race", *args]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_specchat_race_k_and_auto_k_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["race", "--prompt", "hi", "--k", "3", "--auto-k"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
