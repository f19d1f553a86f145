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
    assert modules == ["specchat.commands.tui"], modules  # the chat app's own flags, a light module


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
