"""``specchat config show | path``: the effective settings and where the config file is looked for.

``show`` prints TOML (dotted keys) you could paste into a config file, each line followed by the
source of the value: ``default``, ``file PATH``, ``env VAR`` or ``cli``.
"""

from __future__ import annotations

import argparse
import sys

from specchat.commands.arguments import add_location_arguments, location_overrides
from specchat.config import (
    CONFIG_ENV,
    LoadedSettings,
    get_value,
    locate_config,
    settings_sources,
    toml_key,
    toml_value,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The description and actions of ``specchat config`` (its one-line help is in :data:`specchat.cli.COMMANDS`)."""
    parser.description = "Show the effective settings (and where each came from) or the config file location."
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    for name, text in (
        ("show", "print every effective setting and its source (default, file, env, cli)"),
        ("path", "print where the config file is looked for, and whether it exists"),
    ):
        action = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        add_location_arguments(action)


def format_show(loaded: LoadedSettings) -> str:
    loc = loaded.location
    status = "loaded" if loaded.file_loaded else "not found, defaults apply"
    lines = [f"# config file: {loc.path} ({loc.describe_origin()}; {status})"]
    rows: list[tuple[str, str]] = []
    settings = loaded.settings
    for key, source in loaded.sources.items():
        value = get_value(settings, key)
        name = toml_key(key)
        if value is None:
            text = f"# {name} is unset"
            if key == ("data_dir",):
                text += f": {settings.effective_data_dir()}"
        else:
            text = f"{name} = {toml_value(value)}"
        if key == ("threads",) and source == "default":
            source = "default (CPU count)"
        rows.append((text, source))
    width = min(max(len(text) for text, _ in rows), 48)
    lines += [f"{text:<{width}}  # {source}" for text, source in rows]
    if settings.data_dir is not None:
        lines.append(f"# data dir: {settings.effective_data_dir()}")
    for name in loaded.ignored_env:
        lines.append(f"# ignored: {name} (not a setting)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    config_path = getattr(args, "config", None)
    if args.config_command == "path":
        loc = locate_config(config_path)
        print(loc.path)
        if loc.exists:
            state = "exists"
        elif loc.path.is_dir():
            state = "is a directory, not a file; commands fail until it is removed"
        else:
            state = "does not exist; commands fail until it does" if loc.explicit else "does not exist; a missing file is fine"
        how = loc.describe_origin()
        if loc.origin == "default":
            how += f"; override with --config PATH or ${CONFIG_ENV}"
        print(f"# {how}; {state}", file=sys.stderr)
        return 0
    loaded = settings_sources(config_path, location_overrides(args))  # specchat --data-dir DIR config show
    print(format_show(loaded))
    return 0
