"""Each token's fate, recovered from the cumulative speculation counters llama-server streams.

llama-server (``POST /completion`` with ``"stream": true, "timings_per_token": true``) sends one chunk per
token it emits; each chunk's ``timings`` carries the request's cumulative ``draft_n`` (draft tokens
verified) and ``draft_n_accepted``, and ``predicted_ms``. The server updates them once per verify round,
*before* it sends that round's tokens (``server_context``: ``n_draft_total += n_draft``,
``n_draft_accepted += ids.size() - 1``, then one ``process_token`` per id). So, measured on llama-server
b11434 (see :mod:`specchat.engine.remote`):

* the first chunk whose counters moved starts a round: its deltas are that round's drafted count d and
  accepted count a, and the round emits a + 1 tokens: the a accepted draft tokens, then the target's own
  token - a **correction** if a < d, the **bonus** if a = d;
* a token whose chunk moved no counter and that is not one of those a + 1 is a **plain** round (no draft:
  the first token, sampled from the prompt's logits; a round the drafter proposed nothing for; a round
  with no budget left for a draft, the server drafts at most ``n_predict`` - generated - 1). The reply's
  first token is plain even when it arrives merged with a round's tokens (below);
* the fields are absent until the request's first verified draft (the server omits ``draft_n`` while it
  is 0): absent means "no draft yet", not "unknown".

The rejected draft tokens themselves are never sent: remotely there is no ghost text.

**Where this is a guess.** The server holds a token back while the text ends inside a UTF-8 character and
sends it with the next one (one chunk, ``tokens_predicted`` jumps by more than 1). If the held tokens span
two rounds, their counters arrive merged: the chunk is read as one round (d and a summed), so the accepted
count stays exact but which of its tokens was a correction may be wrong, and the extra tokens count as
plain rounds. A round cut short (end of generation inside it, a stop) keeps the counts the server reported;
:attr:`RoundTracker.unsent_accepted` counts accepted draft tokens the server counted but never sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from specchat.engine.events import PieceKind


@dataclass(frozen=True, slots=True)
class Round:
    """One verify round (or plain decode) of the server, as recovered from its counters."""

    drafted: int
    accepted: int
    emitted: int  # tokens of the round that were streamed
    t_ms: float  # the server's generation time of the round (delta of its cumulative predicted_ms)


class RoundTracker:
    """Feed it every chunk's token count and cumulative counters, in order; it returns each token's kind
    and the rounds the chunk completed (see the module docstring)."""

    def __init__(self) -> None:
        self.draft_n = 0
        self.draft_n_accepted = 0
        self.predicted_ms = 0.0
        self.unsent_accepted = 0
        self.tokens = 0  # tokens seen so far
        self._pending: list[PieceKind] = []  # kinds still to come of the open round, in order
        self._open: list = []  # [drafted, accepted, emitted, t_ms] of the open round, or empty

    def chunk(
        self, n_tokens: int, draft_n: int | None, draft_n_accepted: int | None, predicted_ms: float | None
    ) -> tuple[list[PieceKind], list[Round]]:
        """``n_tokens`` new tokens arrived with these cumulative counters (None = the field was absent)."""
        d = (self.draft_n if draft_n is None else int(draft_n)) - self.draft_n
        a = (self.draft_n_accepted if draft_n_accepted is None else int(draft_n_accepted)) - self.draft_n_accepted
        if d < 0 or a < 0 or a > d:
            raise ValueError(
                f"llama-server's speculation counters went from draft_n={self.draft_n}, "
                f"draft_n_accepted={self.draft_n_accepted} to {draft_n}, {draft_n_accepted}"
            )
        self.draft_n += d
        self.draft_n_accepted += a
        t_ms = 0.0
        if predicted_ms is not None:
            t_ms = max(0.0, float(predicted_ms) - self.predicted_ms)
            self.predicted_ms = max(self.predicted_ms, float(predicted_ms))
        kinds: list[PieceKind] = []
        done: list[Round] = []
        n = int(n_tokens)
        if n > 0 and self.tokens == 0 and d > 0:  # the reply's first token is never drafted, even merged
            kinds.append("plain")
            done.append(Round(0, 0, 1, 0.0))
            n -= 1
        self.tokens += int(n_tokens)
        n = self._take(n, kinds, done)  # the rest of a round that began in an earlier chunk
        if d > 0:
            if self._open:  # a round that never got all its tokens (should not happen mid-stream)
                done.append(self._close())
            self._open = [d, a, 0, t_ms]
            self._pending = ["accepted"] * a + ["corrected" if a < d else "bonus"]
            t_ms = 0.0
            n = self._take(n, kinds, done)
        for _ in range(n):  # tokens no counter moved for: plain rounds
            kinds.append("plain")
            done.append(Round(0, 0, 1, t_ms))
            t_ms = 0.0
        return kinds, done

    def finish(self) -> list[Round]:
        """The stream ended: close a round whose tokens did not all arrive."""
        return [self._close()] if self._open else []

    def _take(self, n: int, kinds: list[PieceKind], done: list[Round]) -> int:
        while n > 0 and self._pending:
            kinds.append(self._pending.pop(0))
            self._open[2] += 1
            n -= 1
            if not self._pending:
                done.append(self._close())
        return n

    def _close(self) -> Round:
        drafted, accepted, emitted, t_ms = self._open
        self.unsent_accepted += sum(1 for kind in self._pending if kind == "accepted")
        self._open = []
        self._pending = []
        return Round(drafted, accepted, emitted, t_ms)


__all__ = ["Round", "RoundTracker"]
