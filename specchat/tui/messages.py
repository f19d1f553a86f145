"""Messages the engine thread posts to the UI (``post_message`` is thread-safe and non-blocking): loading's (and the
suffix corpus's thread's: the history index) to the app, a turn's to the chat screen (:class:`specchat.tui.screens.chat.ChatScreen`).

The turn's pump (:func:`specchat.tui.generation.pump_turn`) posts at most ~15 :class:`PiecesBatch` and ~4 :class:`StatsUpdated` a second; stats
messages coalesce (``can_replace``) so a busy UI only ever draws the newest numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

from specchat.engine.events import Piece, Turn

if TYPE_CHECKING:
    from specchat.engine.protocol import ChatEngine
    from specchat.history.index_progress import IndexProgress
    from specchat.tui.stats import StatsSnapshot
    from specchat.tui.widgets.chat import AssistantMessage


class LoadProgress(Message):
    """The engine factory reported progress (fraction 0..1, what it is doing)."""

    def __init__(self, fraction: float, what: str) -> None:
        super().__init__()
        self.fraction = fraction
        self.what = what

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


class EngineReady(Message):
    def __init__(self, engine: ChatEngine, load_seconds: float) -> None:
        super().__init__()
        self.engine = engine
        self.load_seconds = load_seconds


class EngineFailed(Message):
    """Loading failed; ``message`` says what happened and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


class HistoryIndexProgress(Message):
    """How the suffix drafter's history index is doing (posted from the corpus's thread:
    :func:`specchat.history.index_progress.watch`); they coalesce, the newest is all the sidebar shows."""

    def __init__(self, progress: IndexProgress) -> None:
        super().__init__()
        self.progress = progress

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, HistoryIndexProgress)


class HistoryIndexNotice(Message):
    """A notice of the history index (a corrupt, stale or other tokenizer's index rebuilt; an unreadable history)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class PiecesBatch(Message):
    """Pieces (and notices) of one turn gathered over ~67 ms; ``auto_k_notices``: the lines of the
    :class:`~specchat.engine.events.AutoKNotice` events among them (auto-K turned drafting off or on)."""

    def __init__(
        self, turn_id: int, pieces: list[Piece], notices: list[str], auto_k_notices: list[str] | None = None
    ) -> None:
        super().__init__()
        self.turn_id = turn_id
        self.pieces = pieces
        self.notices = notices
        self.auto_k_notices = auto_k_notices or []


class StatsUpdated(Message):
    def __init__(self, snapshot: StatsSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StatsUpdated)


class TurnFinished(Message):
    """The turn ended: with its :class:`Turn`, or with an error message (the turn is then over too)."""

    def __init__(self, turn_id: int, turn: Turn | None, error: str | None) -> None:
        super().__init__()
        self.turn_id = turn_id
        self.turn = turn
        self.error = error


class DraftingOff(Message):
    """Auto-K turned drafting off (its :class:`~specchat.engine.events.AutoKNotice`, which the chat shows as a
    notice too): the app offers fixed K."""

    def __init__(self, drafter: str, notice: str) -> None:
        super().__init__()
        self.drafter = drafter
        self.notice = notice


class SavedRepliesDetokenized(Message):
    """Per-token text of reopened replies, from ``ChatEngine.detokenize_pieces`` on the engine thread."""

    def __init__(self, results: list[tuple[AssistantMessage, list[str]]]) -> None:
        super().__init__()
        self.results = results
