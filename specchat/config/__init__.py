"""Everything a user may set, and where each value came from.

One concept per module:

* :mod:`~specchat.config.schema` - the :class:`Settings` model (field names are the TOML keys), its value
  types and limits, and the server settings' rules (:func:`server_pair`, :func:`refuse_local_flags`);
* :mod:`~specchat.config.sources` - where the file is (:func:`locate_config`), the layers read with their
  provenance (defaults < TOML file < ``SPECCHAT_*`` env < command-line flags), and :func:`load_settings`;
* :mod:`~specchat.config.explain` - a bad value as one error line naming the key, its source and what it
  accepts (:func:`allowed_values`);
* :mod:`~specchat.config.show` - the settings as TOML (``specchat config show``: :func:`toml_value`,
  :func:`toml_key`).

The names below are the package's public API; import them from here.
"""

from specchat.config.explain import allowed_values
from specchat.config.schema import (
    APP_NAME,
    CONFIG_ENV,
    CONFIG_FILENAME,
    ENV_NESTED_DELIMITER,
    ENV_PREFIX,
    EXPORTS_DIRNAME,
    GGML_MAX_N_THREADS,
    HISTORY_FILENAME,
    KEYMAP_FORMS,
    MAX_THREADS,
    NGRAM_N_MAX,
    SERVER_URL_RULE,
    STATE_FILENAME,
    ConfigError,
    FlashAttn,
    Key,
    NgramSettings,
    Repack,
    SamplingSettings,
    Settings,
    check_server_url,
    expand_user,
    refuse_local_flags,
    server_pair,
)
from specchat.config.show import effective_keys, field_paths, get_value, toml_key, toml_value
from specchat.config.sources import (
    ConfigLocation,
    ConfigOrigin,
    LoadedSettings,
    default_config_path,
    load_settings,
    locate_config,
    read_toml,
    settings_sources,
    state_path,
)

__all__ = [
    "APP_NAME",
    "CONFIG_ENV",
    "CONFIG_FILENAME",
    "ENV_NESTED_DELIMITER",
    "ENV_PREFIX",
    "EXPORTS_DIRNAME",
    "GGML_MAX_N_THREADS",
    "HISTORY_FILENAME",
    "KEYMAP_FORMS",
    "MAX_THREADS",
    "NGRAM_N_MAX",
    "SERVER_URL_RULE",
    "STATE_FILENAME",
    "ConfigError",
    "ConfigLocation",
    "ConfigOrigin",
    "FlashAttn",
    "Key",
    "LoadedSettings",
    "NgramSettings",
    "Repack",
    "SamplingSettings",
    "Settings",
    "allowed_values",
    "check_server_url",
    "default_config_path",
    "effective_keys",
    "expand_user",
    "field_paths",
    "get_value",
    "load_settings",
    "locate_config",
    "read_toml",
    "refuse_local_flags",
    "server_pair",
    "settings_sources",
    "state_path",
    "toml_key",
    "toml_value",
]
