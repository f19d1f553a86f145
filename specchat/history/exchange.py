"""The JSON export format: a conversation as plain JSON data (lossless), and an import file validated field by
field before anything of it is stored.

Imports are untrusted text: dates are ISO 8601 dates, roles, token kinds and stop reasons come from their
known sets, every string is valid Unicode, and the one-line labels (title, model names, drafter) are cleaned
with :func:`specchat.sanitize.sanitize_line` (:func:`parse_export`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, field_validator, model_validator

from specchat.engine.events import PIECE_KINDS, StopReason, Turn
from specchat.engine.protocol import Message
from specchat.history.records import ConversationRecord, HistoryError, StoredMessage, now_iso
from specchat.history.schema import TURN_MESSAGE_FIELDS, TURN_OPTIONAL_COLUMNS, TURN_REAL_COLUMNS
from specchat.sanitize import read_stdin_text, sanitize_line

EXPORT_FORMAT = "specchat-conversation"
#: 2: a reply may carry ``alternates`` (the other versions, regenerate) and ``alternate_index``; files of
#: version 1 (no alternates) read the same
EXPORT_VERSION = 2
STOP_REASONS: tuple[str, ...] = get_args(StopReason)


def _json_float(x: Any) -> Any:
    # NaN/inf are not JSON; an undefined rate is exported as null.
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _message_export(record: StoredMessage) -> dict[str, Any]:
    m = record.message
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tokens:
        out["tokens"] = list(m.tokens)
    if m.kinds:
        out["kinds"] = list(m.kinds)
    if m.stopped:
        out["stopped"] = True
    out["created"] = record.created
    if m.stats is not None:
        stats = {k: _json_float(v) for k, v in dataclasses.asdict(m.stats).items()}
        for name, attr in TURN_MESSAGE_FIELDS.items():  # repeated only when they differ from the message
            if stats[name] == getattr(m, attr):
                del stats[name]
        stats["accepted_per_pos"] = [_json_float(v) for v in stats["accepted_per_pos"]]
        out["stats"] = stats
        out["run"] = {"target": record.target, "auto_k": record.auto_k, "sampling": record.sampling}
    if record.alternates:
        out["alternates"] = [_message_export(r) for r in record.alternates]
        out["alternate_index"] = m.alternate_index
    return out


def build_export(conv: ConversationRecord, records: Sequence[StoredMessage]) -> dict[str, Any]:
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "conversation": {
            "id": conv.id,
            "title": conv.title,
            "created": conv.created,
            "updated": conv.updated,
            "target": conv.target,
            "draft": conv.draft,
            "system_prompt": conv.system_prompt,
        },
        "messages": [_message_export(r) for r in records],
    }


def export_messages(
    messages: Sequence[Message], *, title: str = "", target: str = "", draft: str = "", system_prompt: str = ""
) -> dict[str, Any]:
    """The export format for messages that are not in a database (e.g. ``specchat generate`` saving one)."""
    stamp = now_iso()
    conv = ConversationRecord(0, title, stamp, stamp, target, draft, system_prompt, len(messages))
    records = [StoredMessage(id=0, idx=i, created=stamp, message=m) for i, m in enumerate(messages)]
    data = build_export(conv, records)
    del data["conversation"]["id"]
    return data


def _iso_date(value: str | None) -> str | None:
    """An ISO 8601 date or date-time (as :func:`now_iso` writes them), else ValueError."""
    if value is None:
        return None
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{sanitize_line(value)[:40]!r} is not a date; expected ISO 8601 like 2024-05-01T12:00:00+00:00"
        ) from None
    return value


def _label(value: str | None) -> str | None:
    return None if value is None else sanitize_line(value)


class _RunIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    target: str | None = None
    auto_k: bool | None = None
    sampling: dict[str, Any] | None = None

    _clean_target = field_validator("target")(_label)


class _MessageIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant"]
    content: str
    tokens: list[int] = []
    kinds: list[str] = []
    stopped: bool = False
    created: str | None = None
    stats: dict[str, Any] | None = None
    run: _RunIn | None = None
    alternates: list[_MessageIn] = []
    alternate_index: int = 0

    _check_created = field_validator("created")(_iso_date)

    @model_validator(mode="after")
    def _versions(self) -> _MessageIn:
        if not self.alternates:
            if self.alternate_index:
                raise ValueError("alternate_index without alternates")
            return self
        if self.role != "assistant":
            raise ValueError("only a reply (role assistant) has alternates")
        if any(a.role != "assistant" or a.alternates for a in self.alternates):
            raise ValueError("alternates are replies (role assistant) without alternates of their own")
        if not 0 <= self.alternate_index <= len(self.alternates):
            raise ValueError(f"alternate_index must be 0..{len(self.alternates)} (the chosen reply's place)")
        return self

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        for kind in kinds:
            if kind not in PIECE_KINDS:
                raise ValueError(f"{sanitize_line(kind)[:40]!r} is not a token kind; use one of {', '.join(PIECE_KINDS)}")
        return kinds


class _ConversationIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    title: str = ""
    created: str | None = None
    updated: str | None = None
    target: str = ""
    draft: str = ""
    system_prompt: str = ""

    _check_dates = field_validator("created", "updated")(_iso_date)
    _clean_labels = field_validator("title", "target", "draft")(_label)


class _ExportIn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    format: Literal["specchat-conversation"]
    version: int
    conversation: _ConversationIn = _ConversationIn()
    messages: list[_MessageIn]


_TURN = TypeAdapter(Turn)


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _check_unicode(data: Any, source: str) -> None:
    """Every string (and key) in ``data`` must be valid Unicode: JSON's ``"\\ud800"`` decodes to a lone surrogate,
    which no file, terminal or SQLite text can hold. Walked without recursion (the input may nest deeply)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            texts = [value]
        elif isinstance(value, dict):
            texts = [k for k in value if isinstance(k, str)]
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            texts = []
            stack.extend((f"{where}[{i}]", v) for i, v in enumerate(value))
        else:
            continue
        for text in texts:
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = f"U+{ord(text[exc.start]):04X}"
                raise HistoryError(
                    f"{source}: {sanitize_line(where) or 'the data'}: not valid Unicode text (a lone surrogate "
                    f"{bad}); export the conversation again"
                ) from None


