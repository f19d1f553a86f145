"""Everything a user may set, and where each value came from.

Precedence, lowest to highest (the usual order of Python tools, e.g. pydantic-settings' own
``init > env > file`` ordering):

1. the defaults below,
2. the TOML file: ``--config PATH``, else ``$SPECCHAT_CONFIG``, else
   ``platformdirs.user_config_path("specchat") / "config.toml"`` (a missing *default* file is fine;
   a missing file that was asked for by name is an error),
3. ``SPECCHAT_*`` environment variables, nested with ``__`` (``SPECCHAT_K=5``,
   ``SPECCHAT_SAMPLING__TEMPERATURE=0.7``; a table may also be given whole as JSON:
   ``SPECCHAT_KEYMAP='{"alt+up": "k_up"}'``),
4. command-line flags, passed to :func:`load_settings` as ``overrides``.

Tables (``sampling``, ``ngram``, ``keymap``) merge key by key across the layers, so a file may set
``sampling.top_k`` and the environment ``sampling.temperature``.

:class:`Settings` is a pydantic-settings model, but constructing it directly validates exactly what it
is given (defaults + keyword arguments): it does not read the environment or any file, so library code
and tests get deterministic values. :func:`load_settings` is the one place that reads the file and the
environment, each with pydantic-settings' own source (``TomlConfigSettingsSource``, ``EnvSettingsSource``
with the ``SPECCHAT_`` prefix and ``__`` nesting), one at a time: on top of them it records where every
value came from (``specchat config show``), and turns a validation failure into one
:class:`~specchat.errors.UserError` line naming the key, the file or variable, and the allowed values.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import platformdirs
from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from specchat.engine.controls import SamplingParams
from specchat.engine.drafter_kinds import K_MAX, NGRAM, NONE
from specchat.errors import UserError
from specchat.sanitize import json_text

APP_NAME = "specchat"
ENV_PREFIX = "SPECCHAT_"
ENV_NESTED_DELIMITER = "__"
CONFIG_ENV = "SPECCHAT_CONFIG"  # where the file is; not a setting itself
CONFIG_FILENAME = "config.toml"
HISTORY_FILENAME = "history.sqlite3"
EXPORTS_DIRNAME = "exports"
STATE_FILENAME = "ui-state.json"  # the app's remembered theme and sidebar (specchat.tui.state)


class ConfigError(UserError):
    """A config file, environment variable or flag holds a value specchat cannot use."""


# -- value types -------------------------------------------------------------------------------------


def _reject_bool(value: Any) -> Any:
    # pydantic's lax mode turns ``true`` into 1; in a config file that is always a mistake.
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


Int = Annotated[int, BeforeValidator(_reject_bool)]
Float = Annotated[float, BeforeValidator(_reject_bool)]


def _valid_unicode(value: str) -> str:
    # A command-line argument or environment variable that is not UTF-8 reaches Python as lone surrogates
    # (surrogateescape): no tokenizer, file or terminal can encode them.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PydanticCustomError(
            "not_utf8", "not valid UTF-8 text (a byte {byte}); give UTF-8 text",
            {"byte": f"0x{ord(value[exc.start]) & 0xFF:02x}"},
        ) from None
    return value


Text = Annotated[str, AfterValidator(_valid_unicode)]


class SamplingSettings(BaseModel):
    """Warping shared by target and draft (see :class:`specchat.engine.controls.SamplingParams`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    temperature: Float = Field(0.0, ge=0.0, le=5.0, description="0 = greedy (argmax)")
    top_k: Int = Field(40, ge=0, description="keep the k most likely tokens; 0 = off")
    top_p: Float = Field(0.95, gt=0.0, le=1.0, description="nucleus sampling mass; 1 = off")
    seed: Int | None = Field(None, ge=0, description="RNG seed; unset = a fresh seed per run")

    def to_params(self) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature, top_k=self.top_k, top_p=self.top_p, seed=self.seed
        )


NGRAM_N_MAX = 16


