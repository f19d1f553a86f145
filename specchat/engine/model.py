"""One loaded model on llama-cpp-python's low-level API.

What a speculative loop needs and nothing more (see llama.cpp ``examples/speculative-simple``):
tokenize, piece bytes, batched decode with logits on chosen rows only, the logits of those rows, and
KV trimming with ``llama_memory_seq_rm``. The model tracks :attr:`Model.tokens`, the exact token ids its
KV cache holds at positions ``0..len(tokens)-1`` of sequence 0, so callers can reuse the common prefix.

``llama_decode`` releases the GIL (ctypes), so a worker thread running this keeps a UI live.

Loading runs under :func:`specchat.signals.deferred`: a Ctrl-C (or SIGTERM/SIGHUP) that arrives while llama.cpp
loads makes the progress callback ask llama.cpp to stop, and is raised once the load call has returned, never
inside llama.cpp's callbacks, where ctypes would swallow it. llama.cpp's log is silent unless ``--verbose``
(:mod:`specchat.engine.llamalog`).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from specchat import signals
from specchat.engine import gguf as gguf_check
from specchat.engine import llamalog
from specchat.errors import ModelFileError, UserError

llamalog.install()
_BACKEND_READY = False

#: ``llama_get_logits`` returning the address as an int (llama-cpp-python's binding returns a ctypes pointer). With
#: it :meth:`Model.decode` reads the logits through an array made once per (address, rows): building one per
#: decode with ``np.ctypeslib.as_array`` (a ctypes array type, its buffer format parsed) and reading the binding's
#: pointer cost ~80 us of a plain round's ~190 us outside llama_decode, against ~20 us for this call, caches cold
#: from the decode (AMD EPYC Zen 4, bundled Q4_1, ``--threads 1``, 2026-12-07).
_logits_address = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
    ctypes.cast(llama_cpp.llama_get_logits, ctypes.c_void_p).value
)


def ensure_backend() -> None:
    """Initialise llama.cpp's backend once per process (``llama_backend_init``) before any model is loaded."""
    global _BACKEND_READY
    if not _BACKEND_READY:
        llama_cpp.llama_backend_init()
        _BACKEND_READY = True


def system_info() -> str:
    """llama.cpp's ``llama_print_system_info()``: the CPU features this build uses (``AVX512 = 1 | AMX_INT8 = 1 | ...``)."""
    ensure_backend()
    return llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")


