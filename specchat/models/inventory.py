"""What models this machine has, and which of them can serve as target + draft (``specchat models list``).

Everything here reads GGUF headers only (:func:`specchat.engine.gguf.validate_gguf`): sizes, architecture,
quantisation, vocabulary and block count come from the metadata, and pair compatibility is llama.cpp's five
vocabulary rules applied to the metadata (:mod:`specchat.engine.compat`). llama.cpp is never loaded, so the
listing is fast even with multi-GB models in the data dir.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specchat.engine.compat import CompatResult, VocabSummary, check_compatible
from specchat.engine.drafter_kinds import NGRAM, NONE, SUFFIX
from specchat.engine.gguf import GGUFInfo, info_from_parsed, validate_gguf
from specchat.errors import ModelFileError
from specchat.models.hub import PART_SUFFIX, FileCheck, check_file
from specchat.models.presets import PRESETS, HubFile, NgramDraft, Preset, how_to_get, local_path
from specchat.models.bundled import BUNDLED, bundled_model_path
from specchat.models.registry import models_dir, resolve_pair


@dataclass
class ModelEntry:
    """One GGUF file on this machine (or one that a preset or the settings point at)."""

    path: Path
    roles: list[str] = field(default_factory=list)  # "bundled", "derived", "downloaded", "configured target", ...
    info: GGUFInfo | None = None
    vocab: VocabSummary | None = field(default=None, repr=False)
    error: str = ""  # why the file cannot be used (missing, truncated, not GGUF)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def usable(self) -> bool:
        return self.info is not None and not self.error


@dataclass
class PresetStatus:
    preset: Preset
    target: Path
    draft: Path | None  # None: the preset drafts with n-gram lookup (no file)
    target_check: FileCheck
    draft_check: FileCheck
    compat: CompatResult | None = None  # only when both files are usable

    @property
    def ready(self) -> bool:
        if self.draft is None:
            return self.target_check.ok
        return self.target_check.ok and self.draft_check.ok and bool(self.compat)

    @property
    def state(self) -> str:
        missing = [role for role, chk in (("target", self.target_check), ("draft", self.draft_check)) if not chk.ok]
        if missing:
            worst = [self.target_check, self.draft_check]
            if all(c.status == "missing" for c in worst if not c.ok):
                what = "not downloaded" if self.preset.kind == "hub" else "not derived"
            else:
                what = "incomplete " + " and ".join(missing)
            return f"{what}: run {how_to_get(self.preset)}"
        if self.draft is None:
            return "ready"
        if self.compat is None:
            return "unreadable"
        if not self.compat:
            return f"incompatible ({self.compat.rule})"
        return "ready"


@dataclass
class Inventory:
    data_dir: Path
    models: list[ModelEntry]
    presets: list[PresetStatus]
    configured: tuple[str, str]  # (settings.target, settings.draft)
    configured_state: str  # "target X with the n-gram drafter", "ready", an error line, ...
    pairs: list[tuple[ModelEntry, ModelEntry]]  # compatible (target, draft) pairs among usable files


def _describe(path: Path) -> tuple[GGUFInfo | None, VocabSummary | None, str]:
    try:
        parsed = validate_gguf(path)
    except ModelFileError as exc:
        return None, None, str(exc)
    return info_from_parsed(parsed), VocabSummary.from_metadata(parsed.metadata, source=str(path)), ""


class _Compat:
    """check_compatible over entries, memoised (token-text comparison is O(vocab))."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Path, Path], CompatResult] = {}

    def __call__(self, target: ModelEntry, draft: ModelEntry) -> CompatResult:
        key = (target.path, draft.path)
        if key not in self._cache:
            assert target.vocab is not None and draft.vocab is not None
            self._cache[key] = check_compatible(target.vocab, draft.vocab)
        return self._cache[key]


class _Entries:
    """The models found so far: one entry per file (by its resolved path), described once, with its roles."""

    def __init__(self) -> None:
        self.by_path: dict[Path, ModelEntry] = {}

    def add(self, path: Path, role: str | None) -> ModelEntry:
        key = path.resolve() if path.exists() else path.absolute()
        entry = self.by_path.get(key)
        if entry is None:
            entry = self.by_path[key] = ModelEntry(path=path)
            entry.info, entry.vocab, entry.error = _describe(path)
        if role is not None and role not in entry.roles:
            entry.roles.append(role)
        return entry


