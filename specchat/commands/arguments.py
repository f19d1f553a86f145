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


def add_interleave_argument(parser: argparse.ArgumentParser) -> None:
    """``--interleave rounds|replies``: how a measured pair shares the machine (``specchat bench`` and ``specchat
    models tune``; :mod:`specchat.bench.lockstep`)."""
    parser.add_argument("--interleave", choices=("rounds", "replies"), default=None,
                        help="how a pair's two runs share the machine: 'rounds' (default) interleaves them round by "
                             "round on two copies of the target, measured twice with the copies swapped - the "
                             "contention of a shared machine then hits both alike; 'replies' runs them one after the "
                             "other on one copy (also where a second copy does not fit in memory)")


def location_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``{"data_dir": DIR}`` if ``--data-dir`` was given (before the command or after its action), else ``{}``.

    Pass it to :func:`specchat.config.load_settings` as (part of) the command-line overrides.
    """
    data_dir = getattr(args, "data_dir", None)
    return {} if data_dir is None else {"data_dir": data_dir}



def warn_k_above_cap(settings: Any, *, auto_k: bool | None = None) -> str:
    """Say on stderr, in one line, when the fixed K is above the cap of the configured drafter's kind (a model
    drafter's ``--k 40`` runs at 16): ``specchat: note: ...``. Returns the note ("" when there is none). Only
    the files' names are resolved here (no model is loaded): a pair that does not resolve is left to the
    loader, whose error says what to do."""
    import sys

    from specchat.engine.drafter_kinds import k_cap_note
    from specchat.errors import UserError
    from specchat.models.registry import resolve_pair

    if settings.server_url:
        return ""
    try:
        pair = resolve_pair(settings.target, settings.draft, settings.effective_data_dir())
    except UserError:
        return ""
    drafter = settings.draft if pair.chain else pair.drafter  # a chain: the note names its model link
    note = k_cap_note(drafter, settings.k, auto_k=settings.auto_k if auto_k is None else auto_k)
    if note:
        print(f"specchat: note: {note}", file=sys.stderr, flush=True)
    return note