#: What ``flash_attn = "off"`` gains and costs on this CPU. llama.cpp's CPU flash-attention kernel
#: (``ggml_compute_forward_flash_attn_ext``) walks the KV cache once per query row, so its cost grows with the
#: context and with the rows of a verify batch, where the unfused path does two matrix products. Measured here
#: (llama-bench, bundled Q4_1, 1 thread, --repack 0, tokens/s on vs off): one row at depth 0 50.4 vs 49.4, at
#: depth 64 49.2 vs 46.7, at depth 2048 14.1 vs 27.6; a 17-row batch at depth 0 145 vs 132, at depth 64 118
#: vs 135, at depth 2048 18.2 vs 83.7. The cost: the unfused path multiplies a batch's rows with other kernels
#: than a single row's, so a verified reply can differ from plain decoding where two tokens' logits nearly tie
#: (the bundled model's self-draft test diverges at token 46 of 48 with it off; with it on, Q4_1 rows are
#: computed alike in any batch and the reply is identical). So specchat keeps llama.cpp's default (auto: on)
#: and ``specchat models tune`` measures both and says when off pays.
FLASH_ATTN_MEASURED = (
    "off: 2x faster single rows, 4.6x faster 17-row verifies at depth 2048 on a Xeon with AMX; 1.11x and 1.66x at "
    "depth 2000 on an AMD EPYC Zen 4, where on is 3-6 % faster for a single row below ~800 (Q4_1, 1 thread)"
)


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
    (:attr:`Model.row_by_row` relies on exactly that). Upstream: ggml-org/llama.cpp#20824
    (closed stale, unfixed); stanfordnlp/dspy#10079 hit it on Sapphire Rapids CI runners. The extra buffer
    types are all or nothing (``llama_model_params.use_extra_bufts``), so on such a CPU the repacked
    Q4_0/Q4_K layouts go too; F16 and Q8_0 keep their batched (llamafile sgemm) kernels, which use no extra
    buffer.
    """
    return "AMX_INT8 = 1" not in system_info()


class DecodeError(RuntimeError):
    """llama_decode failed (no KV slot, aborted, invalid batch)."""


class ModelClosedError(RuntimeError):
    """A model was used after :meth:`Model.close` freed it (a programming error, said in Python: never a segfault)."""


class Model:
    """A GGUF model with one context, one sequence (id 0), and a reusable batch.

    ``n_batch`` must be at least K_max + 1 so a whole verify batch fits in one decode.
    Logits are requested per row (``batch.logits[i]``), never for all rows: no n_ctx x n_vocab buffer.

    ``threads`` decode single rows and ``threads_batch`` (default: ``threads``) decode batches of several
    rows (llama.cpp's ``n_threads`` / ``n_threads_batch``).

    ``repack``: put the weights in llama.cpp's extra CPU buffer types (AMX, repacked layouts; llama.cpp's
    ``--repack``); None = wherever that is safe (:func:`extra_buffer_types_safe`). Asked for on a CPU where
    multi-row batches of those kernels crash, every batch is decoded one row at a time
    (:attr:`row_by_row`): plain decoding gets the fast one-row kernels, and a verify batch of K+1 rows
    costs K+1 decodes, which the cost model measures like any other v(K).

    ``flash_attn``: llama.cpp's fused flash-attention kernel (its ``--flash-attn``, ``flash_attn_type``);
    None = llama.cpp's choice (``auto``: on for the CPU), the default; :data:`FLASH_ATTN_MEASURED` says what
    turning it off gains and costs here.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        threads: int = 2,
        threads_batch: int | None = None,
        repack: bool | None = None,
        flash_attn: bool | None = None,
        progress: Callable[[float], None] | None = None,
    ) -> None:
        self.path = Path(path)
        parsed = gguf_check.validate_gguf(self.path)  # exists, magic, version, not truncated: before llama.cpp sees it
        self.model = None
        self.ctx = None
        self._batch = None
        self._eog_cache: dict[int, bool] = {}  # is_eog, per token id
        #: llama.cpp's logits buffer as arrays by rows, and the address they view (:meth:`_logits`)
        self._logits_views: dict[int, np.ndarray] = {}
        self._logits_at: int | None = None
        try:
            with signals.deferred() as interrupted:  # a signal is raised when the with ends, not in a callback
                self._load(parsed, n_ctx, n_batch, threads, threads_batch, repack, flash_attn, progress, interrupted)
        except BaseException:
            self.close()
            raise

    def _load(
        self,
        parsed: gguf_check.GGUFFile,
        n_ctx: int,
        n_batch: int,
        threads: int,
        threads_batch: int | None,
        repack: bool | None,
        flash_attn: bool | None,
        progress: Callable[[float], None] | None,
        interrupted: Callable[[], bool],
    ) -> None:
        ensure_backend()
        self.name = self.path.name
        #: the weight format (GGUF ``general.file_type``), e.g. "Q4_1", "Q8_0", "F16"
        self.weights = gguf_check.info_from_parsed(parsed).quantization
        self.threads = threads
        self.threads_batch = threads_batch or threads
        safe = extra_buffer_types_safe()
        #: weights in llama.cpp's extra buffer types (AMX / repacked layouts)
        self.repack = safe if repack is None else bool(repack)
        #: every decode is split into one-row batches: the extra buffer types are on where their multi-row
        #: kernels crash (see :func:`extra_buffer_types_safe`)
        self.row_by_row = self.repack and not safe
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.use_extra_bufts = self.repack

        def _on_progress(fraction: float, _user: ctypes.c_void_p) -> bool:
            if progress is not None:
                try:
                    progress(float(fraction))
                except Exception:  # a UI callback must never abort loading
                    pass
            return not interrupted()  # False makes llama.cpp stop loading (and return NULL)

        self._progress_cb = llama_cpp.llama_progress_callback(_on_progress)
        mparams.progress_callback = self._progress_cb
        self.model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), mparams)
        if interrupted():
            return  # signals.deferred raises the interrupt; __init__ frees what was loaded
        if not self.model:
            raise ModelFileError(f"llama.cpp could not load {self.path}: the file is GGUF but its architecture or tensors are not supported; try another file")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self.model))
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = 1
        cparams.n_threads = threads
        cparams.n_threads_batch = self.threads_batch
        cparams.no_perf = True
        cparams.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn is None
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        #: the flash-attention setting the context was made with: "on", "off" or "auto" (llama.cpp's choice)
        self.flash_attn = "auto" if flash_attn is None else ("on" if flash_attn else "off")
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise UserError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}: lower n_ctx")
        self.n_ctx = int(llama_cpp.llama_n_ctx(self.ctx))
        self.n_batch = n_batch
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        for i in range(n_batch):
            self._batch.n_seq_id[i] = 1
            self._batch.seq_id[i][0] = 0
        self.tokens: list[int] = []
        self._piece_cache: dict[int, bytes] = {}
        self.decode_ms_total = 0.0  # time spent inside llama_decode, for overhead accounting
        self.is_recurrent = bool(llama_cpp.llama_model_is_recurrent(self.model)) or bool(
            llama_cpp.llama_model_is_hybrid(self.model)
        )
        self.bos = int(llama_cpp.llama_vocab_bos(self.vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(self.vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    # -- metadata -------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    @property
    def chat_template(self) -> str | None:
        tmpl = llama_cpp.llama_model_chat_template(self.model, None)
        return tmpl.decode("utf-8", errors="replace") if tmpl else None

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text of a token (as used by llama.cpp's compatibility rule 5)."""
        raw = llama_cpp.llama_vocab_get_text(self._live_vocab(), token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    # -- text <-> tokens ----------------------------------------------------------------------------
    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        n_max = len(data) + 8
        arr = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self._live_vocab(), data, len(data), arr, n_max, add_bos, special)
        if n < 0:
            arr = (llama_cpp.llama_token * (-n))()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), arr, -n, add_bos, special)
        return list(arr[:n])

    def piece(self, token: int) -> bytes:
        """Raw bytes of a token for display (control tokens give b"").

        ``llama_token_to_piece`` returns the number of bytes written, or minus the size it needs.
        """
        cached = self._piece_cache.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._live_vocab(), token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        out = buf.raw[:n]
        self._piece_cache[token] = out
        return out

    def is_eog(self, token: int) -> bool:
        """The token ends a generation (llama.cpp's EOG set), memoised per id: the n-gram drafter asks it of every
        token of every continuation it looks up (its turn boundary), a ctypes call each time otherwise."""
        known = self._eog_cache.get(token)
        if known is None:
            known = self._eog_cache[token] = bool(llama_cpp.llama_vocab_is_eog(self._live_vocab(), token))
        return known

    def _live_vocab(self) -> Any:
        """The vocabulary, or :class:`ModelClosedError` once the model is freed: a bound method of a closed model (a
        drafter's turn boundary outlives a target swapped under it) must fail in Python, not read freed memory
        (a segfault, seen once in a clean-clone test run on an AMD EPYC Zen 5, when the freed pages were reused)."""
        vocab = getattr(self, "vocab", None)
        if vocab is None or self.model is None:
            raise ModelClosedError(f"{self.path.name}: the model is closed")
        return vocab

    # -- decoding -----------------------------------------------------------------------------------
    def decode(self, tokens: Sequence[int], *, logits_last: int = 1, argmax: bool = False) -> np.ndarray | None:
        """Append ``tokens`` to the KV at positions ``len(self.tokens)...`` and decode them.

        Logits are requested for the last ``logits_last`` rows only (0 = none). Returns those rows as a
        ``(logits_last, n_vocab)`` float32 array (a copy: the next decode overwrites llama.cpp's
        buffer), or None. Inputs longer than ``n_batch`` are decoded in chunks.

        ``argmax``: each row's argmax instead (``(logits_last,)`` int64, the first of equal maxima), read in
        llama.cpp's buffer: all a greedy verify or draft needs. Copying the rows and reading the copy cost a decode
        and its accept 81 µs outside ``llama_decode`` for one row of the bundled SmolLM2 (54 µs read in place) and
        328 µs for 14 rows (146) - medians of 200, alternating in one process, AMD EPYC Zen 4, ``--threads 1``.
        """
        n = len(tokens)
        if n == 0:
            return None
        if self.ctx is None:
            raise ModelClosedError(f"{self.path.name}: the model is closed")
        if logits_last > min(n, self.n_batch):
            raise ValueError("logits requested for more rows than one batch holds")
        if len(self.tokens) + n > self.n_ctx:
            raise DecodeError(f"context full: {len(self.tokens)} + {n} tokens > n_ctx {self.n_ctx}")
        if self.row_by_row and n > 1:
            return self._decode_row_by_row(tokens, logits_last, argmax)
        out = None
        start = 0
        batch = self._batch
        while start < n:
            chunk = tokens[start : start + self.n_batch]
            m = len(chunk)
            first_logit_row = n - logits_last - start  # row index within this chunk
            pos0 = len(self.tokens)
            for i, tok in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = pos0 + i
                batch.logits[i] = 1 if i >= first_logit_row else 0
            batch.n_tokens = m
            t0 = time.perf_counter()
            rc = llama_cpp.llama_decode(self.ctx, batch)
            self.decode_ms_total += (time.perf_counter() - t0) * 1000.0
            if rc != 0:
                # a failed decode may leave partial rows: drop everything past what we know
                llama_cpp.llama_memory_seq_rm(self.mem, 0, len(self.tokens), -1)
                raise DecodeError(f"llama_decode returned {rc} for {m} tokens at position {pos0}")
            self.tokens.extend(chunk)
            start += m
            if start >= n and logits_last > 0:
                rows = self._logits(logits_last)
                out = rows.argmax(axis=1) if argmax else rows.copy()
        return out

    def _logits(self, rows: int) -> np.ndarray:
        """The last decode's ``rows`` logits rows in llama.cpp's buffer, not copied (read before the next decode): an
        array kept while the buffer stays at its address (llama.cpp moves it when a decode needs more output rows
        than it holds)."""
        addr = _logits_address(self.ctx)
        if addr != self._logits_at:
            self._logits_views.clear()
            self._logits_at = addr
        view = self._logits_views.get(rows)
        if view is None:
            ptr = ctypes.cast(addr, ctypes.POINTER(ctypes.c_float))
            view = self._logits_views[rows] = np.ctypeslib.as_array(ptr, shape=(rows, self.n_vocab))
        return view

    def _decode_row_by_row(self, tokens: Sequence[int], logits_last: int, argmax: bool = False) -> np.ndarray | None:
        """:meth:`decode` as one one-row batch per token (:attr:`row_by_row`): no multi-row batch ever reaches
        llama.cpp. The logits rows (or their argmax) are gathered into the same array as one decode returns."""
        n = len(tokens)
        shape = (logits_last,) if argmax else (logits_last, self.n_vocab)
        out = np.empty(shape, dtype=np.int64 if argmax else np.float32) if logits_last > 0 else None
        first = n - logits_last
        for i, tok in enumerate(tokens):
            row = self.decode([tok], logits_last=1 if i >= first else 0, argmax=argmax)
            if out is not None and row is not None:
                out[i - first] = row[0]
        return out

    def trim(self, n_keep: int) -> None:
        """Remove KV positions ``n_keep..`` (``llama_memory_seq_rm(mem, 0, n_keep, -1)``)."""
        if n_keep >= len(self.tokens):
            return
        ok = llama_cpp.llama_memory_seq_rm(self.mem, 0, n_keep, -1)
        if not ok:
            raise UserError(
                f"{self.name}: this model's KV cache cannot be partly removed (recurrent/hybrid); "
                "turn speculation off (--draft none) to use it"
            )
        del self.tokens[n_keep:]

    def time_scratch_decode(self, tokens: Sequence[int]) -> float:
        """ms of one decode of ``tokens`` after the KV (logits on every row, as a verify batch asks),
        removed again so the KV is unchanged; NaN when they do not fit in the context. The engine's cost
        calibrations (v(K), the draft cost) are made of these."""
        n = len(self.tokens)
        if n + len(tokens) > self.n_ctx:
            return float("nan")
        t0 = time.perf_counter()
        self.decode(tokens, logits_last=len(tokens))
        ms = (time.perf_counter() - t0) * 1000.0
        self.trim(n)
        return ms

    def set_threads(self, threads: int, threads_batch: int | None = None) -> None:
        """Decode single rows with ``threads`` and batches with ``threads_batch`` (default ``threads``) from now on
        (``llama_set_n_threads``)."""
        self.threads, self.threads_batch = threads, threads_batch or threads
        llama_cpp.llama_set_n_threads(self.ctx, self.threads, self.threads_batch)

    def sync_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest common prefix of the KV and ``tokens``; return its length."""
        cur = self.tokens
        n = min(len(cur), len(tokens))
        i = 0
        # compare in chunks: the usual case is a long identical prefix
        while i < n and cur[i] == tokens[i]:
            i += 1
        if i < len(cur):
            if i == 0 or self.is_recurrent:  # recurrent state cannot be cut: start over
                i = 0
                llama_cpp.llama_memory_clear(self.mem, True)
                self.tokens.clear()
            else:
                self.trim(i)
        return i

    def kv_pos_max(self) -> int:
        """Highest position in the KV of sequence 0 (-1 when empty), straight from llama.cpp."""
        return int(llama_cpp.llama_memory_seq_pos_max(self.mem, 0))

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)
        self.tokens.clear()

    def close(self) -> None:
        with signals.deferred():  # freeing logs through the Python log callback too
            self._free()

    def _free(self) -> None:
        if getattr(self, "_batch", None) is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "ctx", None):
            self._logits_views, self._logits_at = {}, None
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            llama_cpp.llama_model_free(self.model)
            self.model = None
        self.vocab = None  # owned by the model: every call that reads it checks (_live_vocab)

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass
