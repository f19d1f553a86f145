"""specchat installed the way a user installs it (``pip install .``, not editable) has what it needs: the
built-in themes (the checkout's top-level ``themes/``, shipped inside the package as package data, read with
importlib.resources) and a config that loads.

Before the themes shipped inside the package, a non-editable install looked for them in a ``themes/`` folder
next to the source checkout, found nothing, and the app fell back to ``textual-dark`` with an "Unknown
theme" warning.

Offline and quick: the package is built from a copy of the source (so the checkout gets no build/ or
egg-info) into a new venv with ``--no-deps --no-build-isolation``; the new venv reads its dependencies
(Textual, pydantic-settings, setuptools...) from this test venv's site-packages through a ``.pth`` path
entry, which adds the directory but runs none of its ``.pth`` files, so this checkout's editable install is
not active there: ``import specchat`` can only find the installed copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILTIN_THEMES = {"specchat-dark", "specchat-light", "specchat-high-contrast", "specchat-solarized"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a new venv with specchat installed non-editable from a copy of this checkout."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    shutil.copytree(ROOT / "specchat", src / "specchat", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "themes", src / "themes")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout.strip()
    )
    (site / "test-venv-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--no-index", str(src)],
        check=True, capture_output=True, text=True, timeout=600, cwd=tmp,
    )
    return python


def clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPECCHAT_", "PYTHON"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"))
    return env


def run(python: Path, code: str, tmp_path: Path) -> str:
    result = subprocess.run(
        [str(python), "-I", "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=clean_env(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_pyproject_lists_every_package():
    """The packages are listed in pyproject.toml (``specchat.themes`` is mapped from the top-level ``themes/``,
    which discovery cannot do): a package of the tree missing from the list would be missing from the wheel."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    tree = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "specchat").rglob("__init__.py")}
    assert sorted(listed) == sorted(tree | {"specchat.themes"})


def test_the_installed_package_is_not_this_checkout(installed, tmp_path):
    where = Path(run(installed, "import specchat; print(specchat.__file__)", tmp_path).strip())
    assert where.is_relative_to(installed.parent.parent) and not where.is_relative_to(ROOT)


def test_the_installed_app_starts_with_its_built_in_themes(installed, tmp_path):
    """The app itself, with each built-in theme asked for: it is the theme in use, and nothing warns."""
    out = run(
        installed,
        f"""
        import asyncio
        from specchat.config import Settings
        from specchat.errors import UserError
        from specchat.tui.app import SpecChatApp
        from specchat.tui.themes import load_themes, theme_dirs

        result = load_themes(theme_dirs(None))
        assert result.errors == [], result.errors
        print(",".join(sorted(t.name for t in result.themes)))

        def factory(progress):
            raise UserError("no model in this test")

        async def main(theme):
            app = SpecChatApp(factory, Settings(theme=theme, data_dir={str(tmp_path)!r}))
            async with app.run_test() as pilot:
                await pilot.pause()
                notices = [n.message for n in app._notifications]
                assert app.theme == theme and not any("Unknown theme" in n for n in notices), (app.theme, notices)
                assert app.get_css_variables()["token-accepted"]

        for theme in {sorted(BUILTIN_THEMES)!r}:
            asyncio.run(main(theme))
        """,
        tmp_path,
    )
    assert BUILTIN_THEMES <= set(out.strip().split(","))


def test_the_installed_cli_loads_the_example_config(installed, tmp_path):
    """``specchat config show`` (the installed console script) on config.example.toml: every value it sets
    comes from the file."""
    specchat = installed.parent / "specchat"
    result = subprocess.run(
        [str(specchat), "--config", str(ROOT / "config.example.toml"), "config", "show"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=clean_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    from_file = [line for line in result.stdout.splitlines() if f"# file {ROOT / 'config.example.toml'}" in line]
    assert any(line.startswith("theme = ") for line in from_file), result.stdout
    assert any(line.startswith("k = ") for line in from_file), result.stdout
