"""The weight formats a target can be re-encoded in, and the variants ``bench --formats`` and ``models tune``
compare: which formats, whether each changes the model's output, the files (derived when missing), and the
kernels each is loaded with.

The verify cost of a target depends on its weight format (:mod:`specchat.engine.kernels`): the bundled
SmolLM2 Q4_1 has no batched kernel on x86, its F16 and Q8_0 re-encodings have. Re-encoding a file in a
format with more bits per weight than its own (:data:`LOSSLESS_FORMATS`, when above the source's bits) keeps
its weights: F16/BF16/F32 hold every value of a ≤ 8-bit block format up to the rounding of its scales, and
Q8_0 (8.5 bits per weight, 256 levels per 32-weight block) re-encodes a 4- or 5-bit block (16 or 32 levels)
with an error far below the source's own step. Any other target format re-quantises: fewer levels than the
source, so the model's output changes (the issue's Q4_0 of the bundled Q4_1: acceptance fell to 0.77,
its text differs). Those are measured only when asked for, and flagged.
"""

from __future__ import annotations

import dataclasses

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from specchat.engine.gguf import read_gguf_info
from specchat.engine.kernels import AMX_FORMATS
from specchat.errors import ModelFileError, UserError

#: formats that keep a lower-bit file's weights (see the module docstring), when they have more bits than it
LOSSLESS_FORMATS = ("F16", "Q8_0")
#: what ``bench --formats`` / ``models tune`` measure when no list is given: the lossless direction
DEFAULT_FORMATS = LOSSLESS_FORMATS

#: which files also get a one-row-kernel variant (see :func:`variants_for`)
OneRow = Literal["none", "source", "all"]

_K_QUANT_SIZE = re.compile(r"^(Q\d_K)_(S|M|L|XS)$")


def bits_per_weight(fmt: str) -> float | None:
    """Nominal bits per weight of a GGUF file type's main tensor type (``gguf.GGML_QUANT_SIZES``: Q4_1 5.0,
    Q8_0 8.5, F16 16); None for a name it does not know."""
    import gguf

    name = fmt.strip().upper()
    m = _K_QUANT_SIZE.match(name)
    base = m.group(1) if m else name.removesuffix("_MOE")
    try:
        qtype = gguf.GGMLQuantizationType[base]
    except KeyError:
        return None
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return 8.0 * size / block


def changes_output(fmt: str, source_fmt: str) -> bool:
    """Re-encoding a ``source_fmt`` file as ``fmt`` changes the model's output (it re-quantises): True unless
    ``fmt`` is one of :data:`LOSSLESS_FORMATS` with more bits per weight than the source."""
    if fmt.upper() == source_fmt.upper():
        return False
    mine, theirs = bits_per_weight(fmt), bits_per_weight(source_fmt)
    return not (fmt.upper() in LOSSLESS_FORMATS and mine is not None and theirs is not None and mine > theirs)


def parse_formats(text: str, flag: str = "--formats") -> list[str]:
    """``"f16,Q8_0"`` -> ``["F16", "Q8_0"]`` (upper case, in order, unique); each a file type llama.cpp can write."""
    from specchat.models.derive import DeriveError, ftype_for

    names = [p.strip().upper() for p in str(text).split(",") if p.strip()]
    if not names:
        raise UserError(f"{flag} is empty: give weight formats, e.g. {flag} F16,Q8_0")
    for name in names:
        try:
            ftype_for(name)
        except DeriveError:
            from specchat.models.derive import quant_names

            raise UserError(
                f"{flag} {text}: {name!r} is not a weight format llama.cpp can write; choose from {', '.join(quant_names())}"
            ) from None
    return list(dict.fromkeys(names))


#: the values of the ``flash_attn`` setting, as ``--flash-attn LIST`` takes them
FLASH_ATTN_SETTINGS = ("auto", "on", "off")


def parse_flash_attn(text: str, flag: str = "--flash-attn") -> list[str]:
    """``"auto,off"`` -> ``["auto", "off"]`` (lower case, in order, unique); each a ``flash_attn`` setting."""
    names = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    if not names:
        raise UserError(f"{flag} is empty: give flash-attention settings, e.g. {flag} auto,off")
    for name in names:
        if name not in FLASH_ATTN_SETTINGS:
            raise UserError(f"{flag} {text}: {name!r} is not a flash-attention setting; choose from {', '.join(FLASH_ATTN_SETTINGS)}")
    return list(dict.fromkeys(names))


#: the ``repack`` settings ``models tune --repack`` measures a batched variant with: llama.cpp's default (its extra
#: buffer types: repacked weight layouts) and without them
REPACK_SETTINGS: tuple[str, ...] = ("auto", "off")


