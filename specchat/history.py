"""Saved conversations: one SQLite database (stdlib :mod:`sqlite3`) in the user data dir.

Durability: the database runs in WAL mode with ``synchronous=FULL`` and every message is written in its
own ``BEGIN IMMEDIATE`` transaction together with its turn statistics, so a crash (or a kill) loses at
most the reply being generated, never an earlier turn; a half-written message never appears.

Schema versions live in ``PRAGMA user_version``; :data:`MIGRATIONS` lists the steps from an empty file,
each applied in its own transaction with the version bump, so an interrupted upgrade leaves the previous
version intact. ``PRAGMA application_id`` marks the file as specchat's so another program's database is
refused instead of modified.

Tables::

    conversations (id AUTOINCREMENT: never reused after a delete, title, created, updated, target, draft,
                   system_prompt)
    messages      (id, conversation_id, idx, role, content, tokens json, kinds json, stopped, created,
                   alternate_of, version)
    turn_stats    (message_id, target, drafter, k, auto_k, speculative, sampling json, the Turn timings
                   (prompt_n ... stop_reason), accepted_per_pos json, extra json)

Alternates (schema v3): regenerating a reply keeps the previous one. The replies to one user message are
*versions* (:class:`~specchat.engine.protocol.Message`: ``versions()``, ``alternates``, ``alternate_index``):
the chosen one is the conversation's message at its ``idx``; every other version is a ``messages`` row with the
same ``idx`` and ``alternate_of`` = the chosen row's id (deleted with it), and ``version`` orders them all (the
chosen row's own ``version`` is its place). Each version keeps its own turn stats. Exports list them under
the chosen reply (JSON: ``alternates`` and ``alternate_index``; Markdown: "Other versions of this reply").

Untrusted text: an import file or a hand-edited database may hold anything. Imports are validated field by field
(:func:`parse_export`: dates are ISO 8601 dates, roles, token kinds and stop reasons come from their known sets,
every string is valid Unicode) and their one-line labels (title, model names, drafter) are cleaned with
:func:`specchat.sanitize.sanitize_line`; labels read back from the database are cleaned the same way. Message
text is stored exactly as written (a reply's text must stay consistent with its tokens) and made inert where
it is shown: :func:`render_markdown` and every CLI and TUI display go through :mod:`specchat.sanitize`.

Timestamps are ISO 8601 UTC strings. Export formats: :meth:`HistoryStore.export_json` (lossless; imported
by :meth:`HistoryStore.import_json` and readable with :func:`messages_from_export` for
``specchat generate --conversation FILE.json``) and :meth:`HistoryStore.export_markdown` (for people).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, field_validator, model_validator

from specchat.engine.events import PIECE_KINDS, StopReason, Turn
from specchat.engine.protocol import Message
from specchat.errors import UserError
from specchat.sanitize import read_stdin_text, sanitize, sanitize_line

APPLICATION_ID = 0x53504354  # "SPCT"
EXPORT_FORMAT = "specchat-conversation"
#: 2: a reply may carry ``alternates`` (the other versions, regenerate) and ``alternate_index``; files of
#: version 1 (no alternates) read the same
EXPORT_VERSION = 2
ROLES = ("system", "user", "assistant")
STOP_REASONS: tuple[str, ...] = get_args(StopReason)
#: the largest id SQLite can hold (a signed 64-bit INTEGER)
MAX_ID = 2**63 - 1


class HistoryError(UserError):
    """The history database or an export file cannot be used (missing, foreign, newer, malformed)."""


class UnknownConversationError(HistoryError):
    """No conversation with that id."""


# -- schema -------------------------------------------------------------------------------------------

#: Turn fields stored in columns of their own; any other Turn field goes to ``turn_stats.extra`` (JSON),
#: so a field added to Turn later survives a round trip without a migration.
TURN_INT_COLUMNS = ("prompt_n", "predicted_n", "draft_n", "draft_n_accepted", "n_steps", "n_spec_steps", "k")
TURN_REAL_COLUMNS = (
    "prompt_ms",
    "predicted_ms",
    "predicted_per_second",
    "acceptance",
    "mean_len",
    "draft_ms_per_step",
    "verify_ms_per_step",
    "overhead_ms",
    "step_ms",
)
#: REAL columns whose NULL is None (a figure that does not exist: no drafts, no acceptance), not NaN
TURN_OPTIONAL_COLUMNS = ("acceptance",)
TURN_TEXT_COLUMNS = ("stop_reason", "drafter")
TURN_COLUMNS = TURN_INT_COLUMNS + TURN_REAL_COLUMNS + TURN_TEXT_COLUMNS + ("speculative", "accepted_per_pos")
#: Turn fields that normally repeat the message; stored (as turn_text/turn_tokens/turn_kinds) only if different.
TURN_MESSAGE_FIELDS = {"text": "content", "tokens": "tokens", "kinds": "kinds"}

_V1 = (
    f"PRAGMA application_id = {APPLICATION_ID}",
    """CREATE TABLE conversations (
        id            INTEGER PRIMARY KEY,
        title         TEXT NOT NULL DEFAULT '',
        created       TEXT NOT NULL,
        updated       TEXT NOT NULL,
        target        TEXT NOT NULL DEFAULT '',
        draft         TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT ''
    )""",
    """CREATE TABLE messages (
        id              INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        idx             INTEGER NOT NULL CHECK (idx >= 0),
        role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content         TEXT NOT NULL,
        tokens          TEXT NOT NULL DEFAULT '[]',
        kinds           TEXT NOT NULL DEFAULT '[]',
        stopped         INTEGER NOT NULL DEFAULT 0,
        created         TEXT NOT NULL,
        UNIQUE (conversation_id, idx)
    )""",
    """CREATE TABLE turn_stats (
        message_id           INTEGER PRIMARY KEY REFERENCES messages(id) ON DELETE CASCADE,
        target               TEXT,
        drafter              TEXT NOT NULL DEFAULT '',
        k                    INTEGER NOT NULL DEFAULT 0,
        auto_k               INTEGER,
        speculative          INTEGER NOT NULL DEFAULT 0,
        sampling             TEXT,
        prompt_n             INTEGER NOT NULL,
        prompt_ms            REAL,
        predicted_n          INTEGER NOT NULL,
        predicted_ms         REAL,
        predicted_per_second REAL,
        draft_n              INTEGER NOT NULL,
        draft_n_accepted     INTEGER NOT NULL,
        acceptance           REAL,
        mean_len             REAL,
        accepted_per_pos     TEXT NOT NULL DEFAULT '[]',
        draft_ms_per_step    REAL,
        verify_ms_per_step   REAL,
        overhead_ms          REAL,
        step_ms              REAL,
        n_steps              INTEGER NOT NULL,
        n_spec_steps         INTEGER NOT NULL,
        stop_reason          TEXT NOT NULL,
        turn_text            TEXT,
        turn_tokens          TEXT,
        turn_kinds           TEXT,
        extra                TEXT
    )""",
    "CREATE INDEX conversations_by_updated ON conversations(updated)",
)

# v2: conversation ids are never reused. Without AUTOINCREMENT SQLite gives a new row max(id) + 1, so deleting
# the newest conversation handed its id to the next one and old exports (``specchat-<id>-...``) pointed at a
# new chat. AUTOINCREMENT keeps the largest id ever used in sqlite_sequence (https://sqlite.org/autoinc.html).
# SQLite cannot add it to an existing table: the table is rebuilt and its rows copied with their ids
# (https://sqlite.org/lang_altertable.html#otheralter; :func:`migrate` turns foreign keys off meanwhile, so
# dropping the old table does not cascade to the messages). Ids deleted above the largest remaining one
# before this upgrade are not known any more; every id given out after it is new.
_V2 = (
    """CREATE TABLE conversations_v2 (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        title         TEXT NOT NULL DEFAULT '',
        created       TEXT NOT NULL,
        updated       TEXT NOT NULL,
        target        TEXT NOT NULL DEFAULT '',
        draft         TEXT NOT NULL DEFAULT '',
        system_prompt TEXT NOT NULL DEFAULT ''
    )""",
    "INSERT INTO conversations_v2 (id, title, created, updated, target, draft, system_prompt)"
    " SELECT id, title, created, updated, target, draft, system_prompt FROM conversations",
    "DROP TABLE conversations",
    "ALTER TABLE conversations_v2 RENAME TO conversations",
    "CREATE INDEX conversations_by_updated ON conversations(updated)",
)

# v3: a reply keeps its alternates (regenerate). They are message rows too (their own content, tokens, kinds
# and turn stats) with ``alternate_of`` = the chosen reply's id and the same ``idx``, so UNIQUE (conversation_id,
# idx) must hold for the conversation's own messages only: a partial unique index. A table constraint cannot be
# dropped: the table is rebuilt and its rows copied with their ids (as in v2), and turn_stats, which references
# messages by name, keeps pointing at the same ids.
_V3 = (
    """CREATE TABLE messages_v3 (
        id              INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        idx             INTEGER NOT NULL CHECK (idx >= 0),
        role            TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content         TEXT NOT NULL,
        tokens          TEXT NOT NULL DEFAULT '[]',
        kinds           TEXT NOT NULL DEFAULT '[]',
        stopped         INTEGER NOT NULL DEFAULT 0,
        created         TEXT NOT NULL,
        alternate_of    INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        version         INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0)
    )""",
    "INSERT INTO messages_v3 (id, conversation_id, idx, role, content, tokens, kinds, stopped, created)"
    " SELECT id, conversation_id, idx, role, content, tokens, kinds, stopped, created FROM messages",
    "DROP TABLE messages",
    "ALTER TABLE messages_v3 RENAME TO messages",
    "CREATE UNIQUE INDEX messages_in_order ON messages(conversation_id, idx) WHERE alternate_of IS NULL",
    "CREATE INDEX messages_alternates ON messages(alternate_of) WHERE alternate_of IS NOT NULL",
)

#: Migration i (0-based) takes the schema from user_version i to i + 1. Append, never edit.
MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlite3.Connection, migrations: Sequence[Sequence[str]] = MIGRATIONS) -> int:
    """Bring the database to ``len(migrations)``; each step is one transaction with its version bump.

    The connection must be in autocommit mode (``isolation_level=None``). Returns the final version.
    Foreign keys are off during the steps (SQLite's procedure for schema changes: rebuilding a table must
    not cascade deletes into the tables that reference it) and each step must leave ``PRAGMA
    foreign_key_check`` clean, else it is rolled back; the connection's foreign-key setting is restored.
    """
    target = len(migrations)
    foreign_keys = conn.execute("PRAGMA foreign_keys").fetchone()[0]
    conn.execute("PRAGMA foreign_keys = OFF")  # a no-op inside a transaction: set before BEGIN
    try:
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version >= target:
                    conn.execute("COMMIT")
                    return version
                for statement in migrations[version]:
                    conn.execute(statement)
                broken = conn.execute("PRAGMA foreign_key_check").fetchone()
                if broken is not None:
                    raise sqlite3.IntegrityError(
                        f"schema migration {version + 1} broke a foreign key (table {broken[0]}, row {broken[1]})"
                    )
                conn.execute(f"PRAGMA user_version = {version + 1}")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
    finally:
        conn.execute(f"PRAGMA foreign_keys = {int(foreign_keys)}")


# -- records ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Conversation:
    id: int
    title: str
    created: str
    updated: str
    target: str
    draft: str
    system_prompt: str
    n_messages: int = 0


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A conversation found by :meth:`HistoryStore.search_conversations` and where: the first message
    (``role``, its ``text``) that contains the query, or ``role = None`` when only the title does (or no
    query was given)."""

    conversation: Conversation
    role: str | None = None
    text: str = ""


