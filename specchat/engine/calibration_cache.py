"""The verify-cost calibration of a target, kept per file, threads and CPU in the data dir.

Timing v(K) on real batches up to K_MAX + 1 rows takes a second or two per target (on this machine's
2 cores, 1 thread: the bundled Q4_1 decodes 65 rows in ~0.4 s, and the engine times 1, 2, 3, 5, ..., 65 rows
twice), and the answer only changes when the file, the threads, the kernels or the CPU change. So the
engine stores the timings of its calibration (:mod:`specchat.engine.calibration`) under a key naming
exactly those (:class:`CalibrationKey`), and a later session on the same target replays them into its cost
model instead of timing again: the app starts warm, and ``specchat models tune`` fills the cache for every
format it measures. A change of any part of the key is a different entry (the old one is never read for
it): the file (path, size, modification time), ``threads`` / ``threads_batch``, the weights' buffer
(:attr:`~specchat.engine.model.Model.repack`, :attr:`~specchat.engine.model.Model.row_by_row`), the attention
kernel (:attr:`~specchat.engine.model.Model.flash_attn`: on this CPU it changes v(16) several-fold), the CPU
(model name and feature flags from ``/proc/cpuinfo``), llama.cpp (llama-cpp-python's version and
the features its build uses, ``llama_print_system_info``) and the depth of the context the batches were decoded
after, by doubling bucket (:func:`depth_bucket`).

Entries are small JSON files, ``<data dir>/calibration/<key digest>.json``, written atomically. The cache
is an optimisation: an unreadable or foreign entry counts as absent, and a failed write loses nothing but
the head start.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only annotations: `specchat models list` reads the cache without loading llama.cpp
    from specchat.engine.model import Model

#: the directory under the data dir
CALIBRATION_DIR = "calibration"
#: bumped when the meaning of a stored timing changes, or the sizes a calibration times (2: the 2-row batch joined
#: :data:`~specchat.engine.calibration.CALIBRATION_ROWS`; an entry without it would price 2 rows by interpolation)
FORMAT_VERSION = 2


@lru_cache(maxsize=1)
def cpu_identity() -> str:
    """The CPU's model name and a digest of its feature flags (``/proc/cpuinfo``; the platform elsewhere)."""
    name = flags = ""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not name:
            name = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = " ".join(sorted(value.split()))
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    return f"{name} (flags {hashlib.sha1(flags.encode()).hexdigest()[:12] if flags else 'unknown'})"


#: the first depth (tokens already in the KV) kept apart from a short context's; the buckets double from there
DEPTH_BUCKET_START = 256


def depth_bucket(n_past: int) -> int:
    """The depth bucket a calibration timed after ``n_past`` context tokens belongs to: 0 below
    :data:`DEPTH_BUCKET_START`, else the power-of-two multiple of it at or below ``n_past`` (256, 512, 1024, ...).

    Why depth is part of the key: a verify batch's rows each attend to the whole context, and with llama.cpp's
    flash-attention kernel on (its CPU default) each row walks the KV cache on its own, so a batch's cost grows
    with depth faster than one row's. Measured (AMD EPYC Zen 4, bundled Q4_1, one thread, flash attention auto,
    4 interleaved repetitions, ``tests/data/traces-smollm2.json``'s summary prompt cut at each depth): one row
    13.5 ms at 64 tokens, 14.7 at 400, 16.6 at 800, 19.8 at 1440; v(16) 9.1, 10.2, 11.2, 12.2; v(48) 25.1, 27.8,
    30.7, 34.2. Re-anchoring a short context's curve at a long one's single row (what
    :func:`specchat.engine.calibration.rescale_cached_verify_cost` does) priced a 17-row verify at 1440 tokens 25 %
    under its cost, and a 49-row one 27 % under; within one doubling bucket v(16) moves ≤ 12 %.

    The bucket is chosen where a turn starts, so a long reply's late verifies are priced at its prompt's depth until
    the rounds' own timings move the medians. Measured within one reply (AMD EPYC Zen 4, the F16 re-encoding, flash
    attention auto, ``--threads 1``, the bench's copy-heavy prompt, 2026-12-05): a 17-row verify cost 7.6 single rows
    at ~350 tokens and 8.8 at ~580 while one row grew 13.4 -> 14.4 ms; a 33-row one late in the reply 16.5 rows where
    the curve timed at 332 tokens said ~13.4 - auto-K's longer drafts there cost as much per token as fixed K 16's
    (1875-1935 ms against 1779-1854 ms for the same ~233 tokens)."""
    if n_past < DEPTH_BUCKET_START:
        return 0
    bucket = DEPTH_BUCKET_START
    while bucket * 2 <= n_past:
        bucket *= 2
    return bucket


