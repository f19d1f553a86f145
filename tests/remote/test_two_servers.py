"""Two llama-servers compared (issue 14, ``--server-b``): the race (A then B, each lane its server) and the bench
(both measured on one suite, interleaved by prompt, the ratio B / A), against real servers: server A the bundled
model self-drafted, server B the same model without a draft - the same weights, so greedy texts are equal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specchat.cli import main
from specchat.engine.controls import SamplingParams
from specchat.engine.protocol import Message
from specchat.engine.remote import connect
from specchat.race import LANE_A, LANE_B, RaceReplay, RaceResult, record_server_race

from .conftest import SERVER_K, ServerProcess, free_port

pytestmark = pytest.mark.usefixtures("isolated_config")

PROMPT = "Count from 1 to 10."
N = 24


def _host(url: str) -> str:
    return url.removeprefix("http://")


def test_record_server_race(self_draft_server, plain_server):
    """A then B, greedy: the same text (same weights), A's lane drafted and B's did not, each lane labelled by
    its server; both sessions are as before afterwards (conversation, sampling, prompt cache)."""
    a = connect(self_draft_server.url, n_predict=N, sampling=SamplingParams(temperature=0.7, seed=3))
    b = connect(plain_server.url, n_predict=N)
    try:
        earlier = [Message("user", "Hi")]
        a.load(earlier)
        seen: list[str] = []
        race = record_server_race(a, b, PROMPT, on_piece=lambda lane, p: seen.append(lane))
        assert isinstance(race, RaceResult) and race.remote and race.same_weights
        assert race.identical and race.off.text == race.on.text and race.difference == "" and not race.defect
        assert race.off.turn.predicted_n == race.on.turn.predicted_n == N
        assert race.label(LANE_A) == f"A: SmolLM2-135M-Instruct.Q4_1.gguf @ {_host(self_draft_server.url)}"
        assert race.label(LANE_B) == f"B: SmolLM2-135M-Instruct.Q4_1.gguf @ {_host(plain_server.url)}"
        assert race.off.turn.draft_n > 0 and race.off.turn.draft_n_accepted == race.off.turn.draft_n
        assert race.on.turn.draft_n == 0 and {p.kind for p in race.on.pieces} == {"plain"}
        assert race.ratio == pytest.approx(race.on.tok_s / race.off.tok_s)
        assert seen == [LANE_A] * len(race.off.pieces) + [LANE_B] * len(race.on.pieces)
        for run in (race.off, race.on):
            ts = [p.t for p in run.pieces]
            assert ts == sorted(ts) and ts[0] >= 0.0 and ts[-1] <= run.t_end
            assert run.turn.prompt_n > 5  # the prompt cache was off: each server decoded the whole prompt
        # the race screen's replay plays it like a local race
        now = [0.0]
        replay = RaceReplay(race, clock=lambda: now[0])
        replay.start()
        now[0] = max(race.off.t_end, race.on.t_end)
        assert len(replay.due()) == len(race.off.pieces) + len(race.on.pieces) and replay.done
        assert a.messages == earlier and b.messages == []
        assert a.controls.snapshot().sampling == SamplingParams(temperature=0.7, seed=3)
        assert a.cache_prompt and b.cache_prompt
    finally:
        a.close()
        b.close()


def test_specchat_race_two_servers_json(capsys, self_draft_server, plain_server):
    rc = main(["race", "--server", self_draft_server.url, "--server-b", plain_server.url, "--prompt", PROMPT,
               "--n-predict", str(N), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["remote"] is True and data["same_weights"] is True and data["identical"] is True
    assert data["off"]["text"] == data["on"]["text"] and data["difference"] is None
    assert data["off"]["label"].startswith("A: SmolLM2") and data["off"]["label"].endswith(_host(self_draft_server.url))
    assert data["on"]["label"].startswith("B: SmolLM2") and data["on"]["label"].endswith(_host(plain_server.url))
    assert data["off"]["drafter"] == "server: draft-simple" and data["off"]["k"] == SERVER_K
    assert data["on"]["drafter"] == "server" and data["on"]["k"] == 0 and data["on"]["draft_n"] == 0
    assert data["k"] is None and data["auto_k"] is False
    assert data["ratio"] == pytest.approx(data["on"]["tok_s"] / data["off"]["tok_s"])
    assert all(len(p) == 4 for lane in ("off", "on") for p in data[lane]["pieces"])


def test_specchat_race_two_servers_text(capsys, self_draft_server, plain_server):
    rc = main(["race", "--server", self_draft_server.url, "--server-b", plain_server.url, "--prompt", PROMPT,
               "--n-predict", str(N)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"race: server A SmolLM2-135M-Instruct.Q4_1.gguf @ {_host(self_draft_server.url)} "
                               f"(server: draft-simple, K {SERVER_K}) vs server B ")
    assert f"vs server B SmolLM2-135M-Instruct.Q4_1.gguf @ {_host(plain_server.url)} (no speculation)" in lines[0]
    assert lines[1].startswith("A: ") and "acceptance 100 %" in lines[1]
    assert lines[2].startswith("B: ") and lines[2].endswith("(no draft)")
    assert lines[3].startswith("ratio: ") and lines[3].endswith("(server B / server A)")
    assert lines[4] == f"texts: identical ({N} tokens)"


def test_two_different_models_may_differ(capsys, self_draft_server, skip_draft_model, tmp_path):
    """Server B runs other weights (the layer-skip model): the texts differ, and that is said, not a defect."""
    other = ServerProcess(skip_draft_model, tmp_path / "other.log").start()
    try:
        rc = main(["race", "--server", self_draft_server.url, "--server-b", other.url, "--prompt", PROMPT,
                   "--n-predict", "8", "--json"])
    finally:
        other.stop()
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(out)
    assert data["same_weights"] is False and data["identical"] is False
    assert "not the same weights" in data["difference"] and "not a defect" in data["difference"]
    assert "smollm2-skip.gguf" in data["difference"]


def test_server_b_refused_is_one_line_naming_b(capsys, self_draft_server):
    dead = f"http://127.0.0.1:{free_port()}"
    rc = main(["race", "--server", self_draft_server.url, "--server-b", dead, "--prompt", PROMPT, "--n-predict", "4"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"specchat: error: server B: cannot connect to llama-server at {dead}: connection refused")


def test_server_a_refused_is_one_line_naming_a(capsys, plain_server):
    dead = f"http://127.0.0.1:{free_port()}"
    rc = main(["race", "--server", dead, "--server-b", plain_server.url, "--prompt", PROMPT, "--n-predict", "4"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"specchat: error: server A: cannot connect to llama-server at {dead}")


@pytest.mark.parametrize("command", [["race", "--prompt", "hi"], ["bench"]])
def test_server_b_without_server_a(capsys, command):
    rc = main([*command, "--server-b", "http://127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "server B (http://127.0.0.1:9" in err and "give --server URL" in err


def test_server_b_from_the_environment_without_server_a(capsys, monkeypatch):
    monkeypatch.setenv("SPECCHAT_SERVER_B_URL", "http://127.0.0.1:9")
    rc = main(["race", "--prompt", "hi"])
    _out, err = capsys.readouterr()
    assert rc == 2 and "server B (http://127.0.0.1:9" in err


def test_a_race_on_one_server_needs_server_b(capsys):
    rc = main(["race", "--server", "http://127.0.0.1:9", "--prompt", "hi"])
    _out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "a race needs two llama-servers" in err and "--server-b URL" in err


@pytest.mark.parametrize("flag", [["--k", "2"], ["--draft", "ngram"], ["--auto-k"], ["--threads", "2"]])
def test_race_refuses_local_flags_with_servers(capsys, flag):
    rc = main(["race", "--server", "http://127.0.0.1:9", "--server-b", "http://127.0.0.1:8", "--prompt", "hi", *flag])
    _out, err = capsys.readouterr()
    assert rc == 2 and f"{flag[0]} does not apply to a llama-server" in err


def test_bad_server_b_url_is_one_line(capsys):
    rc = main(["race", "--server", "http://127.0.0.1:9", "--server-b", "ftp://x", "--prompt", "hi"])
    _out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "server_b_url" in err


def test_the_app_keeps_server_b_in_its_settings(tmp_path: Path):
    from specchat.cli import build_parser
    from specchat.commands.tui import overrides_from_args
    from specchat.config import load_settings

    args = build_parser().parse_args(["--server", "http://127.0.0.1:9", "--server-b", "http://127.0.0.1:8/"])
    settings = load_settings(None, overrides_from_args(args))
    assert (settings.server_url, settings.server_b_url) == ("http://127.0.0.1:9", "http://127.0.0.1:8")


def test_the_app_refuses_server_b_without_server_a(capsys):
    rc = main(["--server-b", "http://127.0.0.1:8"])
    out, err = capsys.readouterr()
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "give --server URL" in err


def test_bench_two_servers(capsys, tmp_path, self_draft_server, plain_server):
    """Both servers on one suite, interleaved by prompt (A B A B), a report per server with the local fields,
    and the ratio B / A per pair, per prompt and overall."""
    from specchat.bench.runner import RECORD_FIELDS

    from .test_cli import BENCH_KEYS

    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"name": "count", "prompt": "Count from 1 to 8."},
                                 {"name": "hello", "prompt": "Say hello."}]))
    report = tmp_path / "bench.json"
    rc = main(["bench", "--server", self_draft_server.url, "--server-b", plain_server.url, "--suite", str(suite),
               "--runs", "2", "--n-predict", "12", "--json", str(report), "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    data = json.loads(report.read_text())
    assert set(data) == {"specchat_bench", "interrupted", "a", "b", "ratio"}
    for side, server, mode, k in (("a", self_draft_server, "spec", SERVER_K), ("b", plain_server, "baseline", 0)):
        rep = data[side]
        assert set(rep) == BENCH_KEYS | {"server"} and rep["server"] == server.url
        assert rep["ks"] == [k] and len(rep["records"]) == 4
        assert [(r["prompt"], r["run"]) for r in rep["records"]] == [("count", 0), ("count", 1), ("hello", 0), ("hello", 1)]
        for record in rep["records"]:
            assert set(record) == set(RECORD_FIELDS) and record["mode"] == mode and record["k"] == k
            assert record["prompt_n"] > 5  # the prompt cache was off on both servers
    # interleaved: the A and B runs of one (prompt, run) share a pair, in plan order A B A B
    assert [r["pair"] for r in data["a"]["records"]] == [r["pair"] for r in data["b"]["records"]] == [0, 1, 2, 3]
    assert data["a"]["records"][0]["draft_n_accepted"] == data["a"]["records"][0]["draft_n"] > 0
    assert all(r["draft_n"] == 0 for r in data["b"]["records"])
    ratio = data["ratio"]
    assert ratio["pairs"] == 4 and len(ratio["per_pair"]) == 4
    for pair in ratio["per_pair"]:
        a_rec = data["a"]["records"][pair["pair"]]
        b_rec = data["b"]["records"][pair["pair"]]
        assert pair["b_over_a"] == pytest.approx(b_rec["predicted_per_second"] / a_rec["predicted_per_second"])
    assert [p["prompt"] for p in ratio["per_prompt"]] == ["count", "hello"]
    assert ratio["min"] <= ratio["b_over_a"] <= ratio["max"]
    assert f"(drafter server: draft-simple, its K {SERVER_K}) vs server B SmolLM2" in out
    assert "(no speculation); 2 run(s) per prompt on each, interleaved A B A B" in out
    assert "all prompts" in out and "B / A" in out


def test_bench_two_servers_runs_interleaved(self_draft_server, plain_server, tmp_path):
    """The order the runs happen in: A, B, A, B (each record reaches the hook as it is measured)."""
    import argparse
    import io

    from specchat.bench import command as bench

    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"name": "one", "prompt": "Say one."}, {"name": "two", "prompt": "Say two."}]))
    args = argparse.Namespace(server=self_draft_server.url, server_b=plain_server.url, target=None, draft=None,
                              k=None, suite=str(suite), runs=2, n_predict=4, temperature=None, seed=None, auto=False,
                              json=None, plot=False, threads=None, n_ctx=None, no_arithmetic=False, progress=False,
                              no_progress=True)
    seen: list[tuple[str, str]] = []
    rc = bench.main(args, out=io.StringIO(), err=io.StringIO(), on_record=lambda r: seen.append((r["server"], r["prompt"])))
    assert rc == 0
    assert seen == [(s, p) for p in ("one", "two") for _run in range(2) for s in ("A", "B")]


def test_bench_server_b_refused(capsys, self_draft_server):
    dead = f"http://127.0.0.1:{free_port()}"
    rc = main(["bench", "--server", self_draft_server.url, "--server-b", dead, "--runs", "1", "--n-predict", "4",
               "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"specchat: error: server B: cannot connect to llama-server at {dead}: connection refused")


def test_a_parting_of_the_same_weights_is_judged_by_server_a(self_draft_server, plain_server):
    """Where two same-weights replies part, server A scores both tokens: its runner-up is a near-tie exactly
    when the logit gap is within NEAR_TIE; a token far down its list is a defect; other weights are neither."""
    from dataclasses import replace

    from specchat.race import NEAR_TIE, server_difference

    a = connect(self_draft_server.url, n_predict=8)
    b = connect(plain_server.url, n_predict=8)
    try:
        race = record_server_race(a, b, PROMPT)
        prompt_ids = a.prompt_tokens([Message("user", PROMPT)])
        at = 3
        top = a.server.top_logprobs(prompt_ids + list(race.off.turn.tokens[:at]), 40)
        ranked = sorted(top, key=top.__getitem__, reverse=True)
        assert ranked[0] == race.off.turn.tokens[at]  # greedy: the server's own first choice

        def b_chose(token: int):
            tokens = list(race.on.turn.tokens)
            tokens[at] = token
            return replace(race.on, turn=replace(race.on.turn, tokens=tokens))

        for token in (ranked[1], ranked[-1]):
            gap = top[ranked[0]] - top[token]
            first, difference = server_difference(a, prompt_ids, race.off, b_chose(token), model_b=None)
            assert first == at and f"the texts part at token {at + 1}" in difference
            assert f"scores them {gap:.2f} apart" in difference
            assert f"{a.server.detokenize([token])!r} on server B" in difference
            assert ("not a near-tie: a defect" in difference) == (gap > NEAR_TIE)
            result = replace(race, first_difference=first, difference=difference)
            assert result.defect == (gap > NEAR_TIE)
        assert top[ranked[0]] - top[ranked[-1]] > NEAR_TIE  # the 40th choice is no near-tie
        first, difference = server_difference(a, prompt_ids, race.off, b_chose(ranked[-1]), model_b="other.gguf")
        assert first == at and "not the same weights" in difference
        assert not replace(race, first_difference=first, difference=difference, same_weights=False).defect
    finally:
        a.close()
        b.close()


def _pty_env(tmp_path: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    config = tmp_path / "config.toml"
    config.write_text("")
    env.update(TERM="xterm-256color", SPECCHAT_CONFIG=str(config), SPECCHAT_DATA_DIR=str(tmp_path))
    return env


def test_the_app_with_two_servers_in_a_real_terminal(tmp_path, self_draft_server, plain_server):
    """``specchat --server A --server-b B`` starts on server A, and quits cleanly."""
    import sys

    import pexpect

    from .test_tui import Screen

    cols, rows = 80, 24
    child = pexpect.spawn(sys.executable, ["-m", "specchat.cli", "--server", self_draft_server.url, "--server-b",
                                           plain_server.url], env=_pty_env(tmp_path), dimensions=(rows, cols))
    screen = Screen(child, cols, rows)
    try:
        screen.wait_for(r"ready")
        assert _host(self_draft_server.url) in screen.text()  # the engine is server A
        child.send("\x11")  # ctrl+q
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, screen.text()


def test_the_app_refuses_server_b_alone_in_a_real_terminal(tmp_path):
    import sys

    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "specchat.cli", "--server-b", "http://127.0.0.1:8"],
                          env=_pty_env(tmp_path), dimensions=(24, 80))
    try:
        child.expect(pexpect.EOF, timeout=60)
        output = child.before.decode()
    finally:
        child.close(force=True)
    assert child.exitstatus == 2
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("specchat: error: server B (http://127.0.0.1:8")
    assert "\x1b[?1049h" not in output  # the app never took the screen


def test_bench_two_servers_interrupted_keeps_what_was_measured(self_draft_server, plain_server, tmp_path):
    """Ctrl-C after the third run (A, B, A): the report has both of the first pair and A's half of the second;
    the ratio counts only the complete pair; exit code 130."""
    import argparse
    import io

    from specchat.bench import command as bench

    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"name": "one", "prompt": "Say one."}]))
    report = tmp_path / "partial.json"
    args = argparse.Namespace(server=self_draft_server.url, server_b=plain_server.url, target=None, draft=None,
                              k=None, suite=str(suite), runs=3, n_predict=4, temperature=None, seed=None, auto=False,
                              json=str(report), plot=False, threads=None, n_ctx=None, no_arithmetic=False,
                              progress=False, no_progress=True)
    seen: list[str] = []

    def interrupt_after_three(record: dict) -> None:
        seen.append(record["server"])
        if len(seen) == 3:
            raise KeyboardInterrupt

    out = io.StringIO()
    assert bench.main(args, out=out, err=io.StringIO(), on_record=interrupt_after_three) == 130
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["a"]["interrupted"] is True
    assert len(data["a"]["records"]) == 2 and len(data["b"]["records"]) == 1
    assert data["ratio"]["pairs"] == 1 and [p["pair"] for p in data["ratio"]["per_pair"]] == [0]
    assert "interrupted: 3 run(s) measured so far" in out.getvalue()


async def test_the_race_key_races_server_a_against_server_b_in_the_app(tmp_path, self_draft_server, plain_server):
    """``specchat --server A --server-b B``: the race key (alt+r) runs the message on server A, then on server B,
    and replays them side by side with the servers as the lanes: same greedy text (same weights), A's speculative
    colours, both speeds and the ratio B / A. Without --server-b the key says how to race servers."""
    from specchat.commands.tui import make_factory
    from specchat.config import Settings
    from specchat.race import LANE_A, LANE_B
    from specchat.tui.app import SpecChatApp
    from specchat.tui.screens.race import RaceScreen
    from specchat.tui.widgets.prompt import PromptInput

    from .test_tui import settle

    settings = Settings(
        server_url=self_draft_server.url, server_b_url=plain_server.url, n_predict=16, data_dir=tmp_path,
        sampling={"temperature": 0.0},
    )
    app = SpecChatApp(make_factory(settings), settings, None, make_factory=make_factory)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        assert app.engine is not None, app.engine_error
        app.query_one(PromptInput).text = "Count from 1 to 5."
        await pilot.press("alt+r")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, RaceScreen) and screen.titles[LANE_A] == "server A"
        for _ in range(600):  # until the race is recorded (two short replies on two servers)
            if screen.race is not None or not screen.is_attached:
                break
            await pilot.pause(0.1)
        race = screen.race
        assert race is not None and race.remote and race.same_weights
        assert race.off.turn.tokens and race.off.text == race.on.text
        assert _host(self_draft_server.url) in race.label(LANE_A) and _host(plain_server.url) in race.label(LANE_B)
        assert {p.kind for p in race.off.pieces} & {"accepted", "bonus"}  # server A speculates, B does not
        assert not {p.kind for p in race.on.pieces} & {"accepted", "bonus"}
        assert app.engine.messages == []  # the race left the conversation as it was
        await pilot.press("escape")
        await pilot.pause()

    notes: list[str] = []
    alone = Settings(server_url=self_draft_server.url, n_predict=16, data_dir=tmp_path)
    app = SpecChatApp(make_factory(alone), alone, None, make_factory=make_factory)
    async with app.run_test(size=(120, 36)) as pilot:
        app.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]
        await settle(pilot)
        app.query_one(PromptInput).text = "Count from 1 to 5."
        await pilot.press("alt+r")
        await pilot.pause()
        assert not isinstance(app.screen, RaceScreen) and any("--server-b" in n for n in notes)


def test_a_server_race_cancelled_mid_run_stops_the_server_and_restores_both(self_draft_server, plain_server):
    """``cancelled()`` turning true after server A's third piece: A's generation is asked to stop, B never runs,
    RaceCancelled, and both conversations are as before (the app's Esc during a server race)."""
    from specchat.race import RaceCancelled

    a = connect(self_draft_server.url, n_predict=64)
    b = connect(plain_server.url, n_predict=64)
    try:
        earlier = [Message("user", "Hi")]
        a.load(earlier)
        seen: list[str] = []
        with pytest.raises(RaceCancelled):
            record_server_race(a, b, PROMPT, on_piece=lambda lane, p: seen.append(lane), cancelled=lambda: len(seen) >= 3)
        assert LANE_B not in seen and 3 <= len(seen) < 64
        assert a.messages == earlier and b.messages == []
    finally:
        a.close()
        b.close()
