"""The store: conversations, messages and turn statistics in one SQLite file (stdlib :mod:`sqlite3`).

Durability: the database runs in WAL mode with ``synchronous=FULL`` and every message is written in its
own ``BEGIN IMMEDIATE`` transaction together with its turn statistics, so a crash (or a kill) loses at
most the reply being generated, never an earlier turn; a half-written message never appears.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel

from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.history import changes
from specchat.history.exchange import build_export, parse_export
from specchat.history.markdown import render_markdown
from specchat.history.records import (
    ConversationRecord,
    HistoryError,
    SearchHit,
    StoredMessage,
    UnknownConversationError,
    default_title,
    now_iso,
)
from specchat.history.schema import (
    APPLICATION_ID,
    ROLES,
    SCHEMA_VERSION,
    TURN_COLUMNS,
    TURN_INT_COLUMNS,
    TURN_MESSAGE_FIELDS,
    TURN_OPTIONAL_COLUMNS,
    TURN_REAL_COLUMNS,
    TURN_TEXT_COLUMNS,
    migrate,
)
from specchat.sanitize import sanitize_line


def _conversation(row: Sequence[Any], n_messages: int) -> ConversationRecord:
    """A conversation read from the database, its one-line labels (title, model names, dates) made inert: the
    file may have been written by something other than specchat."""
    conv_id, title, created, updated, target, draft, system_prompt = row[:7]
    return ConversationRecord(
        conv_id, sanitize_line(title), sanitize_line(created), sanitize_line(updated), sanitize_line(target),
        sanitize_line(draft), system_prompt, n_messages=n_messages,
    )


def _sampling_dict(sampling: Any) -> dict[str, Any] | None:
    if sampling is None:
        return None
    if isinstance(sampling, Mapping):
        return dict(sampling)
    if isinstance(sampling, BaseModel):
        return sampling.model_dump()
    if dataclasses.is_dataclass(sampling):
        return dataclasses.asdict(sampling)
    raise TypeError(f"sampling must be a mapping, a pydantic model or a dataclass, not {type(sampling).__name__}")


def _float_in(value: Any) -> float:
    # SQLite stores NaN as NULL; a timing that was NaN comes back as NaN.
    return math.nan if value is None else float(value)


def _fold(text: Any) -> Any:
    """Case folding for search (SQL ``specchat_fold``): whitespace runs become one space, like the query's."""
    return " ".join(text.split()).casefold() if isinstance(text, str) else text


