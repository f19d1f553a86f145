"""``specchat`` with no subcommand: the terminal app.

Builds the settings (defaults < config TOML < ``SPECCHAT_*`` env < these flags), opens the history
database, and hands the app an engine *factory*; the factory imports :mod:`specchat.loading` only
when it runs (on the app's engine thread, after the first frame), so neither this module nor the app
imports llama_cpp at start-up.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specchat.commands.arguments import warn_k_above_cap
from specchat.engine.drafter_kinds import K_MAX, NGRAM, NONE, SUFFIX

if TYPE_CHECKING:  # only annotations: this module is imported to build the parser, before anything loads
    from specchat.config import Settings
    from specchat.history import HistoryStore
    from specchat.tui.engine_host import EngineFactory
    from specchat.tui.state import UiState

# (flag, dest, type, settings key, help)
_FLAGS: tuple[tuple[str, str, Any, str, str], ...] = (
    ("--server", "tui_server", str, "server_url",
     "a llama-server's URL (http://host:port): it generates the replies with its own models and speculation"),
    ("--server-b", "tui_server_b", str, "server_b_url",
     "a second llama-server (server B) for the race against --server (server A), e.g. the same model without speculation"),
    ("--target", "tui_target", str, "target", "target model: a .gguf path, a preset or derived name, or 'bundled'"),
    ("--draft", "tui_draft", str, "draft", f"drafter: a draft .gguf path, a preset or derived name, '{NGRAM}', '{SUFFIX}', a chain like "
     f"'{SUFFIX},DRAFT.gguf' or '{NONE}'"),
    ("--k", "tui_k", int, "k", f"draft length K, 0..{K_MAX}"),
    ("--temperature", "tui_temperature", float, "sampling.temperature", "sampling temperature (0 = greedy)"),
    ("--top-k", "tui_top_k", int, "sampling.top_k", "top-k filter (0 = off)"),
    ("--top-p", "tui_top_p", float, "sampling.top_p", "top-p filter (1 = off)"),
    ("--seed", "tui_seed", int, "sampling.seed", "sampling seed"),
    ("--threads", "tui_threads", int, "threads", "CPU threads for llama.cpp"),
    ("--n-ctx", "tui_n_ctx", int, "n_ctx", "context length in tokens"),
    ("--n-predict", "tui_n_predict", int, "n_predict", "maximum tokens per reply"),
    ("--system", "tui_system", str, "system_prompt", "system prompt of new conversations"),
    ("--theme", "tui_theme", str, "theme", "theme name: a built-in one or a <config dir>/themes/*.toml"),
)
#: the app's flags that set the local models or speculation (refused with a llama-server), with their dests
LOCAL_ONLY_FLAGS = (("--target", "tui_target"), ("--draft", "tui_draft"), ("--k", "tui_k"),
                    ("--auto-k/--no-auto-k", "tui_auto_k"), ("--threads", "tui_threads"), ("--n-ctx", "tui_n_ctx"))
#: the app's on/off flags: (flag, dest, the value when not given)
_SWITCHES = (("--auto-k/--no-auto-k", "tui_auto_k", None), ("--no-history", "tui_no_history", False))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("chat app options (when no command is given)")
    for flag, dest, typ, _key, help_text in _FLAGS:
        group.add_argument(flag, dest=dest, type=typ, default=None, help=help_text)
    group.add_argument(
        "--auto-k",
        dest="tui_auto_k",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="let the cost model choose K (default on in the app)",
    )
    group.add_argument("--no-history", dest="tui_no_history", action="store_true", help="do not save conversations")


def app_flags_given(args: argparse.Namespace) -> list[str]:
    """The app-only flags (this module's) given on the command line, e.g. ``["--target"]``.

    They are parsed before any command name, so ``specchat --target X history list`` parses; the caller
    rejects them with a command, where they would do nothing. (``--config`` and ``--data-dir`` are
    ``specchat``'s own options and apply to every command.)
    """
    given = [flag for flag, dest, *_ in _FLAGS if getattr(args, dest, None) is not None]
    given += [flag for flag, dest, unset in _SWITCHES if getattr(args, dest, unset) is not unset]
    return given


def app_argv(args: argparse.Namespace) -> list[str]:
    """The chat app's flags given in ``args``, as a command line again (``specchat serve`` passes them on)."""
    argv: list[str] = []
    for flag, dest, *_ in _FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            argv += [flag, str(value)]
    auto_k = getattr(args, "tui_auto_k", None)
    if auto_k is not None:
        argv.append("--auto-k" if auto_k else "--no-auto-k")
    if getattr(args, "tui_no_history", False):
        argv.append("--no-history")
    return argv


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Only the flags the user gave, nested like the settings (they beat the file and the environment)."""
    out: dict[str, Any] = {}
    pairs = [(dest, key) for _flag, dest, _typ, key, _help in _FLAGS]
    pairs += [("tui_auto_k", "auto_k"), ("data_dir", "data_dir")]  # --data-dir is specchat's own (every command)
    for dest, key in pairs:
        value = getattr(args, dest, None)
        if value is None:
            continue
        node = out
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return out


def make_factory(settings: Settings) -> EngineFactory:
    """An engine factory for the app: loads the models when called (on the app's engine thread)."""

    def factory(progress: Callable[[float, str], None]) -> Any:
        from specchat.loading import (
            load_engine,  # lazy: llama_cpp is imported here, not at start-up
        )

        return load_engine(settings, progress)

    return factory


def open_history(settings: Settings, disabled: bool = False) -> tuple[HistoryStore | None, str | None]:
    """The history store, or ``(None, why history is off)``."""
    if disabled:
        return None, "History is off (--no-history): this chat will not be saved."
    from specchat.history import HistoryStore

    try:
        return HistoryStore(settings.history_path()), None
    except Exception as exc:  # HistoryError carries what to do; anything else is reported the same way
        return None, f"History is off: {exc}"


def user_theme_dir(config_path: str | None) -> Path:
    """The directory of the config file in effect (the user config dir by default); themes live in its themes/."""
    from specchat.config import locate_config

    return locate_config(config_path).path.parent


def remembered_state(config_path: str | None, theme_flag: str | None) -> tuple[UiState, Path, str | None]:
    """The app's remembered theme and sidebar (:mod:`specchat.tui.state`), its file, and a problem to report.

    A ``--theme`` flag beats the remembered theme for this run (what is remembered is not changed by it).
    """
    from specchat.config import state_path
    from specchat.tui.state import load_state

    path = state_path(config_path)  # locate_config's, which load_settings has already run without error
    state, problem = load_state(path)
    if theme_flag:
        state.theme = None
    return state, path, problem


#: how long a lone Esc byte waits for the rest of an escape sequence before it counts as the Esc key, in ms.
#: Esc is the stop key, and every arrow, F-key and Alt+key begins with the same byte. Terminals send a key's
#: whole sequence in one write, but ssh, tmux over a slow link or a loaded machine deliver it in two: ESC,
#: then ``[A`` 15-50 ms later. At 10 ms (this value until issue 22) such an Up stopped a streaming reply:
#: measured through a pty on the bundled model, Up, Down and Right each split by 30 ms saved the reply as
#: stopped. So Esc waits longer than a split sequence takes: 80 ms, above the 15-50 ms splits tested
#: (tests/terminal/test_split_keys.py) with room for a loaded machine's scheduling. The price is Esc's own
#: stop: the wait is pure delay, and Esc-to-stopped was 46-56 ms over one round at 10 ms, so at 80 ms it is
#: over the "one round + 100 ms" goal. No single delay gives both a safe Esc and that budget, so the budget is
#: kept by a second stop key that no escape sequence begins with: **ctrl+c** (the byte 0x03) stops at once
#: (it needs no wait), while a reply streams only (elsewhere it still copies: keys.py, ``stop_now``). tmux's
#: ``escape-time`` is a delay of the same kind (500 ms by default before 3.5, 10 ms after). A user's
#: ``ESCDELAY`` (the ncurses variable Textual reads) wins.
ESCAPE_DELAY_MS = 80


def set_escape_delay(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set ``ESCDELAY`` to :data:`ESCAPE_DELAY_MS` unless the user set it (before Textual is imported)."""
    environ.setdefault("ESCDELAY", str(ESCAPE_DELAY_MS))


def derive_demo_models(models_dir: Path, *, threads: int = 1, progress: Callable[[str], None] | None = None) -> Any:
    """The tour's deriver of the demo files (:func:`specchat.models.derive.derive_demo`), imported when it runs
    (on the app's engine thread), like the engine factory's loader."""
    from specchat.models.derive import derive_demo  # numpy: on the engine thread when the tour runs

    return derive_demo(models_dir, threads=threads, progress=progress)


def pick_helps_pair(settings: Any, progress: Callable[[str], None]) -> Any:
    """The tour's choice of this machine's helps pair (:func:`specchat.demo.choose_helps_pair`): a saved tune
    result of the bundled model, else the candidates' verify costs timed with the engine's calibration
    (:func:`specchat.loading.measure_verify_cost`, cached per file). Imported when it runs, on the engine thread."""
    from specchat.models.tune_results import load_results
    from specchat.demo import choose_helps_pair
    from specchat.loading import measure_verify_cost  # llama_cpp: on the engine thread when the tour runs
    from specchat.models.bundled import BUNDLED_FILE

    data_dir = settings.effective_data_dir()

    def measure(pair: Any) -> Any:
        return measure_verify_cost(settings.model_copy(update={**pair.settings_update(), "draft": "none"}))

    return choose_helps_pair(data_dir, load_results(data_dir), BUNDLED_FILE, measure, progress)


def run(
    args: argparse.Namespace,
    *,
    tour_at_start: bool = False,
    tour_scenes: tuple[Any, ...] | None = None,
    tour_n_predict: int | None = None,
    extra: dict[str, Any] | None = None,
) -> int:
    """The app; ``specchat demo`` opens it on the tour (``tour_at_start``, its scenes and reply length) with
    ``extra`` settings on top of the flags."""
    set_escape_delay()
    from specchat.config import load_settings, refuse_local_flags, server_pair
    from specchat.demo import SCENES
    from specchat.tui.app import SpecChatApp
    from specchat.tui.screens.tour import TourOptions

    config_path = getattr(args, "config", None)
    settings = load_settings(config_path, {**overrides_from_args(args), **(extra or {})})
    server_pair(settings)  # server B (kept in settings for the race screen) needs server A
    if settings.server_url:
        refuse_local_flags(args, settings.server_url, LOCAL_ONLY_FLAGS)
    warn_k_above_cap(settings)  # on stderr before the app takes the screen (the sidebar says it too)
    store, note = open_history(settings, disabled=bool(getattr(args, "tui_no_history", False)))
    ui_state, state_file, state_note = remembered_state(config_path, theme_flag=getattr(args, "tui_theme", None))
    app = SpecChatApp(
        make_factory(settings),
        settings,
        store,
        make_factory=make_factory,
        user_theme_dir=user_theme_dir(config_path),
        history_note=note,
        ui_state=ui_state,
        state_path=state_file,
        state_note=state_note,
        stop_signals=True,  # SIGINT/SIGTERM/SIGHUP quit like ctrl+q: the partial reply is saved
        tour=TourOptions(
            derive=derive_demo_models, n_predict=tour_n_predict, open_at_start=tour_at_start,
            scenes=tour_scenes or SCENES, pick=pick_helps_pair,
        ),
    )
    try:
        app.run()
    finally:
        if store is not None:
            store.close()
    return int(app.return_code or 0)
