"""``models derive``: the quantised pair and the layer-skip draft, on the real bundled model.

The session fixture ``demo_data_dir`` quantises the bundled Q4_1 to F16 and writes the 0-5,24-29 layer-skip
draft once; these tests inspect those files (and derive small extra files from the layer-skip draft).
"""

from __future__ import annotations

import re
from pathlib import Path

import gguf
import numpy as np
import pytest

from specchat.engine.compat import VocabSummary, check_compatible, check_gguf_pair
from specchat.engine.gguf import read_gguf_info
from specchat.models.derive import (
    DeriveError,
    default_name,
    derive,
    derive_demo,
    format_layers,
    parse_layers,
    verify_loads,
)
from specchat.models.presets import SMOLLM2_F16_FILE, SMOLLM2_SKIP_FILE
from specchat.models.bundled import bundled_model_path

from .clirun import run_cli

KEPT = list(range(0, 6)) + list(range(24, 30))


@pytest.fixture(scope="module")
def f16_path(demo_data_dir: Path) -> Path:
    return demo_data_dir / "models" / SMOLLM2_F16_FILE


@pytest.fixture(scope="module")
def skip_path(demo_data_dir: Path) -> Path:
    return demo_data_dir / "models" / SMOLLM2_SKIP_FILE


@pytest.fixture(scope="module")
def readers(skip_path: Path) -> tuple[gguf.GGUFReader, gguf.GGUFReader]:
    """(bundled, layer-skip) parsed by the gguf package (a few seconds each: read once)."""
    return gguf.GGUFReader(str(bundled_model_path())), gguf.GGUFReader(str(skip_path))


# --------------------------------------------------------------------------------------------- layer lists


def test_parse_and_format_layers() -> None:
    assert parse_layers("0-5,24-29", 30) == KEPT
    assert parse_layers(" 3, 1-2 ,2 ", 30) == [1, 2, 3]
    assert format_layers(KEPT) == "0-5,24-29"
    assert format_layers([1, 3, 4, 5, 9]) == "1,3-5,9"
    assert format_layers(KEPT, sep="_") == "0-5_24-29"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("0-5,x", "'x' is not a block number or range"),
        ("5-2", "runs backwards"),
        ("0-30", "block 30 does not exist; this model has blocks 0-29"),
        ("0-29", "keeps all 30 blocks"),
    ],
)
def test_parse_layers_errors(spec: str, message: str) -> None:
    with pytest.raises(DeriveError, match=re.escape(message)):
        parse_layers(spec, 30)


