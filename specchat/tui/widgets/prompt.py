"""The multi-line prompt: Enter sends; ctrl+j (every terminal sends it as a plain LF) or shift+enter (where
the terminal reports it) inserts a newline. Both keys are bindings with ids, so the config keymap can move
them (ids ``send`` and ``newline``). Editing the last message (up in an empty prompt) is an app binding
(``edit_last``): a binding here would replace the TextArea's own up key instead of stepping aside.

**Keys arrive in order.** Both bindings are priority bindings (the TextArea would otherwise insert a
newline for Enter itself), and Textual runs a priority binding in the *App's* message handler, while every
plain key is forwarded to this widget's own message queue. Typed fast (a burst from a paste-like typist,
tmux ``send-keys``, or any key while the machine is loaded), ``"hello\\r"`` reaches the App as six keys:
the App forwards h, e, l, l, o to this queue and runs the Enter binding at once, before this widget has
inserted a single character; reading ``self.text`` there sent an empty, cut or merged message. So both
actions only *schedule* their work with :meth:`~textual.message_pump.MessagePump.call_later`, which posts
it to this widget's queue behind the keys already in it: the text sent is exactly what was typed before
Enter, and the characters typed after it stay for the next message. Reading, sending and clearing then
happen in one synchronous call (:attr:`submit`), so no key can land in between.

**Arrows in an empty prompt.** Left and right flip the versions of the chosen reply when the prompt is empty,
and shift+up / shift+down choose that reply (the app's ``reply_prev`` / ``reply_next`` / ``reply_earlier`` /
``reply_later``, not priority bindings): the prompt's own cursor actions step
aside then (:meth:`PromptInput.check_action` disables them, so Textual goes on to the app's binding for the
key). That check runs here, in this widget's queue, after every key typed before the arrow: deciding at the
App, when the arrow arrives, raced with those keys - "ab" then left in one burst flipped a version and left
"abX" instead of moving the cursor, because "a" and "b" were still on their way (reproduced through a pty
under load, tests/terminal/test_versions_pty.py).

**Bound keys act in order with the text.** A key the TextArea does not insert (an arrow, backspace, home,
an alt+key...) goes on from here by bubbling: Textual runs its binding when the event reaches the App, some
queues later, while this widget goes on inserting the characters typed after it. So "ab", left, "X" in one
burst gave "abX" with the cursor before X, not "aXb" (about one burst in two under load), and backspace or
home in a burst acted after later characters. Here such a key runs its bindings in this widget's queue, at
its place among the typed characters (the App's own non-priority lookup, from this widget: the same chain,
the prompt first), and stops there; a key no binding takes bubbles on as before.

**Alt+letter types nothing.** A terminal sends alt+x as ESC x, which Textual reports as the key ``alt+x``
*with* the character "x", so the TextArea would insert an "x". Here an alt key is never text: it goes on
to the app's bindings (alt+p / alt+n flip versions whatever the prompt holds).
"""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.binding import Binding
from textual.widgets import TextArea

from specchat.tui.keys import PROMPT_KEYS
from specchat.tui.sanitize import text as inert

#: ``submit(text) -> taken``: the app sends (or refuses, saying why) the prompt's text; True clears the prompt
Submit = Callable[[str], bool]


class PromptInput(TextArea):
    BINDINGS = [
        Binding(spec.keys, spec.action, spec.description, id=spec.id, priority=True, show=spec.show)
        for spec in PROMPT_KEYS
    ]

    def __init__(self, *, submit: Submit | None = None, id: str | None = None) -> None:
        super().__init__(
            "",
            id=id,
            soft_wrap=True,
            tab_behavior="focus",
            show_line_numbers=False,
            compact=True,
            placeholder="Message (Enter sends, ctrl+j new line, ctrl+g help)",
        )
        self.submit = submit
        #: what the prompt held before the last message was put in it for editing (None: not editing)
        self.held_before_edit: str | None = None
        #: sends scheduled by the send key and not run yet (:meth:`action_submit`): a key that must act after
        #: them (the stop key, ctrl+c, in the same burst as Enter) waits behind them: :meth:`after_queued`
        self.submits_pending = 0

    #: the TextArea's actions (with their parameters) that step aside in an empty prompt, for the app's keys (see
    #: the module docstring): left / right (cursor_left, cursor_right) and shift+up / shift+down (cursor_up(True),
    #: cursor_down(True): select, of nothing)
    STEP_ASIDE = frozenset(
        {("cursor_left", ()), ("cursor_right", ()), ("cursor_up", (True,)), ("cursor_down", (True,))}
    )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if (action, tuple(parameters)) in self.STEP_ASIDE and not self.text.strip():
            return False
        return super().check_action(action, parameters)

    async def _on_key(self, event: events.Key) -> None:
        alt = event.key.startswith("alt+")
        if alt:
            event.prevent_default()  # not the TextArea's: no letter typed; the key goes on to the app's bindings
        if alt or not (event.is_printable or event.key in ("enter", "tab")):
            # bindings now, in order with the characters queued here (see the module docstring)
            if await self.app._check_bindings(event.key):
                event.stop()
                event.prevent_default()

    def set_text(self, text: str) -> None:
        """Replace the prompt's text and put the cursor at its end."""
        self.text = text
        self.move_cursor(self.document.end)

    @property
    def editing(self) -> bool:
        return self.held_before_edit is not None

    def begin_edit(self, text: str, hint: str) -> None:
        """Show ``text`` (the last message) for editing, ``hint`` in the border (how to resend or cancel);
        what the prompt held is kept for :meth:`end_edit` (an edit begun again keeps the first one's)."""
        if self.held_before_edit is None:
            self.held_before_edit = self.text
        self.set_text(text)
        self.border_title = inert(hint)
        self.add_class("editing")
        self.focus()

    def end_edit(self, *, restore: bool) -> None:
        """Leave edit mode; ``restore`` puts back what the prompt held before the edit began."""
        held, self.held_before_edit = self.held_before_edit, None
        if held is None:
            return
        self.border_title = None
        self.remove_class("editing")
        if restore:
            self.set_text(held)

    def action_submit(self) -> None:
        self.submits_pending += 1
        self.call_later(self._submit_now)  # behind the keys typed before Enter: see the module docstring

    def after_queued(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` after everything queued here (the keys typed before it, a scheduled send), in this
        widget's queue; at once when nothing is queued."""
        if self.submits_pending or self.message_queue_size:
            self.call_later(callback)
        else:
            callback()

    def action_newline(self) -> None:
        self.call_later(self._newline_now)

    def _submit_now(self) -> None:
        self.submits_pending -= 1
        if self.submit is not None and self.submit(self.text):
            self.clear()

    def _newline_now(self) -> None:
        start, end = self.selection
        self.replace("\n", start, end, maintain_selection_offset=False)
