"""Themes: the built-in ``themes/*.toml`` (the checkout's top-level folder, shipped inside the package as
``specchat/themes``: package data, read with :mod:`importlib.resources`, so an installed specchat has them
wherever it is installed; :data:`BUILTIN_THEMES_DIR`) plus the user's ``<config dir>/themes/*.toml``.

A theme file is one Textual :class:`~textual.theme.Theme` (same field names) plus the token colours in
``[variables]``::

    name = "specchat-dark"
    dark = true
    primary = "#7aa2f7"
    background = "#1a1b26"
    # secondary, accent, warning, error, success, foreground, surface, panel, boost: optional colours
    # luminosity_spread, text_alpha: optional floats

    [variables]
    token-accepted = "#9ece6a"   # draft token the target kept
    token-corrected = "#e0af68"  # the target's own token at a rejection
    token-bonus = "#7dcfff"      # the extra token after a fully accepted draft
    token-plain = "#c0caf5"      # decoded without speculation
    token-rejected = "#f7768e"   # ghost text (drawn dim and struck through)

A file that cannot be read, is not TOML, or has a bad field is reported (one line: file, problem, what to
do) and skipped; the other themes still load. Token colours a theme leaves out fall back to
:data:`TOKEN_DEFAULTS` (so Textual's built-in themes work too).

Every field is checked the way Textual will use it, because Textual fails late and hard on a bad one (the app
crashed at start-up): the floats go into :class:`textual.design.ColorSystem`, whose shades are computed from
``luminosity_spread`` (NaN or ``1e308`` made ``Color.lab_to_rgb`` raise), so they must be finite and in
0..1 and the whole colour system is generated once here; a ``[variables]`` entry is substituted into Textual's
CSS (``footer-key-foreground = "zzz"`` raised ``StylesheetParseError`` on the first mount; text with ``;`` or
``}`` would inject rules), so an entry must name a variable Textual or specchat defines, and its value is
parsed by Textual's own stylesheet parser as one declaration of the property kind the variable's default
value has (a colour, a text style, ``initial``). The name is shown in the command palette: letters, digits,
``-``, ``_``, ``.`` and spaces only.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.css.stylesheet import Stylesheet
from textual.theme import Theme


def builtin_themes_dir() -> Traversable:
    """Where the built-in themes are: ``specchat/themes`` in an installed package (``package-dir`` maps the
    checkout's top-level ``themes/`` there, ``package-data`` ships it), else that ``themes/`` folder itself (an
    editable install or the source tree, where the package has no ``themes`` of its own)."""
    packaged = files("specchat") / "themes"
    if packaged.is_dir() and any(p.name.endswith(".toml") for p in packaged.iterdir()):
        return packaged
    return Path(__file__).resolve().parents[2] / "themes"


#: the built-in themes (:func:`builtin_themes_dir`)
BUILTIN_THEMES_DIR: Traversable = builtin_themes_dir()

DEFAULT_THEME = "specchat-dark"

TOKEN_VARIABLES = ("token-accepted", "token-corrected", "token-bonus", "token-plain", "token-rejected")

#: literal fallbacks (Textual requires literal values here, not ``$variables``); readable on dark and light
TOKEN_DEFAULTS: dict[str, str] = {
    "token-accepted": "#3fb950",
    "token-corrected": "#d29922",
    "token-bonus": "#2f81f7",
    "token-plain": "#8b949e",
    "token-rejected": "#f85149",
}

_COLOR_FIELDS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
_FLOAT_FIELDS = ("luminosity_spread", "text_alpha")  # both fractions: Textual's defaults are 0.15 and 0.95
_BOOL_FIELDS = ("dark", "ansi")
_ALLOWED = {"name", "variables", *_COLOR_FIELDS, *_FLOAT_FIELDS, *_BOOL_FIELDS}


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}$")
#: CSS properties a variable's value is tried in, in order; the first that accepts the default decides its kind
_VALUE_PROPERTIES = ("color", "background", "text-style")


class ThemeFileError(ValueError):
    """A theme file that cannot be used; the message names the file and what to do."""


@dataclass
class ThemeLoadResult:
    themes: list[Theme] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _check_color(path: Traversable, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(f"{path}: {key} must be a colour string like \"#1a1b26\", got {value!r}")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeFileError(
            f"{path}: {key} = {value!r} is not a colour; use \"#rrggbb\", \"rgb(r,g,b)\" or a colour name"
        ) from None
    return value


@cache
def _textual_variables() -> dict[str, str]:
    """Textual's own theme variables and their default values (``ColorSystem.generate`` of a plain theme)."""
    return Theme(name="defaults", primary="#0178d4").to_color_system().generate()


