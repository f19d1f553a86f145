"""Running the bench: the plan of runs, one measured reply per run, and the record of each.

**Protocol.** One loaded target + drafter (:func:`specchat.loading.load_engine`). For every prompt
of the suite and every run index r, each speculative mode (fixed K = 1.., and ``auto`` with ``--auto``)
is measured as an adjacent pair ``baseline, mode`` - so a run of the bench reads A B A C A B A C ... and
slow drift of a shared machine (thermal, other processes) hits both halves of a pair alike. The baseline
is speculation off (plain single-row decodes) on the very same loaded models. Before every run the
conversation is reset and both KV caches and the drafter's state are cleared, so each run decodes its
prompt the same way and the measured generation starts from the same state. A KeyboardInterrupt stops
the runs and keeps what was measured.

**Round by round** (``bench --interleave rounds``, the default where a second copy of the target fits in
memory): a pair's two runs are not one after the other but interleaved round by round on two copies of the
target, and measured twice with the copies swapped (:mod:`specchat.bench.lockstep`: the contention of a
shared host that moves one reply's tok/s by 3-7 % then hits both alike); a record's tok/s is then the
geometric mean over the two copies (its ``halves``), and the pair's speedup their ratio.

**Several targets** (``bench --formats``, ``models tune``: re-encodings of one model, each its own loaded
session, keyed by a label). Every round (prompt, run index) starts with one baseline run of the
*reference* target (the file the others were derived from), then every target's pairs follow, so each
run also gets ``x_reference`` = its tok/s / that round's reference baseline tok/s: "× the bundled Q4_1
baseline", measured in the same round. A target in ``baseline_only`` (one whose verify batches cannot pay,
e.g. one-row kernels) runs baselines only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specchat.bench.lockstep import run_interleaved
from specchat.bench.progress import Progress
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.events import EngineError, Step, Turn
from specchat.errors import UserError

RECORD_FIELDS = (
    "prompt", "mode", "k", "run", "pair", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
    "predicted_per_second", "draft_n", "draft_n_accepted", "acceptance", "mean_len", "speedup",
    "n_steps", "n_spec_steps", "overhead_ms", "draft_ms", "rounds_by_drafted", "rejections", "k_mean", "stop_reason", "drafter", "estimate",
    "round_log", "target", "x_reference", "accepted_by_origin", "history_conversations", "text", "halves",
)


@dataclass(frozen=True, slots=True)
class PlanItem:
    prompt: str  # suite entry name
    mode: str  # baseline | spec | auto
    k: int | None  # fixed K (0 for baseline), None for auto
    run: int  # run index 0..runs-1
    pair: int  # the A/B pair this run belongs to (baseline and its partner share it)
    target: str = ""  # the loaded target it runs on ("" = the only one)
    reference: bool = False  # the round's reference baseline (several targets: its tok/s is the round's unit)


def make_plan(
    suite: Sequence[dict[str, str]], ks: Sequence[int], runs: int, auto: bool, *,
    targets: Sequence[str] = ("",), reference: str | None = None, baseline_only: Collection[str] = (),
) -> list[PlanItem]:
    """The order of the runs: per prompt, per run index, each speculative mode right after its own
    baseline run (A B A C ... A B A C ...). With no speculative mode, baselines only. With several
    ``targets``, each round opens with one baseline of ``reference`` and every target's runs follow
    (``baseline_only`` targets: one baseline each)."""
    modes: list[tuple[str, int | None]] = [("spec", k) for k in ks if k > 0]
    if auto:
        modes.append(("auto", None))
    plan: list[PlanItem] = []
    pair = 0
    for item in suite:
        for r in range(runs):
            if reference is not None:
                plan.append(PlanItem(item["name"], "baseline", 0, r, pair, reference, reference=True))
                pair += 1
            for target in targets:
                own = [] if target in baseline_only else modes
                if not own:
                    plan.append(PlanItem(item["name"], "baseline", 0, r, pair, target))
                    pair += 1
                for mode, k in own:
                    plan.append(PlanItem(item["name"], "baseline", 0, r, pair, target))
                    plan.append(PlanItem(item["name"], mode, k, r, pair, target))
                    pair += 1
    return plan


@dataclass(slots=True)
class RunStats:
    """What one run measured beyond the Turn: per-round draft/accept figures (for α) and K used."""

    rejections: int = 0  # rounds that drafted and had a rejection
    spec_rounds: int = 0
    k_sum: int = 0
    rounds: int = 0
    last_cost: Any = None
    #: rounds by the number of tokens drafted (index 0 = plain rounds), up to K_MAX
    drafted_hist: list[int] = field(default_factory=lambda: [0] * (K_MAX + 1))
    #: every round the drafter was asked in: [K, drafted, accepted, natural length or None]
    round_log: list[list[int | None]] = field(default_factory=list)


def prepare_run(session: Any, mode: str, k: int | None) -> None:
    """Set a run up on a fresh conversation with cleared caches: plain decoding (``baseline``), fixed ``k``
    (``spec``) or auto-K from a cold start (``auto``)."""
    c = session.controls
    dec = session.decoder
    session.reset()
    dec.reset()
    if mode == "baseline":
        c.set_auto_k(False)
        c.set_speculative(False)
    elif mode == "spec":
        c.set_auto_k(False)
        c.set_k(int(k or 0))
        c.set_speculative(True)
    else:  # auto: a cold start, so every auto run is independent of the fixed-K runs around it
        dec.cost_model.reset()
        dec.reset_auto_k()
        c.set_speculative(True)
        c.set_auto_k(True)


def run_once(session: Any, prompt: str, mode: str, k: int | None) -> tuple[Any, RunStats]:
    """One measured reply on a fresh conversation and cleared caches; returns (Turn, RunStats)."""
    prepare_run(session, mode, k)
    return measure_reply(session, prompt)


def count_event(stats: RunStats, ev: Any) -> None:
    """Count one event of a measured reply in ``stats``; an engine error ends the bench with a one-line error."""
    if isinstance(ev, Step):
        stats.rounds += 1
        stats.k_sum += ev.k
        stats.drafted_hist[min(ev.drafted, K_MAX)] += 1
        if ev.k > 0:
            stats.round_log.append([ev.k, ev.drafted, ev.accepted, ev.natural])
        if ev.drafted > 0:
            stats.spec_rounds += 1
            if ev.accepted < ev.drafted:
                stats.rejections += 1
        stats.last_cost = ev.cost
    elif isinstance(ev, EngineError):
        raise UserError(f"generation failed during the bench: {ev.message}")


def measure_reply(session: Any, prompt: str) -> tuple[Any, RunStats]:
    """Send ``prompt`` and count the reply's rounds; returns (Turn, RunStats). Any engine (local or remote)."""
    stats = RunStats()
    turn = None
    for ev in session.send(prompt):
        count_event(stats, ev)
        if isinstance(ev, Turn):
            turn = ev
    if turn is None:  # pragma: no cover - a generation always ends with a Turn
        raise UserError("generation produced no result")
    return turn, stats


