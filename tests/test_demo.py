"""The tour of "helps" and "hurts" (issue 11): scenes as data, the headless runner end to end on the real
bundled model (deriving the demo pairs first, with progress), and ``specchat demo``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from enginekit import assert_identical_or_a_near_tie

from specchat import demo
from specchat.models.tune_results import Choice, TuneResult, VariantResult
from specchat.cli import main
from specchat.commands.tui import pick_helps_pair
from specchat.engine.cost_profile import CostProfile
from specchat.engine.drafter_kinds import K_MAX
from specchat.config import load_settings
from specchat.loading import load_engine, measure_verify_cost
from specchat.models.bundled import BUNDLED_FILE
from specchat.models.derive import derive_demo
from specchat.engine.drafter_kinds import NGRAM
from specchat.engine.gguf import read_gguf_info
from specchat.models.presets import SMOLLM2_Q8_FILE
from specchat.models.registry import resolve_pair


def test_the_scenes_cover_the_lessons():
    scenes = demo.SCENES
    assert [s.k is None for s in scenes[:8]] == [False] * 4 + [True] * 4  # fixed K first, then auto-K for each pair
    fixed, auto = scenes[:4], scenes[4:8]
    assert [(s.pair, s.prompt) for s in fixed] == [(s.pair, s.prompt) for s in auto]
    assert fixed[0].pair == demo.HELPS_PAIR and fixed[0].prompt == demo.COPY_PROMPT  # helps
    assert fixed[1].pair == demo.HELPS_PAIR and fixed[1].prompt == demo.PROSE_PROMPT  # neutral
    assert fixed[2].pair == demo.SELF_DRAFT_PAIR and fixed[3].pair == demo.LAYER_SKIP_PAIR  # hurts, two ways
    assert demo.HELPS_PAIR.draft == NGRAM
    assert demo.HELPS_PAIR.target == "preset:smollm2-q8-ngram"  # issue 12: a target with a batched verify kernel
    for s in scenes:
        assert s.sentence.endswith(".") and "\n" not in s.sentence and s.expect and s.n_predict > 0
    # issue 23: the model has answered this kind of question before - the suffix drafter over the scene's own history
    history = scenes[8]
    assert history.pair == demo.HISTORY_PAIR and history.pair.draft == "suffix" and history.expected == ("helps",)
    assert len(history.earlier) == demo.HISTORY_EARLIER and history.prompt not in history.earlier
    assert all(not s.earlier for s in scenes[:8])
    # and the first of its questions asked again, auto-K: the saved answer copied from the reply's first token
    again = scenes[9]
    assert again.pair == demo.HISTORY_PAIR and again.k is None and again.expected == ("helps",)
    assert again.earlier == history.earlier and again.prompt == history.earlier[0]  # one seeded history for both


def test_the_tour_runs_end_to_end_on_the_bundled_model(tmp_path):
    """Every scene, short replies, starting from a data dir without the demo models: they are derived first;
    then the helps pair is this machine's - the candidate whose verify cost, timed here by the engine's
    calibration, predicts the fastest copy (no tune result saved) - and every scene's last line agrees with
    its measured verdict."""
    settings = load_settings(None, {"data_dir": str(tmp_path / "data"), "threads": 1})
    said: list[str] = []
    results = demo.run_tour(settings, load=load_engine, derive=derive_demo, n_predict=12, progress=said.append,
                            pick=pick_helps_pair)
    assert any(m.startswith("deriving the demo models") for m in said)
    assert (tmp_path / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.layerskip-0-5_24-29.gguf").is_file()
    helps = resolve_pair(demo.HELPS_PAIR.target, demo.HELPS_PAIR.draft, tmp_path / "data")
    assert helps.target == tmp_path / "data" / "models" / SMOLLM2_Q8_FILE and helps.drafter == NGRAM
    assert read_gguf_info(helps.target).quantization == "Q8_0"
    # the pick, checked against what the engine measured (the calibration cache answers the second time)
    candidates = demo.helps_candidates(tmp_path / "data")
    assert len(candidates) == 3 and any(m.startswith("timing the verify cost of ") for m in said)
    rates = {}
    for pair in candidates:
        t1, v = measure_verify_cost(settings.model_copy(update={**pair.settings_update(), "draft": "none"}))
        assert t1 > 0 and v[0] == 1.0 and len(v) == K_MAX + 1
        rates[pair] = demo.predicted_copy_tok_s(t1, v)
    chosen = max(rates, key=rates.__getitem__)
    assert any(m.startswith(f"helps scenes on {chosen.label}: predicted ") for m in said)
    assert [r.scene for r in results] == list(demo.scenes_for(chosen))
    assert all(r.scene.pair != demo.HELPS_PAIR for r in results) or chosen == demo.HELPS_PAIR
    for r in results:
        line = demo.outcome_line(r)
        v = demo.verdict(r.race.ratio)
        if r.scene.earlier and v in r.scene.expected:  # the history scene says what this CPU measured as well
            assert line.startswith(f"expected: {r.scene.expect}; on this CPU {r.race.ratio:.2f}\u00d7 ({v}): ")
            assert line.endswith("earlier conversation(s)") and " tokens were drafts copied from " in line
        else:
            assert line == f"expected: {r.scene.expect}" if v in r.scene.expected else line.startswith(f"on this CPU {demo.verdict_verb(v)} (")
        forced = demo.outcome_line(demo.SceneResult(replace(r.scene, expected=()), r.race))
        assert forced.startswith(f"on this CPU {demo.verdict_verb(v)} ({r.race.ratio:.2f}×)")
        if r.race.on.turn.n_spec_steps:
            assert " single-row decodes (measured; priced " in forced
            assert "pays only while the tokens emitted exceed the round's cost" in forced
            if abs(r.race.ratio - 1.0) > 0.02:  # the sentence's arithmetic is the verdict's (an EOS may cut a round)
                assert ("so drafting helps" if r.race.ratio > 1.0 else "so drafting does not pay") in forced
    figures = [r.figures() for r in results]
    for f, r in zip(figures, results):
        assert f["tokens"] > 0 and f["tok_s_off"] > 0 and f["tok_s_on"] > 0
        assert_identical_or_a_near_tie(r.race)
        assert all(n.startswith("auto-K: drafting ") for n in f["notices"])
        assert r.race.off.turn.draft_n == 0  # the baseline run never drafts
    assert figures[8]["history_drafts"] > 0, "the history scene drafted nothing from its earlier conversations"
    assert (tmp_path / "data" / demo.TOUR_HISTORY_DIR / "history.sqlite3").is_file()
    assert not (tmp_path / "data" / "history.sqlite3").exists()  # never the user's history
    self_draft, layer_skip = figures[2], figures[3]
    assert self_draft["drafted"] > 0 and self_draft["acceptance"] >= 0.8  # the model agrees with itself
    assert layer_skip["drafted"] > 0 and layer_skip["ghosts"] > 0 and layer_skip["acceptance"] < self_draft["acceptance"]
    assert self_draft["k_status"] == "K 4 (fixed)" and figures[6]["k_status"].startswith("K ")
    text = demo.format_results(results)
    assert text.startswith("1. n-gram on a copy-heavy edit")
    assert all(f"   {demo.outcome_line(r)}\n" in text for r in results)


def test_a_saved_tune_result_picks_the_helps_pair(tmp_path):
    """``specchat models tune`` saved a copy-heavy choice for the bundled model: the helps scenes use that file
    with n-gram drafting and the flash-attention setting it was measured with; a result for another file, or
    whose file is gone, is not used."""
    f16 = tmp_path / "SmolLM2-135M-Instruct.F16.gguf"
    f16.write_bytes(b"GGUF")

    def result(source: str, path: str) -> TuneResult:
        variant = VariantResult(label="F16 fa-off", file=Path(path).name, path=path, weights="F16", repack="auto",
                                source=False, lossy=False, one_row=False, note="", flash_attn="off")
        choice = Choice(workload="copy-heavy", label="F16 fa-off", mode="auto", tok_s=168.7, x_source=1.25,
                        measured=True, why="fastest measured")
        return TuneResult(source=source, source_path="", threads=1, split_threads_batch=None, drafter=NGRAM, cpu="",
                          measured_at=0.0, variants=[variant], choices=[choice])

    pair = demo.tuned_helps_pair([result(BUNDLED_FILE, str(f16))], BUNDLED_FILE)
    assert pair == demo.Pair(str(f16), NGRAM, "SmolLM2 F16 fa-off + n-gram", (("flash_attn", "off"), ("repack", "on")))
    assert pair.settings_update() == {"target": str(f16), "draft": NGRAM, "flash_attn": "off", "repack": "on"}
    assert demo.tuned_helps_pair([result("other.gguf", str(f16))], BUNDLED_FILE) is None
    # a copy tune measured without llama.cpp's repacked layouts runs so
    off = result(BUNDLED_FILE, str(f16))
    off.variants[0].repack = "off"
    assert demo.tuned_helps_pair([off], BUNDLED_FILE).settings_update() == {
        "target": str(f16), "draft": NGRAM, "flash_attn": "off", "repack": "off"}
    assert demo.tuned_helps_pair([result(BUNDLED_FILE, str(tmp_path / "gone.gguf"))], BUNDLED_FILE) is None
    chosen, why = demo.choose_helps_pair(tmp_path, [result(BUNDLED_FILE, str(f16))], BUNDLED_FILE, measure=None)
    assert chosen == pair and "this CPU's copy-heavy pick" in why
    assert demo.choose_helps_pair(tmp_path, [], BUNDLED_FILE, measure=None)[0] == demo.HELPS_PAIR
    scenes = demo.scenes_for(pair)
    assert [s.pair == pair for s in scenes] == [s.pair == demo.HELPS_PAIR for s in demo.SCENES]
    # the history scene copies too: the same file and settings, drafted by the suffix drafter
    history = demo.history_pair(pair)
    assert history == demo.Pair(str(f16), "suffix", "SmolLM2 F16 fa-off + suffix", pair.extra)
    assert [s.pair == history for s in scenes] == [s.pair == demo.HISTORY_PAIR for s in demo.SCENES]
    assert demo.history_pair(demo.HELPS_PAIR) == demo.HISTORY_PAIR
    only_history = [s for s in demo.SCENES if s.earlier]
    assert demo.uses_helps_file(only_history) and not demo.uses_helps_file([demo.SCENES[2]])


def test_the_outcome_sentence_is_the_verdicts_own_arithmetic():
    """Where a scene's verdict is not the one it expected, its sentence gives what a drafting round cost as the runs
    measured it (the on-run's time minus its plain rounds at the off-run's time per token), so "helps" / "does not
    pay" always agrees with the verdict: below the mean length the on-run is the faster one."""
    off = SimpleNamespace(predicted_n=100, predicted_ms=1000.0)  # 10 ms a token
    faster = SimpleNamespace(n_steps=60, n_spec_steps=10, predicted_n=100, predicted_ms=800.0)
    assert demo.drafting_round_cost(off, faster) == pytest.approx(3.0)  # (800 - 50 x 10) / 10 / 10 rounds
    slower = SimpleNamespace(n_steps=60, n_spec_steps=10, predicted_n=100, predicted_ms=1100.0)
    assert demo.drafting_round_cost(off, slower) == pytest.approx(6.0)  # a round emits 5 tokens: it does not pay
    assert [demo.verdict_verb(v) for v in ("helps", "hurts", "neutral")] == ["it helps", "it hurts", "it is neutral"]
    assert demo.drafting_round_cost(off, SimpleNamespace(n_steps=100, n_spec_steps=0, predicted_n=100,
                                                         predicted_ms=990.0)) is None


