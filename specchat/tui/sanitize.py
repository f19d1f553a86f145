"""Neutralise model output before it reaches the terminal.

A model can emit any character, including ESC (``\\x1b``), which a terminal would interpret as the start of
an escape sequence (cursor moves, colour changes, OSC 52 clipboard writes, title changes...). Textual
draws through its own compositor, so raw bytes do not reach the terminal as such, but we still neutralise
everything that is not printable text so that what the user sees is exactly what the model wrote:

- C0 controls (U+0000..U+001F) except ``\\n``, ``\\t`` and ``\\r`` and DEL (U+007F) become their visible
  Unicode *Control Pictures* (U+2400 + code, U+2421 for DEL), so ``\\x1b[31m`` shows as ``␛[31m``;
- ``\\r`` is dropped (``\\r\\n`` line ends arrive split over two tokens; a lone CR would only move the cursor);
- C1 controls (U+0080..U+009F, e.g. the single-character CSI U+009B) become U+FFFD;
- bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069; "Trojan Source", CVE-2021-42574)
  become U+FFFD, so a reply cannot reorder how the rest of the line is displayed.
"""

from __future__ import annotations

import re

_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

_TABLE: dict[int, str | None] = {}
for _code in range(0x20):
    if _code not in (0x09, 0x0A):
        _TABLE[_code] = chr(0x2400 + _code)
_TABLE[0x0D] = None  # type: ignore[assignment]  # str.translate deletes characters mapped to None
_TABLE[0x7F] = "\u2421"
for _code in range(0x80, 0xA0):
    _TABLE[_code] = "\ufffd"
for _ch in _BIDI:
    _TABLE[ord(_ch)] = "\ufffd"

_NEEDS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f" + _BIDI + "]")


def sanitize(text: str) -> str:
    """Return ``text`` with control characters and escape introducers made visible and inert.

    Keeps ``\\n`` and ``\\t``. Fast path: text without anything to replace is returned as is.
    """
    if not _NEEDS.search(text):
        return text
    return text.translate(_TABLE)
