"""The live sidebar: speed, how K was chosen, the reply's and auto-K's figures, break-even, the target's verify
cost v(K), A/B, the pair, sparklines, per-position acceptance.

It is redrawn from immutable :class:`~specchat.tui.stats.StatsSnapshot` objects, which the turn's
pump posts at most ~4 times a second (and which coalesce when the UI is busy), plus the current
:class:`~specchat.engine.controls.ControlState` after every key that changes it. All text is built by the
pure functions of :mod:`specchat.tui.widgets.sidebar_text` (what each figure says, over which window), which
the tests call directly; the A/B table (one section per pair) is
:class:`~specchat.tui.widgets.ab_table.ABTable`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Digits, ProgressBar, Static

from specchat.engine.controls import ControlState
from specchat.engine.events import Turn
from specchat.engine.protocol import EngineInfo
from specchat.history import index_progress
from specchat.history.index_progress import IndexProgress
from specchat.tui.draft_source import Describe, source_line
from specchat.tui.messages import HistoryIndexNotice, HistoryIndexProgress
from specchat.tui.sanitize import sanitize
from specchat.tui.stats import StatsSnapshot
from specchat.tui.widgets.ab_table import ABTable
from specchat.tui.widgets.sidebar_text import (
    DASH,
    break_even_text,
    current_k,
    drafter_cap,
    format_k,
    format_positions,
    format_recent,
    format_reply,
    format_spark_acc,
    format_spark_tok,
    format_verify,
    history_index_text,
    k_note,
    reply_window,
    status_line,
    tok_s_caption,
    tok_s_value,
    verify_curve,
)


class Sidebar(VerticalScroll):
    """Live statistics of the running reply and of the session."""

    can_focus = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: called after every change of what the sidebar shows (the app mirrors it in the status bar)
        self.on_change: Callable[[], None] | None = None
        #: the history index's notices shown so far (each once a session: a rebuilt index is said once)
        self._index_notices: set[str] = set()
        self.status_text = "starting\u2026"
        self._snapshot = StatsSnapshot()
        self._state: ControlState | None = None
        self._info: EngineInfo | None = None
        #: the history's title and time of a saved conversation, and the id of the one on screen (the chat screen
        #: sets both): where a draft copied from is named by them
        self.describe_conversation: Describe | None = None
        self.current_conversation: Callable[[], int | None] | None = None

    def summary(self) -> str:
        """:func:`status_line` of what the sidebar shows now."""
        return status_line(self._snapshot, self._state, self.status_text)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def compose(self):
        # the speed and its per-round line; how K is chosen; this reply's figures with its per-round and
        # per-position acceptance; auto-K's window with the break-even line computed from it; the session
        yield Static("starting\u2026", id="status")
        yield ProgressBar(total=1.0, show_eta=False, id="load-progress")
        yield Static(id="pair")
        yield Static(id="history-index", classes="note")
        yield Digits("", id="tok-s")
        yield Static(id="tok-s-label", classes="caption")
        yield Static(id="spark-tok-label", classes="caption")
        yield Static(id="spark-tok", classes="spark")
        yield Static(id="k-status")
        yield Static(id="k-note", classes="note")
        yield Static(id="draft-source", classes="note")
        yield Static(id="reply-figures", classes="figures")
        yield Static(id="spark-acc-label", classes="caption")
        yield Static(id="spark-acc", classes="spark")
        yield Static(id="positions-label", classes="caption")
        yield Static(id="positions")
        yield Static(id="recent-figures", classes="figures")
        yield Static(id="recent-notes", classes="note")
        yield Static(id="break-even")
        yield Static(id="verify-label", classes="caption")
        yield Static(id="verify-chart")
        yield Static(id="verify-reason", classes="note")
        yield ABTable(id="ab")

    def on_mount(self) -> None:
        self._snapshot = StatsSnapshot()
        self._state = None
        self._texts: dict[str, str] = {}
        self._statics: dict[str, Static] = {w.id: w for w in self.query(Static) if w.id}
        self.show_stats(self._snapshot)
        self.show_history_index(None)

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

    def text_of(self, widget_id: str) -> str:
        """The text a part of the sidebar shows now (``k-status``, ``reply-figures``, ``recent-figures`` ...)."""
        return self._texts.get(widget_id, "")

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
        self._info = info
        if info is None:
            self._put("pair", f"target  {DASH}\ndrafter {DASH}", rewraps=True)
            self._render_figures()
            return
        drafter = (state.drafter if state and state.drafter else None) or info.draft_name
        lines = [f"target  {info.target_name}", f"drafter {drafter}"]
        if not info.chat_template:
            lines.append("format  fallback '### Role:' (the model has no chat template)")
        if not info.can_speculate and info.note:
            lines.append(info.note)
        if info.kernels:
            lines.append(f"kernels {info.kernels}")
        self._put("pair", "\n".join(lines), rewraps=True)
        self._render_figures()

    def show_history_index(self, progress: IndexProgress | None) -> None:
        """The suffix drafter's history index under the pair (:func:`history_index_text`; hidden when none is used)."""
        self._put_note("history-index", history_index_text(progress))

    def watch_history_index(self, history: Path) -> Callable[[], None]:
        """Hear the suffix index built from ``history`` (:func:`specchat.history.index_progress.watch`): the corpus's
        thread posts its progress and notices to this widget (``post_message`` is thread-safe). The unsubscribe."""
        return index_progress.watch(
            history,
            progress=lambda progress: self.post_message(HistoryIndexProgress(progress)),
            notice=lambda line: self.post_message(HistoryIndexNotice(line)),
        )

    def on_history_index_progress(self, message: HistoryIndexProgress) -> None:
        message.stop()
        self.show_history_index(message.progress)

    def on_history_index_notice(self, message: HistoryIndexNotice) -> None:
        message.stop()
        if message.line not in self._index_notices:
            self._index_notices.add(message.line)
            self.app.notify(message.line, title="History index", severity="warning", timeout=15)

    # -- statistics --------------------------------------------------------------------------------------
    def show_controls(self, state: ControlState | None) -> None:
        self._state = state
        self._render_figures()
        self._changed()

    def show_stats(self, snapshot: StatsSnapshot) -> None:
        self._snapshot = snapshot
        digits = self.query_one("#tok-s", Digits)
        rate = tok_s_value(snapshot)
        digits.display = rate is not None
        value = "" if rate is None else f"{rate:.1f}"
        if digits.value != value:
            digits.update(value)
        self._put("tok-s-label", tok_s_caption(snapshot), rewraps=True)  # 1 line or 2
        self._render_figures()
        for name, (caption, drawn) in (
            ("spark-tok", format_spark_tok(snapshot.tok_s_history)),
            ("spark-acc", format_spark_acc(snapshot.acceptance_history)),
        ):
            self._put(f"{name}-label", caption, rewraps=True)
            self._put(name, drawn)
            self._statics[name].display = bool(drawn)
        self._put("positions-label", f"acceptance per draft position \u00b7 {reply_window(snapshot)}", rewraps=True)
        self._put("positions", "\n".join(format_positions(snapshot.per_position)) or DASH)
        self.query_one(ABTable).show(snapshot.ab)
        self._put("break-even", break_even_text(snapshot.cost, self._info), rewraps=True)
        self._changed()

    def show_servers(self, servers: tuple[str, str] | None) -> None:
        """Two llama-servers: the A/B section compares server B with A once both answered (:class:`ABTable`)."""
        self.query_one(ABTable).show_servers(servers)

    def compare_builds(self, db_path: Path, turn: Turn) -> None:
        """The A/B section's line of this pair across builds, from the history (:meth:`ABTable.read_builds`)."""
        self.query_one(ABTable).read_builds(db_path, turn)

    def verify_texts(self) -> tuple[str, str, str]:
        """(headline, chart, reason) of the "verify cost" block as shown now (:func:`format_verify`; the F1 help
        shows the same)."""
        state, info = self._state, self._info
        drafter = (state.drafter if state is not None else None) or (info.draft_name if info is not None else None)
        curve = verify_curve(self._snapshot, info)
        return format_verify(curve, info, drafter_cap(drafter), current_k(self._snapshot.status, state))

    def _render_verify(self) -> None:
        """The "verify cost" block under the break-even line: what v(K) is made of, drawn as a chart whose text
        changes only when a value as written changes (:mod:`specchat.tui.verify_chart`)."""
        label, chart, reason = self.verify_texts()
        self._put("verify-label", label, rewraps=True)
        self._put("verify-chart", chart)
        self._statics["verify-chart"].display = bool(chart)
        self._put_note("verify-reason", reason)

    def _render_figures(self) -> None:
        snapshot = self._snapshot
        self._put("k-status", "\n".join(format_k(snapshot.status, self._state)), rewraps=True)
        drafter = self._info.draft_name if self._info is not None else None
        self._put_note("k-note", k_note(snapshot.status, self._state, drafter))
        current = self.current_conversation() if self.current_conversation is not None else None
        self._put_note("draft-source", source_line(snapshot.source, snapshot.chain, current=current,
                                                   describe=self.describe_conversation))
        self._put("reply-figures", "\n".join(format_reply(snapshot, self._info)), rewraps=True)
        self._put("recent-figures", "\n".join(format_recent(snapshot.recent, self._info)), rewraps=True)
        self._put_note("recent-notes", "\n".join(snapshot.recent.notes) if snapshot.recent is not None else "")
        self._render_verify()

    def _put_note(self, widget_id: str, text: str) -> None:
        """A note in words under its figures, hidden when there is none."""
        self._put(widget_id, text, rewraps=True)
        self._statics[widget_id].display = bool(text)