@dataclass(frozen=True, slots=True)
class InterleavedPair:
    """A pair measured by :func:`run_pair_interleaved`: the baseline's and the mode's (Turn, RunStats), each from
    the half it ran on the first copy, and each side's tok/s on copy 1 and copy 2."""

    baseline: tuple[Any, RunStats]
    mode: tuple[Any, RunStats]
    baseline_tps: tuple[float, float]
    mode_tps: tuple[float, float]


def run_pair_interleaved(session: Any, twin: Any, prompt: str, mode: str, k: int | None) -> InterleavedPair:
    """A pair measured round by round (:mod:`specchat.bench.lockstep`): the baseline on ``session`` against
    ``mode`` on ``twin`` (a second copy of the same target), interleaved, then the two swapped."""

    def half(base_on: Any, mode_on: Any) -> list[tuple[Any, RunStats]]:
        prepare_run(base_on, "baseline", 0)
        prepare_run(mode_on, mode, k)
        return run_interleaved([(base_on, lambda s: s.send(prompt)), (mode_on, lambda s: s.send(prompt))],
                               count_event, RunStats)

    (b1, m2), (b2, m1) = half(session, twin), half(twin, session)
    tps = lambda run: float(run[0].predicted_per_second)  # noqa: E731
    return InterleavedPair(baseline=b1, mode=m1, baseline_tps=(tps(b1), tps(b2)), mode_tps=(tps(m1), tps(m2)))


