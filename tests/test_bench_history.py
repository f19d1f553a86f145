"""``specchat bench --suite history`` (issue 23): earlier conversations of one kind of task saved first - the bundled
model's own greedy answers, in the bench's own data dir - then a new task of the same kind measured with ``suffix``
against ``ngram`` and plain decoding, side by side. Tiny: 3 earlier conversations, few tokens; nothing timed."""

from __future__ import annotations

import io
import json

import pytest

import specchat.bench.command as bench_command
from specchat.bench.history_suite import ASKED_AGAIN, MAX_EARLIER, NEW_TASKS, earlier_tasks, history_suite, task
from specchat.cli import build_parser, main

pytestmark = pytest.mark.usefixtures("isolated_config")


def _bench(argv: list[str]) -> tuple[int, str, str]:
    args = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    rc = bench_command.main(args, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_the_history_suite_drafts_from_the_saved_conversations_and_keeps_plain_decodings_text(tmp_path, isolated_config):
    """Fails if the suite does not save the earlier answers where the suffix drafter reads them (no history drafts),
    if a drafter's greedy text differs from plain decoding's, if ngram is not measured beside it, if a task asked
    again is not copied from its saved reply, or if the user's own history database is written."""
    out_json = tmp_path / "history.json"
    rc, out, err = _bench(["bench", "--suite", "history", "--history-size", "3", "--n-predict", "32", "--k", "16",
                           "--runs", "1", "--threads", "1", "--no-progress", "--no-arithmetic", "--json", str(out_json)])
    assert rc == 0, err
    assert "history: 3 earlier conversation(s)" in out and "drafters compared: suffix against ngram" in out
    assert "drafters side by side" in out
    records = json.loads(out_json.read_text())["records"]
    by = {(r["mode"], r["drafter"]) for r in records}
    assert by == {("baseline", "none"), ("spec", "suffix"), ("spec", "ngram")}
    suffix = next(r for r in records if r["drafter"] == "suffix")
    ngram = next(r for r in records if r["drafter"] == "ngram")
    assert suffix["accepted_by_origin"].get("history", 0) > 0, suffix["accepted_by_origin"]
    assert len(suffix["history_conversations"]) >= 1
    assert ngram["accepted_by_origin"].get("history", 0) == 0
    baseline = next(r for r in records if r["mode"] == "baseline")
    assert suffix["text"] == baseline["text"] and ngram["text"] == baseline["text"]
    assert suffix["draft_n_accepted"] > ngram["draft_n_accepted"]
    again = next(r for r in records if r["drafter"] == "suffix" and r["prompt"] == ASKED_AGAIN)
    assert again["accepted_by_origin"].get("history", 0) >= 24, again  # the saved reply, copied (32 tokens)
    user_data = isolated_config / "data"
    assert not list(user_data.rglob("history.sqlite3")), "the bench wrote into the user's data dir"


def test_the_new_tasks_are_never_among_the_earlier_ones_and_ask_each_statistic_once():
    *entries, again = history_suite()
    assert len(entries) == NEW_TASKS and len({e["name"] for e in entries}) == NEW_TASKS
    assert not {e["prompt"] for e in entries} & set(earlier_tasks(MAX_EARLIER))
    assert len({e["prompt"].split()[5].split("_")[0] for e in entries}) == NEW_TASKS  # "named average_revenue"
    assert entries[-1]["prompt"] == task(MAX_EARLIER + NEW_TASKS - 1) and entries[-1]["name"] == "history-average_revenue"
    assert again["name"] == ASKED_AGAIN and again["prompt"] in earlier_tasks(1)  # asked again, whatever the size
    assert len(set(earlier_tasks(20))) == 20


@pytest.mark.parametrize("argv, needle", [
    (["--suite", "history", "--history-size", "0"], "--history-size 0 must be 1.."),
    (["--history-size", "3"], "--history-size is for --suite history"),
    (["--suite", "history", "--formats", "F16"], "--formats does not go with it"),
    (["--suite", "history", "--draft", "bundled"], "give --draft suffix,bundled"),
])
def test_bad_history_flags_are_one_line_and_exit_2(capsys, argv, needle):
    rc = main(["bench", *argv, "--no-progress"])
    _out, err = capsys.readouterr()
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_seed_history_cancelled_mid_reply_saves_only_the_finished_conversations(tmp_path, bundled_model):
    """Issue 23's Esc during the tour's seeding, at the engine: ``cancelled()`` turns true after the first round of
    the second reply. Fails if the cancel waits for the reply (or the other replies) to end, if the reply cut short
    is saved, if nothing says it was cancelled, or if the session's controls are left greedy with speculation off."""
    from dataclasses import replace

    from specchat.bench.history_suite import bench_settings, seed_history
    from specchat.config import load_settings
    from specchat.engine.events import Step, Turn
    from specchat.history import HistoryStore
    from specchat.loading import load_engine
    from specchat.race import RaceCancelled

    own = tmp_path / "own"
    base = load_settings(None, {"data_dir": str(tmp_path / "data"), "threads": 1, "target": "bundled"})
    session = load_engine(bench_settings(base, own))
    try:
        session.n_predict = 24
        session.controls.set_speculative(True)  # what seeding turns off and must give back
        session.controls.set_sampling(replace(session.controls.snapshot().sampling, temperature=0.7, top_k=33))
        before = session.controls.snapshot()
        replies: list[dict] = []  # per reply: the rounds (Steps) it yielded, its Turn
        send = session.send

        def counted_send(prompt: str):
            reply = {"steps": 0, "turn": None, "prompt": prompt}
            replies.append(reply)
            for event in send(prompt):
                if isinstance(event, Step):
                    reply["steps"] += 1
                elif isinstance(event, Turn):
                    reply["turn"] = event
                yield event

        session.send = counted_send
        prompts = earlier_tasks(3)
        with pytest.raises(RaceCancelled):
            seed_history(session, own / "history.sqlite3", prompts, lambda i, n, what: None,
                         cancelled=lambda: len(replies) >= 2 and replies[1]["steps"] >= 1)
        assert [r["prompt"] for r in replies] == prompts[:2]  # the third reply never started
        first, second = (r["turn"] for r in replies)
        assert first.stop_reason == "length" and first.n_steps == 24  # the first reply ran to its end
        assert second.stop_reason == "stopped" and second.n_steps <= 2, second  # stopped within a round
        with HistoryStore(own / "history.sqlite3") as store:
            convs = store.list_conversations()
            assert len(convs) == 1  # the finished conversation only, never the half one
            _, messages = store.load(convs[0].id)
        assert [(m.role, m.content) for m in messages if m.role != "system"] == [
            ("user", prompts[0]), ("assistant", first.text)]
        after = session.controls.snapshot()
        assert after.sampling == before.sampling and after.speculative == before.speculative
    finally:
        session.close()
