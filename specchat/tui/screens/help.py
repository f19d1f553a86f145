"""F1: keys (with the keys in effect after the config keymap), what the colours mean, binding ids."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from specchat.tui.keys import APP_KEYS, PROMPT_KEYS
from specchat.tui.sanitize import sanitize_line

COLOURS = (
    ("accepted", "a draft token the target kept (free speed)"),
    ("corrected", "the target's own token where it refused the draft"),
    ("bonus", "the extra token after a fully accepted draft"),
    ("plain", "decoded without speculation"),
    ("rejected", "ghost text: draft tokens the target refused; never part of the reply"),
)


def help_text(effective_keys: dict[str, str]) -> Content:
    parts: list[Content | str] = []
    parts.append(Content.styled("Keys\n", "bold"))
    for spec in (*PROMPT_KEYS, *APP_KEYS):
        keys = effective_keys.get(spec.id, spec.keys)
        parts.append(Content(f"  {sanitize_line(keys):<22} {spec.help}  [{spec.id}]\n"))
    parts.append(Content("  ctrl+p                 command palette: drafter, model, theme, K, temperature\n\n"))
    parts.append(Content.styled("Colours\n", "bold"))
    for kind, meaning in COLOURS:
        parts.append(Content("  "))
        parts.append(Content.styled(f"{kind:<10}", f"$token-{kind}" + (" strike dim" if kind == "rejected" else "")))
        parts.append(Content(f" {meaning}\n"))
    parts.append(
        Content(
            "\nRemap keys in config.toml, e.g.\n  [keymap]\n  k_up = \"alt+up\"      # binding id = keys\n"
            "  \"alt+s\" = \"stop\"     # or key = binding id\n"
            "The ids are shown in brackets above. Esc, F1 or ctrl+g closes this help."
        )
    )
    return Content.assemble(*parts)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,ctrl+g,q", "dismiss", "Close", show=False)]

    def __init__(self, effective_keys: dict[str, str]) -> None:
        super().__init__()
        self._keys = effective_keys

    def compose(self):
        with VerticalScroll(id="help-box"):
            yield Static(help_text(self._keys), id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-box").border_title = "specchat help"

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