@dataclass(slots=True)
class StoredMessage:
    """A message as saved: the :class:`Message` plus what the database knows around it."""

    id: int
    idx: int
    created: str
    message: Message
    target: str | None = None  # the target model of the turn (assistant messages with stats)
    auto_k: bool | None = None
    sampling: dict[str, Any] | None = None
    #: the other versions of this reply as saved, in :meth:`Message.versions` order without this one (their
    #: messages are ``message.alternates``)
    alternates: list[StoredMessage] = dataclasses.field(default_factory=list)

    def version_records(self) -> list[StoredMessage]:
        """Every version's record in :meth:`Message.versions` order (this one at ``message.alternate_index``)."""
        i = self.message.alternate_index if self.alternates else 0
        return [*self.alternates[:i], self, *self.alternates[i:]]


def _conversation(row: Sequence[Any], n_messages: int) -> Conversation:
    """A conversation read from the database, its one-line labels (title, model names, dates) made inert: the
    file may have been written by something other than specchat."""
    conv_id, title, created, updated, target, draft, system_prompt = row[:7]
    return Conversation(
        conv_id, sanitize_line(title), sanitize_line(created), sanitize_line(updated), sanitize_line(target),
        sanitize_line(draft), system_prompt, n_messages=n_messages,
    )


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def default_title(text: str, limit: int = 60) -> str:
    """First non-empty line of a user message, whitespace collapsed, cut at ``limit`` characters."""
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
    return ""


