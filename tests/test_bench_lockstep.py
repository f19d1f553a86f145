"""``specchat bench``'s pairs measured round by round (:mod:`specchat.bench.lockstep`): each side on its own clock,
the side that is behind runs next, and every pair measured twice with the two copies of the target swapped, so that
a copy's own speed cancels from the pair's speedup - with scripted sessions on a scripted clock, then on the real
bundled model through the command."""

from __future__ import annotations

import io
import json
import math
import os
import time

import pytest

import specchat.bench.command as bench_command
from specchat.bench import lockstep
from specchat.bench.lockstep import SideClock, interleave, run_interleaved
from specchat.bench.runner import BenchRunner, RunStats, count_event
from specchat.cli import build_parser
from specchat.engine.events import Turn


class FakeTime:
    """The wall clock the side clocks divide, moved by the scripted streams."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture()
def fake_time(monkeypatch):
    ft = FakeTime()
    monkeypatch.setattr(lockstep, "now", ft)
    return ft


def test_a_side_clock_runs_only_while_its_side_runs(fake_time):
    c = SideClock()
    fake_time.t = 5.0
    assert c() == 0.0
    c.resume()
    fake_time.t = 7.0
    assert c() == 2.0
    c.pause()
    fake_time.t = 100.0  # the other side runs
    assert c() == 2.0
    c.resume()
    fake_time.t = 101.5
    c.pause()
    assert c() == 3.5


def test_the_stream_whose_clock_is_behind_runs_next(fake_time):
    """A side whose events cost 3 s against one whose events cost 1 s: the cheap side runs three events for each
    of the dear side's, so both have had the same time whenever one is about to run; on a tie the first runs."""

    def stream(name, cost, n):
        for i in range(n):
            fake_time.t += cost
            yield name, i

    order: list[str] = []
    clocks = [SideClock(), SideClock()]
    interleave([stream("a", 3.0, 4), stream("b", 1.0, 12)], clocks, lambda i, ev: order.append(ev[0]))
    assert "".join(order) == "abbb" * 4
    assert clocks[0]() == clocks[1]() == 12.0
    assert fake_time.t == 24.0  # the two own clocks share the wall clock between them


def test_a_failing_stream_closes_the_other_and_the_error_propagates(fake_time):
    closed = []

    def good():
        try:
            while True:
                fake_time.t += 1.0
                yield "ok"
        finally:
            closed.append("good")

    def bad():
        fake_time.t += 1.0
        yield "one"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        interleave([good(), bad()], [SideClock(), SideClock()], lambda i, ev: None)
    assert closed == ["good"]


def _turn(n: int, ms: float, text: str) -> Turn:
    return Turn(
        prompt_n=3, prompt_ms=1.0, predicted_n=n, predicted_ms=ms, predicted_per_second=n / ms * 1000.0, draft_n=0,
        draft_n_accepted=0, acceptance=None, mean_len=1.0, accepted_per_pos=[], draft_ms_per_step=0.0,
        verify_ms_per_step=0.0, overhead_ms=0.0, step_ms=ms, n_steps=n, n_spec_steps=0, stop_reason="length",
        text=text,
    )


class _Controls:
    def __init__(self) -> None:
        self.speculative = False

    def set_auto_k(self, on: bool) -> None:
        pass

    def set_k(self, k: int) -> None:
        pass

    def set_speculative(self, on: bool) -> None:
        self.speculative = on


class _CostModel:
    def reset(self) -> None:
        pass


class _Decoder:
    def __init__(self) -> None:
        self.clock = time.perf_counter
        self.cost_model = _CostModel()

    def reset(self) -> None:
        pass

    def reset_auto_k(self) -> None:
        pass


