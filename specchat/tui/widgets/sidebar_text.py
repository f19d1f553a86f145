"""The sidebar's text: every line the live sidebar shows, built by pure functions from immutable statistics
(no Textual: the tests call them directly, and :class:`~specchat.tui.widgets.sidebar.Sidebar` only puts them
on screen).

Every figure says what it is and over which window (issue 11): the big number is tok/s over the last
:data:`~specchat.tui.stats.WINDOW_S` s of the reply (or the last reply's own rate once it ended); "this reply"
and "recent rounds" are the engine's two :class:`~specchat.engine.events.Figures` windows, each computed from
its own rounds, shown as separate blocks (the cost model's α and break-even line sit with the recent rounds
they come from, never beside the reply's acceptance); K is the engine's
:class:`~specchat.engine.events.KStatus` words (``K 16 (auto: holding, best now 4)``) with its note. A figure
that does not exist yet is a dash or words, never 0 (no ``0.0 tok/s`` before the first reply). The sparklines
have fixed scales (:func:`bars`): Textual's ``Sparkline`` scales each series to its own min..max, so a
reply with every round at 100 % drew a flat bottom row that read as 0 %.

Under the break-even line, the "verify cost" block draws the v(K) curve that line is computed from
(:mod:`specchat.tui.verify_chart`): the weight format, where v came from, one row per K up to the drafter's cap
with the current K marked, and the engine's reason in words (issue 12). The live curve (the last round's
``cost.verify``) is preferred, else the engine's (``EngineInfo.verify``, from the cached calibration, so it
shows before the first reply); an engine without one (a llama-server) says "not reported".

Under the pair, the suffix drafter's history index (:func:`history_index_text`): how far its build is while it
is loaded or built in the background (a first build of 10,000 messages takes ~50 s here), then its size.
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.controls import ControlState
from specchat.engine.drafter_kinds import DRAFTER_KINDS, K_MAX, NONE, chain_links, k_cap_note, kind_of
from specchat.engine.events import CostEstimate, Figures, KStatus, VerifyCurve
from specchat.engine.protocol import EngineInfo
from specchat.history.index_progress import INDEXING, LOADING, OFF, READY, IndexProgress
from specchat.tui.stats import WINDOW_S, StatsSnapshot
from specchat.tui.verify_chart import verify_block

DASH = "\u2013"
TIMES = "\u00d7"
MAX_POSITIONS = 8
LABEL_WIDTH = 12
#: sparkline columns (one round each, the newest on the right): the sidebar's text width (36 columns less
#: its border, padding and scrollbar: 32) less the scale labels on the right (" 100 %")
SPARK_WIDTH = 26
#: sparkline rows: 2 rows of eighth blocks = 16 levels
SPARK_ROWS = 2
BLOCKS = " \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"
NO_REPLY = "no reply yet"
#: the K states in which auto-K chooses K (the others: fixed K, speculation off)
AUTO_STATES = ("warming up", "holding", "off for cost", "probing")


def break_even_text(cost: CostEstimate | None, info: EngineInfo | None = None) -> str:
    """The cost model's verdict (:func:`specchat.engine.telemetry.break_even_line`), or what it waits for."""
    if cost is None:
        if info is not None and not info.draft_timing:
            return "break-even: not computed (this engine reports no draft time)"
        return "break-even: waiting for the cost model (a few speculative steps)"
    from specchat.engine.telemetry import break_even_line  # numpy: not at start-up, the window comes first

    return break_even_line(cost)


def verify_curve(snapshot: StatsSnapshot, info: EngineInfo | None) -> VerifyCurve | None:
    """The target's v(K) curve to show: the live one (the last round's ``cost.verify``), else the engine's
    (``EngineInfo.verify``: this file's cached calibration before the first round), else None."""
    if snapshot.cost is not None and snapshot.cost.verify is not None:
        return snapshot.cost.verify
    return info.verify if info is not None else None


def drafter_cap(drafter: str | None) -> int:
    """How far the chart goes: the drafter's cap on K (:data:`DRAFTER_KINDS`; a model file is a model drafter),
    or, with no drafter, :data:`K_MAX` (the target's whole curve). A chain reaches as far as its largest link's
    cap, as :class:`~specchat.engine.chain.DrafterChain` drafts (``suffix,DRAFT.gguf``: the suffix link's 64, not
    the model link's 16)."""
    if not drafter or drafter == NONE:
        return K_MAX
    links = chain_links(drafter) or [drafter]
    return max(DRAFTER_KINDS[kind_of(link)].k_cap for link in links)


