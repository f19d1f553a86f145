"""``specchat bench``: the seed's experiment on any pair in one command.

**Protocol.** One loaded target + drafter (:func:`specchat.engine.loader.load_engine`). For every prompt
of the suite and every run index r, each speculative mode (fixed K = 1.., and ``auto`` with ``--auto``)
is measured as an adjacent pair ``baseline, mode`` - so a run of the bench reads A B A C A B A C ... and
slow drift of a shared machine (thermal, other processes) hits both halves of a pair alike. The baseline
is speculation off (plain single-row decodes) on the very same loaded models. Before every run the
conversation is reset and both KV caches and the drafter's state are cleared, so each run decodes its
prompt the same way and the measured generation starts from the same state.

**Summary** per (prompt, mode): median / min / max of ``predicted_per_second``, acceptance
(Σ accepted / Σ drafted over the runs), mean len (1 + Σ accepted / Σ verify steps with a draft, llama.cpp's
figure) and the speedup = the **median of the per-pair ratios** spec tok/s / baseline tok/s (not a ratio of
medians: each ratio is measured under the same conditions). The ``baseline`` row (K = 0) pools all
baseline runs of the prompt.

**Arithmetic** (the seed's "Step 5"; Leviathan et al. 2023, §3.3-3.4, with a measured verify cost):

* the engine's own calibration (:mod:`specchat.engine.calibration`) on a fresh
  :class:`~specchat.engine.telemetry.CostModel`, at the suite's first prompt: the same functions and the
  same fit as auto-K and the sidebar, with every verify size 1..K_MAX+1 timed ``reps`` times (each right
  after a single-row decode). So the bench's c and v(K) are the engine's:
* target alone: the cost model's single-row decode time (median);
* draft alone: a draft model's single-row decode, timed against the target's with both caches empty
  (c = draft / target per token); a drafter that runs no model (n-gram) costs c = 0 until rounds time it -
  its cost in the runs is printed per prompt;
* v(K) = time of a (K+1)-row verify decode (logits on every row, as the speculative loop asks) / time of
  a single-row decode, as the cost model fits it (row medians shrunk toward a line, made monotone);
* α = Σ accepted / (Σ accepted + Σ rounds with a rejection) over the fixed-K runs of a prompt (the
  maximum-likelihood per-position acceptance, :class:`specchat.engine.telemetry.CostModel`);
* E(α, K) and S(K) = E / (c·K + v(K)) from :mod:`specchat.engine.telemetry`, next to the measured tokens
  per round and the measured speedup;
* the replay: the rounds of the largest fixed K replayed at every K (what each would have given with a
  smaller cap is known exactly; only positions never drafted use the geometric tail) - the estimate auto-K
  uses live. The recommended K = argmax of the replay's S over 0..K_MAX (0 = off), or of the geometric S
  when no rounds were logged.

E assumes every round drafts K tokens; an n-gram drafter proposes fewer (or none) when the text has no
earlier match, so its measured tokens per round can fall below E - that gap is printed, not hidden.

Ctrl-C stops the runs: what was measured is summarised, printed and written to ``--json``; exit 130.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from specchat.engine.calibration import calibrate_draft_cost, calibrate_verify_cost, draft_cost_ratios
from specchat.engine.drafter_kinds import K_MAX, MODEL, NONE
from specchat.engine.events import CostEstimate
from specchat.engine.protocol import Message
from specchat.engine.telemetry import (
    CostModel,
    best_k,
    break_even_line,
    expected_tokens,
    natural_length,
    predicted_speedup,
    replay_speedups,
    speedup_curve,
)
from specchat.errors import UserError

ALL_PROMPTS = "(all prompts)"
DEFAULT_KS = "0,1,2,3,5,8"
DEFAULT_N_PREDICT = 256

RECORD_FIELDS = (
    "prompt", "mode", "k", "run", "pair", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
    "predicted_per_second", "draft_n", "draft_n_accepted", "acceptance", "mean_len", "speedup",
    "n_steps", "n_spec_steps", "overhead_ms", "draft_ms", "rounds_by_drafted", "rejections", "k_mean", "stop_reason", "drafter", "estimate",
    "round_log",
)  # fmt: skip

# =================================================================================================
# The default suite
# =================================================================================================

_COPY_CODE = '''\
def summarize_scores(records):
    """Return statistics about the score field of a list of records."""
    x = 0
    total = 0.0
    best = None
    worst = None
    names = []
    for record in records:
        score = record.get("score")
        if score is None:
            continue
        x = x + 1
        total = total + score
        if best is None or score > best:
            best = score
        if worst is None or score < worst:
            worst = score
        names.append(record.get("name", "unknown"))
    if x == 0:
        return {"count": 0, "mean": None, "best": None, "worst": None}
    mean = total / x
    spread = best - worst
    report = {
        "count": x,
        "mean": round(mean, 3),
        "best": best,
        "worst": worst,
        "spread": spread,
        "names": sorted(names),
    }
    if x > 10:
        report["note"] = "large sample"
    elif x > 3:
        report["note"] = "medium sample"
    else:
        report["note"] = "small sample"
    print("processed", x, "records")
    return report
'''

_PASSAGE = """\
The town of Harwick grew up around a river crossing, and for most of its history the river was both its \
fortune and its trouble. In the early years the crossing was a ford, usable only in late summer, and the \
farmers who lived on the eastern bank had to carry their grain north for two days to reach the nearest \
bridge. When a group of them pooled their savings to build a timber bridge, the town gained its first \
reliable link to the markets on the western side. The bridge was rebuilt three times in fifty years: \
twice after spring floods carried away the piers, and once after a fire started by a careless blacksmith \
whose forge stood too close to the timbers.

