"""``specchat history stats``: acceptance, mean accepted length and tok/s of the saved replies, per group (target,
drafter, llama.cpp build, CPU), and the acceptance drops between builds that are beyond noise.

Every saved reply keeps its statistics (``turn_stats``) and, since the build stamp, what produced it
(:mod:`specchat.engine.build`). Per group: the replies, Σ drafted and Σ accepted draft tokens (acceptance =
accepted / drafted, as llama-server's ``draft_n_accepted / draft_n``), mean accepted length (1 + accepted /
drafting rounds, ``server_slot::print_timings``), tok/s (Σ tokens / Σ generation time) and the dates.

**A drop between builds** (ggml-org/llama.cpp#26750: 66.7 % -> 52.4 % between two builds, found by counting by
hand): for the same target, drafter and CPU, consecutive builds in the order they were first used are compared by
a one-sided two-proportion z-test on accepted / drafted (the binomial test the issue asks for, in its normal
form); a drop with p < :data:`DROP_P` is flagged. Draft positions within a round are not independent (a round
stops at its first rejection), so the test is somewhat optimistic: the threshold is strict for that reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the fields a group may be keyed by
GROUP_FIELDS: tuple[str, ...] = ("target", "drafter", "build", "cpu")
DEFAULT_GROUPS: tuple[str, ...] = ("target", "drafter", "build")
#: a drop of acceptance between two builds is flagged below this one-sided p-value
DROP_P = 0.01


@dataclass(slots=True)
class Group:
    """The replies of one group and their sums."""

    key: tuple[str, ...]
    replies: int = 0
    drafted: int = 0
    accepted: int = 0
    spec_steps: int = 0
    tokens: int = 0
    ms: float = 0.0
    first: str = ""
    last: str = ""

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_len(self) -> float:
        return 1.0 + self.accepted / self.spec_steps if self.spec_steps else 1.0

    @property
    def tok_s(self) -> float:
        return self.tokens / self.ms * 1000.0 if self.ms > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Drop:
    """Acceptance of one (target, drafter, CPU) fell from build ``before`` to build ``after``."""

    target: str
    drafter: str
    cpu: str
    before: str
    after: str
    acceptance_before: float
    acceptance_after: float
    z: float
    p: float
    drafted: tuple[int, int] = field(default=(0, 0))


def parse_groups(text: str | None) -> tuple[str, ...]:
    """``--by target,drafter,build`` -> the fields; a ValueError naming the bad one and the choices."""
    if text is None:
        return DEFAULT_GROUPS
    fields = tuple(f.strip() for f in text.split(",") if f.strip())
    bad = [f for f in fields if f not in GROUP_FIELDS]
    if bad or not fields:
        raise ValueError(f"--by {text}: {bad[0] if bad else 'no field'} is not one of {', '.join(GROUP_FIELDS)}")
    return fields


def group_stats(rows: Iterable[Mapping[str, Any]], by: Sequence[str] = DEFAULT_GROUPS) -> list[Group]:
    """One :class:`Group` per distinct value of ``by`` over ``rows`` (:meth:`HistoryStore.reply_stats`), in the
    order each group was first seen."""
    groups: dict[tuple[str, ...], Group] = {}
    for r in rows:
        key = tuple(str(r.get(f) or "") for f in by)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(key, first=r["created"])
        g.replies += 1
        g.drafted += int(r["draft_n"])
        g.accepted += int(r["accepted"])
        g.spec_steps += int(r["spec_steps"])
        g.tokens += int(r["predicted_n"])
        g.ms += float(r["predicted_ms"])
        g.last = r["created"]
    return list(groups.values())


def _one_sided_p(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def acceptance_drops(rows: Iterable[Mapping[str, Any]], *, p_max: float = DROP_P) -> list[Drop]:
    """The flagged drops (see the module docstring): per (target, drafter, CPU), consecutive builds."""
    rows = list(rows)
    out: list[Drop] = []
    for g in group_stats(rows, ("target", "drafter", "cpu")):
        target, drafter, cpu = g.key
        mine = [r for r in rows if (r["target"], r["drafter"], r["cpu"]) == g.key and r["build"]]
        builds = [b for b in group_stats(mine, ("build",)) if b.drafted > 0]
        for prev, nxt in zip(builds, builds[1:]):
            n1, n2, a1, a2 = prev.drafted, nxt.drafted, prev.accepted, nxt.accepted
            pooled = (a1 + a2) / (n1 + n2)
            se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2))
            if se <= 0.0:
                continue
            z = (a1 / n1 - a2 / n2) / se
            p = _one_sided_p(z)
            if z > 0 and p < p_max:
                out.append(Drop(target, drafter, cpu, prev.key[0], nxt.key[0], a1 / n1, a2 / n2, z, p, (n1, n2)))
    return out


def pair_across_builds(rows: Iterable[Mapping[str, Any]], *, target: str, drafter: str, cpu: str, build: str,
                       others: int = 2) -> str:
    """The sidebar's line for this pair: ``"acceptance with this pair: 71 % today, 78 % on build b11243"``.

    "Today" is build ``build`` (the one the last reply was made with: every saved reply of this build, whatever
    its date), beside the ``others`` builds most recently used with the same target, drafter and CPU (acceptance
    moves with the CPU's kernels, so another CPU's figure would be no comparison). "" unless another build of
    the pair and CPU has drafted tokens. A drop to this build beyond noise (:func:`acceptance_drops`) is said.
    """
    mine = [r for r in rows if (r["target"], r["drafter"], r["cpu"]) == (target, drafter, cpu) and r["build"]]
    builds = {g.key[0]: g for g in group_stats(mine, ("build",)) if g.drafted > 0}
    other = sorted((g for b, g in builds.items() if b != build), key=lambda g: g.last, reverse=True)
    if not other:
        return ""
    now = builds.get(build)
    parts = [f"{now.acceptance * 100:.0f} % today" if now is not None else "nothing drafted yet today"]
    parts += [f"{g.acceptance * 100:.0f} % on build {g.key[0]}" for g in other[:others]]
    line = "acceptance with this pair: " + ", ".join(parts)
    drops = [d for d in acceptance_drops(mine) if d.after == build]
    if drops:
        line += f" (a drop beyond noise from {drops[-1].before}: p = {drops[-1].p:.0e}; see specchat history stats)"
    return line


def format_stats(groups: Sequence[Group], by: Sequence[str], drops: Sequence[Drop]) -> str:
    """The table, one row per group, then one line per flagged drop (or that none was found)."""
    if not groups:
        return "no saved replies with statistics\n"
    widths = [max(len(f), *(len(g.key[i] or "-") for g in groups)) for i, f in enumerate(by)]
    head = "  ".join(f"{f.upper():<{w}}" for f, w in zip(by, widths))
    lines = [f"{head}  {'REPLIES':>7}  {'DRAFTED':>8}  {'ACCEPT':>6}  {'MEAN LEN':>8}  {'TOK/S':>7}  FIRST .. LAST"]
    for g in groups:
        cells = "  ".join(f"{(v or '-'):<{w}}" for v, w in zip(g.key, widths))
        acc = "-" if g.acceptance is None else f"{g.acceptance:.1%}"
        lines.append(f"{cells}  {g.replies:>7}  {g.drafted:>8}  {acc:>6}  {g.mean_len:>8.2f}  {g.tok_s:>7.1f}  "
                     f"{g.first[:10]} .. {g.last[:10]}")
    lines.append("")
    if not drops:
        lines.append(f"no acceptance drop between builds beyond noise (one-sided two-proportion test, p < {DROP_P})")
    for d in drops:
        lines.append(
            f"acceptance dropped for {d.target} + {d.drafter}: {d.acceptance_before:.1%} on {d.before} -> "
            f"{d.acceptance_after:.1%} on {d.after} ({d.drafted[0]} and {d.drafted[1]} drafted tokens; z = {d.z:.1f}, "
            f"p = {d.p:.1e}; CPU {d.cpu or 'unknown'})"
        )
    return "\n".join(lines) + "\n"


__all__ = ["DEFAULT_GROUPS", "DROP_P", "GROUP_FIELDS", "Drop", "Group", "acceptance_drops", "format_stats",
           "group_stats", "pair_across_builds", "parse_groups"]
