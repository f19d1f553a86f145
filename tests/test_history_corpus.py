"""The suffix drafter's corpus kept with the history (issue 23): a real SQLite file, its own thread; a reply saved,
a conversation deleted or imported reaches the index; the index persists per tokenizer; a corrupt or stale file is
rebuilt with one notice and the history is untouched; excluded conversations are never indexed; the settings."""

from __future__ import annotations

import pytest

from specchat.engine.protocol import Message
from specchat.history import HistoryStore
from specchat.history.corpus import HistoryCorpus, index_path


def byte_tokens(text: str) -> list[int]:
    """A tokenizer for tests: one id per UTF-8 byte."""
    return list(text.encode())


def word_tokens(text: str) -> list[int]:
    """Another tokenizer (another family): one id per word, by a stable hash."""
    import zlib

    return [zlib.crc32(w.encode()) % 50_000 for w in text.split()]


REPLY = "def add(a, b):\n    return a + b  # the sum of both numbers\n"


def found(corpus: HistoryCorpus, text: str, tokenize=byte_tokens) -> list[int]:
    """What the index continues the first 24 tokens of ``text`` with."""
    assert corpus.settle(), "the corpus did not catch up"
    index = corpus.index()
    assert index is not None
    toks = tokenize(text)
    cand = index.lookup(toks[:24], 8, max_spec_factor=4.0)
    return cand.tokens if cand is not None else []


def save(store: HistoryStore, user: str, reply: str) -> int:
    conv = store.create_conversation()
    store.append_message(conv, Message("user", user))
    store.append_message(conv, Message("assistant", reply))
    return conv


@pytest.fixture
def db(tmp_path):
    store = HistoryStore(tmp_path / "history.sqlite3")
    yield store
    store.close()


def start(tmp_path, fingerprint="bytes", tokenize=byte_tokens, **kw) -> HistoryCorpus:
    return HistoryCorpus(tmp_path / "history.sqlite3", index_path(tmp_path, fingerprint), tokenize,
                         fingerprint=fingerprint, **kw).start()


def test_a_saved_reply_reaches_the_index_and_a_deleted_conversation_leaves_it(tmp_path, db):
    save(db, "hello", "an earlier reply that has nothing to do with it")
    corpus = start(tmp_path)
    try:
        assert corpus.wait(10) and len(corpus.index()) == 2
        conv = save(db, "add two numbers", REPLY)  # written by another store object: heard all the same
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
        db.delete(conv)
        assert found(corpus, REPLY) == []
        assert len(corpus.index()) == 2
    finally:
        corpus.close()


def test_an_import_and_a_regenerated_reply_reach_the_index(tmp_path, db):
    conv = save(db, "add two numbers", "first try: " + "x" * 40)
    exported = db.export_json(conv)
    corpus = start(tmp_path)
    try:
        db.replace_last_assistant(conv, Message("assistant", REPLY))
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
        assert found(corpus, "first try: " + "x" * 40) == []  # the replaced version is gone
        db.import_json(exported)
        assert found(corpus, "first try: " + "x" * 40) != []
    finally:
        corpus.close()


def test_a_regenerated_reply_follows_its_message_in_the_index(tmp_path, db):
    """The saved reply to a message is the document right after it (SuffixIndex.reply_after); a regenerated reply
    must not be added at the corpus's end, away from its message: the conversation is added again whole, in order.
    Fails if only the new version is added (another conversation saved in between puts its messages after it)."""
    conv = save(db, "add two numbers", "first try: " + "x" * 40)
    corpus = start(tmp_path)
    try:
        assert corpus.wait(10)
        save(db, "something else", "another conversation's reply")
        db.replace_last_assistant(conv, Message("assistant", REPLY))
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
        question, reply = byte_tokens("add two numbers"), byte_tokens(REPLY)
        cand = corpus.index().reply_after(question, [7, 7, *reply[:3]], 8, max_header=2, max_spec_factor=4.0)
        assert cand is not None and cand.tokens == reply[3:11]
    finally:
        corpus.close()


