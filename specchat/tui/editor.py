"""The prompt in your own editor (plain: no Textual): which editor, and one round trip through a temp file.

``$VISUAL`` first, then ``$EDITOR``, as git, crontab and less choose (VISUAL names a full-screen editor,
EDITOR may be a line editor); each is split like a shell word list, so ``EDITOR="code --wait"`` works. The
prompt's current text is written to a temp file (``specchat-prompt-*.md``: editors colour Markdown, and chat
prompts are Markdown), the editor runs on it with the terminal handed over (the chat screen wraps
:func:`edit_in_editor` in Textual's ``App.suspend``), and what was saved is the message to send.

Nothing is sent when the editor exits non-zero (``:cq`` in vim, a crash: the user said no) or the saved text
is empty or only whitespace; each outcome says why in one line. One trailing line break is removed (editors
add one on save; it was never typed). The temp file is removed afterwards whatever happened.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specchat.tui.outcomes import Refusal

#: the variables that name the editor, in the order they are read
EDITOR_VARS: tuple[str, ...] = ("VISUAL", "EDITOR")

NO_EDITOR = Refusal(
    "No editor is set: set VISUAL or EDITOR (e.g. export EDITOR=nano) and press the key again.", "warning", 8
)

#: runs the editor's argv in the terminal and returns its exit status (subprocess.call; tests give their own)
Runner = Callable[[Sequence[str]], int]


@dataclass(frozen=True, slots=True)
class Editor:
    """The editor's command line and the variable it came from."""

    argv: tuple[str, ...]
    source: str

    @property
    def name(self) -> str:
        return Path(self.argv[0]).name


def editor_from(env: Mapping[str, str]) -> Editor | Refusal:
    """The editor ``env`` names (VISUAL, else EDITOR; an empty one counts as unset), or why there is none."""
    for var in EDITOR_VARS:
        value = env.get(var, "").strip()
        if not value:
            continue
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            return Refusal(f"${var} ({value!r}) cannot be split into a command ({exc}): fix it and try again.",
                           "error", 8)
        if argv:
            return Editor(tuple(argv), var)
    return NO_EDITOR


def edit_in_editor(editor: Editor, text: str, run: Runner | None = None) -> str | Refusal:
    """``text`` in a temp file, edited by ``editor`` (run by ``run``, default :func:`subprocess.call`: the
    terminal is the editor's); the saved text to send, or a Refusal saying why not. Never raises for what a
    file or an editor can do wrong: the caller has handed the terminal over and must get it back."""
    try:
        fd, name = tempfile.mkstemp(prefix="specchat-prompt-", suffix=".md")
    except OSError as exc:
        return Refusal(f"Could not create the temp file for the editor ({exc.strerror or exc}): nothing was sent.",
                       "error", 8)
    path = Path(name)
    try:
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
        except OSError as exc:
            return Refusal(f"Could not write the temp file for the editor ({exc.strerror or exc}): nothing was sent.",
                           "error", 8)
        try:
            status = (run or subprocess.call)([*editor.argv, str(path)])
        except OSError as exc:
            return Refusal(f"Could not run the editor {editor.argv[0]!r} (from ${editor.source}): "
                           f"{exc.strerror or exc}; nothing was sent.", "error", 8)
        if status != 0:
            return Refusal(f"{editor.name} exited with status {status}: nothing was sent, the prompt is as it was.",
                           "warning", 6)
        try:
            saved = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return Refusal(f"Could not read what {editor.name} saved ({exc.strerror or exc}): nothing was sent.",
                           "error", 8)
    finally:
        path.unlink(missing_ok=True)
    saved = saved.removesuffix("\n").removesuffix("\r")
    if not saved.strip():
        return Refusal(f"The file {editor.name} saved is empty: nothing was sent.", "warning", 6)
    return saved


__all__ = ["EDITOR_VARS", "NO_EDITOR", "Editor", "Runner", "edit_in_editor", "editor_from"]
