"""What a chat engine offers the UI: a conversation you can send to, regenerate, edit, stop.

This module imports neither llama_cpp nor Textual. The real implementation is
:class:`specchat.engine.chat.ChatSession`, and :class:`specchat.engine.remote.RemoteSession` on a
llama-server; UI unit tests use a fake that satisfies :class:`ChatEngine`.

Every generating call returns an iterator of :mod:`specchat.engine.events` and must be consumed in one
worker thread; :attr:`ChatEngine.controls` may be used from any thread meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

from specchat.engine.controls import Controls
from specchat.engine.events import Event, Turn, VerifyCurve

Role = Literal["system", "user", "assistant"]


@dataclass(slots=True)
class Message:
    """One message of a conversation.

    For assistant messages ``tokens`` keeps the exact generated ids (so the next turn reuses the KV
    cache without re-tokenizing the reply), ``kinds`` one piece kind per token, ``stats`` the turn's
    :class:`Turn`, and ``stopped`` marks a reply cut short by a stop request.

    **Alternates.** Regenerating a reply keeps the previous one: the replies to the same user message are its
    *versions*, in the order they were generated. The message in the conversation is the chosen version;
    ``alternates`` holds the others (in order, each without alternates of its own) and ``alternate_index``
    is the chosen one's place among all versions, so ``versions()`` is
    ``alternates[:alternate_index] + [self] + alternates[alternate_index:]``. Only the chosen version is
    part of what the model sees next.
    """

    role: Role
    content: str
    tokens: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    stats: Turn | None = None
    stopped: bool = False
    alternates: list[Message] = field(default_factory=list)
    alternate_index: int = 0

    def versions(self) -> list[Message]:
        """Every version of this reply in the order they were generated (this one without its alternates)."""
        i = max(0, min(self.alternate_index, len(self.alternates)))
        alone = replace(self, alternates=[], alternate_index=0)
        return [*self.alternates[:i], alone, *self.alternates[i:]]

    def with_version(self, index: int) -> Message:
        """Version ``index`` (of :meth:`versions`) as the chosen reply, carrying the others as alternates."""
        versions = self.versions()
        if not 0 <= index < len(versions):
            raise IndexError(f"reply version {index} does not exist: there are {len(versions)}")
        chosen = versions.pop(index)
        return replace(chosen, alternates=versions, alternate_index=index)

    def with_new_version(self, reply: Message) -> Message:
        """``reply`` as the newest, chosen version, with every version of this one as its alternates."""
        versions = self.versions()
        return replace(reply, alternates=versions, alternate_index=len(versions))


@dataclass(frozen=True, slots=True)
class EngineInfo:
    target_name: str
    draft_name: str  # drafter currently selected: a model file's name, "ngram", or "none"
    drafters: tuple[str, ...]  # names accepted by Controls.set_drafter
    n_ctx: int
    k_max: int
    can_speculate: bool  # False for recurrent/hybrid targets
    note: str = ""  # e.g. why speculation is unavailable
    #: the target's verify cost v(K) and its reason in words, as known now (from this file's cached
    #: calibration before the first turn; Step.cost.verify carries the live curve after every round)
    verify: VerifyCurve | None = None
    #: the target's weight format (GGUF general.file_type), e.g. "Q4_1"
    weights: str = ""
    chat_template: bool = True  # False: the model has none, the plain '### Role:' fallback format is used
    #: False: the engine cannot time its drafter (a llama-server reports no draft time; its Steps say 0 ms), so
    #: it has no draft cost and no cost model; a UI says "not reported" instead of showing 0
    draft_timing: bool = True
    #: the target's kernels when a measurement chose them, in words: "repack off: models tune, plain chat with
    #: auto-K, 105 tok/s on, 117 off" (``repack = "auto"`` following a saved ``specchat models tune``); "" otherwise
    kernels: str = ""


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
        """Generate the last assistant reply again (rolling both caches back); the previous reply is kept as an
        alternate of the new one (:attr:`Message.alternates`), which becomes the chosen version. If the new
        reply fails, the previous one stays the reply."""
        ...

    def select_alternate(self, index: int, at: int | None = None) -> Message:
        """Make version ``index`` of a reply (:meth:`Message.versions`, in the order generated) the one the
        conversation continues from, and return it; ``at`` is the reply's place in :attr:`messages` (default:
        the last message; the messages after an earlier reply stay as they are). Nothing is decoded now: the
        next turn's tokens contain the chosen version's exact ids, and both KV caches keep their longest common
        prefix with them (the next turn decodes from where the versions part). :class:`~specchat.errors.UserError`
        when that message is not a reply or ``index`` is not one of its versions. Not while a reply is generated.
        """
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

    def detokenize_pieces(self, tokens: Sequence[int]) -> list[str]:
        """The text of each token of a reply, exactly as it was streamed (one string per id).

        Decoded incrementally like the stream: a character split across tokens appears whole on the token
        that completes it; an unfinished character at the end becomes U+FFFD on the last token. So for a
        reply generated by this engine's target, ``"".join(pieces) == message.content``. Used to draw saved
        replies in their kind colours (history stores token ids and kinds, not per-token text). Raises
        :class:`ValueError` for an id outside the target's vocabulary.
        """
        ...

    def close(self) -> None: ...
