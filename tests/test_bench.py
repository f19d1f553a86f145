"""``specchat bench``: records, interleaving, pair-ratio speedups, the arithmetic (one calibration path with
the engine), Ctrl-C, bad input.

Real runs use the tiny GGUF fixtures with one thread and a few tokens per run; nothing here asserts on time.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import statistics
from pathlib import Path

import pytest

import specchat.bench.command as bench_command
import specchat.bench.runner as bench_runner
from specchat.bench.arithmetic import ALL_PROMPTS
from specchat.bench.command import parse_k_list
from specchat.bench.progress import ProgressLine
from specchat.bench.report import format_plot, format_verdicts, noise_warnings
from specchat.bench.runner import RECORD_FIELDS, BenchRunner, RunStats, make_plan
from specchat.bench.suite import _COPY_CODE, load_suite
from specchat.bench.summary import AUTO_K_BAR, SummaryRow, auto_verdicts, summarize
from specchat.cli import build_parser, main
from specchat.engine.calibration import MEASURE_ROWS, WARM_UP_ROWS
from specchat.engine.calibration_cache import depth_bucket
from specchat.engine.drafter_kinds import K_MAX
from specchat.engine.telemetry import speedup_curve

TIMING_NAMES = {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second", "draft_n", "draft_n_accepted"}
SUITE = [
    {"name": "alpha", "prompt": "The quick brown fox jumps over the lazy dog. The quick brown fox"},
    {"name": "beta", "prompt": "one two three one two three one two"},
]


pytestmark = pytest.mark.usefixtures("isolated_config")


@pytest.fixture()
def suite_file(tmp_path) -> Path:
    p = tmp_path / "suite.json"
    p.write_text(json.dumps(SUITE))
    return p


def bench_args(target, draft, suite, *extra) -> list[str]:
    return ["bench", "--target", str(target), "--draft", str(draft), "--suite", str(suite), "--threads", "1",
            "--n-predict", "6", "--no-progress", *extra]


def run_bench(argv: list[str], on_record=None) -> tuple[int, str, str]:
    """Run ``specchat bench`` in-process through the real parser; returns (rc, stdout, stderr)."""
    args = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    rc = bench_command.main(args, out=out, err=err, on_record=on_record)
    return rc, out.getvalue(), err.getvalue()


# -- a full run on the tiny pair ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory, tiny_pair):
    """One real bench: 2 prompts x 2 runs x (K=2, K=3, auto), with the arithmetic, plot and JSON."""
    target, draft = tiny_pair
    d = tmp_path_factory.mktemp("bench")
    suite = d / "suite.json"
    suite.write_text(json.dumps(SUITE))
    out_json = d / "out.json"
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith("SPECCHAT_"):
                mp.delenv(k)
        mp.setenv("SPECCHAT_THREADS", "1")
        mp.setenv("XDG_CONFIG_HOME", str(d / "cfg"))
        mp.setenv("XDG_DATA_HOME", str(d / "data"))
        rc, out, err = run_bench(bench_args(target, draft, suite, "--k", "0,2,3", "--runs", "2", "--auto", "--plot",
                                            "--json", str(out_json)))
    assert rc == 0, err
    return json.loads(out_json.read_text()), out, err


def test_json_has_every_field_for_every_record(tiny_report):
    data, _out, _err = tiny_report
    recs = data["records"]
    # 2 prompts x 2 runs x 3 speculative modes, each paired with its own baseline run
    assert len(recs) == 2 * 2 * 3 * 2
    for r in recs:
        assert set(RECORD_FIELDS) <= r.keys(), sorted(set(RECORD_FIELDS) - r.keys())
        assert TIMING_NAMES <= r.keys()
        assert r["predicted_n"] > 0 and r["predicted_ms"] > 0 and r["predicted_per_second"] > 0
        assert r["mode"] in ("baseline", "spec", "auto")
        if r["mode"] == "baseline":
            assert r["k"] == 0 and r["draft_n"] == 0 and r["speedup"] is None
        else:
            assert r["speedup"] is not None and r["speedup"] > 0
        assert sum(r["rounds_by_drafted"]) == r["n_steps"] and len(r["rounds_by_drafted"]) == K_MAX + 1
        assert sum(d * n for d, n in enumerate(r["rounds_by_drafted"])) == r["draft_n"]
        # the round log: every round that asked for a draft, [K, drafted, accepted, natural]
        assert sum(x[1] for x in r["round_log"]) == r["draft_n"]
        assert sum(x[2] for x in r["round_log"]) == r["draft_n_accepted"]
        assert all(0 <= x[2] <= x[1] <= x[0] for x in r["round_log"])
        if r["mode"] == "spec":
            assert all(x[0] <= r["k"] for x in r["round_log"]) and 0 < len(r["round_log"]) <= r["n_steps"]
        if r["mode"] == "auto":
            assert r["k"] is None and 0 <= r["estimate"]["best_k"] <= K_MAX and r["estimate"]["c"] >= 0
        else:
            assert r["estimate"] is None
    assert {r["k"] for r in recs if r["mode"] == "spec"} == {2, 3}
    assert any(r["draft_n"] > 0 for r in recs if r["mode"] == "spec")
    assert data["interrupted"] is False
    assert data["ks"] == [0, 2, 3] and data["runs"] == 2 and data["auto"] is True
    summary_fields = {"prompt", "mode", "k", "runs", "tps_median", "tps_min", "tps_max", "acceptance", "mean_len",
                      "speedup", "speedup_min", "speedup_max"}
    assert data["summary"] and all(summary_fields <= row.keys() for row in data["summary"])


def test_runs_are_interleaved_baseline_then_mode(tiny_report):
    data, _, _ = tiny_report
    recs = data["records"]
    assert [r["mode"] for r in recs[0::2]] == ["baseline"] * (len(recs) // 2)
    assert all(r["mode"] != "baseline" for r in recs[1::2])
    for a, b in zip(recs[0::2], recs[1::2]):
        assert a["pair"] == b["pair"] and a["prompt"] == b["prompt"] and a["run"] == b["run"]
        assert b["speedup"] == pytest.approx(b["predicted_per_second"] / a["predicted_per_second"])
    # within a prompt, run 0 of every mode comes before run 1 of any mode (drift hits all modes alike)
    alpha = [r for r in recs if r["prompt"] == "alpha"]
    assert [r["run"] for r in alpha] == [0] * 6 + [1] * 6
    assert [r["k"] for r in alpha if r["mode"] != "baseline"] == [2, 3, None, 2, 3, None]


def test_summary_speedup_is_the_median_of_pair_ratios(tiny_report):
    data, _, _ = tiny_report
    for row in data["summary"]:
        group = [r for r in data["records"] if (r["prompt"], r["mode"], r["k"]) == (row["prompt"], row["mode"], row["k"])]
        assert row["runs"] == len(group)
        tps = [r["predicted_per_second"] for r in group]
        assert row["tps_median"] == pytest.approx(statistics.median(tps))
        assert (row["tps_min"], row["tps_max"]) == (min(tps), max(tps))
        if row["mode"] == "baseline":
            assert row["speedup"] == 1.0
        else:
            ratios = [r["speedup"] for r in group]
            assert row["speedup"] == pytest.approx(statistics.median(ratios))
            drafted = sum(r["draft_n"] for r in group)
            if drafted:
                assert row["acceptance"] == pytest.approx(sum(r["draft_n_accepted"] for r in group) / drafted)


def test_summary_uses_pair_ratios_not_a_ratio_of_medians():
    """Three pairs whose ratio-of-medians (100/100 = 1.0) differs from the median of ratios (2.0)."""

    def rec(mode, pair, tps):
        return {"prompt": "p", "mode": mode, "k": 0 if mode == "baseline" else 3, "run": pair, "pair": pair,
                "prompt_n": 1, "prompt_ms": 1.0, "predicted_n": 10, "predicted_ms": 1.0, "predicted_per_second": tps,
                "draft_n": 0 if mode == "baseline" else 4, "draft_n_accepted": 0 if mode == "baseline" else 2,
                "acceptance": 0.0, "mean_len": 1.0, "speedup": None, "n_steps": 5, "n_spec_steps": 0, "rejections": 1,
                "k_mean": 0.0, "stop_reason": "length", "drafter": "d"}

    records = []
    for pair, (base, spec) in enumerate([(50.0, 100.0), (100.0, 200.0), (200.0, 20.0)]):
        a, b = rec("baseline", pair, base), rec("spec", pair, spec)
        b["speedup"] = spec / base
        records += [a, b]
    rows = {r.mode: r for r in summarize(records)}
    assert rows["spec"].speedup == pytest.approx(2.0)
    assert rows["spec"].tps_median / rows["baseline"].tps_median == pytest.approx(1.0)
    assert (rows["spec"].speedup_min, rows["spec"].speedup_max) == (pytest.approx(0.1), pytest.approx(2.0))
    assert rows["spec"].alpha == pytest.approx(6 / (6 + 3))  # Σ accepted / (Σ accepted + Σ rejections)


def test_report_prints_table_arithmetic_and_plot(tiny_report):
    data, out, _err = tiny_report
    ar = data["arithmetic"]
    assert set(ar["v"]) == {str(k) for k in range(K_MAX + 1)} and ar["v"]["0"] == 1.0
    assert all(v > 0 for v in ar["v"].values())
    assert ar["target_ms_per_token"] > 0 and ar["draft_kind"] == "model" and ar["c"] > 0
    assert ar["c"] == pytest.approx(ar["draft_ms_per_token"] / ar["target_ms_per_token"])
    per_prompt = {p["prompt"]: p for p in ar["prompts"]}
    assert set(per_prompt) == {"alpha", "beta", ALL_PROMPTS}
    for p in per_prompt.values():
        if p["alpha"] is None:
            continue
        assert 0 <= p["best_k"] <= K_MAX
        assert p["predicted_best_speedup"] == pytest.approx(max(p["curve"]))
        if p["prompt"] != ALL_PROMPTS:  # the recommendation is the replay of the K=3 runs' rounds
            rp = p["replay"]
            assert rp["from_k"] == 3 and rp["rounds"] > 0 and p["best_k"] == rp["best_k"]
            assert p["curve"] == rp["curve"] and rp["curve"][0] == 1.0
            vt = [ar["v"][str(k)] for k in range(K_MAX + 1)]
            assert p["geometric_best_speedup"] == pytest.approx(max(speedup_curve(p["alpha"], ar["c"], vt, K_MAX)))
        for row in p["rows"]:
            assert row["k"] in (2, 3)
            assert row["E"] == pytest.approx((1 - p["alpha"] ** (row["k"] + 1)) / (1 - p["alpha"]) if p["alpha"] < 1 else row["k"] + 1)
            assert row["predicted_speedup"] == pytest.approx(row["E"] / (ar["c"] * row["k"] + row["v"]))
            assert row["predicted_with_overhead"] > 0 and row["overhead_ms_per_round"] >= 0
            assert row["predicted_from_rounds"] > 0
    assert "tok/s med" in out and "speedup" in out
    assert "verify cost v(K)" in out and "cost ratio c" in out and "recommended" in out
    assert "draft costs" in out  # telemetry.break_even_line
    assert "speedup vs K" in out and "K=2" in out and "auto" in out
    assert "auto-K against the best of plain decoding and every fixed K" in out  # the bar, per prompt
    assert "prompt(s) at or above the bar" in out


def test_bench_figures_are_the_engines_cost_model_on_the_engines_timings(tmp_path, tiny_pair, suite_file, monkeypatch):
    """One calibration path: the bench times the pair only through the engine's calibration (the draft against
    the target on equal footing, then verify batches of every size), and its c and v(K) are exactly what an
    engine CostModel makes of those timings - the figures auto-K and the sidebar read. Recorded by wrapping
    the real Model.time_scratch_decode (the decodes still run)."""
    from specchat.engine.model import Model
    from specchat.engine.telemetry import CostModel

    target, draft = tiny_pair
    calls: list[tuple[str, int, float]] = []
    real = Model.time_scratch_decode

    def recording(self, tokens):
        ms = real(self, tokens)
        calls.append((self.name, len(tokens), ms))
        return ms

    monkeypatch.setattr(Model, "time_scratch_decode", recording)
    out_json = tmp_path / "one-path.json"
    # one reply after the other: a second copy of the pair (--interleave rounds) times its own calibration too
    rc, _out, err = run_bench(bench_args(target, draft, suite_file, "--k", "0,2", "--runs", "1", "--json", str(out_json),
                                         "--interleave", "replies"))
    assert rc == 0, err
    ar = json.loads(out_json.read_text())["arithmetic"]
    drafts = [ms for name, _, ms in calls if name == draft.name]
    targets = [(rows, ms) for name, rows, ms in calls if name == target.name]
    assert drafts and len(targets) > len(drafts), "the bench must time the pair through the engine's calibration"
    # draft_cost_ratios: draft and target single rows interleaved, then the verify batches feed the model
    ratios = sorted(d / t for d, (_, t) in zip(drafts, targets))
    cm = CostModel()
    # each repetition: one uncounted warm-up decode (calibration.WARM_UP_ROWS), then (1 row, r rows) pairs
    block = 1 + 2 * (len(MEASURE_ROWS) - 1)
    verify = targets[len(drafts) :]
    assert len(verify) % block == 0 and all(verify[i][0] == WARM_UP_ROWS for i in range(0, len(verify), block))
    timed = [t for i, t in enumerate(verify) if i % block]
    for rows, ms in timed:
        cm.observe_verify(rows, ms)
    assert {rows for rows, _ in timed} == set(MEASURE_ROWS)
    assert ar["target_ms_per_token"] == pytest.approx(cm.target_ms())
    assert [ar["v"][str(k)] for k in range(K_MAX + 1)] == pytest.approx([cm.v(k) for k in range(K_MAX + 1)])
    assert ar["c"] == pytest.approx(ratios[len(ratios) // 2])


def test_each_prompt_is_priced_by_a_calibration_at_its_own_depth(tmp_path, tiny_pair, monkeypatch):
    """A verify batch's cost per row grows with the context faster than a single row's (calibration_cache.depth_bucket
    has the measurement), so the bench calibrates once per depth bucket its prompts reach - at the first prompt of
    each - and prices every prompt's arithmetic with its own: two short prompts share one calibration, a prompt of
    ~300 tokens gets its own, timed after those tokens (as auto-K prices that turn)."""
    from specchat.engine.model import Model

    target, draft = tiny_pair
    depths: list[int] = []  # the target's KV length at every verify batch of the largest size timed
    real = Model.time_scratch_decode

    def recording(self, tokens):
        if self.name == target.name and len(tokens) == MEASURE_ROWS[-1]:
            depths.append(len(self.tokens))
        return real(self, tokens)

    monkeypatch.setattr(Model, "time_scratch_decode", recording)
    long_prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([*SUITE, {"name": "long", "prompt": long_prompt}]))
    out_json = tmp_path / "depths.json"
    rc, out, err = run_bench(bench_args(target, draft, suite, "--k", "0,2", "--runs", "1", "--json", str(out_json)))
    assert rc == 0, err
    buckets = sorted({depth_bucket(d) for d in depths})
    assert buckets == [0, 256], depths  # one calibration for alpha and beta, one for long
    per_prompt = {p["prompt"]: p for p in json.loads(out_json.read_text())["arithmetic"]["prompts"]}
    assert "context_n" not in per_prompt["alpha"] and "context_n" not in per_prompt["beta"]
    deep = per_prompt["long"]
    assert depth_bucket(deep["context_n"] - 1) == 256 and set(deep["v"]) == {str(k) for k in range(K_MAX + 1)}
    assert deep["target_ms_per_token"] > 0
    for row in deep["rows"]:  # its rows are priced with its own v(K)
        assert row["v"] == pytest.approx(deep["v"][str(row["k"])])
    assert f"priced at its own depth ({deep['context_n']} tokens in the KV)" in out


# -- Ctrl-C -------------------------------------------------------------------------------------------


def test_interrupted_bench_prints_and_writes_what_it_measured(tmp_path, tiny_pair, suite_file):
    target, draft = tiny_pair
    out_json = tmp_path / "partial.json"
    seen = []

    def hook(rec):
        seen.append(rec)
        if len(seen) == 3:
            raise KeyboardInterrupt

    rc, out, err = run_bench(
        bench_args(target, draft, suite_file, "--k", "0,2", "--runs", "3", "--json", str(out_json), "--no-arithmetic"),
        on_record=hook,
    )
    assert rc == 130
    data = json.loads(out_json.read_text())
    assert data["interrupted"] is True
    assert len(data["records"]) == 3 and [r["mode"] for r in data["records"]] == ["baseline", "spec", "baseline"]
    assert {(r["prompt"], r["mode"]) for r in data["records"]} == {("alpha", "baseline"), ("alpha", "spec")}
    assert "interrupted: 3 run(s) measured so far" in out
    assert "alpha" in out and "tok/s med" in out
    assert "wrote 3 record(s)" in err


def test_cli_ctrl_c_exits_130(tmp_path, tiny_pair, suite_file, ctrl_c_on_call):
    """Through ``specchat.cli.main``: a KeyboardInterrupt during a run still reports and exits 130."""
    target, draft = tiny_pair
    ctrl_c_on_call(bench_runner, "run_once")  # BenchRunner looks it up at call time
    out_json = tmp_path / "c.json"
    rc = main(bench_args(target, draft, suite_file, "--k", "2", "--runs", "2", "--json", str(out_json), "--no-arithmetic",
                         "--interleave", "replies"))  # round by round: tests/test_bench_lockstep.py
    assert rc == 130
    data = json.loads(out_json.read_text())
    assert data["interrupted"] and len(data["records"]) == 1 and data["records"][0]["mode"] == "baseline"


def test_runner_keeps_records_when_interrupted_without_models():
    """The runner alone, with a scripted run function: the plan order and the partial result."""

    class FakeTurn:
        def __init__(self, tps):
            self.prompt_n, self.prompt_ms, self.predicted_n, self.predicted_ms = 3, 1.0, 10, 1000.0 / tps * 10
            self.predicted_per_second = tps
            self.draft_n = self.draft_n_accepted = 0
            self.acceptance, self.mean_len, self.n_steps, self.n_spec_steps, self.stop_reason = 0.0, 1.0, 10, 0, "length"
            self.overhead_ms = self.draft_ms_per_step = 0.0

    speeds = iter([10.0, 20.0, 10.0, 30.0, 10.0])

    def run_fn(session, prompt, mode, k):
        tps = next(speeds, None)
        if tps is None:
            raise KeyboardInterrupt
        return FakeTurn(tps), RunStats(rounds=10, k_sum=0)

    r = BenchRunner(None, SUITE[:1], [0, 3], 4, run_fn=run_fn)
    recs = r.run()
    assert r.interrupted and len(recs) == 5
    assert [x["mode"] for x in recs] == ["baseline", "spec", "baseline", "spec", "baseline"]
    assert [x["speedup"] for x in recs if x["mode"] == "spec"] == [2.0, 3.0]
    rows = summarize(recs)
    assert rows[1].speedup == pytest.approx(2.5) and rows[1].pairs == 2


def test_plan_is_a_b_a_b():
    plan = make_plan(SUITE, [0, 1, 4], runs=2, auto=True)
    first = [(p.mode, p.k, p.run) for p in plan if p.prompt == "alpha"]
    assert first == [
        ("baseline", 0, 0), ("spec", 1, 0), ("baseline", 0, 0), ("spec", 4, 0), ("baseline", 0, 0), ("auto", None, 0),
        ("baseline", 0, 1), ("spec", 1, 1), ("baseline", 0, 1), ("spec", 4, 1), ("baseline", 0, 1), ("auto", None, 1),
    ]
    assert len({p.pair for p in plan}) == len(plan) // 2
    assert [p.mode for p in make_plan(SUITE, [0], runs=3, auto=False)] == ["baseline"] * 6


# -- bad input: one line, exit 2 ---------------------------------------------------------------------


def _bad(capsys, *argv) -> str:
    rc = main(["bench", "--no-progress", *argv])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--k", f"0,{K_MAX + 1}"], f"{K_MAX + 1} is out of range"),
        (["--k", "-1"], "out of range"),
        (["--k", "1,two"], "comma-separated"),
        (["--k", ","], "empty"),
        (["--runs", "0"], "--runs 0"),
        (["--runs", "-3"], "--runs -3"),
        (["--n-predict", "0"], "--n-predict 0"),
        (["--suite", "/nonexistent/suite.toml"], "does not exist"),
        (["--json", "/nonexistent/dir/out.json"], "does not exist"),
        (["--formats", "Q9"], "'Q9' is not a weight format llama.cpp can write"),
        (["--formats", ","], "--formats is empty"),
        (["--flash-attn", "fast"], "'fast' is not a flash-attention setting"),
    ],
)
def test_bad_flags_exit_2_with_one_line(capsys, argv, needle):
    assert needle in _bad(capsys, *argv)


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("bad.json", "[{\"name\": \"a\", \"prompt\": ", "not valid JSON"),
        ("bad.toml", "[[prompts]]\nname = \"a\"\nprompt = ", "not valid TOML"),
        ("empty.json", "[]", "no prompts"),
        ("noprompt.json", json.dumps([{"name": "a"}]), "'prompt'"),
        ("noname.toml", "[[prompts]]\nprompt = \"hi\"\n", "'name'"),
        ("dup.json", json.dumps([{"name": "a", "prompt": "x"}, {"name": "a", "prompt": "y"}]), "twice"),
        ("extra.json", json.dumps([{"name": "a", "prompt": "x", "temp": 1}]), "unknown key"),
        ("scalar.json", json.dumps(["just text"]), "entry 1"),
    ],
)
def test_malformed_suite_exits_2_with_one_line(capsys, tmp_path, name, text, needle):
    p = tmp_path / name
    p.write_text(text)
    assert needle in _bad(capsys, "--suite", str(p))


def test_suite_files_toml_and_json(tmp_path):
    t = tmp_path / "s.toml"
    t.write_text('[[prompts]]\nname = "a"\nprompt = "hello"\n\n[[prompts]]\nname = "b"\nprompt = """multi\nline"""\n')
    assert load_suite(str(t)) == [{"name": "a", "prompt": "hello"}, {"name": "b", "prompt": "multi\nline"}]
    j = tmp_path / "s.json"
    j.write_text(json.dumps({"prompts": SUITE}))
    assert load_suite(str(j)) == SUITE
    assert parse_k_list("8, 0,3,3") == [0, 3, 8]


def test_default_suite_has_the_four_workloads():
    suite = {p["name"]: p["prompt"] for p in load_suite("default")}
    assert set(suite) == {"code", "prose", "copy-heavy", "summary", "copy-then-new"}
    assert "prime" in suite["code"]
    code = _COPY_CODE
    assert code in suite["copy-heavy"] and len(code.splitlines()) >= 35 and " x " in code
    assert len(suite["summary"].split()) > 1000  # a long-context passage (~1.5k tokens)


def test_baseline_only_measures_the_target_alone(tiny_target, suite_file):
    rc, out, _err = run_bench(bench_args(tiny_target, "none", suite_file, "--k", "0", "--runs", "2"))
    assert rc == 0
    assert "base" in out and "target alone" in out and "verify cost v(K)" in out
    assert "draft alone" not in out and "recommended" not in out


def test_draft_none_cannot_bench_speculation(capsys, tiny_target, suite_file):
    line = _bad(capsys, "--target", str(tiny_target), "--draft", "none", "--suite", str(suite_file), "--threads", "1",
                "--n-predict", "2", "--k", "2")
    assert "--draft ngram" in line


# -- progress line ------------------------------------------------------------------------------------


def test_progress_line_rewrites_one_line_and_clears():
    s = io.StringIO()
    p = ProgressLine(s, enabled=True, interval=0.0)
    p(0, 4, "alpha baseline run 1")
    p(2, 4, "alpha K=3 run 1")
    p(4, 4, "done")
    p.close()
    text = s.getvalue()
    assert "\n" not in text and text.count("\r") >= 4
    assert "[" + "." * 24 + "] 0/4 alpha baseline run 1" in text
    assert "[" + "#" * 12 + "." * 12 + "] 2/4 alpha K=3 run 1" in text
    quiet = io.StringIO()
    q = ProgressLine(quiet, enabled=False)
    q(1, 2, "x")
    q.close()
    assert quiet.getvalue() == ""


def test_plot_marks_break_even():
    rows = [
        SummaryRow("p", "baseline", 0, 3, 50, 49, 51, None, 1.0, None, 1.0, 0.0, 1.0, 1.0, 1.0, 0),
        SummaryRow("p", "spec", 2, 3, 75, 70, 80, 0.8, 2.0, 0.8, 2.0, 2.0, 1.5, 1.4, 1.6, 3),
        SummaryRow("p", "spec", 8, 3, 25, 20, 30, 0.2, 1.2, 0.2, 1.2, 8.0, 0.5, 0.4, 0.6, 3),
    ]
    plot = format_plot(rows, width=40).splitlines()
    k2 = next(line for line in plot if "K=2" in line)
    k8 = next(line for line in plot if "K=8" in line)
    assert k2.rstrip().endswith("1.50×") and k8.rstrip().endswith("0.50×")
    assert k2.count("#") > k8.count("#") > 0
    assert "+" in k2 and "|" in k8  # 1.0x mark: inside the K=2 bar, past the end of the K=8 bar


def test_noisy_baseline_is_flagged():
    calm = SummaryRow("a", "baseline", 0, 3, 50, 45, 55, None, 1.0, None, 1.0, 0.0, 1.0, 1.0, 1.0, 0)
    busy = SummaryRow("b", "baseline", 0, 3, 50, 8, 106, None, 1.0, None, 1.0, 0.0, 1.0, 1.0, 1.0, 0)
    warnings = noise_warnings([calm, busy])
    assert len(warnings) == 1 and warnings[0].startswith("warning: b: baseline runs ranged 8.0..106.0")


# -- several weight formats in one run (bench --formats) ---------------------------------------------


def test_formats_measure_every_re_encoding_in_one_interleaved_run(tmp_path, tiny_target, suite_file):
    """``--formats F16``: the tiny F32 target and its F16 re-encoding (derived into the data dir) in one run;
    every round opens with one baseline of the source, every run's x_reference is its tok/s over that
    round's source baseline, and the cross-format table prints those multiples."""
    data_dir = tmp_path / "data"
    out_json = tmp_path / "formats.json"
    rc, out, err = run_bench(["--data-dir", str(data_dir), *bench_args(
        tiny_target, "ngram", suite_file, "--k", "0,2", "--runs", "2", "--formats", "F16", "--no-arithmetic",
        "--json", str(out_json))])
    assert rc == 0, err
    derived = data_dir / "models" / (tiny_target.stem + ".F16.gguf")
    assert derived.is_file()
    data = json.loads(out_json.read_text())
    labels = [f["label"] for f in data["formats"]]
    assert labels == ["F32", "F16"] and data["formats"][0]["source"] and data["formats"][1]["lossy"]
    recs = data["records"]
    # per prompt and run: the F32 reference baseline, then each target's (baseline, K=2) pair
    first = [(r["target"], r["mode"]) for r in recs if r["prompt"] == "alpha" and r["run"] == 0]
    assert first == [("F32", "baseline"), ("F32", "baseline"), ("F32", "spec"), ("F16", "baseline"), ("F16", "spec")]
    for r in recs:
        ref = next(x for x in recs if x["prompt"] == r["prompt"] and x["run"] == r["run"] and x["target"] == "F32")
        assert r["x_reference"] == pytest.approx(r["predicted_per_second"] / ref["predicted_per_second"])
    summary = {(row["target"], row["prompt"], row["mode"]): row for row in data["summary"]}
    f16 = [r["x_reference"] for r in recs if (r["target"], r["prompt"], r["mode"]) == ("F16", "beta", "spec")]
    assert summary[("F16", "beta", "spec")]["x_reference"] == pytest.approx(statistics.median(f16))
    assert "× F32: each run's tok/s / the same round's F32 baseline run" in out
    assert "== F16: " in out and "re-quantised: changes the model's output" in out