class NgramSettings(BaseModel):
    """Prompt-lookup (n-gram) drafter: match the last n tokens (max_n down to min_n) earlier in the context."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    min_n: Int = Field(1, ge=1, le=NGRAM_N_MAX, description="shortest suffix to look up")
    max_n: Int = Field(4, ge=1, le=NGRAM_N_MAX, description="longest suffix to look up")

    @model_validator(mode="after")
    def _ordered(self) -> NgramSettings:
        if self.min_n > self.max_n:
            raise ValueError(f"min_n ({self.min_n}) must not exceed max_n ({self.max_n})")
        return self


#: ``repack``: put the target's weights in llama.cpp's extra buffer types (its ``--repack``), see
#: :func:`specchat.loading.repack_for` for what ``auto`` chooses
Repack = Literal["auto", "on", "off"]

#: ``flash_attn``: llama.cpp's flash-attention kernel (its ``--flash-attn``): "auto" (llama.cpp's choice: on
#: for the CPU; the default), "on", or "off" (see :data:`specchat.engine.model.FLASH_ATTN_MEASURED`)
FlashAttn = Literal["auto", "on", "off"]

#: what ``server_url`` accepts, for its error line
SERVER_URL_RULE = "must be a llama-server's base URL: http:// or https://, a host and an optional port, e.g. http://127.0.0.1:8080"


def check_server_url(value: str) -> str:
    """``value`` without a trailing slash if it is an http(s) URL with a host (a path prefix is allowed, for a
    server behind a proxy), else ValueError with :data:`SERVER_URL_RULE`."""
    from urllib.parse import urlsplit

    text = value.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError for a port that is not 0..65535
    except ValueError:
        raise ValueError(SERVER_URL_RULE) from None
    if (
        parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment
        or port == 0 or any(c.isspace() for c in text)
    ):
        raise ValueError(SERVER_URL_RULE)
    return text.rstrip("/")


def refuse_local_flags(args: Any, server_url: str, flags: tuple[tuple[str, str], ...]) -> None:
    """A flag that sets the local models or speculation would do nothing with a llama-server: say so.

    ``flags`` are ``(flag, argparse destination)`` pairs; a destination that is ``None`` or ``False`` was not given.
    """
    for flag, dest in flags:
        if getattr(args, dest, None) not in (None, False):
            raise UserError(
                f"{flag} does not apply to a llama-server ({server_url}): its models, K and speculation are "
                "set by its own flags (-m, --spec-type, --spec-draft-model, --spec-draft-n-max); drop "
                f"{flag}, or unset --server / server_url to run here"
            )


def server_pair(settings: Settings) -> tuple[str, str] | None:
    """``(server A, server B)`` when ``server_b_url`` is set, else None; server B without server A is a
    :class:`UserError` (server B is only ever compared with server A)."""
    if not settings.server_b_url:
        return None
    if not settings.server_url:
        raise UserError(
            f"server B ({settings.server_b_url}, from --server-b, server_b_url or SPECCHAT_SERVER_B_URL) is "
            "compared with server A, and none is set: give --server URL (or server_url) too"
        )
    return settings.server_url, settings.server_b_url


def _default_threads() -> int:
    return os.cpu_count() or 1


#: llama.cpp's own ceiling (``GGML_MAX_N_THREADS`` in ggml.h): more threads overrun its fixed-size arrays
GGML_MAX_N_THREADS = 512
#: The most CPU threads a setting may ask for: 4 x the CPU count, at most GGML_MAX_N_THREADS. llama.cpp starts
#: exactly that many compute threads, which meet at a barrier after every operation, so threads beyond the
#: cores only wait for each other (README: with threads = cores, one other busy process already collapses
#: the speed); 4 x still allows oversubscription experiments and CPU counts that undercount (cgroups). The
#: issue's tester measured the failure modes: --threads 4096 took ~108 s for 2 tokens, --threads 100000
#: segfaulted with no message.
MAX_THREADS = min(GGML_MAX_N_THREADS, 4 * _default_threads())


#: the two forms of a ``keymap`` entry (see :mod:`specchat.tui.keys`), for its description and its errors
KEYMAP_FORMS = 'binding-id = "keys" (Textual\'s form: k_up = "f4,alt+up") or "key" = "binding-id" ("alt+up" = "k_up")'


class Settings(BaseSettings):
    """One model for everything a user may set. Field names are the TOML keys.

    ``Settings(**values)`` validates ``values`` over the defaults and reads nothing else; use
    :func:`load_settings` to apply the config file, the environment and command-line flags.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        validate_assignment=True,
    )

    target: Text = Field("bundled", min_length=1, description="path | preset or derived name | bundled")
    draft: Text = Field(NGRAM, min_length=1, description=f"path | preset or derived name | {NGRAM} | {NONE}")
    k: Int = Field(3, ge=0, le=K_MAX, description="draft length K")
    auto_k: bool = Field(True, description="let the cost model choose K")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    ngram: NgramSettings = Field(default_factory=NgramSettings)
    threads: Int = Field(
        default_factory=_default_threads, ge=1, le=MAX_THREADS,
        description=f"CPU threads for llama.cpp (at most 4 x the {_default_threads()} CPUs here)",
    )
    threads_batch: Int | None = Field(
        None, ge=1, le=MAX_THREADS, description="CPU threads for multi-row batches (prompt, verify); unset = threads"
    )
    repack: Repack = Field(
        "auto", description="llama.cpp's repacked/AMX weight layouts: auto (on where they pay), on, off"
    )
    flash_attn: FlashAttn = Field(
        "auto", description="llama.cpp's flash attention: auto (llama.cpp's choice), on, off (faster on a CPU past a short context)"
    )
    n_ctx: Int = Field(4096, ge=64, description="context length in tokens")
    n_predict: Int = Field(512, ge=1, description="maximum tokens per reply")
    system_prompt: Text = Field("", description="system message of a new conversation")
    theme: Text = Field("specchat-dark", min_length=1, description="TUI theme name")
    keymap: dict[Text, Text] = Field(
        default_factory=dict,
        description=f"the TUI's key overrides, each entry either {KEYMAP_FORMS}; binding ids: F1 in the app",
    )
    data_dir: Path | None = Field(None, description="models, history; unset = the user data dir")
    server_url: Text | None = Field(
        None, description="a llama-server's base URL (http://host:port): it generates the replies; unset = local"
    )
    server_b_url: Text | None = Field(
        None,
        description="a second llama-server (server B), raced and benched against server_url (server A); unset = none",
    )

    @field_validator("server_url", "server_b_url")
    @classmethod
    def _server_url(cls, value: str | None) -> str | None:
        return None if value is None else check_server_url(value)

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: Path | None) -> Path | None:
        if value is not None:
            expand_user(value)  # "~nosuchuser/..." is a bad value here, not a traceback wherever it is used
        return value

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ):
        # Only what the caller passes. settings_sources() runs pydantic-settings' TOML and env sources itself,
        # one at a time, so that every value keeps the name of its file or variable (``config show``) and an
        # error names them; merged here, the sources' values would arrive without their origins.
        return (init_settings,)

    def effective_data_dir(self) -> Path:
        """``data_dir`` if set (``~`` expanded), else the platform's user data dir. Not created here."""
        if self.data_dir is not None:
            return self.data_dir.expanduser()
        return platformdirs.user_data_path(APP_NAME, appauthor=False)

    def history_path(self) -> Path:
        """The conversation database: ``<data dir>/history.sqlite3``."""
        return self.effective_data_dir() / HISTORY_FILENAME

    def exports_dir(self) -> Path:
        """Where the app writes exports (ctrl+s, the history browser): ``<data dir>/exports``. Not created here."""
        return self.effective_data_dir() / EXPORTS_DIRNAME


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