@dataclass(frozen=True, slots=True)
class CalibrationKey:
    """Everything a verify-cost timing depends on (see the module docstring)."""

    path: str
    size: int
    mtime_ns: int
    threads: int
    threads_batch: int
    repack: bool
    row_by_row: bool
    flash_attn: str
    cpu: str
    llama: str
    #: :func:`depth_bucket` of the context the timings were decoded after
    depth: int = 0

    @classmethod
    def for_model(cls, model: Model) -> CalibrationKey:
        """The key of ``model`` as loaded now (its file as it is on disk), at the depth its KV holds now."""
        import llama_cpp

        from specchat.engine.model import system_info

        st = model.path.stat()
        return cls(
            path=str(model.path.resolve()), size=st.st_size, mtime_ns=st.st_mtime_ns, threads=model.threads,
            threads_batch=model.threads_batch, repack=model.repack, row_by_row=model.row_by_row,
            flash_attn=model.flash_attn,
            cpu=cpu_identity(), llama=f"llama-cpp-python {llama_cpp.__version__}; {system_info().strip()}",
            depth=depth_bucket(len(model.tokens)),
        )

    def digest(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:20]

    def file_matches(self, path: Path) -> bool:
        """True when ``path`` is this key's file, unchanged (same place, size and modification time)."""
        try:
            st = path.stat()
            return str(path.resolve()) == self.path and st.st_size == self.size and st.st_mtime_ns == self.mtime_ns
        except OSError:
            return False


@dataclass(frozen=True, slots=True)
class CachedCalibration:
    """One stored calibration: its key, the timings (rows, ms), the weight format and when it was measured."""

    key: CalibrationKey
    timings: tuple[tuple[int, float], ...]
    weights: str
    measured_at: float  # seconds since the epoch

    def file_is_current(self) -> bool:
        return self.key.file_matches(Path(self.key.path))


class CalibrationCache:
    """The stored calibrations in ``directory`` (``<data dir>/calibration``)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _file(self, key: CalibrationKey) -> Path:
        return self.directory / f"{key.digest()}.json"

    def load(self, key: CalibrationKey) -> CachedCalibration | None:
        """The calibration stored under exactly ``key``, or None (never stored, unreadable, or another key)."""
        entry = _read(self._file(key))
        return entry if entry is not None and entry.key == key else None

    def save(self, key: CalibrationKey, timings: Sequence[tuple[int, float]], weights: str) -> Path | None:
        """Store ``timings`` under ``key`` (atomic: a reader sees the old entry or the new one); the path, or
        None when the directory cannot be written (the cache is an optimisation: nothing else is lost)."""
        data = {
            "version": FORMAT_VERSION, "key": asdict(key), "weights": weights, "measured_at": time.time(),
            "timings": [[int(r), float(ms)] for r, ms in timings],
        }
        target = self._file(key)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".json.tmp", dir=self.directory)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, target)
        except OSError:
            return None
        return target

    def entries(self) -> list[CachedCalibration]:
        """Every readable entry, newest first."""
        if not self.directory.is_dir():
            return []
        out = [e for e in (_read(p) for p in self.directory.glob("*.json")) if e is not None]
        return sorted(out, key=lambda e: -e.measured_at)

    def for_file(self, path: Path) -> list[CachedCalibration]:
        """The entries for ``path`` as it is on disk now (any threads, kernels or CPU), newest first."""
        return [e for e in self.entries() if e.key.file_matches(path)]


def _read(path: Path) -> CachedCalibration | None:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != FORMAT_VERSION:
            return None
        key = CalibrationKey(**data["key"])
        timings = tuple((int(r), float(ms)) for r, ms in data["timings"])
        if not timings or any(r < 1 or not ms >= 0.0 for r, ms in timings):
            return None
        return CachedCalibration(key, timings, str(data.get("weights", "?")), float(data.get("measured_at", 0.0)))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


__all__ = [
    "CALIBRATION_DIR", "DEPTH_BUCKET_START", "CachedCalibration", "CalibrationCache", "CalibrationKey", "cpu_identity",
    "depth_bucket",
]
