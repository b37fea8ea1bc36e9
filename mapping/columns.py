"""Column controls: which columns of a row reach Kafka, and in what form (``columns:`` in the mapping).

Owns the rules of a logical db's or table's ``columns`` section (``mapping.parts.ColumnControls``):

- ``exclude: [col, ...]`` drops the columns; ``include: [col, ...]`` keeps only those (one of the two per
  section). An excluded column is absent from the record altogether (data, old, and the column metadata).
- ``hash: {col: sha256}`` (or ``sha384``, ``sha512``) replaces a value with the lower-case hex digest of
  the salt's UTF-8 bytes followed by the value's bytes; ``salt_env`` names the environment variable that
  holds the salt (required with ``hash``; the relay refuses to start, or to switch to the version, while
  it is unset or empty).
- ``mask: {col: N}`` replaces a value with N ``*``.
- ``truncate: {col: N}`` keeps a value's first N characters (text columns: CHAR, VARCHAR, TEXT types) or
  bytes (binary columns: BINARY, VARBINARY, BLOB types, whose canal text holds one character per byte);
  other column types are refused.

SQL NULL stays NULL under every control. Hashed and masked columns are described as text (``char(L)``,
``java.sql.Types.CHAR``) so that readers decoding by the column type read them as text.

Inheritance: a table's controls add to its db's; where both name a column, the table's setting for that
column wins (a table's ``include`` replaces the db's; its ``salt_env`` too). A name a table's own section
writes must be a column of each physical table it maps; a name of the db's section applies to the tables
that have it (``mapping validate`` against the source reports a db-level name no table of the db has).
Key columns — the route's ``key`` or the primary key — and a ``key_shard`` column are refused: a record's
key must stay what the source has.

Pure values and functions, no I/O: ``Mapping`` runs the static checks while it is built (any thread);
``check_columns`` runs where the real columns are known (the relay's publisher thread when it plans a
table, ``relay mapping validate`` against a live source).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mapping.parts import ColumnControls
from relay.errors import MappingError

HASHES = {"sha256": 64, "sha384": 96, "sha512": 128}  # algorithm -> length of its hex digest
MAX_WIDTH = 65535  # the largest N of mask/truncate (MySQL's largest VARCHAR)
TEXT_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
ACTIONS = ("exclude", "hash", "mask", "truncate")


@dataclass(frozen=True)
class ColumnRule:
    """One column's control: ``action`` (exclude, hash, mask, truncate) with its ``arg`` (the algorithm,
    N, or None), the YAML path that sets it, and whether a table's own section names it (``required``:
    the table must have the column)."""

    column: str
    action: str
    arg: str | int | None
    path: str
    required: bool


@dataclass(frozen=True)
class Controls:
    """A table's effective column controls (its db's merged with its own): what a ``Route`` carries."""

    rules: tuple[ColumnRule, ...] = ()
    include: tuple[str, ...] | None = None
    include_path: str = ""
    include_required: bool = False
    salt_env: str | None = None
    salt_path: str = ""

    def describe(self) -> str:
        """One line for ``relay mapping resolve``: ``include=a,b exclude=c hash=d(sha256) mask=e(4)``."""
        parts = [f"include={','.join(self.include)}"] if self.include is not None else []
        for action in ACTIONS:
            shown = [
                r.column if r.arg is None else f"{r.column}({r.arg})"
                for r in self.rules
                if r.action == action
            ]
            if shown:
                parts.append(f"{action}={','.join(shown)}")
        if self.salt_env is not None and any(r.action == "hash" for r in self.rules):
            parts.append(f"salt_env={self.salt_env}")
        return " ".join(parts)

    def as_dict(self) -> dict[str, object]:
        """The effective controls as plain data (``relay mapping resolve --json``)."""
        out: dict[str, object] = {}
        if self.include is not None:
            out["include"] = list(self.include)
        for action in ACTIONS:
            found = {r.column: r.arg for r in self.rules if r.action == action}
            if found:
                out[action] = list(found) if action == "exclude" else found
        if self.salt_env is not None:
            out["salt_env"] = self.salt_env
        return out


@dataclass(frozen=True)
class ColumnInfo:
    """What the checks need of a real column: its name, whether it is in the primary key, its MySQL type
    text (``varchar(16)``, ``int unsigned``)."""

    name: str
    is_key: bool
    mysql_type: str


def base_type(mysql_type: str) -> str:
    """``varchar(16)`` -> ``varchar``; ``int unsigned`` -> ``int``."""
    return mysql_type.split("(", 1)[0].split(" ", 1)[0].strip().lower()


# --- static checks ---------------------------------------------------------------------------------


def check_controls(controls: ColumnControls | None, path: str, errors: list[MappingError]) -> None:
    """The problems ``controls`` has on its own (a column named twice, bad N, unknown algorithm, a hash
    without a salt variable); ``path`` is the section's YAML path."""
    if controls is None:
        return
    seen: dict[str, str] = {}

    def claim(column: str, where: str) -> None:
        if not column.strip():
            errors.append(MappingError(where, "empty column name"))
            return
        first = seen.setdefault(column.lower(), where)
        if first != where:
            errors.append(
                MappingError(where, f"column {column!r} is also controlled at {first}; one control each")
            )

    if controls.include is not None and controls.exclude:
        errors.append(MappingError(f"{path}.include", "give include or exclude, not both"))
    if controls.include is not None and not controls.include:
        errors.append(MappingError(f"{path}.include", "an empty include would publish no column; omit it"))
    for i, column in enumerate(controls.exclude):
        claim(column, f"{path}.exclude[{i}]")
    for column, algorithm in controls.hash:
        claim(column, f"{path}.hash.{column}")
        if algorithm not in HASHES:
            problem = f"unknown hash algorithm {algorithm!r} (known: {', '.join(HASHES)})"
            errors.append(MappingError(f"{path}.hash.{column}", problem))
    for action, pairs in (("mask", controls.mask), ("truncate", controls.truncate)):
        for column, width in pairs:
            claim(column, f"{path}.{action}.{column}")
            if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
                problem = f"N must be an integer from 1 to {MAX_WIDTH}, not {width!r}"
                errors.append(MappingError(f"{path}.{action}.{column}", problem))
    if controls.salt_env is not None and not controls.salt_env.strip():
        errors.append(MappingError(f"{path}.salt_env", "empty environment variable name"))