# -- the store ----------------------------------------------------------------------------------------


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

    def set_models(self, conv_id: int, *, target: str | None = None, draft: str | None = None) -> None:
        """Record a model change of a conversation (the per-turn stats keep each turn's own)."""
        with self._transaction() as conn:
            self._require(conn, conv_id)
            if target is not None:
                conn.execute("UPDATE conversations SET target = ? WHERE id = ?", (target, conv_id))
            if draft is not None:
                conn.execute("UPDATE conversations SET draft = ? WHERE id = ?", (draft, conv_id))

    def get_conversation(self, conv_id: int) -> Conversation:
        with self._lock:
            row = self._require(self._conn, conv_id)
            n = self._conn.execute(
                "SELECT count(*) FROM messages WHERE conversation_id = ? AND alternate_of IS NULL", (conv_id,)
            ).fetchone()[0]
        return _conversation(row, n)

    def list_conversations(self) -> list[Conversation]:
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
            return self._insert(conn, conv_id, None, message, target, auto_k, sampling, created)

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
            return self._insert(conn, conv_id, row[1], message, target, auto_k, sampling, None)

    def truncate_after(self, conv_id: int, idx: int) -> int:
        """Delete the messages after position ``idx`` (``-1`` deletes all); returns how many (edit/regenerate)."""
        with self._transaction() as conn:
            self._require(conn, conv_id)
            cur = conn.execute("DELETE FROM messages WHERE conversation_id = ? AND idx > ?", (conv_id, idx))
            conn.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now_iso(), conv_id))
            return cur.rowcount

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
        # a reply regenerated since: its earlier versions keep the run details (and dates) they were saved with
        known = {_version_key(v.message): v for r in records[common:] for v in (r, *r.alternates)}
        ids = []
        for m in messages[common:]:
            runs = [known.get(_version_key(v)) for v in m.versions()] if m.alternates else None
            with self._transaction() as conn:
                ids.append(self._insert(conn, conv_id, None, m, target, auto_k, sampling, None, versions=runs))
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
    def records(self, conv_id: int) -> tuple[Conversation, list[StoredMessage]]:
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

    def load(self, conv_id: int) -> tuple[Conversation, list[Message]]:
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
        return new_id


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


