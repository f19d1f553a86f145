"""Recording a race: one message answered with speculation off and then on (or by two llama-servers), each
run recorded piece by piece with its time.

**Recording** (:func:`record_race`, on the engine thread): the same message, greedy, first with speculation
off, then on (with a fixed K or auto-K) - one after the other, never at once: two runs sharing one CPU would
slow each other and falsify both. Each run starts from empty caches and a conversation holding only the
message (and the system prompt), so both decode the prompt the same way; every piece (ghost drafts included)
is stamped with the monotonic time since the run's generation started - the
:class:`~specchat.engine.events.PromptDone` event, which comes after the prompt and any auto-K calibration,
so neither counts. The caller's conversation and controls are restored afterwards (the caches follow by
longest common prefix on the next turn).

**Cancelling** (a UI's Esc, the app quitting): ``cancelled()`` is asked before each run and at each piece; once
it says yes, the run is asked to stop (``controls.request_stop``: it ends at the next round boundary, caches
consistent) and :class:`RaceCancelled` is raised after it - as it is when a local run ends ``stopped`` by any
other stop request. A half-run race compares nothing, so there is no partial result. The per-piece check is
what makes a cancel reliable: a run clears stop requests when it starts (``ChatSession``), so a request made
between the two runs alone would be lost.

**Two llama-servers** (:func:`record_server_race`, ``specchat race --server A --server-b B``). A llama-server's
speculation is fixed by its own flags (:mod:`specchat.engine.remote`), so against servers the two lanes are two
servers, e.g. one speculating and the same model without a draft: server A's run fills the first lane
(:data:`LANE_A`, ``"off"``), server B's the second (:data:`LANE_B`, ``"on"``), one after the other, greedy,
each with the server's prompt cache off (both decode the prompt in full, like the local runs' empty caches);
each run's :attr:`RaceRun.label` names its server, and :attr:`RaceResult.ratio` is B / A. Where the token ids
part, server A scores the two tokens (``n_probs``: :meth:`~specchat.engine.llama_server.LlamaServer.top_logprobs`)
as :func:`record_race` does locally - if both servers hold the same weights (``/v1/models``: same vocabulary,
parameter count, file size and type; the model name when a server does not say). Two different models may
legitimately answer differently: that is said, not called a defect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from specchat.engine.drafter_kinds import NONE
from specchat.engine.events import EngineError, Event, Notice, Piece, PieceKind, PromptDone, Step, Turn
from specchat.engine.protocol import Message
from specchat.errors import UserError
from specchat.race.verdict import local_parting, server_difference

if TYPE_CHECKING:  # the replay half is pure: a UI imports this package without llama.cpp
    from specchat.engine.chat import ChatSession
    from specchat.engine.remote import RemoteSession

Lane = Literal["off", "on"]
LANES: tuple[Lane, ...] = ("off", "on")
#: the lanes of a race of two llama-servers: server A's run (``--server``) first, then server B's (``--server-b``)
LANE_A: Lane = "off"
LANE_B: Lane = "on"
#: what a local race's lanes are
LOCAL_LABELS: dict[Lane, str] = {"off": "speculation off", "on": "speculation on"}


class RaceCancelled(Exception):
    """The race was cancelled (or a run was stopped) before both runs ended; the conversation is restored."""


@dataclass(frozen=True, slots=True)
class TimedPiece:
    """One piece of a run and when it arrived: ``t`` seconds after the run's generation started."""

    t: float
    text: str
    kind: PieceKind
    token: int


@dataclass(frozen=True, slots=True)
class RaceRun:
    """One run of the race: its pieces in order, its :class:`Turn`, and when it ended (``t_end`` seconds after
    its generation started, when the Turn arrived); the notices it gave (e.g. auto-K turning drafting off) and
    its last :class:`Step` (how K was chosen at the end, the reply's and the recent figures)."""

    lane: Lane
    pieces: tuple[TimedPiece, ...]
    turn: Turn
    t_end: float
    notices: tuple[str, ...] = ()
    last_step: Step | None = None
    #: what this lane is: "" in a local race (:data:`LOCAL_LABELS`), "A: <model> @ <host:port>" for a server
    label: str = ""

    @property
    def text(self) -> str:
        return self.turn.text

    @property
    def tok_s(self) -> float:
        """The run's generation speed as the engine measured it (``predicted_per_second``)."""
        return self.turn.predicted_per_second


