"""Which matrix kernels llama.cpp's CPU backend has for a weight format: batched ones, and AMX tiles for the
formats it repacks when the weights go into its extra buffer types (``use_extra_bufts``, llama.cpp's ``--repack``).

Two facts decide the cost of a verify batch (README, "The lesson"):

* batched kernels: llamafile's tinyBLAS (``ggml/src/ggml-cpu/llamafile/sgemm.cpp``, ggml-org/llama.cpp#6414)
  multiplies many rows at once for :data:`SGEMM_FORMATS`; other formats (Q4_1, the K-quants) run one dot
  product per row and weight block, unless an extra buffer type repacks them;
* extra buffer types: with ``use_extra_bufts`` llama.cpp repacks weights into AMX tiles
  (``ggml/src/ggml-cpu/amx``, formats :data:`AMX_FORMATS`) or interleaved layouts (``CPU_REPACK``). On a CPU
  where this build uses AMX, multi-row batches of those kernels crash here
  (:func:`specchat.engine.model.extra_buffer_types_safe`); one-row batches run their AVX512-VNNI path, ~3x
  faster than the plain kernels on this machine.

The format tables only: nothing here imports llama.cpp (the cost model's words about a format,
:func:`specchat.engine.telemetry.verify_reason`, reach the TUI). What this build does on this CPU is asked in
:mod:`specchat.engine.model` (:func:`~specchat.engine.model.system_info`,
:func:`~specchat.engine.model.extra_buffer_types_safe`); what the ``repack`` setting chooses is
:func:`specchat.loading.repack_for`.
"""

from __future__ import annotations

#: weight formats (GGUF file types) with a batched x86 matrix kernel without extra buffers: llamafile sgemm
SGEMM_FORMATS = frozenset({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "IQ4_NL"})
#: file types whose weight tensors llama.cpp repacks into AMX tiles (``qtype_has_amx_kernels`` in
#: ``ggml/src/ggml-cpu/amx/common.h``: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS tensors)
AMX_FORMATS = frozenset({"Q4_0", "Q4_1", "Q8_0", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_XS"})


__all__ = ["AMX_FORMATS", "SGEMM_FORMATS"]
