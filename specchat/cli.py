"""Entry point: ``specchat`` (the TUI) and its subcommands.

Each subcommand lives in its own module ``specchat.commands.<name>`` exposing
``add_arguments(parser)`` (its description and arguments) and ``run(args) -> int``. The top-level parser
knows only the names and one-line helps in :data:`COMMANDS`; a command's module is imported when that
command is parsed (``specchat history list``, ``specchat history --help``), so ``specchat --help`` and the
TUI's first frame import none of them, and a command imports only its own.

Every command ends the same way on bad input and on signals: a :class:`~specchat.errors.UserError` is one line
on stderr (control characters made visible: a message may quote a file name) and exit code 2; Ctrl-C, SIGTERM
and SIGHUP stop it through one path (:mod:`specchat.signals`) with exit code 128 + the signal number.
``--verbose`` (before or right after the command name) shows llama.cpp's own log on stderr; without it
llama.cpp is silent (:mod:`specchat.engine.llamalog`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from specchat import signals
from specchat.errors import UserError

# name -> the one-line help ``specchat --help`` lists; specchat.commands.<name> adds everything else
COMMANDS: dict[str, str] = {
    "generate": "generate one reply headless (stdout), with speculation statistics",
    "bench": "measure baseline vs speculation (each pair interleaved round by round) and explain the speedup",
    "race": "answer one message with speculation off, then on: both speeds, the ratio, the same text",
    "demo": "the guided tour of when speculation helps and when it hurts (--headless)",
    "models": "list, derive and download models",
    "history": "list, show, export, import or delete saved conversations; stats of their replies across builds",
    "config": "show the effective settings or where the config file is",
    "serve": "the chat app in a web browser (textual-serve): prints the URL; the app's options pass through",
}


class CommandParser(argparse.ArgumentParser):
    """An argument parser with one-line errors whose subcommand arguments are added on first use.

    ``command_module`` names the module whose ``add_arguments(self)`` is still to be called; it is called
    (once) before this parser parses or formats its help. Parsers without one behave as usual.
    """

    command_module: str | None = None

    def load_arguments(self) -> None:
        if self.command_module is not None:
            module = importlib.import_module(self.command_module)
            self.command_module = None
            module.add_arguments(self)
            self.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self.load_arguments()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.load_arguments()
        return super().format_usage()

    def format_help(self) -> str:
        self.load_arguments()
        return super().format_help()

    def error(self, message: str) -> None:  # type: ignore[override]
        """One line on stderr (what, and where to look), exit code 2, as for every bad input."""
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


VERBOSE_HELP = "show llama.cpp's own log lines on stderr (silent by default)"


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="specchat",
        description="Chat in the terminal with speculative decoding you can watch.",
    )
    parser.add_argument("--config", metavar="PATH", help="config TOML file (default: $SPECCHAT_CONFIG or the user config dir)")
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument(
        "--data-dir", metavar="DIR",
        help="where models and the history database live, for the app and every command (default: settings.data_dir "
        "or the user data dir)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
        command.command_module = f"specchat.commands.{name}"
    from specchat.commands import tui

    tui.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    from specchat.commands import tui  # imported by build_parser already (the app's flags)

    # serve passes the app's flags on to the app it serves
    given = tui.app_flags_given(args) if args.command not in (None, "serve") else []
    if given:  # an app flag before a command would do nothing: say so instead of ignoring it
        parser.error(
            f"{given[0]} is an option of the chat app, not of 'specchat {args.command}'; "
            f"give the options of {args.command} after its name"
        )
    if args.verbose:
        from specchat.engine import llamalog  # imports no llama_cpp itself

        llamalog.set_verbose(True)
    try:
        with signals.termination_raises():
            if args.command is None:
                code = tui.run(args)
            else:
                module = importlib.import_module(f"specchat.commands.{args.command}")
                code = int(module.run(args) or 0)
    except UserError as exc:
        from specchat.sanitize import sanitize_line

        print(f"specchat: error: {sanitize_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print(f"specchat: {'interrupted' if not isinstance(exc, signals.Terminated) else exc}", file=sys.stderr)
        return signals.exit_code(exc)
    except BrokenPipeError:
        return 0
    # a command that handled the signal itself (bench writes its partial report) and returned 130
    received = signals.last_termination()
    return signals.exit_code(received) if received is not None and code == 130 else code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
