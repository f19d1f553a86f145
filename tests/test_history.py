"""History: real SQLite files in tmp_path. Schema and migrations, one transaction per message (crash
safety), regenerate/edit, JSON round trip, Markdown export, and the ``specchat history`` CLI paths.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import types
from dataclasses import replace
from pathlib import Path

import pytest

from specchat.engine.controls import SamplingParams
from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.history import (
    APPLICATION_ID,
    EXPORT_FORMAT,
    EXPORT_VERSION,
    MIGRATIONS,
    SCHEMA_VERSION,
    HistoryError,
    HistoryStore,
    UnknownConversationError,
    export_messages,
    messages_from_export,
    migrate,
    parse_export,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> types.SimpleNamespace:
    """No SPECCHAT_* variables; HOME and the XDG config/data dirs inside tmp_path."""
    for name in list(os.environ):
        if name.upper().startswith("SPECCHAT_"):
            monkeypatch.delenv(name)
    ns = types.SimpleNamespace(
        home=tmp_path / "home", config_home=tmp_path / "xdg-config", data_home=tmp_path / "xdg-data", tmp=tmp_path
    )
    for d in (ns.home, ns.config_home, ns.data_home):
        d.mkdir()
    monkeypatch.setenv("HOME", str(ns.home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ns.config_home))
    monkeypatch.setenv("XDG_DATA_HOME", str(ns.data_home))
    ns.default_db = ns.data_home / "specchat" / "history.sqlite3"
    return ns


def make_turn(i: int = 0, **kw) -> Turn:
    tokens = [100 + i, 101 + i, 102 + i, 103 + i]
    kinds = ["accepted", "accepted", "rejected", "corrected"]
    values = dict(
        prompt_n=30 + i,
        prompt_ms=81.25 + i,
        predicted_n=4,
        predicted_ms=40.5,
        predicted_per_second=98.76543209876543,
        draft_n=9,
        draft_n_accepted=6,
        acceptance=6 / 9,
        mean_len=3.0,
        accepted_per_pos=[1.0, 2 / 3, 1 / 3],
        draft_ms_per_step=0.125,
        verify_ms_per_step=11.1,
        overhead_ms=1.7,
        step_ms=39.9,
        n_steps=3,
        n_spec_steps=3,
        stop_reason="eos",
        text=f"reply {i}",
        tokens=tokens,
        kinds=kinds,
        k=3,
        drafter="ngram",
        speculative=True,
    )
    values.update(kw)
    return Turn(**values)


def reply(i: int = 0, **kw) -> Message:
    turn = make_turn(i, **kw)
    return Message("assistant", turn.text, list(turn.tokens), list(turn.kinds), turn)


def conversation(store: HistoryStore, turns: int = 2) -> tuple[int, list[Message]]:
    cid = store.create_conversation(target="tiny-target.gguf", draft="ngram", system_prompt="Be brief.")
    messages = [Message("system", "Be brief.")]
    store.append_message(cid, messages[0])
    for i in range(turns):
        user = Message("user", f"question {i}")
        store.append_message(cid, user)
        answer = reply(i)
        store.append_message(cid, answer, auto_k=bool(i % 2), sampling=SamplingParams(temperature=0.5, seed=i))
        messages += [user, answer]
    return cid, messages


@pytest.fixture
def store(tmp_path: Path):
    with HistoryStore(tmp_path / "h.sqlite3") as s:
        yield s


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


# -- schema ---------------------------------------------------------------------------------------------


def test_new_database_schema_pragmas_and_columns(tmp_path):
    path = tmp_path / "sub" / "dir" / "h.sqlite3"  # parent dirs are created
    HistoryStore(path).close()
    conn = raw(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in ("conversations", "messages", "turn_stats")}
    assert cols["conversations"] == ["id", "title", "created", "updated", "target", "draft", "system_prompt"]
    assert cols["messages"] == [
        "id", "conversation_id", "idx", "role", "content", "tokens", "kinds", "stopped", "created", "alternate_of",
        "version",
    ]
    for name in (
        "message_id target drafter k auto_k sampling prompt_n prompt_ms predicted_n predicted_ms predicted_per_second "
        "draft_n draft_n_accepted acceptance mean_len accepted_per_pos draft_ms_per_step verify_ms_per_step "
        "overhead_ms stop_reason"
    ).split():
        assert name in cols["turn_stats"], name


def test_foreign_keys_are_enforced(store):
    with pytest.raises(UnknownConversationError):
        store.append_message(42, Message("user", "hi"))
    with pytest.raises(sqlite3.IntegrityError):
        with store._transaction() as conn:
            conn.execute("INSERT INTO messages (conversation_id, idx, role, content, created) VALUES (42, 0, 'user', 'x', 'now')")


# -- writing and reading ----------------------------------------------------------------------------------


def test_messages_and_turn_stats_round_trip(store):
    cid, messages = conversation(store, turns=2)
    meta, loaded = store.load(cid)
    assert loaded == messages
    assert isinstance(loaded[2].stats, Turn) and loaded[2].stats == messages[2].stats
    assert loaded[2].stats.accepted_per_pos == [1.0, 2 / 3, 1 / 3]  # floats exact
    assert (meta.title, meta.target, meta.draft, meta.system_prompt, meta.n_messages) == (
        "question 0", "tiny-target.gguf", "ngram", "Be brief.", 5
    )
    _, records = store.records(cid)
    assert [r.idx for r in records] == [0, 1, 2, 3, 4]
    assert records[2].target == "tiny-target.gguf"  # the conversation's target by default
    assert records[2].auto_k is False and records[4].auto_k is True
    assert records[4].sampling == {"temperature": 0.5, "top_k": 40, "top_p": 0.95, "seed": 1}
    assert records[1].target is None and records[1].message.stats is None


def test_turn_fields_that_differ_from_the_message_are_kept(store):
    cid = store.create_conversation()
    m = reply(0)
    m.tokens = m.tokens + [2]  # e.g. the message keeps an end-of-turn token the Turn did not count
    m.stopped = True
    store.append_message(cid, m, target="other.gguf")
    (got,) = store.load(cid)[1]
    assert got == m and got.stats.tokens == m.stats.tokens != got.tokens
    assert store.records(cid)[1][0].target == "other.gguf"


def test_unknown_extra_turn_fields_from_another_version_are_ignored(store, tmp_path):
    cid = store.create_conversation()
    store.append_message(cid, reply(0))
    conn = raw(tmp_path / "h.sqlite3")
    conn.execute("UPDATE turn_stats SET extra = ?", (json.dumps({"field_from_the_future": 1, "k": 7}),))
    (got,) = store.load(cid)[1]
    assert got.stats.k == 7 and got.stats == replace(make_turn(0), k=7)


def test_nan_timing_survives_storage_and_exports_as_null(store):
    cid = store.create_conversation()
    store.append_message(cid, reply(0, predicted_per_second=math.nan))
    (got,) = store.load(cid)[1]
    assert math.isnan(got.stats.predicted_per_second)
    data = json.loads(json.dumps(store.export_json(cid), allow_nan=False))
    assert data["messages"][0]["stats"]["predicted_per_second"] is None
    (back,) = store.load(store.import_json(data))[1]
    assert math.isnan(back.stats.predicted_per_second)


def test_regenerate_replaces_only_the_last_reply(store, tmp_path):
    cid, messages = conversation(store, turns=2)
    ids_before = [r.id for r in store.records(cid)[1]]
    new = reply(9)
    new_id = store.replace_last_assistant(cid, new)
    _, records = store.records(cid)
    assert [r.message for r in records] == messages[:-1] + [new]
    assert [r.id for r in records[:-1]] == ids_before[:-1] and records[-1].id == new_id and records[-1].idx == 4
    conn = raw(tmp_path / "h.sqlite3")
    assert conn.execute("SELECT count(*) FROM turn_stats").fetchone()[0] == 2  # the old reply's stats are gone
    store.truncate_after(cid, 3)
    with pytest.raises(ValueError, match="does not end with an assistant message"):
        store.replace_last_assistant(cid, reply(1))
    with pytest.raises(ValueError):
        store.replace_last_assistant(cid, Message("user", "x"))


def test_edit_last_user_message_via_truncate(store):
    cid, messages = conversation(store, turns=2)
    assert store.truncate_after(cid, 2) == 2  # drop the last user message and its reply
    store.append_message(cid, Message("user", "question 1, edited"))
    store.append_message(cid, reply(5))
    assert store.load(cid)[1] == messages[:3] + [Message("user", "question 1, edited"), reply(5)]
    assert store.truncate_after(cid, -1) == 5
    assert store.load(cid)[1] == []


def test_sync_keeps_the_common_prefix_and_rewrites_the_tail(store):
    cid, messages = conversation(store, turns=2)
    first_ids = [r.id for r in store.records(cid)[1]]
    assert store.sync(cid, messages) == []  # nothing changed, nothing written
    edited = messages[:3] + [Message("user", "another question"), reply(7)]
    new_ids = store.sync(cid, edited, auto_k=True)
    _, records = store.records(cid)
    assert [r.message for r in records] == edited
    assert [r.id for r in records[:3]] == first_ids[:3] and [r.id for r in records[3:]] == new_ids
    assert records[4].auto_k is True
    nan_reply = reply(3, predicted_per_second=math.nan)  # NaN != NaN must not look like a change
    store.sync(cid, edited + [Message("user", "q"), nan_reply])
    kept = [r.id for r in store.records(cid)[1]]
    assert store.sync(cid, edited + [Message("user", "q"), nan_reply]) == []
    assert [r.id for r in store.records(cid)[1]] == kept
    assert store.sync(cid, edited + [Message("user", "NaN"), nan_reply]) != []  # text is compared as text


def test_titles_listing_and_delete_cascade(store, tmp_path):
    a = store.create_conversation()
    store.append_message(a, Message("user", "\n  What is   speculative decoding? " + "x" * 80 + "\nsecond line"))
    title = store.get_conversation(a).title
    assert title.startswith("What is speculative decoding? x") and len(title) == 60 and title.endswith("…")
    b, _ = conversation(store, turns=1)
    store.set_title(b, "named")
    store.append_message(b, Message("user", "does not rename"))
    listed = store.list_conversations()
    assert [c.id for c in listed] == [b, a] and listed[0].title == "named" and listed[0].n_messages == 4
    store.delete(b)
    conn = raw(tmp_path / "h.sqlite3")
    assert conn.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (b,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM turn_stats").fetchone()[0] == 0
    assert [c.id for c in store.list_conversations()] == [a]
    for call in (store.delete, store.load, store.export_json, lambda i: store.set_title(i, "x")):
        with pytest.raises(UnknownConversationError, match=rf"no conversation with ID {b} in .*h\.sqlite3"):
            call(b)


def test_threads_can_write_concurrently(store):
    ids = [store.create_conversation() for _ in range(4)]

    def work(cid: int) -> None:
        for i in range(10):
            store.append_message(cid, Message("user", f"m{i}"))

    threads = [threading.Thread(target=work, args=(cid,)) for cid in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for cid in ids:
        assert [m.content for m in store.load(cid)[1]] == [f"m{i}" for i in range(10)]


# -- crash safety -------------------------------------------------------------------------------------------


def test_exception_inside_a_message_transaction_writes_nothing(store, monkeypatch, tmp_path):
    cid, messages = conversation(store, turns=1)

    def fail(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(store, "_insert_stats", fail)
    with pytest.raises(RuntimeError):
        store.append_message(cid, reply(3))  # the message row was inserted before the stats failed
    monkeypatch.undo()
    assert store.load(cid)[1] == messages
    conn = raw(tmp_path / "h.sqlite3")
    assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 3
    store.append_message(cid, Message("user", "still works"))
    assert store.load(cid)[1][-1].content == "still works"


CHILD = textwrap.dedent(
    """
    import sys, time
    from specchat.engine.protocol import Message
    from specchat.history import HistoryStore
    sys.path.insert(0, {tests!r})
    from test_history import reply

    store = HistoryStore({db!r})
    cid = store.create_conversation(target="t")
    for i in range(3):
        store.append_message(cid, Message("user", f"q{{i}}"))
        store.append_message(cid, reply(i))
    real = store._insert_stats

    def hang(*args, **kwargs):
        real(*args, **kwargs)
        print("IN-TRANSACTION", cid, flush=True)  # message and stats written, not committed
        time.sleep(600)

    store._insert_stats = hang
    store.append_message(cid, reply(99))
    """
)


def test_killed_mid_write_loses_only_the_message_being_written(tmp_path):
    db = tmp_path / "crash.sqlite3"
    script = CHILD.format(tests=str(Path(__file__).parent), db=str(db))
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        line = child.stdout.readline()
        assert line.startswith("IN-TRANSACTION"), line + child.stderr.read()
        # a second connection meanwhile sees only committed messages
        reader = sqlite3.connect(str(db), timeout=10)
        assert reader.execute("SELECT count(*) FROM messages").fetchone()[0] == 6
        reader.close()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
    cid = int(line.split()[1])
    with HistoryStore(db) as store:
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        _, loaded = store.load(cid)
        expected = []
        for i in range(3):
            expected += [Message("user", f"q{i}"), reply(i)]
        assert loaded == expected
        assert store._conn.execute("SELECT count(*) FROM turn_stats").fetchone()[0] == 3
        store.append_message(cid, reply(4))  # the file is fully usable afterwards
        assert len(store.load(cid)[1]) == 7


# -- migrations ---------------------------------------------------------------------------------------------

NEXT = ("ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0",)  # a made-up next version


def test_migrate_from_empty_and_from_the_current_version(tmp_path):
    path = tmp_path / "m.sqlite3"
    conn = raw(path)
    assert migrate(conn) == SCHEMA_VERSION  # empty file -> current
    assert migrate(conn) == SCHEMA_VERSION  # idempotent
    conn.close()
    with HistoryStore(path) as store:
        cid, messages = conversation(store, turns=1)
    conn = raw(path)
    conn.execute("PRAGMA foreign_keys = ON")
    assert migrate(conn, MIGRATIONS + (NEXT,)) == SCHEMA_VERSION + 1
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1  # restored after the steps
    assert conn.execute("SELECT pinned FROM conversations WHERE id = ?", (cid,)).fetchone()[0] == 0
    # the rows written before are intact after the upgrade
    rows = conn.execute("SELECT role, content FROM messages WHERE conversation_id = ? ORDER BY idx", (cid,)).fetchall()
    assert rows == [(m.role, m.content) for m in messages]
    stats = conn.execute("SELECT prompt_n, acceptance, accepted_per_pos FROM turn_stats").fetchall()
    assert stats == [(30, 6 / 9, json.dumps([1.0, 2 / 3, 1 / 3]))]
    conn.close()
    with pytest.raises(HistoryError, match="newer than this specchat"):  # this build does not know NEXT
        HistoryStore(path)


def test_a_failing_migration_leaves_the_previous_version(tmp_path):
    path = tmp_path / "m.sqlite3"
    HistoryStore(path).close()
    broken = ("CREATE TABLE half_done (x)", "THIS IS NOT SQL")
    conn = raw(path)
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, MIGRATIONS + (broken,))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'half_done'").fetchone()[0] == 0


def test_refuses_newer_foreign_and_non_database_files(tmp_path):
    newer = tmp_path / "newer.sqlite3"
    HistoryStore(newer).close()
    conn = raw(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(HistoryError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this specchat understands \({SCHEMA_VERSION}\)"):
        HistoryStore(newer)
    foreign = tmp_path / "foreign.sqlite3"
    conn = raw(foreign)
    conn.execute("CREATE TABLE conversations (x)")
    conn.close()
    with pytest.raises(HistoryError, match="is not a specchat history database"):
        HistoryStore(foreign)
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(HistoryError, match="is not a usable history database"):
        HistoryStore(junk)
    assert junk.read_bytes() == b"this is not sqlite at all" * 100  # untouched
    with pytest.raises(HistoryError, match="no history database at"):
        HistoryStore(tmp_path / "missing.sqlite3", create=False)
    assert not (tmp_path / "missing.sqlite3").exists()
    with pytest.raises(HistoryError, match="is a directory"):
        HistoryStore(tmp_path)


# -- export / import ----------------------------------------------------------------------------------------


def test_json_export_import_round_trip(store, tmp_path):
    cid, messages = conversation(store, turns=3)
    stopped = reply(8)
    stopped.stopped = True
    stopped.stats.stop_reason = "stopped"
    store.append_message(cid, Message("user", "go on"))
    store.append_message(cid, stopped)
    messages += [Message("user", "go on"), stopped]
    data = store.export_json(cid)
    text = json.dumps(data, allow_nan=False)  # plain JSON
    assert data["format"] == EXPORT_FORMAT and data["version"] == EXPORT_VERSION == 2
    # the Turn's text/tokens/kinds are not repeated when they equal the message's
    assert "tokens" not in data["messages"][2]["stats"] and data["messages"][2]["tokens"] == [100, 101, 102, 103]

    with HistoryStore(tmp_path / "other.sqlite3") as other:
        new_id = other.import_json(json.loads(text))
        meta, loaded = other.load(new_id)
        assert loaded == messages
        original = store.get_conversation(cid)
        assert (meta.title, meta.created, meta.updated, meta.target, meta.draft, meta.system_prompt) == (
            original.title, original.created, original.updated, original.target, original.draft, original.system_prompt
        )
        again = other.export_json(new_id)
    data["conversation"]["id"] = again["conversation"]["id"]
    assert again == data  # stats, run details and timestamps all survive
    _, records = store.records(cid)
    assert [(r.target, r.auto_k, r.sampling) for r in records] == [
        (r["run"]["target"], r["run"]["auto_k"], r["run"]["sampling"]) if "run" in r else (None, None, None)
        for r in data["messages"]
    ]


def test_export_messages_without_a_database_and_reading_it_back():
    msgs = [Message("system", "s"), Message("user", "u"), reply(1)]
    data = json.loads(json.dumps(export_messages(msgs, title="t", target="a.gguf", draft="ngram")))
    conv, back = messages_from_export(data)
    assert back == msgs and (conv.title, conv.target, conv.draft) == ("t", "a.gguf", "ngram")


BAD_EXPORTS = [
    ([1, 2], r"not a specchat conversation export \(expected a JSON object\)"),
    ({"format": "something-else", "version": 1, "messages": []}, r'"format" must be "specchat-conversation"'),
    ({"format": EXPORT_FORMAT, "version": 99, "messages": []}, r"export format version 99 is newer"),
    ({"format": EXPORT_FORMAT, "version": 1}, r"^f\.json: messages: Field required$"),
    (
        {"format": EXPORT_FORMAT, "version": 1, "messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]},
        r"^f\.json: messages\[1\]\.role: Input should be 'system', 'user' or 'assistant'$",
    ),
    (
        {"format": EXPORT_FORMAT, "version": 1, "messages": [{"role": "user", "content": "x", "tokens": ["a"]}]},
        r"^f\.json: messages\[0\]\.tokens\[0\]: Input should be a valid integer",
    ),
    (
        {"format": EXPORT_FORMAT, "version": 1, "messages": [{"role": "assistant", "content": "x", "stats": {"prompt_n": 1}}]},
        r"^f\.json: messages\[0\]\.stats\.prompt_ms: Field required$",
    ),
]


@pytest.mark.parametrize("data,pattern", BAD_EXPORTS, ids=range(len(BAD_EXPORTS)))
def test_malformed_imports_are_refused_with_the_field_and_add_nothing(store, data, pattern):
    before = store.list_conversations()
    with pytest.raises(HistoryError, match=pattern):
        store.import_json(data, source="f.json")
    with pytest.raises(HistoryError):
        parse_export(data, source="f.json")
    assert store.list_conversations() == before


def test_markdown_export_is_readable_alone(store):
    cid, _ = conversation(store, turns=1)
    store.append_message(cid, Message("user", "tables | pipes"))
    m = reply(2, drafter="draft|model", acceptance=0.5, draft_n=8, draft_n_accepted=4, mean_len=2.5, predicted_per_second=123.456)
    m.stopped = True
    store.append_message(cid, m, auto_k=True)
    md = store.export_markdown(cid)
    assert md.startswith("# question 0\n")
    assert "- **Model pair:** target `tiny-target.gguf`, draft `ngram`" in md
    for text in ("Be brief.", "question 0", "reply 0", "tables | pipes", "reply 2", "*(stopped before the end)*"):
        assert text in md
    assert "### 3. Assistant" in md and "### 5. Assistant" in md
    assert "| # | tok/s | acceptance | mean len | K | drafter | tokens | prompt | stop |" in md
    assert "| 3 | 98.8 | 66.7 % (6/9) | 3.00 | 3 | ngram | 4 | 30 tok / 81 ms | eos |" in md
    assert "| 5 | 123.5 | 50.0 % (4/8) | 2.50 | 3 auto | draft\\|model | 4 | 32 tok / 83 ms | eos |" in md
    assert "*98.8 tok/s · acceptance 66.7 % (6/9) · mean len 3.00 · K 3 · ngram*" in md


def test_markdown_of_a_turn_without_speculation(store):
    cid = store.create_conversation(target="t.gguf", draft="none")
    store.append_message(
        cid, reply(0, draft_n=0, draft_n_accepted=0, acceptance=0.0, mean_len=1.0, accepted_per_pos=[], k=0, drafter="", speculative=False)
    )
    md = store.export_markdown(cid)
    assert "| 1 | 98.8 | – | – | – | off | 4 |" in md


# -- the CLI ------------------------------------------------------------------------------------------------


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``specchat.cli.main(argv)``: exit code, stdout, stderr."""
    from specchat.cli import main

    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, pattern: str) -> None:
    assert code == 2, (code, out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("specchat: error: ") and "Traceback" not in err, err
    import re

    assert re.search(pattern, err), err


def test_cli_list_show_export_import_delete(isolated, monkeypatch, capsys, tmp_path):
    db = tmp_path / "h.sqlite3"
    code, out, _ = run_cli(["history", "list", "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and "no saved conversations yet" in out and not db.exists()  # reading never creates it
    with HistoryStore(db) as store:
        cid, messages = conversation(store, turns=1)
    code, out, _ = run_cli(["history", "--db", str(db), "list"], monkeypatch, capsys)
    header, row = out.splitlines()
    assert header.split() == ["ID", "UPDATED", "MSGS", "MODELS", "TITLE"]
    assert row.split()[0] == str(cid) and "tiny-target.gguf + ngram" in row and row.endswith("question 0")

    code, out, _ = run_cli(["history", "show", str(cid), "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and out.startswith("# question 0") and "| 3 | 98.8 |" in out

    code, out, _ = run_cli(["history", "export", str(cid), "--format", "json", "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["messages"][2]["content"] == "reply 0"

    md = tmp_path / "conv.md"
    code, out, err = run_cli(["history", "export", str(cid), "-o", str(md), "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and md.read_text().startswith("# question 0") and str(md) in err

    js = tmp_path / "conv.json"  # the format follows the suffix
    code, _, _ = run_cli(["history", "export", str(cid), "-o", str(js), "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and json.loads(js.read_text())["format"] == EXPORT_FORMAT

    code, out, _ = run_cli(["history", "import", str(js), "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and "as conversation 2 (3 messages)" in out
    with HistoryStore(db) as store:
        assert store.load(2)[1] == messages

    code, out, _ = run_cli(["history", "delete", str(cid), "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and out == f"deleted conversation {cid} (question 0, 3 messages)\n"
    with HistoryStore(db) as store:
        assert [c.id for c in store.list_conversations()] == [2]


def test_cli_import_from_stdin(isolated, monkeypatch, capsys, tmp_path):
    import io

    db = tmp_path / "h.sqlite3"
    data = export_messages([Message("user", "from a pipe"), reply(0)], title="piped")
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(data)))
    code, out, _ = run_cli(["history", "import", "-", "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and out.startswith("imported stdin as conversation 1 (2 messages)")
    with HistoryStore(db) as store:
        assert store.load(1)[1] == [Message("user", "from a pipe"), reply(0)]


def test_cli_export_never_overwrites_without_force(isolated, monkeypatch, capsys, tmp_path):
    db = tmp_path / "h.sqlite3"
    with HistoryStore(db) as store:
        cid, _ = conversation(store, turns=1)
    target = tmp_path / "keep.md"
    target.write_text("precious")
    code, out, err = run_cli(["history", "export", str(cid), "-o", str(target), "--db", str(db)], monkeypatch, capsys)
    assert_one_line_error(code, out, err, r"keep\.md already exists; add --force to overwrite it")
    assert target.read_text() == "precious"
    code, _, _ = run_cli(["history", "export", str(cid), "-o", str(target), "--force", "--db", str(db)], monkeypatch, capsys)
    assert code == 0 and target.read_text().startswith("# question 0")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".keep")) == []  # no temp files left
    code, out, err = run_cli(
        ["history", "export", str(cid), "-o", str(tmp_path / "no" / "dir.md"), "--db", str(db)], monkeypatch, capsys
    )
    assert_one_line_error(code, out, err, r"directory .*no does not exist")


@pytest.mark.parametrize(
    "argv,pattern",
    [
        (["show", "999"], r"no conversation with ID 999 in .*h\.sqlite3; see 'specchat history list'$"),
        (["export", "999", "--format", "md"], r"no conversation with ID 999"),
        (["delete", "999"], r"no conversation with ID 999"),
        (["show", "abc"], r"conversation ID must be a positive integer, not 'abc'"),
        (["delete", "-3"], r"conversation ID must be a positive integer, not '-3'"),
        (["import", "{tmp}/missing.json"], r"missing\.json: no such file"),
        (["import", "{tmp}/broken.json"], r"broken\.json: not valid JSON at line 2, column 1"),
        (["import", "{tmp}/wrong.json"], r'wrong\.json: not a specchat conversation export \("format" must be'),
        (["import", "{tmp}"], r"is a directory"),
    ],
    ids=["show-unknown", "export-unknown", "delete-unknown", "bad-id", "negative-id", "import-missing", "import-broken",
         "import-wrong", "import-dir"],
)
def test_cli_error_paths_are_one_line_exit_2(isolated, monkeypatch, capsys, tmp_path, argv, pattern):
    db = tmp_path / "h.sqlite3"
    with HistoryStore(db) as store:
        conversation(store, turns=1)
    (tmp_path / "broken.json").write_text('{"format":\n')
    (tmp_path / "wrong.json").write_text('{"hello": "world"}')
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code, out, err = run_cli(["history", *argv, "--db", str(db)], monkeypatch, capsys)
    assert_one_line_error(code, out, err, pattern)
    with HistoryStore(db) as store:
        assert len(store.list_conversations()) == 1  # nothing lost, nothing added


def test_cli_unusable_database_and_missing_database(isolated, monkeypatch, capsys, tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database" * 50)
    code, out, err = run_cli(["history", "list", "--db", str(junk)], monkeypatch, capsys)
    assert_one_line_error(code, out, err, r"junk\.db is not a usable history database")
    code, out, err = run_cli(["history", "show", "1", "--db", str(tmp_path / "none.db")], monkeypatch, capsys)
    assert_one_line_error(code, out, err, r"no conversation with ID 1: there is no history database at .*none\.db yet")
    assert not (tmp_path / "none.db").exists()


def test_cli_default_database_follows_the_data_dir_setting(isolated, monkeypatch, capsys, tmp_path):
    with HistoryStore(isolated.default_db) as store:  # platformdirs' user data dir (XDG_DATA_HOME here)
        conversation(store, turns=1)
    code, out, _ = run_cli(["history", "list"], monkeypatch, capsys)
    assert code == 0 and "question 0" in out
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(tmp_path / "elsewhere"))
    code, out, _ = run_cli(["history", "list"], monkeypatch, capsys)
    assert code == 0 and str(tmp_path / "elsewhere" / "history.sqlite3") in out
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'data_dir = "{isolated.default_db.parent}"\n')
    monkeypatch.delenv("SPECCHAT_DATA_DIR")
    code, out, _ = run_cli(["--config", str(cfg), "history", "list"], monkeypatch, capsys)
    assert code == 0 and "question 0" in out
    cfg.write_text("data_dir = 3\n")  # a broken config is reported, not a traceback
    code, out, err = run_cli(["--config", str(cfg), "history", "list"], monkeypatch, capsys)
    assert_one_line_error(code, out, err, r"data_dir = 3 in .*c\.toml")


def test_python_m_specchat_cli_reports_one_line(tmp_path):
    """The real entry point, in a subprocess. A CLI that cannot build its parser (a subcommand module missing or
    broken) fails here, with its error: it is exactly the broken CLI this test is about, never a reason to skip."""
    probe = subprocess.run(
        [sys.executable, "-c", "import specchat.cli as c; c.build_parser()"], cwd=REPO, capture_output=True, text=True
    )
    assert probe.returncode == 0, "specchat.cli cannot build its parser:\n" + probe.stderr[-2000:]
    db = tmp_path / "h.sqlite3"
    HistoryStore(db).close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    result = subprocess.run(
        [sys.executable, "-m", "specchat.cli", "history", "show", "7", "--db", str(db)],
        cwd=REPO, capture_output=True, text=True, env=env,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"specchat: error: no conversation with ID 7 in {db}; see 'specchat history list'\n"


@pytest.mark.parametrize("reason", ["eos", "length", "stopped", "context", "error", "stop"])
def test_every_stop_reason_the_engine_writes_survives_export_and_import(store, tmp_path, reason):
    """The import's schema check accepts every stop reason the engine can record (the fallback chat format's
    stop strings end a reply with "stop": a conversation with one must not become un-importable)."""
    cid = store.create_conversation(target="tiny-target.gguf", draft="ngram", system_prompt="")
    store.append_message(cid, Message("user", "hi"))
    store.append_message(cid, reply(0, stop_reason=reason))
    with HistoryStore(tmp_path / "other.sqlite3") as other:
        new_id = other.import_json(json.loads(json.dumps(store.export_json(cid))))
        assert other.load(new_id)[1][-1].stats.stop_reason == reason