def test_the_pick_follows_the_measured_verify_cost():
    """The two CPU kinds' measured costs (``tests/data/cpu-profiles``): on the Xeon (AMX) Q8_0 verifies 17 rows
    for 3.9 single rows of 25 ms, F16 for 2.6 of 37 ms; on the AMD EPYC of issue 20 (a Zen 5, family 26 model 2) the
    bundled Q4_1 verifies 17 rows for 13.7 rows of 6.4 ms, F16 for 2.9 of 15.2 ms. A copy predicts fastest on Q8_0
    there and F16 here."""
    q8, f16, q41 = (demo.Pair(name, NGRAM, name) for name in ("Q8_0", "F16", "Q4_1"))
    profiles = {p.stem: CostProfile.load(p) for p in (Path(__file__).parent / "data" / "cpu-profiles").glob("*.json")}

    def measure(cpu: str):
        def m(pair: demo.Pair):
            cost = profiles[cpu].format(pair.target)
            return cost.t1_ms, [cost.rows_ms(k + 1) / cost.t1_ms for k in range(K_MAX + 1)]
        return m

    xeon, _ = demo.pick_helps_pair([q8, f16, q41], measure("intel-xeon-amx"))
    epyc, why = demo.pick_helps_pair([q8, f16, q41], measure("amd-epyc-zen5-issue20"))
    assert xeon == q8 and epyc == f16
    assert why.startswith("helps scenes on F16: predicted ") and "Q8_0 " in why and "Q4_1 " in why


