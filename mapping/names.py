"""Names in a mapping and where they are written: YAML key paths, Kafka topic names, topic templates.

Owns ``name_path`` / ``table_path`` / ``db_topic_path`` (the key paths every ``MappingError`` names),
Kafka's topic-name rules (``topic_problem``) and the template language (``template_problem``,
``expand_topic``, the placeholders). Pure functions, safe on any thread; ``mapping.checks`` and
``mapping.model.Mapping.resolve`` call them.
"""

from __future__ import annotations

import json
import re

from mapping.parts import LogicalDb, LogicalTable

PLACEHOLDERS = ("db", "table", "logical_db", "logical_table")
MAX_TOPIC_LENGTH = 249  # Kafka's limit (topic names become directory names plus a partition suffix)
LOGICAL_NAME = re.compile(r"[A-Za-z0-9_-]+")

_FIELD = re.compile(r"\{([^{}]*)\}")
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


# --- key paths -------------------------------------------------------------------------------


def name_path(prefix: str, name: str) -> str:
    """``prefix.name``, or ``prefix["a.b"]`` when the name would not read back as one key."""
    if LOGICAL_NAME.fullmatch(name):
        return f"{prefix}.{name}" if prefix else name
    return f"{prefix}[{json.dumps(name)}]"


def table_path(db_name: str, table: LogicalTable) -> str:
    """Where a logical table is written: its ``origin`` (flat ``tables`` section) or the nested path."""
    return table.origin or name_path(f"{name_path('logical_dbs', db_name)}.tables", table.name)


# --- topics and templates --------------------------------------------------------------------


def topic_problem(topic: str) -> str | None:
    """Why Kafka would refuse ``topic`` as a name, or None."""
    if not topic:
        return "empty topic name"
    if topic in (".", ".."):
        return "'.' and '..' are not allowed as topic names"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"longer than {MAX_TOPIC_LENGTH} characters ({len(topic)})"
    bad = sorted(set(topic) - _TOPIC_CHARS)
    if bad:
        return f"characters {''.join(bad)!r} are not allowed in topic names (only a-z A-Z 0-9 . _ -)"
    return None


def template_problem(template: str) -> str | None:
    """Why a topic template can never expand to a valid topic, or None."""
    names = _FIELD.findall(template)
    unknown = [n for n in names if n not in PLACEHOLDERS]
    if unknown:
        known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        return f"unknown placeholder {{{unknown[0]}}} in {template!r} (known: {known})"
    literal = _FIELD.sub("", template)
    if "{" in literal or "}" in literal:
        return f"unbalanced brace in {template!r}"
    if not names:
        return topic_problem(template)
    bad = sorted(set(literal) - _TOPIC_CHARS)
    if bad:
        return f"characters {''.join(bad)!r} are not allowed in topic names (only a-z A-Z 0-9 . _ -)"
    return None


def expand_topic(template: str, db: str, table: str, logical_db: str, logical_table: str) -> str:
    values = {"db": db, "table": table, "logical_db": logical_db, "logical_table": logical_table}
    return _FIELD.sub(lambda m: values[m.group(1)], template)


def has_physical_placeholder(template: str) -> bool:
    return any(n in ("db", "table") for n in _FIELD.findall(template))


def has_placeholder(template: str) -> bool:
    """Whether ``template`` has any ``{...}`` field (else it is one fixed topic)."""
    return _FIELD.search(template) is not None


def db_topic_path(db: LogicalDb) -> str:
    """The key path of the template a logical db's topic comes from."""
    return f"{name_path('logical_dbs', db.name)}.topic" if db.topic else "defaults.topic"
