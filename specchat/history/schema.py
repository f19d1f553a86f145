"""The history database's layout: its tables, its schema versions and the migrations between them.

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
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

APPLICATION_ID = 0x53504354  # "SPCT"
ROLES = ("system", "user", "assistant")
#: the largest id SQLite can hold (a signed 64-bit INTEGER)
MAX_ID = 2**63 - 1

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