def test_flash_attn_measures_every_target_with_each_setting_in_one_run(tmp_path, tiny_target, suite_file):
    """``--flash-attn auto,off``: the configured target, then the same file with flash attention off, loaded
    with it (the engine's calibration is keyed on it) and interleaved in the same rounds; the off copy is never
    the comparisons' unit and says what it trades."""
    out_json = tmp_path / "fa.json"
    rc, out, err = run_bench(["--data-dir", str(tmp_path / "data"), *bench_args(
        tiny_target, "ngram", suite_file, "--k", "0,2", "--runs", "1", "--flash-attn", "auto,off", "--no-arithmetic",
        "--json", str(out_json))])
    assert rc == 0, err
    data = json.loads(out_json.read_text())
    by = {f["label"]: f for f in data["formats"]}
    assert list(by) == ["F32", "F32 fa-off"]
    assert (by["F32"]["flash_attn"], by["F32 fa-off"]["flash_attn"]) == ("auto", "off")
    assert by["F32"]["source"] and not by["F32 fa-off"]["source"] and "near-ties" in by["F32 fa-off"]["note"]
    assert {r["target"] for r in data["records"]} == {"F32", "F32 fa-off"}
    assert "== F32 fa-off: " in out


def _run(prompt, mode, k, speedup, rounds, target=""):
    return {"prompt": prompt, "mode": mode, "k": k, "speedup": speedup, "target": target,
            "round_log": [[k, d, a, d] for d, a in rounds]}