@dataclass(frozen=True, slots=True)
class RaceResult:
    """Both runs of a race and whether their texts are the same."""

    prompt: str
    target: str
    drafter: str
    k: int | None  # the fixed K of the speculative run; None = auto-K
    off: RaceRun
    on: RaceRun
    #: the index of the first token where the two replies differ, None when they are identical
    first_difference: int | None = None
    #: why they differ, in one line ("" when identical)
    difference: str = ""
    #: where they differ (local races), the target's logits of the ``off`` run's token and of the ``on`` run's
    #: (an end-of-text token's for a run that ended there): within NEAR_TIE of each other for a near-tie
    parting_logits: tuple[float, float] | None = None
    #: a race of two llama-servers (:func:`record_server_race`): ``off`` is server A, ``on`` server B
    remote: bool = False
    #: the texts were compared as the same model's (local, or servers with the same weights); False: two
    #: different models, whose texts may differ without a defect
    same_weights: bool = True

    @property
    def identical(self) -> bool:
        return self.first_difference is None

    @property
    def defect(self) -> bool:
        """The texts part where the same weights score the two tokens further apart than a near-tie."""
        return not self.identical and self.same_weights and "not a near-tie" in self.difference

    @property
    def ratio(self) -> float | None:
        """Generation speed, second lane / first: speculation on / off, or server B / server A (None when the
        first lane has no speed)."""
        return self.on.tok_s / self.off.tok_s if self.off.tok_s > 0 else None

    def run(self, lane: Lane) -> RaceRun:
        return self.off if lane == "off" else self.on

    def label(self, lane: Lane) -> str:
        """What the lane is: "speculation off" / "speculation on", or its server."""
        return self.run(lane).label or LOCAL_LABELS[lane]


def _one_run(events: Iterator[Event], lane: Lane, clock: Callable[[], float],
             on_piece: Callable[[Lane, TimedPiece], None] | None, what: str, label: str = "",
             cancel: Callable[[], None] | None = None) -> RaceRun:
    """Collect one run's events, timed; ``what`` names the run in an error ("the race's baseline run");
    ``cancel()`` (if given) is called after each piece: it asks the run to stop when the race is cancelled."""
    pieces: list[TimedPiece] = []
    t0: float | None = None
    turn: Turn | None = None
    t_end = 0.0
    notices: list[str] = []
    last_step: Step | None = None
    for ev in events:
        if isinstance(ev, Step):
            last_step = ev
        elif isinstance(ev, Notice):
            notices.append(ev.message)
        elif isinstance(ev, PromptDone):
            t0 = clock()
        elif isinstance(ev, Piece):
            now = clock()
            piece = TimedPiece(now - (t0 if t0 is not None else now), ev.text, ev.kind, ev.token)
            pieces.append(piece)
            if on_piece is not None:
                on_piece(lane, piece)
            if cancel is not None:
                cancel()
        elif isinstance(ev, Turn):
            turn = ev
            now = clock()
            t_end = now - (t0 if t0 is not None else now)
        elif isinstance(ev, EngineError):
            raise UserError(f"{what} failed: {ev.message}")
    if turn is None:  # pragma: no cover - a reply always ends with a Turn
        raise UserError("the race produced no reply")
    return RaceRun(lane, tuple(pieces), turn, t_end, tuple(notices), last_step, label)


def _local_run(session: ChatSession, prompt: str, lane: Lane, clock: Callable[[], float],
               on_piece: Callable[[Lane, TimedPiece], None] | None, cancelled: Callable[[], bool]) -> RaceRun:
    if cancelled():
        raise RaceCancelled
    session.decoder.reset()  # empty caches: both runs decode the prompt alike
    session.reset()
    what = f"the race's {'speculative' if lane == 'on' else 'baseline'} run"

    def cancel() -> None:
        if cancelled():
            session.controls.request_stop()

    run = _one_run(session.send(prompt), lane, clock, on_piece, what, cancel=cancel)
    if run.turn.stop_reason == "stopped" or cancelled():
        raise RaceCancelled
    return run


