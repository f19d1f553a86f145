"""The live sidebar: speed, acceptance, K, the pair, sparklines, per-position acceptance, A/B, break-even.

It is redrawn from immutable :class:`~specchat.tui.stats.StatsSnapshot` objects, which the turn's
pump posts at most ~4 times a second (and which coalesce when the UI is busy), plus the current
:class:`~specchat.engine.controls.ControlState` after every key that changes it. All text is built by the
pure ``format_*`` functions below, which the tests call directly.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Digits, ProgressBar, Sparkline, Static

from specchat.engine.controls import ControlState
from specchat.engine.events import CostEstimate
from specchat.engine.protocol import EngineInfo
from specchat.tui.sanitize import sanitize
from specchat.tui.stats import ABRow, StatsSnapshot

DASH = "\u2013"
TIMES = "\u00d7"
MAX_POSITIONS = 8


def break_even_text(cost: CostEstimate | None) -> str:
    """The cost model's verdict (:func:`specchat.engine.telemetry.break_even_line`), or what it waits for."""
    if cost is None:
        return "break-even: waiting for the cost model (a few speculative steps)"
    from specchat.engine.telemetry import break_even_line  # numpy: not at start-up, the window comes first

    return break_even_line(cost)


def _fmt(value: float | None, fmt: str, suffix: str = "") -> str:
    return DASH if value is None else f"{value:{fmt}}{suffix}"


def format_tok_s(snapshot: StatsSnapshot) -> str:
    if snapshot.tok_s is not None:
        return f"{snapshot.tok_s:.1f}"
    if snapshot.last_turn is not None:
        return f"{snapshot.last_turn.predicted_per_second:.1f}"
    return "0.0"


def format_figures(snapshot: StatsSnapshot, state: ControlState | None) -> list[tuple[str, str]]:
    """(label, value) rows: acceptance, mean len, K, speculation, draft/verify ms per step, last step."""
    rows: list[tuple[str, str]] = []
    rows.append(("acceptance", _fmt(None if snapshot.acceptance is None else snapshot.acceptance * 100, ".1f", " %")))
    rows.append(("mean len", _fmt(snapshot.mean_len, ".2f")))
    if state is not None:
        if state.auto_k:
            k_now = snapshot.k if snapshot.k is not None else state.k
            rows.append(("K", f"{k_now} auto"))
        else:
            rows.append(("K", f"{state.k}"))
        rows.append(("speculation", "on" if state.speculative else "off"))
    else:
        rows.append(("K", DASH))
        rows.append(("speculation", DASH))
    rows.append(("draft", _fmt(snapshot.draft_ms, ".2f", " ms/step")))
    rows.append(("verify", _fmt(snapshot.verify_ms, ".2f", " ms/step")))
    if snapshot.k is not None:
        if snapshot.speculative and snapshot.k > 0:
            rows.append(("last step", f"K={snapshot.k} {snapshot.drafter or ''}".rstrip()))
        else:
            rows.append(("last step", "plain (no draft)"))
    if snapshot.prompt_n is not None:
        cached = f", {snapshot.cached_n} cached" if snapshot.cached_n else ""
        rows.append(("prompt", f"{snapshot.prompt_n} tok{cached}"))
    return rows


def status_line(snapshot: StatsSnapshot, state: ControlState | None, status: str) -> str:
    """The one-line summary shown instead of the sidebar when it is hidden: tok/s, acceptance, K, status."""
    acceptance = DASH if snapshot.acceptance is None else f"{snapshot.acceptance * 100:.0f} %"
    if state is None:
        k = f"K {DASH}"
    elif not state.speculative:
        k = "speculation off"
    elif state.auto_k:
        k = f"K {snapshot.k if snapshot.k is not None else state.k} auto"
    else:
        k = f"K {state.k}"
    return f"{format_tok_s(snapshot)} tok/s \u00b7 acceptance {acceptance} \u00b7 {k} \u00b7 {status}"


def format_positions(per_position: tuple[float, ...], width: int = 10) -> list[str]:
    lines = []
    for i, share in enumerate(per_position[:MAX_POSITIONS], start=1):
        filled = round(share * width)
        bar = "\u2588" * filled + "\u2591" * (width - filled)
        lines.append(f"d{i:<2} {bar} {share * 100:3.0f}%")
    if len(per_position) > MAX_POSITIONS:
        lines.append(f"\u2026 {len(per_position) - MAX_POSITIONS} more positions")
    return lines


def format_ab(rows: tuple[ABRow, ...]) -> list[str]:
    if not rows:
        return ["A/B: finish a turn with speculation on and one with it off to compare"]
    lines = [f"{'A/B':<13}{'turns':>5}{'tok/s':>7}{TIMES:>5}"]
    for row in rows:
        ratio = DASH if row.ratio is None else f"{row.ratio:.2f}"
        label = row.label if len(row.label) <= 13 else row.label[:12] + "\u2026"
        lines.append(f"{label:<13}{row.turns:>5}{row.tok_s:>7.1f}{ratio:>5}")
    labels = {r.label for r in rows}
    if "off" not in labels:
        lines.append("toggle speculation for a baseline turn")
    elif len(labels) == 1:
        lines.append("turn speculation on to compare")
    else:
        best = max(rows, key=lambda r: r.tok_s)
        lines.append(f"faster: {best.label}")
    return lines


