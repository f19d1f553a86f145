"""Untrusted text made inert before it reaches a terminal: model output, imported or stored history, file names.

A model can emit any character, and an imported file or a hand-edited database can hold any string, including
ESC (``\\x1b``), which a terminal takes as the start of an escape sequence: cursor moves, colours, a new window
title (OSC 2), a clipboard write (OSC 52). Textual draws what a widget holds byte for byte, and a CLI ``print``
does too, so everything that did not come from specchat itself is passed through :func:`sanitize` (text that
keeps its lines) or :func:`sanitize_line` (one-line labels: titles, model names, dates, stop reasons) on its way
to the screen; JSON written to a terminal goes through :func:`json_text`. What is replaced:

- C0 controls (U+0000..U+001F) except ``\\n`` and ``\\t``, and DEL (U+007F), become their visible Unicode
  *Control Pictures* (U+2400 + code, U+2421 for DEL), so ``\\x1b[31m`` shows as ``␛[31m``;
- ``\\r`` is dropped (``\\r\\n`` line ends arrive split over two tokens; a lone CR would only move the cursor);
- C1 controls (U+0080..U+009F, e.g. the one-character CSI U+009B and OSC U+009D) become U+FFFD;
- bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069; "Trojan Source", CVE-2021-42574)
  become U+FFFD, so a text cannot reorder how the rest of the line is displayed;
- lone surrogates (what Python makes of bytes that are not UTF-8, ``surrogateescape``) become U+FFFD: they
  cannot be encoded for the terminal at all.

Stored text is kept exactly as written (a reply with an ESC in it is saved with that ESC, so its tokens and
its text stay consistent); it is made inert where it is shown.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

_TABLE: dict[int, str | None] = {}
for _code in range(0x20):
    if _code not in (0x09, 0x0A):
        _TABLE[_code] = chr(0x2400 + _code)
_TABLE[0x0D] = None  # str.translate deletes characters mapped to None
_TABLE[0x7F] = "\u2421"
for _code in range(0x80, 0xA0):
    _TABLE[_code] = "\ufffd"
for _ch in BIDI_CONTROLS:
    _TABLE[ord(_ch)] = "\ufffd"
for _code in range(0xD800, 0xE000):
    _TABLE[_code] = "\ufffd"

_NEEDS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + BIDI_CONTROLS + "\ud800-\udfff]")
#: what JSON output must escape beyond what ``json.dumps`` already does (it escapes U+0000..U+001F)
_JSON_NEEDS = re.compile("[\x7f-\x9f" + BIDI_CONTROLS + "\ud800-\udfff]")


def sanitize(text: str) -> str:
    """``text`` with control characters and escape introducers made visible and inert; keeps ``\\n`` and ``\\t``.

    Fast path: text without anything to replace is returned as is.
    """
    if not _NEEDS.search(text):
        return text
    return text.translate(_TABLE)


def sanitize_line(text: Any) -> str:
    """One line of inert text for a label or a table cell: :func:`sanitize`, then every run of whitespace
    (newlines and tabs included) becomes one space. ``None`` gives ``""``."""
    if text is None:
        return ""
    return " ".join(sanitize(str(text)).split())


def json_text(data: Any, **dumps_kwargs: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, ...)`` with DEL, C1 controls, bidi controls and lone surrogates
    written as ``\\uXXXX`` escapes: the same JSON value, safe to print on a terminal, readable non-ASCII text."""
    text = json.dumps(data, ensure_ascii=False, **dumps_kwargs)
    # outside strings JSON is ASCII, so every match is inside a string, where \\uXXXX means the same character
    return _JSON_NEEDS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def read_stdin_text() -> str:
    """All of stdin as text, decoded as strict UTF-8 from its bytes (the text stream's own decoding may replace
    or smuggle in bad bytes as surrogates). Raises :class:`UnicodeDecodeError` (``.start`` is the byte offset)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stdin (tests, embedding): already decoded
        return sys.stdin.read()
    return buffer.read().decode("utf-8")
