"""The sidebar's A/B table: one section per (target, drafter) pair, speculation on vs off, never mixing pairs.

The rows are the engine's (:func:`specchat.engine.telemetry.ab.ab_summary` over this session's finished
replies, kept by :class:`specchat.tui.stats.LiveStats`); this module only draws them. Each pair gets its own
section headed by both names (made inert: :func:`specchat.sanitize.sanitize_line`), so a model switch from the
palette, or another drafter, starts a new section instead of adding to the old one; a ratio is always
against the same pair's ``off`` row. Every row shows the drafted tokens per reply (Σ drafted / replies), so a
reply that drafted a handful of tokens cannot pass for speculation evidence, and a reply whose drafter
barely ran (``barely``: drafted in fewer than :data:`~specchat.engine.telemetry.ab.BARELY_RAN_SHARE` of its
rounds) or whose speculation was switched mid-reply (``mixed``) is a row of its own, explained below the
table. The text is built by the pure :func:`format_ab` (the tests call it directly).

Under the table, where the history has it, the pair's acceptance across llama.cpp builds (issue 24: "acceptance
with this pair: 71 % today, 78 % on build b11243", :func:`specchat.history.stats.pair_across_builds`), read from
the saved replies after each reply, off the UI thread (:meth:`ABTable.read_builds`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from textual.content import Content
from textual.widgets import Static

from specchat.history import HistoryError, HistoryStore
from specchat.history.stats import pair_across_builds
from specchat.tui.sanitize import sanitize_line

if TYPE_CHECKING:  # the telemetry package imports numpy: not at start-up (the window comes first)
    from specchat.engine.events import Turn
    from specchat.engine.telemetry.ab import ABRow

DASH = "\u2013"
TIMES = "\u00d7"
#: the table's columns: mode, replies, tok/s, ratio to the pair's "off", drafted tokens per reply (32 cells:
#: the sidebar is 36 wide with its padding, border and scrollbar)
HEADER = f"{'':<7}{'turns':>6}{'tok/s':>7}{TIMES + 'off':>6}{'draft':>6}"
EMPTY = "A/B: finish a turn with speculation on and one with it off to compare"
#: what the rows that are not plain on/off evidence mean (shown under the table when such a row exists)
NOTES = {
    "barely": "barely: speculation was on but the drafter drafted in under {share:.0f} % of the rounds "
    "(no evidence either way)",
    "mixed": "mixed: speculation was switched during the reply (counted apart)",
}


def pair_title(target: str, drafter: str) -> str:
    """A section's heading: both names of the pair, as one inert line."""
    return f"{sanitize_line(target) or '?'} + {sanitize_line(drafter) or '?'}"


def _row_line(row: ABRow) -> str:
    tok_s = DASH if row.tok_s is None else f"{row.tok_s:.1f}"
    ratio = DASH if row.ratio is None else f"{row.ratio:.2f}"
    drafted = f"{row.drafted / row.turns:.0f}" if row.turns else DASH
    return f"{row.mode:<7}{row.turns:>6}{tok_s:>7}{ratio:>6}{drafted:>6}"


def _verdict(rows: list[ABRow]) -> str:
    modes = {row.mode: row for row in rows}
    on, off = modes.get("on"), modes.get("off")
    if on is None and off is None:
        return "no clean on/off reply yet for this pair"
    if off is None:
        return "turn speculation off for a baseline reply"
    if on is None:
        return "turn speculation on to compare"
    if on.ratio is None:
        return DASH
    return f"speculation {'pays' if on.ratio > 1 else 'does not pay'}: {on.ratio:.2f}{TIMES} off"


def format_ab(rows: tuple[ABRow, ...], servers: tuple[str, str] | None = None) -> list[str]:
    """The table's lines: per pair (in the order the pairs first ran) its heading, the column header, its rows
    and a verdict; then what the draft column means, and what ``barely`` and ``mixed`` mean if such a row is
    shown. ``servers`` (server A's pair target, B's: two llama-servers) adds B against A once both replied."""
    if not rows:
        return [EMPTY]
    from specchat.engine.telemetry.ab import BARELY_RAN_SHARE, versus  # numpy: with the first A/B row, not at start-up

    sections: dict[tuple[str, str], list[ABRow]] = {}
    for row in rows:
        sections.setdefault(row.pair, []).append(row)
    lines = ["A/B per pair, this session"]
    for (target, drafter), pair_rows in sections.items():
        lines += ["", pair_title(target, drafter), HEADER, *(_row_line(r) for r in pair_rows), _verdict(pair_rows)]
    shown = {row.mode for row in rows}
    notes = [text.format(share=BARELY_RAN_SHARE * 100) for mode, text in NOTES.items() if mode in shown]
    both = versus(rows, *servers) if servers is not None else None
    return [*lines, *(_versus_lines(both) if both is not None else []), "", "draft: tokens drafted per reply", *notes]


def _versus_lines(both: tuple) -> list[str]:
    """Server B against server A: each side's replies, speed and acceptance, and B's speed over A's."""
    a, b, ratio = both
    out = ["", "server B vs A, this session", f"{'':<3}{'turns':>6}{'tok/s':>7}{'acc':>6}"]
    for name, side in (("A", a), ("B", b)):
        tok_s = DASH if side.tok_s is None else f"{side.tok_s:.1f}"
        acc = DASH if side.acceptance is None else f"{side.acceptance * 100:.0f}%"
        out.append(f"{name:<3}{side.turns:>6}{tok_s:>7}{acc:>6}")
    out.append(DASH if ratio is None else f"B runs at {ratio:.2f}{TIMES} A's speed")
    return out


class ABTable(Static):
    """The A/B table (see the module docstring); redrawn only when its rows or its builds line change (after a
    reply)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: tuple[ABRow, ...] | None = None
        #: the acceptance of this pair on other builds, from the saved replies ("": none to compare with)
        self.builds_line = ""
        #: (server A's pair target, B's) once both llama-servers have answered (``--server-b``), else None
        self.servers: tuple[str, str] | None = None

    def show(self, rows: tuple[ABRow, ...]) -> None:
        if rows == self.rows:
            return
        self.rows = rows
        self._draw()

    def show_servers(self, servers: tuple[str, str] | None) -> None:
        if servers != self.servers:
            self.servers = servers
            self._draw()

    def show_builds(self, line: str) -> None:
        if line != self.builds_line:
            self.builds_line = line
            self._draw()

    def _draw(self) -> None:
        lines = format_ab(self.rows or (), self.servers)
        if self.builds_line:
            lines = [*lines, "", sanitize_line(self.builds_line)]  # builds and names come from the database
        self.update(Content("\n".join(lines)))

    def read_builds(self, db_path: Path, turn: Turn) -> None:
        """Compare the pair of ``turn`` (the reply just saved) across builds from the history at ``db_path``: read
        on a thread of its own, on a read-only connection of its own (as the suffix corpus reads the history:
        :mod:`specchat.history.corpus`), never on the UI thread; the line is drawn when it is known. A newer
        reply's read replaces one still running (``exclusive``)."""
        key = {"target": turn.target, "drafter": turn.drafter, "cpu": turn.cpu, "build": turn.build}
        if not turn.build:
            return
        self.run_worker(self._read(db_path, key), group="ab-builds", exclusive=True, exit_on_error=False)

    async def _read(self, db_path: Path, key: dict[str, str]) -> None:
        line = await asyncio.to_thread(builds_line, db_path, key)
        if self.is_attached:
            self.show_builds(line)


def builds_line(db_path: Path, key: dict[str, str]) -> str:
    """:func:`specchat.history.stats.pair_across_builds` of the saved replies (off the UI thread); "" if the history
    cannot be read (the table then says nothing about builds: a sidebar line is no place for a database error)."""
    try:
        with HistoryStore(db_path, readonly=True) as store:
            rows = store.reply_stats()
    except (HistoryError, OSError, sqlite3.Error):
        return ""
    return pair_across_builds(rows, **key)
