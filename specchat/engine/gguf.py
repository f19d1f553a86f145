"""Open and validate a GGUF file before llama.cpp sees it.

llama.cpp reacts to a bad file with a C++ exception message on stderr and a ``ValueError`` from
llama-cpp-python that says little about *what* is wrong. A truncated download is the common case: the
header parses, but the tensor data stops early. This module reads the file's header, its key/value
metadata and its tensor-info table itself (the format is specified in ggml's ``docs/gguf.md``):

    magic "GGUF" | uint32 version | uint64 tensor_count | uint64 kv_count
    kv_count x   (string key, uint32 value_type, value)
    tensor_count x (string name, uint32 n_dims, uint64 dims[n_dims], uint32 ggml_type, uint64 offset)
    padding to general.alignment (default 32) | tensor data

Strings are ``uint64 length + UTF-8 bytes``; arrays are ``uint32 element_type, uint64 count, elements``;
everything is little-endian (big-endian GGUFs exist but are rare; they are refused with a clear message).
The file must then be at least ``data_offset + max(offset + nbytes)`` bytes long, where a tensor's byte
size follows from its ggml type's block size and bytes per block (``gguf.constants.GGML_QUANT_SIZES``).

Every failure raises :class:`specchat.errors.ModelFileError` with one line: the path, what is wrong, and
what to do. Parsing reads only the header region (about 2 MB for SmolLM2: the tokenizer tables), never the
weights, so ``specchat models list`` can describe models without loading llama.cpp.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

from specchat.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
KNOWN_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# GGUF value types (docs/gguf.md, enum gguf_type)
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)

_SCALAR_FORMATS: dict[int, str] = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}
_NUMPY_DTYPES: dict[int, str] = {
    UINT8: "<u1",
    INT8: "<i1",
    UINT16: "<u2",
    INT16: "<i2",
    UINT32: "<u4",
    INT32: "<i4",
    FLOAT32: "<f4",
    BOOL: "<u1",
    UINT64: "<u8",
    INT64: "<i8",
    FLOAT64: "<f8",
}
TYPE_NAMES = {
    UINT8: "uint8",
    INT8: "int8",
    UINT16: "uint16",
    INT16: "int16",
    UINT32: "uint32",
    INT32: "int32",
    FLOAT32: "float32",
    BOOL: "bool",
    STRING: "string",
    ARRAY: "array",
    UINT64: "uint64",
    INT64: "int64",
    FLOAT64: "float64",
}

_U64 = struct.Struct("<Q")
MAX_HEADER_BYTES = 1 << 30  # metadata beyond this is a corrupt length field, not a real tokenizer
_FIRST_READ = 4 << 20  # bytes read first; SmolLM2's header is 1.8 MB, Llama 3's about 8 MB
REDOWNLOAD = "re-download it (or re-create it) and try again"


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor-info table: name, shape (ggml order: fastest dim first), type, offset."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the start of the data section

    @property
    def type_name(self) -> str:
        try:
            return GGMLQuantizationType(self.ggml_type).name
        except ValueError:
            return f"type{self.ggml_type}"

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of data: (elements / block size) x bytes per block (ggml_nbytes for contiguous tensors)."""
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(self.ggml_type)]
        return self.n_elements // block_size * type_size


@dataclass
class GGUFFile:
    """The parsed header of a GGUF: metadata (with value types) and the tensor table. No weights."""

    path: Path
    file_size: int
    version: int
    metadata: dict[str, Any]
    types: dict[str, tuple[int, int | None]]  # key -> (value type, array element type or None)
    tensors: list[TensorInfo]
    alignment: int
    data_offset: int

    @property
    def expected_size(self) -> int:
        """The smallest file size that holds every tensor the table describes."""
        end = max((t.offset + t.nbytes for t in self.tensors), default=0)
        return self.data_offset + end


@dataclass(frozen=True)
class GGUFInfo:
    """What ``specchat models list`` shows about a GGUF, read without loading llama.cpp."""

    path: Path
    file_size: int
    version: int
    architecture: str | None
    name: str | None
    file_type: int | None  # general.file_type (llama_ftype); None when the file does not say
    quantization: str  # e.g. "Q4_1", from general.file_type, else the most common weight tensor type
    block_count: int | None
    context_length: int | None
    embedding_length: int | None
    vocab_size: int  # len(tokenizer.ggml.tokens), 0 when the file has no tokenizer
    tokenizer_model: str | None  # tokenizer.ggml.model, e.g. "gpt2" (BPE) or "llama" (SPM)
    has_chat_template: bool
    tensor_count: int
    n_params: int
    metadata: dict[str, Any] = field(repr=False)  # scalar (non-array) metadata values
    tokens: tuple[str, ...] = field(repr=False, default=())  # tokenizer.ggml.tokens, for compat checks


class _Truncated(Exception):
    """Raised inside the parser when the header runs past the end of the file."""

    def __init__(self, needed: int) -> None:
        super().__init__(needed)
        self.needed = needed


class _NeedMore(_Truncated):
    """Raised when the header runs past the prefix read so far, but not past the end of the file."""


class _Corrupt(Exception):
    """Raised inside the parser for a structurally impossible header (not a size problem)."""


class _Reader:
    """Little-endian cursor over a bytes prefix of the file, raising _Truncated when a read passes its end."""

    __slots__ = ("buf", "pos", "size")

    def __init__(self, buf: Any, size: int) -> None:
        self.buf = buf
        self.pos = 0
        self.size = size

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise _Truncated(self.pos + max(n, 0))

    def scalar(self, fmt: str, n: int) -> Any:
        self._need(n)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def u32(self) -> int:
        return self.scalar("<I", 4)

    def u64(self) -> int:
        return self.scalar("<Q", 8)

    def string(self) -> str:
        n = self.u64()
        self._need(n)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")

    def _strings(self, count: int) -> list[str]:
        """``count`` strings in a row (the tokenizer's 49k tokens and merges: kept tight, it is the hot loop)."""
        buf, pos, size = self.buf, self.pos, self.size
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > size:
                raise _Truncated(pos + 8)
            (n,) = unpack(buf, pos)
            pos += 8
            end = pos + n
            if end > size:
                raise _Truncated(end)
            append(buf[pos:end].decode("utf-8", "surrogateescape"))
            pos = end
        self.pos = pos
        return out

    def value(self, vtype: int) -> tuple[Any, int | None]:
        if vtype == STRING:
            return self.string(), None
        if vtype in _SCALAR_FORMATS:
            fmt = _SCALAR_FORMATS[vtype]
            return self.scalar(fmt, struct.calcsize(fmt)), None
        if vtype == ARRAY:
            etype = self.u32()
            count = self.u64()
            if etype == STRING:
                # each element is at least 8 bytes (its length): bound the count before looping
                self._need(count * 8)
                return self._strings(count), etype
            if etype in _NUMPY_DTYPES:
                dtype = np.dtype(_NUMPY_DTYPES[etype])
                self._need(count * dtype.itemsize)
                arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
                self.pos += count * dtype.itemsize
                if etype == BOOL:
                    return [bool(x) for x in arr], etype
                return arr.tolist(), etype
            raise _Corrupt(f"unknown array element type {etype}")
        raise _Corrupt(f"unknown value type {vtype}")


def _check_path(path: Path) -> int:
    """Exists, is a regular file, is readable; returns its size."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ModelFileError(f"model file not found: {path}; check the path or run 'specchat models list'") from None
    except PermissionError:
        raise ModelFileError(f"cannot access model file {path}: permission denied; fix its permissions") from None
    except OSError as exc:
        raise ModelFileError(f"cannot access model file {path}: {exc.strerror}; check the path") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelFileError(f"model path {path} is a directory, not a .gguf file; give the path of the file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"model path {path} is not a regular file; give the path of a .gguf file")
    if not os.access(path, os.R_OK):
        raise ModelFileError(f"cannot read model file {path}: permission denied; fix its permissions (chmod +r)")
    return st.st_size


def _not_gguf(path: Path, why: str) -> ModelFileError:
    return ModelFileError(f"{path} is not a GGUF model file ({why}); give the path of a .gguf file")


def parse_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse header, metadata and tensor table of ``path`` without reading the weights.

    Raises :class:`ModelFileError` (one line, naming the path) if the file is missing, unreadable, not GGUF,
    of an unknown version, or ends inside its header. Does *not* check that the tensor data is all there:
    :func:`validate_gguf` does.
    """
    path = Path(path)
    size = _check_path(path)
    if size < 4:
        raise _not_gguf(path, f"only {size} bytes long")
    try:
        fh = open(path, "rb")
    except PermissionError:
        raise ModelFileError(f"cannot read model file {path}: permission denied; fix its permissions (chmod +r)") from None
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {path}: {exc.strerror}; check the file") from None
    with fh:
        try:
            head = fh.read(_FIRST_READ)
            magic = head[:4]
            if magic != GGUF_MAGIC:
                raise _not_gguf(path, f"it starts with {magic!r}, not b'GGUF'")
            # Parse from an in-memory prefix of the file (no mmap: a file shrinking under an mmap is SIGBUS).
            # If the header runs past the prefix, read a bigger prefix and parse again (headers are a few MB).
            buf = head
            while True:
                try:
                    return _parse(path, buf, size)
                except _NeedMore as more:
                    if more.needed > MAX_HEADER_BYTES:
                        raise ModelFileError(
                            f"{path} is a corrupt GGUF file (its header claims more than {MAX_HEADER_BYTES >> 20} MB "
                            f"of metadata); {REDOWNLOAD}"
                        ) from None
                    fh.seek(0)
                    longer = fh.read(min(size, max(2 * more.needed, 4 * len(buf))))
                    if len(longer) <= len(buf):  # the file shrank after we measured it
                        raise ModelFileError(
                            f"{path} changed while being read (it is shorter than {size} bytes now); wait until "
                            f"whatever writes it has finished, or {REDOWNLOAD}"
                        )
                    buf = longer
        except OSError as exc:
            raise ModelFileError(f"cannot read model file {path}: {exc.strerror or exc}; check the file") from None