The floods were the larger problem. Every few years melting snow in the hills raised the river by several \
metres within a single night, and the low streets near the water were flooded to the height of a door. \
Families who lived there kept their food and their bedding on upper shelves and learned to read the colour \
of the water as a warning: when it turned from green to brown, the flood was a day away. The town council \
debated for decades whether to build an embankment. The merchants wanted one, because their warehouses \
stood on the low ground; the millers opposed it, because an embankment would change the flow that turned \
their wheels; and the farmers downstream feared that a wall in Harwick would simply send the water onto \
their fields instead.

The debate was settled not by argument but by a particularly bad winter. After a season of heavy snow, \
the spring flood came faster than anyone alive could remember. It destroyed the bridge for the fourth \
time, drowned livestock, ruined the stores of grain in every warehouse near the river and left a layer of \
mud in the church that took weeks to clear. Two people died trying to rescue animals from a stable. In the \
months that followed, the council hired an engineer from the capital, a quiet woman named Elsa Marren, who \
had built drainage works in the marshes along the coast.

Marren spent her first summer walking the river from the hills to the sea. She measured its width and \
depth at dozens of points, recorded the marks that earlier floods had left on trees and walls, and \
interviewed the oldest residents about the floods they remembered. Her conclusion surprised the council. \
An embankment alone, she wrote, would protect the town for a few years and then fail, because the river \
carried so much silt that its bed rose a little every year; a wall would only make the river run higher \
between its banks until one day it broke through. Instead she proposed three works together: a relief \
channel that would carry flood water around the town through the old meadows to the south, a set of \
sluice gates at the head of that channel, and a modest embankment along the streets that flooded most \
often.

The plan was expensive, and for a year it seemed it would never be built. The millers still objected, \
since the relief channel would take water away from their wheels during the driest weeks, and the owners \
of the southern meadows did not want a channel cut through their grazing land. Marren met each group \
separately. For the millers she designed the sluice gates so that they would stay closed except when the \
river rose above a marked level, which meant that in ordinary seasons the mills would receive exactly as \
much water as before. For the landowners she proposed that the channel banks be planted as hay meadows, \
flooded for a few days in the worst years but otherwise as useful as the fields they replaced, and the \
council agreed to pay them a yearly rent for the land.

Construction took four summers. Most of the labour came from the town itself, from farm workers who were \
idle between the planting and the harvest, and the council paid them partly in money and partly in a \
reduction of their taxes. The sluice gates were made of oak and iron and were opened and closed by a pair \
of large wheels that two men could turn together. A keeper was appointed to live in a small house beside \
the gates, to watch the river level and to open the gates when the water reached the mark that Marren had \
cut into a stone post. The first keeper was a former soldier who kept a careful diary of the river level \
every morning and evening for thirty years; his notebooks are still kept in the town library and have \
been used by later engineers to study how the river changed.

The works were tested sooner than anyone expected. In the second spring after they were finished, a flood \
almost as large as the one that had destroyed the bridge came down from the hills. The keeper opened the \
gates at midnight, and by morning the relief channel was a wide brown river of its own, running through \
the southern meadows while the streets of Harwick stayed dry. The new stone bridge, built at the same time \
as the channel, stood without damage. The merchants held a dinner in Marren's honour, and even the millers, \
whose wheels had turned all through the flood, admitted that the scheme had worked.

Over the following century the town grew well beyond the area the works had been designed to protect. New \
houses were built on the southern edge of the meadows, closer to the channel than Marren would have \
allowed, and in two later floods their cellars filled with water. Each time the council debated whether to \
widen the channel or to forbid building near it, and each time it chose the cheaper course of raising the \
embankment a little. Modern engineers who have studied the river say that the original design remains \
sound, but that it depends on keeping the relief channel and its meadows free of buildings, which is a \
question of planning rather than engineering.

The works also changed the life of the town in ways nobody had planned. With the low streets safe from \
the water, the merchants built larger warehouses there, and within a generation the riverside had become \
the busiest part of Harwick, with a market every week and an inn for the carters who brought goods from \
the hills. The meadows along the relief channel, flooded now and then with water rich in silt, gave better \
hay than any field nearby, and the landowners who had fought the channel ended up asking the council to \
flood them more often. The old ford, no longer needed, silted up and became a shallow pool where children \
learned to swim in summer and where the keeper's successors measured the river's clarity each spring.

