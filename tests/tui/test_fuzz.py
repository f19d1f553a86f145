"""The state fuzz (see :mod:`fuzzkit`): random sequences of user actions with invariants after every one.

In CI: :data:`SEQUENCES` sequences of :data:`LENGTH` actions on the fake engine, every key answered within
:data:`KEY_BUDGET_S` (see :mod:`fuzzkit`), and :data:`REAL_SEQUENCES` on the bundled model (``--threads 1``).
``SPECCHAT_FUZZ_SEQUENCES=1000`` runs a thousand; ``SPECCHAT_FUZZ_SEED`` moves the seeds (sequence i uses
seed SEED + i; a failure prints its seed and actions); ``SPECCHAT_FUZZ_LENGTH`` sets the actions per
sequence; ``SPECCHAT_FUZZ_REAL_SEQUENCES`` the real-model count; ``SPECCHAT_FUZZ_KEY_BUDGET`` the budget (s);
``SPECCHAT_FUZZ_PROGRESS=1`` prints a line after every sequence (with ``-s``: a long run's progress).
"""

from __future__ import annotations

import os

import pytest
from fake_engine import FakeClock, FakeEngine
from fuzzkit import FUZZ_REPLIES, FuzzApp, HeldEngine, record_llama_threads, run_sequences
from tuikit import fake_settings

from specchat.engine.events import Turn
from specchat.engine.protocol import Message

SEED = int(os.environ.get("SPECCHAT_FUZZ_SEED", "0"))
SEQUENCES = int(os.environ.get("SPECCHAT_FUZZ_SEQUENCES", "200"))
LENGTH = int(os.environ.get("SPECCHAT_FUZZ_LENGTH", "20"))
#: a key is answered within this on the fake engine (the probe key, pressed during and after every action)
KEY_BUDGET_S = float(os.environ.get("SPECCHAT_FUZZ_KEY_BUDGET", "0.5"))
REAL_SEQUENCES = int(os.environ.get("SPECCHAT_FUZZ_REAL_SEQUENCES", "5"))


async def test_state_fuzz_on_the_fake_engine(tmp_path):
    def make(store, directory):
        engine = HeldEngine(FakeEngine(FUZZ_REPLIES))
        app = FuzzApp(lambda progress: engine, fake_settings(), store, clock=FakeClock(), export_dir=directory / "exports")
        return app, engine

    saved = next(e for e in FakeEngine(FUZZ_REPLIES).send("x") if isinstance(e, Turn))  # ids of the same vocabulary
    reply = Message("assistant", saved.text, saved.tokens, saved.kinds, saved)
    report: dict = {"progress": bool(os.environ.get("SPECCHAT_FUZZ_PROGRESS"))}
    actions = await run_sequences(
        make, [SEED + i for i in range(SEQUENCES)], LENGTH, tmp_path, saved_reply=reply, key_budget=KEY_BUDGET_S,
        report=report,
    )
    assert report["sequences"] == SEQUENCES and actions == SEQUENCES * LENGTH
    print(
        f"fuzz: {SEQUENCES} sequences of {LENGTH} actions ({actions}), seeds {SEED}..{SEED + SEQUENCES - 1}: all "
        f"invariants held; slowest key answer {report['slowest_key'] * 1000:.0f} ms (budget {KEY_BUDGET_S * 1000:.0f} ms), "
        f"longest collector pass {report['longest_collection'] * 1000:.0f} ms (not counted)"
    )


@pytest.mark.slow
async def test_state_fuzz_on_the_bundled_model(tmp_path, bundled_model, monkeypatch):
    from specchat.commands.tui import make_factory
    from specchat.config import Settings

    threads = record_llama_threads(monkeypatch)

    def make(store, directory):
        settings = Settings(
            target=str(bundled_model), draft="ngram", k=3, auto_k=False, n_predict=24, n_ctx=1024, threads=1,
            data_dir=directory, theme="specchat-dark",
        )
        real = make_factory(settings)
        box: dict = {}

        def factory(progress):
            box["engine"] = HeldEngine(real(progress))
            return box["engine"]

        app = FuzzApp(factory, settings, store, export_dir=directory / "exports")
        return app, _Lazy(box)

    seeds = [SEED + 10_000 + i for i in range(REAL_SEQUENCES)]
    actions = await run_sequences(make, seeds, LENGTH, tmp_path, per_session=REAL_SEQUENCES, llama_threads=threads)
    assert threads  # the wrappers saw llama.cpp at work (so the thread check checked something)
    print(f"fuzz (bundled model): {REAL_SEQUENCES} sequences, {actions} actions: all invariants held")


class _Lazy:
    """The HeldEngine the factory creates once the app loads it (the fuzz starts after the load)."""

    def __init__(self, box: dict) -> None:
        self._box = box

    def __getattr__(self, name):
        return getattr(self._box["engine"], name)
