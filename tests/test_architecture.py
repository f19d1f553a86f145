"""The architecture holds: the import contracts in pyproject.toml (layers, Textual only in the TUI, no
llama_cpp in the TUI, no import cycles) are kept, and they do catch a violation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter, from the test extra


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_the_import_contracts_catch_a_violation(tmp_path):
    """A copy of the package with two violations: the engine imports Textual, and the models import the TUI."""
    shutil.copytree(ROOT / "specchat", tmp_path / "specchat", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "specchat" / "engine" / "events.py", "a") as f:
        f.write("\nimport textual  # a deliberate violation\n")
    with open(tmp_path / "specchat" / "models" / "presets.py", "a") as f:
        f.write("\nfrom specchat.tui import keys  # a deliberate violation\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "each layer imports only from the layers below it BROKEN" in out
    assert "specchat.models is not allowed to import specchat.tui" in out
    assert "only the TUI imports Textual BROKEN" in out
    assert "specchat.engine.events -> textual" in out
