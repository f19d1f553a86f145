"""The linter runs: ``ruff check`` passes over the whole tree (its rules are ``[tool.ruff]`` in pyproject.toml),
and no ``fmt: skip`` marker addresses a formatter that is not run."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: no formatter is run, so no marker addresses one (the engine's were dropped last, by its owner)
ENGINE_MARKERS_LEFT = 0
MARKER = "# fmt" + ": skip"  # spelled apart, so this file holds none


def ruff() -> list[str]:
    """ruff from the test extra (this interpreter's), else one on PATH."""
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    return [found]


def test_ruff_check_passes():
    result = subprocess.run([*ruff(), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_check_catches_an_unused_import(tmp_path):
    """The configuration does select rules (an empty ``select`` would pass anything)."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "planted.py").write_text("import os  # a deliberate violation\n")
    result = subprocess.run([*ruff(), "check", "--no-cache", "."], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout + result.stderr


def _markers(folder: Path) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(folder.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MARKER in line
    ]


def test_no_formatter_markers():
    engine = ROOT / "specchat" / "engine"
    outside = [m for folder in ("specchat", "tests", "scripts") for m in _markers(ROOT / folder)
               if not m.startswith("specchat/engine/")]
    assert outside == []
    assert len(_markers(engine)) <= ENGINE_MARKERS_LEFT
