"""Everything a user may set: the :class:`Settings` model, its value types and limits, and the rules of the
settings that name a llama-server.

:class:`Settings` is a pydantic-settings model, but constructing it directly validates exactly what it
is given (defaults + keyword arguments): it does not read the environment or any file, so library code
and tests get deterministic values. :func:`specchat.config.load_settings` is the one place that reads the
file and the environment (:mod:`specchat.config.sources`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from specchat.engine.drafter_kinds import K_MAX, NGRAM, NONE, SUFFIX
from specchat.errors import UserError

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


class SuffixSettings(BaseModel):
    """The suffix drafter (``draft = "suffix"``): prompt lookup over the conversation plus an index of every saved
    conversation in the history (:mod:`specchat.history.corpus`); its lengths follow SuffixDecoding (Oliaro et al.
    2024; ArcticInference's defaults: ``max_spec_factor`` 1.0, ``min_token_prob`` 0.1)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    corpus: bool = Field(True, description="draft from the saved conversations too; false = this conversation only")
    exclude: list[Int] = Field(default_factory=list, description="conversation IDs never drafted from")
    max_spec_factor: Float = Field(1.0, gt=0.0, le=16.0, description="a history draft is at most this x its match length")
    min_token_prob: Float = Field(0.1, ge=0.0, le=1.0, description="drop draft tokens less frequent than this")


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


def default_threads() -> int:
    """The CPU count (1 when unknown): the default of ``threads``."""
    return os.cpu_count() or 1


#: llama.cpp's own ceiling (``GGML_MAX_N_THREADS`` in ggml.h): more threads overrun its fixed-size arrays
GGML_MAX_N_THREADS = 512
#: The most CPU threads a setting may ask for: 4 x the CPU count, at most GGML_MAX_N_THREADS. llama.cpp starts
#: exactly that many compute threads, which meet at a barrier after every operation, so threads beyond the
#: cores only wait for each other (README: with threads = cores, one other busy process already collapses
#: the speed); 4 x still allows oversubscription experiments and CPU counts that undercount (cgroups). The
#: issue's tester measured the failure modes: --threads 4096 took ~108 s for 2 tokens, --threads 100000
#: segfaulted with no message.
MAX_THREADS = min(GGML_MAX_N_THREADS, 4 * default_threads())


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
    draft: Text = Field(NGRAM, min_length=1, description=f"path | preset or derived name | {NGRAM} | {SUFFIX} | {NONE} | "
                        f"a chain: {SUFFIX},DRAFT")
    k: Int = Field(3, ge=0, le=K_MAX, description="draft length K")
    auto_k: bool = Field(True, description="let the cost model choose K")
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    ngram: NgramSettings = Field(default_factory=NgramSettings)
    suffix: SuffixSettings = Field(default_factory=SuffixSettings)
    threads: Int = Field(
        default_factory=default_threads, ge=1, le=MAX_THREADS,
        description=f"CPU threads for llama.cpp (at most 4 x the {default_threads()} CPUs here)",
    )
    threads_batch: Int | None = Field(
        None, ge=1, le=MAX_THREADS, description="CPU threads for multi-row batches (prompt, verify); unset = threads"
    )
    repack: Repack = Field(
        "auto", description="llama.cpp's repacked/AMX weight layouts: auto (on where they pay, or as 'models tune' "
        "measured this file here), on, off"
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


#: a setting's path: ``("k",)``, ``("sampling", "top_k")``, ``("keymap", "alt+up")``
Key = tuple[str, ...]