def current_k(status: KStatus | None, state: ControlState | None) -> int | None:
    """The K the rounds draft up to now, to mark on the chart: the K control when K is fixed, auto-K's K when
    it chooses, None when nothing drafts (speculation off, auto-K off for cost, no round of auto-K yet)."""
    if state is not None:
        if not state.speculative or state.drafter == NONE:
            return None
        if not state.auto_k:
            return state.k
        if status is None or status.state not in AUTO_STATES:
            return None  # auto-K was just turned on: the last round's K was not its choice
    if status is None or status.state == "speculation off" or status.k <= 0:
        return None
    return status.k


def format_verify(curve: VerifyCurve | None, info: EngineInfo | None, cap: int = K_MAX,
                  current: int | None = None) -> tuple[str, str, str]:
    """(headline, chart, reason) of the "verify cost" block (:func:`specchat.tui.verify_chart.verify_block`), or
    the headline alone saying why there is no curve: "not reported" by an engine that has none (a
    llama-server times no verify batches)."""
    if curve is not None:
        return verify_block(curve, cap, current)
    if info is None:
        return f"verify cost v(K): {DASH} (no model loaded)", "", ""
    if info.draft_timing and not info.can_speculate:
        return "verify cost v(K): not measured (this target cannot speculate)", "", ""
    return "verify cost v(K): not reported by this engine", "", ""


def _count(n: int) -> str:
    """A token count the width of a sidebar line: 5.0 M, 42.3 k, 512."""
    if n >= 1_000_000:
        return f"{n / 1e6:.1f} M"
    if n >= 10_000:
        return f"{n / 1e3:.1f} k"
    return f"{n:,}"


def history_index_text(progress: IndexProgress | None) -> str:
    """The suffix drafter's history index in one line: ``history index: 3,200/10,000 messages`` while it is built,
    ``history index: loading`` while the saved one loads and is checked against the history, ``history: 10,000
    messages, 5.0 M tokens`` once ready; "" when no index is in use (none started, or stopped)."""
    if progress is None:
        return ""
    if progress.phase == LOADING:
        return "history index: loading"
    if progress.phase == INDEXING:
        return f"history index: {progress.done:,}/{progress.total:,} messages"
    if progress.phase == READY:
        noun = "message" if progress.done == 1 else "messages"
        return f"history: {progress.done:,} {noun}, {_count(progress.tokens)} tokens"
    if progress.phase == OFF:
        return "history index: off (the history could not be read)"
    return ""


def _fmt(value: float | None, fmt: str, suffix: str = "") -> str:
    return DASH if value is None else f"{value:{fmt}}{suffix}"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.0f} %"


def tok_s_value(snapshot: StatsSnapshot) -> float | None:
    """The big number: tok/s over the last second of the reply, the last reply's rate once it ended, or None
    before any reply, or while auto-K times v(K) before this reply's first round (nothing is shown, not 0)."""
    if snapshot.generating and snapshot.calibrating is not None:
        return None
    if snapshot.tok_s is not None:
        return snapshot.tok_s
    if snapshot.last_turn is not None:
        return snapshot.last_turn.predicted_per_second
    return None


def tok_s_caption(snapshot: StatsSnapshot) -> str:
    """What the big number is, and over which window; while auto-K times v(K) before this reply's first round
    (seconds, once per model and depth), that instead of a number."""
    if snapshot.generating and snapshot.calibrating is not None:
        return f"tok/s: {snapshot.calibrating.sentence}"
    if snapshot.tok_s is not None:
        return f"tok/s over the last {WINDOW_S:g} s of this reply"
    if snapshot.last_turn is not None:
        return "tok/s of the last reply"
    if snapshot.generating:
        return "tok/s: waiting for the first round"
    return f"tok/s: {NO_REPLY}"


def controls_label(state: ControlState) -> str:
    """The K the next round will use, from the controls (before a round has said how it chose its K)."""
    if not state.speculative or state.drafter == NONE:
        return "speculation off"
    if state.auto_k:
        return "K auto (no round yet)"
    return f"K {state.k} (fixed)"


