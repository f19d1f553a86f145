"""One reply's statistics, counted like llama-server's and turned into the :class:`~specchat.engine.events.Turn` event.

:class:`TurnCounters` accumulates a reply like llama.cpp's ``server_slot`` statistics
(``tools/server/server-context.cpp``: ``n_draft_total``, ``n_draft_accepted``, ``n_draft_verif_steps``,
per-position accepted counts) and reports them under llama-server's timing names. The acceptance log line
is :meth:`specchat.engine.events.Turn.acceptance_line`.
"""

from __future__ import annotations

from collections.abc import Iterable

from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.events import PieceKind, Round, Step, Turn


class TurnCounters:
    """One reply's statistics, accumulated like llama.cpp's ``server_slot`` (``n_draft_total``,
    ``n_draft_accepted``, ``n_draft_verif_steps``, ``n_draft_accepted_per_pos``).

    Definitions used by :meth:`to_turn`:

    * ``draft_n`` = tokens drafted and verified; ``draft_n_accepted`` = of those, kept by the target;
    * ``acceptance`` = draft_n_accepted / draft_n (None when nothing was drafted: it does not exist yet);
    * ``rejections`` = steps whose draft was cut short (accepted < drafted): with ``draft_n_accepted`` the
      counts of the per-position α, accepted / (accepted + rejections), the cost model's estimator;
    * ``asked_steps`` = steps that asked the drafter for tokens (K > 0; it may have proposed none);
      ``spec_on_steps`` = steps that ran with speculation on (auto-K's plain rounds included);
    * ``mean_len`` = 1 + draft_n_accepted / n_spec_steps, as ``server_slot::print_timings`` prints it
      (n_spec_steps = verify steps that had a draft); 1.0 when no step drafted (one token per step);
    * ``accepted_per_pos[i]`` = steps whose draft position i was accepted / steps that *drafted at least
      i+1 tokens*. llama.cpp divides by all verify steps instead; with drafters that often propose fewer
      than K tokens (n-gram lookup) that mixes "not drafted" with "rejected", so we condition on the
      position having been drafted. :meth:`accepted_per_pos_llama` gives llama.cpp's figure;
    * ``predicted_n`` = tokens added to the reply; ``predicted_ms`` = generation wall time given to
      :meth:`finish` (llama-server's ``t_token_generation``), else the sum of step times;
      ``predicted_per_second`` = predicted_n / predicted_ms · 1000;
    * ``draft_ms_per_step`` and ``verify_ms_per_step`` are means over *all* steps, so that
      draft + verify + overhead per step = step time per step;
    * ``k_min``/``k_max`` = the range of the K of the rounds that asked the drafter (``k`` of
      :meth:`add_step`, the :class:`Step`'s K; 0/0 when none did): the K a turn used when it changed
      (auto-K, a key).
    """

    __slots__ = (
        "prompt_n", "prompt_ms", "n_steps", "n_spec_steps", "draft_n", "draft_n_accepted",
        "acc_per_pos", "drafted_per_pos", "draft_ms", "verify_ms", "overhead_ms", "step_ms",
        "predicted_n", "predicted_ms", "stop_reason", "text", "tokens", "kinds", "last", "k_min", "k_max",
        "rejections", "asked_steps", "spec_on_steps", "accepted_by_origin", "accepted_by_conversation",
    )

    def __init__(self, prompt_n: int = 0, prompt_ms: float = 0.0) -> None:
        self.prompt_n = int(prompt_n)
        self.prompt_ms = float(prompt_ms)
        self.n_steps = 0
        self.n_spec_steps = 0
        self.draft_n = 0
        self.draft_n_accepted = 0
        self.acc_per_pos = [0] * K_MAX  # steps whose draft position i was accepted
        self.drafted_per_pos = [0] * K_MAX  # steps that drafted at least i+1 tokens
        self.draft_ms = 0.0
        self.verify_ms = 0.0
        self.overhead_ms = 0.0
        self.step_ms = 0.0
        self.predicted_n = 0
        self.predicted_ms: float | None = None
        self.stop_reason = "length"
        self.text = ""
        self.tokens: list[int] = []
        self.kinds: list[PieceKind] = []
        self.last: int | None = None
        self.k_min = 0
        self.k_max = 0
        self.rejections = 0
        self.asked_steps = 0
        self.spec_on_steps = 0
        #: accepted draft tokens by origin (conversation, history, model) and by saved conversation (history ids)
        self.accepted_by_origin: dict[str, int] = {}
        self.accepted_by_conversation: dict[int, int] = {}

    def add_step(
        self,
        *,
        drafted: int,
        accepted: int,
        emitted: int,
        t_draft_ms: float = 0.0,
        t_verify_ms: float = 0.0,
        t_overhead_ms: float = 0.0,
        t_step_ms: float = 0.0,
        k: int = 0,
        speculative: bool | None = None,
    ) -> None:
        """Count one draft/verify round (or one plain decode: ``drafted = 0``).

        ``emitted`` = tokens this round added to the reply. Accepted positions are the prefix
        0..accepted-1 of the draft (the acceptance rule stops at the first rejection). ``k`` = the K this
        round asked the drafter for (0 = it was not asked). ``speculative``: the round ran with speculation
        on (default: it asked the drafter).
        """
        if drafted < 0 or not (0 <= accepted <= drafted) or emitted < 0:
            raise ValueError(f"inconsistent step: drafted={drafted} accepted={accepted} emitted={emitted}")
        self.n_steps += 1
        if speculative if speculative is not None else k > 0:
            self.spec_on_steps += 1
        if k > 0:
            self.asked_steps += 1
            self.k_min = min(self.k_min, k) if self.k_min else k
            self.k_max = max(self.k_max, k)
        if drafted > 0:
            if accepted < drafted:
                self.rejections += 1
            self.n_spec_steps += 1
            self.draft_n += drafted
            self.draft_n_accepted += accepted
            n = len(self.drafted_per_pos)
            if drafted > n:  # a caller with a larger K than K_MAX: grow, do not drop
                self.drafted_per_pos.extend([0] * (drafted - n))
                self.acc_per_pos.extend([0] * (drafted - n))
            for i in range(drafted):
                self.drafted_per_pos[i] += 1
            for i in range(accepted):
                self.acc_per_pos[i] += 1
        self.draft_ms += t_draft_ms
        self.verify_ms += t_verify_ms
        self.overhead_ms += t_overhead_ms
        self.step_ms += t_step_ms
        self.predicted_n += emitted

    def add(self, step: Round | Step) -> None:
        """Count a round: the loop's :class:`~specchat.engine.events.Round`, or a :class:`Step` event reporting one."""
        self.add_step(
            drafted=step.drafted, accepted=step.accepted, emitted=step.emitted,
            t_draft_ms=step.t_draft_ms, t_verify_ms=step.t_verify_ms,
            t_overhead_ms=step.t_overhead_ms, t_step_ms=step.t_step_ms, k=step.k, speculative=step.speculative,
        )
        source = getattr(step, "source", None)
        if source is not None and step.accepted > 0:
            self.accepted_by_origin[source.origin] = self.accepted_by_origin.get(source.origin, 0) + step.accepted
            if source.conversation is not None:
                conv = source.conversation
                self.accepted_by_conversation[conv] = self.accepted_by_conversation.get(conv, 0) + step.accepted

    def finish(
        self,
        *,
        predicted_ms: float | None = None,
        stop_reason: str | None = None,
        text: str | None = None,
        tokens: Iterable[int] | None = None,
        kinds: Iterable[PieceKind] | None = None,
        last: int | None = None,
    ) -> None:
        """Record the end of the reply (wall time of generation, why it stopped, the reply itself)."""
        if predicted_ms is not None:
            self.predicted_ms = float(predicted_ms)
        if stop_reason is not None:
            self.stop_reason = stop_reason
        if text is not None:
            self.text = text
        if tokens is not None:
            self.tokens = list(tokens)
        if kinds is not None:
            self.kinds = list(kinds)
        if last is not None:
            self.last = last

    # -- derived figures ---------------------------------------------------------------------------
    @property
    def acceptance(self) -> float | None:
        return self.draft_n_accepted / self.draft_n if self.draft_n else None

    @property
    def mean_len(self) -> float:
        return 1.0 + self.draft_n_accepted / self.n_spec_steps if self.n_spec_steps else 1.0

    def accepted_per_pos(self) -> list[float]:
        """Acceptance at draft position i among steps that drafted position i (see class docstring)."""
        out = []
        for acc, n in zip(self.acc_per_pos, self.drafted_per_pos):
            if n == 0:
                break
            out.append(acc / n)
        return out

    def accepted_per_pos_llama(self) -> list[float]:
        """llama.cpp's ``acc per pos``: accepted count at position i / all verify steps with a draft."""
        if not self.n_spec_steps:
            return []
        return [acc / self.n_spec_steps for acc, n in zip(self.acc_per_pos, self.drafted_per_pos) if n]

    def to_turn(
        self,
        *,
        k: int = 0,
        drafter: str = "",
        speculative: bool = False,
        target: str = "",
        build: str = "",
        cpu: str = "",
        **overrides,
    ) -> Turn:
        """The :class:`Turn` event; ``overrides`` may set any of :meth:`finish`'s fields first."""
        if overrides:
            self.finish(**overrides)
        predicted_ms = self.predicted_ms if self.predicted_ms is not None else self.step_ms
        n = self.n_steps
        return Turn(
            prompt_n=self.prompt_n,
            prompt_ms=self.prompt_ms,
            predicted_n=self.predicted_n,
            predicted_ms=predicted_ms,
            predicted_per_second=self.predicted_n / predicted_ms * 1000.0 if predicted_ms > 0 else 0.0,
            draft_n=self.draft_n,
            draft_n_accepted=self.draft_n_accepted,
            acceptance=self.acceptance,
            mean_len=self.mean_len,
            accepted_per_pos=self.accepted_per_pos(),
            draft_ms_per_step=self.draft_ms / n if n else 0.0,
            verify_ms_per_step=self.verify_ms / n if n else 0.0,
            overhead_ms=self.overhead_ms,
            step_ms=self.step_ms,
            n_steps=n,
            n_spec_steps=self.n_spec_steps,
            stop_reason=self.stop_reason,
            text=self.text,
            tokens=list(self.tokens),
            kinds=list(self.kinds),
            k=k,
            drafter=drafter,
            speculative=speculative,
            k_min=self.k_min,
            k_max=self.k_max,
            target=target,
            rejections=self.rejections,
            asked_steps=self.asked_steps,
            spec_on_steps=self.spec_on_steps,
            build=build,
            cpu=cpu,
            accepted_by_origin=dict(self.accepted_by_origin),
            history_conversations=sorted(self.accepted_by_conversation, key=self.accepted_by_conversation.__getitem__,
                                         reverse=True),
        )


__all__ = ["TurnCounters"]
