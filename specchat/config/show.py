"""The settings as TOML: every key in model order, its value as a TOML literal, its dotted name (``specchat
config show`` prints them with their sources)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from specchat.config.schema import Key, Settings
from specchat.sanitize import json_text


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
    if isinstance(value, (list, tuple)):  # suffix.exclude
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def toml_key(key: Key) -> str:
    bare = re.compile(r"^[A-Za-z0-9_-]+$")
    return ".".join(part if bare.match(part) else json_text(part) for part in key)
