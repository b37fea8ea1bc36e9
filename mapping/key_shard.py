"""The shard identity in record keys: the ``key_shard`` setting and the warnings about keys that may collide.

Owns the setting's values (``none``, ``physical``, ``column:<name>``) and the key's ``_shard`` field,
``key_shard_problem`` (why a value is not a setting), ``shard_column``, and ``key_warnings``: the logical
tables that may map several physical tables while their key holds no shard identity (``MappingWarning``,
which never stops anything). Pure functions, safe on any thread; the relay's key encoder
(``relay.kafka.keys``) reads the constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mapping.names import name_path, table_path
from mapping.parts import MappingFields
from mapping.patterns import literal_of

KEY_SHARD_NONE = "none"
KEY_SHARD_PHYSICAL = "physical"
KEY_SHARD_COLUMN = "column:"
KEY_SHARD_HELP = "none, physical or column:<name>"
SHARD_FIELD = "_shard"  # the record key's field holding the shard identity (mapping.model.Route)


@dataclass(frozen=True)
class MappingWarning:
    """Something valid but probably wrong (``path``: the YAML key to change); never stops anything."""

    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def key_shard_problem(value: str) -> str | None:
    """Why ``value`` is not a ``key_shard`` setting, or None."""
    if value in (KEY_SHARD_NONE, KEY_SHARD_PHYSICAL):
        return None
    if value.startswith(KEY_SHARD_COLUMN):
        column = value[len(KEY_SHARD_COLUMN) :]
        if not column.strip() or column != column.strip():
            return f"{value!r}: expected column:<name> with a column name (no surrounding spaces)"
        if column.lower() == SHARD_FIELD:
            return f"{value!r}: {SHARD_FIELD} names the key's shard field itself; name a real column"
        return None
    return f"{value!r} is not one of {KEY_SHARD_HELP}"


def shard_column(value: str) -> str | None:
    """The column of a ``column:<name>`` setting, else None."""
    return value[len(KEY_SHARD_COLUMN) :] if value.startswith(KEY_SHARD_COLUMN) else None


def may_match_several(patterns: Sequence[str]) -> bool:
    """Whether these patterns can match more than one physical name (not one plain literal)."""
    return len(patterns) != 1 or literal_of(patterns[0]) is None


def key_warnings(mapping: MappingFields) -> list[MappingWarning]:
    """Logical tables whose record key may not be unique: they can map several physical tables (by
    their patterns or their db's) and their key holds no shard identity because ``key_shard`` is
    inherited from ``defaults`` as ``none``. Writing ``key_shard: none`` on the table (or its db) says
    the key values are unique across the shards, and silences the warning."""
    out: list[MappingWarning] = []
    rule = mapping.unmapped
    if not mapping.logical_dbs and not rule.drops and rule.topic is not None:
        problem = "no logical dbs: every table is published under its physical names"
        problem += f" (unmapped.topic {rule.topic!r})"
        out.append(MappingWarning("logical_dbs", problem))
    if mapping.defaults.key_shard != KEY_SHARD_NONE:
        return out
    for db in mapping.logical_dbs:
        if db.key_shard is not None:  # an explicit db setting: shard identity, or "ids are unique"
            continue
        many_dbs = may_match_several(db.physical)
        for table in db.tables:
            if table.key_shard is None and (many_dbs or may_match_several(table.physical)):
                problem = collapse_problem(f"{db.name}.{table.name}", "may map")
                out.append(MappingWarning(f"{table_path(db.name, table)}.key_shard", problem))
        unclaimed = db.unclaimed_tables or mapping.defaults.unclaimed_tables
        if unclaimed == "own_name" and many_dbs:
            problem = collapse_problem(f"each unclaimed table of {db.name} (own_name)", "may map")
            out.append(MappingWarning(f"{name_path('logical_dbs', db.name)}.key_shard", problem))
    return out


def collapse_problem(what: str, maps: str) -> str:
    """The text of a key-collision warning: ``what`` ``maps`` several physical tables…"""
    return (
        f"{what} {maps} several physical tables and its record key holds no shard identity (key_shard "
        "inherited from defaults: none): rows of different shards with the same key share one Kafka key, "
        "and a keyed consumer or a compacted topic keeps only one of them; set key_shard: physical (or "
        "column:<name>), or key_shard: none here if the key values are unique across all shards"
    )