# -- export format ------------------------------------------------------------------------------------


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


def build_export(conv: Conversation, records: Sequence[StoredMessage]) -> dict[str, Any]:
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
    conv = Conversation(0, title, stamp, stamp, target, draft, system_prompt, len(messages))
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


def parse_export(data: Any, *, source: str = "import data") -> tuple[Conversation, list[StoredMessage]]:
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
    conv = Conversation(0, c.title, created, c.updated or created, c.target, c.draft, c.system_prompt, len(parsed.messages))
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
    import sys

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


def messages_from_export(data: Any, *, source: str = "conversation file") -> tuple[Conversation, list[Message]]:
    """Messages (with rebuilt Turn stats) of export data, e.g. for ``specchat generate --conversation``."""
    conv, records = parse_export(data, source=source)
    return conv, [r.message for r in records]


# -- export files -------------------------------------------------------------------------------------


def export_slug(title: str, limit: int = 40) -> str:
    """A file-name-safe slug of a title: accents dropped (NFKD), every other run of characters that is not an
    ASCII letter or digit becomes one ``-``, lower case, at most ``limit`` characters; ``chat`` if nothing is left.
    """
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_title.lower()).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0] if "-" in slug[:limit] else slug[:limit]
    return slug.strip("-") or "chat"


def export_filename(conv_id: int | None, title: str, suffix: str = ".md", n: int = 1) -> str:
    """The one naming scheme of exports written by the app: ``specchat-<id>-<slug>.md`` (``specchat-unsaved-...``
    for a chat that is not in the history database); ``n`` > 1 adds ``-n`` before the suffix."""
    stem = f"specchat-{conv_id if conv_id is not None else 'unsaved'}-{export_slug(title)}"
    return f"{stem}{'' if n <= 1 else f'-{n}'}{suffix}"


