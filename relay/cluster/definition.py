"""Instance definitions: the part of ``relay.yaml`` that describes one source, as data a cluster stores.

Owns what a definition may hold, its validation, and turning a stored definition into the
``RelayConfig`` a node runs. A definition is a YAML document of the instance sections of
``conf/relay.yaml`` (``INSTANCE_SECTIONS``: source, filter, store, positions, mapping, kafka, publish,
schema, snapshot); the node-level keys (``NODE_KEYS``: state directory, ZooKeeper and HA, metrics,
logging, status) belong to the node that runs it and are refused here, naming the key.

Validation is ``relay.config``'s own (``parse_config``) on the document merged with a node's settings,
so a definition is refused for exactly what ``relay.yaml`` would be, every problem at once, each naming
its key. On top of that, what only a cluster needs: positions kept where any node reads them
(``positions.backend`` zookeeper or kafka, since the definition runs with HA on), a mapping every node
reads (``mapping.store: zookeeper`` or an absolute ``mapping.file``), and secrets as references.

Secrets stay ``${NAME}`` references: the stored text is the text as written, never interpolated, and a
literal value under a secret key (``source.password``, ``kafka.settings.sasl.password``…) is refused.
While validating, a reference stands for a value the node will give (its ``:-default`` when it has
one); ``relay_config`` resolves references with the environment of the node that runs the instance.
Pure functions and values, run on the caller's thread (the CLI; a node's child, ``relay.cluster.child``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from relay.common.redact import is_secret_setting
from relay.common.strict_yaml import load_strict
from relay.config.load import RelayConfig, parse_config
from relay.config.state import STATE_ENV
from relay.errors import ConfigError, InvalidConfigError

__all__ = [
    "INSTANCE_SECTIONS",
    "NODE_KEYS",
    "InstanceDefinition",
    "NodeSettings",
    "check_name",
    "operator_config",
    "parse_definition",
    "relay_config",
]

INSTANCE_SECTIONS = (
    "source",
    "filter",
    "store",
    "positions",
    "mapping",
    "kafka",
    "publish",
    "schema",
    "snapshot",
)
# The keys of relay.yaml a node owns, with where they go instead.
NODE_KEYS = {
    "state_dir": "the node's state directory holds every instance's (node.yaml)",
    "ha": "the cluster's ZooKeeper and session are the node's (node.yaml); every instance runs with HA",
    "metrics": "the node's metrics port serves every instance it runs (node.yaml)",
    "logging": "the node's logging settings apply to every instance it runs (node.yaml)",
    "status": "the node reports every instance's status (node.yaml)",
}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# While validating, a reference with no default is this text (it cannot be mistaken for a reference,
# and is turned back into ``${NAME}`` in the messages; printable, so a ``repr`` keeps it as it is).
_HOLE_OPEN, _HOLE_CLOSE = "$<<", ">>$"


@dataclass(frozen=True)
class NodeSettings:
    """What a node gives every instance it runs: the cluster's ZooKeeper (its session fences the
    instance, as ``ha`` does for ``relay run``), where instance state lives, and the node's name."""

    zookeeper: str = "127.0.0.1:2181"
    root: str = "/canal-relay"
    session_timeout_seconds: float = 10.0
    connect_timeout_seconds: float = 10.0
    state_dir: str = "/var/lib/canal-relay"  # each instance in <state_dir>/<instance>
    node: str = ""  # the member id in the election ("": hostname:pid)


@dataclass(frozen=True)
class InstanceDefinition:
    """One instance's definition: its name and its YAML text as written (comments kept, ``${NAME}``
    references unresolved). Valid by construction: made by ``parse_definition``."""

    name: str
    text: str

    @property
    def document(self) -> dict[str, Any]:
        """The YAML tree (the text was checked when the definition was made)."""
        data, _ = load_strict(self.text)
        return dict(data or {})


def check_name(name: str, key: str = "instance") -> str:
    """``name`` if it can name an instance (a ZooKeeper node, a state directory, a Kafka client id)."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            key, f"{name!r} is not an instance name: letters, digits, '.', '_' or '-' (at most 100)"
        )
    return name


def parse_definition(name: str, text: str, source: str = "definition") -> InstanceDefinition:
    """A definition of ``name`` from YAML ``text`` (``source``: where it came from, for messages), or
    ``ConfigError``/``InvalidConfigError`` naming every key that is wrong. Nothing is written."""
    check_name(name, "instance")
    data = load_sections(text, source, "source:, kafka:, …")
    errors = _cluster_problems(name, data)
    try:
        _config(data, name, NodeSettings(), placeholders=True)
    except InvalidConfigError as exc:
        errors.extend(exc.errors)
    except ConfigError as exc:
        errors.append(exc)
    InvalidConfigError.raise_all([_unmask(e) for e in errors], source)
    return InstanceDefinition(name, text if text.endswith("\n") else text + "\n")


def relay_config(definition: InstanceDefinition, node: NodeSettings) -> RelayConfig:
    """The config a node runs ``definition`` with: the node's ZooKeeper, HA on (the instance's epoch
    fences it as today), its state in ``<node.state_dir>/<instance>``, and every ``${NAME}`` resolved
    with THIS process's environment (a variable unset here is a ``ConfigError`` naming the key)."""
    config = _config(definition.document, definition.name, node, placeholders=False)
    wanted = _state_root(node) / definition.name
    if Path(config.state_root) != wanted:  # RELAY_STATE_DIR would put instances elsewhere, or together
        raise ConfigError(
            STATE_ENV,
            f"set in this node's environment ({os.environ.get(STATE_ENV)!r}): a node keeps each instance's "
            f"state in its own state directory ({wanted}); unset it for the node",
        )
    return config


