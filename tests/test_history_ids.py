"""Conversation ids are never reused (schema v2, AUTOINCREMENT), and a database written at schema v1 keeps
every row through the upgrade.

``tests/data/history-v1.sql`` is a database written by specchat's schema-v1 code (``HistoryStore`` at commit
eeb90d2: three conversations, the middle one deleted, turn stats with auto-K, sampling, a NaN, a stopped
reply), dumped with ``sqlite3.Connection.iterdump`` (which leaves out the two PRAGMAs, set again below).
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest

from specchat.engine.protocol import Message
from specchat.history import APPLICATION_ID, SCHEMA_VERSION, HistoryStore

V1_DUMP = Path(__file__).resolve().parent / "data" / "history-v1.sql"


def write_database(path: Path, dump: Path, version: int) -> None:
    """A database from a dump of an older schema ``version`` (iterdump leaves out the two PRAGMAs: set here)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.executescript(dump.read_text(encoding="utf-8"))
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()


def write_v1_database(path: Path) -> None:
    write_database(path, V1_DUMP, 1)


def test_a_deleted_conversation_id_is_never_given_out_again(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite3") as store:
        ids = [store.create_conversation(f"chat {i}") for i in range(3)]
        store.delete(ids[-1])  # the newest: without AUTOINCREMENT its id was max(id) + 1 again
        store.delete(ids[0])
        fresh = store.create_conversation("new chat")
        assert fresh not in ids and fresh > max(ids)
        data = store.export_json(ids[1])
        imported = store.import_json(data)
        assert imported > fresh
    with HistoryStore(tmp_path / "h.sqlite3") as store:  # across sessions too
        store.delete(imported)
        assert store.create_conversation("later") > imported


def test_a_v1_database_is_upgraded_with_all_its_data(tmp_path):
    path = tmp_path / "old.sqlite3"
    write_v1_database(path)
    raw = sqlite3.connect(str(path))
    before = {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("conversations", "messages", "turn_stats")}
    raw.close()
    assert [row[0] for row in before["conversations"]] == [1, 3]

    with HistoryStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        conv, messages = store.load(1)
        assert conv.title == "What is [bold]speculative[/] decoding?" and conv.n_messages == 3
        assert [(m.role, m.content) for m in messages] == [
            ("system", "be brief"), ("user", "What is [bold]speculative[/] decoding?"), ("assistant", "abc")
        ]
        turn = messages[2].stats
        assert turn is not None and turn.k == 3 and turn.acceptance == 0.625 and turn.tokens == [1, 2, 3]
        assert turn.accepted_per_pos[:2] == [0.75, 0.5] and math.isnan(turn.accepted_per_pos[2])
        records = store.records(1)[1]
        assert records[2].auto_k is True and records[2].sampling["seed"] == 7
        _, kept = store.load(3)
        assert kept[-1].stopped and kept[-1].stats.k == 4
        # the newest id (3) is taken: a new conversation gets 4, and after deleting it, 5
        new = store.create_conversation("after the upgrade")
        assert new == 4
        store.delete(new)
        assert store.create_conversation("again") == 5

    raw = sqlite3.connect(str(path))
    after = {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("conversations", "messages", "turn_stats")}
    assert after["conversations"][:2] == before["conversations"]  # same ids, same rows
    # v3 adds two columns to messages (alternates): every v1 row keeps its values, as a message of its own
    assert [row[:9] for row in after["messages"]] == before["messages"]
    assert {row[9:] for row in after["messages"]} == {(None, 0)}
    assert after["turn_stats"] == before["turn_stats"]
    assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
    sql = raw.execute("SELECT sql FROM sqlite_master WHERE name = 'conversations'").fetchone()[0]
    assert "AUTOINCREMENT" in sql
    assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'conversations_by_updated'").fetchone()[0] == 1
    raw.close()


def test_deleting_after_the_upgrade_still_cascades_to_messages_and_stats(tmp_path):
    path = tmp_path / "old.sqlite3"
    write_v1_database(path)
    with HistoryStore(path) as store:
        store.delete(1)
        with pytest.raises(Exception, match="no conversation with ID 1"):
            store.load(1)
    raw = sqlite3.connect(str(path))
    assert raw.execute("SELECT count(*) FROM messages WHERE conversation_id = 1").fetchone()[0] == 0
    assert raw.execute("SELECT count(*) FROM turn_stats WHERE message_id <= 3").fetchone()[0] == 0
    assert raw.execute("SELECT count(*) FROM messages").fetchone()[0] == 2  # conversation 3's
    raw.close()


def test_an_upgrade_that_would_break_a_foreign_key_is_rolled_back(tmp_path):
    """A v1 file with a message whose conversation is gone (foreign keys were off when it was written)."""
    path = tmp_path / "old.sqlite3"
    write_v1_database(path)
    raw = sqlite3.connect(str(path), isolation_level=None)
    raw.execute("INSERT INTO messages (conversation_id, idx, role, content, created) VALUES (99, 0, 'user', 'x', 'now')")
    raw.close()
    with pytest.raises(Exception, match="not a usable history database"):
        HistoryStore(path)
    raw = sqlite3.connect(str(path))
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 1  # untouched, nothing lost
    assert [r[0] for r in raw.execute("SELECT id FROM conversations")] == [1, 3]
    raw.close()


def test_message_rows_are_kept_when_a_store_with_foreign_keys_on_upgrades(tmp_path):
    """The table rebuild must not cascade: HistoryStore turns foreign keys on before it migrates."""
    path = tmp_path / "old.sqlite3"
    write_v1_database(path)
    with HistoryStore(path) as store:
        assert [c.n_messages for c in store.list_conversations()] == [2, 3]
        store.append_message(3, Message("user", "more"))
        assert store.load(3)[0].n_messages == 3
