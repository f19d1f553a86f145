"""The history browser (ctrl+o): find a saved conversation by typing, open/continue it, export or delete it.

Works without a loaded model (reading history must survive a model error): opening a conversation shows
it; continuing it needs the engine, which receives the messages through ``ChatEngine.load``.

Typing never acts: every printable key goes to the search box at the top, which filters by title and by
message text as you type (:meth:`specchat.history.HistoryStore.search_conversations`). The actions have
keys that are not text: up/down/page up/page down choose a row, Enter opens it, ctrl+s exports it as
Markdown into the exports directory, Delete or ctrl+d asks (:class:`ConfirmDeleteScreen`: it names the
conversation, and Cancel is the default) before deleting, Esc closes. Delete and ctrl+d take over the search
box's own delete-right keys: backspace still edits it. Every title, snippet and path is drawn as plain text
(never parsed as markup: a title may be ``x [/bold] y``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Static

from specchat.history import ConversationRecord, SearchHit, write_export
from specchat.tui.sanitize import sanitize

#: a row's columns: id, title, messages, updated, then the model pair (or, while searching, where it matched)
_NARROW = 80  # below this many terminal columns: short dates, no model pair column (see HistoryScreen._widths)


def _short_time(stamp: str, narrow: bool) -> str:
    text = stamp.replace("T", " ")[:16]  # 2025-01-02 10:00
    return text[5:] if narrow else text


def _one_line(text: str) -> str:
    return sanitize(" ".join(text.split()))


def _marked(text: str, query: str, width: int, *, follow: bool = True) -> Text:
    """``text`` on one line, cut to ``width`` (around the first match of ``query`` if ``follow``), the match
    highlighted where it shows."""
    line = _one_line(text)
    at = line.lower().find(query.lower()) if query else -1
    if follow and at > width // 3 and len(line) > width:  # bring the match into view
        start = max(0, min(at - width // 3, len(line) - width))
        line, at = "\u2026" + line[start + 1 :], at - start
    if len(line) > width:
        line = line[: max(1, width - 1)] + "\u2026"
    out = Text(line, no_wrap=True, overflow="ellipsis")
    if 0 <= at < len(line) and query:
        out.stylize("reverse", at, min(len(line), at + len(query)))
    return out


def describe(conv: ConversationRecord) -> str:
    """How dialogs and notices name a conversation: its title, id and message count (plain text)."""
    title = _one_line(conv.title) or "untitled"
    if len(title) > 60:
        title = title[:59] + "\u2026"
    plural = "" if conv.n_messages == 1 else "s"
    return f"\u201c{title}\u201d (ID {conv.id}, {conv.n_messages} message{plural})"


class ConfirmDeleteScreen(ModalScreen[bool]):
    """Asks before a conversation is deleted; dismisses with True only from the Delete button.

    Cancel has the focus, so Enter (or a key held down: Delete and ctrl+d repeat) never deletes: confirming
    takes moving to Delete (tab, or left/right) and Enter, or a click.
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="history.confirm_cancel"),
        Binding("left", "app.focus_previous", "Previous button", show=False),
        Binding("right", "app.focus_next", "Next button", show=False),
    ]

    def __init__(self, conv: ConversationRecord) -> None:
        super().__init__()
        self.conversation = conv

    def compose(self):
        with Vertical(id="confirm-box"):
            yield Static(
                Content(f"Delete conversation {describe(self.conversation)}?\nThis cannot be undone."),
                id="confirm-text",
            )
            with Horizontal(id="confirm-buttons"):
                yield Button("Cancel", id="confirm-cancel")
                yield Button("Delete", id="confirm-delete", variant="error")
            yield Static("tab or \u2190/\u2192 choose \u00b7 enter presses \u00b7 esc cancels", id="confirm-help")

    def on_mount(self) -> None:
        self.query_one("#confirm-box").border_title = "delete?"
        self.query_one("#confirm-cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-delete")

    def action_cancel(self) -> None:
        self.dismiss(False)