class HistoryStore:
    """Conversations, messages and turn statistics in one SQLite file. Thread-safe (one lock).

    ``HistoryStore(path)`` creates the file (and its directory) if needed and migrates it;
    ``create=False`` refuses a missing file instead; ``readonly=True`` (implies ``create=False``) opens it for
    reading only (``specchat history list/show/export``), so a database in a read-only directory can be read:
    see :meth:`_connect_readonly`. A read-only store whose schema is older than this specchat's is opened
    for writing instead, to migrate it.
    """

    def __init__(self, path: str | Path, *, create: bool = True, readonly: bool = False) -> None:
        create = create and not readonly
        self.path = Path(path) if str(path) != ":memory:" else Path(":memory:")
        memory = str(path) == ":memory:"
        if not memory:
            self.path = self.path.expanduser()
            if self.path.is_dir():
                raise HistoryError(f"{self.path} is a directory; give the path of a history database file")
            if not self.path.exists():
                if not create:
                    raise HistoryError(
                        f"no history database at {self.path}; conversations are saved there once you chat"
                    )
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise HistoryError(f"cannot create {self.path.parent}: {exc.strerror or exc}") from None
        self._lock = threading.RLock()
        self.readonly = readonly and not memory
        try:
            if self.readonly:
                self._conn = self._connect_readonly()
            else:
                self._conn = sqlite3.connect(
                    str(self.path), isolation_level=None, check_same_thread=False, timeout=10.0
                )
        except sqlite3.OperationalError as exc:
            raise HistoryError(f"cannot open history database {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:  # the read-only probe found no database
            raise HistoryError(f"{self.path} is not a usable history database ({exc}); give another path with --db") from None
        try:
            self._conn.create_function("specchat_fold", 1, _fold, deterministic=True)  # search_conversations
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.execute("PRAGMA busy_timeout = 10000")
            app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            has_tables = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
            if app_id != APPLICATION_ID and (app_id != 0 or version != 0 or has_tables):
                raise HistoryError(
                    f"{self.path} is not a specchat history database; give another path with --db"
                )
            if version > SCHEMA_VERSION:
                raise HistoryError(
                    f"{self.path} has schema version {version}, newer than this specchat understands "
                    f"({SCHEMA_VERSION}); upgrade specchat or use another --db"
                )
            if self.readonly:
                if version == SCHEMA_VERSION:
                    return
                self._conn.close()  # an older schema: open for writing, which migrates it (or says why not)
                self.readonly = False
                self._conn = sqlite3.connect(
                    str(self.path), isolation_level=None, check_same_thread=False, timeout=10.0
                )
                self._conn.execute("PRAGMA foreign_keys = ON")
                self._conn.execute("PRAGMA busy_timeout = 10000")
            if not memory:
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")
            migrate(self._conn)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise HistoryError(f"{self.path} is not a usable history database ({exc}); give another path with --db") from None
        except BaseException:
            self._conn.close()
            raise

    def _connect_readonly(self) -> sqlite3.Connection:
        """A read-only connection (``mode=ro``). Reading a WAL database needs its ``-shm`` file; in a directory
        this process cannot write, with no ``-wal`` file left (so every committed transaction is in the main
        file and no writer can be running: a writer would need to create one), SQLite can only read it as
        ``immutable=1`` (https://www.sqlite.org/uri.html#uriimmutable)."""
        uri = f"file:{quote(str(self.path.absolute()))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=10.0)
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError:
            conn.close()
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.exists() or os.access(self.path.parent, os.W_OK):
                raise
        return sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False)

    # -- plumbing -------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self._conn.execute("PRAGMA user_version").fetchone()[0]

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back entirely if anything inside raises.

        A failure to write (a full disk, a read-only file, an I/O error; at any statement or at COMMIT) is a
        :class:`HistoryError` naming the file: what was saved before is intact (SQLite's rollback journal).
        """
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        try:
                            self._conn.execute("ROLLBACK")
                        except sqlite3.Error:  # pragma: no cover - SQLite rolled back already
                            pass
                    raise
            except sqlite3.OperationalError as exc:
                raise HistoryError(
                    f"cannot write the history database {self.path}: {exc}; nothing of this change was saved "
                    "(what was saved before is intact)"
                ) from None

    def _require(self, conn: sqlite3.Connection, conv_id: int) -> sqlite3.Row | tuple:
        row = conn.execute(
            "SELECT id, title, created, updated, target, draft, system_prompt FROM conversations WHERE id = ?",
            (conv_id,),
        ).fetchone()
        if row is None:
            raise UnknownConversationError(
                f"no conversation with ID {conv_id} in {self.path}; see 'specchat history list'"
            )
        return row

    def _changed(self, conv_id: int) -> None:
        """After a committed write: tell :mod:`specchat.history.changes`' listeners (the suffix corpus)."""
        if str(self.path) != ":memory:":
            changes.notify(self.path, conv_id)

    # -- conversations --------------------------------------------------------------------------------
    def create_conversation(
        self,
        title: str = "",
        *,
        target: str = "",
        draft: str = "",
        system_prompt: str = "",
        created: str | None = None,
        updated: str | None = None,
    ) -> int:
        created = created or now_iso()
        with self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, target, draft, system_prompt)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (title, created, updated or created, target, draft, system_prompt),
            )
            return int(cur.lastrowid)

    def set_title(self, conv_id: int, title: str) -> None:
        with self._transaction() as conn:
            self._require(conn, conv_id)
            conn.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conv_id))

    def get_conversation(self, conv_id: int) -> ConversationRecord:
        with self._lock:
            row = self._require(self._conn, conv_id)
            n = self._conn.execute(
                "SELECT count(*) FROM messages WHERE conversation_id = ? AND alternate_of IS NULL", (conv_id,)
            ).fetchone()[0]
        return _conversation(row, n)

    def list_conversations(self) -> list[ConversationRecord]:
        """Most recently updated first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT c.id, c.title, c.created, c.updated, c.target, c.draft, c.system_prompt,"
                " (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id AND m.alternate_of IS NULL)"
                " FROM conversations c ORDER BY c.updated DESC, c.id DESC"
            ).fetchall()
        return [_conversation(row, row[7]) for row in rows]

    def search_conversations(self, query: str = "") -> list[SearchHit]:
        """Conversations whose title or any message contains ``query``, most recently updated first.

        Case-insensitive for any script (Python's ``str.casefold``, registered as an SQL function: SQLite's own
        LIKE folds ASCII only), a plain substring (no wildcards, no word boundaries: ``coun`` finds
        ``merge_count``). A scan over the messages rather than an FTS5 index: FTS5 (in this machine's SQLite
        3.40) matches whole tokens or their prefixes only, needs triggers and a migration to stay in sync, and
        is not in every Python's sqlite3; a scan of a personal history is fast enough to run per keystroke.
        An empty query lists every conversation.
        """
        needle = " ".join(query.split()).casefold()
        if not needle:
            return [SearchHit(c) for c in self.list_conversations()]
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM (SELECT c.id, c.title, c.created, c.updated, c.target, c.draft, c.system_prompt,"
                " (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id AND m.alternate_of IS NULL),"
                " (SELECT m.idx FROM messages m WHERE m.conversation_id = c.id"
                "  AND instr(specchat_fold(m.content), ?1) > 0 ORDER BY m.idx LIMIT 1) AS hit,"
                " instr(specchat_fold(c.title), ?1) > 0 AS in_title"
                " FROM conversations c) WHERE in_title OR hit IS NOT NULL ORDER BY updated DESC, id DESC",
                (needle,),
            ).fetchall()
            out = []
            for row in rows:
                conv = _conversation(row, row[7])
                if row[8] is None:
                    out.append(SearchHit(conv))
                    continue
                role, content = self._conn.execute(  # the conversation's message, or a version kept beside it
                    "SELECT role, content FROM messages WHERE conversation_id = ? AND idx = ?"
                    " AND instr(specchat_fold(content), ?) > 0 ORDER BY alternate_of IS NOT NULL, version LIMIT 1",
                    (conv.id, row[8], needle),
                ).fetchone()
                out.append(SearchHit(conv, role, content))
        return out

    def delete(self, conv_id: int) -> None:
        """Delete a conversation with its messages and stats (foreign keys cascade)."""
        with self._transaction() as conn:
            self._require(conn, conv_id)
            conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))
        self._changed(conv_id)

    def reply_stats(self) -> list[dict[str, Any]]:
        """Every saved reply's statistics for :mod:`specchat.history.stats`, oldest first: when it was made,
        target, drafter, counts, timings, and the Turn fields kept in ``extra`` (the llama.cpp build, the CPU)."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT m.created, t.target, t.drafter, t.draft_n, t.draft_n_accepted, t.n_spec_steps,"
                " t.predicted_n, t.predicted_ms, t.extra FROM turn_stats t JOIN messages m ON m.id = t.message_id"
                " ORDER BY m.created, m.id"
            ).fetchall()
        out = []
        for created, target, drafter, draft_n, accepted, spec_steps, predicted_n, predicted_ms, extra in rows:
            more = json.loads(extra) if extra else {}
            out.append({
                "created": created, "target": target or "", "drafter": drafter or "", "draft_n": draft_n or 0,
                "accepted": accepted or 0, "spec_steps": spec_steps or 0, "predicted_n": predicted_n or 0,
                "predicted_ms": predicted_ms or 0.0, "build": str(more.get("build") or ""), "cpu": str(more.get("cpu") or ""),
            })
        return out

    # -- messages -------------------------------------------------------------------------------------
    def append_message(
        self,
        conv_id: int,
        message: Message,
        *,
        target: str | None = None,
        auto_k: bool | None = None,
        sampling: Any = None,
        created: str | None = None,
    ) -> int:
        """Append one message (and its Turn stats) in one transaction; returns the message id.

        ``target`` (default: the conversation's), ``auto_k`` and ``sampling`` (a mapping, pydantic model or
        dataclass such as :class:`~specchat.engine.controls.SamplingParams`) describe the turn's run and
        are stored with the stats. The first user message names an untitled conversation.
        """
        with self._transaction() as conn:
            message_id = self._insert(conn, conv_id, None, message, target, auto_k, sampling, created)
        self._changed(conv_id)
        return message_id

    def replace_last_assistant(
        self,
        conv_id: int,
        message: Message,
        *,
        target: str | None = None,
        auto_k: bool | None = None,
        sampling: Any = None,
    ) -> int:
        """Swap the last message, which must be an assistant reply, for ``message`` (regenerate)."""
        if message.role != "assistant":
            raise ValueError("replace_last_assistant needs an assistant message")
        with self._transaction() as conn:
            self._require(conn, conv_id)
            row = conn.execute(
                "SELECT id, idx, role FROM messages WHERE conversation_id = ? AND alternate_of IS NULL"
                " ORDER BY idx DESC LIMIT 1",
                (conv_id,),
            ).fetchone()
            if row is None or row[2] != "assistant":
                raise ValueError(f"conversation {conv_id} does not end with an assistant message")
            conn.execute("DELETE FROM messages WHERE id = ?", (row[0],))
            message_id = self._insert(conn, conv_id, row[1], message, target, auto_k, sampling, None)
        self._changed(conv_id)
        return message_id

    def truncate_after(self, conv_id: int, idx: int) -> int:
        """Delete the messages after position ``idx`` (``-1`` deletes all); returns how many (edit/regenerate)."""
        with self._transaction() as conn:
            self._require(conn, conv_id)
            cur = conn.execute("DELETE FROM messages WHERE conversation_id = ? AND idx > ?", (conv_id, idx))
            conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now_iso(), conv_id))
            removed = cur.rowcount
        self._changed(conv_id)
        return removed

    def sync(
        self,
        conv_id: int,
        messages: Sequence[Message],
        *,
        target: str | None = None,
        auto_k: bool | None = None,
        sampling: Any = None,
    ) -> list[int]:
        """Make the stored messages equal ``messages`` (e.g. ``engine.messages`` after a turn).

        Keeps the common prefix, deletes what differs after it (a regenerated or edited tail), then appends
        the rest one transaction per message. Returns the ids of the appended messages.
        """
        records = self.records(conv_id)[1]
        stored = [r.message for r in records]
        common = 0
        while common < min(len(stored), len(messages)) and _same(stored[common], messages[common]):
            common += 1
        if common < len(stored):
            self.truncate_after(conv_id, common - 1)
        # what is written again keeps the run details (and dates) it was saved with, by its place and text: a
        # regenerated reply's earlier versions, and the messages after an earlier reply whose version was flipped
        known = {(r.idx, _version_key(v.message)): v for r in records[common:] for v in (r, *r.alternates)}
        ids = []
        for idx, m in enumerate(messages[common:], start=common):
            runs = [known.get((idx, _version_key(v))) for v in m.versions()]
            with self._transaction() as conn:
                ids.append(self._insert(conn, conv_id, None, m, target, auto_k, sampling, None, versions=runs))
        if ids:
            self._changed(conv_id)
        return ids

    def _insert(
        self,
        conn: sqlite3.Connection,
        conv_id: int,
        idx: int | None,
        message: Message,
        target: str | None,
        auto_k: bool | None,
        sampling: Any,
        created: str | None,
        *,
        versions: Sequence[StoredMessage | None] | None = None,
    ) -> int:
        """Insert ``message`` (and its turn stats) at ``idx`` (default: next), then its alternates; returns its id.

        ``versions``: per version of the message (:meth:`Message.versions` order), a stored record whose run
        details (target, auto-K, sampling) and date that version keeps, or None for this call's.
        """
        conv = self._require(conn, conv_id)
        if message.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {message.role!r}")
        if idx is None:
            idx = conn.execute(
                "SELECT coalesce(max(idx) + 1, 0) FROM messages WHERE conversation_id = ?", (conv_id,)
            ).fetchone()[0]
        created = created or now_iso()
        all_versions = message.versions() if message.alternates else [message]
        chosen = message.alternate_index if message.alternates else 0
        runs = list(versions) if versions is not None else [None] * len(all_versions)
        message_id = 0
        for position in [chosen, *(i for i in range(len(all_versions)) if i != chosen)]:
            version, run = all_versions[position], runs[position] if position < len(runs) else None
            cur = conn.execute(
                "INSERT INTO messages (conversation_id, idx, role, content, tokens, kinds, stopped, created,"
                " alternate_of, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conv_id,
                    idx,
                    message.role,
                    version.content,
                    json.dumps(list(version.tokens)),
                    json.dumps(list(version.kinds)),
                    int(bool(version.stopped)),
                    run.created if run is not None else created,
                    None if position == chosen else message_id,
                    position,
                ),
            )
            row_id = int(cur.lastrowid)
            if position == chosen:
                message_id = row_id
            if version.stats is not None:
                if run is not None:
                    v_target, v_auto_k, v_sampling = run.target, run.auto_k, run.sampling
                else:
                    v_target = target if target is not None else (version.stats.target or conv[4])
                    v_auto_k, v_sampling = auto_k, sampling
                self._insert_stats(conn, row_id, version, v_target, v_auto_k, v_sampling)
        title = conv[1]
        if not title and message.role == "user":
            title = default_title(message.content)
        conn.execute(
            "UPDATE conversations SET updated = ?, title = ? WHERE id = ?", (max(created, conv[3]), title, conv_id)
        )
        return message_id

    def _insert_stats(
        self,
        conn: sqlite3.Connection,
        message_id: int,
        message: Message,
        target: str | None,
        auto_k: bool | None,
        sampling: Any,
    ) -> None:
        turn = message.stats
        assert turn is not None
        values = dataclasses.asdict(turn)
        row: dict[str, Any] = {
            "message_id": message_id,
            "target": target,
            "auto_k": None if auto_k is None else int(bool(auto_k)),
            "sampling": None if sampling is None else json.dumps(_sampling_dict(sampling)),
        }
        for name in TURN_COLUMNS:
            value = values.pop(name)
            if name == "accepted_per_pos":
                value = json.dumps(list(value))
            elif name == "speculative":
                value = int(bool(value))
            row[name] = value
        for name, msg_attr in TURN_MESSAGE_FIELDS.items():
            value = values.pop(name)
            same = value == getattr(message, msg_attr)
            row[f"turn_{name}"] = None if same else (value if name == "text" else json.dumps(list(value)))
        row["extra"] = json.dumps(values) if values else None  # Turn fields without a column of their own
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        conn.execute(f"INSERT INTO turn_stats ({columns}) VALUES ({marks})", tuple(row.values()))

    # -- reading --------------------------------------------------------------------------------------
    def records(self, conv_id: int) -> tuple[ConversationRecord, list[StoredMessage]]:
        """The conversation and its messages in order, with ids, timestamps and run details."""
        stat_cols = ("target", "auto_k", "sampling") + TURN_COLUMNS + ("turn_text", "turn_tokens", "turn_kinds", "extra")
        with self._lock:
            conv = self.get_conversation(conv_id)
            rows = self._conn.execute(
                "SELECT m.id, m.idx, m.role, m.content, m.tokens, m.kinds, m.stopped, m.created, m.alternate_of,"
                " m.version, s.message_id, "
                + ", ".join(f"s.{c}" for c in stat_cols)
                + " FROM messages m LEFT JOIN turn_stats s ON s.message_id = m.id"
                " WHERE m.conversation_id = ? ORDER BY m.idx, m.version",
                (conv_id,),
            ).fetchall()
        out: list[StoredMessage] = []
        versions: dict[int, list[tuple[int, StoredMessage]]] = {}  # chosen id -> (version, record) of every version
        for row in rows:
            mid, idx, role, content, tokens, kinds, stopped, created, alternate_of, version, stats_id = row[:11]
            message = Message(
                role=role, content=content, tokens=json.loads(tokens), kinds=json.loads(kinds), stopped=bool(stopped)
            )
            record = StoredMessage(id=mid, idx=idx, created=created, message=message)
            if stats_id is not None:
                s = dict(zip(stat_cols, row[11:]))
                record.target = s["target"]
                record.auto_k = None if s["auto_k"] is None else bool(s["auto_k"])
                record.sampling = None if s["sampling"] is None else json.loads(s["sampling"])
                message.stats = _turn_from_row(s, message)
            versions.setdefault(alternate_of if alternate_of is not None else mid, []).append((version, record))
            if alternate_of is None:
                out.append(record)
        for record in out:
            group = sorted(versions[record.id], key=lambda vr: (vr[0], vr[1].id))
            if len(group) > 1:
                record.alternates = [r for _v, r in group if r is not record]
                record.message.alternates = [r.message for r in record.alternates]
                record.message.alternate_index = next(i for i, (_v, r) in enumerate(group) if r is record)
        return conv, out

    def load(self, conv_id: int) -> tuple[ConversationRecord, list[Message]]:
        """The conversation and its messages (assistant messages carry their rebuilt :class:`Turn`)."""
        conv, records = self.records(conv_id)
        return conv, [r.message for r in records]

    # -- export / import ------------------------------------------------------------------------------
    def export_json(self, conv_id: int) -> dict[str, Any]:
        """Everything about a conversation as plain JSON data (lossless; see :meth:`import_json`)."""
        conv, records = self.records(conv_id)
        return build_export(conv, records)

    def export_markdown(self, conv_id: int) -> str:
        conv, records = self.records(conv_id)
        return render_markdown(conv, records)

    def import_json(self, data: Any, *, source: str = "import data") -> int:
        """Store an exported conversation as a new one (timestamps kept); returns its new id.

        The whole import is validated first and then written in one transaction, so a malformed file adds
        nothing. ``source`` names the file in error messages.
        """
        conv, records = parse_export(data, source=source)
        with self._transaction() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, target, draft, system_prompt)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (conv.title, conv.created, conv.updated, conv.target, conv.draft, conv.system_prompt),
            )
            new_id = int(cur.lastrowid)
            for i, r in enumerate(records):
                self._insert(
                    conn, new_id, i, r.message, r.target, r.auto_k, r.sampling, r.created, versions=r.version_records()
                )
            # _insert bumps `updated` to the newest message; keep the exported value when it is later.
            conn.execute("UPDATE conversations SET title = ?, updated = max(updated, ?) WHERE id = ?", (conv.title, conv.updated, new_id))
        self._changed(new_id)
        return new_id

    # -- the suffix corpus ----------------------------------------------------------------------------
    def corpus_messages(self, conv_id: int | None = None) -> list[tuple[int, int, str]]:
        """(conversation id, message id, text) of every user and assistant message in the conversations (the
        chosen version of each reply; system prompts left out), of one conversation with ``conv_id``: what the
        suffix drafter's index copies from (:mod:`specchat.history.corpus`)."""
        where = "m.alternate_of IS NULL AND m.role IN ('user', 'assistant')"
        with self._lock:
            if conv_id is None:
                rows = self._conn.execute(
                    f"SELECT m.conversation_id, m.id, m.content FROM messages m WHERE {where}"
                    " ORDER BY m.conversation_id, m.idx"
                ).fetchall()
            else:
                rows = self._conn.execute(
                    f"SELECT m.conversation_id, m.id, m.content FROM messages m WHERE {where}"
                    " AND m.conversation_id = ? ORDER BY m.idx",
                    (conv_id,),
                ).fetchall()
        return [(int(c), int(i), str(t)) for c, i, t in rows]


