"""The multi-line prompt: Enter sends; ctrl+j (every terminal sends it as a plain LF) or shift+enter (where
the terminal reports it) inserts a newline. Both keys are bindings with ids, so the config keymap can move
them (ids ``send`` and ``newline``). Editing the last message (up in an empty prompt) is an app binding
(``edit_last``): a binding here would replace the TextArea's own up key instead of stepping aside."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import TextArea

from specchat.tui.keys import PROMPT_KEYS


class PromptInput(TextArea):
    BINDINGS = [
        Binding(spec.keys, spec.action, spec.description, id=spec.id, priority=True, show=spec.show)
        for spec in PROMPT_KEYS
    ]

    class Submitted(Message):
        def __init__(self, prompt: PromptInput, text: str) -> None:
            super().__init__()
            self.prompt = prompt
            self.text = text

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(
            "",
            id=id,
            soft_wrap=True,
            tab_behavior="focus",
            show_line_numbers=False,
            compact=True,
            placeholder="Message (Enter sends, ctrl+j new line, F1 help)",
        )

    def set_text(self, text: str) -> None:
        """Replace the prompt's text and put the cursor at its end."""
        self.text = text
        self.move_cursor(self.document.end)

    def action_submit(self) -> None:
        self.post_message(self.Submitted(self, self.text))

    def action_newline(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)
