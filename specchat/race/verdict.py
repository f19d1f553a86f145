"""The verdict on a race's texts: where the two replies part, and whether that is a near-tie of the
numerics or a defect.

**Same text.** Greedy speculative decoding keeps exactly the target's argmax, so both texts should be
identical and only the speed differ. Verified: when the token ids part, :func:`record_race` measures the
target's preference between the two tokens where they part; a gap within :data:`NEAR_TIE` is the batch-size
numerics described in :mod:`specchat.engine.chat` ("Greedy replies and batch sizes": a verify batch's logits
differ from single-row decoding by up to ~0.9 on the bundled model, so at a near-tie the argmax can flip),
said in :attr:`RaceResult.difference`; anything larger would be a defect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING


if TYPE_CHECKING:  # only annotations: the runs are recorded by specchat.race.record, which imports this module
    from specchat.engine.chat import ChatSession
    from specchat.engine.remote import RemoteSession
    from specchat.race.record import RaceRun

#: how many of server A's most likely tokens are asked for where two same-weights replies part
SERVER_TOP_N = 40
#: logit gaps up to this are near-ties that batch-size numerics can flip (measured up to 0.86 between batch
#: splits on the bundled SmolLM2: specchat.engine.chat); a larger gap where the texts part would be a defect
NEAR_TIE = 1.0


def _first_difference(off: RaceRun, on: RaceRun) -> int | None:
    """The index of the first token where the two replies differ (by id), None when they are identical.

    A reply of a llama-server may hold an id it never named (-1: :mod:`specchat.engine.remote`); then equal
    texts count as identical."""
    a, b = off.turn.tokens, on.turn.tokens
    if (min(a, default=0) < 0 or min(b, default=0) < 0) and off.text == on.text:
        return None
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    return first


def _tie_verdict(gap: float, first: int, a: str, how: str, where: str) -> str:
    """The one line saying where two replies of the same weights part and whether that is a near-tie."""
    kind = "a near-tie" if abs(gap) <= NEAR_TIE else "not a near-tie: a defect, please report it"
    return (
        f"the texts part at token {first + 1} ({a!r} {how}): {kind} - {where} scores them {abs(gap):.2f} apart, "
        "and a verify batch's logits differ from one-token decoding by about that much (specchat/engine/chat.py)"
    )


def _eot_verdict(first: int) -> str:
    return f"one reply stopped after {first} tokens and the other went on: the end-of-text token was a near-tie"


def _parting_logits(session: ChatSession, prompt_ids: list[int], run: RaceRun, other: RaceRun, at: int) -> tuple[float, float]:
    """The target's logits of ``run``'s token and of ``other``'s where they part, decoded in one batch on fresh
    caches (their gap: small = a near-tie). Where ``run`` ended there (its next token was an end-of-text
    token), its logit is the most likely end-of-text token's among the target's top few and its EOS."""
    dec = session.decoder
    target = dec.target
    context = prompt_ids + list(run.turn.tokens[:at])
    dec.reset()
    logits = target.decode(context, logits_last=1)
    dec.reset()
    assert logits is not None
    row = logits[0]
    if at < len(run.turn.tokens):
        mine = float(row[run.turn.tokens[at]])
    else:
        import numpy as np  # numpy: only once two runs part (the TUI's start-up path imports this module)

        top = [int(t) for t in np.argsort(-row)[:8]] + [int(target.eos)]
        mine = max((float(row[t]) for t in top if 0 <= t < len(row) and target.is_eog(t)), default=float(row[target.eos]))
    return mine, float(row[other.turn.tokens[at]])


def _near_tie(session: ChatSession, prompt_ids: list[int], run: RaceRun, other: RaceRun, at: int) -> float:
    """How much the target prefers ``run``'s token over ``other``'s where they part (the logit gap)."""
    mine, theirs = _parting_logits(session, prompt_ids, run, other, at)
    return mine - theirs


def local_parting(
    session: ChatSession, prompt_ids: list[int], off: RaceRun, on: RaceRun
) -> tuple[int | None, str, tuple[float, float] | None]:
    """:func:`local_difference` plus the target's two logits where the runs part (``off``'s token, ``on``'s
    token; None when identical): the near-tie itself, which :attr:`RaceResult.parting_logits` keeps."""
    first = _first_difference(off, on)
    if first is None:
        return None, "", None
    if first >= min(len(off.turn.tokens), len(on.turn.tokens)):
        shorter, longer = (off, on) if len(off.turn.tokens) <= len(on.turn.tokens) else (on, off)
        ended, went_on = _parting_logits(session, prompt_ids, shorter, longer, first)
        pair = (ended, went_on) if shorter is off else (went_on, ended)
        return first, _eot_verdict(first), pair
    pair = _parting_logits(session, prompt_ids, off, on, first)
    gap = pair[0] - pair[1]
    piece = session.decoder.target.piece
    a = piece(off.turn.tokens[first]).decode("utf-8", "replace")
    b = piece(on.turn.tokens[first]).decode("utf-8", "replace")
    return first, _tie_verdict(gap, first, a, f"without speculation, {b!r} with it", "the target"), pair


def local_difference(session: ChatSession, prompt_ids: list[int], off: RaceRun, on: RaceRun) -> tuple[int | None, str]:
    """Where the runs without (``off``) and with speculation (``on``) part (None: identical) and why, in one
    line: the target scores the two tokens after ``prompt_ids`` and the common prefix (a near-tie, or a defect)."""
    first, difference, _ = local_parting(session, prompt_ids, off, on)
    return first, difference


def _server_gap(a: RemoteSession, prompt_ids: list[int], run_a: RaceRun, run_b: RaceRun, at: int) -> float:
    """How much server A's model prefers its own token over B's where the replies part (a logit gap, from the
    server's log-probabilities); when B's token is not among A's :data:`SERVER_TOP_N` most likely, the gap to
    the least of them (a lower bound)."""
    context = prompt_ids + list(run_a.turn.tokens[:at])
    top = a.server.top_logprobs(context, SERVER_TOP_N)
    mine, theirs = run_a.turn.tokens[at], run_b.turn.tokens[at]
    floor = min(top.values(), default=0.0)
    return top.get(mine, floor) - top.get(theirs, floor)


def server_difference(
    a: RemoteSession, prompt_ids: list[int], off: RaceRun, on: RaceRun, *, model_b: str | None
) -> tuple[int | None, str]:
    """Where server A's run ``off`` and server B's run ``on`` part (None: identical) and why, in one line.

    ``model_b`` None: both servers hold the same weights, so a parting is judged by server A's own scores of
    the two tokens after ``prompt_ids`` and the common prefix (a near-tie, or a defect); else B's model,
    and the texts of two different models may differ."""
    first = _first_difference(off, on)
    if first is None:
        return None, ""
    both = first < min(len(off.turn.tokens), len(on.turn.tokens))
    if model_b is not None:
        where = f"at token {first + 1}" if both else f"after {first} tokens (one reply stopped)"
        return first, (
            f"the texts part {where}: server A runs {a.server_info.model} and server B {model_b}, which are not "
            "the same weights (/v1/models), so their greedy replies may differ - not a defect"
        )
    if not both:
        return first, _eot_verdict(first)
    if min(off.turn.tokens[first], on.turn.tokens[first]) < 0:
        return first, f"the texts part at token {first + 1}, where a server did not name the token's id"
    gap = _server_gap(a, prompt_ids, off, on, first)
    mine, theirs = (a.server.detokenize([run.turn.tokens[first]]) for run in (off, on))
    return first, _tie_verdict(gap, first, mine, f"on server A, {theirs!r} on server B", "server A's model")