def _version_key(m: Message) -> str:
    """What identifies one version of a reply (its text and exact tokens)."""
    return json.dumps([m.content, list(m.tokens)])


def _same(a: Message, b: Message) -> bool:
    """Message equality where a NaN timing equals NaN (dataclass ``==`` says NaN != NaN)."""
    if a == b:
        return True

    def norm(x: Any) -> Any:
        if isinstance(x, float) and math.isnan(x):
            return None
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items()}
        if isinstance(x, list):
            return [norm(v) for v in x]
        return x

    return norm(dataclasses.asdict(a)) == norm(dataclasses.asdict(b))


def _turn_from_row(s: Mapping[str, Any], message: Message) -> Turn:
    kwargs: dict[str, Any] = {}
    for name in TURN_INT_COLUMNS:
        kwargs[name] = int(s[name] or 0)
    for name in TURN_REAL_COLUMNS:
        kwargs[name] = None if name in TURN_OPTIONAL_COLUMNS and s[name] is None else _float_in(s[name])
    for name in TURN_TEXT_COLUMNS:
        kwargs[name] = s[name] or ""
    kwargs["speculative"] = bool(s["speculative"])
    kwargs["accepted_per_pos"] = json.loads(s["accepted_per_pos"])
    kwargs["text"] = message.content if s["turn_text"] is None else s["turn_text"]
    kwargs["tokens"] = list(message.tokens) if s["turn_tokens"] is None else json.loads(s["turn_tokens"])
    kwargs["kinds"] = list(message.kinds) if s["turn_kinds"] is None else json.loads(s["turn_kinds"])
    known = {f.name for f in dataclasses.fields(Turn)}
    if s["extra"]:
        kwargs.update({k: v for k, v in json.loads(s["extra"]).items() if k in known})
    return Turn(**{k: v for k, v in kwargs.items() if k in known})
