"""The streaming reply: one coloured span per token, appended in O(batch), never re-rendered whole.

The widget uses Textual's *line API* (``render_line``): the reply is kept as wrapped visual rows. Rows of
finished text are cached (as :class:`~textual.content.Content` and as rendered strips); a batch of new
pieces only re-wraps the *open row* (the last, unfinished visual row) plus the new text, so the work per
batch is O(row width + batch size), independent of how long the reply already is.

Why that is correct: the wrap is greedy and *prefix-stable*. A row is closed only when text continues past
it; its break falls at a whitespace boundary or inside a word longer than the width (fold), and a word
that does not fit the remaining space always starts a new row (we never fold a word that could fit on its
own row). Appending text can then only change the open row, never a closed one.

Token kinds map to component classes (``token--accepted`` ...), styled from :data:`KIND_STYLES`; span styles
``".token--accepted"`` are resolved at render time through :meth:`Widget._get_style`, so colours come from the
theme's ``$token-*`` variables and a theme switch only needs the strip cache cleared. Rejected draft tokens
(ghosts) are kept in the view's own data but are not part of :attr:`TokenView.reply_text`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.segment import Segment
from textual.content import Content, Span
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from specchat.engine.events import PIECE_KINDS, Piece
from specchat.tui.sanitize import sanitize

if TYPE_CHECKING:
    from specchat.race import TimedPiece

TAB = "    "
#: while streaming, the height grows in steps of this many rows: each growth is a layout pass of the whole
#: screen, the costliest thing a new token can cause (measured with Textual 8.2.8: most of the UI's CPU)
GROW_ROWS = 4
KINDS = PIECE_KINDS
#: "saved": a reply reloaded from history drawn as one uncoloured piece (until the engine splits it into its
#: tokens, see AssistantMessage.show_saved_pieces; or for good when no engine or another model is loaded)
SAVED = "saved"
DISPLAY_KINDS = (*KINDS, SAVED)
GHOST = "rejected"
GHOST_NEWLINE = "\u21b5"  # ↵

#: how each kind is drawn: its theme colour variable and its text style. The one table: TokenView's CSS,
#: the legend above the chat and the help screen's glossary are all built from it, so they cannot drift.
KIND_STYLES: dict[str, tuple[str, str]] = {
    "accepted": ("token-accepted", ""),
    "corrected": ("token-corrected", "bold"),
    "bonus": ("token-bonus", "underline"),
    "plain": ("token-plain", ""),
    "rejected": ("token-rejected", "strike dim"),
    "saved": ("foreground", ""),
}


def kind_style(kind: str) -> str:
    """The :class:`~textual.content.Content` style of a kind (``"$token-corrected bold"``), as drawn in replies."""
    variable, text_style = KIND_STYLES[kind]
    return f"${variable} {text_style}".strip()


def legend_content(show_ghosts: bool) -> Content:
    """The chat's legend line: each kind in its own style, and whether the ghosts (refused drafts) are shown."""
    parts: list[Content] = []
    for kind in ("accepted", "corrected", "bonus", "plain"):
        parts.append(Content.styled(f"\u25a0 {kind}", kind_style(kind)))
        parts.append(Content("  "))
    parts.append(Content.styled("ghost", kind_style(GHOST)))
    parts.append(Content(" = refused draft" + ("" if show_ghosts else " (hidden)")))
    return Content.assemble(*parts)


def _kinds_css() -> str:
    return "\n".join(
        f"TokenView > .token--{kind} {{ color: ${variable}; text-style: {text_style or 'none'}; }}"
        for kind, (variable, text_style) in KIND_STYLES.items()
    )


def _char_cells(ch: str) -> int:
    return cell_len(ch)


def wrap_offsets(text: str, width: int) -> list[int]:
    """Start offsets of visual rows 2.. of ``text`` (no newlines) wrapped greedily at ``width`` cells.

    Whitespace sticks to the end of the row it follows (it may overhang and is cropped when drawn); a word
    that does not fit the rest of a non-empty row starts the next row; a word wider than ``width`` is folded
    at ``width`` cells. The result is prefix-stable: appending to ``text`` never moves a break before the
    last row (see the module docstring).
    """
    if width <= 0:
        return []
    offsets: list[int] = []
    row_start = 0
    used = 0  # cells used by the current row
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == " ":
            used += 1
            i += 1
            continue
        # a word: [i, j)
        j = i
        word_cells = 0
        while j < n and text[j] != " ":
            word_cells += _char_cells(text[j])
            j += 1
        if used + word_cells <= width:
            used += word_cells
            i = j
            continue
        if used > 0 and i > row_start:
            # does not fit the rest of this row: start a new row with it
            offsets.append(i)
            row_start = i
            used = 0
            if word_cells <= width:
                used = word_cells
                i = j
                continue
        # fold a word wider than the row
        k = i
        while k < j:
            c = _char_cells(text[k])
            if used + c > width and used > 0:
                offsets.append(k)
                row_start = k
                used = 0
            used += c
            k += 1
        i = j
    return offsets


