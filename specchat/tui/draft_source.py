"""Where a draft came from, in words (issue 23): this conversation, conversation #N ("its title", 3 days ago), or the
draft model - for the sidebar's line about the current or last draft and a reply's summary in the chat pane.

The engine says where each round's draft came from (:class:`specchat.engine.events.DraftSource`: its origin, the
drafter or chain link, and for a copy from the history the saved conversation's id); only the history knows that
conversation's title and when it was last written, so the caller passes ``describe`` (the chat screen's
:meth:`specchat.tui.recorder.Recorder.describe`). A copy from the conversation on screen, saved already, is "this
conversation" too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timezone

from specchat.engine.events import DraftSource

#: (title, ISO time it was last written) of a saved conversation, None when it is not known
Describe = Callable[[int], tuple[str, str] | None]

_TITLE_MAX = 28


def age(iso: str, now: datetime | None = None) -> str:
    """``3 days ago``, ``5 minutes ago``, ``just now`` (a time that cannot be read: "")."""
    try:
        then = datetime.fromisoformat(iso)
    except (TypeError, ValueError):
        return ""
    if then.tzinfo is None:
        then = then.replace(tzinfo=timezone.utc)
    seconds = max(0.0, ((now or datetime.now(timezone.utc)) - then).total_seconds())
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        n = int(seconds // size)
        if n >= 1:
            return f"{n} {unit}{'s' if n > 1 else ''} ago"
    return "just now"


def conversation_words(conv: int, describe: Describe | None, now: datetime | None = None) -> str:
    """``conversation #12 ("Refactor parser", 3 days ago)``, or ``conversation #12`` when the history cannot say."""
    found = describe(conv) if describe is not None else None
    if not found:
        return f"conversation #{conv}"
    title, written = found
    title = title.strip() or "untitled"
    if len(title) > _TITLE_MAX:
        title = title[: _TITLE_MAX - 1] + "\u2026"
    when = age(written, now)
    return f'conversation #{conv} ("{title}"{", " + when if when else ""})'


def source_words(source: DraftSource | None, *, current: int | None = None, describe: Describe | None = None,
                 now: datetime | None = None) -> str:
    """One source in words; "" for None. ``current``: the id the conversation on screen is saved under."""
    if source is None:
        return ""
    if source.origin == "model":
        return f"the draft model ({source.drafter})"
    if source.origin == "history" and source.conversation is not None and source.conversation != current:
        return conversation_words(source.conversation, describe, now)
    if source.origin == "history" and source.conversation is None:
        return "a saved conversation"
    return "this conversation"


def source_line(source: DraftSource | None, chain: str = "", *, current: int | None = None,
                describe: Describe | None = None, now: datetime | None = None) -> str:
    """The sidebar's line: ``draft from conversation #3 ("Refactor parser", 3 days ago)``; a chain's free link says
    which it was (``draft from this conversation (chain link suffix)``; the model link is named already). "" before
    any draft."""
    words = source_words(source, current=current, describe=describe, now=now)
    if not words or source is None:
        return ""
    link = f" (chain link {source.drafter})" if chain and source.origin != "model" else ""
    return f"draft from {words}{link}"


def origin_summary(accepted_by_origin: Mapping[str, int], conversations: list[int], *, current: int | None = None,
                   describe: Describe | None = None) -> str:
    """A reply's accepted drafts by source, for its summary in the chat pane: ``drafts kept: 40 from conversation #3
    ("Refactor parser", 3 days ago), 12 from this conversation, 5 from the draft model``; "" when none was kept."""
    parts = []
    history = accepted_by_origin.get("history", 0)
    if history:
        others = [c for c in conversations if c != current]
        where = conversation_words(others[0], describe) if others else "this conversation"
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        parts.append(f"{history} from {where}{more}")
    if accepted_by_origin.get("conversation", 0):
        parts.append(f"{accepted_by_origin['conversation']} from this conversation")
    if accepted_by_origin.get("model", 0):
        parts.append(f"{accepted_by_origin['model']} from the draft model")
    return f"drafts kept: {', '.join(parts)}" if parts else ""


__all__ = ["Describe", "age", "conversation_words", "origin_summary", "source_line", "source_words"]