def test_auto_k_is_judged_against_the_best_choice_with_identical_fixed_ks_as_one():
    """The bench's verdict on auto-K (issue 20's bar): its speedup over max(plain, best fixed K). Fixed Ks whose runs
    drafted and kept the very same rounds decoded the very same batches - one choice, whose pairs are pooled (the
    max of its noisy copies would favour it by the noise alone: K 16 and K 64 read 1.00x and 1.10x on one AMD EPYC
    Zen 4 run); Ks that drafted differently stay apart; plain decoding is 1.0."""
    same = [(3, 3), (2, 1), (5, 5)]
    records = [
        *[_run("code", "spec", 16, x, same) for x in (0.99, 1.00, 1.01)],
        *[_run("code", "spec", 64, x, same) for x in (1.09, 1.10, 1.11)],
        *[_run("code", "spec", 8, x, [(3, 3), (2, 1), (5, 4), (1, 1)]) for x in (1.02, 1.03, 1.04)],
        *[_run("code", "auto", None, x, [(3, 3)]) for x in (1.03, 1.04, 1.05)],
        *[_run("prose", "spec", 8, x, [(1, 0)]) for x in (0.95, 0.96, 0.97)],
        *[_run("prose", "auto", None, x, []) for x in (0.97, 0.99, 0.99)],
        *[_run("code", "spec", 8, 1.5, same, target="F16")],  # another target, no auto-K runs: no verdict
        {"prompt": "code", "mode": "baseline", "k": 0, "speedup": None, "target": "", "round_log": []},
    ]
    code, prose = auto_verdicts(records)
    assert (code.prompt, code.best, code.pairs, code.alone) == ("code", (16, 64), 6, (1.00, 1.10))
    assert code.best_speedup == pytest.approx(1.05)  # the median of the six pooled ratios, not K 64's 1.10
    assert code.ratio == pytest.approx(1.04 / 1.05) and code.ratio >= AUTO_K_BAR
    assert (prose.best, prose.best_speedup, prose.best_label) == ((), 1.0, "plain")
    assert prose.ratio == pytest.approx(0.99)
    text = format_verdicts([code, prose])
    assert "K 16 = K 64 1.05×" in text and "plain 1.00×" in text and "2 of 2 prompt(s) at or above the bar" in text
    assert "code: K 16 1.00× and K 64 1.10× alone, 1.05× over their 6 pairs" in text
    low = format_verdicts(auto_verdicts([*records[:6], *[_run("code", "auto", None, 0.9, [])]]))
    assert "below" in low and "0 of 1" in low


