"""Thread-safe controls of a running generation, applied at the next step boundary.

The UI thread calls the setters at any time; the engine's worker thread calls :meth:`Controls.snapshot`
once per draft/verify round, so a change made mid-reply takes effect on the next round of that same
reply (like llama.cpp's per-round ``dp.n_max`` in ``common/speculative.cpp``, but live).

An engine whose speculation is configured elsewhere (a llama-server: K, the drafter and speculation on/off
are its command-line settings, see :mod:`specchat.engine.remote`) builds its controls with ``fixed`` set to
the reason: the speculation setters then raise :class:`FixedControlError` with that sentence, and the state
reports the server's settings (:meth:`Controls.report_fixed`). Sampling and stop still apply.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from specchat.engine.drafter_kinds import K_MAX


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Warping shared by target (p) and draft (q): temperature, then top-k, then top-p.

    ``temperature == 0`` means greedy (argmax); ``top_k <= 0`` and ``top_p >= 1`` disable those filters.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (0.0 <= self.temperature <= 5.0):
            raise ValueError(f"temperature must be in 0..5, got {self.temperature}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top-k must be >= 0, got {self.top_k}")


@dataclass(frozen=True, slots=True)
class ControlState:
    k: int = 3
    speculative: bool = True
    auto_k: bool = False
    drafter: str | None = None  # name of the drafter to use; None = keep the current one
    sampling: SamplingParams = SamplingParams()


class FixedControlError(ValueError):
    """A speculation setting was changed on an engine whose speculation is configured elsewhere."""


def validate_k(k: int) -> int:
    """``k`` if it is a draft length the engine accepts (0..K_MAX), else ValueError."""
    if not isinstance(k, int) or isinstance(k, bool) or not (0 <= k <= K_MAX):
        raise ValueError(f"K must be an integer in 0..{K_MAX}, got {k!r}")
    return k


class Controls:
    """Shared between the UI thread and the engine thread. All methods are thread-safe."""

    def __init__(self, state: ControlState | None = None, *, fixed: str = "") -> None:
        self._lock = threading.Lock()
        self._state = state or ControlState()
        #: why K, speculation, auto-K and the drafter cannot be set here ("" = they can)
        self.fixed = fixed
        if not fixed:  # a server's own K is a fact to show, not a value to check against this engine's K_MAX
            validate_k(self._state.k)
        self._stop = threading.Event()
        self._turn_begun = False  # begin_turn was called and the engine's clear_stop has not run since

    # -- setters (any thread) ---------------------------------------------------------------
    def _check_settable(self) -> None:
        if self.fixed:
            raise FixedControlError(self.fixed)

    def set_k(self, k: int) -> None:
        self._check_settable()
        validate_k(k)
        with self._lock:
            self._state = replace(self._state, k=k)

    def set_speculative(self, on: bool) -> None:
        self._check_settable()
        with self._lock:
            self._state = replace(self._state, speculative=bool(on))

    def set_auto_k(self, on: bool) -> None:
        self._check_settable()
        with self._lock:
            self._state = replace(self._state, auto_k=bool(on))

    def set_drafter(self, name: str) -> None:
        self._check_settable()
        with self._lock:
            self._state = replace(self._state, drafter=name)

    def set_sampling(self, sampling: SamplingParams) -> None:
        with self._lock:
            self._state = replace(self._state, sampling=sampling)

    def request_stop(self) -> None:
        """Ask the running turn to end; it does so within one step and keeps the KV consistent."""
        self._stop.set()

    def begin_turn(self) -> None:
        """The caller is about to hand a turn to the engine's thread: clear any old stop request now, and have
        the engine's own :meth:`clear_stop` at the start of that turn keep what comes after this. A stop asked
        for between the two (Esc pressed right after Enter, before the engine thread has started the reply) is
        then this turn's, not wiped by the engine starting it: the app's stop was lost that way."""
        with self._lock:
            self._stop.clear()
            self._turn_begun = True

    # -- engine side --------------------------------------------------------------------------
    def report_fixed(self, *, k: int | None = None, speculative: bool | None = None) -> None:
        """Record the settings of the engine that fixes them (a llama-server's K, whether it speculates)."""
        with self._lock:
            changes = {name: v for name, v in (("k", k), ("speculative", speculative)) if v is not None}
            self._state = replace(self._state, **changes)

    def snapshot(self) -> ControlState:
        with self._lock:
            return self._state

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def clear_stop(self) -> None:
        """At the start of a turn (the engine): forget an earlier turn's stop request; after :meth:`begin_turn`,
        the stop was cleared there, and a request since is kept (once)."""
        with self._lock:
            if self._turn_begun:
                self._turn_begun = False
                return
            self._stop.clear()
