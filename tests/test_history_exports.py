"""Export files (one naming scheme, never overwriting, never the current directory by default), the K a turn
used in the Markdown export, and the store's search by title and message text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from specchat.config import Settings
from specchat.engine.events import Turn
from specchat.engine.protocol import Message
from specchat.engine.telemetry import TurnCounters
from specchat.history import HistoryError, HistoryStore, export_filename, export_slug, k_used, write_export


def make_turn(**kw) -> Turn:
    values = dict(
        prompt_n=10, prompt_ms=20.0, predicted_n=3, predicted_ms=30.0, predicted_per_second=100.0, draft_n=6,
        draft_n_accepted=3, acceptance=0.5, mean_len=2.0, accepted_per_pos=[0.5], draft_ms_per_step=0.1,
        verify_ms_per_step=9.0, overhead_ms=0.3, step_ms=28.0, n_steps=3, n_spec_steps=3, stop_reason="eos",
        text="abc", tokens=[1, 2, 3], kinds=["accepted", "corrected", "bonus"], k=3, drafter="ngram", speculative=True,
    )
    values.update(kw)
    return Turn(**values)


@pytest.fixture
def store(tmp_path: Path):
    with HistoryStore(tmp_path / "h.sqlite3") as s:
        yield s


# -- file names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("What is speculative decoding?", "what-is-speculative-decoding"),
        ("ends with a dot.", "ends-with-a-dot"),  # was specchat-1-ends-with-a-dot..md
        ("...", "chat"),
        ("x [/bold] y", "x-bold-y"),
        ("Café crème, s'il vous plaît", "cafe-creme-s-il-vous-plait"),
        ("日本語のタイトル", "chat"),
        ("../../etc/passwd", "etc-passwd"),
        ("a" * 30 + " " + "b" * 30, "a" * 30),  # cut at a word boundary within 40 characters
        ("", "chat"),
    ],
)
def test_export_slug(title, slug):
    assert export_slug(title) == slug
    name = export_filename(7, title)
    assert name == f"specchat-7-{slug}.md" and ".." not in name and "/" not in name


def test_write_export_creates_the_directory_and_never_overwrites(tmp_path):
    out = tmp_path / "data" / "exports"
    first = write_export(out, 3, "Hello.", "one")
    second = write_export(out, 3, "Hello.", "two")
    unsaved = write_export(out, None, "Hello.", "three")
    assert [p.name for p in (first, second, unsaved)] == [
        "specchat-3-hello.md", "specchat-3-hello-2.md", "specchat-unsaved-hello.md"
    ]
    assert first.is_absolute() and first.read_text() == "one" and second.read_text() == "two"
    (tmp_path / "file").write_text("x")
    with pytest.raises(HistoryError, match=r"cannot write the export to .*file/sub"):
        write_export(tmp_path / "file" / "sub", 1, "t", "text")


def test_the_exports_dir_is_in_the_data_dir(tmp_path):
    assert Settings(data_dir=tmp_path).exports_dir() == tmp_path / "exports"


# -- the K a turn used ----------------------------------------------------------------------------------------


def test_turn_counters_record_the_range_of_k_asked_by_drafting_rounds():
    tc = TurnCounters()
    for k, drafted in ((4, 4), (0, 0), (16, 9), (2, 0), (7, 7)):  # a round with K = 0 did not draft
        tc.add_step(drafted=drafted, accepted=0, emitted=1, k=k)
    turn = tc.to_turn(k=3)
    assert (turn.k, turn.k_min, turn.k_max) == (3, 2, 16)
    assert (TurnCounters().to_turn(k=5).k_min, TurnCounters().to_turn(k=5).k_max) == (0, 0)


@pytest.mark.parametrize(
    ("fields", "shown"),
    [({"k_min": 2, "k_max": 16}, "2\u201316"), ({"k_min": 4, "k_max": 4}, "4"), ({}, "3")],
    ids=["auto-K range", "fixed", "saved before the range existed: the K stored"],
)
def test_k_used(fields, shown):
    assert k_used(make_turn(**fields)) == shown


def test_markdown_k_column_is_the_k_used_and_old_rows_still_render(store, tmp_path):
    cid = store.create_conversation(target="t.gguf", draft="ngram")
    store.append_message(cid, Message("user", "q"))
    turn = make_turn(k=3, k_min=2, k_max=16)
    store.append_message(cid, Message("assistant", "abc", [1, 2, 3], list(turn.kinds), turn), auto_k=True)
    md = store.export_markdown(cid)
    assert "| 2 | 100.0 | 50.0 % (3/6) | 2.00 | 2\u201316 auto | ngram |" in md
    assert "K 2\u201316 auto" in md
    _, messages = store.load(cid)
    assert (messages[1].stats.k_min, messages[1].stats.k_max) == (2, 16)  # kept in turn_stats.extra
    # a JSON export carries the range and imports it back
    data = json.loads(json.dumps(store.export_json(cid)))
    assert data["messages"][1]["stats"]["k_max"] == 16
    again = store.import_json(data)
    assert store.load(again)[1][1].stats.k_min == 2
    # a row saved before the range existed (no k_min/k_max in extra): the K column shows the stored K
    conn = sqlite3.connect(str(store.path))
    conn.execute("UPDATE turn_stats SET extra = NULL")
    conn.commit()
    conn.close()
    assert "| 2 | 100.0 | 50.0 % (3/6) | 2.00 | 3 auto | ngram |" in store.export_markdown(cid)
    old = store.export_json(cid)
    del old["messages"][1]["stats"]["k_min"], old["messages"][1]["stats"]["k_max"]
    assert store.load(store.import_json(old))[1][1].stats.k_max == 0


# -- search -------------------------------------------------------------------------------------------------


def test_search_by_title_and_message_text(store):
    a = store.create_conversation("Renamed chat", created="2025-01-01T00:00:00+00:00")
    store.append_message(a, Message("user", "first line\n  second   line"), created="2025-01-01T00:00:01+00:00")
    b = store.create_conversation(created="2025-01-02T00:00:00+00:00")
    store.append_message(b, Message("user", "about 100% [bold] and a_b"), created="2025-01-02T00:00:01+00:00")
    store.append_message(b, Message("assistant", "ÉCOLE Straße"), created="2025-01-02T00:00:02+00:00")
    assert [h.conversation.id for h in store.search_conversations("")] == [b, a]
    (hit,) = store.search_conversations("renamed")
    assert (hit.conversation.id, hit.role, hit.text) == (a, None, "")  # the title only
    (hit,) = store.search_conversations("LINE SECOND")  # whitespace and line breaks match one space
    assert (hit.conversation.id, hit.role) == (a, "user") and hit.conversation.n_messages == 1
    assert [h.conversation.id for h in store.search_conversations("école strasse")] == [b]
    for literal in ("100%", "a_b", "[bold]", "%", "_"):  # no wildcards: LIKE's % and _ are plain text here
        assert [h.conversation.id for h in store.search_conversations(literal)] == [b], literal
    assert store.search_conversations("nothing like this") == []
