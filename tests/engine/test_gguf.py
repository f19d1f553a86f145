"""GGUF validation (specchat.engine.gguf) and the tiny test models themselves (tests/tinymodels.py)."""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import numpy as np
import pytest


def _llama(path: Path, **kw) -> llama_cpp.Llama:
    return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, n_threads_batch=1, verbose=False, **kw)


PROMPTS = ["Hello there", "Write a python function that adds two numbers.", "Once upon a time"]


def _greedy_with_margins(model: llama_cpp.Llama, prompt: str, n: int) -> tuple[list[int], list[int], list[float]]:
    toks = model.tokenize(prompt.encode(), add_bos=False, special=True)
    model.reset()
    model.eval(toks)
    gen, margins = [], []
    for _ in range(n):
        logits = np.array(model.scores[model.n_tokens - 1])
        top2 = np.partition(logits, -2)[-2:]
        margins.append(float(top2[1] - top2[0]))
        gen.append(int(logits.argmax()))
        model.eval([gen[-1]])
    return toks, gen, margins


class TestTinyModels:
    def test_tiny_target_loads_tokenizes_and_decodes(self, tiny_target, bundled_model):
        tiny = _llama(tiny_target)
        real = _llama(bundled_model, vocab_only=True)
        text = "Hello, world! Ünïcode 🙂 <|im_start|>"
        assert tiny.tokenize(text.encode(), special=True) == real.tokenize(text.encode(), special=True)
        assert tiny.n_vocab() == real.n_vocab() == 49152
        toks = tiny.tokenize(b"Hello there", add_bos=False)
        tiny.eval(toks)
        assert np.isfinite(np.array(tiny.scores[len(toks) - 1])).all()
        assert tiny.detokenize(toks) == b"Hello there"
        assert tiny.metadata["tokenizer.chat_template"] == real.metadata["tokenizer.chat_template"]

    def test_target_logits_are_peaked_and_draft_agrees_often_but_not_always(self, tiny_target, tiny_draft, tiny_draft_far):
        target = _llama(tiny_target, logits_all=True)
        contexts, margins = [], []
        for prompt in PROMPTS:
            toks, gen, m = _greedy_with_margins(target, prompt, 40)
            contexts.append((toks, gen))
            margins += m
        margins = np.array(margins)
        assert (margins > 0.5).mean() > 0.9
        assert np.median(margins) > 5.0

        def agreement(path: Path) -> float:
            draft = _llama(path, logits_all=True)
            hits = []
            for toks, gen in contexts:
                draft.reset()
                draft.eval(toks + gen)
                hits += [int(np.argmax(draft.scores[len(toks) - 1 + i])) == g for i, g in enumerate(gen)]
            return float(np.mean(hits))

        near, far = agreement(tiny_draft), agreement(tiny_draft_far)
        assert 0.3 <= near <= 0.85, near
        assert far < near and far < 0.3, far
        # greedy text does not fall into short loops (that would make acceptance trivially all-or-nothing)
        assert all(len(set(gen)) > 30 for _, gen in contexts)

    def test_flat_pair_is_spread_out_and_disagrees(self, tiny_flat_pair):
        """Premise of the stochastic tests: at T = 1 the flat target's p is spread over many tokens, and the
        draft's q overlaps it only partly (expected acceptance = sum_x min(p, q) well below 1, above 0)."""
        target, draft = (_llama(p, logits_all=True) for p in tiny_flat_pair)
        toks = target.tokenize(b"Hello there, how are you today?", add_bos=False)
        target.eval(toks)
        draft.eval(toks)

        def softmax(row) -> np.ndarray:
            x = np.asarray(row, dtype=np.float64)
            e = np.exp(x - x.max())
            return e / e.sum()

        tops, overlaps = [], []
        for i in range(len(toks)):
            p, q = softmax(target.scores[i]), softmax(draft.scores[i])
            tops.append(p.max())
            overlaps.append(np.minimum(p, q).sum())
        assert max(tops) < 0.6 and np.median(tops) < 0.3
        assert 0.02 < np.mean(overlaps) < 0.5, overlaps

    def test_greedy_prompts_have_no_near_ties(self, tiny_target, greedy_prompts):
        """The promise behind ``greedy_prompts``: for 100 greedy tokens, raw and in the chat template, the top-1
        logit beats the top-2 by > 0.1, and one batched decode of the whole text picks the same argmax at every
        position as token-by-token decoding."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        from tinymodels import GREEDY_SAFE_TOKENS

        target = _llama(tiny_target, logits_all=True)
        target_meta = target.metadata
        fmt = Jinja2ChatFormatter(template=target_meta["tokenizer.chat_template"], eos_token="<|im_end|>",
                                  bos_token="<|im_start|>", add_generation_prompt=True)
        worst = np.inf
        for prompt in greedy_prompts:
            templated = fmt(messages=[{"role": "user", "content": prompt}]).prompt
            assert templated.startswith("<|im_start|>system") and templated.endswith("<|im_start|>assistant\n")
            for text in (prompt, templated):
                toks, gen, margins = _greedy_with_margins(target, text, GREEDY_SAFE_TOKENS)
                worst = min(worst, min(margins))
                target.reset()
                target.eval(toks + gen[:-1])  # one batch (n_batch 512): every row's logits at once
                batch_argmax = [int(np.argmax(target.scores[len(toks) - 1 + i])) for i in range(len(gen))]
                assert batch_argmax == gen, text
        assert worst > 0.1, worst


# ---------------------------------------------------------------------------------------------------------
# validation before llama.cpp sees a file

import os  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402

import gguf as gguf_pkg  # noqa: E402

from specchat.engine.gguf import parse_gguf, read_gguf_info, validate_gguf  # noqa: E402
from specchat.errors import ModelFileError, UserError  # noqa: E402


def _copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    return dst


def _error(path: Path) -> str:
    with pytest.raises(ModelFileError) as err:
        validate_gguf(path)
    message = str(err.value)
    assert isinstance(err.value, UserError)
    assert "\n" not in message and str(path) in message, message
    return message


def test_missing_file(tmp_path):
    message = _error(tmp_path / "nope.gguf")
    assert "not found" in message


def test_directory(tmp_path):
    message = _error(tmp_path)
    assert "is a directory" in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read a chmod 000 file, so 'unreadable' cannot be produced")
def test_unreadable(tiny_target, tmp_path):
    path = _copy(tiny_target, tmp_path / "locked.gguf")
    path.chmod(0)
    try:
        assert "permission denied" in _error(path)
    finally:
        path.chmod(0o644)


def test_text_file_is_not_gguf(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_text("these are not the weights you are looking for\n")
    message = _error(path)
    assert "not a GGUF model file" in message and "b'thes'" in message


@pytest.mark.parametrize("content", [b"", b"GG"])
def test_tiny_files_are_not_gguf(tmp_path, content):
    path = tmp_path / "short.gguf"
    path.write_bytes(content)
    assert "not a GGUF model file" in _error(path)


def test_unknown_version(tiny_target, tmp_path):
    path = _copy(tiny_target, tmp_path / "v99.gguf")
    with open(path, "r+b") as fh:
        fh.seek(4)
        fh.write(struct.pack("<I", 99))
    message = _error(path)
    assert "GGUF version 99" in message and "2 and 3" in message


def test_big_endian_file_is_named(tiny_target, tmp_path):
    path = _copy(tiny_target, tmp_path / "be.gguf")
    with open(path, "r+b") as fh:
        fh.seek(4)
        fh.write(struct.pack(">I", 3))
    assert "big-endian" in _error(path)


@pytest.mark.parametrize("cut", [1, 1000, 5_000_000])
def test_truncated_tensor_data_names_both_sizes(tiny_target, tmp_path, cut):
    full = tiny_target.stat().st_size
    expected = parse_gguf(tiny_target).expected_size
    path = _copy(tiny_target, tmp_path / "cut.gguf")
    os.truncate(path, expected - cut)
    message = _error(path)
    assert "truncated" in message and "re-download" in message
    assert f"needs {expected} bytes" in message and f"has {expected - cut}" in message and f"({cut} missing)" in message
    assert full >= expected
    # llama.cpp agrees that this file cannot be loaded (so the check is not stricter than llama.cpp)
    with pytest.raises(ValueError):
        llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False)


def test_truncated_inside_header(tiny_target, tmp_path):
    path = _copy(tiny_target, tmp_path / "header.gguf")
    os.truncate(path, 200_000)  # the tokenizer tables alone are ~1.3 MB
    message = _error(path)
    assert "truncated" in message and "200000 bytes long" in message and "header" in message


def test_corrupt_tensor_type(tiny_target, tmp_path):
    parsed = parse_gguf(tiny_target)
    # the last tensor's info ends with uint32 type + uint64 offset just before the alignment padding
    path = _copy(tiny_target, tmp_path / "badtype.gguf")
    raw = bytearray(path.read_bytes()[: parsed.data_offset])
    last = parsed.tensors[-1]
    needle = struct.pack("<IQ", last.ggml_type, last.offset)
    at = raw.rindex(needle)
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack("<I", 250))
    message = _error(path)
    assert "corrupt" in message and "unknown ggml type 250" in message


def test_truncated_before_the_tables_it_announces(tiny_target, tmp_path):
    path = _copy(tiny_target, tmp_path / "stub.gguf")
    os.truncate(path, 100)
    message = _error(path)
    assert "truncated or corrupt" in message and "the file has 100" in message and "need at least" in message


def _patch(src: Path, dst: Path, old: bytes, new: bytes, limit: int) -> Path:
    raw = bytearray(src.read_bytes())
    at = raw.index(old, 0, limit)
    raw[at : at + len(old)] = new
    dst.write_bytes(raw)
    return dst


def test_duplicate_metadata_key(tiny_target, tmp_path):
    parsed = parse_gguf(tiny_target)
    path = _patch(tiny_target, tmp_path / "dup.gguf", b"general.type", b"general.name", parsed.data_offset)
    assert "duplicate metadata key 'general.name'" in _error(path)


def test_tensor_offsets_must_follow_each_other(tiny_target, tmp_path):
    parsed = parse_gguf(tiny_target)
    last = parsed.tensors[-1]
    old = struct.pack("<IQ", last.ggml_type, last.offset)
    path = _patch(tiny_target, tmp_path / "gap.gguf", old, struct.pack("<IQ", last.ggml_type, last.offset + 64),
                  parsed.data_offset)
    message = _error(path)
    assert f"has offset {last.offset + 64}, expected {last.offset}" in message


def test_header_larger_than_the_first_read(make_tiny_gguf):
    """Metadata bigger than the 4 MB first read is parsed by reading a longer prefix."""
    blob = "x" * 9_000_000
    path = make_tiny_gguf(seed=5, n_layer=1, n_embd=32, n_head=2, n_ff=32,
                          metadata_overrides={"specchat.test.blob": blob})
    parsed = validate_gguf(path)
    assert parsed.metadata["specchat.test.blob"] == blob and parsed.data_offset > 9_000_000
    assert len(parsed.tensors) == 12


def test_trailing_bytes_are_fine(tiny_target, tmp_path):
    path = _copy(tiny_target, tmp_path / "padded.gguf")
    with open(path, "ab") as fh:
        fh.write(b"\0" * 100)
    assert validate_gguf(path).file_size == tiny_target.stat().st_size + 100


def test_parser_agrees_with_the_gguf_package(make_tiny_gguf):
    """Our header parser against gguf.GGUFReader: every key/value, every tensor's shape, type and offset.

    (A 1152-token vocabulary with 100 merges: GGUFReader takes seconds for the full 49k-token tables.)
    """
    from tinymodels import tokenizer_metadata

    merges = next(value for key, value, *_ in tokenizer_metadata() if key == "tokenizer.ggml.merges")
    path = make_tiny_gguf(seed=3, n_layer=1, n_embd=32, n_head=2, n_ff=32, n_vocab_pad=-48000,
                          metadata_overrides={"tokenizer.ggml.merges": merges[:100], "specchat.test.f64": 0.25,
                                              "specchat.test.ints": [1, -2, 3]})
    ours = parse_gguf(path)
    reader = gguf_pkg.GGUFReader(path)
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert ours.metadata.keys() == theirs.keys()
    for key, value in theirs.items():
        mine = ours.metadata[key]
        assert mine == pytest.approx(value) if isinstance(value, float) else mine == value, key
    assert [(t.name, t.shape, t.ggml_type, t.nbytes) for t in ours.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.n_bytes)) for t in reader.tensors
    ]
    assert ours.data_offset == reader.data_offset
    assert [ours.data_offset + t.offset for t in ours.tensors] == [int(t.data_offset) for t in reader.tensors]


def test_bundled_model_passes_and_is_described(bundled_model):
    parsed = validate_gguf(bundled_model)
    assert parsed.expected_size == parsed.file_size == bundled_model.stat().st_size
    info = read_gguf_info(bundled_model)
    assert info.architecture == "llama" and info.quantization == "Q4_1" and info.file_type == 3
    assert info.block_count == 30 and info.vocab_size == 49152 and info.tokenizer_model == "gpt2"
    assert info.has_chat_template and info.tensor_count == 272 and info.context_length == 8192
    assert 130e6 < info.n_params < 140e6  # SmolLM2-135M
    assert info.metadata["general.name"] == info.name and "tokenizer.ggml.tokens" not in info.metadata
    assert len(info.tokens) == 49152 and info.tokens[1] == "<|im_start|>"


def test_tiny_model_info(tiny_target, make_tiny_gguf):
    info = read_gguf_info(tiny_target)
    assert (info.architecture, info.quantization, info.block_count, info.embedding_length) == ("llama", "F32", 2, 64)
    assert info.vocab_size == 49152 and info.has_chat_template and info.tensor_count == 3 + 2 * 9
    assert info.file_size == tiny_target.stat().st_size
    plain = make_tiny_gguf(seed=5, n_layer=1, n_embd=32, n_head=2, n_ff=32,
                           metadata_overrides={"tokenizer.chat_template": None, "general.file_type": None})
    info = read_gguf_info(plain)
    assert not info.has_chat_template and info.file_type is None and info.quantization == "F32"
