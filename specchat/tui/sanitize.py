"""Untrusted text in widgets: always as text, never parsed as markup, never with a raw control character.

Textual parses a plain ``str`` as content markup almost everywhere: ``Static("...")``, ``border_title`` and
``border_subtitle``, ``notify(...)``, DataTable cells (Rich markup). A title like ``x [/bold] y`` then raises
``MarkupError`` (the history browser crashed on it) and ``[link=...]`` or ``[@click=...]`` would be acted on. So
anything model- or user-supplied (titles, message text, model and file names, error messages, stop reasons,
theme names) reaches a widget only through these helpers, which apply :func:`specchat.sanitize.sanitize`
(control characters made visible, see that module) and wrap the result in a markup-free object:

- :func:`text` -> :class:`~textual.content.Content` for ``Static``, ``update`` and border (sub)titles;
- :func:`cell` -> :class:`rich.text.Text` for DataTable cells;
- notifications: :meth:`specchat.tui.app.SpecChatApp.notify` sanitises every message and title and never
  parses markup.
"""

from __future__ import annotations

from rich.text import Text
from textual.content import Content

from specchat.sanitize import sanitize, sanitize_line

__all__ = ["cell", "sanitize", "sanitize_line", "text"]


def text(value: object) -> Content:
    """``value`` as inert, markup-free content that keeps its lines."""
    return Content(sanitize(str(value)))


def cell(value: object, width: int | None = None) -> Text:
    """``value`` as one line of inert, markup-free text for a table cell, cut to ``width`` characters."""
    line = sanitize_line(value)
    if width is not None and len(line) > width:
        line = line[: width - 1] + "\u2026"
    return Text(line)
