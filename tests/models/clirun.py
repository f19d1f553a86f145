"""Run the real ``specchat`` CLI: in-process (``cli.main``) or as a subprocess with its own environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from specchat.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_cli_subprocess(*argv: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m specchat.cli ARGV`` with ``env`` added to a copy of the environment (PYTHONPATH = repo)."""
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = str(REPO) + (os.pathsep + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
    return subprocess.run(
        [sys.executable, "-m", "specchat.cli", *argv],
        capture_output=True, text=True, timeout=timeout, env=full, cwd=str(REPO),
    )
