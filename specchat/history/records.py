"""What the history hands out: a saved conversation, a saved message with its run details, a search hit,
the errors, and the two values every writer stamps (the time now, a conversation's default title)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from specchat.engine.protocol import Message
from specchat.errors import UserError


class HistoryError(UserError):
    """The history database or an export file cannot be used (missing, foreign, newer, malformed)."""


class UnknownConversationError(HistoryError):
    """No conversation with that id."""


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    """A saved conversation as the database holds it, with its number of messages (not the engine's live
    :class:`specchat.engine.conversation.Conversation`)."""

    id: int
    title: str
    created: str
    updated: str
    target: str
    draft: str
    system_prompt: str
    n_messages: int = 0


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A conversation found by :meth:`HistoryStore.search_conversations` and where: the first message
    (``role``, its ``text``) that contains the query, or ``role = None`` when only the title does (or no
    query was given)."""

    conversation: ConversationRecord
    role: str | None = None
    text: str = ""


@dataclass(slots=True)
class StoredMessage:
    """A message as saved: the :class:`Message` plus what the database knows around it."""

    id: int
    idx: int
    created: str
    message: Message
    target: str | None = None  # the target model of the turn (assistant messages with stats)
    auto_k: bool | None = None
    sampling: dict[str, Any] | None = None
    #: the other versions of this reply as saved, in :meth:`Message.versions` order without this one (their
    #: messages are ``message.alternates``)
    alternates: list[StoredMessage] = dataclasses.field(default_factory=list)

    def version_records(self) -> list[StoredMessage]:
        """Every version's record in :meth:`Message.versions` order (this one at ``message.alternate_index``)."""
        i = self.message.alternate_index if self.alternates else 0
        return [*self.alternates[:i], self, *self.alternates[i:]]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_title(text: str, limit: int = 60) -> str:
    """First non-empty line of a user message, whitespace collapsed, cut at ``limit`` characters."""
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
    return ""