class CopyOfATarget:
    """A scripted session: a token costs 1 s of the fake wall clock plain, 0.5 s speculating, times ``factor`` (this
    copy's own speed); its reply's figures are read on its decoder's clock, as the engine's are."""

    def __init__(self, fake_time: FakeTime, factor: float) -> None:
        self.fake_time, self.factor = fake_time, factor
        self.decoder, self.controls = _Decoder(), _Controls()

    def reset(self) -> None:
        pass

    def send(self, prompt: str):
        clock = self.decoder.clock
        t0 = clock()
        per_token = (0.5 if self.controls.speculative else 1.0) * self.factor
        for _ in range(8):
            self.fake_time.t += per_token
            yield "a piece"
        yield _turn(8, (clock() - t0) * 1000.0, "same text")


def test_each_pair_runs_twice_with_the_copies_swapped_and_a_copys_own_speed_cancels(fake_time):
    """Copy 2 is 10 % slower than copy 1 at everything; speculation halves a token's cost on both. Measured one way
    only (the baseline on copy 1, the mode on copy 2) the pair would read 2 / 1.1; swapped and combined it reads
    exactly 2, each side's tok/s the geometric mean of its two copies'."""
    one, two = CopyOfATarget(fake_time, 1.0), CopyOfATarget(fake_time, 1.1)
    suite = [{"name": "p", "prompt": "hello"}]
    runner = BenchRunner(one, suite, [4], 2, twins={"": two}, run_fn=lambda *a: pytest.fail("a pair ran alone"))
    recs = runner.run()
    assert [r["mode"] for r in recs] == ["baseline", "spec", "baseline", "spec"]
    for base, spec in zip(recs[0::2], recs[1::2]):
        assert base["halves"] == pytest.approx([1.0, 1 / 1.1]) and spec["halves"] == pytest.approx([2.0, 2 / 1.1])
        assert base["predicted_per_second"] == pytest.approx(math.sqrt(1.0 / 1.1))
        assert spec["speedup"] == pytest.approx(2.0)
        assert spec["predicted_ms"] == pytest.approx(spec["predicted_n"] / spec["predicted_per_second"] * 1000.0)
    # each side's reply was timed on its own clock only, and the clocks are the engine's own again afterwards
    assert one.decoder.clock is time.perf_counter and two.decoder.clock is time.perf_counter


def test_without_a_second_copy_every_run_is_one_reply_after_the_other(fake_time):
    one = CopyOfATarget(fake_time, 1.0)
    calls = []

    def run_fn(session, prompt, mode, k):
        calls.append(mode)
        return _turn(8, 8000.0 if mode == "baseline" else 4000.0, "t"), RunStats()

    recs = BenchRunner(one, [{"name": "p", "prompt": "hello"}], [4], 1, run_fn=run_fn).run()
    assert calls == ["baseline", "spec"] and all(r["halves"] is None for r in recs)
    assert recs[1]["speedup"] == pytest.approx(2.0)


def test_a_stream_error_restores_the_engines_clocks(fake_time):
    one, two = CopyOfATarget(fake_time, 1.0), CopyOfATarget(fake_time, 1.0)

    def broken(session):
        yield "x"
        raise RuntimeError("engine gone")

    with pytest.raises(RuntimeError, match="engine gone"):
        run_interleaved([(one, lambda s: s.send("p")), (two, broken)], count_event, RunStats)
    assert one.decoder.clock is time.perf_counter and two.decoder.clock is time.perf_counter


# -- the real thing ---------------------------------------------------------------------------------------------

SUITE = [{"name": "copy", "prompt": "Repeat exactly: the quick brown fox jumps over the lazy dog. "
                                    "The quick brown fox jumps over the lazy dog."}]


