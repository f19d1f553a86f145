"""Saved ``specchat models tune`` results (:mod:`specchat.bench.tune` measures them): what each variant of a target
measured on this CPU and what the tune recommends per workload. Written by the tune, read by ``specchat models
list``, the tour's helps pair and the loader, whose ``repack = "auto"`` follows a result that measured the target
file both with llama.cpp's extra buffer types and without them (:func:`repack_measure`). Only the standard
library: the loader reads them before any model is loaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: the directory under the data dir
TUNE_DIR = "tune"
#: the workload of everyday chat (the tune measures it on the bench suite's prose prompt)
PLAIN_CHAT = "plain chat"
#: a variant must beat the source by more than this to be recommended over it (timing noise on a shared CPU)
TIE_MARGIN = 0.03


@dataclass(slots=True)
class Mode:
    """One way of running a variant on a workload, measured."""

    tok_s: float | None = None  # median tok/s of the runs
    x_source: float | None = None  # median of tok/s / the round's source baseline tok/s
    runs: int = 0
    alpha: float | None = None  # per-position acceptance of the drafter in these runs
    mean_k: float | None = None
    predicted_tok_s: float | None = None  # the cost model's prediction for this mode


@dataclass(slots=True)
class VariantResult:
    """Everything tune measured for one variant."""

    label: str
    file: str
    path: str
    weights: str
    repack: str
    source: bool
    lossy: bool
    one_row: bool
    note: str
    flash_attn: str = "auto"
    t1_ms: float | None = None  # single-row decode, median
    v: dict[str, float] = field(default_factory=dict)  # K -> v(K) at the timed sizes
    reason: str = ""
    #: the same with the batch on ``split_threads_batch`` threads (None: not measured)
    split_v: dict[str, float] | None = None
    split_gain: float | None = None  # 1 − t(17 rows, split) / t(17 rows, no split)
    modes: dict[str, dict[str, Mode]] = field(default_factory=dict)  # workload -> "plain"/"auto" -> Mode

    def best(self, workload: str) -> tuple[str, Mode] | None:
        """The faster measured mode on ``workload`` (by measured tok/s, else predicted), or None."""
        ms = [(name, m) for name, m in self.modes.get(workload, {}).items() if _speed(m) is not None]
        return max(ms, key=lambda nm: _speed(nm[1]) or 0.0) if ms else None


def _speed(m: Mode) -> float | None:
    return m.tok_s if m.tok_s is not None else m.predicted_tok_s


@dataclass(slots=True)
class Choice:
    """The recommended variant and mode for one workload."""

    workload: str
    label: str
    mode: str  # "plain" (speculation off) or "auto" (the drafter with auto-K)
    tok_s: float
    x_source: float | None
    measured: bool  # from runs (else from the prediction)
    why: str


@dataclass(slots=True)
class TuneResult:
    """A tune run: where, how, what was measured, and what it recommends."""

    source: str
    source_path: str
    threads: int
    split_threads_batch: int | None
    drafter: str
    cpu: str
    measured_at: float
    variants: list[VariantResult]
    choices: list[Choice] = field(default_factory=list)
    split_recommended: bool = False
    notes: list[str] = field(default_factory=list)
    #: how each format's auto-K run shared the machine with its plain run: "rounds" (round by round on two copies,
    #: :mod:`specchat.bench.lockstep`), "replies" (one after the other), "" (no runs; or saved before it was said)
    interleave: str = ""

    def variant(self, label: str) -> VariantResult:
        return next(v for v in self.variants if v.label == label)



def tune_dir(data_dir: Path) -> Path:
    return Path(data_dir) / TUNE_DIR


def save_result(data_dir: Path, result: TuneResult) -> Path:
    """Write ``result`` to ``<data dir>/tune/<source file name>.json`` (atomically); returns the path."""
    from specchat.errors import UserError

    d = tune_dir(data_dir)
    path = d / f"{result.source}.json"
    tmp = d / f".{result.source}.json.tmp"
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(asdict(result), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise UserError(f"cannot save the tune results in {d}: {exc.strerror or exc}; check the data dir") from None
    return path


def load_results(data_dir: Path) -> list[TuneResult]:
    """Every readable saved result (``specchat models list``), newest first."""
    d = tune_dir(data_dir)
    out: list[TuneResult] = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append(_from_json(json.loads(p.read_text(encoding="utf-8"))))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return sorted(out, key=lambda r: -r.measured_at)


def _from_json(d: dict[str, Any]) -> TuneResult:
    variants = []
    for v in d["variants"]:
        modes = {w: {name: Mode(**m) for name, m in ms.items()} for w, ms in v.pop("modes", {}).items()}
        variants.append(VariantResult(**v, modes=modes))
    choices = [Choice(**c) for c in d.pop("choices", [])]
    d.pop("variants")
    return TuneResult(**d, variants=variants, choices=choices)


@dataclass(frozen=True, slots=True)
class RepackMeasure:
    """What a saved tune measured of one file on plain chat, in the mode a session runs (``"auto"``: auto-K,
    ``"plain"``: no speculation), with llama.cpp's extra buffer types and without them, and what ``repack =
    "auto"`` makes of it (``setting``: ``"off"`` or ``"auto"``)."""

    setting: str
    mode: str
    with_tok_s: float
    without_tok_s: float

    def words(self) -> str:
        """The sidebar's line: ``repack off: models tune, plain chat with auto-K, 105 tok/s on, 117 off``."""
        kept = "off" if self.setting == "off" else "on"
        mode = " with auto-K" if self.mode == "auto" else ""
        return (f"repack {kept}: models tune, plain chat{mode}, {self.with_tok_s:.0f} tok/s on, "
                f"{self.without_tok_s:.0f} off")


