"""The history browser (ctrl+o): saved conversations; open/continue, delete, export.

Works without a loaded model (reading history must survive a model error): opening a conversation shows
it; continuing it needs the engine, which receives the messages through ``ChatEngine.load``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from specchat.tui.sanitize import cell


def unique_path(directory: Path, stem: str, suffix: str) -> Path:
    """``directory/stem.suffix``, or ``stem-2.suffix``... : an export never overwrites a file."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-")[:60] or "chat"
    path = directory / f"{slug}{suffix}"
    n = 2
    while path.exists():
        path = directory / f"{slug}-{n}{suffix}"
        n += 1
    return path


def _short_time(stamp: str) -> str:
    return stamp.replace("T", " ")[:16]


class HistoryScreen(ModalScreen[int | None]):
    """Dismisses with the id of the conversation to open, or None."""

    BINDINGS = [
        Binding("escape", "close", "Close", id="history.close"),
        Binding("enter", "open", "Open / continue", id="history.open"),
        Binding("d,delete", "delete", "Delete", id="history.delete"),
        Binding("e", "export", "Export .md", id="history.export"),
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
        self._armed_delete: int | None = None

    def compose(self):
        with Vertical(id="history-box"):
            yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
            yield Static(
                "Enter open/continue \u00b7 d delete (press twice) \u00b7 e export Markdown \u00b7 Esc close",
                id="history-help",
            )

    def on_mount(self) -> None:
        self.query_one("#history-box").border_title = "saved conversations"
        table = self.query_one(DataTable)
        table.add_columns("id", "updated", "msgs", "title", "pair")
        self.reload()
        table.focus()

    def reload(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for conv in self.store.list_conversations():
            pair = " + ".join(p for p in (conv.target, conv.draft) if p)
            table.add_row(  # every cell as text: a title like "x [/bold] y" is not markup
                cell(conv.id),
                cell(_short_time(conv.updated)),
                cell(conv.n_messages),
                cell(conv.title or "(untitled)", 48),
                cell(pair, 30),
                key=str(conv.id),
            )
        if not table.row_count:
            self.query_one("#history-help", Static).update("No saved conversations yet. Esc closes.")

    def _selected(self) -> int | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return int(row_key.value) if row_key.value is not None else None

    def action_close(self) -> None:
        self.dismiss(None)

    def action_open(self) -> None:
        conv_id = self._selected()
        if conv_id is not None:
            self.dismiss(conv_id)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.dismiss(int(event.row_key.value))

    def action_delete(self) -> None:
        conv_id = self._selected()
        if conv_id is None:
            return
        if self._armed_delete != conv_id:
            self._armed_delete = conv_id
            self.notify(f"Press d again to delete conversation {conv_id}.", title="Delete?")
            return
        self._armed_delete = None
        try:
            self.store.delete(conv_id)
        except Exception as exc:
            self.notify(f"Could not delete conversation {conv_id}: {exc}", severity="error")
            return
        if self.on_deleted is not None:
            self.on_deleted(conv_id)
        self.notify(f"Deleted conversation {conv_id}.")
        self.reload()

    def action_export(self) -> None:
        conv_id = self._selected()
        if conv_id is None:
            return
        try:
            conv = self.store.get_conversation(conv_id)
            text = self.store.export_markdown(conv_id)
            path = unique_path(self.export_dir, f"specchat-{conv_id}-{conv.title or 'chat'}", ".md")
            path.write_text(text, encoding="utf-8")
        except Exception as exc:
            self.notify(f"Could not export conversation {conv_id}: {exc}", severity="error")
            return
        self.notify(f"Exported to {path}", title="Export")