def expand_user(path: str | os.PathLike) -> Path:
    """``Path(path).expanduser()``, or a one-line error when ``~user`` names no user (pathlib raises
    RuntimeError, which reached the terminal as a traceback)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise PydanticCustomError(
            "unknown_user", "{path}: the home directory of {user} is not known; give the path in full",
            {"path": str(path), "user": str(path).split("/", 1)[0]},
        ) from None


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

Key = tuple[str, ...]


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
    """Keys of the values in ``data``; an empty ``sampling``/``ngram`` table sets nothing."""
    if isinstance(data, dict):
        if not data:
            return [] if prefix in (("sampling",), ("ngram",)) else [prefix]
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


_TABLE_FIELDS = ("sampling", "ngram", "keymap")


def _field_allows_none(key: Key) -> bool:
    info = _field_info(key)
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


# -- describing errors ------------------------------------------------------------------------------


def _field_info(key: Key):
    model: type[BaseModel] = Settings
    info = None
    for part in key:
        if model is None:
            return None
        info = model.model_fields.get(part)
        if info is None:
            return None
        ann = info.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None  # type: ignore[assignment]
    return info


def _fmt_number(x: Any) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def allowed_values(key: Key) -> str:
    """Human description of what ``key`` accepts, derived from the model's constraints."""
    if key[:1] == ("keymap",) and len(key) == 2:
        return f"must be a string: an entry is {KEYMAP_FORMS}"
    if key in (("server_url",), ("server_b_url",)):
        return SERVER_URL_RULE
    info = _field_info(key)
    if info is None:
        return ""
    ann = info.annotation
    optional = False
    args = getattr(ann, "__args__", ())
    if type(None) in args:
        optional = True
        ann = next(a for a in args if a is not type(None))
    if get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    if ann is bool:
        return "must be true or false"
    if get_origin(ann) is Literal:
        return "must be one of " + ", ".join(json.dumps(a) for a in get_args(ann))
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return f"must be a table with keys {', '.join(ann.model_fields)}"
    if ann in (dict, dict[str, str]) or getattr(ann, "__origin__", None) is dict:
        return f"must be a table of strings, each entry {KEYMAP_FORMS}"
    if ann is Path:
        return "must be a directory path" + (" (or unset)" if optional else "")
    if ann is str:
        return "must be a non-empty string" if any(getattr(m, "min_length", 0) for m in info.metadata) else "must be a string"
    kind = "an integer" if ann is int else "a number"
    lo = hi = None
    lo_open = hi_open = False
    for m in info.metadata:
        if getattr(m, "ge", None) is not None:
            lo = m.ge
        if getattr(m, "gt", None) is not None:
            lo, lo_open = m.gt, True
        if getattr(m, "le", None) is not None:
            hi = m.le
        if getattr(m, "lt", None) is not None:
            hi, hi_open = m.lt, True
    if lo is not None and hi is not None:
        if lo_open or hi_open:
            text = f"{kind} in {'(' if lo_open else '['}{_fmt_number(lo)}, {_fmt_number(hi)}{')' if hi_open else ']'}"
        else:
            text = f"{kind} in {_fmt_number(lo)}..{_fmt_number(hi)}"
    elif lo is not None:
        text = f"{kind} {'>' if lo_open else '>='} {_fmt_number(lo)}"
    elif hi is not None:
        text = f"{kind} {'<' if hi_open else '<='} {_fmt_number(hi)}"
    else:
        text = kind
    if key == ("threads",):
        text += f" (at most 4 x the {_default_threads()} CPUs here: more threads only wait for each other)"
    return f"must be {text}" + (" (or unset)" if optional else "")


