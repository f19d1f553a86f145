"""The everyday keys of the chat screen: copy the last reply, copy a code block of it, write the message in
your own editor (issue 24; what chat users ask for first: ggozad/oterm#310, darrenburns/elia#6, simonw/llm#969).

:class:`EverydayKeys` is a part of :class:`~specchat.tui.screens.chat.ChatScreen` (a mixin: the actions must
be the screen's, where the app routes the conversation's keys, :meth:`SpecChatApp.run_action`), kept apart
so the screen stays one readable module. The rules are plain functions: what is copied and the notices
(:mod:`specchat.tui.clipboard`), which editor and the temp file's round trip (:mod:`specchat.tui.editor`).

The editor runs inside Textual's ``App.suspend()``: the terminal is the editor's until it exits, then the app
redraws. A reply streaming meanwhile goes on (the engine thread does not wait for the screen), and a message
saved while it streams is queued like one typed then. Where the app cannot hand the terminal over
(``specchat serve`` in a browser, a test's headless driver) the key says so and nothing else happens.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from textual.app import SuspendNotSupported

from specchat.tui.clipboard import OSC52_NOTE, block_copied, code_blocks, next_block, reply_copied
from specchat.tui.editor import edit_in_editor, editor_from
from specchat.tui.keys import first_key
from specchat.tui.outcomes import Refusal

if TYPE_CHECKING:
    from specchat.tui.widgets.chat import AssistantMessage

NO_SUSPEND = (
    "This session cannot hand the terminal to an editor (e.g. specchat serve in a browser): write the message "
    "in the prompt instead."
)


class EverydayKeys:
    """The copy and editor actions (see the module docstring); mixed into the chat screen, whose methods
    (``assistant_messages``, ``prompt``, ``submit_prompt``, ``notify``, ``refuse``...) they use."""

    #: the block the last copy_code press copied: (the reply widget's id, its text, the block's index)
    _copied_block: tuple[int, str, int] | None = None
    #: the OSC 52 caveat was said in this session (once: see specchat.tui.clipboard)
    _osc52_said: bool = False

    def _last_reply(self: Any) -> AssistantMessage | None:
        replies = [r for r in self.assistant_messages() if r.reply_text]
        return replies[-1] if replies else None

    def _copy(self: Any, text: str, note: str) -> None:
        self.app.copy_to_clipboard(text)
        if not self._osc52_said:
            self._osc52_said = True
            note = f"{note} {OSC52_NOTE}"
        self.notify(note, title="Clipboard", timeout=8 if OSC52_NOTE in note else 3)

    def action_copy_reply(self: Any) -> None:
        """Copy the last reply's text: never its ghost text (the token view's reply text)."""
        reply = self._last_reply()
        if reply is None:
            self.notify("No reply to copy yet.")
            return
        partial = self.host.generating and reply is self._current
        self._copy(reply.reply_text, reply_copied(reply.reply_text, partial=partial))

    def action_copy_code(self: Any) -> None:
        """Copy the last reply's last code block; pressed again on the same reply, the block before it."""
        reply = self._last_reply()
        if reply is None:
            self.notify("No reply to copy a code block from yet.")
            return
        text = reply.reply_text
        blocks = code_blocks(text)
        if not blocks:
            key = first_key(self.session.effective_keys, "copy_reply", "f9")
            self.notify(f"The last reply has no code block (no ``` fence); {key} copies the whole reply.")
            return
        previous = self._copied_block
        same = previous is not None and previous[:2] == (id(reply), text)
        index = next_block(len(blocks), previous[2] if same else None)
        self._copied_block = (id(reply), text, index)
        again = first_key(self.session.effective_keys, "copy_code", "alt+b")
        self._copy(blocks[index].text, block_copied(blocks[index], index, len(blocks), again))

    def action_edit_in_editor(self: Any) -> None:
        """Open the prompt's text in $VISUAL / $EDITOR and send what is saved there (see :mod:`specchat.tui.editor`).

        Sent as the send key sends (:meth:`submit_prompt`: queued behind a streaming reply, an edit of the last
        message if one is in progress); if it cannot be sent (no model yet), it stays in the prompt."""
        editor = editor_from(os.environ)
        if isinstance(editor, Refusal):
            self.refuse(editor)
            return
        try:
            with self.app.suspend():  # edit_in_editor never raises for the file or the editor: the screen comes back
                result = edit_in_editor(editor, self.prompt.text)
        except SuspendNotSupported:
            self.notify(NO_SUSPEND, severity="warning", timeout=8)
            return
        if isinstance(result, Refusal):
            self.refuse(result)
            return
        if self.submit_prompt(result):
            self.prompt.clear()
        else:
            self.prompt.set_text(result)  # not lost: what the editor saved waits in the prompt


__all__ = ["NO_SUSPEND", "EverydayKeys"]