Today the sluice gates are operated by electric motors, and the keeper's house is a small museum. Visitors \
can see the original wheels, the stone post with its flood mark, and a copy of Marren's report, in which \
she wrote that a river cannot be defeated, only given room. The phrase is painted above the door of the \
museum, and schoolchildren in Harwick still learn it, usually without knowing who first wrote it.\
"""

DEFAULT_SUITE: tuple[dict[str, str], ...] = (
    {
        "name": "code",
        "prompt": "Write a Python function that checks whether a number is prime, with a docstring and tests.",
    },
    {"name": "prose", "prompt": "Write a short story about a lighthouse keeper."},
    {
        "name": "copy-heavy",
        "prompt": "Rename the variable x to count in this code and return the full code.\n\n"
        f"```python\n{_COPY_CODE}```",
    },
    {
        "name": "summary",
        "prompt": f"Summarise the following passage in one paragraph.\n\n{_PASSAGE}",
    },
)


def load_suite(spec: str | None) -> list[dict[str, str]]:
    """``default`` (or None) -> :data:`DEFAULT_SUITE`; else a TOML or JSON file holding a list of
    ``{name, prompt}`` tables (JSON: a list, or an object with a ``prompts`` list; TOML: ``[[prompts]]``)."""
    if spec in (None, "", "default"):
        return [dict(p) for p in DEFAULT_SUITE]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise UserError(f"suite file {path} does not exist: give a TOML/JSON file of {{name, prompt}} entries or --suite default")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read suite file {path}: {exc}") from None
    import tomllib

    suffix = path.suffix.lower()
    fmt = "json" if suffix == ".json" else "toml" if suffix == ".toml" else None
    data: Any = None
    if fmt in ("json", None):
        try:
            data = json.loads(text)
            fmt = "json"
        except json.JSONDecodeError as exc:
            if fmt == "json":
                raise UserError(f"suite file {path} is not valid JSON (line {exc.lineno}: {exc.msg}); expected a list of {{name, prompt}}") from None
    if fmt in ("toml", None):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            what = "TOML" if fmt == "toml" else "JSON or TOML"
            raise UserError(f"suite file {path} is not valid {what} ({exc}); expected [[prompts]] tables with name and prompt") from None
    if isinstance(data, dict):
        data = data.get("prompts")
    if not isinstance(data, list) or not data:
        raise UserError(f"suite file {path} has no prompts: expected a non-empty list of {{name, prompt}} ([[prompts]] in TOML)")
    suite: list[dict[str, str]] = []
    seen: set[str] = set()
    for i, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise UserError(f"suite file {path}: entry {i} is not a table with name and prompt")
        name, prompt = item.get("name"), item.get("prompt")
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"suite file {path}: entry {i} needs a non-empty string 'name'")
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(f"suite file {path}: entry {i} ({name}) needs a non-empty string 'prompt'")
        extra = set(item) - {"name", "prompt"}
        if extra:
            raise UserError(f"suite file {path}: entry {i} ({name}) has unknown key {sorted(extra)[0]!r}; only name and prompt are read")
        if name in seen:
            raise UserError(f"suite file {path}: prompt name {name!r} appears twice; names must be unique")
        seen.add(name)
        suite.append({"name": name, "prompt": prompt})
    return suite


def parse_k_list(text: str) -> list[int]:
    """``"0,1,3"`` -> [0, 1, 3] (sorted, unique); every K in 0..K_MAX."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        ks = [int(p) for p in parts if p]
    except ValueError:
        raise UserError(f"--k {text!r} is not a comma-separated list of integers: use e.g. --k 0,1,3,5") from None
    if not ks:
        raise UserError("--k is empty: give draft lengths, e.g. --k 0,1,3,5")
    bad = [k for k in ks if not 0 <= k <= K_MAX]
    if bad:
        raise UserError(f"--k {text}: {bad[0]} is out of range; every K must be 0..{K_MAX} (0 = baseline)")
    return sorted(set(ks))


# =================================================================================================
# Records and the runner
# =================================================================================================


@dataclass(frozen=True, slots=True)
class PlanItem:
    prompt: str  # suite entry name
    mode: str  # baseline | spec | auto
    k: int | None  # fixed K (0 for baseline), None for auto
    run: int  # run index 0..runs-1
    pair: int  # the A/B pair this run belongs to (baseline and its partner share it)


def make_plan(suite: Sequence[dict[str, str]], ks: Sequence[int], runs: int, auto: bool) -> list[PlanItem]:
    """The order of the runs: per prompt, per run index, each speculative mode right after its own
    baseline run (A B A C ... A B A C ...). With no speculative mode, baselines only."""
    modes: list[tuple[str, int | None]] = [("spec", k) for k in ks if k > 0]
    if auto:
        modes.append(("auto", None))
    plan: list[PlanItem] = []
    pair = 0
    for item in suite:
        for r in range(runs):
            if not modes:
                plan.append(PlanItem(item["name"], "baseline", 0, r, pair))
                pair += 1
            for mode, k in modes:
                plan.append(PlanItem(item["name"], "baseline", 0, r, pair))
                plan.append(PlanItem(item["name"], mode, k, r, pair))
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


def run_once(session: Any, prompt: str, mode: str, k: int | None) -> tuple[Any, RunStats]:
    """One measured reply on a fresh conversation and cleared caches; returns (Turn, RunStats)."""
    from specchat.engine.events import EngineError, Step, Turn

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
        dec.auto_k.reset()
        c.set_speculative(True)
        c.set_auto_k(True)
    stats = RunStats()
    turn = None
    for ev in session.send(prompt):
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
        elif isinstance(ev, Turn):
            turn = ev
        elif isinstance(ev, EngineError):
            raise UserError(f"generation failed during the bench: {ev.message}")
    if turn is None:  # pragma: no cover - a generation always ends with a Turn
        raise UserError("generation produced no result")
    return turn, stats


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
        "estimate": asdict(stats.last_cost) if item.mode == "auto" and stats.last_cost is not None else None,
    }


Progress = Callable[[int, int, str], None]


class BenchRunner:
    """Runs a plan on a loaded session; ``on_record(record)`` is called after every record (a hook for
    tests and for live output); a KeyboardInterrupt anywhere stops the runs and keeps what was measured."""

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
    ) -> None:
        self.session = session
        self.suite = list(suite)
        self.prompts = {p["name"]: p["prompt"] for p in self.suite}
        self.plan = make_plan(self.suite, ks, runs, auto)
        self.progress = progress
        self.on_record = on_record
        self.run_fn = run_fn or (lambda *a: run_once(*a))  # looked up at call time
        self.records: list[dict[str, Any]] = []
        self.interrupted = False
        dec = getattr(session, "decoder", None)
        self.drafter = getattr(dec, "drafter_name", None) or NONE

    def run(self) -> list[dict[str, Any]]:
        total = len(self.plan)
        baseline_of: dict[int, dict[str, Any]] = {}
        try:
            for i, item in enumerate(self.plan):
                if self.progress:
                    what = "baseline" if item.mode == "baseline" else ("auto-K" if item.mode == "auto" else f"K={item.k}")
                    self.progress(i, total, f"{item.prompt} {what} run {item.run + 1}")
                turn, stats = self.run_fn(self.session, self.prompts[item.prompt], item.mode, item.k)
                rec = make_record(item, turn, stats, self.drafter)
                if item.mode == "baseline":
                    baseline_of[item.pair] = rec
                else:
                    base = baseline_of.get(item.pair)
                    if base is not None and base["predicted_per_second"] > 0:
                        rec["speedup"] = rec["predicted_per_second"] / base["predicted_per_second"]
                self.records.append(rec)
                if self.on_record:
                    self.on_record(rec)
            if self.progress:
                self.progress(total, total, "done")
        except KeyboardInterrupt:
            self.interrupted = True
        return self.records