def _declaration_parses(prop: str, value: str) -> bool:
    """Whether Textual's stylesheet parser accepts ``prop: value`` as exactly one declaration."""
    sheet = Stylesheet()
    sheet.add_source(f"Screen {{ {prop}: {value}; }}", read_from=("specchat-theme-check", ""))
    try:
        sheet.parse()
    except Exception:  # StylesheetParseError, tokenizer errors: all mean "not a value Textual can use"
        return False
    return len(sheet.rules) == 1


@cache
def _variable_property(name: str) -> str | None:
    """The CSS property a Textual variable is used as: the first of :data:`_VALUE_PROPERTIES` its default fits."""
    default = _textual_variables().get(name)
    if default is None:
        return None
    return next((p for p in _VALUE_PROPERTIES if _declaration_parses(p, default)), None)


def _check_variable(path: Traversable, key: object, value: object) -> str:
    if not isinstance(key, str) or not (key in TOKEN_VARIABLES or key in _textual_variables()):
        raise ThemeFileError(
            f"{path}: variables.{key} is not a theme variable; use {', '.join(TOKEN_VARIABLES)} or one of "
            "Textual's (e.g. footer-key-foreground)"
        )
    if not isinstance(value, str):
        raise ThemeFileError(f"{path}: variables.{key} must be a string, got {value!r}")
    if value.lstrip().startswith("$"):
        raise ThemeFileError(f"{path}: variables.{key} = {value!r}: use a literal colour, not a $variable")
    if key in TOKEN_VARIABLES:
        return _check_color(path, f"variables.{key}", value)
    prop = _variable_property(key)
    if any(ch in value for ch in ";{}\n\r/") or prop is None or not _declaration_parses(prop, value):
        kind = "a text style like \"bold underline\"" if prop == "text-style" else "a colour like \"#rrggbb\""
        raise ThemeFileError(
            f"{path}: variables.{key} = {value!r} is not a value Textual can use here; use {kind}"
        )
    return value


def load_theme_file(path: Traversable) -> Theme:
    """Read one theme file; raise :class:`ThemeFileError` with a one-line message on any problem."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ThemeFileError(f"{path}: cannot read the theme file ({exc.strerror}); check its permissions") from None
    except UnicodeDecodeError:
        raise ThemeFileError(f"{path}: not UTF-8 text; save the theme file as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(f"{path}: invalid TOML ({exc}); fix the file or remove it") from None
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise ThemeFileError(
            f"{path}: unknown key {unknown[0]!r}; allowed keys are {', '.join(sorted(_ALLOWED))}"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ThemeFileError(f"{path}: missing name = \"...\"; add the theme's name")
    if not _NAME.match(name.strip()):
        raise ThemeFileError(
            f"{path}: name = {name!r}: use up to 64 letters, digits, spaces, '.', '_' or '-' (it is shown in menus)"
        )
    if "primary" not in data:
        raise ThemeFileError(f"{path}: missing primary = \"#rrggbb\"; every theme needs a primary colour")
    kwargs: dict[str, object] = {"name": name.strip()}
    for key in _COLOR_FIELDS:
        if key in data:
            kwargs[key] = _check_color(path, key, data[key])
    for key in _FLOAT_FIELDS:
        if key in data:
            value = data[key]
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
                math.isfinite(value) and 0.0 <= value <= 1.0
            ):
                raise ThemeFileError(f"{path}: {key} must be a number in 0..1, got {value!r}")
            kwargs[key] = float(value)
    for key in _BOOL_FIELDS:
        if key in data:
            if not isinstance(data[key], bool):
                raise ThemeFileError(f"{path}: {key} must be true or false, got {data[key]!r}")
            kwargs[key] = data[key]
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ThemeFileError(f"{path}: [variables] must be a table of name = \"value\"")
    kwargs["variables"] = {key: _check_variable(path, key, value) for key, value in variables.items()}
    try:
        theme = Theme(**kwargs)  # type: ignore[arg-type]
        theme.to_color_system().generate()  # what Textual computes when the theme is applied
    except Exception as exc:  # Theme validates little itself; keep the app alive whatever it raises
        raise ThemeFileError(f"{path}: not a valid theme ({exc}); fix the colours or remove the file") from None
    return theme


def theme_dirs(user_config_dir: Path | None) -> list[Traversable]:
    """Where themes are looked for, lowest precedence first (a user theme may replace a built-in one)."""
    dirs: list[Traversable] = [BUILTIN_THEMES_DIR]
    if user_config_dir is not None:
        dirs.append(user_config_dir / "themes")
    return dirs


def load_themes(dirs: list[Traversable]) -> ThemeLoadResult:
    """Load every ``*.toml`` in ``dirs`` (missing dirs are fine); bad files go to ``errors``."""
    result = ThemeLoadResult()
    by_name: dict[str, Theme] = {}
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted((p for p in directory.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name):
            try:
                theme = load_theme_file(path)
            except ThemeFileError as exc:
                result.errors.append(str(exc))
                continue
            by_name[theme.name] = theme
    result.themes = list(by_name.values())
    return result
