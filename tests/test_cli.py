"""The ``specchat`` entry point: each command's module is imported only when that command runs, every
command still has its full ``--help``, and a bad command line is one line on stderr with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specchat.cli import COMMANDS, main

REPO = Path(__file__).resolve().parents[1]

# Runs main(argv) in a fresh interpreter, then prints the exit code and the watched modules it imported.
_PROBE = """
import json, sys
from specchat.cli import main
try:
    code = main(json.loads(sys.argv[1]))
except SystemExit as exc:
    code = exc.code
watched = sorted(m for m in sys.modules
                 if m.split(".")[0] in ("llama_cpp", "textual") or m.startswith("specchat.commands."))
print(json.dumps({"code": code, "modules": watched}), file=sys.stderr)
"""


def probe(argv: list[str]) -> tuple[int, str, list[str]]:
    """Run ``specchat ARGV`` in a fresh interpreter (environment inherited): exit code, stdout, modules."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    *_, last = proc.stderr.strip().splitlines()
    report = json.loads(last)
    return report["code"], proc.stdout, report["modules"]


def test_history_list_imports_neither_llama_cpp_nor_textual_nor_other_commands(isolated_config):
    code, out, modules = probe(["history", "list"])
    assert code == 0
    assert out.startswith("no saved conversations yet")  # the isolated data dir has no database
    assert "specchat.commands.history" in modules
    assert not [m for m in modules if m.split(".")[0] in ("llama_cpp", "textual")], modules
    others = {f"specchat.commands.{name}" for name in COMMANDS} - {"specchat.commands.history"}
    assert not others & set(modules), modules


def test_top_level_help_lists_every_command_without_importing_any(isolated_config):
    code, out, modules = probe(["--help"])
    assert code == 0
    for name, help_text in COMMANDS.items():
        assert name in out and help_text.split()[0] in out
    # the chat app's own flags, a light module, and the argument helpers it uses (the K-cap note)
    assert modules == ["specchat.commands.arguments", "specchat.commands.tui"], modules


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_help_shows_its_own_arguments(name, capsys):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert out.startswith(f"usage: specchat {name} ")
    assert "-h, --help" in out and len(out.splitlines()) > 5  # more than the bare placeholder's usage


def test_history_help_has_its_options_and_actions(capsys):
    with pytest.raises(SystemExit):
        main(["history", "--help"])
    out = capsys.readouterr().out
    assert "--db PATH" in out and "Saved conversations" in out
    for action in ("list", "show", "export", "import", "delete"):
        assert f"    {action}" in out


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["bogus"], "specchat: error: argument COMMAND: invalid choice: 'bogus'"),
        (["--k", "many"], "specchat: error: argument --k: invalid int value: 'many'"),
        (["history"], "specchat history: error: the following arguments are required: ACTION"),
        (["history", "show"], "specchat history show: error: the following arguments are required: ID"),
    ],
)
def test_bad_command_line_is_one_line_and_exit_code_2(argv, what, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(what)
    assert err.rstrip().endswith("--help'")


def test_bad_command_through_python_m_exits_2_with_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "specchat.cli", "bogus"], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "invalid choice: 'bogus'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "command",
    [["config", "show"], ["config", "path"], ["models", "list"], ["models", "derive"], ["models", "pull", "x"]],
)
def test_config_path_is_accepted_before_and_after_the_command(command):
    from specchat.cli import build_parser

    def config_of(argv: list[str]) -> str | None:
        return build_parser().parse_args(argv).config

    assert config_of([*command]) is None
    assert config_of(["--config", "a.toml", *command]) == "a.toml"
    assert config_of([*command, "--config", "b.toml"]) == "b.toml"
    assert config_of(["--config", "a.toml", *command, "--config", "b.toml"]) == "b.toml"


@pytest.mark.parametrize("action", [["list"], ["derive"], ["pull", "x"]])
def test_models_actions_take_a_data_dir_and_config_actions_do_not(action, capsys):
    from specchat.cli import build_parser

    args = build_parser().parse_args(["models", *action, "--data-dir", "/d"])
    assert args.data_dir == "/d"
    assert build_parser().parse_args(["models", *action]).data_dir is None
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["config", "show", "--data-dir", "/d"])
    assert exc.value.code == 2 and "unrecognized arguments: --data-dir /d" in capsys.readouterr().err