# =================================================================================================
# Summary
# =================================================================================================


@dataclass(slots=True)
class SummaryRow:
    prompt: str
    mode: str
    k: int | None
    runs: int
    tps_median: float
    tps_min: float
    tps_max: float
    acceptance: float | None
    mean_len: float
    alpha: float | None  # per-position acceptance (MLE), None without drafts
    tokens_per_round: float
    k_mean: float
    speedup: float | None  # median of pair ratios (1.0 for the baseline row)
    speedup_min: float | None
    speedup_max: float | None
    pairs: int
    overhead_per_round: float = 0.0  # ms outside llama_decode per round
    draft_ms_per_token: float = 0.0  # wall ms of the draft calls per drafted token, in the runs
    rounds_by_drafted: list[int] = field(default_factory=list)  # Σ over the runs
    predicted_n: int = 0  # Σ tokens
    accepted: int = 0  # Σ draft_n_accepted (with ``rejections``: the counts α came from)
    rejections: int = 0  # Σ rounds with a rejection
    round_log: list[list[int | None]] = field(default_factory=list)  # the runs' round logs, concatenated


def alpha_mle(accepted: int, rejections: int) -> float | None:
    """α̂ = Σ accepted / (Σ accepted + Σ rounds with a rejection) (right-censored geometric MLE)."""
    tot = accepted + rejections
    return accepted / tot if tot else None


def summarize(records: Sequence[dict[str, Any]]) -> list[SummaryRow]:
    """One row per (prompt, mode, K), in the order the records first appear (baseline first per prompt)."""
    groups: dict[tuple[str, str, int | None], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["prompt"], r["mode"], r["k"]), []).append(r)
    order = sorted(
        groups,
        key=lambda g: (
            next(i for i, r in enumerate(records) if r["prompt"] == g[0]),
            {"baseline": 0, "spec": 1, "auto": 2}[g[1]],
            g[2] if g[2] is not None else 99,
        ),
    )
    rows = []
    for key in order:
        rs = groups[key]
        tps = [r["predicted_per_second"] for r in rs]
        drafted = sum(r["draft_n"] for r in rs)
        acc = sum(r["draft_n_accepted"] for r in rs)
        spec_steps = sum(r["n_spec_steps"] for r in rs)
        steps = sum(r["n_steps"] for r in rs)
        ratios = [r["speedup"] for r in rs if r["speedup"] is not None]
        is_base = key[1] == "baseline"
        rows.append(
            SummaryRow(
                prompt=key[0], mode=key[1], k=key[2], runs=len(rs),
                tps_median=statistics.median(tps), tps_min=min(tps), tps_max=max(tps),
                acceptance=acc / drafted if drafted else None,
                mean_len=1.0 + acc / spec_steps if spec_steps else 1.0,
                alpha=alpha_mle(acc, sum(r["rejections"] for r in rs)) if drafted else None,
                tokens_per_round=sum(r["predicted_n"] for r in rs) / steps if steps else 0.0,
                overhead_per_round=sum(r.get("overhead_ms", 0.0) for r in rs) / steps if steps else 0.0,
                draft_ms_per_token=sum(r.get("draft_ms", 0.0) for r in rs) / drafted if drafted else 0.0,
                rounds_by_drafted=[sum(col) for col in zip(*(r.get("rounds_by_drafted") or [0] * (K_MAX + 1) for r in rs))],
                predicted_n=sum(r["predicted_n"] for r in rs),
                k_mean=statistics.fmean(r["k_mean"] for r in rs),
                speedup=1.0 if is_base else (statistics.median(ratios) if ratios else None),
                speedup_min=1.0 if is_base else (min(ratios) if ratios else None),
                speedup_max=1.0 if is_base else (max(ratios) if ratios else None),
                pairs=len(ratios),
                accepted=acc,
                rejections=sum(r["rejections"] for r in rs),
                round_log=[x for r in rs for x in (r.get("round_log") or [])],
            )
        )  # fmt: skip
    return rows


# =================================================================================================
# The arithmetic: the engine's cost model calibrated on the pair, predictions vs measurements
# =================================================================================================


@dataclass(slots=True)
class Calibration:
    """The engine's cost model after :func:`calibrate`, and where it was measured."""

    cost_model: CostModel
    drafter: str  # the drafter's name (NONE when there is none)
    draft_kind: str  # MODEL | NGRAM | NONE (specchat.engine.drafter_kinds)
    context_n: int  # tokens in the target's KV while timing
    reps: int  # repetitions of the verify timings

    @property
    def target_ms(self) -> float:
        return self.cost_model.target_ms() or 0.0

    @property
    def draft_ms(self) -> float:
        return self.cost_model.draft_ms_per_token(self.drafter)

    @property
    def c(self) -> float:
        return self.cost_model.c(self.drafter)

    def v_table(self) -> list[float]:
        """v(K) for K = 0..K_MAX, as auto-K and the sidebar read it."""
        return [self.cost_model.v(k) for k in range(K_MAX + 1)]