def _bench(tmp_path, monkeypatch, *extra: str) -> tuple[int, dict, str, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for k in list(os.environ):
        if k.startswith("SPECCHAT_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    out_json = tmp_path / "out.json"
    args = build_parser().parse_args(["bench", "--suite", str(suite), "--threads", "1", "--n-predict", "24",
                                      "--no-progress", "--no-arithmetic", "--json", str(out_json), *extra])
    out, err = io.StringIO(), io.StringIO()
    rc = bench_command.main(args, out=out, err=err)
    return rc, json.loads(out_json.read_text()), out.getvalue(), err.getvalue()


def test_the_bench_measures_pairs_round_by_round_on_the_bundled_model(tmp_path, monkeypatch, bundled_model):
    """``specchat bench`` (the default ``--interleave rounds``) on the real bundled model with n-gram drafting:
    every record carries its tok/s on both copies, its figure is their geometric mean, a mode's speedup is its
    ratio to its own baseline's, and every reply - both copies, plain, fixed K and auto-K - is the same greedy text."""
    rc, data, out, err = _bench(tmp_path, monkeypatch, "--draft", "ngram", "--k", "0,4", "--auto", "--runs", "2")
    assert rc == 0, err
    assert data["interleave"] == "rounds"
    assert "interleaved round by round on two copies" in out and "A B A B" not in out  # the header says how, once
    recs = data["records"]
    assert [r["mode"] for r in recs] == ["baseline", "spec", "baseline", "auto"] * 2
    for r in recs:
        a, b = r["halves"]
        assert a > 0 and b > 0 and r["predicted_per_second"] == pytest.approx(math.sqrt(a * b))
    for base, mode in zip(recs[0::2], recs[1::2]):
        assert mode["pair"] == base["pair"]
        assert mode["speedup"] == pytest.approx(mode["predicted_per_second"] / base["predicted_per_second"])
    assert len({r["text"] for r in recs}) == 1 and recs[0]["text"]
    assert any(r["draft_n_accepted"] > 0 for r in recs if r["mode"] != "baseline")


def test_replies_one_after_the_other_on_request_or_where_a_copy_does_not_fit(tmp_path, monkeypatch, tiny_pair):
    target, draft = tiny_pair
    rc, data, out, _err = _bench(tmp_path / "a", monkeypatch, "--target", str(target), "--draft", str(draft),
                                 "--k", "0,2", "--runs", "1", "--interleave", "replies")
    assert rc == 0 and data["interleave"] == "replies"
    assert "pairs: one reply after the other (A B A B ...)" in out and "round by round" not in out
    assert all(r["halves"] is None for r in data["records"]) and len(data["records"]) == 2
    monkeypatch.setattr(lockstep, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    rc, data, _out, err = _bench(tmp_path / "b", monkeypatch, "--target", str(target), "--draft", str(draft),
                                 "--k", "0,2", "--runs", "1")
    assert rc == 0 and data["interleave"] == "replies"
    assert all(r["halves"] is None for r in data["records"])
    line = next(x for x in err.splitlines() if "second copy" in x)
    assert "available 0.0 GiB" in line and "--interleave replies" in line


def test_ctrl_c_during_a_pair_keeps_the_pairs_measured_before_it(tmp_path, monkeypatch, tiny_pair, ctrl_c_on_call):
    """Through ``specchat.cli.main``: a KeyboardInterrupt while a pair runs round by round exits 130 with the report
    and the JSON of the pairs finished before it - both records of each, none of the interrupted pair's."""
    import specchat.bench.runner as bench_runner
    from specchat.cli import main

    target, draft = tiny_pair
    ctrl_c_on_call(bench_runner, "run_pair_interleaved")  # BenchRunner looks it up at call time
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    out_json = tmp_path / "c.json"
    rc = main(["bench", "--target", str(target), "--draft", str(draft), "--suite", str(suite), "--threads", "1",
               "--n-predict", "6", "--no-progress", "--k", "2", "--runs", "2", "--no-arithmetic", "--json", str(out_json)])
    assert rc == 130
    data = json.loads(out_json.read_text())
    assert data["interrupted"] and [r["mode"] for r in data["records"]] == ["baseline", "spec"]
    assert all(r["halves"] for r in data["records"])


def test_interleave_is_refused_with_a_server(capsys):
    from specchat.cli import main

    rc = main(["bench", "--no-progress", "--server", "http://127.0.0.1:9", "--interleave", "rounds"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--interleave does not apply to a llama-server" in err and len(err.strip().splitlines()) == 1