def make_record(item: PlanItem, turn: Any, stats: RunStats, drafter: str) -> dict[str, Any]:
    return {
        "prompt": item.prompt,
        "mode": item.mode,
        "k": item.k,
        "run": item.run,
        "pair": item.pair,
        "prompt_n": turn.prompt_n,
        "prompt_ms": turn.prompt_ms,
        "predicted_n": turn.predicted_n,
        "predicted_ms": turn.predicted_ms,
        "predicted_per_second": turn.predicted_per_second,
        "draft_n": turn.draft_n,
        "draft_n_accepted": turn.draft_n_accepted,
        "acceptance": turn.acceptance,
        "mean_len": turn.mean_len,
        "speedup": None,  # filled in for the speculative half of a pair
        "n_steps": turn.n_steps,
        "n_spec_steps": turn.n_spec_steps,
        "overhead_ms": turn.overhead_ms,
        "draft_ms": turn.draft_ms_per_step * turn.n_steps,  # wall time of the draft calls  # time of the rounds spent outside llama_decode (Python, sampling)
        "rejections": stats.rejections,
        "k_mean": stats.k_sum / stats.rounds if stats.rounds else 0.0,
        "rounds_by_drafted": list(stats.drafted_hist),  # [plain rounds, rounds drafting 1, ..., K_MAX]
        "round_log": stats.round_log,  # [K, drafted, accepted, natural] of every round that asked for a draft
        "stop_reason": turn.stop_reason,
        "drafter": drafter if item.mode != "baseline" else NONE,
        # the cost model's view after the last round (auto-K's α, c, v, best K); None for fixed K
        "estimate": _estimate(stats.last_cost) if item.mode == "auto" else None,
        "target": item.target,
        "x_reference": None,  # several targets: tok/s / the round's reference baseline tok/s
        # the accepted draft tokens by where they came from (conversation, history, model), the saved
        # conversations the history drafts copied, and the reply itself (greedy runs: every drafter's must be plain's)
        "accepted_by_origin": dict(getattr(turn, "accepted_by_origin", {}) or {}),
        "history_conversations": list(getattr(turn, "history_conversations", []) or []),
        "text": getattr(turn, "text", ""),
        # measured round by round against its partner (lockstep): this side's tok/s on copy 1 and on copy 2 of the
        # target, predicted_per_second their geometric mean; None for a reply measured alone
        "halves": None,
    }


def _estimate(cost: Any) -> dict[str, Any] | None:
    """A CostEstimate as JSON, its v(K) curve reduced to the reason line (the arithmetic has the curve); an
    infinite break-even α (nothing pays) is not JSON: null."""
    if cost is None:
        return None
    out = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(cost).items()}
    verify = out.pop("verify", None)
    out["verify_reason"] = verify["reason"] if verify else None
    return out