def parse_repack(text: str, flag: str = "--repack") -> list[str]:
    """``"auto,off"`` -> ``["auto", "off"]`` (lower case, in order, unique); each a ``repack`` setting that keeps
    the batched kernels (``on`` is the one-row AMX variants' own, chosen by the CPU)."""
    names = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    if not names:
        raise UserError(f"{flag} is empty: give repack settings, e.g. {flag} auto,off")
    for name in names:
        if name not in REPACK_SETTINGS:
            raise UserError(f"{flag} {text}: {name!r} is not a repack setting to measure; "
                            f"choose from {', '.join(REPACK_SETTINGS)}")
    return list(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class Variant:
    """One target to measure: a file, its weight format, and the kernels it is loaded with."""

    label: str  # e.g. "Q4_1", "F16", "Q4_1 one-row"
    path: Path
    weights: str
    #: the ``repack`` setting to load it with ("on": llama.cpp's repacked/AMX layouts; "off"/"auto": batched)
    repack: str
    #: the file the others were derived from (its baseline is the comparisons' unit)
    source: bool = False
    #: re-quantised: fewer levels than the source, the model's output changes
    lossy: bool = False
    #: decodes every batch one row at a time (AMX one-row kernels, :attr:`specchat.engine.model.Model.row_by_row`):
    #: speculation cannot pay on it, so it runs baselines only
    one_row: bool = False
    #: the ``flash_attn`` setting to load it with (see :data:`specchat.engine.model.FLASH_ATTN_MEASURED`)
    flash_attn: str = "auto"
    #: a copy loaded without llama.cpp's extra buffer types (``repack = "off"``) where they are its default
    repack_off: bool = False

    @property
    def note(self) -> str:
        """What is particular to this variant: its kernels (one-row AMX), a re-quantisation, then a flash-attention
        setting other than llama.cpp's own (such a copy is never the comparisons' unit, even of the source file)."""
        parts = []
        if self.one_row:
            parts.append("one-row AMX kernels: fastest plain decoding here, every verify row costs a decode")
        elif self.lossy:
            parts.append("re-quantised: changes the model's output")
        if self.flash_attn == "off":
            parts.append("flash attention off: faster past a short context; a verified reply may differ from plain decoding at near-ties")
        elif self.flash_attn != "auto":
            parts.append(f"flash attention {self.flash_attn}")
        if self.repack_off:
            parts.append("repack off: without llama.cpp's repacked weight layouts, the same output by other kernels")
        if not parts:
            parts.append("the source file" if self.source else "re-encoded: the source's weights")
        return "; ".join(parts)


def variants_for(
    source: Path,
    formats: Sequence[str],
    models_dir: Path,
    *,
    one_row: OneRow = "none",
    threads: int = 1,
    progress: Callable[[str], None] | None = None,
    flash_attn: Sequence[str] = ("auto",),
    repack: Sequence[str] = ("auto",),
) -> list[Variant]:
    """The source, then each of ``formats`` (derived into ``models_dir`` with ``models derive --quant``'s
    machinery when the file is not there yet; the source's own format is the source), then the one-row-kernel
    variants (for a CPU whose AMX batch kernels crash, :func:`specchat.engine.model.extra_buffer_types_safe`
    False): of the source (``one_row="source"``) or of every file (``"all"``) whose format has AMX kernels.
    Each is loaded with ``flash_attn[0]``; every further setting in ``flash_attn`` adds a copy of them all,
    labelled e.g. ``Q8_0 fa-off``, whose file is never the comparisons' unit. With ``"off"`` in ``repack``, each
    batched variant loaded at llama.cpp's default kernels (its extra buffer types) also gets a copy without them,
    ``Q4_1 repack-off``, at ``flash_attn[0]``: on the AMD EPYCs here (Zen 4 and Zen 5, ``--threads 1``) plain
    decoding of the bundled Q4_1 ran 4-8 % faster without them (``scripts/baseline_parity.py``), so whether the
    default pays is a measurement, not a CPU name."""
    from specchat.models.derive import default_name, derive

    from specchat.engine.model import extra_buffer_types_safe

    say = progress or (lambda _msg: None)
    src_fmt = read_gguf_info(source).quantization
    # batched kernels: llama.cpp's default where its extra buffer types batch safely, else without them
    batched = "auto" if extra_buffer_types_safe() else "off"
    out = [Variant(src_fmt, source, src_fmt, batched, source=True)]
    for fmt in formats:
        if fmt == src_fmt.upper():
            continue
        path = models_dir / default_name(source, fmt, None)
        usable = False
        if path.exists():
            try:
                usable = read_gguf_info(path).quantization.upper() == fmt
            except ModelFileError:
                usable = False
        if not usable:
            say(f"deriving {path.name} ({fmt}) from {source.name}")
            derive(source, path, quant=fmt, threads=threads, force=True, progress=say)
        out.append(Variant(fmt, path, fmt, batched, lossy=changes_output(fmt, src_fmt)))
    if one_row != "none":
        out += [
            Variant(f"{v.label} one-row", v.path, v.weights, "on", source=False, lossy=v.lossy, one_row=True)
            for v in list(out) if v.weights.upper() in AMX_FORMATS and (v.source or one_row == "all")
        ]
    settings = list(dict.fromkeys(flash_attn)) or ["auto"]
    base = [dataclasses.replace(v, flash_attn=settings[0]) for v in out]
    plain_kernels = [
        dataclasses.replace(v, label=f"{v.label} repack-off", repack="off", source=False, repack_off=True)
        for v in base if "off" in repack and v.repack == "auto" and not v.one_row
    ]
    return base + [
        dataclasses.replace(v, label=f"{v.label} fa-{fa}", flash_attn=fa, source=False) for fa in settings[1:] for v in base
    ] + plain_kernels


__all__ = [
    "DEFAULT_FORMATS", "FLASH_ATTN_SETTINGS", "LOSSLESS_FORMATS", "Variant", "bits_per_weight", "changes_output",
    "parse_flash_attn", "parse_formats", "variants_for",
]