def _parse(path: Path, buf: bytes, size: int) -> GGUFFile:
    """Parse the header in ``buf`` (the first ``len(buf)`` bytes of a ``size``-byte file), in the format's
    order (see the module docstring): version and counts, metadata, tensor infos, then their layout."""
    r = _Reader(buf, len(buf))
    r.pos = 4
    try:
        version, n_tensors, n_kv = _read_counts(r, path, size)
        metadata, types = _read_metadata(r, n_kv)
        tensors = [_read_tensor_info(r) for _ in range(n_tensors)]
        alignment = _alignment(metadata, types)
        _check_layout(tensors, alignment)
        data_offset = (r.pos + alignment - 1) // alignment * alignment
    except _Truncated as exc:
        if len(buf) < size:
            raise _NeedMore(exc.needed) from None
        raise ModelFileError(
            f"{path} is truncated: it is {size} bytes long but its GGUF header alone needs at least "
            f"{exc.needed} bytes; {REDOWNLOAD}"
        ) from None
    except _Corrupt as exc:
        raise ModelFileError(f"{path} is a corrupt GGUF file ({exc}); {REDOWNLOAD}") from None
    return GGUFFile(
        path=path,
        file_size=size,
        version=version,
        metadata=metadata,
        types=types,
        tensors=tensors,
        alignment=alignment,
        data_offset=data_offset,
    )


def _read_counts(r: _Reader, path: Path, size: int) -> tuple[int, int, int]:
    """The version (one this code reads), the tensor count and the metadata key count, the counts bounded by
    the file size."""
    version = r.u32()
    if version not in KNOWN_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in KNOWN_VERSIONS:
            raise ModelFileError(
                f"{path} is a big-endian GGUF (version {swapped}); llama.cpp on this machine needs a "
                "little-endian file: convert it again without --bigendian"
            )
        raise ModelFileError(
            f"{path} has GGUF version {version}, but only versions {' and '.join(map(str, KNOWN_VERSIONS))} "
            "are supported; convert it again with a current llama.cpp"
        )
    n_tensors = r.u64()
    n_kv = r.u64()
    # every KV takes >= 13 bytes and every tensor info >= 24: bound the counts by the file size
    least = r.pos + 13 * n_kv + 24 * n_tensors
    if least > size:
        raise ModelFileError(
            f"{path} is truncated or corrupt: its header lists {n_kv} metadata keys and {n_tensors} tensors, "
            f"which need at least {least} bytes, but the file has {size}; {REDOWNLOAD}"
        )
    return version, n_tensors, n_kv


def _read_metadata(r: _Reader, n_kv: int) -> tuple[dict[str, Any], dict[str, tuple[int, int | None]]]:
    """The ``n_kv`` key/value pairs: the values, and each key's (value type, element type of an array)."""
    metadata: dict[str, Any] = {}
    types: dict[str, tuple[int, int | None]] = {}
    for _ in range(n_kv):
        key = r.string()
        vtype = r.u32()
        value, etype = r.value(vtype)
        if key in metadata:
            raise _Corrupt(f"duplicate metadata key {key!r}")
        metadata[key] = value
        types[key] = (vtype, etype)
    return metadata, types


