"""The tour of "helps" and "hurts" (issue 11): scenes as data, the headless runner end to end on the real
bundled model (deriving the demo pairs first, with progress), and ``specchat demo``."""

from __future__ import annotations

import json

import pytest
from enginekit import assert_identical_or_a_near_tie

from specchat import demo
from specchat.cli import main
from specchat.config import load_settings
from specchat.loading import load_engine
from specchat.models.derive import derive_demo
from specchat.engine.drafter_kinds import NGRAM
from specchat.engine.gguf import read_gguf_info
from specchat.models.presets import SMOLLM2_Q8_FILE
from specchat.models.registry import resolve_pair


def test_the_scenes_cover_the_lessons():
    scenes = demo.SCENES
    assert [s.k is None for s in scenes] == [False] * 4 + [True] * 4  # fixed K first, then auto-K for each pair
    fixed, auto = scenes[:4], scenes[4:]
    assert [(s.pair, s.prompt) for s in fixed] == [(s.pair, s.prompt) for s in auto]
    assert fixed[0].pair == demo.HELPS_PAIR and fixed[0].prompt == demo.COPY_PROMPT  # helps
    assert fixed[1].pair == demo.HELPS_PAIR and fixed[1].prompt == demo.PROSE_PROMPT  # neutral
    assert fixed[2].pair == demo.SELF_DRAFT_PAIR and fixed[3].pair == demo.LAYER_SKIP_PAIR  # hurts, two ways
    assert demo.HELPS_PAIR.draft == NGRAM
    assert demo.HELPS_PAIR.target == "preset:smollm2-q8-ngram"  # issue 12: a target with a batched verify kernel
    for s in scenes:
        assert s.sentence.endswith(".") and "\n" not in s.sentence and s.expect and s.n_predict > 0


def test_the_tour_runs_end_to_end_on_the_bundled_model(tmp_path):
    """Every scene, short replies, starting from a data dir without the demo models: they are derived first."""
    settings = load_settings(None, {"data_dir": str(tmp_path / "data"), "threads": 1})
    said: list[str] = []
    results = demo.run_tour(settings, load=load_engine, derive=derive_demo, n_predict=12, progress=said.append)
    assert any(m.startswith("deriving the demo models") for m in said)
    assert (tmp_path / "data" / "models" / "SmolLM2-135M-Instruct.Q4_1.layerskip-0-5_24-29.gguf").is_file()
    helps = resolve_pair(demo.HELPS_PAIR.target, demo.HELPS_PAIR.draft, tmp_path / "data")
    assert helps.target == tmp_path / "data" / "models" / SMOLLM2_Q8_FILE and helps.drafter == NGRAM
    assert read_gguf_info(helps.target).quantization == "Q8_0"
    assert [r.scene for r in results] == list(demo.SCENES)
    figures = [r.figures() for r in results]
    for f, r in zip(figures, results):
        assert f["tokens"] > 0 and f["tok_s_off"] > 0 and f["tok_s_on"] > 0
        assert_identical_or_a_near_tie(r.race)
        assert all(n.startswith("auto-K: drafting ") for n in f["notices"])
        assert r.race.off.turn.draft_n == 0  # the baseline run never drafts
    self_draft, layer_skip = figures[2], figures[3]
    assert self_draft["drafted"] > 0 and self_draft["acceptance"] >= 0.8  # the model agrees with itself
    assert layer_skip["drafted"] > 0 and layer_skip["ghosts"] > 0 and layer_skip["acceptance"] < self_draft["acceptance"]
    assert self_draft["k_status"] == "K 4 (fixed)" and figures[6]["k_status"].startswith("K ")
    text = demo.format_results(results)
    assert text.startswith("1. n-gram on a copy-heavy edit")
    assert "expected: ghost text (rejected drafts) everywhere" in text


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
        (["--headless", "--scene", "9"], "--scene 9: there are scenes 1..8"),
        (["--headless", "--n-predict", "0"], "--n-predict 0 must be a positive number"),
        (["--json"], "--json prints the figures of a headless tour: add --headless"),
    ],
)
def test_specchat_demo_bad_input_is_one_line(capsys, isolated_config, args, message):
    assert main(["demo", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and message in err
