"""Typed settings from YAML: dataclass trees filled from dicts, with errors that name the key path.

``build(cls, data, path)`` walks a frozen dataclass's fields and type hints, converts what it can
(int, float, bool, str, Optional, tuple/list of X, dict[str, X], nested dataclasses) and raises
``ConfigError("source.port", "expected an integer, got 'abc'")`` for anything else, including unknown
keys (with a "did you mean" hint). ``interpolate`` replaces ``${NAME}`` / ``${NAME:-default}`` with the
environment, for secrets. Pure functions, no I/O: ``relay.config.load`` reads the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from relay.errors import ConfigError

T = TypeVar("T")
# Field metadata of values a config is given by its loader (where it was read from), never by YAML.
DERIVED: dict[str, bool] = {"derived": True}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: Any, path: str = "", *, lenient: bool = False) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of a YAML tree with the environment.
    A variable that is not set raises ``ConfigError`` naming the key and the variable (``lenient``: it
    is replaced by "", so the rest of the tree can still be checked)."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            if lenient:
                return ""
            raise ConfigError(
                path or "(top)", f"environment variable {name} is not set (written as ${{{name}}})"
            )

        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: interpolate(v, f"{path}.{k}" if path else str(k), lenient=lenient) for k, v in value.items()
        }
    if isinstance(value, list):
        return [interpolate(v, f"{path}[{i}]", lenient=lenient) for i, v in enumerate(value)]
    return value


def build(cls: type[T], data: Any, path: str = "", *, errors: list[ConfigError] | None = None) -> T:
    """A ``cls`` instance from ``data`` (a dict from YAML); missing keys keep the dataclass defaults.

    Without ``errors`` the first problem raises; with it, every problem is appended there and the key
    keeps its default, so one pass finds them all (``relay.config.load`` reports them together)."""

    def fail(err: ConfigError) -> None:
        if errors is None:
            raise err
        errors.append(err)

    if data is None:
        data = {}
    if not isinstance(data, dict):
        fail(ConfigError(path or "(top)", f"expected a mapping of keys, got {_kind(data)}"))
        return cls()
    fields = {
        f.name: f
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.init and not f.metadata.get("derived")
    }
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key)
        where = f"{path}.{name}" if path else name
        if name not in fields:
            hint = difflib.get_close_matches(name, list(fields), n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(sorted(fields))}"
            fail(ConfigError(where, f"unknown key{extra}"))
            continue
        try:
            kwargs[name] = convert(hints[name], value, where, errors)
        except ConfigError as exc:
            fail(exc)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        fail(ConfigError(path or "(top)", str(exc)))
        return cls()


def convert(tp: Any, value: Any, where: str, errors: list[ConfigError] | None = None) -> Any:
    """Convert one YAML value to the annotated type ``tp`` or raise ConfigError naming ``where``
    (``errors``: where a nested section's problems go, as in ``build``)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return convert(inner[0], value, where, errors)
        raise ConfigError(where, f"unsupported type {tp}")
    if dataclasses.is_dataclass(tp):
        return build(typing.cast(type[Any], tp), value, where, errors=errors)
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            if isinstance(value, str) and origin is tuple:
                value = [v.strip() for v in value.split(",") if v.strip()]
            else:
                raise ConfigError(where, f"expected a list, got {value!r}")
        item = get_args(tp)[0] if get_args(tp) else Any
        items = [convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(where, f"expected a mapping, got {value!r}")
        vt = get_args(tp)[1] if get_args(tp) else Any
        return {str(k): convert(vt, v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(tp, value, where)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
            return value.lower() in ("true", "yes", "on")
        raise ConfigError(where, f"expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ConfigError(where, f"expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(where, f"expected an integer, got {value!r}") from None
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ConfigError(where, f"expected a number, got {value!r}")
        try:
            return float(value)
        except ValueError:
            raise ConfigError(where, f"expected a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, bool) or value is None or isinstance(value, dict | list):
            raise ConfigError(where, f"expected a string, got {value!r}")
        return str(value)
    raise ConfigError(where, f"unsupported setting type {tp}")
