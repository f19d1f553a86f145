"""``specchat history list | show ID | export ID | import FILE | delete ID``: saved conversations.

The database is ``<data dir>/history.sqlite3`` (see ``specchat config show``), or ``--db PATH``.
Read-only actions never create it and open it read-only (so a database in a read-only directory can be read).
Export never overwrites a file without ``--force``. Stored text is printed inert (:mod:`specchat.sanitize`):
a title or a reply holding an escape sequence shows it as visible characters, it never reaches the terminal;
the JSON export keeps every character (as JSON escapes where a terminal would act on it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from specchat.commands.arguments import location_overrides
from specchat.errors import UserError
from specchat.history import MAX_ID, HistoryStore, UnknownConversationError, format_time, read_export_file
from specchat.sanitize import json_text, sanitize, sanitize_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The description, arguments and actions of ``specchat history`` (one-line help: :data:`specchat.cli.COMMANDS`)."""
    parser.description = (
        "Saved conversations (stored in <data dir>/history.sqlite3, or --db PATH). "
        "The data dir is settings.data_dir, or 'specchat --data-dir DIR history ...'."
    )
    db_help = "history database (default: <data dir>/history.sqlite3; --db wins over --data-dir)"
    parser.add_argument("--db", metavar="PATH", help=db_help)
    actions = parser.add_subparsers(dest="history_command", metavar="ACTION", required=True)

    def action(name: str, text: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        # Accepted after the action too; SUPPRESS keeps the value given before it.
        p.add_argument("--db", metavar="PATH", default=argparse.SUPPRESS, help=db_help)
        return p

    action("list", "list saved conversations, most recent first")
    p = action("show", "print a conversation as Markdown")
    p.add_argument("id", metavar="ID", help="conversation ID (see 'specchat history list')")
    p = action("export", "write a conversation as Markdown or JSON")
    p.add_argument("id", metavar="ID", help="conversation ID")
    p.add_argument(
        "--format",
        choices=("md", "json"),
        default=None,
        help="md (readable) or json (lossless, for import); default: from the -o suffix, else md",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p = action("import", "add a conversation from a JSON export (- reads stdin)")
    p.add_argument("file", metavar="FILE")
    p = action("delete", "delete a conversation and its statistics")
    p.add_argument("id", metavar="ID", help="conversation ID")
    p = action("stats", "acceptance, mean accepted length and tok/s of the saved replies per group, and drops between builds")
    p.add_argument("--by", metavar="FIELDS", help="group by these of target,drafter,build,cpu (default: target,drafter,build)")


def _db_path(args: argparse.Namespace) -> Path:
    if getattr(args, "db", None):
        return Path(args.db).expanduser()
    from specchat.config import load_settings

    return load_settings(getattr(args, "config", None), location_overrides(args)).history_path()


def _parse_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise UserError(
            f"conversation ID must be a positive integer, not {sanitize_line(text)[:40]!r}; see 'specchat history list'"
        )
    if value > MAX_ID:  # SQLite's INTEGER is 64-bit: a larger number cannot even be looked up
        raise UnknownConversationError(
            f"no conversation with ID {sanitize_line(text)[:40]}: IDs go up to {MAX_ID}; see 'specchat history list'"
        )
    return value


def _open_existing(path: Path, conv_id: int, *, readonly: bool) -> HistoryStore:
    if not path.exists():
        raise UnknownConversationError(
            f"no conversation with ID {conv_id}: there is no history database at {path} yet"
        )
    return HistoryStore(path, create=False, readonly=readonly)


def _write_new(path: Path, text: str, force: bool) -> None:
    """Write ``text`` to ``path`` atomically; refuse to replace an existing file unless ``force``."""
    if path.is_dir():
        raise UserError(f"{path} is a directory; give a file name with -o")
    if path.exists() and not force:
        raise UserError(f"{path} already exists; add --force to overwrite it, or choose another -o FILE")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"cannot write {path}: directory {parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # fails if the file appeared meanwhile: never clobber it
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: exclusive create instead
                with open(path, "x", encoding="utf-8") as f:
                    f.write(text)
            os.unlink(tmp)
    except FileExistsError:
        os.unlink(tmp)
        raise UserError(f"{path} already exists; add --force to overwrite it, or choose another -o FILE") from None
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None


def _short(text: str, width: int) -> str:
    """One line of inert text (stored text may hold escape sequences), cut to ``width`` characters."""
    text = sanitize_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def run(args: argparse.Namespace) -> int:
    path = _db_path(args)
    command = args.history_command

    if command == "list":
        if not path.exists():
            print(f"no saved conversations yet (no history database at {path})")
            return 0
        with HistoryStore(path, readonly=True) as store:
            conversations = store.list_conversations()
        if not conversations:
            print(f"no saved conversations in {path}")
            return 0
        pairs = [_short(f"{c.target or '?'} + {c.draft or '?'}", 36) for c in conversations]
        pair_w = max(len("MODELS"), *(len(p) for p in pairs))
        id_w = max(2, *(len(str(c.id)) for c in conversations))
        print(f"{'ID':>{id_w}}  {'UPDATED':<20}  {'MSGS':>4}  {'MODELS':<{pair_w}}  TITLE")
        for c, pair in zip(conversations, pairs):
            title = _short(c.title, 60) or "(untitled)"
            print(f"{c.id:>{id_w}}  {format_time(c.updated):<20}  {c.n_messages:>4}  {pair:<{pair_w}}  {title}")
        return 0

    if command == "stats":
        from specchat.history.stats import acceptance_drops, format_stats, group_stats, parse_groups

        try:
            by = parse_groups(args.by)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if not path.exists():
            print(f"no saved replies yet (no history database at {path})")
            return 0
        with HistoryStore(path, readonly=True) as store:
            rows = store.reply_stats()
        sys.stdout.write(sanitize(format_stats(group_stats(rows, by), by, acceptance_drops(rows))))
        return 0

    if command == "import":
        data = read_export_file(args.file)
        source = "stdin" if args.file == "-" else sanitize_line(Path(args.file).expanduser())
        with HistoryStore(path) as store:
            new_id = store.import_json(data, source=source)
            conv = store.get_conversation(new_id)
        print(f"imported {source} as conversation {new_id} ({conv.n_messages} messages) into {path}")
        return 0

    conv_id = _parse_id(args.id)
    with _open_existing(path, conv_id, readonly=command in ("show", "export")) as store:
        if command == "show":
            sys.stdout.write(store.export_markdown(conv_id))
            return 0
        if command == "delete":
            conv = store.get_conversation(conv_id)
            store.delete(conv_id)
            print(f"deleted conversation {conv_id} ({_short(conv.title, 60) or 'untitled'}, {conv.n_messages} messages)")
            return 0
        if command == "export":
            fmt = args.format
            if fmt is None:
                fmt = "json" if args.output and args.output.lower().endswith(".json") else "md"
            if fmt == "json":
                text = json_text(store.export_json(conv_id), indent=2) + "\n"
            else:
                text = store.export_markdown(conv_id)
            if args.output in (None, "-"):
                sys.stdout.write(text)
            else:
                out = Path(args.output).expanduser()
                _write_new(out, text, args.force)
                print(f"wrote conversation {conv_id} as {fmt} to {out}", file=sys.stderr)
            return 0
    raise AssertionError(f"unhandled history action {command!r}")  # argparse restricts the choices
