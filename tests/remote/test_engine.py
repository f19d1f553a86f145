"""The remote engine against real llama-servers (see conftest.py): per-token fates, the server's own counters,
stop, multi-turn cache reuse, history and the colours of saved replies."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
import pytest

from specchat.engine.controls import FixedControlError, SamplingParams
from specchat.engine.events import EngineError, Notice, Piece, PromptDone, Step, Turn
from specchat.engine.llama_server import SpecMetrics
from specchat.engine.remote import FIXED_REASON, NO_DRAFT_NOTICE, RemoteSession, connect
from specchat.history import HistoryStore

from .conftest import SERVER_K

GREEDY = SamplingParams(temperature=0.0)
ALPHABET = "Write the alphabet from A to Z separated by commas."


def run(events) -> tuple[Turn | None, list]:
    evs = list(events)
    turns = [e for e in evs if isinstance(e, Turn)]
    return (turns[-1] if turns else None), evs


def metrics(url: str) -> SpecMetrics:
    return SpecMetrics.parse(httpx.get(url + "/metrics", timeout=10).text)


def slot_busy(url: str) -> bool:
    return bool(httpx.get(url + "/slots", timeout=10).json()[0]["is_processing"])


@pytest.fixture
def self_session(self_draft_server):
    s = connect(self_draft_server.url, n_predict=40, sampling=GREEDY)
    yield s
    s.close()


@pytest.fixture
def skip_session(skip_draft_server):
    s = connect(skip_draft_server.url, n_predict=48, sampling=GREEDY)
    yield s
    s.close()


def test_self_draft_every_round_is_fully_accepted_and_the_fates_match_the_servers_counters(self_session, self_draft_server):
    before = metrics(self_draft_server.url)
    turn, evs = run(self_session.send("Count from 1 to 10, one number per line."))
    delta = metrics(self_draft_server.url).minus(before)
    assert turn is not None and turn.stop_reason == "length"
    steps = [e for e in evs if isinstance(e, Step)]
    pieces = [e for e in evs if isinstance(e, Piece)]
    # a draft of the target itself at T = 0: every drafted token is kept, nothing is ever corrected
    assert all(s.accepted == s.drafted for s in steps)
    assert "corrected" not in turn.kinds and "rejected" not in turn.kinds
    assert turn.kinds[0] == "plain"  # sampled from the prompt, before any draft
    full = [s for s in steps if s.drafted == SERVER_K]
    assert len(full) >= 5 and all(s.emitted == SERVER_K + 1 for s in full)
    # token by token: the first plain, then rounds of K accepted drafts and the target's bonus
    n_full = 1 + len(full) * (SERVER_K + 1)
    assert turn.kinds[:n_full] == ["plain"] + (["accepted"] * SERVER_K + ["bonus"]) * len(full)
    # the fates sum to the server's own counters: the stream's final ones and its /metrics
    assert turn.kinds.count("accepted") + self_session.accepted_not_shown == turn.draft_n_accepted
    assert turn.draft_n_accepted == delta.accepted_tokens == turn.draft_n == delta.draft_tokens > 0
    assert turn.n_spec_steps == delta.drafts
    assert turn.accepted_per_pos == [1.0] * SERVER_K
    assert turn.mean_len == pytest.approx(1 + turn.draft_n_accepted / delta.drafts)
    # one Piece per token, in order, and the reply is recorded as streamed
    assert [p.kind for p in pieces] == turn.kinds and [p.token for p in pieces] == turn.tokens
    assert "".join(p.text for p in pieces) == turn.text == self_session.messages[-1].content
    assert turn.predicted_n == len(turn.tokens) == sum(s.emitted for s in steps)
    # K and the drafter's type are learned from the server (/metrics, /slots) by the end of the first reply
    assert all(s.speculative and s.drafted <= s.k <= SERVER_K for s in steps[1:])
    assert turn.k == SERVER_K and turn.drafter == "server: draft-simple" and turn.speculative


def test_layer_skip_draft_rejections_fates_and_per_position_counts_match_metrics(skip_session, skip_draft_server):
    before = metrics(skip_draft_server.url)
    turn, evs = run(skip_session.send(ALPHABET))
    delta = metrics(skip_draft_server.url).minus(before)
    steps = [e for e in evs if isinstance(e, Step)]
    assert turn is not None
    assert turn.kinds.count("corrected") > 0 and turn.kinds.count("accepted") > 0
    # the inferred fates sum to the server's own accepted count
    assert turn.kinds.count("accepted") + skip_session.accepted_not_shown == delta.accepted_tokens == turn.draft_n_accepted
    assert sum(s.drafted for s in steps) == delta.draft_tokens == turn.draft_n
    # every round recovered from the stream: per draft position, accepted counts equal the server's
    per_pos = [0] * len(delta.accepted_per_pos)
    for s in steps:
        for i in range(s.accepted):
            per_pos[i] += 1
    assert per_pos == [int(v) for v in delta.accepted_per_pos]
    assert sum(1 for s in steps if s.drafted) == delta.drafts == turn.n_spec_steps
    # each round's tokens, as streamed before its Step: its accepted drafts, then the target's own token -
    # a correction after a rejection, the bonus after a fully accepted draft, plain without a draft
    round_kinds, kinds = [], []
    for e in evs:
        if isinstance(e, Piece):
            kinds.append(e.kind)
        elif isinstance(e, Step):
            round_kinds.append((e, kinds))
            kinds = []
    assert any(s.accepted for s, _ in round_kinds) and any(s.accepted < s.drafted for s, _ in round_kinds)
    for s, kinds in round_kinds:
        last = "plain" if not s.drafted else ("bonus" if s.accepted == s.drafted else "corrected")
        assert kinds == (["accepted"] * s.accepted + [last])[: s.emitted], (s, kinds)


def test_esc_stops_the_generation_on_the_server(self_draft_server):
    session = connect(self_draft_server.url, n_predict=400, sampling=GREEDY)
    try:
        before = metrics(self_draft_server.url)
        third_piece = threading.Event()

        def press_esc() -> None:  # the UI thread's part: Controls are shared with the engine thread
            third_piece.wait(60)
            session.controls.request_stop()

        esc = threading.Thread(target=press_esc)
        esc.start()
        seen = 0
        events = []
        for ev in session.send("Write a very long story about a dragon who learns to cook."):
            events.append(ev)
            if isinstance(ev, Piece):
                seen += 1
                if seen == 3:
                    third_piece.set()
        esc.join()
        turn = [e for e in events if isinstance(e, Turn)][-1]
        assert turn.stop_reason == "stopped" and session.messages[-1].stopped
        assert not any(isinstance(e, EngineError) for e in events)
        # on the server: the slot goes idle and far fewer than the 400 asked-for tokens were generated
        deadline = time.monotonic() + 60
        while slot_busy(self_draft_server.url) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not slot_busy(self_draft_server.url)
        generated = metrics(self_draft_server.url).minus(before).tokens_predicted
        assert len(turn.tokens) <= generated < 400
        # and the conversation goes on
        session.n_predict = 16
        turn2, _ = run(session.send("Thanks."))
        assert turn2 is not None and turn2.stop_reason in ("eos", "length") and turn2.tokens
    finally:
        session.close()


def test_a_burst_of_stops_leaves_the_server_idle_and_the_session_usable(self_draft_server):
    session = connect(self_draft_server.url, n_predict=300, sampling=GREEDY)
    try:
        for i in range(6):
            events = session.send(f"Tell me a long story number {i}.")
            for ev in events:
                if isinstance(ev, Piece):
                    session.controls.request_stop()  # at once: the stop races the stream's next chunk
            assert session.messages[-1].stopped
        deadline = time.monotonic() + 60
        while slot_busy(self_draft_server.url) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not slot_busy(self_draft_server.url)
        session.n_predict = 8
        turn, evs = run(session.send("Say hi."))
        assert turn is not None and turn.stop_reason in ("eos", "length") and not any(isinstance(e, EngineError) for e in evs)
        assert len(session.messages) == 14
    finally:
        session.close()


def test_a_second_turn_reuses_the_servers_cache_of_the_whole_first_turn(self_session):
    turn1, evs1 = run(self_session.send("Name three colours."))
    prompt1 = [e for e in evs1 if isinstance(e, PromptDone)][0]
    turn2, evs2 = run(self_session.send("And three animals?"))
    prompt2 = [e for e in evs2 if isinstance(e, PromptDone)][0]
    # turn 2's prompt starts with turn 1's prompt and reply, token for token (replies are spliced by id)
    assert prompt2.cached_n >= prompt1.prompt_n + prompt1.cached_n + len(turn1.tokens) - 1
    assert turn2.prompt_n < prompt2.cached_n


def test_controls_are_fixed_by_the_server_and_say_so(self_session):
    info = self_session.info()
    assert info.k_max == SERVER_K and info.can_speculate and info.drafters == ()
    assert "no ghost text" in info.note and "K keys do not apply" in info.note and "/metrics" in info.note
    for change in (lambda c: c.set_k(5), lambda c: c.set_speculative(False), lambda c: c.set_auto_k(True),
                   lambda c: c.set_drafter("ngram")):
        with pytest.raises(FixedControlError, match="K keys do not apply"):
            change(self_session.controls)
    assert self_session.controls.snapshot().k == SERVER_K  # the server's K, shown in the sidebar
    assert FIXED_REASON == self_session.controls.fixed
    # sampling still applies: it is sent with every request
    self_session.controls.set_sampling(SamplingParams(temperature=1.0, seed=7, top_k=5))
    self_session.n_predict = 12
    a, _ = run(self_session.send("Hi"))
    self_session.reset()
    b, _ = run(self_session.send("Hi"))
    assert a.text == b.text and a.tokens


def test_history_keeps_a_remote_conversation_and_its_saved_replies_recolour(self_session, tmp_path):
    self_session.n_predict = 24
    run(self_session.send("Count from 1 to 5."))
    turn, _ = run(self_session.send("Translate to Chinese: I love my cat. Reply with Chinese characters only."))
    assert turn is not None and any(ord(c) > 0x2E80 for c in turn.text)
    # the server names only the last token of a split character: the others were recovered
    assert min(turn.tokens) >= 0 and len(turn.tokens) == len(turn.kinds) == turn.predicted_n
    store = HistoryStore(tmp_path / "history.sqlite3")
    info = self_session.info()
    conv = store.create_conversation(target=info.target_name, draft=info.draft_name, system_prompt="")
    store.sync(conv, self_session.messages, target=info.target_name, auto_k=False, sampling=GREEDY)
    store.close()
    store = HistoryStore(tmp_path / "history.sqlite3")
    _conv, saved = store.load(conv)
    exported = store.export_json(conv)
    store.close()
    assert [m.get("kinds", []) for m in exported["messages"]] == [m.kinds for m in saved]
    assert [(m.role, m.content, m.tokens, m.kinds) for m in saved] == [
        (m.role, m.content, m.tokens, m.kinds) for m in self_session.messages
    ]
    for m in saved:
        if m.role == "assistant":
            pieces = self_session.detokenize_pieces(m.tokens)
            assert len(pieces) == len(m.tokens) and "".join(pieces) == m.content
            assert m.stats is not None and m.stats.drafter == "server: draft-simple"
    # the reopened conversation continues on the server
    self_session.load(saved)
    turn3, _ = run(self_session.send("Thanks."))
    assert turn3 is not None and turn3.tokens


def test_replies_of_another_model_go_to_the_server_as_text_not_as_ids(self_session):
    from specchat.engine.protocol import Message

    foreign = Message("assistant", "Paris is the capital.", tokens=[7, 7, 7, 7], kinds=["plain"] * 4)
    self_session.load([Message("user", "Capital of France?"), foreign, Message("user", "And of Italy?")])
    tokens = self_session.prompt_tokens(self_session.messages)
    as_text = self_session.server.tokenize("Paris is the capital.")
    assert [7, 7, 7, 7] not in [tokens[i : i + 4] for i in range(len(tokens))]
    assert any(tokens[i : i + len(as_text)] == as_text for i in range(len(tokens)))
    # while a reply generated here is spliced by its ids
    turn, _ = run(self_session.send("Thanks."))
    tokens = self_session.prompt_tokens(self_session.messages)
    assert any(tokens[i : i + len(turn.tokens)] == turn.tokens for i in range(len(tokens)))


def test_an_ngram_server_that_drafted_nothing_says_not_reported(llama_server):
    server = llama_server(spec_type="ngram-simple", metrics=False)
    session = connect(server.url, n_predict=12, sampling=GREEDY)
    try:
        info = session.info()
        assert info.can_speculate and "inferred from the stream" in info.note
        turn, evs = run(session.send("Say hello."))
        assert NO_DRAFT_NOTICE in [e.message for e in evs if isinstance(e, Notice)]
        assert turn.draft_n == 0 and set(turn.kinds) == {"plain"}
        assert all(s.drafted == 0 for s in evs if isinstance(s, Step))
    finally:
        session.close()


def test_two_sessions_side_by_side_keep_their_own_state(self_draft_server, skip_draft_server):
    a = connect(self_draft_server.url, n_predict=10, sampling=GREEDY)
    b = connect(skip_draft_server.url, n_predict=10, sampling=GREEDY)
    try:
        results: dict[str, Turn] = {}

        def chat(name: str, session: RemoteSession) -> None:
            results[name] = run(session.send("Count from 1 to 5."))[0]

        threads = [threading.Thread(target=chat, args=("a", a)), threading.Thread(target=chat, args=("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert "corrected" not in results["a"].kinds  # the self-draft server
        assert results["a"].text == results["b"].text  # same target at T = 0: same reply, other fates
        assert a.info().target_name != b.info().target_name and len(a.messages) == len(b.messages) == 2
    finally:
        a.close()
        b.close()