class Sidebar(VerticalScroll):
    """Live statistics of the running reply and of the session."""

    can_focus = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: called after every change of what the sidebar shows (the app mirrors it in the status bar)
        self.on_change: Callable[[], None] | None = None
        self.status_text = "starting\u2026"
        self._snapshot = StatsSnapshot()
        self._state: ControlState | None = None

    def summary(self) -> str:
        """:func:`status_line` of what the sidebar shows now."""
        return status_line(self._snapshot, self._state, self.status_text)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def compose(self):
        yield Static("starting\u2026", id="status")
        yield ProgressBar(total=1.0, show_eta=False, id="load-progress")
        yield Digits("0.0", id="tok-s")
        yield Static("tok/s (rolling)", id="tok-s-label", classes="caption")
        yield Static(id="figures")
        yield Static(id="break-even")
        yield Static(id="ab")
        yield Static(id="pair")
        yield Static("tok/s per step", classes="caption")
        yield Sparkline([], id="spark-tok")
        yield Static("acceptance per step", classes="caption")
        yield Sparkline([], id="spark-acc")
        yield Static("acceptance per draft position", classes="caption")
        yield Static(id="positions")

    def on_mount(self) -> None:
        self._snapshot = StatsSnapshot()
        self._state: ControlState | None = None
        self._texts: dict[str, str] = {}
        self._statics: dict[str, Static] = {w.id: w for w in self.query(Static) if w.id}
        self.show_stats(self._snapshot)

    def _put(self, widget_id: str, text: str, *, rewraps: bool = False) -> None:
        """Update one text only if it changed; lay out again only if its height can change.

        A stats message arrives up to ~4 times a second: a layout pass for every line of the sidebar each
        time would cost the engine CPU on a small machine. The text is shown as text (model and drafter names
        are file names): never markup, control characters made visible.
        """
        text = sanitize(text)
        old = self._texts.get(widget_id)
        if old == text:
            return
        self._texts[widget_id] = text
        static = self._statics[widget_id]
        if old is None or old.count("\n") != text.count("\n"):
            layout = True
        elif rewraps:  # a long line: only its wrapped height matters
            width = static.content_region.width
            layout = width <= 0 or len(Content(old).wrap(width)) != len(Content(text).wrap(width))
        else:
            layout = False
        static.update(Content(text), layout=layout)

    # -- loading -----------------------------------------------------------------------------------------
    def show_loading(self, fraction: float, what: str) -> None:
        self._put("status", f"loading {fraction * 100:.0f} %: {what}", rewraps=True)
        bar = self.query_one("#load-progress", ProgressBar)
        bar.display = True
        bar.update(progress=max(0.0, min(1.0, fraction)))
        self.status_text = f"loading {fraction * 100:.0f} %"
        self._changed()

    def show_ready(self, text: str) -> None:
        self.query_one("#load-progress", ProgressBar).display = False
        self._statics["status"].set_class(False, "error")
        self._put("status", text, rewraps=True)
        self.status_text = "ready"
        self._changed()

    def show_error(self, text: str) -> None:
        self.query_one("#load-progress", ProgressBar).display = False
        self._statics["status"].set_class(True, "error")
        self._put("status", text, rewraps=True)
        self.status_text = text
        self._changed()

    def show_pair(self, info: EngineInfo | None, state: ControlState | None) -> None:
        if info is None:
            self._put("pair", f"target  {DASH}\ndrafter {DASH}", rewraps=True)
            return
        drafter = (state.drafter if state and state.drafter else None) or info.draft_name
        lines = [f"target  {info.target_name}", f"drafter {drafter}"]
        if not info.chat_template:
            lines.append("format  fallback '### Role:' (the model has no chat template)")
        if not info.can_speculate and info.note:
            lines.append(info.note)
        self._put("pair", "\n".join(lines), rewraps=True)

    # -- statistics --------------------------------------------------------------------------------------
    def show_controls(self, state: ControlState | None) -> None:
        self._state = state
        self._render_figures()
        self._changed()

    def show_stats(self, snapshot: StatsSnapshot) -> None:
        self._snapshot = snapshot
        digits = self.query_one("#tok-s", Digits)
        value = format_tok_s(snapshot)
        if digits.value != value:
            digits.update(value)
        label = "tok/s (rolling)" if snapshot.tok_s is not None or snapshot.generating else "tok/s (last reply)"
        self._put("tok-s-label", label)
        self._render_figures()
        for spark_id, data in (("#spark-tok", snapshot.tok_s_history), ("#spark-acc", snapshot.acceptance_history)):
            spark = self.query_one(spark_id, Sparkline)
            if tuple(spark.data or ()) != data:
                spark.data = list(data)
        self._put("positions", "\n".join(format_positions(snapshot.per_position)) or DASH)
        self._put("ab", "\n".join(format_ab(snapshot.ab)))
        self._put("break-even", break_even_text(snapshot.cost), rewraps=True)
        self._changed()

    def _render_figures(self) -> None:
        rows = format_figures(self._snapshot, self._state)
        self._put("figures", "\n".join(f"{label:<12}{value}" for label, value in rows))