def calibrate(session: Any, prompt: str, *, reps: int = 7, progress: Progress | None = None) -> Calibration:
    """Calibrate a fresh engine cost model on the pair, through the engine's own path.

    The functions and the order of :meth:`SpeculativeDecoder.generate`'s first turn
    (:mod:`specchat.engine.calibration`): the draft timed against the target with both KVs empty, then the
    chat-formatted ``prompt`` (minus its last token) decoded into the target, then v(K). The bench times
    every verify size 1..K_MAX+1 (the engine only a few), ``reps`` times over, each right after a
    single-row batch so drift hits both; the cost model's fit turns the timings into v(K) and c - the same
    estimator the sidebar and auto-K read, so the bench cannot disagree with them.
    """
    dec = session.decoder
    target = dec.target
    dec.reset()
    session.reset()
    ctx = session.template.tokens([Message("user", prompt)])
    ctx = ctx[: max(2, min(len(ctx), target.n_ctx - K_MAX - 2))]
    drafter = dec.drafter
    drafters = {drafter.name: drafter} if drafter is not None else {}
    cm = CostModel()
    ratios = draft_cost_ratios(target, drafters, int(ctx[0]))
    target.decode(ctx[:-1], logits_last=0)
    last = int(ctx[-1])
    pairs = [rows for k in range(1, K_MAX + 1) for rows in (1, k + 1)]
    for r in range(reps):
        if progress:
            progress(r, reps, "verify cost v(K)")
        calibrate_verify_cost(target, cm, last, pairs, reps=1)
    calibrate_draft_cost(cm, drafters, last, ratios)
    dec.reset()
    session.reset()
    return Calibration(
        cost_model=cm, drafter=drafter.name if drafter is not None else NONE,
        draft_kind=drafter.kind if drafter is not None else NONE, context_n=len(ctx), reps=reps,
    )  # fmt: skip


def replay_of_rounds(fixed: Sequence[SummaryRow], alpha: float, c: float, vt: Sequence[float]) -> dict[str, Any] | None:
    """The rounds of the largest fixed K replayed at every K (auto-K's estimate, see
    :func:`specchat.engine.telemetry.replay_speedups`): exact up to what each round drafted, the
    geometric model with α only past it. None without logged rounds."""
    logged = [r for r in fixed if r.round_log]
    if not logged:
        return None
    top = max(logged, key=lambda r: int(r.k or 0))
    log = top.round_log
    d = [int(x[1]) for x in log]
    a = [int(x[2]) for x in log]
    n = [natural_length(int(x[0]), int(x[1]), x[3]) for x in log]
    curve = replay_speedups(d, a, n, [1.0] * len(log), alpha, c, vt, K_MAX)
    bk = best_k(curve)
    return {"from_k": int(top.k or 0), "rounds": len(log), "curve": curve, "best_k": bk,
            "predicted_best_speedup": curve[bk]}  # fmt: skip


def arithmetic(cal: Calibration, rows: Sequence[SummaryRow]) -> dict[str, Any]:
    """Predictions from (α, c, v) next to the measurements, per prompt and pooled; the best K."""
    vt = cal.v_table()
    t1, c, draft_ms = cal.target_ms, cal.c, cal.draft_ms
    out: dict[str, Any] = {
        "target_ms_per_token": t1,
        "target_tok_s": 1000.0 / t1 if t1 > 0 else None,
        "draft": cal.drafter,
        "draft_kind": cal.draft_kind,
        "draft_ms_per_token": draft_ms,
        "draft_tok_s": 1000.0 / draft_ms if draft_ms > 0 else None,
        "c": c,
        "v": {str(k): v for k, v in enumerate(vt)},
        "context_n": cal.context_n,
        "reps": cal.reps,
        "prompts": [],
    }
    by_prompt: dict[str, list[SummaryRow]] = {}
    for r in rows:
        by_prompt.setdefault(r.prompt, []).append(r)
    pooled_acc = pooled_rej = 0
    pooled = [(ALL_PROMPTS, None)] if len(by_prompt) > 1 else []
    for name, prs in [*by_prompt.items(), *pooled]:
        if prs is None:  # α over every fixed-K run of every prompt: the pair's overall recommendation
            fixed: list[SummaryRow] = []
            alpha = alpha_mle(pooled_acc, pooled_rej)
        else:  # α pooled over the fixed-K runs of this prompt (auto runs choose K from it, not vice versa)
            fixed = [r for r in prs if r.mode == "spec"]
            a_sum = sum(r.accepted for r in fixed)
            rej_sum = sum(r.rejections for r in fixed)
            pooled_acc += a_sum
            pooled_rej += rej_sum
            alpha = alpha_mle(a_sum, rej_sum)
        entry: dict[str, Any] = {"prompt": name, "alpha": alpha, "rows": []}
        d_tok = [r.draft_ms_per_token for r in fixed if r.draft_ms_per_token > 0]
        entry["c_in_runs"] = statistics.median(d_tok) / t1 if d_tok and t1 > 0 else None
        if alpha is not None:
            curve = speedup_curve(alpha, c, vt, K_MAX)
            bk = best_k(curve)
            entry["best_k"] = bk
            entry["predicted_best_speedup"] = curve[bk]
            entry["curve"] = curve
            base = next((r for r in prs or [] if r.mode == "baseline"), None)
            o0 = base.overhead_per_round if base else 0.0
            for r in fixed:
                k = int(r.k or 0)
                e = expected_tokens(alpha, k)
                # the same S with the rounds' measured time outside llama_decode added to both sides:
                # E·(t1 + o_0) / (t1·(c·K + v(K)) + o_K)
                with_o = e * (t1 + o0) / (t1 * (c * k + vt[k]) + r.overhead_per_round) if t1 > 0 else None
                # the rounds as they happened: their draft lengths d, costed with the measured v(d), the
                # runs' own draft cost per token and overhead per round, against one token per plain round
                c_run = r.draft_ms_per_token / t1 if t1 > 0 and r.draft_ms_per_token > 0 else c
                cost_rounds = sum(n * (t1 * (c_run * d + vt[d]) + r.overhead_per_round) for d, n in enumerate(r.rounds_by_drafted))
                from_rounds = r.predicted_n * (t1 + o0) / cost_rounds if cost_rounds > 0 else None
                entry["rows"].append({
                    "k": k,
                    "E": e,
                    "predicted_from_rounds": from_rounds,
                    "tokens_per_round": r.tokens_per_round,
                    "v": vt[k],
                    "predicted_speedup": predicted_speedup(alpha, k, c, vt[k]),
                    "predicted_with_overhead": with_o,
                    "overhead_ms_per_round": r.overhead_per_round,
                    "measured_speedup": r.speedup,
                })  # fmt: skip
            replay = replay_of_rounds(fixed, alpha, c, vt)
            if replay is not None:
                entry["replay"] = replay
                entry["geometric_best_k"], entry["geometric_best_speedup"] = bk, curve[bk]
                entry["best_k"], entry["predicted_best_speedup"] = replay["best_k"], replay["predicted_best_speedup"]
                entry["curve"] = replay["curve"]
            rk, rs = entry["best_k"], entry["predicted_best_speedup"]
            entry["break_even"] = break_even_line(
                CostEstimate(alpha=alpha, c=c, v=vt[rk], best_k=rk, predicted_speedup=rs,
                             target_ms_per_token=t1, draft_ms_per_token=draft_ms)
            )  # fmt: skip
            measured = {int(r.k or 0): r.speedup for r in fixed if r.speedup is not None}
            if measured:
                mk = max(measured, key=lambda k: measured[k])
                entry["best_measured_k"] = mk if measured[mk] > 1.0 else 0
        out["prompts"].append(entry)
    return out


