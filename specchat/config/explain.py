"""Error text: a validation failure of the settings as one :class:`~specchat.config.schema.ConfigError` line
naming the key, the file or variable it came from, and the allowed values (derived from the model's
constraints: :func:`allowed_values`)."""

from __future__ import annotations

import difflib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel

from specchat.config.schema import KEYMAP_FORMS, SERVER_URL_RULE, Key, Settings, default_threads
from specchat.config.show import toml_key

if TYPE_CHECKING:  # the layers are read in specchat.config.sources, which imports this module
    from specchat.config.sources import Layer


def field_info(key: Key):
    """The model field behind ``key`` (a nested one for a table's key), None when ``key`` names none."""
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
    info = field_info(key)
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
        text += f" (at most 4 x the {default_threads()} CPUs here: more threads only wait for each other)"
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
    info = field_info(parent)
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


def describe_error(err: dict, layers: list[Layer]) -> str:
    """One pydantic error ``err`` as one line: the key, where ``layers`` set it, and what it accepts."""
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
    info = field_info(key)
    is_table = info is not None and isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
    if is_table and err["type"] == "value_error":  # a rule across the table's keys
        return f"config error: [{dotted}] {where}: {err['msg'].removeprefix('Value error, ')}"
    if err["type"] in ("not_utf8", "unknown_user"):  # the validator's own sentence
        allowed = err["msg"]
    if not allowed:
        allowed = err["msg"]
    return f"config error: {dotted} = {value} {where}: {allowed}"