class BenchRunner:
    """Runs a plan on a loaded session (or on several, ``{label: session}``, with a ``reference`` label);
    ``on_record(record)`` is called after every record (a hook for tests and for live output); a
    KeyboardInterrupt anywhere stops the runs and keeps what was measured."""

    def __init__(
        self,
        session: Any,
        suite: Sequence[dict[str, str]],
        ks: Sequence[int],
        runs: int,
        *,
        auto: bool = False,
        progress: Progress | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        run_fn: Callable[..., tuple[Any, RunStats]] | None = None,
        reference: str | None = None,
        baseline_only: Collection[str] = (),
        plan: list[PlanItem] | None = None,
        drafter: str | None = None,
        drafters: Mapping[str, str] | None = None,
        twins: Mapping[str, Any] | None = None,
    ) -> None:
        self.sessions: dict[str, Any] = dict(session) if isinstance(session, Mapping) else {"": session}
        self.suite = list(suite)
        self.prompts = {p["name"]: p["prompt"] for p in self.suite}
        self.plan = plan if plan is not None else make_plan(
            self.suite, ks, runs, auto, targets=list(self.sessions), baseline_only=baseline_only,
            reference=reference,
        )
        self.progress = progress
        self.on_record = on_record
        self.run_fn = run_fn or (lambda *a: run_once(*a))  # looked up at call time
        self.records: list[dict[str, Any]] = []
        self.interrupted = False
        self.drafters = {
            label: drafter or getattr(getattr(s, "decoder", None), "drafter_name", None) or NONE
            for label, s in self.sessions.items()
        }
        #: ``drafters``: one session under several labels, each run with its own drafter (the bench's drafters side
        #: by side: ``suffix`` against ``ngram``); the drafter is set before each of the label's runs
        self.switch = dict(drafters or {})
        self.drafters.update(self.switch)
        #: ``twins``: a second copy of a target's session, ``{label: session}``: that target's pairs are measured
        #: round by round (:func:`run_pair_interleaved`), each twice with the copies swapped
        self.twins: dict[str, Any] = dict(twins or {})

    def run(self) -> list[dict[str, Any]]:
        total = len(self.plan)
        baseline_of: dict[int, dict[str, Any]] = {}
        reference_of: dict[tuple[str, int], float] = {}  # (prompt, run) -> the reference baseline's tok/s
        try:
            i = 0
            while i < total:
                item = self.plan[i]
                partner = self._partner(i)
                shown = partner or item
                if self.progress:
                    what = "baseline" if shown.mode == "baseline" else ("auto-K" if shown.mode == "auto" else f"K={shown.k}")
                    where = f"{shown.target} " if shown.target else ""
                    self.progress(i, total, f"{where}{shown.prompt} {what} run {shown.run + 1}")
                session = self.sessions[item.target]
                twin = self.twins.get(item.target)
                if item.target in self.switch:
                    for s in (session, twin) if twin is not None else (session,):
                        s.controls.set_drafter(self.switch[item.target])
                prompt = self.prompts[item.prompt]
                measured: list[tuple[PlanItem, Any, RunStats, tuple[float, float] | None]]
                if partner is not None:
                    pair = run_pair_interleaved(session, twin, prompt, partner.mode, partner.k)
                    measured = [(item, *pair.baseline, pair.baseline_tps), (partner, *pair.mode, pair.mode_tps)]
                    i += 2
                else:
                    turn, stats = self.run_fn(session, prompt, item.mode, item.k)
                    measured = [(item, turn, stats, None)]
                    i += 1
                for it, turn, stats, halves in measured:
                    rec = make_record(it, turn, stats, self.drafters[it.target])
                    if halves is not None:  # the pair's figures: geometric means over the two copies
                        rec["halves"] = list(halves)
                        tps = math.sqrt(halves[0] * halves[1])
                        rec["predicted_per_second"] = tps
                        if tps > 0:
                            rec["predicted_ms"] = rec["predicted_n"] / tps * 1000.0
                    if it.mode == "baseline":
                        baseline_of[it.pair] = rec
                    else:
                        base = baseline_of.get(it.pair)
                        if base is not None and base["predicted_per_second"] > 0:
                            rec["speedup"] = rec["predicted_per_second"] / base["predicted_per_second"]
                    if it.reference:
                        reference_of[(it.prompt, it.run)] = rec["predicted_per_second"]
                    ref = reference_of.get((it.prompt, it.run))
                    if ref:
                        rec["x_reference"] = rec["predicted_per_second"] / ref
                    self.records.append(rec)
                    if self.on_record:
                        self.on_record(rec)
            if self.progress:
                self.progress(total, total, "done")
        except KeyboardInterrupt:
            self.interrupted = True
        return self.records

    def _partner(self, i: int) -> PlanItem | None:
        """The run measured round by round against plan item ``i`` (a baseline): its pair's other run, when its
        target has a second copy (:attr:`twins`); None: item ``i`` runs alone."""
        item = self.plan[i]
        if item.mode != "baseline" or item.reference or item.target not in self.twins or i + 1 >= len(self.plan):
            return None
        nxt = self.plan[i + 1]
        same = nxt.pair == item.pair and nxt.target == item.target and nxt.prompt == item.prompt
        return nxt if same and nxt.mode != "baseline" else None


__all__ = [
    "RECORD_FIELDS", "BenchRunner", "InterleavedPair", "PlanItem", "RunStats", "count_event", "make_plan", "make_record",
    "measure_reply", "prepare_run", "run_once", "run_pair_interleaved",
]
