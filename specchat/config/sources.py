"""Where each value comes from: the config file's location, the layers (file, environment, command line)
read one at a time with their provenance, and the effective settings with the source of every value.

Precedence, lowest to highest (the usual order of Python tools, e.g. pydantic-settings' own
``init > env > file`` ordering):

1. the defaults (:class:`~specchat.config.schema.Settings`),
2. the TOML file: ``--config PATH``, else ``$SPECCHAT_CONFIG``, else
   ``platformdirs.user_config_path("specchat") / "config.toml"`` (a missing *default* file is fine;
   a missing file that was asked for by name is an error),
3. ``SPECCHAT_*`` environment variables, nested with ``__`` (``SPECCHAT_K=5``,
   ``SPECCHAT_SAMPLING__TEMPERATURE=0.7``; a table may also be given whole as JSON:
   ``SPECCHAT_KEYMAP='{"alt+up": "k_up"}'``),
4. command-line flags, passed to :func:`load_settings` as ``overrides``.

Tables (``sampling``, ``ngram``, ``keymap``) merge key by key across the layers, so a file may set
``sampling.top_k`` and the environment ``sampling.temperature``.

:func:`load_settings` is the one place that reads the file and the environment, each with pydantic-settings'
own source (``TomlConfigSettingsSource``, ``EnvSettingsSource`` with the ``SPECCHAT_`` prefix and ``__``
nesting), one at a time: on top of them it records where every value came from (``specchat config show``),
and turns a validation failure into one :class:`~specchat.errors.UserError` line naming the key, the file or
variable, and the allowed values (:mod:`specchat.config.explain`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import ValidationError
from pydantic_core import PydanticCustomError
from pydantic_settings import EnvSettingsSource, TomlConfigSettingsSource

from specchat.config.explain import describe_error, field_info
from specchat.config.schema import (
    APP_NAME,
    CONFIG_ENV,
    CONFIG_FILENAME,
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    STATE_FILENAME,
    ConfigError,
    Key,
    Settings,
    expand_user,
)
from specchat.config.show import effective_keys


# -- where the file is ------------------------------------------------------------------------------

ConfigOrigin = Literal["--config", "SPECCHAT_CONFIG", "default"]


@dataclass(frozen=True)
class ConfigLocation:
    path: Path
    origin: ConfigOrigin  # who chose the path

    @property
    def exists(self) -> bool:
        return self.path.is_file()

    @property
    def explicit(self) -> bool:
        return self.origin != "default"

    def describe_origin(self) -> str:
        return {
            "--config": "given by --config",
            "SPECCHAT_CONFIG": f"given by ${CONFIG_ENV}",
            "default": "the user config dir",
        }[self.origin]


def default_config_path() -> Path:
    return platformdirs.user_config_path(APP_NAME, appauthor=False) / CONFIG_FILENAME


def state_path(config_path: str | os.PathLike | None = None) -> Path:
    """Where the app remembers its theme and sidebar: next to the config file in effect (specchat.tui.state)."""
    return locate_config(config_path).path.parent / STATE_FILENAME


def locate_config(config_path: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> ConfigLocation:
    """Where the config file is looked for: ``--config``, else ``$SPECCHAT_CONFIG``, else the user config dir."""
    environ = os.environ if environ is None else environ
    try:
        if config_path not in (None, ""):
            return ConfigLocation(expand_user(config_path), "--config")
        from_env = environ.get(CONFIG_ENV, "")
        if from_env:
            return ConfigLocation(expand_user(from_env), "SPECCHAT_CONFIG")
    except PydanticCustomError as exc:
        origin = "--config" if config_path not in (None, "") else f"${CONFIG_ENV}"
        raise ConfigError(f"config error: config file {exc.message()} ({origin})") from None
    return ConfigLocation(default_config_path(), "default")


# -- reading the layers -----------------------------------------------------------------------------


@dataclass
class Layer:
    """Values from one source, nested like the model, and a label for every leaf."""

    kind: Literal["file", "env", "cli"]
    data: dict[str, Any] = field(default_factory=dict)
    labels: dict[Key, str] = field(default_factory=dict)  # leaf key -> "file /p", "env SPECCHAT_K", "cli"
    where: dict[Key, str] = field(default_factory=dict)  # leaf key -> phrase for error messages


_TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")


def read_toml(path: Path, origin: str) -> dict[str, Any]:
    """Parse a TOML file, turning every failure into one ConfigError line (file, line, column)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"config error: config file {path} not found ({origin}); check the path, "
            f"or create it from config.example.toml"
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            f"config error: {path} is a directory, not a config file ({origin}); remove it, or give a file with --config"
        ) from None
    except OSError as exc:
        raise ConfigError(f"config error: cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"config error: {path}:{line}: not valid UTF-8; save the file as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POS.search(message)
        if match:
            reason = message[: match.start()]
            pos = f"line {match.group(1)}, column {match.group(2)}"
        else:
            reason = message.replace("(at end of document)", "").strip()
            pos = "the end of the file"
        raise ConfigError(f"config error: {path}: invalid TOML at {pos}: {reason}; fix the file") from None


def _leaves(data: Any, prefix: Key = ()) -> list[Key]:
    """Keys of the values in ``data``; an empty ``sampling``/``ngram``/``suffix`` table sets nothing."""
    if isinstance(data, dict):
        if not data:
            return [] if prefix in (("sampling",), ("ngram",), ("suffix",)) else [prefix]
        out: list[Key] = []
        for key, value in data.items():
            out.extend(_leaves(value, prefix + (str(key),)))
        return out
    return [prefix]


def _label(layer: Layer, data: Any, prefix: Key, label: str, where: str) -> None:
    for key in _leaves(data, prefix):
        if key:
            layer.labels[key] = label
            layer.where[key] = where


class _TomlFileSource(TomlConfigSettingsSource):
    """pydantic-settings' TOML file source, reading the file through :func:`read_toml` (one-line errors that
    name the file, line and column, instead of tomllib's exception)."""

    def __init__(self, location: ConfigLocation) -> None:
        self._origin = location.describe_origin()
        super().__init__(Settings, toml_file=location.path)

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        return read_toml(Path(str(file_path)), self._origin)


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source (``SPECCHAT_`` prefix, ``__`` nesting, names in any case, a
    table whole as JSON) over the given variables rather than always ``os.environ``."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(
            Settings, case_sensitive=False, env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED_DELIMITER
        )

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in self._environ.items()}


def _file_layer(location: ConfigLocation) -> Layer | None:
    if not location.exists:
        # a missing default file is fine; anything else there (a directory...) is an error, never "missing"
        if location.explicit or os.path.lexists(location.path):
            read_toml(location.path, location.describe_origin())  # raises "not found" / "is a directory"
        return None
    data = _TomlFileSource(location)()
    data_dir = data.get("data_dir")
    if isinstance(data_dir, str) and data_dir and not data_dir.startswith("~") and not Path(data_dir).is_absolute():
        # a relative data_dir in a file means "next to this file", wherever specchat is started from
        data["data_dir"] = str(location.path.parent.absolute() / data_dir)
    layer = Layer("file", data)
    _label(layer, data, (), f"file {location.path}", f"in {location.path}")
    return layer


_TABLE_FIELDS = ("sampling", "ngram", "suffix", "keymap")


def _field_allows_none(key: Key) -> bool:
    info = field_info(key)
    return info is not None and info.default is None and not info.is_required()


def _env_names(environ: Mapping[str, str]) -> tuple[dict[Key, str], list[str]]:
    """The variable behind each key the environment sets (``("sampling", "seed")`` -> its name), and the
    ``SPECCHAT_*`` variables that name no setting (ignored: other tools may share the prefix).

    Raises :class:`ConfigError` for the mistakes pydantic-settings' env source lets through or reports
    without the variable's name: a sub-key of a setting that is not a table (it ignores it), a key nested
    deeper than a table's (it nests it deeper), a table given whole that is not a JSON object (it raises
    "error parsing value for field").
    """
    names: dict[Key, str] = {}
    ignored: list[str] = []
    for name in sorted(environ):
        if not name.upper().startswith(ENV_PREFIX) or name.upper() == CONFIG_ENV:
            continue
        key = tuple(name[len(ENV_PREFIX):].lower().split(ENV_NESTED_DELIMITER))
        top = key[0]
        if top not in Settings.model_fields:
            ignored.append(name)
            continue
        if top not in _TABLE_FIELDS and len(key) > 1:
            raise ConfigError(
                f"config error: environment variable {name}: {top} is not a table; use {ENV_PREFIX}{top.upper()}=<value>"
            )
        if len(key) > 2 or (len(key) == 2 and not key[1]):
            raise ConfigError(
                f"config error: environment variable {name} nests too deep; use {ENV_PREFIX}{top.upper()}__<KEY>"
            )
        if len(key) == 1 and top in _TABLE_FIELDS:
            raw = environ[name]
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"config error: {top} from environment variable {name} is not a JSON object "
                    f"({exc.msg}); set {name}='{{\"key\": value}}' or use {ENV_PREFIX}{top.upper()}__<KEY>"
                ) from None
            if not isinstance(value, dict):
                raise ConfigError(
                    f"config error: {top} from environment variable {name} must be a JSON object, got {raw!r}"
                )
        names[key] = name
    return names, ignored


