"""Write demo targets and drafts from one GGUF: other quantisations, and layer-skip self-drafts.

Two transformations, combinable (layer-skip first, then quantise):

* **Quantise** through llama.cpp's own quantiser, ``llama_cpp.llama_model_quantize`` (the library behind the
  ``llama-quantize`` tool), with ``allow_requantize`` so an already quantised file can be converted again.
  F16 from the bundled Q4_1 gives a target whose weights are the Q4_1 weights dequantised: a draft/target pair
  with near-100 % acceptance whose cost ratio is set by the formats alone.
* **Layer-skip** (a self-draft in the spirit of LayerSkip, Elhoushi et al. 2024, and "Draft & Verify",
  Zhang et al. 2023: a draft made by skipping layers of the target itself). Written with the ``gguf`` package:
  every metadata key is copied (``<arch>.block_count`` set to the kept count, per-layer arrays sliced),
  the kept blocks' tensors are renumbered ``blk.0..`` contiguously, and every non-block tensor (embeddings,
  output norm, output) is copied byte for byte in its original ggml type. The residual stream makes a
  transformer with missing middle blocks still produce text, but a different one: low acceptance.

Every result is written to a temporary file next to the destination, loaded by llama.cpp and run on one
token (its block count must be the intended one), and only then renamed into place.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specchat.engine.gguf import read_gguf_info
from specchat.errors import ModelFileError, UserError

# general.file_type names that llama_model_quantize can write (llama_ftype, LLAMA_FTYPE_MOSTLY_<NAME>)
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.(.+)$")


class DeriveError(UserError):
    """A derive request that cannot be carried out (bad layer list, unknown quantisation, existing output)."""


@dataclass(frozen=True)
class Derived:
    """What ``derive`` wrote."""

    path: Path
    size: int
    block_count: int
    quantization: str
    source: Path


# ---------------------------------------------------------------------------------------------- layer lists


def parse_layers(spec: str, block_count: int) -> list[int]:
    """``"0-5,24-29"`` -> ``[0, 1, ..., 5, 24, ..., 29]`` (sorted, unique), checked against ``block_count``."""
    layers: set[int] = set()
    text = spec.replace(" ", "")
    if not text:
        raise DeriveError("--keep-layers is empty; give block ranges such as 0-5,24-29")
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise DeriveError(f"--keep-layers: {part!r} is not a block number or range; write e.g. 0-5,24-29")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise DeriveError(f"--keep-layers: range {part!r} runs backwards; write it low-high")
        if hi >= block_count:
            raise DeriveError(
                f"--keep-layers: block {hi} does not exist; this model has blocks 0-{block_count - 1}"
            )
        layers.update(range(lo, hi + 1))
    if len(layers) == block_count:
        raise DeriveError(f"--keep-layers keeps all {block_count} blocks, so nothing is skipped; leave some out")
    return sorted(layers)


def format_layers(layers: list[int], sep: str = ",") -> str:
    """``[0..5, 24..29]`` -> ``"0-5,24-29"`` (the inverse of :func:`parse_layers`)."""
    out: list[str] = []
    start = prev = None
    for n in layers:
        if start is None:
            start = prev = n
        elif n == prev + 1:
            prev = n
        else:
            out.append(f"{start}-{prev}" if prev != start else str(start))
            start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return sep.join(out)


# ------------------------------------------------------------------------------------------------- quantise


def quant_names() -> list[str]:
    """Quantisation names llama.cpp can write here (``F16``, ``Q8_0``, ``Q4_K_M``, ...)."""
    import llama_cpp

    names = [n.removeprefix("LLAMA_FTYPE_MOSTLY_") for n in dir(llama_cpp) if n.startswith("LLAMA_FTYPE_MOSTLY_")]
    return ["F32", *sorted(names)]


def ftype_for(quant: str) -> int:
    """The ``llama_ftype`` value of a quantisation name (case-insensitive)."""
    import llama_cpp

    name = quant.strip().upper()
    attr = "LLAMA_FTYPE_ALL_F32" if name == "F32" else f"LLAMA_FTYPE_MOSTLY_{name}"
    value = getattr(llama_cpp, attr, None)
    if value is None:
        raise DeriveError(f"unknown quantisation {quant!r}; choose one of: {', '.join(quant_names())}")
    return int(value)


def quantize(src: Path, dst: Path, quant: str, threads: int) -> None:
    """``llama_model_quantize(src, dst, params)`` with ``ftype`` from :func:`ftype_for`, requantising allowed."""
    import llama_cpp

    _quiet_llama()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype_for(quant)
    params.allow_requantize = True
    params.nthread = max(1, int(threads))
    with _captured_llama_output() as log:
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        lines = [line.strip() for line in log.text().splitlines() if line.strip()]
        # llama.cpp ends with "llama_model_quantize: failed to quantize: <reason>"; else take an error line
        reason = next((ln.split("failed to quantize:", 1)[1].strip() for ln in reversed(lines)
                       if "failed to quantize:" in ln),
                      next((ln for ln in reversed(lines) if "error" in ln.lower()), ""))
        raise ModelFileError(
            f"llama.cpp could not quantise {src} to {quant.upper()} ({reason or f'code {rc}'}); "
            "choose another --quant (e.g. Q8_0, Q4_K_M or F16) or check that the disk has room"
        )


class _Captured:
    """llama.cpp's log messages (through its log callback) and whatever it printed on fd 2 directly."""

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.messages: list[str] = []

    def text(self) -> str:
        self.file.seek(0)
        raw = self.file.read()[-65536:].decode("utf-8", errors="replace")
        return raw + "".join(self.messages)


