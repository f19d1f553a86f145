"""The speculation keys and palette entries as plain functions of a :class:`~specchat.engine.protocol.ChatEngine`.

K up/down, set K, speculation on/off, auto-K, the drafter, the temperature and "use fixed K" each read the
engine's controls once (one :meth:`~specchat.engine.controls.Controls.snapshot` per key, so a key's decision
and its note describe the same state), write the change, and return what happened: a :class:`Change` (the
note the chat screen shows, and the controls it redraws) or a :class:`Refusal` (why nothing changed, as a
toast). They never notify or draw: :class:`specchat.tui.screens.chat.ChatScreen` does that with the result,
so the rules are testable without a running app and the screen does not reach into them.

An engine whose speculation is configured elsewhere (a llama-server: :attr:`Controls.fixed`) refuses every
speculation change with its own sentence; the temperature is not a speculation setting and still applies.
The changes take effect at the engine's next round boundary (:mod:`specchat.engine.controls`).
"""

from __future__ import annotations

from dataclasses import replace

from specchat.engine.controls import ControlState
from specchat.engine.drafter_kinds import K_MAX, NONE
from specchat.engine.protocol import ChatEngine
from specchat.tui.outcomes import Change, Outcome, Refusal


#: the K "use fixed K" sets when K is 0: the K of the tour's model-drafter scenes (specchat.demo.SCENES)
FIXED_K = 4


def _fixed(engine: ChatEngine) -> Refusal | None:
    """A llama-server sets its speculation with its own flags: every speculation key refuses, saying so."""
    fixed = engine.controls.fixed
    return Refusal(fixed, "warning", 6) if fixed else None


def _write_k(engine: ChatEngine, state: ControlState, k: int) -> Change:
    """Set K (clamped to 0..K_MAX); a K chosen by hand turns auto-K off."""
    k = max(0, min(K_MAX, int(k)))
    engine.controls.set_k(k)
    note = f"K = {k}"
    if state.auto_k:
        engine.controls.set_auto_k(False)
        note += "; auto-K off"
    return Change(note)


def set_k(engine: ChatEngine, k: int) -> Outcome:
    return _fixed(engine) or _write_k(engine, engine.controls.snapshot(), k)


def k_up(engine: ChatEngine) -> Outcome:
    if refused := _fixed(engine):
        return refused
    state = engine.controls.snapshot()
    if state.k >= K_MAX:
        return Refusal(f"K is at its maximum ({K_MAX}).", timeout=2)
    return _write_k(engine, state, state.k + 1)


def k_down(engine: ChatEngine) -> Outcome:
    if refused := _fixed(engine):
        return refused
    state = engine.controls.snapshot()
    if state.k <= 0:
        return Refusal("K is 0 already (no drafting).", timeout=2)
    return _write_k(engine, state, state.k - 1)


def toggle_speculation(engine: ChatEngine) -> Outcome:
    if refused := _fixed(engine):
        return refused
    state = engine.controls.snapshot()
    info = engine.info()
    if not state.speculative and not info.can_speculate:
        return Refusal(info.note or "This model cannot speculate.", "warning")
    engine.controls.set_speculative(not state.speculative)
    return Change(f"speculation {'off' if state.speculative else 'on'}")


def toggle_auto_k(engine: ChatEngine) -> Outcome:
    if refused := _fixed(engine):
        return refused
    state = engine.controls.snapshot()
    engine.controls.set_auto_k(not state.auto_k)
    return Change(f"auto-K {'off' if state.auto_k else 'on'}")


def set_drafter(engine: ChatEngine, name: str) -> Outcome:
    """Draft with ``name`` from the next round; choosing a drafter turns speculation on if the model can."""
    if refused := _fixed(engine):
        return refused
    state = engine.controls.snapshot()
    engine.controls.set_drafter(name)
    if name != NONE and not state.speculative and engine.info().can_speculate:
        engine.controls.set_speculative(True)
    return Change(f"drafter: {name}")


def set_temperature(engine: ChatEngine, temperature: float) -> Outcome:
    """Sampling, not speculation: a llama-server's engine takes it too. An out-of-range value is refused."""
    state = engine.controls.snapshot()
    try:
        engine.controls.set_sampling(replace(state.sampling, temperature=float(temperature)))
    except ValueError as exc:
        return Refusal(str(exc), "error")
    return Change(f"temperature = {temperature:g}")


def fixed_k(state: ControlState | None) -> int:
    """The K "use fixed K" sets: the K set, or :data:`FIXED_K` if it is 0 (or no engine is loaded)."""
    return state.k if state is not None and state.k > 0 else FIXED_K


def use_fixed_k(engine: ChatEngine) -> Outcome:
    """Auto-K off, K fixed (:func:`fixed_k`), speculation on if the model can: the drafter drafts every round,
    so its colours show (offered when auto-K judged drafting unprofitable and turned it off)."""
    if refused := _fixed(engine):
        return refused
    state = engine.controls.snapshot()
    k = fixed_k(state)
    engine.controls.set_auto_k(False)
    engine.controls.set_k(k)
    if not state.speculative and engine.info().can_speculate:
        engine.controls.set_speculative(True)
    return Change(f"K = {k} fixed, auto-K off")