def test_default_names() -> None:
    src = Path("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert default_name(src, "f16", None) == SMOLLM2_F16_FILE
    assert default_name(src, None, KEPT) == SMOLLM2_SKIP_FILE
    assert default_name(src, "Q8_0", [0, 1]) == "SmolLM2-135M-Instruct.Q8_0.layerskip-0-1.gguf"
    assert default_name(Path("qwen2.5-0.5b-instruct-q4_k_m.gguf"), "Q8_0", None) == "qwen2.5-0.5b-instruct.Q8_0.gguf"


# --------------------------------------------------------------------------------------- quantised pair


def test_f16_target_is_f16_and_compatible_with_bundled(f16_path: Path) -> None:
    info = read_gguf_info(f16_path)
    bundled = read_gguf_info(bundled_model_path())
    assert info.quantization == "F16"
    assert info.block_count == bundled.block_count == 30
    assert info.vocab_size == bundled.vocab_size == 49152
    assert info.file_size > 2 * bundled.file_size  # F16 really is bigger than Q4_1
    assert check_gguf_pair(f16_path, bundled_model_path()).ok


def test_f16_target_loads_and_passes_compat_on_loaded_vocabs(f16_path: Path) -> None:
    """The authoritative check: llama.cpp's own vocabularies of both loaded models."""
    import llama_cpp

    assert verify_loads(f16_path, 30) == 30
    summaries = []
    for path in (f16_path, bundled_model_path()):
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        assert model
        try:
            summaries.append(VocabSummary.from_llama_model(model, str(path)))
        finally:
            llama_cpp.llama_model_free(model)
    assert check_compatible(*summaries).ok


def _teacher_forced_agreement(paths: list[Path], n_gen: int = 40) -> list[float]:
    """Share of positions where each model's argmax equals the bundled model's greedy continuation,
    with the engine's own :class:`~specchat.engine.model.Model` (one batched decode per candidate)."""
    from specchat.engine.model import Model

    ref = Model(bundled_model_path(), n_ctx=128, n_batch=128, threads=1)
    try:
        prompt = ref.tokenize("<|im_start|>user\nExplain why the sky is blue.<|im_end|>\n<|im_start|>assistant\n")
        logits = ref.decode(prompt)
        gen: list[int] = []
        while len(gen) < n_gen:
            tok = int(np.argmax(logits[-1]))
            if ref.is_eog(tok):
                break
            gen.append(tok)
            logits = ref.decode([tok])
    finally:
        ref.close()
    assert len(gen) >= 20
    out = []
    for path in paths:
        m = Model(path, n_ctx=128, n_batch=128, threads=1)
        try:
            rows = m.decode(prompt + gen[:-1], logits_last=len(gen))
        finally:
            m.close()
        out.append(float((rows.argmax(-1) == np.asarray(gen)).mean()))
    return out


def test_demo_pairs_have_high_and_low_acceptance(f16_path: Path, skip_path: Path) -> None:
    """What the presets promise: the F16 target agrees with its Q4_1 draft almost everywhere (measured here:
    40/40 positions), the layer-skip draft with its target almost nowhere (2/40)."""
    f16, skip = _teacher_forced_agreement([f16_path, skip_path])
    assert f16 >= 0.85
    assert skip <= 0.5
    assert skip < f16


# ------------------------------------------------------------------------------------------ layer-skip


def test_layer_skip_loads_with_intended_block_count(skip_path: Path) -> None:
    assert read_gguf_info(skip_path).block_count == 12
    assert verify_loads(skip_path) == 12  # llama_model_n_layer after a real load + one decode


def test_layer_skip_copies_kept_blocks_byte_for_byte(readers) -> None:
    src, dst = readers
    src_t = {t.name: t for t in src.tensors}
    dst_t = {t.name: t for t in dst.tensors}
    # non-block tensors: all there, same type and bytes
    non_block = [n for n in src_t if not n.startswith("blk.")]
    assert non_block and all(n in dst_t for n in non_block)
    # blocks renumbered contiguously: new i <- old KEPT[i]
    dst_blocks = sorted({int(n.split(".")[1]) for n in dst_t if n.startswith("blk.")})
    assert dst_blocks == list(range(12))
    per_block = [n.split(".", 2)[2] for n in src_t if n.startswith("blk.0.")]
    expected = {n: n for n in non_block}
    for new, old in enumerate(KEPT):
        expected.update({f"blk.{new}.{s}": f"blk.{old}.{s}" for s in per_block})
    assert set(dst_t) == set(expected)
    for new_name, old_name in expected.items():
        a, b = dst_t[new_name], src_t[old_name]
        assert a.tensor_type == b.tensor_type, new_name
        assert list(a.shape) == list(b.shape), new_name
        assert bytes(a.data.tobytes()) == bytes(b.data.tobytes()), new_name


def test_layer_skip_copies_metadata(readers, skip_path: Path) -> None:
    src, dst = readers
    changed = {"llama.block_count", "general.name", "GGUF.tensor_count", "GGUF.kv_count"}
    for key, field in src.fields.items():
        if key in changed:
            continue
        assert key in dst.fields, key
        other = dst.fields[key]
        assert other.types == field.types, key
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            assert len(other.data) == len(field.data), key
            assert [bytes(other.parts[i]) for i in other.data[:50]] == [bytes(field.parts[i]) for i in field.data[:50]]
        else:
            assert bytes(other.parts[other.data[0]]) == bytes(field.parts[field.data[0]]), key
    assert dst.fields["llama.block_count"].contents() == 12
    assert dst.fields["specchat.derived.keep_layers"].contents() == "0-5,24-29"
    assert check_gguf_pair(bundled_model_path(), skip_path).ok


def test_derive_demo_keeps_existing_files(demo_data_dir: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in (demo_data_dir / "models").glob("*.gguf")}
    results = derive_demo(demo_data_dir / "models", threads=2)
    assert [d for _p, d in results] == [None, None, None]  # F16, Q8_0, layer-skip
    assert before == {p.name: p.stat().st_mtime_ns for p in (demo_data_dir / "models").glob("*.gguf")}


def test_derive_refuses_to_overwrite(tmp_path: Path, skip_path: Path) -> None:
    out = tmp_path / "exists.gguf"
    out.write_bytes(b"keep me")
    with pytest.raises(DeriveError, match="already exists; pass --force"):
        derive(skip_path, out, keep_layers="0-3")
    assert out.read_bytes() == b"keep me"
    with pytest.raises(DeriveError, match="is the input file"):
        derive(skip_path, skip_path, quant="Q8_0", force=True)
    with pytest.raises(DeriveError, match="unknown quantisation 'Q9_9'"):
        derive(skip_path, tmp_path / "x.gguf", quant="Q9_9")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.gguf"]  # no temporary files left


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_derive_skip_then_quantise(capsys, isolated_config: Path, tmp_path: Path, skip_path: Path) -> None:
    """--keep-layers and --quant together, from a path, into the data dir: 4 blocks of the 12, as Q8_0."""
    code, out, err = run_cli(
        capsys, "models", "derive", "--from", str(skip_path), "--keep-layers", "0-1,10-11", "--quant", "q8_0",
        "-o", "tiny-q8", "--data-dir", str(tmp_path), "--threads", "2",
    )
    assert code == 0, err
    path = tmp_path / "models" / "tiny-q8.gguf"
    assert f"wrote {path}" in out and "Q8_0, 4 blocks" in out
    info = read_gguf_info(path)
    assert (info.quantization, info.block_count) == ("Q8_0", 4)
    assert verify_loads(path) == 4
    assert check_gguf_pair(bundled_model_path(), path).ok
    # the derived name now resolves as a model name, and the CLI refuses to overwrite it
    code, out, err = run_cli(capsys, "models", "derive", "--from", str(skip_path), "--keep-layers", "0-1",
                             "-o", "tiny-q8", "--data-dir", str(tmp_path))
    assert code == 2
    assert err.strip().splitlines() == [f"specchat: error: {path} already exists; pass --force to overwrite it"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--keep-layers", "0-40"], "block 40 does not exist; this model has blocks 0-29"),
        (["--quant", "Q9_9"], "unknown quantisation 'Q9_9'"),
        ([], "nothing to derive"),
        (["--demo", "--quant", "F16"], "--demo writes fixed files"),
        (["--from", "no-such-model", "--quant", "F16"], "unknown model 'no-such-model'"),
    ],
)
def test_cli_derive_errors_are_one_line(capsys, isolated_config: Path, tmp_path: Path, argv: list[str],
                                        message: str) -> None:
    code, out, err = run_cli(capsys, "models", "derive", *argv, "--data-dir", str(tmp_path))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specchat: error: ") and message in lines[0]
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_cli_derive_from_a_truncated_file(capsys, isolated_config: Path, tmp_path: Path, skip_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(skip_path.read_bytes()[:5_000_000])
    code, _out, err = run_cli(capsys, "models", "derive", "--from", str(cut), "--quant", "F16",
                              "--data-dir", str(tmp_path))
    assert code == 2
    assert "is truncated" in err and len(err.strip().splitlines()) == 1


def test_cli_derive_reports_llamacpp_refusal(capsys, isolated_config: Path, tmp_path: Path, skip_path: Path) -> None:
    """IQ2_XXS needs an importance matrix: llama.cpp's own reason, in one line, and no file left behind."""
    code, _out, err = run_cli(capsys, "models", "derive", "--from", str(skip_path), "--quant", "IQ2_XXS",
                              "--data-dir", str(tmp_path), "--threads", "2")
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("specchat: error: llama.cpp could not quantise")
    assert "requires an imatrix" in lines[-1] and "choose another --quant" in lines[-1]
    assert all(line.startswith("  ") for line in lines[:-1])  # only our progress notes, no llama.cpp chatter
    assert list((tmp_path / "models").iterdir()) == []