def check_salt(merged: Controls | None, path: str, errors: list[MappingError]) -> None:
    """A hash needs a salt variable (the section's own or its db's)."""
    if merged is not None and merged.salt_env is None and any(r.action == "hash" for r in merged.rules):
        errors.append(
            MappingError(f"{path}.salt_env", "hash needs salt_env: the environment variable of the salt")
        )


def check_keys(merged: Controls | None, key: Sequence[str] | None, shard: str | None) -> list[MappingError]:
    """Controls on the key columns the mapping writes (``key``) or on the ``key_shard`` column."""
    if merged is None:
        return []
    keys = {k.lower(): "key" for k in key or ()}
    if shard is not None:
        keys.setdefault(shard.lower(), "key_shard")
    return [
        MappingError(r.path, f"{keys[r.column.lower()]} column {r.column!r} cannot be {_done(r.action)}")
        for r in merged.rules
        if r.column.lower() in keys
    ]


# --- inheritance -----------------------------------------------------------------------------------


def merge(
    db: ColumnControls | None, db_path: str, table: ColumnControls | None, table_path: str
) -> Controls | None:
    """A table's effective controls: its db's, with its own added (and winning per column)."""
    if db is None and table is None:
        return None
    rules: dict[str, ColumnRule] = {}
    include, include_path, include_required, salt, salt_path = None, "", False, None, ""
    for controls, path, own in ((db, db_path, False), (table, table_path, True)):
        if controls is None:
            continue
        for rule in _rules(controls, path, own):
            rules[rule.column.lower()] = rule
        if controls.include is not None:
            include, include_path, include_required = controls.include, f"{path}.include", own
        if controls.salt_env is not None:
            salt, salt_path = controls.salt_env, f"{path}.salt_env"
    return Controls(tuple(rules.values()), include, include_path, include_required, salt, salt_path)


