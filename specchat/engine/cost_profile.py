"""A recorded CPU's costs, replayed: the real speculative loop run over a recorded reply on a virtual clock.

Every decision auto-K makes comes from costs the engine measures on the machine it runs on, so a test that
checks a decision against one CPU's *outcome* fails on another CPU (on an AMD EPYC the bundled Q4_1 verifies
17 rows for ~10-14 single rows, on the Xeon with AMX it was ~6.7: the same copy-heavy reply is worth drafting
on one and not on the other). This module lets any machine replay any other's costs:

* :class:`FormatCost` - one target format on one CPU as ``specchat models tune`` measured it: the single-row
  decode time t1 and v(K) at a few K (interpolated linearly between them, extrapolated along the last slope),
  plus the round's time outside llama_decode;
* :class:`CostProfile` - a CPU's formats, loaded from a profile file (``tests/data/cpu-profiles/*.json``,
  written from a ``models tune --json`` result by :meth:`CostProfile.from_tune`);
* :class:`ReplyTrace` - a greedy reply recorded on the real bundled model: the prompt's token ids and the
  reply's. At temperature 0 the reply is the same whatever K was (the verify keeps exactly the target's
  argmax), so the trace says what the target would have kept at every position;
* :class:`ProfileTarget` - a stand-in for :class:`~specchat.engine.model.Model` whose logits make the trace's
  next token the argmax of every row, and whose decodes advance a :class:`VirtualClock` by the profile's cost
  of that many rows;
* :func:`simulate` - :class:`~specchat.engine.speculative.SpeculativeDecoder` itself (its calibration, the
  real :class:`~specchat.engine.drafters.NgramDrafter`, auto-K and the cost model, unchanged) generating the
  trace's reply on that clock: the tok/s that this CPU would have measured, deterministically.

The calibration may be given other costs than the rounds (``calibration=``): a scratch batch timed before the
reply is not always what a verify round costs later (a longer context, the logits copied, the caches), and
auto-K must then believe the rounds (issue 20: the cost model predicted 1.15x, the rounds measured 0.90x).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specchat.engine.controls import Controls, ControlState, SamplingParams
from specchat.engine.drafters import Draft, NgramDrafter
from specchat.engine.events import Step
from specchat.engine.telemetry import CostModel, TurnCounters


@dataclass(frozen=True, slots=True)
class FormatCost:
    """One target format's costs on one CPU: ``t1_ms`` a single-row decode, ``v[K]`` the cost of a K+1-row
    verify batch in single rows at the measured K (v(0) = 1), ``overhead_ms`` each round's time outside
    llama_decode (sampling, logits, Python) and ``lookup_ms`` one n-gram lookup."""

    label: str
    weights: str
    t1_ms: float
    v: Mapping[int, float]
    overhead_ms: float = 0.0
    lookup_ms: float = 0.02

    def rows_ms(self, rows: int) -> float:
        """ms of one decode of ``rows`` rows: t1 · v(rows − 1), v interpolated linearly between the measured K
        and extrapolated along the slope of the last two beyond them."""
        ks = sorted(k for k in self.v if k > 0)
        xs = [0, *ks]
        ys = [1.0, *(float(self.v[k]) for k in ks)]
        k = max(0, rows - 1)
        i = bisect.bisect_left(xs, k)
        if i < len(xs) and xs[i] == k:
            y = ys[i]
        elif i >= len(xs):
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
            y = ys[-1] + slope * (k - xs[-1])
        else:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            y = y0 + (y1 - y0) * (k - x0) / (x1 - x0)
        return self.t1_ms * y

    def scaled(self, factor: float, *, label: str | None = None) -> FormatCost:
        """The same format with every multi-row batch ``factor`` times as costly (single rows unchanged)."""
        v = {k: 1.0 + (x - 1.0) * factor if k > 0 else x for k, x in self.v.items()}
        return FormatCost(label or f"{self.label} x{factor:g}", self.weights, self.t1_ms, v, self.overhead_ms, self.lookup_ms)


@dataclass(frozen=True, slots=True)
class CostProfile:
    """What one CPU measured: its name and every target format's :class:`FormatCost`."""

    cpu: str
    source: str
    formats: tuple[FormatCost, ...]

    def format(self, label: str) -> FormatCost:
        for f in self.formats:
            if f.label == label:
                return f
        raise KeyError(f"{self.cpu}: no format {label!r} (have {', '.join(f.label for f in self.formats)})")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CostProfile:
        fmts = tuple(
            FormatCost(
                label=f["label"], weights=f["weights"], t1_ms=float(f["t1_ms"]),
                v={int(k): float(x) for k, x in f["v"].items()}, overhead_ms=float(f.get("overhead_ms", 0.0)),
                lookup_ms=float(f.get("lookup_ms", 0.02)),
            )
            for f in data["formats"]
        )
        return cls(cpu=str(data["cpu"]), source=str(data.get("source", "")), formats=fmts)

    @classmethod
    def load(cls, path: Path) -> CostProfile:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def from_tune(cls, tune: Mapping[str, Any], *, cpu: str | None = None) -> CostProfile:
        """The profile of a ``specchat models tune --json`` result (each variant's t1 and v(K))."""
        fmts = tuple(
            FormatCost(label=v["label"], weights=v["weights"], t1_ms=float(v["t1_ms"]),
                       v={int(k): float(x) for k, x in v["v"].items()})
            for v in tune["variants"]
        )
        return cls(cpu=cpu or str(tune.get("cpu", "")), source="models tune", formats=fmts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpu": self.cpu, "source": self.source,
            "formats": [
                {"label": f.label, "weights": f.weights, "t1_ms": f.t1_ms, "v": {str(k): x for k, x in sorted(f.v.items())},
                 "overhead_ms": f.overhead_ms, "lookup_ms": f.lookup_ms}
                for f in self.formats
            ],
        }


