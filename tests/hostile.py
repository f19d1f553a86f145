"""Hostile text for the tests of issue 10: escape sequences, C1 and bidi controls, Rich/Textual markup.

:data:`HOSTILE` fills free-text fields (titles, messages, model names); :func:`raw_controls` finds what must
never reach a terminal as such; :func:`hostile_export` is a valid ``specchat history export`` whose every text
field holds :data:`HOSTILE`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specchat.engine.events import Turn

#: each a way to drive a terminal from text, plus markup that Textual and Rich would parse
PAYLOADS = {
    "osc2-title": "\x1b]2;PWNED\x1b\\",  # set the window title (ST-terminated)
    "osc52-clipboard": "\x1b]52;c;cHduZWQ=\x07",  # write the clipboard (BEL-terminated)
    "csi": "\x1b[2J\x1b[31m",  # clear the screen, red
    "c1-csi": "\x9b31m",  # the one-character CSI
    "c1-osc": "\x9d0;C1TITLE\x9c",  # the one-character OSC ... ST
    "bidi": "\u202eevil\u202c\u2066x\u2069",  # Trojan Source overrides and isolates
    "c0": "\x07\x08\x7f\x00\r",  # BEL, BS, DEL, NUL, CR
    "markup": "[/bold] [/] [link=https://example.com]x[/link] [@click=app.quit]q[/]",
}
HOSTILE = "x [/bold] y " + " ".join(PAYLOADS.values()) + " end"

BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def raw_controls(text: str) -> list[str]:
    """Characters of ``text`` a terminal would act on: C0 controls but newline and tab, DEL, C1 controls, bidi
    overrides and isolates (sorted, as ``U+XXXX``)."""
    bad = {
        c for c in text
        if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F or c in BIDI
    }
    return sorted(f"U+{ord(c):04X}" for c in bad)


def raw_control_bytes(data: bytes) -> list[str]:
    """:func:`raw_controls` of terminal output as bytes, ignoring the ESC sequences the program itself writes:
    only what a payload would add is looked for (its distinctive bodies, C1 controls as UTF-8, bidi)."""
    found = []
    markers = (b"\x1b]2;PWNED", b"\x1b]52;c;", b"\x1b[2J\x1b[31m", b"\xc2\x9b31m", b"\xc2\x9d0;C1", b"C1TITLE\xc2\x9c")
    for marker in markers:
        if marker in data:
            found.append(repr(marker))
    for ch in BIDI:
        if ch.encode() in data:
            found.append(f"U+{ord(ch):04X}")
    return found


def make_turn(**kw: Any) -> Turn:
    values: dict[str, Any] = dict(
        prompt_n=12, prompt_ms=30.0, predicted_n=2, predicted_ms=20.0, predicted_per_second=100.0, draft_n=3,
        draft_n_accepted=1, acceptance=1 / 3, mean_len=1.5, accepted_per_pos=[0.5], draft_ms_per_step=0.1,
        verify_ms_per_step=9.0, overhead_ms=1.0, step_ms=20.0, n_steps=2, n_spec_steps=2, stop_reason="length",
        text=HOSTILE, tokens=[100, 101], kinds=["accepted", "corrected"], k=3, drafter=HOSTILE, speculative=True,
    )
    values.update(kw)
    return Turn(**values)


def hostile_export(**stats: Any) -> dict[str, Any]:
    """A valid export file whose every free-text field (title, model names, system prompt, messages, drafter,
    the run's target) holds :data:`HOSTILE`; ``stats`` overrides fields of the reply's Turn."""
    turn = make_turn(**stats)
    turn_data = dataclasses.asdict(turn)
    for name in ("text", "tokens", "kinds"):
        del turn_data[name]  # the same as the message's
    return {
        "format": "specchat-conversation",
        "version": 1,
        "conversation": {
            "title": HOSTILE, "created": "2024-05-01T12:00:00+00:00", "updated": "2024-05-01T12:01:00+00:00",
            "target": HOSTILE, "draft": HOSTILE, "system_prompt": HOSTILE,
        },
        "messages": [
            {"role": "system", "content": HOSTILE, "created": "2024-05-01T12:00:00+00:00"},
            {"role": "user", "content": HOSTILE, "created": "2024-05-01T12:00:10+00:00"},
            {
                "role": "assistant", "content": HOSTILE, "tokens": list(turn.tokens), "kinds": list(turn.kinds),
                "stopped": True, "created": "2024-05-01T12:01:00+00:00", "stats": turn_data,
                "run": {"target": HOSTILE, "auto_k": True, "sampling": {"temperature": 0.0}},
            },
        ],
    }