def _read_tensor_info(r: _Reader) -> TensorInfo:
    """One entry of the tensor-info table: a known ggml type, at most GGML_MAX_DIMS dimensions, whole blocks."""
    name = r.string()
    n_dims = r.u32()
    if n_dims > GGML_MAX_DIMS:
        raise _Corrupt(f"tensor {name!r} has {n_dims} dimensions (max {GGML_MAX_DIMS})")
    shape = tuple(r.u64() for _ in range(n_dims))
    ggml_type = r.u32()
    offset = r.u64()
    try:
        qtype = GGMLQuantizationType(ggml_type)
        block_size, _ = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise _Corrupt(f"tensor {name!r} has unknown ggml type {ggml_type}") from None
    if shape and shape[0] % block_size:
        raise _Corrupt(f"tensor {name!r} row of {shape[0]} is not a multiple of {qtype.name}'s block of {block_size}")
    return TensorInfo(name, shape, ggml_type, offset)


def _alignment(metadata: dict[str, Any], types: dict[str, tuple[int, int | None]]) -> int:
    """``general.alignment`` (a uint32 power of two), or the default."""
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if "general.alignment" in types and types["general.alignment"][0] != UINT32:
        raise _Corrupt(f"general.alignment is a {TYPE_NAMES.get(types['general.alignment'][0], '?')}, not a uint32")
    if alignment <= 0 or alignment & (alignment - 1):
        raise _Corrupt(f"general.alignment is {alignment}, not a power of two")
    return alignment


def _check_layout(tensors: list[TensorInfo], alignment: int) -> None:
    """As gguf.cpp: names are unique and each tensor starts where the previous one's padded data ends."""
    names: set[str] = set()
    expected_offset = 0
    for t in tensors:
        if t.name in names:
            raise _Corrupt(f"duplicate tensor name {t.name!r}")
        names.add(t.name)
        if t.offset != expected_offset:
            raise _Corrupt(f"tensor {t.name!r} has offset {t.offset}, expected {expected_offset}")
        expected_offset += (t.nbytes + alignment - 1) // alignment * alignment


def validate_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Everything :func:`parse_gguf` checks, plus: the file holds all tensor data its table describes.

    A truncated download is reported with the expected and the actual size in bytes.
    """
    parsed = parse_gguf(path)
    expected = parsed.expected_size
    if parsed.file_size < expected:
        missing = expected - parsed.file_size
        raise ModelFileError(
            f"{parsed.path} is truncated: its tensor table needs {expected} bytes but the file has "
            f"{parsed.file_size} ({missing} missing); {REDOWNLOAD}"
        )
    return parsed


def _quantization(parsed: GGUFFile) -> tuple[int | None, str]:
    ftype = parsed.metadata.get("general.file_type")
    if isinstance(ftype, int):
        try:
            return ftype, LlamaFileType(ftype).name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    # no (known) file type: name the type holding most of the weight bytes
    by_type: dict[str, int] = {}
    for t in parsed.tensors:
        if len(t.shape) >= 2:
            by_type[t.type_name] = by_type.get(t.type_name, 0) + t.nbytes
    name = max(by_type, key=by_type.__getitem__) if by_type else "unknown"
    return (ftype if isinstance(ftype, int) else None), name


def info_from_parsed(parsed: GGUFFile) -> GGUFInfo:
    """Summarise a parsed GGUF (see :class:`GGUFInfo`)."""
    md = parsed.metadata
    arch = md.get("general.architecture")
    arch = arch if isinstance(arch, str) else None

    def arch_int(key: str) -> int | None:
        value = md.get(f"{arch}.{key}") if arch else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    tokens = md.get("tokenizer.ggml.tokens")
    tokens = tuple(tokens) if isinstance(tokens, list) else ()
    ftype, quant = _quantization(parsed)
    tok_model = md.get("tokenizer.ggml.model")
    template = md.get("tokenizer.chat_template")
    return GGUFInfo(
        path=parsed.path,
        file_size=parsed.file_size,
        version=parsed.version,
        architecture=arch,
        name=md.get("general.name") if isinstance(md.get("general.name"), str) else None,
        file_type=ftype,
        quantization=quant,
        block_count=arch_int("block_count"),
        context_length=arch_int("context_length"),
        embedding_length=arch_int("embedding_length"),
        vocab_size=len(tokens),
        tokenizer_model=tok_model if isinstance(tok_model, str) else None,
        has_chat_template=isinstance(template, str) and bool(template.strip()),
        tensor_count=len(parsed.tensors),
        n_params=sum(t.n_elements for t in parsed.tensors),
        metadata={k: v for k, v in md.items() if not isinstance(v, list)},
        tokens=tokens,
    )


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Validate ``path`` (as :func:`validate_gguf`) and describe it, without loading llama.cpp."""
    return info_from_parsed(validate_gguf(path))