def test_the_index_persists_and_catches_up_with_changes_made_while_closed(tmp_path, db):
    keep = save(db, "add two numbers", REPLY)
    gone = save(db, "something else entirely", "a reply to be deleted while no corpus listens " * 2)
    corpus = start(tmp_path)
    assert corpus.wait(10)
    corpus.close()
    path = index_path(tmp_path, "bytes")
    assert path.is_file()
    db.delete(gone)  # nobody listening
    save(db, "later", "a reply saved later, by another process as it were")
    corpus = start(tmp_path)
    try:
        assert corpus.wait(10) and corpus.notices == []  # loaded, not rebuilt
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
        assert found(corpus, "a reply to be deleted while no corpus listens ") == []
        assert found(corpus, "a reply saved later, by another process as it were") != []
        assert {k[0] for k in corpus.index().keys()} == {keep, gone + 1}
    finally:
        corpus.close()


def test_another_tokenizer_gets_its_own_index(tmp_path, db):
    save(db, "add two numbers", REPLY * 3)
    a = start(tmp_path)
    b = start(tmp_path, fingerprint="words", tokenize=word_tokens)
    try:
        assert found(a, REPLY * 2) == byte_tokens(REPLY * 2)[24:32]
        words = word_tokens(REPLY * 3)
        assert b.wait(10)
        assert b.index().lookup(words[:8], 4, max_spec_factor=4.0).tokens == words[8:12]
    finally:
        a.close()
        b.close()
    assert index_path(tmp_path, "bytes") != index_path(tmp_path, "words")
    assert index_path(tmp_path, "bytes").is_file() and index_path(tmp_path, "words").is_file()


@pytest.mark.parametrize("how", ["corrupt", "stale"])
def test_a_corrupt_or_stale_index_is_rebuilt_with_one_notice(tmp_path, db, how):
    save(db, "add two numbers", REPLY)
    path = index_path(tmp_path, "bytes")
    if how == "corrupt":
        path.parent.mkdir(parents=True)
        path.write_bytes(b"PK\x03\x04 this is not the index it claims to be")
    else:  # a file of this name written for another vocabulary
        other = start(tmp_path, fingerprint="words", tokenize=word_tokens)
        other.wait(10)
        other.close()
        index_path(tmp_path, "words").rename(path)
    heard: list[str] = []
    corpus = start(tmp_path, notice=heard.append)
    try:
        assert corpus.wait(10)
        assert len(heard) == 1 and "rebuilt from the history" in heard[0] and "\n" not in heard[0]
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
    finally:
        corpus.close()
    assert [m.content for m in db.load(1)[1]] == ["add two numbers", REPLY]  # the history is untouched
    corpus = start(tmp_path)  # the rebuilt file is good
    try:
        assert corpus.wait(10) and corpus.notices == []
    finally:
        corpus.close()


def test_excluded_conversations_are_never_indexed(tmp_path, db):
    private = save(db, "my secret", REPLY)
    corpus = start(tmp_path, exclude=[private])
    try:
        assert corpus.wait(10) and len(corpus.index()) == 0
        db.append_message(private, Message("user", "more of it " * 5))
        assert found(corpus, REPLY) == []
        assert len(corpus.index()) == 0
    finally:
        corpus.close()


def test_no_history_yet_is_an_empty_index_that_fills_once_chatting_starts(tmp_path):
    corpus = start(tmp_path)
    try:
        assert corpus.wait(10) and len(corpus.index()) == 0 and corpus.notices == []
        with HistoryStore(tmp_path / "history.sqlite3") as store:
            save(store, "add two numbers", REPLY)
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
    finally:
        corpus.close()


