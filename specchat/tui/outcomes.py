"""What a plain action of the chat returns: a change to show, or a refusal that says why nothing changed.

The speculation keys (:mod:`specchat.tui.speculation`), the reply versions (:mod:`specchat.tui.versions`) and
the race (:func:`specchat.tui.screens.race.race_for`) decide without Textual and hand one of these to the
chat screen, which is the only one that notifies: the rules stay testable without a running app, and every
refusal is a toast of the same form.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Change:
    """Something changed; ``note`` says what (``"K = 4; auto-K off"``)."""

    note: str


@dataclass(frozen=True)
class Refusal:
    """Nothing changed; ``message`` says why, as a toast of ``severity`` shown ``timeout`` seconds (None: default)."""

    message: str
    severity: str = "information"
    timeout: float | None = None


Outcome = Change | Refusal