def write_export(directory: str | Path, conv_id: int | None, title: str, text: str, suffix: str = ".md") -> Path:
    """Write ``text`` to a new file named by :func:`export_filename` in ``directory`` (created if needed).

    Never overwrites: the file is created exclusively (``open(..., "x")``), and a taken name gets ``-2``,
    ``-3``... Returns the full path written; raises :class:`HistoryError` with one line if it cannot write.
    """
    directory = Path(directory).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            path = directory / export_filename(conv_id, title, suffix, n)
            try:
                with open(path, "x", encoding="utf-8") as f:
                    f.write(text)
                return path.absolute()
            except FileExistsError:
                n += 1
    except OSError as exc:
        raise HistoryError(f"cannot write the export to {directory}: {exc.strerror or exc}") from None


# -- Markdown -----------------------------------------------------------------------------------------


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def format_time(stamp: str) -> str:
    """``YYYY-MM-DD HH:MM UTC``; a stamp that is not a date is shown as inert text."""
    try:
        dt = datetime.fromisoformat(stamp)
    except (TypeError, ValueError):
        return sanitize_line(stamp)
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M UTC")


def _num(x: float, fmt: str) -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, fmt)


def k_used(turn: Turn) -> str:
    """The K a turn's drafting rounds used: ``4``, or the range ``2–16`` when it changed (auto-K, a key).

    Turns saved before :class:`Turn` recorded the range (``k_max`` = 0) show the K control they stored.
    """
    if turn.k_max <= 0:
        return str(turn.k)
    return str(turn.k_max) if turn.k_min == turn.k_max else f"{turn.k_min}\u2013{turn.k_max}"