@pytest.mark.usefixtures("isolated_config")
def test_the_suffix_settings_and_their_one_line_errors(tmp_path):
    from specchat.config import ConfigError, load_settings

    cfg = tmp_path / "c.toml"
    cfg.write_text('draft = "suffix"\n[suffix]\ncorpus = false\nexclude = [3, 4]\n')
    s = load_settings(cfg)
    assert s.draft == "suffix" and s.suffix.corpus is False and s.suffix.exclude == [3, 4]
    cfg.write_text("[suffix]\nmin_token_prob = 2\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert "min_token_prob" in str(err.value) and "\n" not in str(err.value).strip()


def test_closing_during_the_first_build_stops_it_without_saving_a_partial_index(tmp_path, db):
    import threading

    for i in range(5):
        save(db, f"question {i}", f"reply {i} " * 10)
    started, release = threading.Event(), threading.Event()

    def slow(text: str) -> list[int]:
        started.set()
        release.wait(10)
        return byte_tokens(text)

    corpus = start(tmp_path, tokenize=slow)
    assert started.wait(10)
    closer = threading.Thread(target=corpus.close)
    closer.start()
    for _ in range(1000):  # close() has said so before the tokenizer returns
        if corpus._closed:
            break
        threading.Event().wait(0.01)
    release.set()
    closer.join(10)
    assert not closer.is_alive() and corpus.index() is None
    assert not index_path(tmp_path, "bytes").exists()


def test_the_writers_thread_only_queues_the_change(tmp_path, db):
    """The app saves on its own thread; the corpus tokenises and reads the database on its thread only."""
    import threading

    threads: list[str] = []

    def tokenize(text: str) -> list[int]:
        threads.append(threading.current_thread().name)
        return byte_tokens(text)

    corpus = start(tmp_path, tokenize=tokenize)
    try:
        assert corpus.wait(10)
        save(db, "add two numbers", REPLY)
        assert found(corpus, REPLY) == byte_tokens(REPLY)[24:32]
        assert threads and set(threads) == {"specchat-suffix-corpus"}
    finally:
        corpus.close()


def test_an_unreadable_history_leaves_the_drafter_with_the_conversation_and_one_notice(tmp_path):
    (tmp_path / "history.sqlite3").write_bytes(b"this is no SQLite database" * 100)
    corpus = start(tmp_path)
    try:
        assert corpus.wait(10) and corpus.index() is None
        assert len(corpus.notices) == 1 and "no history to draft from" in corpus.notices[0]
        assert "\n" not in corpus.notices[0]
    finally:
        corpus.close()
    assert (tmp_path / "history.sqlite3").read_bytes() == b"this is no SQLite database" * 100


# -- progress (what the app's sidebar shows while the index is built) ----------------------------------------------


class TokenizingClock:
    """A clock that each message tokenised moves on by ``step`` s (as if tokenising took that long), so how often
    a build reports is checked against the time it took without a real clock."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        return self.now

    def tokenize(self, text: str) -> list[int]:
        self.now += self.step
        return byte_tokens(text)


def big_history(db: HistoryStore, n: int) -> None:
    """``n`` messages in one conversation, written in one transaction (an import), each its own text."""
    conv = save(db, "question 0", "reply 0")
    data = db.export_json(conv)
    first = data["messages"][0]
    data["messages"] = [{**first, "role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " * 3}
                        for i in range(n)]
    db.delete(conv)
    db.import_json(data)


def test_a_first_build_reports_its_progress_a_few_times_a_second_then_ready_once(tmp_path, db):
    """10,000 messages at 5 ms each (50 s, as a real first build of that size takes here): the messages tokenised so
    far reach ``on_progress`` and the file's watchers at most 4 times a second plus its start and end, then one
    "ready" with the index's size; ``status`` says the same. Fails if the build stops reporting, or reports every
    message."""
    from specchat.history import index_progress

    big_history(db, 10_000)
    clock = TokenizingClock(0.005)
    heard, watched = [], []
    unwatch = index_progress.watch(db.path, watched.append, lambda line: None)
    corpus = start(tmp_path, tokenize=clock.tokenize, on_progress=heard.append, clock=clock)
    try:
        assert corpus.wait(60)
        assert corpus.settle()
    finally:
        corpus.close()
        unwatch()
    assert watched == heard
    phases = [p.phase for p in heard]
    assert phases[0] == index_progress.LOADING and phases[-1] == index_progress.READY
    assert phases.count(index_progress.READY) == 1
    building = [p for p in heard if p.phase == index_progress.INDEXING]
    assert building[0].done == 0 and building[-1].done == building[-1].total == 10_000
    assert all(p.total == 10_000 for p in building)
    assert [p.done for p in building] == sorted({p.done for p in building})  # moving forward, never twice
    assert 20 <= len(building) <= 50 * 4 + 2  # 50 s of tokenising: a few a second, not 10,000
    ready = heard[-1]
    assert ready.done == 10_000 and ready.tokens == corpus.index().n_tokens > 0
    assert corpus.status == ready.status == corpus.progress.status and "10,000 messages" in ready.status


def test_a_loaded_index_reports_the_messages_it_tokenises_to_catch_up_and_each_saved_reply(tmp_path, db):
    save(db, "add two numbers", REPLY)
    corpus = start(tmp_path)
    assert corpus.wait(10)
    corpus.close()
    for i in range(3):  # saved while no corpus listened
        save(db, f"later {i}", f"a reply saved later {i}")
    heard = []
    corpus = start(tmp_path, on_progress=heard.append)
    try:
        assert corpus.wait(10) and corpus.notices == []
        assert [(p.phase, p.done, p.total) for p in heard[:2]] == [("loading", 0, 0), ("loading", 0, 0)]
        catching_up = [(p.done, p.total) for p in heard if p.phase == "indexing"]
        assert catching_up[0] == (0, 6) and catching_up[-1] == (6, 6)  # the 6 new messages, not all 8
        assert (heard[-1].phase, heard[-1].done) == ("ready", 8)
        save(db, "one more", REPLY)  # a reply saved in the app: the sidebar's count follows
        assert corpus.settle()
        assert (heard[-1].phase, heard[-1].done) == ("ready", 10)
    finally:
        corpus.close()


def test_a_progress_listener_that_raises_never_stops_the_corpus(tmp_path, db):
    from specchat.history import index_progress

    save(db, "add two numbers", REPLY)

    def broken(*_):
        raise RuntimeError("a bug in whoever listens")

    unwatch = index_progress.watch(db.path, broken, broken)
    corpus = start(tmp_path, on_progress=broken, notice=broken)
    try:
        assert corpus.wait(10) and corpus.progress.phase == "ready"
        save(db, "more", "a reply saved after the listener broke " * 2)
        assert found(corpus, "a reply saved after the listener broke " * 2) != []  # the thread still runs
    finally:
        corpus.close()
        unwatch()


def test_a_corrupt_index_is_one_notice_to_the_watchers_a_rebuild_they_see_and_the_history_intact(tmp_path, db):
    from specchat.history import index_progress

    for i in range(4):
        save(db, f"question {i}", f"reply {i} " * 10)
    before = db.corpus_messages()
    path = index_path(tmp_path, "bytes")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK\x03\x04 this is not the index it claims to be")
    progress, notices = [], []
    unwatch = index_progress.watch(db.path, progress.append, notices.append)
    corpus = start(tmp_path)
    try:
        assert corpus.wait(10) and corpus.settle()
    finally:
        corpus.close()
        unwatch()
    assert len(notices) == 1 and "was rebuilt from the history" in notices[0] and notices == corpus.notices
    assert [p.phase for p in progress][0] == "loading" and progress[-1].phase == "ready"
    assert ("indexing", 8, 8) in [(p.phase, p.done, p.total) for p in progress]  # rebuilt, not loaded
    assert progress[-1].done == 8
    assert db.corpus_messages() == before  # the history is untouched
