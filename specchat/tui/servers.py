"""Two llama-servers in one chat (``specchat --server A --server-b B``): which one answers, and the other kept
connected (plain: no Textual).

The ``switch_server`` key (alt+s) hands the conversation to the other server: the next messages are answered
by it, the conversation so far carried over (each server re-tokenises the other's replies as text, like a
model switch), and the sidebar's A/B table shows each server's replies as a pair of its own ("model @ host",
the pair the engine stamps on its replies) with server B's speed against A's (:func:`specchat.engine.telemetry.ab.versus`).
Switching is by key rather than alternating by itself: a demo of "this server speculates, that one does not"
wants several replies on one side, then the other, and a reply always says which server wrote it (its title).

The session not in use stays open (connecting again would cost a round of ``/props``, ``/slots`` and
``/metrics``), so switching back is immediate; it is closed when the app quits (:meth:`EngineHost.own`). The
app's settings follow the switch (``server_url`` is always the server answering, ``server_b_url`` the other),
so the race (alt+r) races the server answering against the other one. If the other server cannot be reached,
the one in use goes on answering and the notice says why.
"""

from __future__ import annotations

from typing import Any

from specchat.config import Settings
from specchat.engine.protocol import ChatEngine
from specchat.tui.outcomes import Refusal

NOT_TWO = Refusal(
    "Switching servers needs two llama-servers: start specchat with --server URL --server-b URL.", "warning", 8
)


class ServerSwitch:
    """Which of server A (``--server``) and server B (``--server-b``) answers; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.a_url = settings.server_url
        self.b_url = settings.server_b_url
        #: the other server's session, connected and not in use (None until the first switch)
        self.idle: ChatEngine | None = None
        #: the engine a switch left, while the other server is being connected (given back if that fails)
        self._leaving: ChatEngine | None = None
        #: each side's pair name, once it has answered (``model @ host``: the A/B table's target)
        self.targets: dict[str, str] = {}

    @property
    def available(self) -> bool:
        return bool(self.a_url and self.b_url)

    def side_of(self, url: str | None) -> str:
        return "B" if self.available and url == self.b_url else "A"

    def refusal(self, engine: Any, generating: bool, loading: bool) -> Refusal | None:
        """Why the key cannot switch now, or None."""
        if not self.available:
            return NOT_TWO
        if generating or loading or self._leaving is not None:
            return Refusal("Wait for the reply or the connection to finish, then switch servers.", "warning", None)
        if engine is None:
            return Refusal("No server is connected yet; try again in a moment.", "warning", None)
        return None

    @staticmethod
    def swapped(settings: Settings) -> Settings:
        """The settings with the server answering and the other exchanged."""
        return settings.model_copy(update={"server_url": settings.server_b_url, "server_b_url": settings.server_url})

    def begin(self, leaving: ChatEngine) -> ChatEngine | None:
        """``leaving`` stops answering: the other server's session if it is connected already (take it now), else
        None (connect it: :meth:`connected` or :meth:`failed` follows)."""
        ready, self.idle = self.idle, leaving
        if ready is None:
            self._leaving = leaving
        return ready

    def connected(self, side: str, target: str) -> None:
        """A session answers now (``target``: its pair name)."""
        self._leaving = None
        self.targets[side] = target

    def failed(self) -> ChatEngine | None:
        """Connecting the other server failed: the session that was answering, to answer again (None if no switch
        was under way: the failure is the app's first connection)."""
        back, self._leaving = self._leaving, None
        if back is not None:
            self.idle = None
        return back

    def versus(self) -> tuple[str, str] | None:
        """(A's pair name, B's) once both servers have answered, for the A/B table."""
        if "A" in self.targets and "B" in self.targets:
            return self.targets["A"], self.targets["B"]
        return None


__all__ = ["NOT_TWO", "ServerSwitch"]