@contextlib.contextmanager
def _captured_llama_output() -> Iterator[_Captured]:
    """Collect llama.cpp's output for the duration of the block instead of showing it.

    The quantiser prints per-tensor notes and fallback warnings partly through the log callback
    (``llama_log_set``) and partly with plain ``fprintf(stderr)``: the callback is swapped for a collecting
    one, and file descriptor 2 is redirected into a temporary file. Both are restored afterwards
    (specchat's callback, :func:`specchat.engine.llamalog.install`). A Ctrl-C meanwhile is raised after the
    block (:func:`specchat.signals.deferred`), not inside the collecting callback.
    """
    import llama_cpp

    from specchat import signals
    from specchat.engine import llamalog

    captured = _Captured()

    @llama_cpp.llama_log_callback
    def collect(_level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        captured.messages.append(text.decode("utf-8", errors="replace"))

    sys.stderr.flush()
    saved = os.dup(2)
    with signals.deferred():
        llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
        try:
            os.dup2(captured.file.fileno(), 2)
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            llamalog.install()


# ----------------------------------------------------------------------------------------------- layer-skip


def layer_skip(src: Path, dst: Path, keep: list[int], *, note: str = "") -> None:
    """Write ``src`` with only the blocks in ``keep`` (renumbered 0..len(keep)-1) to ``dst``.

    Metadata is copied with its original value types (strings as raw bytes); tensors keep their ggml type and
    bytes. ``<arch>.block_count`` becomes ``len(keep)``; ``<arch>.*`` arrays with one entry per block (per-layer
    head counts, sliding-window flags, ...) are sliced to the kept blocks.
    """
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        raise ModelFileError(f"{src} has no general.architecture; cannot tell which key holds its block count")
    arch = str(arch_field.contents())
    bc_key = f"{arch}.block_count"
    if bc_key not in reader.fields:
        raise ModelFileError(f"{src} has no {bc_key}; layer-skip needs a model made of numbered blocks")
    n_old = int(reader.fields[bc_key].contents())
    if not keep or keep[-1] >= n_old:
        raise DeriveError(f"--keep-layers must name blocks 0-{n_old - 1} of {src.name}")
    renumber = {old: new for new, old in enumerate(keep)}
    spec = format_layers(keep)

    writer = gguf.GGUFWriter(str(dst), arch=arch, endianess=reader.endianess)
    VT = gguf.GGUFValueType
    for field in reader.fields.values():
        key = field.name
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # header fields are written by the writer itself
        vtype = VT(field.types[0])
        sub = VT(field.types[-1]) if vtype == VT.ARRAY else None
        if vtype == VT.STRING:
            value: object = bytes(field.parts[field.data[0]])
        elif vtype == VT.ARRAY and sub == VT.STRING:
            value = [bytes(field.parts[i]) for i in field.data]
        elif vtype == VT.ARRAY and sub == VT.ARRAY:
            raise ModelFileError(f"{src}: nested array metadata ({key}) cannot be copied by this gguf version")
        else:
            value = field.contents()
        if key == bc_key:
            value = len(keep)
        elif key == "general.alignment":
            writer.data_alignment = int(value)  # type: ignore[arg-type]
        elif key == "general.name" and isinstance(value, bytes):
            value = value + f" (layer-skip {spec})".encode()
        elif vtype == VT.ARRAY and key.startswith(f"{arch}.") and isinstance(value, list) and len(value) == n_old:
            value = [value[i] for i in keep]
        if vtype == VT.ARRAY and not value:
            continue  # the writer cannot write empty arrays; an empty array carries no information
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.add_string("specchat.derived.source", src.name)
    writer.add_string("specchat.derived.keep_layers", spec + (f" {note}" if note else ""))

    kept_blocks: set[int] = set()
    for t in reader.tensors:
        name = t.name
        m = _BLOCK_RE.match(name)
        if m:
            old = int(m.group(1))
            if old not in renumber:
                continue
            kept_blocks.add(old)
            name = f"blk.{renumber[old]}.{m.group(2)}"
        writer.add_tensor(name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    if kept_blocks != set(keep):
        missing = sorted(set(keep) - kept_blocks)
        writer.close()
        raise ModelFileError(f"{src} has no tensors for blocks {format_layers(missing)}; it is not a block model")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()


# ------------------------------------------------------------------------------------------- verification


def _quiet_llama() -> None:
    """specchat's llama.cpp log callback (silent unless ``--verbose``; :mod:`specchat.engine.llamalog`)."""
    from specchat.engine import llamalog

    llamalog.install()


def verify_loads(path: Path, expect_blocks: int | None = None, threads: int = 1) -> int:
    """Load ``path`` in llama.cpp, decode one token, and return its block count (``llama_model_n_layer``).

    Raises :class:`ModelFileError` if llama.cpp refuses the file, the logits are not finite, or the block
    count differs from ``expect_blocks``. A Ctrl-C meanwhile is raised once llama.cpp has returned
    (:func:`specchat.signals.deferred`).
    """
    from specchat import signals

    with signals.deferred():
        return _verify_loads(path, expect_blocks, threads)


def _verify_loads(path: Path, expect_blocks: int | None, threads: int) -> int:
    import llama_cpp
    import numpy as np

    from specchat.engine.model import ensure_backend

    _quiet_llama()
    ensure_backend()
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    if not model:
        raise ModelFileError(f"llama.cpp cannot load the derived file {path}; it was not kept")
    ctx = None
    batch = None
    try:
        n_layer = int(llama_cpp.llama_model_n_layer(model))
        if expect_blocks is not None and n_layer != expect_blocks:
            raise ModelFileError(f"{path} loads with {n_layer} blocks, expected {expect_blocks}; it was not kept")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = 32
        cparams.n_batch = 32
        cparams.n_threads = cparams.n_threads_batch = max(1, threads)
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            raise ModelFileError(f"llama.cpp cannot create a context for {path}; it was not kept")
        vocab = llama_cpp.llama_model_get_vocab(model)
        token = int(llama_cpp.llama_vocab_bos(vocab))
        if token < 0:
            token = 0
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        batch.n_tokens = 1
        batch.token[0] = token
        batch.pos[0] = 0
        batch.n_seq_id[0] = 1
        batch.seq_id[0][0] = 0
        batch.logits[0] = True
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise ModelFileError(f"llama.cpp cannot run {path} (decode failed); it was not kept")
        n_vocab = int(llama_cpp.llama_vocab_n_tokens(vocab))
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, 0), shape=(n_vocab,))
        if not np.isfinite(logits).all():
            raise ModelFileError(f"{path} produces non-finite logits; it was not kept")
        return n_layer
    finally:
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        if ctx:
            llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