def _next_round(status: KStatus, state: ControlState) -> str | None:
    """The K of the next round when the controls changed since ``status``'s round, else None."""
    off = not state.speculative or state.drafter == NONE
    if off:
        return None if status.state == "speculation off" else "speculation off"
    if state.auto_k:
        return None if status.state in AUTO_STATES else "K auto"
    if status.state != "fixed K" or status.k != state.k:
        return f"K {state.k} (fixed)"
    return None


def format_k(status: KStatus | None, state: ControlState | None) -> list[str]:
    """How K is chosen: the last round's :class:`KStatus` label, and the next round's K when a key changed it
    since; before any round, what the controls say. (The status's note, why two K figures differ, is shown
    under it: :func:`k_note`.)"""
    if status is None:
        return [f"K: {DASH}" if state is None else controls_label(state)]
    lines = [status.label]
    nxt = _next_round(status, state) if state is not None else None
    if nxt is not None:
        lines.append(f"next round: {nxt}")
    return lines


def k_note(status: KStatus | None, state: ControlState | None = None, drafter: str | None = None) -> str:
    """Why two K figures differ, in words (:attr:`KStatus.note`), or nothing; first, from the controls (so from
    the start, and as K changes), a fixed K above the cap of the drafter in use (a model drafter's K 40 runs at
    16: :func:`~specchat.engine.drafter_kinds.k_cap_note`)."""
    notes = [status.note] if status is not None and status.note else []
    if state is not None and state.speculative:
        cap = k_cap_note(state.drafter or drafter, state.k, auto_k=state.auto_k)
        if cap:
            notes.insert(0, cap)
    return "; ".join(notes)


def _rows(rows: Sequence[tuple[str, str]]) -> list[str]:
    return [f"{label:<{LABEL_WIDTH}}{value}" for label, value in rows]


def reply_window(snapshot: StatsSnapshot) -> str:
    """The reply window's name: "this reply" while it is generated, "last reply" once it ended."""
    return "this reply" if snapshot.generating or snapshot.last_turn is None else "last reply"


def format_reply(snapshot: StatsSnapshot, info: EngineInfo | None) -> list[str]:
    """The reply's window: acceptance, mean accepted length, tokens drafted per round, draft and verify time
    per round (the draft time is "not reported" by an engine that cannot time its drafter: a llama-server),
    the prompt. Every figure over the rounds of this reply (the last reply's once it ended)."""
    fig = snapshot.reply
    which = reply_window(snapshot)
    if fig is None:
        return [f"{which}: {'waiting for the first round' if snapshot.generating else NO_REPLY}"]
    n = int(fig.drafting_rounds)
    head = f"{which} \u00b7 {n} drafting round{'s' if n != 1 else ''}" if n else f"{which} \u00b7 no drafts"
    acceptance = DASH
    if fig.acceptance is not None:
        acceptance = f"{fig.acceptance * 100:.0f} % ({fig.accepted:.0f} of {fig.drafted:.0f})"
    rows: list[tuple[str, str]] = []
    if fig.drafted:  # without a draft there is no acceptance, length or draft time to show
        rows += [
            ("acceptance", acceptance),
            ("mean len", _fmt(fig.mean_len, ".2f", " tok/round")),
            ("drafted", _fmt(fig.k_used, ".1f", " per round")),
        ]
        if info is not None and not info.draft_timing:
            rows.append(("draft", "not reported"))
        else:
            rows.append(("draft", _fmt(snapshot.draft_ms, ".2f", " ms/round")))
    rows.append(("verify", _fmt(snapshot.verify_ms, ".2f", " ms/round")))
    if snapshot.prompt_n is not None:
        cached = f", {snapshot.cached_n} cached" if snapshot.cached_n else ""
        rows.append(("prompt", f"{snapshot.prompt_n} tok{cached}"))
    return [head, *_rows(rows)]


def format_recent(fig: Figures | None, info: EngineInfo | None = None) -> list[str]:
    """Auto-K's window (the rounds the cost model's α comes from): acceptance, α, mean accepted length, and the
    notes that say why two of them differ. Its counts are weighted by age, so they are not whole numbers."""
    if fig is None:
        if info is not None and not info.draft_timing:
            return ["recent rounds: not computed (no draft time, so no cost model, from this engine)"]
        return [f"recent rounds: {DASH} (no drafting round yet)"]
    if not fig.drafting_rounds:
        return [fig.window_label, "no drafts yet"]
    rows = [
        ("acceptance", _pct(fig.acceptance)),
        ("\u03b1", _fmt(fig.alpha, ".2f", " per position")),
        ("mean len", _fmt(fig.mean_len, ".2f", " tok/round")),
    ]
    return [fig.window_label, *_rows(rows)]


def status_line(snapshot: StatsSnapshot, state: ControlState | None, status: str) -> str:
    """The one-line summary shown instead of the sidebar when it is hidden: tok/s, K (the next round's once a key
    changed it, :func:`format_k`), this reply's acceptance, status (nothing before it exists: "no reply yet", not
    ``0.0 tok/s``; while auto-K times v(K) before the first round, that)."""
    rate = tok_s_value(snapshot)
    if snapshot.generating and snapshot.calibrating is not None:  # seconds before the first round: say why
        parts = [snapshot.calibrating.label]
    else:
        parts = [NO_REPLY if rate is None else f"{rate:.1f} tok/s"]
    if snapshot.status is not None or state is not None:
        # the last round's K, or - when a key changed the controls since - the next round's: one line has no room
        # for both, and a toggle after a reply must not read as if it had not happened
        parts.append(format_k(snapshot.status, state)[-1])
    else:
        parts.append(f"K {DASH}")
    fig = snapshot.reply
    if fig is not None and fig.acceptance is not None:
        parts.append(f"acceptance {fig.acceptance * 100:.0f} % (reply)")
    parts.append("generating" if snapshot.generating and status == "ready" else status)
    return " \u00b7 ".join(parts)


def bars(values: Sequence[float], top: float, width: int = SPARK_WIDTH, rows: int = SPARK_ROWS) -> list[str]:
    """A sparkline with a fixed scale 0..``top``: the last ``width`` values, one column each, ``rows`` rows of
    eighth blocks (top row first). A value at ``top`` fills its column, 0 leaves it empty, whatever the other
    values are (Textual's ``Sparkline`` scales to the data's own min..max instead)."""
    values = list(values)[-width:]
    levels = rows * 8
    heights = [0 if top <= 0 else round(max(0.0, min(1.0, v / top)) * levels) for v in values]
    return [
        "".join(BLOCKS[max(0, min(8, h - (rows - 1 - r) * 8))] for h in heights)
        for r in range(rows)
    ]


def _scaled(values: Sequence[float], top: float, top_label: str, bottom_label: str) -> str:
    """:func:`bars` with the scale written at the right of its top and bottom rows."""
    rows = [row.ljust(SPARK_WIDTH) for row in bars(values, top)]
    width = max(len(top_label), len(bottom_label))
    rows[0] += f" {top_label:>{width}}"
    rows[-1] += f" {bottom_label:>{width}}"
    return "\n".join(rows)


def format_spark_tok(history: Sequence[float]) -> tuple[str, str]:
    """(caption, drawing) of tok/s per round on a 0..max scale, the max written at the top right."""
    if not history:
        return f"tok/s per round: {DASH}", ""
    shown = list(history)[-SPARK_WIDTH:]
    top = max(shown)
    return f"tok/s per round, last {len(shown)}", _scaled(shown, top, f"{top:.0f}", "0")


def format_spark_acc(history: Sequence[float]) -> tuple[str, str]:
    """(caption, drawing) of acceptance per drafting round (rounds without a draft have none) on a fixed
    0..100 % scale."""
    if not history:
        return f"acceptance per round: {DASH} (no drafts)", ""
    shown = list(history)[-SPARK_WIDTH:]
    return f"acceptance per round, last {len(shown)}", _scaled(shown, 1.0, "100 %", "0 %")


def format_positions(per_position: tuple[float, ...], width: int = 10) -> list[str]:
    lines = []
    for i, share in enumerate(per_position[:MAX_POSITIONS], start=1):
        filled = round(share * width)
        bar = "\u2588" * filled + "\u2591" * (width - filled)
        lines.append(f"d{i:<2} {bar} {share * 100:3.0f}%")
    if len(per_position) > MAX_POSITIONS:
        lines.append(f"\u2026 {len(per_position) - MAX_POSITIONS} more positions")
    return lines
