"""``specchat bench --suite history`` (issue 23): earlier conversations of one kind of task saved first - the bundled
model's own greedy answers, in the bench's own data dir - then a new task of the same kind measured with ``suffix``
against ``ngram`` and plain decoding, side by side. Tiny: 3 earlier conversations, few tokens; nothing timed."""

from __future__ import annotations

import io
import json

import pytest

import specchat.bench.command as bench_command
from specchat.bench.history_suite import MAX_EARLIER, earlier_tasks, history_suite, task
from specchat.cli import build_parser, main

pytestmark = pytest.mark.usefixtures("isolated_config")


def _bench(argv: list[str]) -> tuple[int, str, str]:
    args = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    rc = bench_command.main(args, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_the_history_suite_drafts_from_the_saved_conversations_and_keeps_plain_decodings_text(tmp_path, isolated_config):
    """Fails if the suite does not save the earlier answers where the suffix drafter reads them (no history drafts),
    if a drafter's greedy text differs from plain decoding's, if ngram is not measured beside it, or if the user's
    own history database is written."""
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
    user_data = isolated_config / "data"
    assert not list(user_data.rglob("history.sqlite3")), "the bench wrote into the user's data dir"


def test_the_measured_task_is_never_one_of_the_earlier_ones():
    (entry,) = history_suite()
    assert entry["prompt"] == task(MAX_EARLIER) and entry["prompt"] not in earlier_tasks(MAX_EARLIER)
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
