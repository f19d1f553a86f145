"""A tiny recurrent (Mamba-1) GGUF for tests: random f32 weights, the bundled SmolLM2 tokenizer.

llama.cpp cannot remove the tail of a recurrent model's state (``llama_memory_seq_rm`` returns False for a
partial removal), so specchat refuses such a model as a speculation target. No recurrent GGUF exists offline,
so the tests write one.

Architecture ``mamba`` (``LLM_ARCH_MAMBA``), as llama.cpp (vendored in llama-cpp-python 0.3.36) loads it in
``src/models/mamba.cpp`` (``llama_model_mamba::load_arch_hparams`` / ``load_arch_tensors``). Hyperparameters:
``mamba.{context_length, embedding_length, block_count, ssm.conv_kernel, ssm.inner_size, ssm.state_size,
ssm.time_step_rank, attention.layer_norm_rms_eps}``; llama.cpp requires ``d_inner == 2 * n_embd``. Tensors,
with their ggml shapes ``{ne0, ne1}`` (numpy shapes are the reverse):

- ``token_embd.weight`` {n_embd, n_vocab}, ``output_norm.weight`` {n_embd}, ``output.weight`` {n_embd, n_vocab}
- per block ``blk.{i}.``: ``attn_norm.weight`` {n_embd}, ``ssm_in.weight`` {n_embd, 2*d_inner},
  ``ssm_conv1d.weight`` {d_conv, d_inner}, ``ssm_conv1d.bias`` {d_inner},
  ``ssm_x.weight`` {d_inner, dt_rank + 2*d_state}, ``ssm_dt.weight`` {dt_rank, d_inner}, ``ssm_dt.bias`` {d_inner},
  ``ssm_a`` {d_state, d_inner} (no ``.weight`` suffix), ``ssm_d`` {d_inner}, ``ssm_out.weight`` {d_inner, n_embd}.

Values follow Mamba's own initialisation (Gu & Dao 2023) where it matters for a stable recurrence: ``ssm_a`` is
``-exp(A_log)`` with ``A_log = log(1..d_state)`` (what ``convert_hf_to_gguf.py`` stores), so the state decays;
``ssm_dt.bias`` is softplus^-1 of a step size in [0.001, 0.1]; ``ssm_d`` is ones. Everything else is Gaussian,
drawn per tensor with :func:`tinymodels.gaussian` (``numpy.random.default_rng((seed, crc32(name)))``).
``output.weight`` has the same scale as :mod:`tinymodels` (``output_scale / sqrt(n_embd)``), so greedy logits
are peaked.

The tokenizer metadata comes from :func:`tinymodels.tokenizer_metadata` (all ``tokenizer.*`` keys of the
bundled SmolLM2-135M-Instruct GGUF, chat template included), and the file is written by
:func:`tinymodels.write_gguf`, as the tiny llama models are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from tinymodels import DEFAULT_OUTPUT_SCALE, PathLike, gaussian, tensor_rng, tokenizer_metadata, write_gguf


def mamba_tensors(
    *, seed: int, n_layer: int, n_embd: int, d_inner: int, d_state: int, d_conv: int, dt_rank: int, n_vocab: int,
    output_scale: float,
) -> list[tuple[str, np.ndarray]]:
    """(name, float32 array in numpy order) of every tensor llama.cpp's LLM_ARCH_MAMBA loader requires."""
    out: list[tuple[str, np.ndarray]] = [
        ("token_embd.weight", gaussian(seed, "token_embd.weight", (n_vocab, n_embd), 1.0)),
        ("output_norm.weight", np.ones((n_embd,), dtype=np.float32)),
        ("output.weight", gaussian(seed, "output.weight", (n_vocab, n_embd), output_scale / np.sqrt(n_embd))),
    ]
    a_log = np.log(np.arange(1, d_state + 1, dtype=np.float32))
    for i in range(n_layer):
        p = f"blk.{i}."
        # softplus^-1 of a step size log-uniform in [0.001, 0.1]
        dt = np.exp(tensor_rng(seed, p + "dt").uniform(np.log(1e-3), np.log(1e-1), d_inner)).astype(np.float32)
        dt_bias = (dt + np.log(-np.expm1(-dt))).astype(np.float32)
        out += [
            (p + "attn_norm.weight", np.ones((n_embd,), dtype=np.float32)),
            (p + "ssm_in.weight", gaussian(seed, p + "ssm_in.weight", (2 * d_inner, n_embd), 1.0 / np.sqrt(n_embd))),
            (p + "ssm_conv1d.weight", gaussian(seed, p + "ssm_conv1d.weight", (d_inner, d_conv), 1.0 / np.sqrt(d_conv))),
            (p + "ssm_conv1d.bias", np.zeros((d_inner,), dtype=np.float32)),
            (p + "ssm_x.weight",
             gaussian(seed, p + "ssm_x.weight", (dt_rank + 2 * d_state, d_inner), 1.0 / np.sqrt(d_inner))),
            (p + "ssm_dt.weight", gaussian(seed, p + "ssm_dt.weight", (d_inner, dt_rank), 1.0 / np.sqrt(dt_rank))),
            (p + "ssm_dt.bias", dt_bias),
            (p + "ssm_a", np.ascontiguousarray(-np.exp(np.broadcast_to(a_log, (d_inner, d_state))))),
            (p + "ssm_d", np.ones((d_inner,), dtype=np.float32)),
            (p + "ssm_out.weight", gaussian(seed, p + "ssm_out.weight", (n_embd, d_inner), 1.0 / np.sqrt(d_inner))),
        ]
    return out


def write_tiny_mamba_gguf(
    path: PathLike,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    d_state: int = 16,
    d_conv: int = 4,
    dt_rank: int = 4,
    n_ctx_train: int = 4096,
    output_scale: float = DEFAULT_OUTPUT_SCALE,
    name: str | None = None,
) -> Path:
    """Write a tiny Mamba GGUF (``d_inner = 2 * n_embd``, as llama.cpp requires) and return its path."""
    path = Path(path)
    d_inner = 2 * n_embd
    tok = {key: (value, vtype, etype) for key, value, vtype, etype in tokenizer_metadata()}

    def add_hparams(writer: GGUFWriter) -> None:
        writer.add_feed_forward_length(0)  # as convert_hf_to_gguf.py writes for Mamba: no FFN, no attention heads
        writer.add_head_count(0)
        writer.add_ssm_conv_kernel(d_conv)
        writer.add_ssm_inner_size(d_inner)
        writer.add_ssm_state_size(d_state)
        writer.add_ssm_time_step_rank(dt_rank)
        writer.add_layer_norm_rms_eps(1e-5)

    tensors = mamba_tensors(
        seed=seed, n_layer=n_layer, n_embd=n_embd, d_inner=d_inner, d_state=d_state, d_conv=d_conv,
        dt_rank=dt_rank, n_vocab=len(tok["tokenizer.ggml.tokens"][0]), output_scale=output_scale,
    )
    return write_gguf(
        path, "mamba", name=name or path.stem, description=f"specchat tiny recurrent (mamba) test model, seed={seed}",
        n_ctx_train=n_ctx_train, n_embd=n_embd, n_layer=n_layer, add_hparams=add_hparams, tokenizer=tok,
        tensors=tensors,
    )