class HistoryScreen(ModalScreen[int | None]):
    """Dismisses with the id of the conversation to open, or None."""

    BINDINGS = [
        Binding("escape", "close", "Close", id="history.close"),
        Binding("down", "move(1)", "Down", show=False, id="history.down"),
        Binding("up", "move(-1)", "Up", show=False, id="history.up"),
        Binding("pagedown", "move(10)", "Page down", show=False, id="history.page_down"),
        Binding("pageup", "move(-10)", "Page up", show=False, id="history.page_up"),
        # priority: the search box binds delete and ctrl+d itself (delete right); backspace still edits it
        Binding("delete,ctrl+d", "delete", "Delete\u2026", id="history.delete", priority=True),
        Binding("ctrl+s", "export", "Export .md", id="history.export", priority=True),
    ]

    def __init__(
        self,
        store,
        export_dir: Path,
        on_deleted: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__()
        self.store = store
        self.export_dir = export_dir
        self.on_deleted = on_deleted
        self.hits: list[SearchHit] = []
        self._columns: tuple[int, int, bool] | None = None  # (title width, last width, narrow) drawn

    def compose(self):
        with Vertical(id="history-box"):
            yield Input(placeholder="type to search titles and messages", id="history-search", select_on_focus=False)
            yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
            yield Static(id="history-help")

    def on_mount(self) -> None:
        self.query_one("#history-box").border_title = "saved conversations"
        table = self.query_one(DataTable)
        table.can_focus = False  # the search box keeps the focus: typing always goes there
        self.reload()
        self.query_one("#history-search", Input).focus()

    # -- the list -------------------------------------------------------------------------------------
    @property
    def search_text(self) -> str:
        return self.query_one("#history-search", Input).value.strip()

    def _widths(self, query: str, id_width: int) -> tuple[int, int, bool]:
        """(title width, last column width or 0 = no last column, narrow) for the table's width now.

        Narrow (under 80 terminal columns): short dates, and no model pair column unless searching (then the
        matched text is what a row is chosen by). Searching gives the match 3/5 of the room, else the title.
        """
        table = self.query_one(DataTable)
        width = table.size.width or self.app.size.width - 8
        narrow = self.app.size.width < _NARROW
        padding = 2 * table.cell_padding
        fixed = max(2, id_width) + 4 + (11 if narrow else 16) + 4 * padding  # id, msgs, updated + their padding
        room = max(16, width - fixed - padding - 1)  # the last column's padding, and the scrollbar's edge
        if narrow and not query:
            return room, 0, narrow
        title = max(8, room * (2 if query else 3) // 5)
        return title, max(8, room - title - padding), narrow

    def reload(self, keep: int | None = None) -> None:
        """Fill the table from the store for the current search; the cursor stays on ``keep`` (an id) or its row."""
        table = self.query_one(DataTable)
        query = self.search_text
        if keep is None:
            keep = self.selected_id()
        old_row = table.cursor_row
        try:
            self.hits = self.store.search_conversations(query)
        except Exception as exc:
            self.hits = []
            self.notify(f"Could not read the history: {exc}", severity="error", markup=False)
        id_width = max((len(str(h.conversation.id)) for h in self.hits), default=2)
        widths = self._widths(query, id_width)
        title_w, last_w, narrow = widths
        table.clear(columns=True)
        self._columns = widths
        table.add_column("id", key="id")
        table.add_column("title", width=title_w, key="title")
        table.add_column("msgs", key="msgs")
        table.add_column("updated", key="updated")
        if last_w:
            table.add_column("found in" if query else "model pair", width=last_w, key="last")
        for hit in self.hits:
            conv = hit.conversation
            cells = [
                Text(str(conv.id)),
                _marked(conv.title or "(untitled)", query, title_w, follow=False),  # a title reads from its start
                Text(str(conv.n_messages), justify="right"),
                Text(_short_time(conv.updated, narrow)),
            ]
            if last_w and query:
                role = "you" if hit.role == "user" else hit.role
                cells.append(_marked(f"{role}: {hit.text}", query, last_w) if hit.role else Text("the title"))
            elif last_w:
                pair = " + ".join(p for p in (conv.target, conv.draft) if p)
                cells.append(Text(_one_line(pair), no_wrap=True, overflow="ellipsis"))
            table.add_row(*cells, key=str(conv.id))
        if self.hits:
            ids = [h.conversation.id for h in self.hits]
            row = ids.index(keep) if keep in ids else min(max(old_row, 0), len(ids) - 1)
            table.move_cursor(row=row, animate=False)
        self._show_help()

    def _show_help(self) -> None:
        help_line = self.query_one("#history-help", Static)
        if self.hits:
            help_line.update(
                "\u2191\u2193 choose \u00b7 enter open \u00b7 ctrl+s export .md \u00b7 del/ctrl+d delete\u2026 \u00b7 esc close"
            )
        elif self.search_text:
            help_line.update(Content(f"No conversation contains \u201c{_one_line(self.search_text)}\u201d. Esc closes."))
        else:
            help_line.update("No saved conversations yet. Esc closes.")

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.reload(keep=None)

    def on_resize(self) -> None:
        id_width = max((len(str(h.conversation.id)) for h in self.hits), default=2)
        if self._columns is not None and self._widths(self.search_text, id_width) != self._columns:
            self.reload()

    def selected_id(self) -> int | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return int(row_key.value) if row_key.value is not None else None

    def _selected_conversation(self) -> ConversationRecord | None:
        conv_id = self.selected_id()
        return next((h.conversation for h in self.hits if h.conversation.id == conv_id), None)

    # -- actions --------------------------------------------------------------------------------------
    def action_move(self, rows: int) -> None:
        table = self.query_one(DataTable)
        if table.row_count:
            table.move_cursor(row=max(0, min(table.row_count - 1, table.cursor_row + rows)), animate=False)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_open(self) -> None:
        conv_id = self.selected_id()
        if conv_id is not None:
            self.dismiss(conv_id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_open()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:  # a click on the chosen row
        event.stop()
        if event.row_key.value is not None:
            self.dismiss(int(event.row_key.value))

    def action_delete(self) -> None:
        conv = self._selected_conversation()
        if conv is None:
            return
        self.app.push_screen(ConfirmDeleteScreen(conv), lambda yes: self._delete(conv, bool(yes)))

    def _delete(self, conv: ConversationRecord, confirmed: bool) -> None:
        if not confirmed:
            return
        try:
            self.store.delete(conv.id)
        except Exception as exc:
            self.notify(f"Could not delete conversation {conv.id}: {exc}", severity="error", markup=False)
            return
        if self.on_deleted is not None:
            self.on_deleted(conv.id)
        self.notify(f"Deleted conversation {describe(conv)}.", markup=False)
        self.reload(keep=None)

    def action_export(self) -> None:
        conv = self._selected_conversation()
        if conv is None:
            return
        try:
            path = write_export(self.export_dir, conv.id, conv.title, self.store.export_markdown(conv.id))
        except Exception as exc:
            self.notify(f"Could not export conversation {conv.id}: {exc}", severity="error", markup=False)
            return
        self.notify(f"Exported to {path}", title="Export", markup=False)
