"""Entry point: ``specchat`` (the TUI) and its subcommands.

Each subcommand lives in its own module ``specchat.commands.<name>`` exposing
``add_parser(subparsers)`` and ``run(args) -> int``; they are imported lazily so ``specchat --help``
and the TUI's first frame do not pay for llama_cpp.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from specchat.errors import UserError

SUBCOMMANDS = ("generate", "bench", "models", "history", "config")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specchat",
        description="Chat in the terminal with speculative decoding you can watch.",
    )
    parser.add_argument("--config", metavar="PATH", help="config TOML file (default: $SPECCHAT_CONFIG or the user config dir)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"specchat.commands.{name}")
        module.add_parser(sub)
    from specchat.commands import tui

    tui.add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from specchat.commands import tui

            return tui.run(args)
        module = importlib.import_module(f"specchat.commands.{args.command}")
        return int(module.run(args) or 0)
    except UserError as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("specchat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
