"""``specchat`` (no subcommand): flags -> settings overrides, history store, themes dir, lazy engine import."""

from __future__ import annotations

import sys

import pytest

from specchat.cli import build_parser
from specchat.commands import tui as tui_command


def test_flags_become_nested_overrides_only_when_given():
    args = build_parser().parse_args(["--k", "5", "--temperature", "0.7", "--no-auto-k", "--theme", "specchat-light"])
    assert tui_command.overrides_from_args(args) == {
        "k": 5, "sampling": {"temperature": 0.7}, "auto_k": False, "theme": "specchat-light"
    }
    assert tui_command.overrides_from_args(build_parser().parse_args([])) == {}


def test_run_builds_settings_history_and_a_lazy_factory(tmp_path, monkeypatch):
    from specchat.history import HistoryStore
    from specchat.tui.app import SpecChatApp

    config = tmp_path / "cfg" / "config.toml"
    config.parent.mkdir()
    config.write_text('k = 6\ntheme = "specchat-solarized"\n')
    monkeypatch.delenv("SPECCHAT_CONFIG", raising=False)
    seen: dict = {}

    def fake_run(self, *a, **kw):
        seen["app"] = self

    monkeypatch.setattr(SpecChatApp, "run", fake_run)
    monkeypatch.delitem(sys.modules, "specchat.loading", raising=False)
    args = build_parser().parse_args(["--config", str(config), "--data-dir", str(tmp_path / "data"), "--draft", "none"])
    assert tui_command.run(args) == 0
    app = seen["app"]
    assert app.settings.k == 6 and app.settings.draft == "none" and app.settings.theme == "specchat-solarized"
    assert isinstance(app.history_store, HistoryStore)
    assert app.history_store.path == tmp_path / "data" / "history.sqlite3"
    assert app.user_theme_dir == config.parent
    assert "specchat.loading" not in sys.modules  # the factory has not run: nothing loaded yet


def test_no_history_flag_and_unusable_database_turn_history_off(tmp_path):
    from specchat.config import Settings

    store, note = tui_command.open_history(Settings(data_dir=tmp_path), disabled=True)
    assert store is None and "--no-history" in note
    (tmp_path / "history.sqlite3").write_text("not a database at all" * 100)
    store, note = tui_command.open_history(Settings(data_dir=tmp_path))
    assert store is None and note.startswith("History is off:") and "history.sqlite3" in note


def test_bad_config_value_is_one_user_error(tmp_path, monkeypatch):
    from specchat.errors import UserError

    config = tmp_path / "config.toml"
    config.write_text("k = 999\n")  # above any K_MAX
    args = build_parser().parse_args(["--config", str(config)])
    with pytest.raises(UserError, match="k"):
        tui_command.run(args)
