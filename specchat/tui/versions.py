"""The versions of a reply: which reply they flip, and flipping between them, as plain functions.

A regenerated reply keeps the earlier ones (:attr:`Message.alternates`). Only the last reply can be
regenerated, but it stays a reply with versions once the conversation goes on, so the versions of any reply
flip: the screen keeps one *chosen* reply (the last, unless the user moved to an earlier one,
:func:`move`), and :func:`flip` chooses the previous or next version of it (:meth:`ChatEngine.select_alternate`
with the reply's place: nothing is decoded, the conversation continues from it) or says why not. The chat
screen draws the chosen version (:meth:`AssistantMessage.show_version`) and saves the choice; the messages
after an earlier reply stay as they are (:mod:`specchat.engine.conversation`), and history keeps their dates
and run details (:meth:`HistoryStore.sync`).
"""

from __future__ import annotations

from collections.abc import Sequence

from specchat.engine.protocol import ChatEngine, Message
from specchat.tui.outcomes import Refusal


def reply_places(messages: Sequence[Message]) -> list[int]:
    """The places of the replies in ``messages``, in order (what :func:`move` moves between)."""
    return [i for i, m in enumerate(messages) if m.role == "assistant"]


def move(places: Sequence[int], chosen: int | None, step: int) -> int | None:
    """The reply ``step`` away (-1 the earlier, +1 the later) from ``chosen`` among ``places``; None stands
    for the last reply (the default: what a new reply makes chosen again), returned once the move reaches it;
    at either end the move stays where it is."""
    if not places:
        return None
    here = places.index(chosen) if chosen in places else len(places) - 1
    there = max(0, min(len(places) - 1, here + step))
    return None if there == len(places) - 1 else places[there]


def flip(engine: ChatEngine, step: int, regenerate_key: str, at: int | None = None) -> Message | Refusal:
    """The version ``step`` away (-1 the previous, +1 the next) of the reply at ``at`` (None: the last
    message), now the engine's; or a refusal when that reply has one version or is at its first or last
    (``regenerate_key`` is named then: only the last reply can be regenerated)."""
    messages = engine.messages
    where = len(messages) - 1 if at is None else at
    reply = messages[where] if 0 <= where < len(messages) else None
    if reply is None or reply.role != "assistant" or not reply.alternates:
        if at is None or where == len(messages) - 1:
            return Refusal(
                f"The last reply has one version: regenerate it ({regenerate_key}) to keep both and compare.",
                timeout=4,
            )
        return Refusal("This reply has one version (only the last reply can be regenerated).", timeout=4)
    count = len(reply.alternates) + 1
    index = reply.alternate_index + step
    if not 0 <= index < count:
        edge = "first" if step < 0 else "last"
        return Refusal(f"Reply {reply.alternate_index + 1}/{count} is the {edge} version.", timeout=2)
    return engine.select_alternate(index, at)


def chosen_note(messages: Sequence[Message], places: Sequence[int], chosen: int | None, flip_keys: str) -> str:
    """What the notice says once a reply is chosen: which of how many, and whether ``flip_keys`` flip it."""
    where = places[-1] if chosen is None else chosen
    reply = messages[where]
    which = "The last reply" if chosen is None else f"Reply {places.index(where) + 1} of {len(places)}"
    if not reply.alternates:
        return f"{which} is chosen; it has one version."
    count = len(reply.alternates) + 1
    return f"{which} is chosen: version {reply.alternate_index + 1}/{count}, {flip_keys} flip its versions."