# -- specchat --data-dir DIR COMMAND: the data dir before the command applies to every command ----------------


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``specchat ARGV`` in-process: exit code (argparse's SystemExit included), stdout, stderr."""
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_data_dir_before_the_command_applies_to_models_list(isolated_config, capsys):
    data = isolated_config / "elsewhere"
    code, out, _ = run(capsys, "--data-dir", str(data), "models", "list")
    assert code == 0 and out.startswith(f"Models (data dir: {data})")
    code, out, _ = run(capsys, "--data-dir", str(data), "models", "list", "--json")
    assert code == 0 and json.loads(out)["data_dir"] == str(data)
    later = isolated_config / "after"  # given after the action too: that one wins
    code, out, _ = run(capsys, "--data-dir", str(data), "models", "list", "--data-dir", str(later))
    assert code == 0 and out.startswith(f"Models (data dir: {later})")


def test_data_dir_before_the_command_applies_to_history_and_config_show(isolated_config, capsys):
    from specchat.engine.protocol import Message
    from specchat.history import HistoryStore

    data = isolated_config / "elsewhere"
    code, out, _ = run(capsys, "--data-dir", str(data), "history", "list")
    assert code == 0 and out.strip() == f"no saved conversations yet (no history database at {data / 'history.sqlite3'})"
    with HistoryStore(data / "history.sqlite3") as store:
        conv = store.create_conversation()
        store.append_message(conv, Message("user", "kept in the other data dir"))
    code, out, _ = run(capsys, "--data-dir", str(data), "history", "list")
    assert code == 0 and "kept in the other data dir" in out
    code, out, _ = run(capsys, "--data-dir", str(data), "history", "show", str(conv))
    assert code == 0 and "kept in the other data dir" in out
    code, out, _ = run(capsys, "--data-dir", str(data), "config", "show")
    line = next(line for line in out.splitlines() if line.startswith("data_dir"))
    assert code == 0 and line.split("#")[0].strip() == f"data_dir = {json.dumps(str(data))}" and line.endswith("# cli")


def test_data_dir_before_the_command_applies_to_generate(isolated_config, tiny_target, capsys):
    data = isolated_config / "elsewhere"
    (data / "models").mkdir(parents=True)
    (data / "models" / "my-tiny.gguf").symlink_to(tiny_target)  # a derived-style name, found only in that data dir
    argv = ("generate", "--prompt", "hello", "--target", "my-tiny", "--draft", "none", "--n-predict", "4", "--json")
    code, _, err = run(capsys, *argv)
    assert code == 2 and "my-tiny" in err  # not in the default data dir
    code, out, err = run(capsys, "--data-dir", str(data), *argv)
    assert code == 0, err
    assert json.loads(out)["predicted_n"] == 4


def test_data_dir_before_bench_is_where_model_names_resolve(isolated_config, tiny_target, capsys):
    data = isolated_config / "elsewhere"
    (data / "models").mkdir(parents=True)
    (data / "models" / "my-tiny.gguf").symlink_to(tiny_target)  # found only in that data dir
    argv = ("bench", "--target", "my-tiny", "--k", "0", "--runs", "1", "--n-predict", "4", "--no-arithmetic",
            "--no-progress")
    code, _, err = run(capsys, *argv)
    assert code == 2 and "my-tiny" in err and err.count("\n") == 1  # not in the default data dir
    code, out, err = run(capsys, "--data-dir", str(data), *argv)
    assert code == 0, err
    assert "my-tiny" in out


@pytest.mark.parametrize(
    ("argv", "flag", "command"),
    [
        (["--target", "x.gguf", "history", "list"], "--target", "history"),
        (["--k", "2", "generate", "--prompt", "hi"], "--k", "generate"),
        (["--no-auto-k", "models", "list"], "--auto-k/--no-auto-k", "models"),
        (["--no-history", "config", "show"], "--no-history", "config"),
    ],
)
def test_chat_app_flags_before_a_command_are_refused_not_ignored(isolated_config, capsys, argv, flag, command):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"specchat: error: {flag} is an option of the chat app, not of 'specchat {command}'")


def test_data_dir_reaches_the_chat_app_settings():
    from specchat.cli import build_parser
    from specchat.commands.tui import overrides_from_args

    assert overrides_from_args(build_parser().parse_args(["--data-dir", "/d", "--k", "2"])) == {"data_dir": "/d", "k": 2}
    assert overrides_from_args(build_parser().parse_args([])) == {}