def _record_in(m: _MessageIn, idx: int, created: str, source: str, where: str) -> StoredMessage:
    """One validated message of an export (its stats rebuilt into a :class:`Turn`), without its alternates."""
    message = Message(role=m.role, content=m.content, tokens=m.tokens, kinds=m.kinds, stopped=m.stopped)
    record = StoredMessage(id=0, idx=idx, created=created, message=message)
    if m.stats is not None:
        raw = {"text": m.content, "tokens": list(m.tokens), "kinds": list(m.kinds), **m.stats}
        raw = {
            k: (math.nan if v is None and k in TURN_REAL_COLUMNS and k not in TURN_OPTIONAL_COLUMNS else v)
            for k, v in raw.items()
        }
        raw["accepted_per_pos"] = [math.nan if v is None else v for v in raw.get("accepted_per_pos") or []]
        try:
            message.stats = _TURN.validate_python(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise HistoryError(f"{source}: {where}.stats.{_loc(err['loc'])}: {err['msg']}") from None
        if message.stats.stop_reason not in STOP_REASONS:
            raise HistoryError(
                f"{source}: {where}.stats.stop_reason: {sanitize_line(message.stats.stop_reason)[:40]!r} "
                f"is not a stop reason; use one of {', '.join(STOP_REASONS)}"
            )
        message.stats.drafter = sanitize_line(message.stats.drafter)
        message.stats.target = sanitize_line(message.stats.target)
        if m.run is not None:
            record.target, record.auto_k, record.sampling = m.run.target, m.run.auto_k, m.run.sampling
    return record


def parse_export(data: Any, *, source: str = "import data") -> tuple[ConversationRecord, list[StoredMessage]]:
    """Validate export data; raise :class:`HistoryError` with one line naming ``source`` and the bad field.

    Beyond the types: dates must be dates, roles, token kinds and stop reasons from their known sets, every
    string valid Unicode; the one-line labels (title, model names, drafter) are cleaned of control characters.
    """
    source = sanitize_line(source)
    if not isinstance(data, dict):
        raise HistoryError(f"{source}: not a specchat conversation export (expected a JSON object)")
    _check_unicode(data, source)
    version = data.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > EXPORT_VERSION:
        raise HistoryError(
            f"{source}: export format version {version} is newer than this specchat reads ({EXPORT_VERSION}); "
            "upgrade specchat"
        )
    try:
        parsed = _ExportIn.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = _loc(err["loc"])
        if where == "format":
            raise HistoryError(
                f"{source}: not a specchat conversation export (\"format\" must be \"{EXPORT_FORMAT}\")"
            ) from None
        raise HistoryError(f"{source}: {where}: {err['msg'].removeprefix('Value error, ')}") from None
    stamp = now_iso()
    c = parsed.conversation
    created = c.created or stamp
    conv = ConversationRecord(0, c.title, created, c.updated or created, c.target, c.draft, c.system_prompt, len(parsed.messages))
    records: list[StoredMessage] = []
    for i, m in enumerate(parsed.messages):
        record = _record_in(m, i, m.created or created, source, f"messages[{i}]")
        if m.alternates:
            record.alternates = [
                _record_in(a, i, a.created or created, source, f"messages[{i}].alternates[{j}]")
                for j, a in enumerate(m.alternates)
            ]
            record.message.alternates = [r.message for r in record.alternates]
            record.message.alternate_index = m.alternate_index
        records.append(record)
    return conv, records


def read_export_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON export file (``-`` = stdin) with one-line errors for missing or malformed files."""
    if str(path) == "-":
        source = "stdin"
        try:
            text = read_stdin_text()
        except UnicodeDecodeError:
            raise HistoryError("stdin: not UTF-8 text; give a JSON export from 'specchat history export --format json'") from None
    else:
        p = Path(path).expanduser()
        source = str(p)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise HistoryError(f"{p}: no such file; give the path of a file from 'specchat history export'") from None
        except IsADirectoryError:
            raise HistoryError(f"{p} is a directory; give the path of a JSON export file") from None
        except UnicodeDecodeError:
            raise HistoryError(f"{p}: not a text file; give a JSON export from 'specchat history export --format json'") from None
        except OSError as exc:
            raise HistoryError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HistoryError(
            f"{source}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
            "give a file from 'specchat history export --format json'"
        ) from None
    except RecursionError:  # json.loads recurses once per nesting level
        raise HistoryError(
            f"{source}: JSON nested too deeply to be a conversation export; "
            "give a file from 'specchat history export --format json'"
        ) from None


def messages_from_export(data: Any, *, source: str = "conversation file") -> tuple[ConversationRecord, list[Message]]:
    """Messages (with rebuilt Turn stats) of export data, e.g. for ``specchat generate --conversation``."""
    conv, records = parse_export(data, source=source)
    return conv, [r.message for r in records]
