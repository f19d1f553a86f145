"""The verify-cost calibration of a target, kept per file, threads and CPU in the data dir.

Timing v(K) on real batches up to K_MAX + 1 rows takes a second or two per target (on this machine's
2 cores, 1 thread: the bundled Q4_1 decodes 65 rows in ~0.4 s, and the engine times 1, 3, 5, ..., 65 rows
twice), and the answer only changes when the file, the threads, the kernels or the CPU change. So the
engine stores the timings of its calibration (:mod:`specchat.engine.calibration`) under a key naming
exactly those (:class:`CalibrationKey`), and a later session on the same target replays them into its cost
model instead of timing again: the app starts warm, and ``specchat models tune`` fills the cache for every
format it measures. A change of any part of the key is a different entry (the old one is never read for
it): the file (path, size, modification time), ``threads`` / ``threads_batch``, the weights' buffer
(:attr:`~specchat.engine.model.Model.repack`, :attr:`~specchat.engine.model.Model.row_by_row`), the attention
kernel (:attr:`~specchat.engine.model.Model.flash_attn`: on this CPU it changes v(16) several-fold), the CPU
(model name and feature flags from ``/proc/cpuinfo``) and llama.cpp (llama-cpp-python's version and
the features its build uses, ``llama_print_system_info``).

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
#: bumped when the meaning of a stored timing changes
FORMAT_VERSION = 1


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

    @classmethod
    def for_model(cls, model: Model) -> CalibrationKey:
        """The key of ``model`` as loaded now (its file as it is on disk)."""
        import llama_cpp

        from specchat.engine.model import system_info

        st = model.path.stat()
        return cls(
            path=str(model.path.resolve()), size=st.st_size, mtime_ns=st.st_mtime_ns, threads=model.threads,
            threads_batch=model.threads_batch, repack=model.repack, row_by_row=model.row_by_row,
            flash_attn=model.flash_attn,
            cpu=cpu_identity(), llama=f"llama-cpp-python {llama_cpp.__version__}; {system_info().strip()}",
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


__all__ = ["CALIBRATION_DIR", "CachedCalibration", "CalibrationCache", "CalibrationKey", "cpu_identity"]