# =================================================================================================
# Output: table, arithmetic, plot, JSON, progress line
# =================================================================================================


def _fmt(x: float | None, spec: str, none: str = "-") -> str:
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _mode_label(r: SummaryRow) -> str:
    return "auto" if r.mode == "auto" else str(r.k)


def format_table(rows: Sequence[SummaryRow]) -> str:
    w = max([12, *(len(r.prompt) for r in rows)])
    head = (
        f"{'prompt':<{w}} {'K':>4} {'runs':>4} {'tok/s med':>9} {'min':>7} {'max':>7} {'accept':>7} "
        f"{'mean len':>8} {'speedup':>8} {'(pair min..max)':>16}"
    )
    lines = [head, "-" * len(head)]
    prev = None
    for r in rows:
        name = r.prompt if r.prompt != prev else ""
        prev = r.prompt
        rng = "" if r.mode == "baseline" or r.speedup is None else f"{r.speedup_min:.2f}..{r.speedup_max:.2f}"
        k = "base" if r.mode == "baseline" else _mode_label(r)
        lines.append(
            f"{name:<{w}} {k:>4} {r.runs:>4} {r.tps_median:>9.1f} {r.tps_min:>7.1f} {r.tps_max:>7.1f} "
            f"{_fmt(r.acceptance, '.3f'):>7} {r.mean_len:>8.2f} {_fmt(r.speedup, '.2f') + '×':>8} {rng:>16}"
        )
        if r.mode == "auto":
            lines[-1] += f"  (mean K {r.k_mean:.1f})"
    return "\n".join(lines)


def noise_warnings(rows: Sequence[SummaryRow], spread: float = 1.5) -> list[str]:
    """A line per prompt whose baseline runs varied by more than ``spread``× (max/min tok/s): a busy
    machine (other processes, OpenMP threads spinning on shared cores) makes single ratios unreliable."""
    out = []
    for r in rows:
        if r.mode == "baseline" and r.tps_min > 0 and r.tps_max / r.tps_min > spread:
            out.append(
                f"warning: {r.prompt}: baseline runs ranged {r.tps_min:.1f}..{r.tps_max:.1f} tok/s "
                f"({r.tps_max / r.tps_min:.1f}×): the machine is busy; trust medians of many pairs, or use fewer --threads"
            )
    return out


