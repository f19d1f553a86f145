"""What a chat engine offers the UI: a conversation you can send to, regenerate, edit, stop.

This module imports neither llama_cpp nor Textual. The real implementation is
:class:`specchat.engine.chat.ChatSession`; UI unit tests use a fake that satisfies :class:`ChatEngine`.

Every generating call returns an iterator of :mod:`specchat.engine.events` and must be consumed in one
worker thread; :attr:`ChatEngine.controls` may be used from any thread meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from specchat.engine.controls import Controls
from specchat.engine.events import Event, Turn

Role = Literal["system", "user", "assistant"]


@dataclass(slots=True)
class Message:
    """One message of a conversation.

    For assistant messages ``tokens`` keeps the exact generated ids (so the next turn reuses the KV
    cache without re-tokenizing the reply), ``kinds`` one piece kind per token, ``stats`` the turn's
    :class:`Turn`, and ``stopped`` marks a reply cut short by a stop request.
    """

    role: Role
    content: str
    tokens: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    stats: Turn | None = None
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class EngineInfo:
    target_name: str
    draft_name: str  # drafter currently selected: a model file's name, "ngram", or "none"
    drafters: tuple[str, ...]  # names accepted by Controls.set_drafter
    n_ctx: int
    k_max: int
    can_speculate: bool  # False for recurrent/hybrid targets
    note: str = ""  # e.g. why speculation is unavailable


@runtime_checkable
class ChatEngine(Protocol):
    controls: Controls

    @property
    def messages(self) -> list[Message]: ...

    def info(self) -> EngineInfo: ...

    def send(self, user_text: str) -> Iterator[Event]:
        """Append a user message and generate the assistant reply."""
        ...

    def regenerate(self) -> Iterator[Event]:
        """Drop the last assistant reply (rolling both caches back) and generate it again."""
        ...

    def edit_last(self, user_text: str) -> Iterator[Event]:
        """Replace the last user message (dropping the reply after it) and generate again."""
        ...

    def reset(self, system_prompt: str | None = None) -> None:
        """Start a new conversation (keeps the loaded models)."""
        ...

    def load(self, messages: list[Message]) -> None:
        """Continue a saved conversation: the caches are rebuilt lazily on the next send."""
        ...

    def close(self) -> None: ...