def repack_measure(results: Iterable[TuneResult], path: Path, *, cpu: str, threads: int, flash_attn: str,
                   speculates: bool) -> RepackMeasure | None:
    """What the newest result measured on this CPU (``cpu``, :func:`specchat.engine.calibration_cache.cpu_identity`)
    at these ``threads`` says of the file ``path`` at this ``flash_attn`` setting, for ``repack = "auto"``; None when
    no result ran it both with llama.cpp's extra buffer types (``repack`` auto) and without them (off). Its
    ``setting`` is ``"off"`` when without them was faster on plain chat by more than :data:`TIE_MARGIN`, in the
    mode the session runs (auto-K when it ``speculates``, else plain), else ``"auto"``; its ``words`` say so with
    the figures, for the sidebar. On this AMD EPYC Zen 5, ``--threads 1``, the bundled Q4_1 read 108.0 tok/s with
    them and 119.2 without (2026-12-03)."""
    want = Path(path).resolve()
    for result in results:  # newest first (load_results)
        if result.cpu != cpu or result.threads != threads:
            continue
        same = [v for v in result.variants if not v.one_row and v.flash_attn == flash_attn and _same_file(v.path, want)]
        by = {v.repack: v for v in same}
        if "auto" not in by or "off" not in by:
            continue
        mode = "auto" if speculates and all(_has_mode(by[r], "auto") for r in ("auto", "off")) else "plain"
        on, off = (_mode_speed(by[r], mode) for r in ("auto", "off"))
        if on is None or off is None:
            continue
        return RepackMeasure("off" if off > (1.0 + TIE_MARGIN) * on else "auto", mode, on, off)
    return None


def _has_mode(v: VariantResult, mode: str) -> bool:
    return v.modes.get(PLAIN_CHAT, {}).get(mode) is not None


def _mode_speed(v: VariantResult, mode: str) -> float | None:
    m = v.modes.get(PLAIN_CHAT, {}).get(mode) or v.modes.get(PLAIN_CHAT, {}).get("plain")
    return _speed(m) if m is not None else None


def _same_file(path: str, want: Path) -> bool:
    try:
        return Path(path).resolve() == want
    except OSError:
        return False