def format_arithmetic(ar: dict[str, Any]) -> str:
    lines = ["", "The arithmetic (seed Step 5; Leviathan et al. 2023 with measured v):"]
    t_ms = ar["target_ms_per_token"]
    lines.append(
        f"  target alone: {t_ms:.2f} ms per single-row decode = {ar['target_tok_s'] or 0:.1f} tok/s "
        f"(context {ar['context_n']} tokens, median)"
    )
    if ar["draft_kind"] == MODEL:
        lines.append(f"  draft alone:  {ar['draft_ms_per_token']:.2f} ms per token = {ar['draft_tok_s'] or 0:.1f} tok/s ({ar['draft']})")
    elif ar["draft_kind"] != NONE:
        lines.append(f"  draft alone:  {ar['draft']} runs no model: c = 0 until rounds time its lookups ('in the runs' below)")
    lines.append(f"  cost ratio c = draft / target per token = {ar['c']:.4f}")
    v = ar["v"]
    ks = [k for k in sorted(int(k) for k in v) if k > 0]
    lines.append(f"  verify cost v(K) = t(K+1 rows) / t(1 row), the engine's fit of {ar['reps']} timings per size (as auto-K reads it):")
    for chunk in range(0, len(ks), 8):
        part = ks[chunk : chunk + 8]
        lines.append("    " + "  ".join(f"K={k:<2d} {v[str(k)]:.2f}" for k in part))
    for p in ar["prompts"]:
        if p["alpha"] is None:
            continue
        lines.append("")
        lines.append(f"  {p['prompt']}: α = {p['alpha']:.3f} (accepted / (accepted + rejections) over the fixed-K runs)")
        if p["rows"]:
            lines.append(
                f"    {'K':>3} {'E(α,K)':>7} {'tok/round':>9} {'v(K)':>6} {'predicted':>9} {'from rounds':>11} {'measured':>9}"
            )
            for row in p["rows"]:
                lines.append(
                    f"    {row['k']:>3} {row['E']:>7.2f} {row['tokens_per_round']:>9.2f} {row['v']:>6.2f} "
                    f"{row['predicted_speedup']:>8.2f}× {_fmt(row['predicted_from_rounds'], '.2f'):>10}× "
                    f"{_fmt(row['measured_speedup'], '.2f'):>8}×"
                )
            lines.append("    predicted = E(α,K) / (c·K + v(K)), every round drafting K (Leviathan et al.)")
            lines.append(
                "    from rounds = the runs' tokens / Σ over their rounds of (v(d) + c·d) for the d actually drafted, "
                "with the runs' own draft cost and ms per round outside llama_decode"
            )
        if p.get("c_in_runs") is not None:
            lines.append(
                f"    in the runs a drafted token cost c = {p['c_in_runs']:.4f} (draft calls' wall time, incl. Python and "
                "catch-up rows)"
            )
        if "replay" in p:
            rp, gk = p["replay"], p["geometric_best_k"]
            lines.append(
                f"    geometric model (every round drafting K): best {'off' if gk == 0 else f'K = {gk}'} "
                f"(predicted {p['geometric_best_speedup']:.2f}×)"
            )
            lines.append(
                f"    replay of the K={rp['from_k']} runs' {rp['rounds']} rounds at every K (exact up to each round's "
                "draft, geometric past it; what auto-K uses):"
            )
        best = p["best_k"]
        rec = "off (K = 0)" if best == 0 else f"K = {best}"
        tail = ""
        if "best_measured_k" in p:
            bm = p["best_measured_k"]
            tail = f"; best measured: {'off' if bm == 0 else f'K = {bm}'}"
        lines.append(f"    recommended {rec} (predicted {p['predicted_best_speedup']:.2f}×){tail}")
        lines.append(f"    {p['break_even']}")
    return "\n".join(lines)


def format_plot(rows: Sequence[SummaryRow], width: int = 40) -> str:
    """Speedup vs K as horizontal bars; ``|`` marks 1.0× (break-even)."""
    spec = [r for r in rows if r.mode != "baseline" and r.speedup is not None]
    if not spec:
        return ""
    top = max(2.0, max(r.speedup_max or r.speedup for r in spec)) * 1.05
    one = int(round(width / top))
    lines = ["", f"speedup vs K (each # = {top / width:.3f}×, '|' = 1.0× break-even)"]
    prev = None
    for r in rows:
        if r.mode == "baseline":
            continue
        if r.prompt != prev:
            lines.append(f"  {r.prompt}")
            prev = r.prompt
        if r.speedup is None:
            continue
        n = int(round(r.speedup / top * width))
        bar = list("#" * n + " " * (width - n))
        if one < width:
            bar[one] = "|" if bar[one] == " " else "+"
        label = "auto" if r.mode == "auto" else f"K={r.k}"
        lines.append(f"    {label:>5} {''.join(bar)} {r.speedup:.2f}×")
    return "\n".join(lines)


