"""Command palette (ctrl+p): switch drafter, model pair/preset, theme, K and temperature.

The provider talks to the app through :class:`PaletteActions`, the few methods it calls, so this module
does not import the app (which lists this provider in its ``COMMANDS``): no import circle.

Entries name drafters (file names) and themes (user theme files): they are shown as text, never parsed as
markup (Textual's own ``Matcher.highlight`` parses its candidate as markup, so :func:`highlight` does it here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Protocol

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.content import Content
from textual.fuzzy import Matcher

from specchat.engine.drafter_kinds import CHAIN_SEP, K_MAX, NGRAM, SUFFIX
from specchat.engine.protocol import ChatEngine
from specchat.models.presets import PRESET_PREFIX, PRESETS
from specchat.tui.sanitize import sanitize_line

TEMPERATURES = (0.0, 0.2, 0.5, 0.7, 1.0, 1.5)


class SpeculationActions(Protocol):
    """What the palette calls on the chat screen (:class:`specchat.tui.screens.chat.ChatScreen`)."""

    def set_drafter(self, name: str) -> None: ...

    def set_k(self, k: int) -> None: ...

    def set_temperature(self, temperature: float) -> None: ...

    def use_fixed_k(self) -> None: ...


class PaletteActions(Protocol):
    """What the palette reads from and calls on the app (:class:`specchat.tui.app.SpecChatApp`)."""

    @property
    def engine(self) -> ChatEngine | None: ...

    @property
    def available_themes(self) -> Mapping[str, Any]: ...

    @property
    def chat_screen(self) -> SpeculationActions: ...

    def switch_model(self, target: str, draft: str, label: str) -> None: ...

    def set_theme(self, name: str) -> None: ...

    def open_tour(self) -> None: ...


def model_choices() -> list[tuple[str, str, str, str]]:
    """(label, target, draft, help) for the palette: the bundled pair and every preset pair.

    ``target = "preset:NAME"`` with ``draft = "ngram"`` selects the preset's whole pair (see
    :mod:`specchat.models.registry`).
    """
    choices = [(f"bundled SmolLM2 + {NGRAM}", "bundled", NGRAM, "the default pair, no download"),
               (f"bundled SmolLM2 + {SUFFIX}", "bundled", SUFFIX, "drafts from this conversation and every saved one"),
               (f"bundled SmolLM2 + {SUFFIX}{CHAIN_SEP}bundled", "bundled", f"{SUFFIX}{CHAIN_SEP}bundled",
                "a drafter chain: copies from the history first, else the model drafts for itself when auto-K says "
                "it pays")]
    for name, preset in PRESETS.items():
        choices.append((f"preset {name}", f"{PRESET_PREFIX}{name}", NGRAM, preset.demonstrates))
    return choices


def highlight(matcher: Matcher, label: str) -> Content:
    """``label`` as text (never markup) with the characters the query matched in the matcher's style."""
    content = Content(label)
    score, offsets = matcher.fuzzy_search.match(matcher.query, label)
    if score:
        for offset in offsets:
            if not label[offset].isspace():
                content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class SpecChatCommands(Provider):
    """The palette's specchat entries (Textual's own - theme, quit, keys... - come from ``App.COMMANDS``)."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app: PaletteActions = self.app  # type: ignore[assignment]
        chat = app.chat_screen
        out: list[tuple[str, Callable[[], object], str]] = []
        engine = app.engine
        if engine is not None:
            info = engine.info()
            for name in info.drafters:
                out.append((f"Drafter: {name}", partial(chat.set_drafter, name), "draft with this drafter from the next step"))
        for label, target, draft, help_text in model_choices():
            out.append((f"Model: {label}", partial(app.switch_model, target, draft, label), help_text))
        for name in sorted(app.available_themes):
            out.append((f"Theme: {name}", partial(app.set_theme, name), "switch the colour theme"))
        for k in range(K_MAX + 1):
            out.append((f"K = {k}", partial(chat.set_k, k), "draft length (0 = no drafting); next step"))
        for t in TEMPERATURES:
            out.append((f"Temperature = {t:g}", partial(chat.set_temperature, t), "sampling temperature (0 = greedy)"))
        out.append(("Use fixed K", chat.use_fixed_k, "auto-K off, K fixed: the drafter drafts every round (its colours show)"))
        out.append(("Tour: when speculation helps and when it hurts", app.open_tour,
                    "scene by scene on the offline models, each a race with one sentence of explanation"))
        return [(sanitize_line(text), callback, sanitize_line(help_text)) for text, callback, help_text in out]

    async def discover(self) -> Hits:
        for text, callback, help_text in self._commands():
            if text.startswith(("Drafter:", "Model:", "Theme: specchat", "Tour:")):
                yield DiscoveryHit(Content(text), callback, text=text, help=Content(help_text))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for text, callback, help_text in self._commands():
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, highlight(matcher, text), callback, text=text, help=Content(help_text))