@dataclass(frozen=True, slots=True)
class ReplyTrace:
    """A greedy reply recorded on a real model: ``prompt`` (the chat-templated context's token ids), ``reply``
    (the reply's ids, without the end-of-generation token) and ``eos`` (that token's id)."""

    name: str
    prompt: tuple[int, ...]
    reply: tuple[int, ...]
    eos: int

    @classmethod
    def load_all(cls, path: Path) -> dict[str, ReplyTrace]:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return {
            t["name"]: cls(t["name"], tuple(t["prompt"]), tuple(t["reply"]), int(data["eos"])) for t in data["traces"]
        }


class VirtualClock:
    """Seconds that pass only when :meth:`advance` says so (the replayed costs)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1000.0


class ProfileTarget:
    """A :class:`~specchat.engine.model.Model` stand-in that knows the whole sequence it will produce.

    Token ids are compact (``0..n_vocab-1``: :func:`simulate` maps the trace's ids); the row at position p
    predicts ``sequence[p + 1]`` (one-hot logits), the end-of-generation token past the reply. A decode of n
    rows advances ``clock`` by ``cost.rows_ms(n)`` (counted as decode time) plus ``cost.overhead_ms`` once per
    round's verify (outside decode time, as the real round's Python is); a scratch decode (the calibration)
    costs ``calibration.rows_ms(n)``."""

    is_recurrent = False
    row_by_row = False

    def __init__(self, sequence: Sequence[int], eos: int, n_vocab: int, cost: FormatCost, clock: VirtualClock,
                 calibration: FormatCost | None = None, n_ctx: int = 4096) -> None:
        self.sequence = list(sequence)
        self.eos = eos
        self.n_vocab = n_vocab
        self.cost = cost
        self.calibration = calibration or cost
        self.clock = clock
        self.n_ctx = n_ctx
        self.name = f"profile:{cost.label}"
        self.weights = cost.weights
        self.tokens: list[int] = []
        self.decode_ms_total = 0.0
        #: rows decoded by batch size (for tests: what the loop verified)
        self.batches: list[int] = []

    def _next(self, pos: int) -> int:
        return self.sequence[pos + 1] if pos + 1 < len(self.sequence) else self.eos

    def decode(self, tokens: Sequence[int], *, logits_last: int = 1, scratch: bool = False,
               argmax: bool = False) -> np.ndarray | None:
        n = len(tokens)
        if n == 0:
            return None
        pos0 = len(self.tokens)
        self.tokens.extend(int(t) for t in tokens)
        ms = (self.calibration if scratch else self.cost).rows_ms(n)
        self.decode_ms_total += ms
        self.clock.advance(ms)
        if logits_last <= 0:
            return None
        if not scratch:
            self.batches.append(n)
            self.clock.advance(self.cost.overhead_ms)
        if argmax:
            return np.array([self._next(pos0 + n - logits_last + i) for i in range(logits_last)], dtype=np.int64)
        out = np.zeros((logits_last, self.n_vocab), dtype=np.float32)
        for i in range(logits_last):
            out[i, self._next(pos0 + n - logits_last + i)] = 1.0
        return out

    def time_scratch_decode(self, tokens: Sequence[int]) -> float:
        n = len(self.tokens)
        t0 = self.clock()
        self.decode(tokens, logits_last=len(tokens), scratch=True)
        self.trim(n)
        return (self.clock() - t0) * 1000.0

    def trim(self, n_keep: int) -> None:
        del self.tokens[n_keep:]

    def sync_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        for a, b in zip(self.tokens, tokens):
            if a != b:
                break
            n += 1
        return n

    def clear(self) -> None:
        self.tokens.clear()

    def is_eog(self, token: int) -> bool:
        return int(token) == self.eos

    def piece(self, token: int) -> bytes:
        return b"."

    def close(self) -> None:
        pass


class _LookupClock:
    """The n-gram drafter with its lookup charged to the virtual clock at the profile's ``lookup_ms`` (so a
    replay is deterministic: the real lookup's microseconds would vary from run to run)."""

    def __init__(self, inner: NgramDrafter, clock: VirtualClock, lookup_ms: float) -> None:
        self._inner = inner
        self._clock = clock
        self._ms = lookup_ms
        self.name, self.kind, self.free, self.k_cap = inner.name, inner.kind, inner.free, inner.k_cap

    def draft(self, context: Sequence[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        out = self._inner.draft(context, k, sampling, rng)
        out.t_ms = self._ms
        self._clock.advance(self._ms)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass(slots=True)
class SimRun:
    """One replayed reply: its tokens, virtual ms, and the rounds' K and verify batch sizes."""

    label: str
    tokens: int
    ms: float
    batches: list[int] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    identical: bool = True
    #: the rounds' Step events
    steps: list[Step] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.tokens / self.ms * 1000.0 if self.ms > 0 else 0.0


def simulate(cost: FormatCost, trace: ReplyTrace, *, k: int | None, calibration: FormatCost | None = None,
             n_predict: int | None = None, cost_model: CostModel | None = None,
             drafter: Callable[[Callable[[Sequence[int]], list[int]]], NgramDrafter] | None = None,
             vocabulary: Iterable[int] = ()) -> SimRun:
    """Replay ``trace`` on ``cost``: the n-gram drafter at a fixed ``k`` (0 = plain decoding) or auto-K (``k=None``),
    through :class:`~specchat.engine.speculative.SpeculativeDecoder` on a :class:`VirtualClock`. ``identical``
    says the loop emitted exactly the trace's tokens (greedy exactness, here by construction of the logits).

    ``drafter(compact)``: another drafter of the n-gram family in its place (the ``suffix`` drafter over a recorded
    history), given the function that maps real token ids to the replay's compact ones; ``vocabulary``: the
    further real ids it may draft (the history's), so that they have a compact id too."""
    from specchat.engine.speculative import SpeculativeDecoder  # the loop imports the telemetry this module feeds

    ids = sorted({*trace.prompt, *trace.reply, trace.eos, *vocabulary})
    compact = {t: i for i, t in enumerate(ids)}
    prompt = [compact[t] for t in trace.prompt]
    reply = [compact[t] for t in trace.reply]
    eos = compact[trace.eos]
    clock = VirtualClock()
    target = ProfileTarget([*prompt, *reply], eos, len(ids), cost, clock, calibration)
    inner = drafter(lambda real: [compact[t] for t in real]) if drafter is not None else NgramDrafter(1, 4)
    ngram = _LookupClock(inner, clock, cost.lookup_ms)
    auto = k is None
    controls = Controls(ControlState(k=k or 0, speculative=auto or k > 0, auto_k=auto, sampling=SamplingParams()))
    dec = SpeculativeDecoder(target, {inner.name: ngram}, controls, drafter=inner.name,  # type: ignore[dict-item]
                             cost_model=cost_model or CostModel(), clock=clock)  # type: ignore[arg-type]
    ngram._inner.verify_cost = dec._measured_v  # as the decoder wires an unwrapped n-gram drafter
    ngram._inner.boundary = target.is_eog
    budget = len(reply) if n_predict is None else min(n_predict, len(reply))
    gen = dec.generate(prompt, max_new=budget, rng=np.random.default_rng(0))
    counters: TurnCounters
    steps: list[Step] = []
    while True:
        try:
            ev = next(gen)
            if isinstance(ev, Step):
                steps.append(ev)
        except StopIteration as stop:
            counters = stop.value
            break
    run = SimRun(
        label="auto" if auto else f"K {k}", tokens=counters.predicted_n, ms=float(counters.predicted_ms or 0.0),
        batches=target.batches, drafted=counters.draft_n, accepted=counters.draft_n_accepted,
        identical=list(counters.tokens) == reply[:budget], steps=steps,
    )
    return run


__all__ = ["CostProfile", "FormatCost", "ProfileTarget", "ReplyTrace", "SimRun", "VirtualClock", "simulate"]