def _fmt_value(value: Any, from_env: bool) -> str:
    if from_env and isinstance(value, str):
        return value if value else '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return str(value).lower()
    if isinstance(value, dict):
        return "{...}"
    return str(value)


def _valid_keys(parent: Key) -> list[str]:
    if not parent:
        return list(Settings.model_fields)
    info = _field_info(parent)
    ann = info.annotation if info is not None else None
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return list(ann.model_fields)
    return []


def _origin_of(key: Key, layers: list[Layer]) -> tuple[str, bool]:
    """Phrase for where ``key`` (or a value under or above it) was set; highest layer first."""
    for related in (
        lambda lk: lk == key,
        lambda lk: lk[: len(key)] == key,  # something under it (a table-level error)
        lambda lk: key[: len(lk)] == lk,  # something above it (a whole table set at once)
    ):
        for layer in reversed(layers):
            for lk, where in layer.where.items():
                if related(lk):
                    return where, layer.kind == "env"
    return "in the defaults", False


def _describe_error(err: dict, layers: list[Layer]) -> str:
    key: Key = tuple(str(p) for p in err["loc"])
    dotted = toml_key(key)
    where, from_env = _origin_of(key, layers)
    if err["type"] == "extra_forbidden":
        parent, name = key[:-1], key[-1]
        valid = _valid_keys(parent)
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f"did you mean {'.'.join(parent + (close[0],))!r}? " if close else ""
        table = f"[{'.'.join(parent)}] " if parent else ""
        return f"config error: unknown key {dotted!r} {where}: {hint}valid {table}keys are {', '.join(valid)}"
    value = _fmt_value(err.get("input"), from_env)
    allowed = allowed_values(key)
    info = _field_info(key)
    is_table = info is not None and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    if is_table and err["type"] == "value_error":  # a rule across the table's keys
        return f"config error: [{dotted}] {where}: {err['msg'].removeprefix('Value error, ')}"
    if err["type"] in ("not_utf8", "unknown_user"):  # the validator's own sentence
        allowed = err["msg"]
    if not allowed:
        allowed = err["msg"]
    return f"config error: {dotted} = {value} {where}: {allowed}"


# -- the public API ---------------------------------------------------------------------------------


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
        line = _describe_error(errors[0], layers)
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


def effective_keys(settings: Settings) -> list[Key]:
    """Every leaf of the settings in model order; keymap entries are leaves of their own."""
    keys: list[Key] = []
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, BaseModel):
            keys.extend((name, sub) for sub in type(value).model_fields)
        elif name == "keymap" and value:
            keys.extend((name, k) for k in value)
        else:
            keys.append((name,))
    return keys


def field_paths(model: type[BaseModel] = Settings, prefix: Key = ()) -> list[Key]:
    """All field paths of the model, recursing into nested models (``keymap`` is one path)."""
    out: list[Key] = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(field_paths(ann, prefix + (name,)))
        else:
            out.append(prefix + (name,))
    return out


def get_value(settings: Settings, key: Key) -> Any:
    value: Any = settings
    for part in key:
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def toml_value(value: Any) -> str:
    """A TOML literal for a settings value (``None`` has no TOML form and returns ``""``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):  # a JSON string is a TOML basic string; C1/bidi as \uXXXX: safe on a terminal
        return json_text(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json_text(k)} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"no TOML form for {value!r}")


def toml_key(key: Key) -> str:
    bare = re.compile(r"^[A-Za-z0-9_-]+$")
    return ".".join(part if bare.match(part) else json_text(part) for part in key)