def test_specchat_demo_headless_one_scene(capsys, isolated_config):
    assert main(["demo", "--headless", "--scene", "3", "--n-predict", "8", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [d["scene"] for d in data] == ["a draft as costly as the target"]
    assert data[0]["mode"] == "K 4" and data[0]["drafted"] > 0
    assert "scene 1/1: a draft as costly as the target (K 4)" in err


def test_specchat_demo_lists_its_scenes(capsys):
    assert main(["demo", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(demo.SCENES) and lines[0].startswith("1. n-gram on a copy-heavy edit — ")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--headless", "--scene", "11"], "--scene 11: there are scenes 1..10"),
        (["--headless", "--n-predict", "0"], "--n-predict 0 must be a positive number"),
        (["--json"], "--json prints the figures of a headless tour: add --headless"),
    ],
)
def test_specchat_demo_bad_input_is_one_line(capsys, isolated_config, args, message):
    assert main(["demo", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err


@pytest.mark.slow
def test_a_cancelled_history_save_leaves_no_marker_and_the_next_load_saves_afresh(tmp_path, bundled_model):
    """Issue 23: ``load_scene`` cancelled while saving the history scene's earlier conversations (as the tour's Esc
    does) raises the race's cancellation, closes the session it loaded and writes no ``earlier.txt``; the next
    call starts the saving again from the first conversation, and keeps only its own. Fails if a cut-short save
    is taken as done (the marker), if the cancel is not raised, or if the half history survives."""
    from specchat.engine.drafter_kinds import SUFFIX
    from specchat.history import HistoryStore
    from specchat.race import RaceCancelled

    history = next(s for s in demo.SCENES if s.earlier)
    # on the bundled Q4_1 (nothing to derive), two earlier conversations
    scene = replace(history, pair=demo.Pair("bundled", SUFFIX, "bundled + suffix"), earlier=history.earlier[:2])
    settings = load_settings(None, {"data_dir": str(tmp_path / "data"), "threads": 1})
    own = tmp_path / "data" / demo.TOUR_HISTORY_DIR
    closed: list[object] = []

    def load(s):
        session = load_engine(s)
        close = session.close
        session.close = lambda: (closed.append(session), close())[1]
        return session

    said: list[str] = []
    with pytest.raises(RaceCancelled):
        demo.load_scene(scene, settings, load, said.append, n_predict=12,
                        cancelled=lambda: any("conversation 2/2" in m for m in said))
    assert len(closed) == 1 and not (own / "earlier.txt").exists()
    with HistoryStore(own / "history.sqlite3") as store:
        assert len(store.list_conversations()) == 1  # the first one finished; the second was cut short, not saved

    said.clear()
    session = demo.load_scene(scene, settings, load, said.append, n_predict=12)
    try:
        assert [m.split(" (")[0] for m in said] == ["saving earlier conversation 1/2", "saving earlier conversation 2/2"]
        assert (own / "earlier.txt").read_text(encoding="utf-8") == "\n".join(scene.earlier)
        with HistoryStore(own / "history.sqlite3") as store:
            convs = store.list_conversations()
            assert len(convs) == 2 and {store.load(c.id)[1][-2].content for c in convs} == set(scene.earlier)
    finally:
        session.close()
    said.clear()
    demo.load_scene(scene, settings, load, said.append, n_predict=12).close()
    assert said == []  # saved once: the third tour uses them as they are


def _demo_child(data: Path, scene: int, n_predict: int):
    """``specchat --data-dir DATA demo --headless --scene N`` in a fresh interpreter running this checkout's code
    (``PYTHONPATH``: the editable install may point at another checkout), SIGINT at its default."""
    import os
    import signal
    import subprocess
    import sys

    import specchat

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCHAT_")}
    env.update(XDG_CONFIG_HOME=str(data.parent / "cfg"), XDG_DATA_HOME=str(data.parent / "xdg"), SPECCHAT_THREADS="1",
               PYTHONPATH=str(Path(specchat.__file__).resolve().parents[1]))
    return subprocess.Popen(
        [sys.executable, "-m", "specchat.cli", "--data-dir", str(data), "demo", "--headless", "--scene", str(scene),
         "--n-predict", str(n_predict), "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=data.parent,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a background runner may ignore SIGINT
    )


def _until_seeding(proc, what: str) -> bytes:
    """stderr of ``proc`` until it has said (the whole line) it is saving its second earlier conversation (bounded:
    a broken run); a signal sent before the line's end would land inside that print."""
    import os
    import re
    import select
    import time

    seen = b""
    deadline = time.monotonic() + 600  # the first run derives the demo models first
    while not re.search(rb"saving earlier conversation 2/[^\n]*\n", seen):
        assert time.monotonic() < deadline and proc.poll() is None, (what, proc.poll(), seen[-2000:])
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            seen += os.read(proc.stderr.fileno(), 4096)
    return seen


@pytest.mark.slow
def test_ctrl_c_or_a_kill_while_the_headless_tour_saves_its_history_leaves_no_marker(tmp_path, bundled_model):
    """Issue 23, ``specchat demo --headless``: Ctrl-C while the history scene saves its earlier conversations exits
    130 with the one-line "specchat: interrupted" (no traceback) and writes no ``earlier.txt``; so does a process
    killed there (SIGKILL); the next run then saves all of them afresh and keeps only those."""
    import signal

    from specchat.history import HistoryStore

    data = tmp_path / "data"
    data.mkdir()
    own = data / demo.TOUR_HISTORY_DIR
    history = next(s for s in demo.SCENES if s.earlier)
    scene = demo.SCENES.index(history) + 1

    proc = _demo_child(data, scene, 48)
    before = _until_seeding(proc, "Ctrl-C")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    err = (before + err).decode("utf-8", "replace")
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.rstrip().splitlines()[-1] == "specchat: interrupted", err[-2000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
    assert not (own / "earlier.txt").exists()

    proc = _demo_child(data, scene, 48)
    _until_seeding(proc, "SIGKILL")
    proc.kill()
    proc.communicate(timeout=60)
    assert not (own / "earlier.txt").exists()

    proc = _demo_child(data, scene, 48)
    out, err = proc.communicate(timeout=600)
    err = err.decode("utf-8", "replace")
    assert proc.returncode == 0, err[-2000:]
    assert f"saving earlier conversation 1/{len(history.earlier)}" in err  # from the first one again
    assert (own / "earlier.txt").read_text(encoding="utf-8") == "\n".join(history.earlier)
    with HistoryStore(own / "history.sqlite3") as store:
        assert len(store.list_conversations()) == len(history.earlier)  # none left over from the cut-short runs
    assert b"the model has answered this kind of question before" in out
