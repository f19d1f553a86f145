"""Fixtures for the TUI tests (helpers live in tuikit.py, the fake engine in fake_engine.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from fake_engine import FakeClock, FakeEngine  # noqa: E402 (after the sys.path entry above)
from tuikit import fake_settings  # noqa: E402

from specchat.tui.app import SpecChatApp  # noqa: E402


@pytest.fixture(autouse=True)
def _ui_priority_untouched(monkeypatch):
    """An app in the test process keeps the process's priority: with ``threads`` = the core count (the default
    settings) the app lowers its UI thread to nice 19 (:func:`specchat.tui.priority.yield_cpu_to_engine`), and the UI thread
    of an in-process app is pytest's main thread, which cannot be raised again: every test after the first app
    ran at nice 19 (the state fuzz took 25+ minutes on a shared core). The renice itself is tested in a
    process of its own (test_app.py)."""
    import specchat.tui.app as app_module

    monkeypatch.setattr(app_module, "yield_cpu_to_engine", lambda threads, start_engine_thread: start_engine_thread())


@pytest.fixture
def make_app(tmp_path: Path):
    """``make_app(engine=None, **app_kwargs) -> (app, engine)`` with an injected clock and a tmp export dir."""

    def make(engine: FakeEngine | None = None, settings: Any = None, **kw: Any) -> tuple[SpecChatApp, FakeEngine]:
        engine = engine or FakeEngine()
        kw.setdefault("clock", FakeClock())
        kw.setdefault("export_dir", tmp_path)
        app = SpecChatApp(lambda progress: engine, settings or fake_settings(), **kw)
        return app, engine

    return make


@pytest.fixture
def history_store(tmp_path: Path):
    """A real :class:`~specchat.history.HistoryStore` in ``tmp_path`` (closed after the test)."""
    from specchat.history import HistoryStore

    store = HistoryStore(tmp_path / "history.sqlite3")
    yield store
    store.close()