def _rules(controls: ColumnControls, path: str, own: bool) -> list[ColumnRule]:
    out = [
        ColumnRule(c, "exclude", None, f"{path}.exclude[{i}]", own) for i, c in enumerate(controls.exclude)
    ]
    out += [ColumnRule(c, "hash", a, f"{path}.hash.{c}", own) for c, a in controls.hash]
    out += [ColumnRule(c, "mask", n, f"{path}.mask.{c}", own) for c, n in controls.mask]
    out += [ColumnRule(c, "truncate", n, f"{path}.truncate.{c}", own) for c, n in controls.truncate]
    return out


# --- against the real columns ----------------------------------------------------------------------


def check_columns(
    controls: Controls,
    where: str,
    columns: Sequence[ColumnInfo],
    key: Sequence[str] | None,
    shard: str | None,
) -> list[MappingError]:
    """The problems of ``controls`` on the real table ``where`` (``db.table``) with ``columns``: a name the
    table's own section writes that is not a column, a controlled key column (``key``: the route's key
    columns, None: the primary key) or ``shard`` column, an ``include`` leaving one out, a truncated column
    that is not text or binary."""
    by_lower = {c.name.lower(): c for c in columns}
    names = ", ".join(c.name for c in columns) or "none"
    keys = (
        {k.lower(): "key" for k in key}
        if key is not None
        else {c.name.lower(): "primary key" for c in columns if c.is_key}
    )
    if shard is not None:
        keys.setdefault(shard.lower(), "key_shard")
    errors: list[MappingError] = []
    for rule in controls.rules:
        column = by_lower.get(rule.column.lower())
        if column is None:
            if rule.required:
                errors.append(
                    MappingError(rule.path, f"{rule.column!r} is not a column of {where} (columns: {names})")
                )
        elif column.name.lower() in keys:
            what = keys[column.name.lower()]
            errors.append(
                MappingError(
                    rule.path, f"{where}: {what} column {column.name!r} cannot be {_done(rule.action)}"
                )
            )
        elif rule.action == "truncate" and base_type(column.mysql_type) not in TEXT_TYPES | BINARY_TYPES:
            kind = column.mysql_type
            problem = f"{where}: column {column.name!r} is {kind}; truncate takes text or binary columns"
            errors.append(MappingError(rule.path, problem))
    if controls.include is not None:
        wanted = {c.lower() for c in controls.include}
        if controls.include_required:
            for c in controls.include:
                if c.lower() not in by_lower:
                    problem = f"{c!r} is not a column of {where} (columns: {names})"
                    errors.append(MappingError(controls.include_path, problem))
        for lower, what in keys.items():
            if lower in by_lower and lower not in wanted:
                name = by_lower[lower].name
                problem = f"{where}: {what} column {name!r} cannot be left out; add it to include"
                errors.append(MappingError(controls.include_path, problem))
    return errors


def unused_db_names(
    controls: ColumnControls, path: str, tables: Sequence[Sequence[ColumnInfo]]
) -> list[MappingError]:
    """Names a db's section writes that no table of the db (``tables``: each one's columns) has."""
    present = {c.name.lower() for cols in tables for c in cols}
    out = []
    for rule in _rules(controls, path, False):
        if rule.column.lower() not in present:
            out.append(
                MappingError(rule.path, f"{rule.column!r} is not a column of any table of this logical db")
            )
    return out


def _done(action: str) -> str:
    return {"exclude": "excluded", "hash": "hashed", "mask": "masked", "truncate": "truncated"}[action]