def record_race(
    session: ChatSession,
    prompt: str,
    *,
    k: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_piece: Callable[[Lane, TimedPiece], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> RaceResult:
    """Run ``prompt`` greedily with speculation off, then on with the fixed ``k`` (None: auto-K), on the
    engine thread; ``on_piece(lane, piece)`` is called as each piece arrives (a UI's progress). The session's
    conversation and controls are as before afterwards. :class:`UserError` when the session cannot speculate
    (no drafter, a recurrent target) or K is 0; :class:`RaceCancelled` once ``cancelled()`` (see the module
    docstring)."""
    dec = session.decoder
    if dec.drafter is None or not dec.can_speculate:
        why = "the target cannot roll back its KV (recurrent/hybrid)" if not dec.can_speculate else "no drafter is loaded"
        raise UserError(f"nothing to race: {why}; give a drafter (--draft ngram or a draft model)")
    if k is not None and k <= 0:
        raise UserError("nothing to race with K = 0: give --k 1 or more, or --auto-k")
    controls = session.controls
    saved_state = controls.snapshot()
    saved_messages = list(session.messages)
    saved_system = session.system_prompt
    greedy = replace(saved_state.sampling, temperature=0.0)
    try:
        controls.set_sampling(greedy)
        controls.set_speculative(False)
        off = _local_run(session, prompt, "off", clock, on_piece, cancelled)
        controls.set_speculative(True)
        controls.set_auto_k(k is None)
        if k is not None:
            controls.set_k(k)
        on = _local_run(session, prompt, "on", clock, on_piece, cancelled)
        first, difference, parting = local_parting(session, session.template.tokens(session.messages[:-1]), off, on)
    finally:
        controls.set_sampling(saved_state.sampling)
        controls.set_speculative(saved_state.speculative)
        controls.set_auto_k(saved_state.auto_k)
        controls.set_k(saved_state.k)
        session.load(saved_messages)
        session.system_prompt = saved_system
    return RaceResult(
        prompt=prompt, target=dec.target.name, drafter=dec.drafter_name or NONE, k=k, off=off, on=on,
        first_difference=first, difference=difference, parting_logits=parting,
    )


def server_label(session: RemoteSession, which: str) -> str:
    """"A: <model> @ <host:port>" - a server's lane label (its model from ``/props``)."""
    return f"{which}: {session.info().target_name}"


def _weights_id(session: RemoteSession) -> tuple:
    """What identifies a server's weights: ``/v1/models``' figures, or only the model's name without them."""
    from specchat.engine.llama_server import ServerError

    try:
        meta = session.server.model_meta()
    except ServerError:  # an older or proxied server without /v1/models
        meta = {}
    figures = tuple(meta.get(key) for key in ("n_vocab", "n_params", "size", "ftype", "n_embd"))
    return figures if any(v is not None for v in figures) else (session.server_info.model,)


def record_server_race(
    a: RemoteSession,
    b: RemoteSession,
    prompt: str,
    *,
    clock: Callable[[], float] = time.monotonic,
    on_piece: Callable[[Lane, TimedPiece], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> RaceResult:
    """Run ``prompt`` greedily on server A, then on server B (never at once), on the engine thread: the race of
    two llama-servers (module docstring). ``on_piece(lane, piece)`` is called as each piece arrives (A's lane
    is :data:`LANE_A`, B's :data:`LANE_B`). Both conversations, samplings and prompt-cache settings are as
    before afterwards. :class:`UserError` (one line naming the server) when a run fails; :class:`RaceCancelled`
    once ``cancelled()`` (asked before each run and at each piece, as for a local race: the run in flight is
    asked to stop, which cancels the server's generation)."""
    sessions = {LANE_A: a, LANE_B: b}
    names = {LANE_A: "A", LANE_B: "B"}
    saved = {lane: (s.controls.snapshot().sampling, list(s.messages), s.system_prompt, s.cache_prompt)
             for lane, s in sessions.items()}
    runs: dict[Lane, RaceRun] = {}
    prompt_ids: list[int] = []
    try:
        for lane, s in sessions.items():
            s.controls.set_sampling(replace(saved[lane][0], temperature=0.0))
            s.cache_prompt = False  # the whole prompt decoded by both, as the local runs do on empty caches
            # load, not reset: RemoteSession.reset forgets which replies it generated (their ids are spliced
            # into the next prompt), and the caller's conversation continues after the race
            s.load([Message("system", saved[lane][2])] if saved[lane][2] else [])
            what = f"the race's run on server {names[lane]} ({s.server.url})"
            if cancelled():
                raise RaceCancelled

            def cancel(s: RemoteSession = s) -> None:
                if cancelled():
                    s.controls.request_stop()

            runs[lane] = _one_run(s.send(prompt), lane, clock, on_piece, what, server_label(s, names[lane]), cancel)
            if runs[lane].turn.stop_reason == "stopped" or cancelled():
                raise RaceCancelled
            if lane == LANE_A:
                prompt_ids = a.prompt_tokens(a.messages[:-1])
        off, on = runs[LANE_A], runs[LANE_B]
        same = _weights_id(a) == _weights_id(b)
        first, difference = server_difference(a, prompt_ids, off, on, model_b=None if same else b.server_info.model)
    finally:
        for lane, s in sessions.items():
            sampling, messages, system, cache = saved[lane]
            s.controls.set_sampling(sampling)
            s.cache_prompt = cache
            s.load(messages)
            s.system_prompt = system
    return RaceResult(
        prompt=prompt, target=f"{a.info().target_name} vs {b.info().target_name}",
        drafter=f"{a.drafter_label} vs {b.drafter_label}", k=None, off=off, on=on, first_difference=first,
        difference=difference, remote=True, same_weights=same,
    )