# ---------------------------------------------------------------------------------------------- derive


def _chmod_like_new_file(path: Path) -> None:
    """mkstemp creates 0600 files; give the result the mode a plain open() would (0666 minus the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


_QUANT_SUFFIX = re.compile(r"[.\-_](F32|F16|BF16|Q\d(_[A-Z0-9]+)*|IQ\d(_[A-Z0-9]+)*|TQ\d_\d)$", re.IGNORECASE)


def default_name(src: Path, quant: str | None, keep: list[int] | None) -> str:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` + F16 -> ``SmolLM2-135M-Instruct.F16.gguf``;
    + keep 0-5,24-29 -> ``SmolLM2-135M-Instruct.Q4_1.layerskip-0-5_24-29.gguf``."""
    stem = src.name.removesuffix(".gguf")
    if quant:
        stem = _QUANT_SUFFIX.sub("", stem) + f".{quant.upper()}"
    if keep:
        stem += f".layerskip-{format_layers(keep, sep='_')}"
    return stem + ".gguf"


def derive(
    src: Path,
    out: Path,
    *,
    quant: str | None = None,
    keep_layers: str | None = None,
    threads: int = 1,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Derived:
    """Write ``out`` from ``src`` (layer-skip, then quantise), verify it loads, and return what it is."""
    if not quant and not keep_layers:
        raise DeriveError("nothing to derive: give --quant NAME and/or --keep-layers RANGES (or --demo)")
    info = read_gguf_info(src)  # exists, GGUF, not truncated
    if quant:
        ftype_for(quant)  # reject unknown names before any work
    keep = parse_layers(keep_layers, info.block_count or 0) if keep_layers else None
    if keep_layers and not info.block_count:
        raise DeriveError(f"{src} does not say how many blocks it has; layer-skip needs <arch>.block_count")
    out = Path(out)
    if out.resolve() == Path(src).resolve():
        raise DeriveError(f"the output {out} is the input file; give another name with -o")
    if out.exists() and not force:
        raise DeriveError(f"{out} already exists; pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _msg: None)
    expect_blocks = len(keep) if keep else info.block_count

    tmp_files: list[Path] = []

    def tmp(suffix: str) -> Path:
        fd, name = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=suffix, dir=out.parent)
        os.close(fd)
        p = Path(name)
        tmp_files.append(p)
        return p

    try:
        current = Path(src)
        if keep:
            skipped = tmp(".skip.gguf")
            say(f"layer-skip: keeping blocks {format_layers(keep)} of {info.block_count}")
            layer_skip(current, skipped, keep)
            current = skipped
        if quant:
            quantised = tmp(".quant.gguf")
            say(f"quantising to {quant.upper()} with llama.cpp")
            quantize(current, quantised, quant, threads)
            current = quantised
        say("verifying: load in llama.cpp and decode one token")
        n_layer = verify_loads(current, expect_blocks, threads)
        result_info = read_gguf_info(current)
        _chmod_like_new_file(current)
        os.replace(current, out)
    finally:
        for p in tmp_files:
            p.unlink(missing_ok=True)
    return Derived(
        path=out,
        size=out.stat().st_size,
        block_count=n_layer,
        quantization=result_info.quantization,
        source=Path(src),
    )


def derive_demo(models_dir: Path, *, threads: int = 1, force: bool = False,
                progress: Callable[[str], None] | None = None) -> list[tuple[Path, Derived | None]]:
    """Write the files of every local preset (``smollm2-f16-q41``, ``smollm2-q8-ngram``, ``smollm2-layerskip``) into
    ``models_dir``.

    A file that already exists and validates is kept (returned with ``None``) unless ``force``.
    """
    from specchat.models.presets import PRESETS, DerivedFile
    from specchat.models.bundled import BUNDLED, bundled_model_path
    from specchat.models.registry import resolve_model

    done: list[tuple[Path, Derived | None]] = []
    seen: set[str] = set()
    for preset in PRESETS.values():
        for _role, file in preset.files():
            if not isinstance(file, DerivedFile) or file.filename in seen:
                continue
            seen.add(file.filename)
            out = models_dir / file.filename
            if out.exists() and not force:
                try:
                    read_gguf_info(out)
                    done.append((out, None))
                    continue
                except ModelFileError:
                    pass  # broken leftover: derive it again
            src = bundled_model_path() if file.source == BUNDLED else resolve_model(file.source, models_dir.parent)
            done.append(
                (out, derive(src, out, quant=file.quant, keep_layers=file.keep_layers, threads=threads,
                             force=True, progress=progress))
            )
    return done
