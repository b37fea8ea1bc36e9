"""The relay's configuration: ``conf/relay.yaml`` read, checked and typed.

``load_config(path)`` reads YAML (a key written twice is a problem, ``relay.common.strict_yaml``),
replaces ``${ENV}`` references (for secrets), builds a ``RelayConfig`` (``relay.config.model``) with
``relay.config.settings.build`` and checks it (``relay.config.checks``): an unknown key, a wrong type,
a duplicate key or a bad value raises ``ConfigError`` naming the key path (``source.port``,
``kafka.settings.acks``) before anything starts — every problem at once, as ``InvalidConfigError`` when
there are several. Runs on the caller's thread.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from relay.common.redact import register_config_secrets
from relay.common.strict_yaml import load_strict
from relay.config.checks import config_problems
from relay.config.model import (
    FilterSettings,
    KafkaSettings,
    LoggingSettings,
    MappingSettings,
    MappingZooKeeperSettings,
    PositionSettings,
    PublishSettings,
    RelayConfig,
    SchemaSettings,
    StatusSettings,
    StoreSettings,
)
from relay.config.settings import build, interpolate
from relay.config.state import (
    DEFAULT_STATE_DIR,
    MOVED_KEYS,
    legacy_base,
    moved_key_problem,
    resolve_state_dir,
)
from relay.errors import ConfigError, InvalidConfigError

__all__ = [
    "FilterSettings",
    "KafkaSettings",
    "LoggingSettings",
    "MappingSettings",
    "MappingZooKeeperSettings",
    "PositionSettings",
    "PublishSettings",
    "RelayConfig",
    "SchemaSettings",
    "StatusSettings",
    "StoreSettings",
    "load_config",
    "parse_config",
]


def parse_config(
    data: Any,
    base_dir: str = "",
    *,
    config_file: str = "",
    work_dir: str | os.PathLike[str] | None = None,
    problems: list[ConfigError] | None = None,
) -> RelayConfig:
    """The validated config of a YAML tree. ``base_dir``: where config-relative paths (``mapping.file``)
    resolve ("" = the working directory); ``config_file``: the file it was read from, if any;
    ``work_dir``: what a relative ``state_dir`` is relative to (default: the working directory);
    ``problems``: found before (duplicate keys), reported with the rest. Every problem is reported at
    once: ``ConfigError`` for one, ``InvalidConfigError`` listing each for several."""
    errors = list(problems or [])
    try:
        data = interpolate(data)
    except ConfigError as exc:  # a missing variable: the other keys are still checked, with it unset
        errors.append(exc)
        data = interpolate(data, lenient=True)
    errors.extend(_moved_keys(data, work_dir, base_dir if config_file else None))
    config = build(RelayConfig, _without_moved_keys(data), errors=errors)
    try:
        root = resolve_state_dir(config.state_dir, config.instance, Path(work_dir or os.getcwd()))
    except ConfigError as exc:
        errors.append(exc)
        root = Path(work_dir or os.getcwd()) / DEFAULT_STATE_DIR.format(instance=config.instance)
    config = replace(config, config_file=config_file, config_base=base_dir, state_root=str(root))
    errors.extend(config_problems(config))
    InvalidConfigError.raise_all(errors, config_file or "config")
    register_config_secrets(config)  # from now on every log line, error and report hides them
    return config


def _moved_keys(data: Any, work_dir: str | os.PathLike[str] | None, base: str | None) -> list[ConfigError]:
    """The keys that named one state file each (``relay.config.state.MOVED_KEYS``), refused with where
    the file lives now."""
    if not isinstance(data, dict):
        return []
    out: list[ConfigError] = []
    for section, key in MOVED_KEYS:
        node = data.get(section)
        if isinstance(node, dict) and key in node:
            instance = str(data.get("instance") or RelayConfig.instance)
            configured = str(data.get("state_dir") or DEFAULT_STATE_DIR)
            try:
                root = resolve_state_dir(configured, instance, Path(work_dir or os.getcwd()))
            except ConfigError:
                root = Path(configured)
            value = node[key]
            if isinstance(value, str):
                value = value.replace("{instance}", instance)
            problem = moved_key_problem(section, key, value, root, Path(base) if base is not None else None)
            out.append(ConfigError(f"{section}.{key}", problem))
    return out


def _without_moved_keys(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for section, key in MOVED_KEYS:
        node = out.get(section)
        if isinstance(node, dict) and key in node:
            out[section] = {k: v for k, v in node.items() if k != key}
    return out


def load_config(path: str | os.PathLike[str]) -> RelayConfig:
    """``path`` read, checked and typed; every problem at once (unknown keys, wrong types, duplicate
    keys with their lines, bad values), each naming its key."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(p), f"cannot read the config file: {exc}") from exc
    try:
        data, duplicates = load_strict(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(where, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(p), f"not valid YAML: {exc}") from None
    found = [ConfigError(f"{p}:{d.line}:{d.column}", d.problem()) for d in duplicates]
    # Config-relative paths (mapping.file) resolve against the folder holding conf/, as they always have;
    # state resolves against the working directory (relay.config.state).
    return parse_config(data, str(legacy_base(p)), config_file=str(p.resolve()), problems=found)