def _stat_cells(record: StoredMessage) -> dict[str, str]:
    t = record.message.stats
    assert t is not None
    if t.draft_n:
        acceptance = f"{_num(None if t.acceptance is None else t.acceptance * 100, '.1f')} % ({t.draft_n_accepted}/{t.draft_n})"
        mean_len = _num(t.mean_len, ".2f")
    else:
        acceptance, mean_len = "–", "–"
    k = k_used(t) + (" auto" if record.auto_k else "")
    drafter = t.drafter if t.speculative or t.draft_n else (t.drafter + " (off)" if t.drafter else "off")
    return {
        "tok/s": _num(t.predicted_per_second, ".1f"),
        "acceptance": acceptance,
        "mean len": mean_len,
        "K": k if t.speculative or t.draft_n else "–",
        "drafter": sanitize_line(drafter),
        "tokens": str(t.predicted_n),
        "prompt": f"{t.prompt_n} tok / {_num(t.prompt_ms, '.0f')} ms",
        "stop": sanitize_line(t.stop_reason),
    }


def _stat_summary(record: StoredMessage) -> str:
    cells = _stat_cells(record)
    t = record.message.stats
    assert t is not None
    summary = f"{cells['tok/s']} tok/s"
    if t.draft_n:
        summary += f" · acceptance {cells['acceptance']} · mean len {cells['mean len']} · K {cells['K']}"
    return summary + f" · {cells['drafter']}"


def render_markdown(conv: Conversation, records: Sequence[StoredMessage]) -> str:
    """A conversation as Markdown readable on its own: title, model pair, messages, per-turn stats table.

    For people (``specchat history show`` prints it on the terminal): every text in it is made inert
    (:mod:`specchat.sanitize`); the JSON export is the lossless form.
    """
    title = sanitize_line(conv.title) or f"Conversation {conv.id}"
    lines = [f"# {title}", ""]
    pair = f"target `{sanitize_line(conv.target) or '?'}`, draft `{sanitize_line(conv.draft) or '?'}`"
    lines += [
        f"- **Model pair:** {pair}",
        f"- **Created:** {format_time(conv.created)} · **updated:** {format_time(conv.updated)}",
        f"- **Messages:** {len(records)}",
    ]
    if conv.system_prompt and not any(r.message.role == "system" for r in records):
        lines.append(f"- **System prompt:** {sanitize_line(conv.system_prompt)}")
    lines.append("")
    turns: list[tuple[str, StoredMessage]] = []
    for number, record in enumerate(records, start=1):
        m = record.message
        lines += ["---", "", f"### {number}. {m.role.capitalize()}", ""]
        lines.append(sanitize(m.content) if m.content else "*(empty)*")
        lines.append("")
        if m.stopped:
            lines += ["*(stopped before the end)*", ""]
        if m.stats is not None:
            lines += [f"*{_stat_summary(record)}*", ""]
            turns.append((str(number), record))
        if record.alternates:
            versions = record.version_records()
            chosen = m.alternate_index
            lines += [
                f"*Other versions of this reply (regenerated): the conversation continues from version {chosen + 1} "
                f"of {len(versions)}, above.*",
                "",
            ]
            for j, version in enumerate(versions):
                if version is record:
                    continue
                vm = version.message
                lines += [f"#### {number}. Version {j + 1} of {len(versions)}", ""]
                lines.append(sanitize(vm.content) if vm.content else "*(empty)*")
                lines.append("")
                if vm.stopped:
                    lines += ["*(stopped before the end)*", ""]
                if vm.stats is not None:
                    lines += [f"*{_stat_summary(version)}*", ""]
                    turns.append((f"{number} (v{j + 1})", version))
    if turns:
        header = ["#", "tok/s", "acceptance", "mean len", "K", "drafter", "tokens", "prompt", "stop"]
        lines += ["---", "", "## Turn statistics", ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---:" if h not in ("drafter", "stop") else "---" for h in header) + "|")
        for number, record in turns:
            cells = _stat_cells(record)
            lines.append("| " + " | ".join(_cell(v) for v in [number, *(cells[h] for h in header[1:])]) + " |")
        lines.append("")
        lines.append(
            "tok/s = generated tokens per second of the reply; acceptance = draft tokens kept / drafted; "
            "mean len = tokens per verify step (1 + accepted / steps with a draft), as llama.cpp reports it."
        )
        lines.append("")
    return "\n".join(lines)
