"""The architecture holds: the import contracts in pyproject.toml (layers, Textual only in the TUI, no
llama_cpp in the TUI, no import cycles) are kept, they do catch a violation, and ARCHITECTURE.md names only
what exists (modules, classes, functions, files, the contract's layers)."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter, from the test extra
DOC = ROOT / "ARCHITECTURE.md"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def planted_copy(tmp_path: Path, plants: dict[str, str]) -> Path:
    """A copy of the package and its contracts with each ``{file: import line}`` appended as a violation."""
    shutil.copytree(ROOT / "specchat", tmp_path / "specchat", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for file, line in plants.items():
        with open(tmp_path / "specchat" / file, "a") as f:
            f.write(f"\n{line}  # a deliberate violation\n")
    return tmp_path


def test_the_import_contracts_catch_a_violation(tmp_path):
    """A copy of the package with two violations: the engine imports Textual, and the models import the TUI."""
    planted = planted_copy(tmp_path, {"engine/events.py": "import textual", "models/presets.py": "from specchat.tui import keys"})
    result = lint_imports(planted)
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "each layer imports only from the layers below it BROKEN" in out
    assert "specchat.models is not allowed to import specchat.tui" in out
    assert "only the TUI imports Textual BROKEN" in out
    assert "specchat.engine.events -> textual" in out


# -- ARCHITECTURE.md names only what exists ----------------------------------------------------------------


def resolve(dotted: str) -> object:
    """The object ``specchat.a.b.C.d`` names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def doc_parts() -> tuple[list[str], list[str]]:
    """The backticked spans of the prose, and the fenced blocks."""
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"^```\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    prose = re.sub(r"^```\n.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"`([^`\n]+)`", prose), blocks


def looks_like_code(word: str) -> bool:
    """A dotted name, a name with an underscore, or a CamelCase one (``SpecChatApp``, ``AutoK``)."""
    return "." in word or "_" in word or re.match(r"^[A-Z][a-z]+[A-Z]", word) is not None


def test_every_name_in_architecture_md_exists():
    spans, blocks = doc_parts()
    qualified = [s for s in spans if s.startswith("specchat.")]
    assert len(qualified) >= 25
    missing = []
    for name in qualified:
        try:
            resolve(name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{name}: {exc}")
    assert missing == []
    tails = {".".join(name.split(".")[-n:]) for name in qualified for n in (1, 2)}
    for span in spans:
        if span.startswith("specchat."):
            continue
        if "/" in span or span.endswith((".py", ".toml", ".md")):
            assert (ROOT / span).exists(), span
        elif looks_like_code(span) and not span.startswith("["):
            assert span in tails, span
    # the picture: every name in it is one of the names listed under it
    picture = blocks[1]
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", picture)
    unknown = sorted({w for w in words if looks_like_code(w) and w not in tails})
    assert unknown == []


def test_architecture_md_draws_the_layers_of_the_import_contract():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in contract["contracts"] if c["type"] == "layers"]
    _, blocks = doc_parts()
    drawn = [line.split("  ")[0].strip() for line in blocks[0].splitlines() if line.startswith("specchat")]
    assert drawn == layers


def test_every_import_of_specchat_names_a_module_or_name_that_exists():
    """import-linter skips an import of a module that does not exist, so a function-level import left behind by
    a move (``from specchat.engine.loader import load_engine`` after the loader became specchat.loading) passed
    the contracts and failed only when ``specchat demo`` ran it: every ``specchat`` import, at any depth, must
    resolve."""
    import ast
    import importlib.util

    missing: list[str] = []
    for path in sorted((ROOT / "specchat").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [(node.module, alias.name) for alias in node.names]
            else:
                continue
            for module, name in targets:
                if module != "specchat" and not module.startswith("specchat."):
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                if importlib.util.find_spec(module) is None:
                    missing.append(f"{where}: no module {module}")
                elif name is not None:
                    mod = importlib.import_module(module)
                    is_sub = hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None
                    if not hasattr(mod, name) and not is_sub:
                        missing.append(f"{where}: {module} has no {name}")
    assert not missing, "\n".join(missing)


# -- the TUI's contracts: the engine's face, the plain modules ---------------------------------------------


def test_the_tui_contracts_catch_a_violation(tmp_path):
    """A copy of the package with two violations: the sidebar imports the cost model (not the engine's face),
    and the recorder (a plain module) imports Textual."""
    planted = planted_copy(tmp_path, {
        "tui/widgets/sidebar.py": "from specchat.engine.telemetry.cost_model import CostModel",
        "tui/recorder.py": "from textual.widget import Widget",
    })
    result = lint_imports(planted)
    assert result.returncode == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "the TUI imports only the engine's face" in out and "BROKEN" in out
    assert "specchat.tui.widgets.sidebar -> specchat.engine.telemetry.cost_model" in out
    assert "the TUI's plain modules never import Textual BROKEN" in out
    assert "specchat.tui.recorder -> textual" in out
    assert "only the TUI imports Textual KEPT" in out  # each planted violation breaks its own contract only


def test_architecture_md_lists_the_engines_face_of_the_contract():
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    (face,) = [c for c in contract["contracts"] if c["id"] == "engine-face"]
    allowed = sorted(line.split("->")[1].strip() for line in face["ignore_imports"])
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The engine's face", 1)[1].split("\n## ", 1)[0]
    listed = sorted(re.findall(r"^- `(specchat\.engine[.\w]*)`", section, re.MULTILINE))
    assert listed == allowed


#: what the TUI may not load before its window is up (they take seconds; the engine thread loads them)
HEAVY = ("numpy", "llama_cpp")
#: what ``specchat`` imports before the window: the command, and every module of the TUI
STARTUP = ("specchat.cli", "specchat.commands.tui", "specchat.demo", "specchat.config")


def _loads_heavy(modules: list[str]) -> list[str]:
    """The heavy modules a fresh interpreter holds after importing ``modules``."""
    code = (
        "import importlib, pkgutil, sys, specchat.tui\n"
        f"names = {list(modules)!r}\n"
        "if 'specchat.tui' in names:\n"
        "    names += [m.name for m in pkgutil.walk_packages(specchat.tui.__path__, 'specchat.tui.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        f"print(','.join(h for h in {HEAVY!r} if h in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120, cwd=ROOT)
    return [h for h in out.stdout.strip().split(",") if h]


def test_the_tui_start_up_path_imports_neither_numpy_nor_llama_cpp():
    assert _loads_heavy([*STARTUP, "specchat.tui"]) == []


def _function_imports() -> dict[str, list[tuple[str, str, str]]]:
    """``{module imported: [(the function that imports it, qualified), the line, its comment]}`` for every
    import inside a function of the TUI's start-up files."""
    import ast

    files = [*sorted((ROOT / "specchat" / "tui").rglob("*.py")), ROOT / "specchat" / "commands" / "tui.py"]
    found: dict[str, list[tuple[str, str, str]]] = {}
    for path in files:
        lines = path.read_text(encoding="utf-8").splitlines()
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")

        def visit(node: ast.AST, owner: str | None, top: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef) and top:
                    visit(child, f"{module}.{child.name}", True)
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    # a method or a module-level function names itself; a nested one, the function it is in
                    name = owner if owner and not top else f"{owner or module}.{child.name}"
                    visit(child, name, False)
                elif isinstance(child, (ast.Import, ast.ImportFrom)) and not top and owner:
                    target = child.module if isinstance(child, ast.ImportFrom) else child.names[0].name
                    text = " ".join(lines[child.lineno - 1 : child.end_lineno])
                    comment = text.split("#", 1)[1].strip() if "#" in text else ""
                    found.setdefault(target or "", []).append((owner, f"{path.name}:{child.lineno}", comment))
                else:
                    visit(child, owner, top)

        visit(ast.parse("\n".join(lines)), None, True)
    return found


def test_every_deferred_heavy_import_of_the_tui_is_commented_and_listed():
    """An import that would load numpy or llama_cpp is deferred into the function that needs it, says why on its
    line, and is listed in ARCHITECTURE.md ("The TUI's start-up path"): the list is all there is."""
    heavy = {
        module: sites
        for module, sites in _function_imports().items()
        if module.split(".")[0] in HEAVY or (module.startswith("specchat.") and _loads_heavy([module]))
    }
    assert heavy, "the TUI defers nothing heavy? then the list in ARCHITECTURE.md should go"
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The TUI's start-up path", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- `(specchat\.[.\w]+)`", section, re.MULTILINE))
    sites = {owner: (where, comment) for module, found in heavy.items() for owner, where, comment in found}
    assert [f"{where} has no comment" for where, comment in sites.values() if not comment] == []
    assert sorted(sites) == sorted(listed)