def _drafting_row(target: str, rounds_by_drafted: list[int], predicted_n: int, speedup: float) -> SummaryRow:
    return SummaryRow(prompt="p", mode="spec", k=16, runs=1, tps_median=1.0, tps_min=1.0, tps_max=1.0,
                      acceptance=None, mean_len=0.0, alpha=None, tokens_per_round=0.0, k_mean=16.0, speedup=speedup,
                      speedup_min=speedup, speedup_max=speedup, pairs=1, rounds_by_drafted=rounds_by_drafted,
                      predicted_n=predicted_n, target=target)


def test_the_exchange_rate_prices_each_drafters_rounds_at_the_cpus_v_of_what_they_drafted():
    """Two drafters' rounds side by side (issue 23's "why 1.7x the accepted length bought 1.09x"): tokens a round,
    verify rows a round at v(d) of the d each round drafted, their ratio. Fails if a round is priced at the K asked
    rather than the d drafted, if plain rounds are not one row, or if the ratios are taken the wrong way round."""
    from specchat.bench.arithmetic import exchange
    from specchat.bench.report import format_exchange

    steep = [1.0, 1.9, 2.4, 3.0, 3.5] + [0.6 * d for d in range(5, K_MAX + 1)]  # an AMD EPYC Zen 4's shape
    # "long": 10 plain rounds and 10 drafting 4 (all kept: 5 tokens each); "short": 20 plain, 10 drafting 1 kept
    long = _drafting_row("long", [10, 0, 0, 0, 10] + [0] * (K_MAX - 4), 10 + 50, 1.05)
    short = _drafting_row("short", [20, 10] + [0] * (K_MAX - 1), 20 + 20, 1.00)
    a, b = exchange(long, steep, 10.0), exchange(short, steep, 10.0)
    assert a.tokens_per_round == pytest.approx(60 / 20) and a.rows_per_round == pytest.approx((10 + 10 * 3.5) / 20)
    assert b.tokens_per_round == pytest.approx(40 / 30) and b.rows_per_round == pytest.approx((20 + 10 * 1.9) / 30)
    assert a.tokens_per_row == pytest.approx(60 / 45) and b.tokens_per_row == pytest.approx(40 / 39)
    slow_draft = dataclasses.replace(long, draft_ms_per_token=5.0)  # half a row per drafted token
    assert exchange(slow_draft, steep, 10.0).rows_per_round == pytest.approx((10 + 10 * (3.5 + 0.5 * 4)) / 20)
    assert exchange(_drafting_row("x", [0] * (K_MAX + 1), 0, 1.0), steep, 10.0) is None
    text = format_exchange([long, short], ["long", "short"], {("long", "p", "spec", 16): a, ("short", "p", "spec", 16): b})
    assert "the exchange rate, long against short" in text
    row = text.splitlines()[-1].split()
    assert row[:2] == ["p", "16"]
    assert row[2:5] == ["3.00", "/", "1.33"] and row[5] == f"{3.0 / (40 / 30):.2f}\u00d7"
    assert row[-1] == f"{1.05 / 1.00:.2f}\u00d7" and row[-2] == f"{(60 / 45) / (40 / 39):.2f}\u00d7"
    assert format_exchange([long], ["long"], {}) == ""


