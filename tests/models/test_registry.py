"""Model names for users: bundled, paths, ``preset:NAME`` pairs, derived names; bare preset names refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from specchat.errors import ModelFileError
from specchat.models.presets import PRESETS, SMOLLM2_F16_FILE, SMOLLM2_SKIP_FILE, HubFile
from specchat.models.registry import bundled_model_path, resolve_model, resolve_pair


def test_bundled_and_paths(tmp_path: Path) -> None:
    assert resolve_model("bundled") == bundled_model_path()
    assert bundled_model_path().is_file()
    # paths are returned as given (validated later by specchat.engine.gguf), even when missing
    assert resolve_model(str(tmp_path / "x.gguf"), tmp_path) == tmp_path / "x.gguf"
    assert resolve_model("some/dir/model.gguf") == Path("some/dir/model.gguf")


def test_where_one_file_is_asked_a_preset_means_its_target(demo_data_dir: Path) -> None:
    models = demo_data_dir / "models"
    assert resolve_model("preset:smollm2-f16-q41", demo_data_dir) == models / SMOLLM2_F16_FILE
    assert resolve_model("preset:smollm2-layerskip", demo_data_dir) == bundled_model_path()


def test_derived_names_resolve_with_or_without_suffix(demo_data_dir: Path) -> None:
    models = demo_data_dir / "models"
    stem = SMOLLM2_SKIP_FILE.removesuffix(".gguf")
    assert resolve_model(stem, demo_data_dir) == models / SMOLLM2_SKIP_FILE
    assert resolve_model("SmolLM2-135M-Instruct.F16", demo_data_dir) == models / SMOLLM2_F16_FILE


def test_missing_preset_files_say_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"run: specchat models pull qwen2\.5-7b$"):
        resolve_model("preset:qwen2.5-7b", tmp_path)
    with pytest.raises(ModelFileError, match=r"run: specchat models derive --demo$"):
        resolve_model("preset:smollm2-f16-q41", tmp_path)
    with pytest.raises(ModelFileError, match="unknown preset 'nope'; choose one of"):
        resolve_model("preset:nope", tmp_path)
    with pytest.raises(ModelFileError, match="unknown model 'nope'"):
        resolve_model("nope", tmp_path)


def test_preset_prefix_chooses_the_pair(demo_data_dir: Path) -> None:
    models = demo_data_dir / "models"
    pair = resolve_pair("preset:smollm2-layerskip", "ngram", demo_data_dir)
    assert (pair.target, pair.drafter, pair.draft, pair.preset) == (
        bundled_model_path(), "model", models / SMOLLM2_SKIP_FILE, "smollm2-layerskip")
    # "none" still turns speculation off; an explicit draft model still wins
    assert resolve_pair("preset:smollm2-layerskip", "none", demo_data_dir).drafter == "none"
    explicit = resolve_pair("preset:smollm2-f16-q41", SMOLLM2_SKIP_FILE.removesuffix(".gguf"), demo_data_dir)
    assert (explicit.target, explicit.draft) == (models / SMOLLM2_F16_FILE, models / SMOLLM2_SKIP_FILE)


def test_a_bare_preset_name_is_refused_naming_both_spellings(demo_data_dir: Path) -> None:
    """Issue 11: ``--target smollm2-f16-q41`` silently meant the F16 file with the n-gram drafter while
    ``--target preset:smollm2-f16-q41`` meant the pair. One rule now: a preset is ``preset:NAME`` and is the pair;
    the bare name is refused with both spellings (the app, ``generate`` and ``bench`` all resolve here)."""
    with pytest.raises(ModelFileError) as err:
        resolve_pair("smollm2-f16-q41", "ngram", demo_data_dir)
    assert str(err.value) == (
        "'smollm2-f16-q41' names a preset, a target + draft pair: give target = 'preset:smollm2-f16-q41' for the "
        "pair, or the file's name ('SmolLM2-135M-Instruct.F16') for its target alone"
    )
    with pytest.raises(ModelFileError, match=r"give target = 'preset:smollm2-layerskip' for the pair, or the file's "
                       r"name \('SmolLM2-135M-Instruct\.Q4_1\.layerskip-0-5_24-29'\) for its draft alone"):
        resolve_pair("bundled", "smollm2-layerskip", demo_data_dir)
    with pytest.raises(ModelFileError, match=r"names a pair: choose it as the target"):
        resolve_pair("bundled", "preset:smollm2-layerskip", demo_data_dir)
    # both spellings the message names work: the pair, and the target file alone with the n-gram drafter
    assert resolve_pair("preset:smollm2-f16-q41", "ngram", demo_data_dir).draft is not None
    alone = resolve_pair("SmolLM2-135M-Instruct.F16", "ngram", demo_data_dir)
    assert (alone.target.name, alone.drafter, alone.draft) == (SMOLLM2_F16_FILE, "ngram", None)
    as_draft = resolve_pair("bundled", "SmolLM2-135M-Instruct.Q4_1.layerskip-0-5_24-29", demo_data_dir)
    assert as_draft.draft == demo_data_dir / "models" / SMOLLM2_SKIP_FILE


def test_preset_table() -> None:
    seed = PRESETS["qwen2.5-1.5b"]
    assert isinstance(seed.target, HubFile) and seed.target.size == 1_117_320_736
    assert isinstance(seed.draft, HubFile) and seed.draft.size == 491_400_032
    assert seed.target.url == (
        "https://huggingface.co/Qwen/Qwen2.5-1.5B-Instruct-GGUF/resolve/main/qwen2.5-1.5b-instruct-q4_k_m.gguf")
    assert {"qwen2.5-7b", "llama3.1-8b", "smollm2-f16-q41", "smollm2-layerskip"} <= set(PRESETS)
    for preset in PRESETS.values():
        assert preset.demonstrates
        assert preset.kind == ("local" if preset.name.startswith("smollm2") else "hub")


def test_the_q8_ngram_demo_pair_is_the_q8_re_encoding_with_the_ngram_drafter(demo_data_dir: Path) -> None:
    """The demo pair that helps: target = "preset:smollm2-q8-ngram" is the bundled model's Q8_0 re-encoding
    (derived by models derive --demo) drafted by n-gram lookup; it has no draft file to get or name."""
    from specchat.engine.gguf import read_gguf_info
    from specchat.models.presets import SMOLLM2_Q8_FILE, NgramDraft

    preset = PRESETS["smollm2-q8-ngram"]
    assert isinstance(preset.draft, NgramDraft) and [role for role, _ in preset.files()] == ["target"]
    pair = resolve_pair("preset:smollm2-q8-ngram", "ngram", demo_data_dir)
    assert (pair.target, pair.drafter, pair.draft, pair.preset) == (
        demo_data_dir / "models" / SMOLLM2_Q8_FILE, "ngram", None, "smollm2-q8-ngram")
    assert read_gguf_info(pair.target).quantization == "Q8_0"
    assert resolve_pair("preset:smollm2-q8-ngram", "none", demo_data_dir).drafter == "none"
    # its name alone is refused like every bare preset name (issue 11), and says how to get its drafter alone
    with pytest.raises(ModelFileError, match=r"give target = 'preset:smollm2-q8-ngram' for the pair, or 'ngram' for "
                                             r"its drafter alone \(n-gram lookup: no file\)$"):
        resolve_pair("bundled", "smollm2-q8-ngram", demo_data_dir)
    with pytest.raises(ModelFileError, match="names a pair: choose it as the target"):
        resolve_pair("bundled", "preset:smollm2-q8-ngram", demo_data_dir)
