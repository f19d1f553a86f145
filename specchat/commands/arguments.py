"""Command-line arguments several subcommands share: where the config file and the data directory are.

(The flags that do not apply when a llama-server generates the replies are refused by
:func:`specchat.config.refuse_local_flags`, next to ``server_url`` itself: the bench command, below this
layer, needs it too.)"""

from __future__ import annotations

import argparse
from typing import Any



def add_location_arguments(parser: argparse.ArgumentParser, *, data_dir: bool = False) -> None:
    """Add ``--config PATH`` (and, with ``data_dir``, ``--data-dir DIR``) to a subcommand's action.

    Both are also options of ``specchat`` itself (``specchat --data-dir D models list``); here their default
    is ``SUPPRESS``, so a value given before the command is kept when it is not repeated after the action
    (a value after the action wins). Read them with ``getattr(args, "config", None)`` and
    ``getattr(args, "data_dir", None)``; :func:`location_overrides` turns the data dir into a settings override.
    """
    parser.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="config TOML file")
    if data_dir:
        parser.add_argument(
            "--data-dir", metavar="DIR", default=argparse.SUPPRESS,
            help="data directory (default: settings.data_dir or the user data dir)",
        )


def location_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``{"data_dir": DIR}`` if ``--data-dir`` was given (before the command or after its action), else ``{}``.

    Pass it to :func:`specchat.config.load_settings` as (part of) the command-line overrides.
    """
    data_dir = getattr(args, "data_dir", None)
    return {} if data_dir is None else {"data_dir": data_dir}

