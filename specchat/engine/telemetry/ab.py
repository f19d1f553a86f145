"""A/B over finished replies, per (target, drafter) pair: speculation on vs off, never mixing pairs.

A reply (:class:`~specchat.engine.events.Turn`) names its pair (``target``, ``drafter``: the drafter that
was selected, also when speculation was off) and is one of four :data:`TurnMode`\\ s:

* ``off``    - every round ran with speculation off: the pair's baseline;
* ``on``     - every round ran with speculation on, and the drafter drafted in at least
  :data:`BARELY_RAN_SHARE` of them;
* ``barely`` - speculation was on, but the drafter drafted in fewer than :data:`BARELY_RAN_SHARE` of the
  rounds (auto-K kept it off for cost and probed now and then; an n-gram drafter found nothing to copy).
  Such a reply's speed is at least 90 % plain decoding's, so it is no evidence about the drafter: it is
  counted apart, not as "on" (a turn that drafted once is not "speculation on" evidence). The rule counts
  rounds, not accepted tokens: a drafter that drafted every round and had everything rejected did run, and
  its reply is exactly the evidence that it hurts;
* ``mixed``  - speculation was switched during the reply: neither, counted apart.

:func:`ab_summary` gives one :class:`ABRow` per (pair, mode) with token-weighted speed (Σ tokens / Σ
generation time) and, for ``on``/``barely``, the ratio to the same pair's ``off`` row - never another pair's.
With two llama-servers in one session (``--server-b``), :func:`versus` sets server B's replies against server A's:
each server is a pair of its own (``model @ host``), and a server's speculation is its own, so each side is all its
replies.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from specchat.engine.events import Turn

TurnMode = Literal["off", "on", "barely", "mixed"]
TURN_MODES: tuple[TurnMode, ...] = get_args(TurnMode)
#: a reply whose drafter drafted in fewer than this share of its rounds "barely ran" (see the module docstring)
BARELY_RAN_SHARE = 0.10


def _on_steps(turn: Turn) -> int:
    # replies saved before Turn counted the rounds with speculation on have spec_on_steps = 0: their
    # ``speculative`` flag (the setting at the end) stands for every round
    return turn.spec_on_steps if turn.spec_on_steps > 0 or not turn.speculative else turn.n_steps


def barely_ran(turn: Turn) -> bool:
    """Speculation was on for the whole reply but the drafter drafted in fewer than :data:`BARELY_RAN_SHARE`
    of its rounds."""
    return turn_mode(turn) == "barely"


def turn_mode(turn: Turn) -> TurnMode:
    """How a reply ran (see the module docstring)."""
    on = _on_steps(turn)
    if on == 0:
        return "off"
    if on < turn.n_steps:
        return "mixed"
    return "barely" if turn.n_spec_steps < BARELY_RAN_SHARE * turn.n_steps else "on"


@dataclass(frozen=True, slots=True)
class ABRow:
    """The replies of one (target, drafter) pair that ran in one mode."""

    target: str
    drafter: str
    mode: TurnMode
    turns: int
    tokens: int  # generated tokens, Σ predicted_n
    ms: float  # generation time, Σ predicted_ms
    drafted: int  # draft tokens proposed, Σ draft_n
    accepted: int  # of those, kept by the target
    #: Σ tokens / Σ time (None without time)
    tok_s: float | None
    #: tok_s / the same pair's ``off`` row's tok_s; None for ``off`` and ``mixed`` rows, or without a baseline
    ratio: float | None

    @property
    def pair(self) -> tuple[str, str]:
        return (self.target, self.drafter)


def ab_summary(turns: Iterable[Turn]) -> tuple[ABRow, ...]:
    """One row per (target, drafter, mode), pairs in the order they first appear, modes in :data:`TURN_MODES`
    order. Replies that generated nothing (no tokens or no time) are left out: they have no speed."""
    groups: dict[tuple[str, str, TurnMode], list[Turn]] = {}
    pairs: list[tuple[str, str]] = []
    for turn in turns:
        if turn.predicted_n <= 0 or not turn.predicted_ms > 0:
            continue
        pair = (turn.target, turn.drafter)
        if pair not in pairs:
            pairs.append(pair)
        groups.setdefault((*pair, turn_mode(turn)), []).append(turn)
    rows: list[ABRow] = []
    for target, drafter in pairs:
        base: float | None = None
        for mode in TURN_MODES:
            ts = groups.get((target, drafter, mode))
            if not ts:
                continue
            tokens = sum(t.predicted_n for t in ts)
            ms = sum(t.predicted_ms for t in ts)
            tok_s = tokens / ms * 1000.0 if ms > 0 else None
            if mode == "off":
                base = tok_s
            ratio = tok_s / base if mode in ("on", "barely") and base and tok_s is not None else None
            rows.append(
                ABRow(
                    target=target, drafter=drafter, mode=mode, turns=len(ts), tokens=tokens, ms=ms,
                    drafted=sum(t.draft_n for t in ts), accepted=sum(t.draft_n_accepted for t in ts), tok_s=tok_s,
                    ratio=ratio,
                )
            )
    return tuple(rows)


@dataclass(frozen=True, slots=True)
class Side:
    """Every reply of one pair in this session, whatever its mode: one llama-server of two (its speculation is the
    server's own, so its replies are that server's evidence, on or off)."""

    target: str
    turns: int
    tokens: int
    ms: float
    drafted: int
    accepted: int

    @property
    def tok_s(self) -> float | None:
        return self.tokens / self.ms * 1000.0 if self.ms > 0 else None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None


def versus(rows: Iterable[ABRow], a: str, b: str) -> tuple[Side, Side, float | None] | None:
    """Server B against server A (``a``, ``b``: their pairs' targets, ``model @ host``): each side's replies over
    every mode, token-weighted like :func:`ab_summary`, and B's speed over A's; None until both have a reply."""
    rows = list(rows)
    sides = []
    for target in (a, b):
        mine = [r for r in rows if r.target == target]
        if not mine:
            return None
        sides.append(Side(target, sum(r.turns for r in mine), sum(r.tokens for r in mine), sum(r.ms for r in mine),
                          sum(r.drafted for r in mine), sum(r.accepted for r in mine)))
    ta, tb = sides[0].tok_s, sides[1].tok_s
    return sides[0], sides[1], (tb / ta if ta and tb is not None else None)


__all__ = ["BARELY_RAN_SHARE", "TURN_MODES", "ABRow", "Side", "TurnMode", "ab_summary", "barely_ran", "turn_mode",
           "versus"]
