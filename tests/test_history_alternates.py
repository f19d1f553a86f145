"""History keeps the alternates of a regenerated reply (issue 11; schema v3): each version with its own stats,
which one the conversation continues from, exports that show them, and a v2 database upgraded with every row.

``tests/data/history-v2.sql`` is a database written by specchat's schema-v2 code (``HistoryStore`` at commit
500167b: a conversation whose reply was regenerated - replaced, as v2 did - then continued with a stopped reply;
a second conversation; a third deleted), dumped with ``sqlite3.Connection.iterdump`` (dates fixed afterwards).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from specchat.engine.protocol import Message
from specchat.history import SCHEMA_VERSION, HistoryError, HistoryStore, parse_export
from test_history import reply
from test_history_ids import write_database

V2_DUMP = Path(__file__).resolve().parent / "data" / "history-v2.sql"


def write_v2_database(path: Path) -> None:
    write_database(path, V2_DUMP, 2)


def regenerated(*versions: Message, chosen: int) -> Message:
    """A reply whose versions are ``versions`` (in the order generated), ``chosen`` the one the chat continues."""
    slot = versions[0]
    for v in versions[1:]:
        slot = slot.with_new_version(v)
    return slot.with_version(chosen)


def test_a_v2_database_is_upgraded_with_every_row(tmp_path):
    path = tmp_path / "v2.sqlite3"
    write_v2_database(path)
    conn = sqlite3.connect(str(path))
    before = {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("conversations", "messages", "turn_stats")}
    conn.close()
    with HistoryStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 3
        conv, records = store.records(1)
        assert conv.n_messages == 5 and sorted(c.n_messages for c in store.list_conversations()) == [1, 5]
        assert [r.message.content for r in records] == ["be brief", "Name a colour.", "Green.", "Another?", "Red"]
        assert all(not r.alternates and not r.message.alternates for r in records)
        assert records[2].auto_k is False and records[2].message.stats.text == "Green."
        assert records[4].message.stopped and records[4].message.stats.stop_reason == "stopped"
        assert store.create_conversation("after the upgrade") == 4  # ids are still never reused
        # the upgraded file keeps alternates from now on
        msgs = store.load(1)[1]
        msgs[-1] = msgs[-1].with_new_version(reply(5))
        store.sync(1, msgs)
        again = store.load(1)[1]
        assert [v.content for v in again[-1].versions()] == ["Red", "reply 5"] and again[-1].alternate_index == 1
    conn = sqlite3.connect(str(path))
    after_msgs = conn.execute("SELECT * FROM messages WHERE id <= 6 ORDER BY 1").fetchall()
    assert [row[:9] for row in after_msgs if row[0] != 5] == [row for row in before["messages"] if row[0] != 5]
    assert conn.execute("SELECT * FROM turn_stats WHERE message_id = 3").fetchall() == [
        row for row in before["turn_stats"] if row[0] == 3
    ]
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'messages_in_order'").fetchone() is not None
    conn.close()


def test_alternates_round_trip_with_their_own_stats_and_run_details(tmp_path):
    with HistoryStore(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation(target="tiny.gguf", draft="ngram")
        first = reply(1)
        msgs = [Message("user", "question"), first]
        store.sync(cid, msgs, target="tiny.gguf", auto_k=True)  # the first version, made with auto-K
        msgs[-1] = first.with_new_version(reply(2, draft_n=0, draft_n_accepted=0, acceptance=None, speculative=False))
        store.sync(cid, msgs, target="tiny.gguf", auto_k=False)  # regenerated without speculation
        msgs[-1] = msgs[-1].with_new_version(reply(3)).with_version(1)  # a third, but the second is chosen
        store.sync(cid, msgs, target="tiny.gguf", auto_k=False)

        conv, records = store.records(cid)
        assert conv.n_messages == 2
        chosen = records[-1]
        assert chosen.message.content == "reply 2" and chosen.message.alternate_index == 1
        versions = chosen.version_records()
        assert [v.message.content for v in versions] == ["reply 1", "reply 2", "reply 3"]
        assert [v.message.stats.text for v in versions] == ["reply 1", "reply 2", "reply 3"]
        assert versions[1].message.stats.acceptance is None  # nothing drafted: None survives the database
        assert [v.auto_k for v in versions] == [True, False, False]  # each version keeps its own run details
        assert store.load(cid)[1][-1].versions()[2].stats.text == "reply 3"
        # search finds text that only a kept version has
        assert [h.conversation.id for h in store.search_conversations("reply 3")] == [cid]

        data = store.export_json(cid)
        exported = data["messages"][-1]
        assert exported["content"] == "reply 2" and exported["alternate_index"] == 1
        assert [a["content"] for a in exported["alternates"]] == ["reply 1", "reply 3"]
        assert exported["alternates"][0]["run"]["auto_k"] is True
        assert exported["stats"]["acceptance"] is None
        text = json.dumps(data, allow_nan=False)
        new = store.import_json(json.loads(text))
        assert store.export_json(new)["messages"] == data["messages"]

        md = store.export_markdown(cid)
        assert "the conversation continues from version 2 of 3" in md
        assert "#### 2. Version 1 of 3" in md and "#### 2. Version 3 of 3" in md and "#### 2. Version 2 of 3" not in md
        assert "| 2 (v1) |" in md and "| 2 (v3) |" in md

        # an edit drops the reply and its versions (their rows cascade)
        store.sync(cid, [Message("user", "another question")])
        raw = sqlite3.connect(str(tmp_path / "h.sqlite3"))
        assert raw.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (cid,)).fetchone()[0] == 1
        raw.close()


def test_imported_alternates_are_validated() -> None:
    base = {"format": "specchat-conversation", "version": 2}
    good = {"role": "assistant", "content": "b", "alternates": [{"role": "assistant", "content": "a"}], "alternate_index": 1}
    conv, records = parse_export({**base, "messages": [{"role": "user", "content": "q"}, good]}, source="f.json")
    assert [m.content for m in records[1].message.versions()] == ["a", "b"]
    for bad, msg in (
        ({"role": "user", "content": "q", "alternates": [{"role": "assistant", "content": "a"}]}, "only a reply"),
        ({**good, "alternate_index": 2}, r"alternate_index must be 0\.\.1"),
        ({**good, "alternates": [{"role": "user", "content": "a"}]}, "alternates are replies"),
    ):
        with pytest.raises(HistoryError, match=rf"^f\.json: messages\[1\]: .*{msg}"):
            parse_export({**base, "messages": [{"role": "user", "content": "q"}, bad]}, source="f.json")
    with pytest.raises(HistoryError, match="export format version 3 is newer than this specchat reads"):
        parse_export({**base, "version": 3, "messages": []}, source="f.json")


def test_flipping_an_earlier_reply_keeps_the_later_messages_with_their_dates_and_run_details(tmp_path, monkeypatch):
    """A reply keeps its versions once the chat goes on, and any of them can be chosen again (issue 22): the
    messages after it are written again behind it (sync keeps only the common prefix), each with the date and
    run details it was saved with, not the flip's."""
    import specchat.history.store as store_module

    with HistoryStore(tmp_path / "h.sqlite3") as store:
        cid = store.create_conversation(target="tiny.gguf", draft="ngram")
        monkeypatch.setattr(store_module, "now_iso", lambda: "2026-01-01T10:00:00+00:00")
        msgs = [Message("user", "question"), reply(1)]
        store.sync(cid, msgs, target="tiny.gguf", auto_k=True)
        msgs[-1] = msgs[-1].with_new_version(reply(2))
        store.sync(cid, msgs, target="tiny.gguf", auto_k=True)
        msgs += [Message("user", "and then?"), reply(3)]
        store.sync(cid, msgs, target="tiny.gguf", auto_k=True)
        _, before = store.records(cid)

        monkeypatch.setattr(store_module, "now_iso", lambda: "2026-01-02T12:00:00+00:00")
        msgs[1] = msgs[1].with_version(0)  # the earlier reply's first version, chosen a day later
        store.sync(cid, msgs, target="other.gguf", auto_k=False)

        _, after = store.records(cid)
        assert [r.message.content for r in after] == ["question", "reply 1", "and then?", "reply 3"]
        assert after[1].message.alternate_index == 0 and [v.message.content for v in after[1].version_records()] == [
            "reply 1", "reply 2"
        ]
        assert [r.created for r in after] == [r.created for r in before] == ["2026-01-01T10:00:00+00:00"] * 4
        assert [(r.target, r.auto_k) for r in after[1:]] == [(r.target, r.auto_k) for r in before[1:]]
        assert after[3].target == "tiny.gguf" and after[3].auto_k is True  # not the flip's settings
        assert [(m.content, m.alternate_index) for m in store.load(cid)[1]] == [(m.content, m.alternate_index) for m in msgs]