def operator_config(
    definition: InstanceDefinition, node: NodeSettings, environ: Mapping[str, str] = os.environ
) -> tuple[RelayConfig, dict[str, str]]:
    """The config an operator's command reads ``definition`` with, on any host (``relay status|snapshot|
    schema --instance``): references resolved from ``environ`` where set, else their ``:-default``; the
    others stand as unusable holes, returned as {variable: key} — a command that needs one (a server
    connection) refuses naming it; the others (positions, schema history, mapping) never read it."""
    missing: dict[str, str] = {}

    def fill(value: Any, path: str) -> Any:
        if isinstance(value, str):

            def sub(m: re.Match[str]) -> str:
                given = environ.get(m.group(1))
                if given is not None:
                    return given
                if m.group(2) is not None:
                    return m.group(2)
                missing.setdefault(m.group(1), path)
                return f"{_HOLE_OPEN}{m.group(1)}{_HOLE_CLOSE}"

            return _ENV.sub(sub, value)
        if isinstance(value, dict):
            return {k: fill(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    return _config(fill(definition.document, ""), definition.name, node, placeholders=False), missing


# --- internals -------------------------------------------------------------------------------


def load_sections(text: str, source: str, sections: str) -> dict[str, Any]:
    """A YAML document of top-level sections (``sections`` names some, for the error), duplicate keys
    and a bad document refused with where they are."""
    try:
        data, duplicates = load_strict(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(where, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, f"not valid YAML: {exc}") from None
    found = [ConfigError(f"{source}:{d.line}:{d.column}", d.problem()) for d in duplicates]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        found.append(ConfigError(source, f"expected a mapping of sections ({sections})"))
        data = {}
    InvalidConfigError.raise_all(found, source)
    return {str(k): v for k, v in data.items()}


def _cluster_problems(name: str, data: dict[str, Any]) -> list[ConfigError]:
    """What a definition may not hold that ``relay.yaml`` may: node keys, another name, literal secrets,
    a mapping file only one host has."""
    errors: list[ConfigError] = []
    for key in data:
        if key in NODE_KEYS:
            errors.append(ConfigError(key, f"a node setting, not part of an instance: {NODE_KEYS[key]}"))
    given = data.get("instance")
    if given is not None and str(given) != name:
        errors.append(ConfigError("instance", f"{given!r} differs from the instance's name {name!r}"))
    errors.extend(_literal_secrets(data, ""))
    mapping = data.get("mapping")
    if isinstance(mapping, dict) and str(mapping.get("store", "file")) == "file":
        file = str(mapping.get("file", "conf/mapping.yaml"))
        if not _ENV.search(file) and not Path(file).is_absolute():
            errors.append(
                ConfigError(
                    "mapping.file",
                    f"{file!r} is relative, and a definition has no config folder to be relative to: "
                    "use mapping.store: zookeeper (one mapping every node reads), or an absolute path "
                    "present on every node",
                )
            )
    elif mapping is None:
        errors.append(
            ConfigError(
                "mapping",
                "say where the mapping is: mapping.store: zookeeper (with mapping.zookeeper.hosts, path), "
                "or an absolute mapping.file present on every node",
            )
        )
    return errors


def _literal_secrets(node: Any, path: str) -> list[ConfigError]:
    """Every non-empty secret written as a literal value instead of a ``${NAME}`` reference."""
    if isinstance(node, dict):
        out: list[ConfigError] = []
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(value, dict | list):
                out.extend(_literal_secrets(value, where))
            elif is_secret_setting(str(key)) and value not in (None, "") and not _ENV.search(str(value)):
                out.append(
                    ConfigError(
                        where,
                        "a secret must be a ${NAME} reference in an instance definition (it is stored in "
                        "ZooKeeper, readable by every node and operator); the node running the instance "
                        "resolves it from its environment",
                    )
                )
        return out
    if isinstance(node, list):
        return [e for i, v in enumerate(node) for e in _literal_secrets(v, f"{path}[{i}]")]
    return []


def _config(document: Mapping[str, Any], name: str, node: NodeSettings, *, placeholders: bool) -> RelayConfig:
    # an unknown key stays in, for relay.config to name it ("did you mean"); node keys were refused
    data: dict[str, Any] = {k: v for k, v in document.items() if k not in NODE_KEYS and k != "instance"}
    if placeholders:
        data = _holes(data)
    data["instance"] = name
    data["state_dir"] = str(_state_root(node) / "{instance}")
    data["ha"] = {
        "enabled": True,
        "zookeeper": node.zookeeper,
        "root": node.root,
        "session_timeout_seconds": node.session_timeout_seconds,
        "connect_timeout_seconds": node.connect_timeout_seconds,
        "member_id": node.node,
    }
    return parse_config(data, "", work_dir=_state_root(node))


def _state_root(node: NodeSettings) -> Path:
    return Path(os.path.normpath(Path(node.state_dir).expanduser().absolute()))


def _holes(value: Any) -> Any:
    """References replaced by their default, or by a marked hole standing for the node's value."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            default = m.group(2)
            return default if default is not None else f"{_HOLE_OPEN}{m.group(1)}{_HOLE_CLOSE}"

        return _ENV.sub(sub, value)
    if isinstance(value, dict):
        return {k: _holes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_holes(v) for v in value]
    return value


def _unmask(error: ConfigError) -> ConfigError:
    if _HOLE_OPEN not in error.problem:
        return error
    problem = error.problem.replace(_HOLE_OPEN, "${").replace(_HOLE_CLOSE, "}")
    return ConfigError(error.key, f"{problem} (a ${{NAME}} reference cannot stand for this value)")