def _env_layer(environ: Mapping[str, str]) -> tuple[Layer, list[str]]:
    """What pydantic-settings' env source reads from ``environ`` (:class:`_EnvSource`), each value labelled
    with its variable, and the ignored variables (:func:`_env_names`). An empty variable unsets a setting
    that may be unset (``SPECCHAT_SERVER_URL=""``); for any other it is the value ``""``."""
    names, ignored = _env_names(environ)
    data = _EnvSource(environ)()
    layer = Layer("env", data)
    for key in filter(None, _leaves(data)):  # (the root of an empty layer is no key)
        if key in names and _get_leaf(data, key) == "" and _field_allows_none(key):
            _set_leaf(data, key, None)
        name = next(names[key[:i]] for i in range(len(key), 0, -1) if key[:i] in names)
        layer.labels[key] = f"env {name}"
        layer.where[key] = f"from environment variable {name}"
    return layer, ignored


def _get_leaf(data: dict[str, Any], key: Key) -> Any:
    for part in key:
        data = data[part]
    return data


def _set_leaf(data: dict[str, Any], key: Key, value: Any) -> None:
    for part in key[:-1]:
        data = data[part]
    data[key[-1]] = value


def _normalise_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Accept nested dicts and dotted keys (``{"sampling.top_k": 5}``); ``None`` means "flag not given"."""
    out: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        path = str(key).split(".")
        if isinstance(value, Mapping):
            value = _normalise_overrides({f"{k}": v for k, v in value.items()})
            if not value:
                continue
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        if isinstance(value, dict) and isinstance(node.get(path[-1]), dict):
            node[path[-1]].update(value)
        else:
            node[path[-1]] = value
    return out


def _cli_layer(overrides: Mapping[str, Any] | None) -> Layer:
    data = _normalise_overrides(overrides)
    layer = Layer("cli", data)
    _label(layer, data, (), "cli", "from the command line")
    return layer


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# -- the effective settings -------------------------------------------------------------------------


@dataclass
class LoadedSettings:
    """The effective settings plus where every value came from (for ``specchat config show``)."""

    settings: Settings
    location: ConfigLocation
    file_loaded: bool
    sources: dict[Key, str]  # leaf key -> "default" | "file PATH" | "env VAR" | "cli"
    ignored_env: list[str]


def settings_sources(
    config_path: str | os.PathLike | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedSettings:
    """Load the layers, validate, and record the source of every effective value."""
    environ = os.environ if environ is None else environ
    location = locate_config(config_path, environ)
    layers: list[Layer] = []
    file_layer = _file_layer(location)
    if file_layer is not None:
        layers.append(file_layer)
    env_layer, ignored = _env_layer(environ)
    layers.append(env_layer)
    layers.append(_cli_layer(overrides))

    merged: dict[str, Any] = {}
    for layer in layers:
        merged = _merge(merged, layer.data)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        errors = exc.errors()
        line = describe_error(errors[0], layers)
        if len(errors) > 1:
            line += f" (and {len(errors) - 1} more)"
        raise ConfigError(line) from None

    sources: dict[Key, str] = {}
    for key in effective_keys(settings):
        sources[key] = "default"
        for layer in layers:
            for lk, label in layer.labels.items():
                if lk == key or lk[: len(key)] == key or key[: len(lk)] == lk:
                    sources[key] = label
    return LoadedSettings(settings, location, file_layer is not None, sources, ignored)


def load_settings(
    config_path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None
) -> Settings:
    """Defaults < TOML file < ``SPECCHAT_*`` env < ``overrides`` (explicitly given CLI flags).

    ``overrides`` is nested like the model (``{"sampling": {"temperature": 0.7}}``) or uses dotted keys
    (``{"sampling.temperature": 0.7}``); ``None`` values are skipped (the flag was not given).
    Raises :class:`ConfigError` (a :class:`UserError`) with one line on any bad value.
    """
    return settings_sources(config_path, overrides).settings
