"""Which matrix kernels llama.cpp's CPU backend runs for a weight format on this CPU, and what that means
for where the weights go (``use_extra_bufts``, llama.cpp's ``--repack``).

Two facts decide the cost of a verify batch (README, "The lesson"):

* batched kernels: llamafile's tinyBLAS (``ggml/src/ggml-cpu/llamafile/sgemm.cpp``, ggml-org/llama.cpp#6414)
  multiplies many rows at once for :data:`SGEMM_FORMATS`; other formats (Q4_1, the K-quants) run one dot
  product per row and weight block, unless an extra buffer type repacks them;
* extra buffer types: with ``use_extra_bufts`` llama.cpp repacks weights into AMX tiles
  (``ggml/src/ggml-cpu/amx``, formats :data:`AMX_FORMATS`) or interleaved layouts (``CPU_REPACK``). On a CPU
  where this build uses AMX, multi-row batches of those kernels crash here (:func:`extra_buffer_types_safe`);
  one-row batches run their AVX512-VNNI path, ~3x faster than the plain kernels on this machine.

Nothing here loads a model; :func:`system_info` initialises llama.cpp's backend once.
"""

from __future__ import annotations

_BACKEND_READY = False

#: weight formats (GGUF file types) with a batched x86 matrix kernel without extra buffers: llamafile sgemm
SGEMM_FORMATS = frozenset({"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "IQ4_NL"})
#: file types whose weight tensors llama.cpp repacks into AMX tiles (``qtype_has_amx_kernels`` in
#: ``ggml/src/ggml-cpu/amx/common.h``: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS tensors)
AMX_FORMATS = frozenset({"Q4_0", "Q4_1", "Q8_0", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_XS"})


def ensure_backend() -> None:
    """Initialise llama.cpp's backend once per process (``llama_backend_init``) before any model is loaded."""
    global _BACKEND_READY
    if not _BACKEND_READY:
        import llama_cpp

        llama_cpp.llama_backend_init()
        _BACKEND_READY = True


def system_info() -> str:
    """llama.cpp's ``llama_print_system_info()``: the CPU features this build uses (``AVX512 = 1 | AMX_INT8 = 1 | ...``)."""
    import llama_cpp

    ensure_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")


def extra_buffer_types_safe() -> bool:
    """Whether weights may go into llama.cpp's extra CPU buffer types (AMX, repacked layouts) *and* be decoded
    in batches of several rows.

    Not on a CPU where this build uses Intel AMX: llama.cpp's AMX matrix multiply segfaults in
    ``ggml_backend_amx_mul_mat`` on the first batch of more than one row (reproduced here on a Xeon with
    ``AMX_INT8 = 1`` in the system info, for every AMX format tried: Q4_1, Q4_0, Q8_0, at 2, 3 and 17 rows;
    the high-level ``llama_cpp.Llama`` crashes the same way). Under gdb the faulting instruction is
    ``ldtilecfg``, the tile-configuration load of the multi-row AMX path: the CPU advertises AMX but loading
    a tile configuration faults in this (virtualised) environment. One-row batches take the AVX512-VNNI
    path of the same buffer and work, with logits as close to the F16 re-encoding's as the plain kernels'
    (:attr:`specchat.engine.model.Model.row_by_row` relies on exactly that). Upstream: ggml-org/llama.cpp#20824
    (closed stale, unfixed); stanfordnlp/dspy#10079 hit it on Sapphire Rapids CI runners. The extra buffer
    types are all or nothing (``llama_model_params.use_extra_bufts``), so on such a CPU the repacked
    Q4_0/Q4_K layouts go too; F16 and Q8_0 keep their batched (llamafile sgemm) kernels, which use no extra
    buffer.
    """
    return "AMX_INT8 = 1" not in system_info()


def repack_for(setting: str, weights: str, speculates: bool) -> bool | None:
    """Whether to load a target with llama.cpp's extra buffer types, for the ``repack`` setting.

    ``"on"``/``"off"`` say so. ``"auto"`` (None: llama.cpp's default, on) wherever multi-row batches of the
    extra buffer types are safe; on a CPU where they crash (:func:`extra_buffer_types_safe`) the target
    then decodes one row at a time (:attr:`specchat.engine.model.Model.row_by_row`), which only pays when
    nothing is verified in batches and the format has the fast one-row AMX kernels: on for a session that
    does not speculate (``speculates`` False: ``draft = "none"``, or a fixed K = 0) with weights in
    :data:`AMX_FORMATS`, off otherwise. ``specchat models tune`` measures both for a file.
    """
    if setting == "on":
        return True
    if setting == "off":
        return False
    if extra_buffer_types_safe():
        return None
    return (not speculates) and weights.upper() in AMX_FORMATS


__all__ = ["AMX_FORMATS", "SGEMM_FORMATS", "ensure_backend", "extra_buffer_types_safe", "repack_for", "system_info"]