class ProgressLine:
    """``[#####.....] 12/48 copy-heavy K=3 run 2 eta 40s`` on one ``\\r``-rewritten stderr line.

    Plain text, no dependency. Redrawn at most every ``interval`` seconds (and at every phase's start
    and end); the ETA restarts whenever ``done`` is 0 (a new phase). Disabled when ``enabled`` is False
    (``--no-progress``, or stderr is not a terminal: a log file gets no ``\\r`` noise).
    """

    def __init__(self, stream: TextIO, enabled: bool = True, width: int = 24, interval: float = 0.1) -> None:
        self.stream = stream
        self.enabled = enabled
        self.width = width
        self.interval = interval
        self._len = 0
        self._t0 = time.perf_counter()
        self._last = 0.0

    def __call__(self, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if done == 0:
            self._t0 = now
        elif done < total and now - self._last < self.interval:
            return
        self._last = now
        frac = min(1.0, done / total) if total else 1.0
        n = int(frac * self.width)
        el = now - self._t0
        eta = f" eta {el / done * (total - done):.0f}s" if 0 < done < total else ""
        text = f"[{'#' * n}{'.' * (self.width - n)}] {done}/{total} {what}{eta}"
        pad = max(0, self._len - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._len = len(text)

    def close(self) -> None:
        if self.enabled and self._len:
            self.stream.write("\r" + " " * self._len + "\r")
            self.stream.flush()
            self._len = 0


def build_report(
    *,
    meta: dict[str, Any],
    records: Sequence[dict[str, Any]],
    rows: Sequence[SummaryRow],
    arith: dict[str, Any] | None,
    interrupted: bool,
) -> dict[str, Any]:
    return {
        "specchat_bench": 1,
        "interrupted": interrupted,
        **meta,
        "records": list(records),
        "summary": [asdict(r) for r in rows],
        "arithmetic": arith,
    }


def write_json(path: str, report: dict[str, Any]) -> None:
    p = Path(path).expanduser()
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(p)
    except OSError as exc:
        raise UserError(f"cannot write --json {p}: {exc.strerror or exc}; choose a writable path") from None


# =================================================================================================
# The command
# =================================================================================================


def settings_overrides(args: Any) -> dict[str, Any]:
    o: dict[str, Any] = {}
    for flag in ("target", "draft", "threads", "n_ctx", "data_dir"):  # data_dir: specchat --data-dir D bench
        v = getattr(args, flag, None)
        if v is not None:
            o[flag] = v
    o["n_predict"] = args.n_predict if args.n_predict is not None else DEFAULT_N_PREDICT
    sampling = {}
    if getattr(args, "temperature", None) is not None:
        sampling["temperature"] = args.temperature
    if getattr(args, "seed", None) is not None:
        sampling["seed"] = args.seed
    if sampling:
        o["sampling"] = sampling
    return o


def validate_args(args: Any) -> tuple[list[int], list[dict[str, str]]]:
    """Everything checkable before loading a model; raises UserError (one line, exit 2)."""
    ks = parse_k_list(args.k if args.k is not None else DEFAULT_KS)
    if args.runs is None or args.runs <= 0:
        raise UserError(f"--runs {args.runs} must be a positive number of runs per (prompt, K)")
    if args.n_predict is not None and args.n_predict <= 0:
        raise UserError(f"--n-predict {args.n_predict} must be a positive number of tokens")
    if getattr(args, "threads", None) is not None and args.threads <= 0:
        raise UserError(f"--threads {args.threads} must be at least 1")
    if getattr(args, "temperature", None) is not None and not (0.0 <= args.temperature <= 5.0):
        raise UserError(f"--temperature {args.temperature} must be in 0..5 (0 = greedy)")
    suite = load_suite(args.suite)
    if args.json:
        parent = Path(args.json).expanduser().parent
        if not parent.is_dir():
            raise UserError(f"--json {args.json}: directory {parent} does not exist; create it or choose another path")
    if not any(k > 0 for k in ks) and not args.auto and not args.no_arithmetic:
        pass  # baseline-only is allowed: it measures the target alone
    return ks, suite


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def main(
    args: Any,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    *,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """``specchat bench``; returns the exit code (0, or 130 after Ctrl-C with the partial report)."""
    ks, suite = validate_args(args)
    from specchat.config import load_settings

    settings = load_settings(getattr(args, "config", None), settings_overrides(args))
    from specchat.engine.loader import load_engine

    show = not getattr(args, "no_progress", False) and (getattr(args, "progress", False) or _isatty(err))
    progress = ProgressLine(err, enabled=show)
    interrupted = False
    try:
        session = load_engine(settings, lambda f, what: progress(int(f * 100), 100, what), auto_k=False)
    except KeyboardInterrupt:
        progress.close()
        print("specchat: interrupted while loading; nothing measured", file=err)
        return 130
    progress.close()
    try:
        dec = session.decoder
        drafter = dec.drafter_name
        speculative_modes = any(k > 0 for k in ks) or args.auto
        if speculative_modes and (dec.drafter is None or not dec.can_speculate):
            why = "the target cannot roll back its KV (recurrent/hybrid)" if not dec.can_speculate else "no drafter is configured"
            raise UserError(f"cannot bench speculation: {why}; use --draft ngram or a draft .gguf, or --k 0 for the baseline alone")
        meta = {
            "target": dec.target.name,
            "drafter": drafter,
            "ks": ks,
            "auto": bool(args.auto),
            "runs": args.runs,
            "n_predict": settings.n_predict,
            "temperature": settings.sampling.temperature,
            "seed": settings.sampling.seed,
            "threads": settings.threads,
            "n_ctx": settings.n_ctx,
            "suite": [p["name"] for p in suite],
        }
        print(
            f"specchat bench: target {dec.target.name}, drafter {drafter}, K {','.join(map(str, ks))}"
            f"{' + auto' if args.auto else ''}; {args.runs} run(s) per (prompt, K), each paired with a baseline run "
            f"(A B A B ...); n_predict {settings.n_predict}, T = {settings.sampling.temperature:g}, "
            f"threads {settings.threads}",
            file=out,
        )
        out.flush()
        cal: Calibration | None = None
        if not args.no_arithmetic and dec.can_speculate:  # v(K) needs KV trimming
            try:
                cal = calibrate(session, suite[0]["prompt"], progress=progress)
            except KeyboardInterrupt:
                interrupted = True
        records: list[dict[str, Any]] = []
        if not interrupted:
            runner = BenchRunner(session, suite, ks, args.runs, auto=bool(args.auto), progress=progress, on_record=on_record)
            records = runner.run()
            interrupted = runner.interrupted
        progress.close()
        rows = summarize(records)
        arith = arithmetic(cal, rows) if cal is not None else None
        if interrupted:
            print(f"interrupted: {len(records)} run(s) measured so far", file=out)
        if rows:
            print("", file=out)
            print(format_table(rows), file=out)
            print("speedup = median over pairs of (speculative tok/s / the adjacent baseline's tok/s)", file=out)
            for w in noise_warnings(rows):
                print(w, file=out)
        if arith is not None:
            print(format_arithmetic(arith), file=out)
        if args.plot and rows:
            print(format_plot(rows), file=out)
        if args.json:
            write_json(args.json, build_report(meta=meta, records=records, rows=rows, arith=arith, interrupted=interrupted))
            print(f"\nwrote {len(records)} record(s) to {args.json}", file=err)
        out.flush()
    finally:
        progress.close()
        session.close()
    return 130 if interrupted else 0
