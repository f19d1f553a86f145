"""The versions of the last reply: flipping between them, as a plain function of a ChatEngine.

A regenerated reply keeps the earlier ones (:attr:`Message.alternates`); :func:`flip` chooses the previous or
next one (:meth:`ChatEngine.select_alternate`: nothing is decoded, the conversation continues from it) or says
why not. The chat screen draws the chosen version (:meth:`AssistantMessage.show_version`) and saves the choice.
"""

from __future__ import annotations

from specchat.engine.protocol import ChatEngine, Message
from specchat.tui.outcomes import Refusal


def flip(engine: ChatEngine, step: int, regenerate_key: str) -> Message | Refusal:
    """The version of the last reply ``step`` away (-1 the previous, +1 the next), now the engine's; or a
    refusal when the last reply has one version or is the first or last (``regenerate_key`` is named then)."""
    last = engine.messages[-1] if engine.messages else None
    if last is None or last.role != "assistant" or not last.alternates:
        return Refusal(f"The last reply has one version: regenerate it ({regenerate_key}) to keep both and compare.",
                       timeout=4)
    count = len(last.alternates) + 1
    index = last.alternate_index + step
    if not 0 <= index < count:
        edge = "first" if step < 0 else "last"
        return Refusal(f"Reply {last.alternate_index + 1}/{count} is the {edge} version.", timeout=2)
    return engine.select_alternate(index)
