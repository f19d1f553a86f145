"""What the copy keys copy and the words that say so (plain: no Textual).

``copy_reply`` copies the last reply's text and ``copy_code`` a fenced code block of it: the *reply* text of the
token view, never the ghost text (rejected draft tokens are drawn but were never part of the reply). The
blocks are found as CommonMark finds fenced code (a line of three or more backticks or tildes, indented at
most three spaces, closed by a fence of the same character at least as long; an unclosed fence runs to the
end, as in a reply that was stopped mid-block), so what is copied is exactly what the Markdown view shows as
code, without the fences. The first press copies the *last* block (in a chat reply the code one asks for
usually comes last, after the explanation); pressing again on the same reply steps back one block at a time
and wraps around, so any block can be picked without a menu, and the notice says which one it was.

Textual's ``App.copy_to_clipboard`` writes the text to the terminal as OSC 52 (``ESC ] 52 ; c ; <base64>
BEL``); the terminal, not specchat, puts it on the clipboard. Some terminals ignore it (macOS Terminal;
tmux unless ``set-clipboard`` is on; GNOME Terminal's VTE), and the app cannot tell, so the first copy of a
session says so (:data:`OSC52_NOTE`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: said once per session, on the first copy: the app cannot know whether the terminal honoured OSC 52
OSC52_NOTE = (
    "Sent to the terminal's clipboard (OSC 52); if nothing lands there, this terminal does not support OSC 52 "
    "(in tmux: set -g set-clipboard on)."
)

_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


@dataclass(frozen=True, slots=True)
class CodeBlock:
    """One fenced block: its text without the fences, and the first word of its info string (the language)."""

    text: str
    language: str = ""

    @property
    def lines(self) -> int:
        return len(self.text.splitlines()) if self.text else 0


def code_blocks(markdown: str) -> list[CodeBlock]:
    """The fenced code blocks of ``markdown``, in order (see the module docstring)."""
    blocks: list[CodeBlock] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        i += 1
        if opened is None:
            continue
        indent, fence, info = len(opened.group(1)), opened.group(2), opened.group(3)
        if fence[0] == "`" and "`" in info:  # CommonMark: a backtick fence's info string has no backtick
            continue
        body: list[str] = []
        while i < len(lines):
            line = lines[i]
            i += 1
            close = line.strip()
            if len(line) - len(line.lstrip(" ")) <= 3 and close and set(close) == {fence[0]} and len(close) >= len(fence):
                break
            body.append(_dedent(line, indent))
        words = info.strip().split()
        blocks.append(CodeBlock("\n".join(body), words[0] if words else ""))
    return blocks


def _dedent(line: str, indent: int) -> str:
    """A content line with up to the opening fence's indentation removed (CommonMark)."""
    strip = min(indent, len(line) - len(line.lstrip(" ")))
    return line[strip:]


def next_block(count: int, previous: int | None) -> int:
    """Which block to copy: the last one, or (``previous``: the one the last press copied, on the same reply) the
    one before it, wrapping around to the last."""
    if previous is None or not 0 <= previous < count:
        return count - 1
    return (previous - 1) % count


def reply_copied(text: str, *, partial: bool) -> str:
    """The notice of ``copy_reply``."""
    what = "the reply so far (it is still being generated)" if partial else "the last reply"
    return f"Copied {what}: {len(text)} characters, without ghost text."


def block_copied(block: CodeBlock, index: int, count: int, again_key: str) -> str:
    """The notice of ``copy_code``: which block, what it is, and how to pick another."""
    lines = f"{block.lines} line{'s' if block.lines != 1 else ''}"
    kind = f"{block.language}, {lines}" if block.language else lines
    if count == 1:
        return f"Copied the reply's code block ({kind})."
    before = (index - 1) % count + 1
    return f"Copied code block {index + 1} of {count} ({kind}); {again_key} again copies block {before}."


__all__ = ["OSC52_NOTE", "CodeBlock", "block_copied", "code_blocks", "next_block", "reply_copied"]