class TokenView(Widget):
    """A reply streamed token by token, coloured by piece kind, with optional ghost text."""

    COMPONENT_CLASSES = {f"token--{kind}" for kind in DISPLAY_KINDS}

    DEFAULT_CSS = (
        """
    TokenView {
        height: auto;
        width: 1fr;
    }
    """
        + _kinds_css()
    )

    ALLOW_SELECT = False  # ghosts must never be copied: copy the reply with the copy action instead

    def __init__(self, *, show_ghosts: bool = True, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._show_ghosts = show_ghosts
        # logical lines (split at "\n"): list of (text, kind) spans, ghosts included
        self._lines: list[list[tuple[str, str]]] = [[]]
        self._reply_parts: list[str] = []
        self._n_tokens = 0
        self._n_ghost_tokens = 0
        # wrapped state for self._wrap_width
        self._wrap_width = 0
        self._rows: list[Content] = []
        self._open_row = 0  # index in _rows of the open (last, unfinished) row of the last logical line
        self._tail_text = ""  # text of the open row (visible spans only)
        self._tail_spans: list[Span] = []
        self._strips: dict[int, Strip] = {}
        self._streaming = True
        self._allocated = 0  # height last reported to the layout
        #: characters re-wrapped by the last append (instrumentation for the O(batch) test)
        self.last_wrap_chars = 0
        self.total_wrap_chars = 0

    # -- public API ------------------------------------------------------------------------------
    @property
    def reply_text(self) -> str:
        """The reply as the model wrote it (sanitised), without ghost tokens."""
        return "".join(self._reply_parts)

    @property
    def ghost_text(self) -> str:
        """The refused draft tokens, as displayed (a refused newline shows as \u21b5)."""
        return "".join(t for line in self._lines for t, k in line if k == GHOST)

    @property
    def n_tokens(self) -> int:
        return self._n_tokens

    @property
    def show_ghosts(self) -> bool:
        return self._show_ghosts

    @property
    def row_count(self) -> int:
        return len(self._rows)

    def visible_text(self) -> str:
        """What is drawn (ghosts included when shown), one ``\\n`` per logical line."""
        return "\n".join(
            "".join(t for t, k in line if self._show_ghosts or k != GHOST) for line in self._lines
        )

    def kinds_text(self) -> list[tuple[str, str]]:
        """All spans (text, kind) in order, newlines as their own ``("\\n", kind)`` spans."""
        out: list[tuple[str, str]] = []
        for index, line in enumerate(self._lines):
            if index:
                out.append(("\n", ""))
            out.extend(line)
        return out

    def append_pieces(self, pieces: Iterable[Piece | TimedPiece]) -> None:
        """Append streamed pieces (or a race's, with their times), each in its kind's style; only the open row and
        the new text are re-wrapped."""
        self._append((piece.text, piece.kind) for piece in pieces)

    def append_saved(self, text: str) -> None:
        """Append a saved reply's text as one uncoloured span (:data:`SAVED`: history keeps no text per token;
        the engine gives it back later, :meth:`AssistantMessage.show_saved_pieces`)."""
        self._append([(text, SAVED)])

    def _append(self, spans: Iterable[tuple[str, str]]) -> None:
        """Append ``(text, kind)`` spans, one per token (a piece, or a saved reply's whole text)."""
        before_rows = len(self._rows)
        first_dirty = self._open_row
        self.last_wrap_chars = 0
        width = self._wrap_width
        for raw, kind in spans:
            if kind not in DISPLAY_KINDS:
                kind = "plain"
            self._n_tokens += 1
            if kind == GHOST:
                self._n_ghost_tokens += 1
            text = sanitize(raw)
            if not text:
                continue
            if kind == GHOST:
                # a refused token never breaks a line: its newline shows as a symbol
                display = text.replace("\n", GHOST_NEWLINE).replace("\t", TAB)
            else:
                self._reply_parts.append(text)
                display = text.replace("\t", TAB)
            parts = display.split("\n")
            for index, part in enumerate(parts):
                if index:
                    self._newline(width)
                if part:
                    self._lines[-1].append((part, kind))
                    if kind != GHOST or self._show_ghosts:
                        self._push_tail(part, kind)
        if width:
            self._rewrap_tail(width)
        for y in range(first_dirty, len(self._rows)):
            self._strips.pop(y, None)
        if not self.is_mounted:
            return
        if len(self._rows) > self._allocated or (not self._streaming and len(self._rows) != before_rows):
            self.refresh(layout=True)
        else:
            w = max(self.size.width, 1)
            self.refresh(Region(0, first_dirty, w, max(1, len(self._rows) - first_dirty)))

    def clear(self) -> None:
        """Forget every piece (to draw the reply again from other pieces)."""
        self._lines = [[]]
        self._reply_parts = []
        self._n_tokens = 0
        self._n_ghost_tokens = 0
        self._rebuild(self._wrap_width)
        if self.is_mounted:
            self.refresh(layout=True)

    def set_streaming(self, streaming: bool) -> None:
        """While streaming the height is rounded up to :data:`GROW_ROWS`; afterwards it is exact."""
        if streaming != self._streaming:
            self._streaming = streaming
            if self.is_mounted:
                self.refresh(layout=True)

    def set_show_ghosts(self, show: bool) -> None:
        if show == self._show_ghosts:
            return
        self._show_ghosts = show
        self._rebuild(self._wrap_width)
        if self.is_mounted:
            self.refresh(layout=True)

    # -- wrapping ------------------------------------------------------------------------------------
    def _push_tail(self, text: str, kind: str) -> None:
        start = len(self._tail_text)
        self._tail_text += text
        self._tail_spans.append(Span(start, start + len(text), f".token--{kind}"))

    def _newline(self, width: int) -> None:
        self._lines.append([])
        self._close_line(width)

    def _close_line(self, width: int) -> None:
        """End the open logical line in the wrapped rows and open an empty row for the next one."""
        if width:
            self._rewrap_tail(width)
        self._tail_text = ""
        self._tail_spans = []
        self._open_row = len(self._rows)
        if width:
            self._rows.append(Content(""))

    def _rewrap_tail(self, width: int) -> None:
        """Re-wrap the open row + new text; close every row but the last."""
        text = self._tail_text
        self.last_wrap_chars += len(text)
        self.total_wrap_chars += len(text)
        content = Content(text, list(self._tail_spans))
        offsets = wrap_offsets(text, width)
        rows = content.divide(offsets) if offsets else [content]
        del self._rows[self._open_row :]
        self._rows.extend(rows)
        if offsets:
            cut = offsets[-1]
            self._tail_text = text[cut:]
            self._tail_spans = [
                Span(max(s.start, cut) - cut, s.end - cut, s.style) for s in self._tail_spans if s.end > cut
            ]
            self._open_row = len(self._rows) - 1

    def _rebuild(self, width: int) -> None:
        """Wrap everything again (resize, ghost toggle): O(reply), once per user action."""
        self._wrap_width = width
        self._rows = []
        self._strips.clear()
        self._open_row = 0
        self._tail_text = ""
        self._tail_spans = []
        if not width:
            return
        self._rows.append(Content(""))
        for index, line in enumerate(self._lines):
            if index:
                self._close_line(width)
            for text, kind in line:
                if kind != GHOST or self._show_ghosts:
                    self._push_tail(text, kind)
            # keep the tail short while rebuilding long lines
            if len(self._tail_text) > 4 * width:
                self._rewrap_tail(width)
        self._rewrap_tail(width)

    # -- Textual hooks ---------------------------------------------------------------------------------
    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if width != self._wrap_width:
            self._rebuild(width)
        rows = len(self._rows)
        if self._streaming:
            rows = max(GROW_ROWS, -(-rows // GROW_ROWS) * GROW_ROWS)
        self._allocated = rows
        return rows

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return container.width

    def on_resize(self) -> None:
        if self.size.width != self._wrap_width:
            self._rebuild(self.size.width)
            self.refresh(layout=True)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if width != self._wrap_width:
            self._rebuild(width)
        base = self.visual_style
        if y >= len(self._rows):
            return Strip.blank(width, base.rich_style)
        strip = self._strips.get(y)
        if strip is None:
            row = self._rows[y]
            segments: Sequence[Segment] = [
                Segment(text, style.rich_style)
                for text, style in row.render(base, end="", parse_style=self._get_style)
            ]
            strip = Strip(segments).crop_extend(0, width, base.rich_style)
            self._strips[y] = strip
        return strip