def build_inventory(data_dir: Path, target_spec: str = BUNDLED, draft_spec: str = NGRAM) -> Inventory:
    """Collect bundled, configured, derived/downloaded and preset models and check which pairs work.

    In the order listed: the bundled model, the files in the data dir (downloaded preset files, derived files,
    anything the user put there), the configured pair (:func:`_configured_state`), the presets
    (:func:`_preset_statuses`); then every usable pair among them (:func:`_pairs`)."""
    mdir = models_dir(data_dir)
    assert mdir is not None
    entries = _Entries()
    entries.add(bundled_model_path(), "bundled")
    hub_files = {f.filename for p in PRESETS.values() for _r, f in p.files() if isinstance(f, HubFile)}
    if mdir.is_dir():
        for path in sorted(mdir.glob("*.gguf")):
            if path.name.startswith("."):
                continue  # a derive in progress (temporary file)
            entries.add(path, "downloaded" if path.name in hub_files else "derived")
    configured_state = _configured_state(entries, target_spec, draft_spec, data_dir)
    compat = _Compat()
    presets = _preset_statuses(entries, mdir, compat)
    return Inventory(
        data_dir=data_dir,
        models=list(entries.by_path.values()),
        presets=presets,
        configured=(target_spec, draft_spec),
        configured_state=configured_state,
        pairs=_pairs(list(entries.by_path.values()), compat),
    )


def _configured_state(entries: _Entries, target_spec: str, draft_spec: str, data_dir: Path) -> str:
    """What the configured pair is, in words (or why it does not work); its models join ``entries``."""
    try:
        pair = resolve_pair(target_spec, draft_spec, data_dir)
    except ModelFileError as exc:
        return str(exc)
    t_entry = entries.add(pair.target, "configured target")
    if not t_entry.usable:
        return t_entry.error
    if pair.drafter == NONE:
        return "target only, speculation off (draft = none)"
    if pair.drafter == NGRAM:
        return "target with the n-gram drafter (no draft model)"
    if pair.drafter == SUFFIX:
        return "target with the suffix drafter (the conversation and the history; no draft model)"
    assert pair.draft is not None
    d_entry = entries.add(pair.draft, "configured draft")
    if not d_entry.usable:
        return d_entry.error
    result = check_compatible(t_entry.vocab, d_entry.vocab)  # type: ignore[arg-type]
    return "compatible" if result else result.message


def _preset_statuses(entries: _Entries, mdir: Path, compat: _Compat) -> list[PresetStatus]:
    """Each preset's files as found in ``mdir`` and, when both are there, whether they pair; the files that
    pass their checks join ``entries`` (the presets section names their roles)."""
    presets: list[PresetStatus] = []
    for preset in PRESETS.values():
        t_path = local_path(preset.target, mdir)
        t_chk = check_file(t_path, getattr(preset.target, "size", None))
        if isinstance(preset.draft, NgramDraft):
            presets.append(PresetStatus(preset, t_path, None, t_chk, FileCheck("ok", 0, "n-gram lookup: no file")))
            if t_chk.ok:
                entries.add(t_path, None)
            continue
        d_path = local_path(preset.draft, mdir)
        d_chk = check_file(d_path, getattr(preset.draft, "size", None))
        status = PresetStatus(preset, t_path, d_path, t_chk, d_chk)
        if t_chk.ok and d_chk.ok:
            t_e, d_e = entries.add(t_path, None), entries.add(d_path, None)
            if t_e.usable and d_e.usable:
                status.compat = compat(t_e, d_e)
        presets.append(status)
    return presets


def _pairs(models: list[ModelEntry], compat: _Compat) -> list[tuple[ModelEntry, ModelEntry]]:
    """Every usable (target, draft) pair of compatible models where the draft is the smaller file, the largest
    targets first."""
    usable = [e for e in models if e.usable]
    pairs: list[tuple[ModelEntry, ModelEntry]] = []
    for t in usable:
        for d in usable:
            # a draft only helps if it is cheaper: smaller in bytes (decode on a CPU is memory-bound)
            if d is t or d.info.file_size >= t.info.file_size:  # type: ignore[union-attr]
                continue
            if compat(t, d):
                pairs.append((t, d))
    pairs.sort(key=lambda p: (-p[0].info.file_size, -p[1].info.file_size))  # type: ignore[union-attr]
    return pairs


def leftover_parts(data_dir: Path) -> list[Path]:
    """Interrupted downloads (``*.gguf.part``) that ``models pull`` would resume."""
    mdir = models_dir(data_dir)
    return sorted(mdir.glob(f"*{PART_SUFFIX}")) if mdir is not None and mdir.is_dir() else []