def test_suffix_against_ngram_prints_each_drafters_exchange_rate_from_its_own_rounds(tmp_path, bundled_model):
    """``--draft suffix`` on the bundled model copying a list: the drafters side by side and the exchange rate, whose
    tokens a round and verify rows a round are the records' own rounds (tokens over rounds; at least the plain
    rounds' one row each, more where they drafted) - fails if the table is missing, reads another row's rounds or
    prices a drafting round at one row."""
    suite = tmp_path / "copy.json"
    items = ", ".join(f"item {i}" for i in range(1, 13))
    suite.write_text(json.dumps([{"name": "copy", "prompt": f"Repeat this list exactly, once: {items}."}]))
    out_json = tmp_path / "sfx.json"
    rc, out, err = run_bench(bench_args(bundled_model, "suffix", suite, "--k", "8", "--runs", "1", "--n-predict", "48",
                                        "--json", str(out_json)))
    assert rc == 0, err
    assert "drafters side by side" in out and "the exchange rate, suffix against ngram" in out
    recs = {r["drafter"]: r for r in json.loads(out_json.read_text())["records"] if r["mode"] == "spec"}
    line = next(x for x in out.split("the exchange rate, suffix against ngram", 1)[1].splitlines()
                if x.startswith("copy")).split()
    per = {d: r["predicted_n"] / sum(r["rounds_by_drafted"]) for d, r in recs.items()}
    assert line[1] == "8" and (line[2], line[4]) == (f"{per['suffix']:.2f}", f"{per['ngram']:.2f}"), (line, per)
    assert per["ngram"] > 1.5, per  # the copy was drafted
    rows = (float(line[6]), float(line[8]))
    assert all(x > 1.0 for x in rows), line  # a drafting round verifies more than one row
