"""Command-line arguments several subcommands share: where the config file and the data directory are."""

from __future__ import annotations

import argparse


def add_location_arguments(parser: argparse.ArgumentParser, *, data_dir: bool = False) -> None:
    """Add ``--config PATH`` (and, with ``data_dir``, ``--data-dir DIR``) to a subcommand's action.

    ``--config`` is also an option of ``specchat`` itself; here its default is ``SUPPRESS``, so a path given
    before the command is kept when it is not repeated after the action. Read the values with
    ``getattr(args, "config", None)`` and ``getattr(args, "data_dir", None)``.
    """
    parser.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="config TOML file")
    if data_dir:
        parser.add_argument(
            "--data-dir", metavar="DIR", help="data directory (default: settings.data_dir or the user data dir)"
        )
