"""Column controls applied to rows: a table's rows as the mapping lets them reach Kafka.

``projection(route, columns)`` turns a route's column controls (``mapping.columns``: include/exclude,
hash, mask, truncate) into a ``Projection`` of the table's columns, checked against them first (a
``MappingError`` stops the relay: fail closed). ``Projection.apply`` gives a row event (or a snapshot
chunk) as those columns: excluded columns gone from the column list and from both images, controlled
values replaced in both images, every other value untouched. The codecs then encode the projected
change as they would any other, so every codec (and the record key, from untouched key columns) gets
the same columns; an UPDATE's changed columns (canal-json ``old``, canal-protobuf ``updated``) are those
whose projected values differ.

A table without controls has no projection (``TablePlan.projection`` None): its rows take no extra step.

The salt of a hash is read from the environment variable the mapping names when the projection is made
(``salt_problems`` checks them all beforehand: at start and before a new mapping version is used).

Pure functions; ``apply`` runs per row event on the publisher thread.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from collections.abc import Mapping as Env
from dataclasses import dataclass, replace

from mapping.columns import BINARY_TYPES, HASHES, ColumnInfo, Controls, base_type, check_columns
from mapping.key_shard import shard_column
from mapping.model import Mapping, Route
from relay.binlog import types
from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import RowChange
from relay.errors import InvalidMappingError, MappingError

Transform = Callable[[str], str]
Image = tuple[str | None, ...]

_CHAR = 1  # java.sql.Types.CHAR: what a hashed or masked column is described as
_UTF8MB4 = 45  # utf8mb4_general_ci


@dataclass(frozen=True, slots=True)
class Projection:
    """A table's columns as its controls publish them: the kept columns' indexes in the source row, the
    projected column metadata (renumbered), and each kept column's transform (None: as read)."""

    kept: tuple[int, ...]
    columns: tuple[ColumnMeta, ...]
    transforms: tuple[Transform | None, ...]

    def image(self, image: Image | None) -> Image | None:
        if image is None:
            return None
        out: list[str | None] = []
        for i, transform in zip(self.kept, self.transforms, strict=True):
            value = image[i]
            out.append(value if value is None or transform is None else transform(value))
        return tuple(out)

    def apply(self, rc: RowChange) -> RowChange:
        """``rc`` with the projected columns and images (a new value; ``rc`` is left as it was)."""
        rows = tuple(RowImage(self.image(r.before), self.image(r.after)) for r in rc.rows)
        return RowChange(
            rc.event_type, rc.table_id, rc.is_ddl, rc.sql, rc.ddl_schema_name, self.columns, rows, rc.props
        )


def projection(
    route: Route, columns: tuple[ColumnMeta, ...], env: Env[str, str] | None = None
) -> Projection | None:
    """The projection of ``route``'s table with ``columns``; None when the route has no controls.
    Raises ``InvalidMappingError`` naming the table and column when the controls do not fit it."""
    controls = route.columns
    if controls is None:
        return None
    where = f"{route.physical_db}.{route.physical_table}"
    infos = [ColumnInfo(c.name, c.is_key, c.mysql_type) for c in columns]
    errors = check_columns(controls, where, infos, route.key_columns, _shard(route))
    if errors:
        raise InvalidMappingError(where, errors)
    rules = {r.column.lower(): r for r in controls.rules}
    include = None if controls.include is None else {c.lower() for c in controls.include}
    kept: list[int] = []
    metas: list[ColumnMeta] = []
    transforms: list[Transform | None] = []
    for c in columns:
        rule = rules.get(c.name.lower())
        if (include is not None and c.name.lower() not in include) or (
            rule is not None and rule.action == "exclude"
        ):
            continue
        transform, width = (None, 0) if rule is None else _transform(rule.action, rule.arg, c, controls, env)
        meta = c if transform is None or rule is None or rule.action == "truncate" else _as_text(c, width)
        kept.append(c.index)
        metas.append(replace(meta, index=len(metas)))
        transforms.append(transform)
    return Projection(tuple(kept), tuple(metas), tuple(transforms))


def salt_problems(mapping: Mapping, env: Env[str, str] | None = None) -> list[MappingError]:
    """Every ``salt_env`` a hash of ``mapping`` needs that is unset or empty in the environment: checked
    when the relay starts and before it switches to a new mapping version."""
    environ = os.environ if env is None else env
    problem = "environment variable {} (the salt of the column hashes) is not set or empty"
    missing: dict[str, str] = {}
    for controls in mapping.column_controls():
        name = controls.salt_env
        if name and any(r.action == "hash" for r in controls.rules) and not environ.get(name):
            missing.setdefault(name, controls.salt_path)
    return [MappingError(path, problem.format(name)) for name, path in missing.items()]


def known_problems(
    mapping: Mapping, tables: list[tuple[str, str, tuple[ColumnMeta, ...]]]
) -> list[MappingError]:
    """The problems of ``mapping``'s column controls on tables already published (their columns as last
    seen): what a new version is checked against before the relay switches to it."""
    errors: list[MappingError] = []
    for db, table, columns in tables:
        try:
            route = mapping.resolve(db, table)
        except MappingError:
            continue  # reported by mapping.watch.check_against_tables
        if route is None or route.columns is None:
            continue
        infos = [ColumnInfo(c.name, c.is_key, c.mysql_type) for c in columns]
        errors.extend(check_columns(route.columns, f"{db}.{table}", infos, route.key_columns, _shard(route)))
    return errors


def _shard(route: Route) -> str | None:
    return shard_column(route.key_shard)


def _transform(
    action: str, arg: str | int | None, column: ColumnMeta, controls: Controls, env: Env[str, str] | None
) -> tuple[Transform | None, int]:
    """The value transform of one control, and the width of the text it gives (hash, mask)."""
    if action == "mask":
        assert isinstance(arg, int)
        stars = "*" * arg
        return (lambda _value: stars), arg
    if action == "truncate":
        assert isinstance(arg, int)
        width = arg
        return (lambda value: value[:width]), 0
    assert action == "hash" and isinstance(arg, str)
    salt = _salt(controls, env)
    binary = base_type(column.mysql_type) in BINARY_TYPES
    algorithm = arg

    def digest(value: str) -> str:
        return hashlib.new(algorithm, salt + _value_bytes(value, binary)).hexdigest()

    return digest, HASHES[algorithm]


def _value_bytes(value: str, binary: bool) -> bytes:
    """A value's bytes: a binary column's canal text holds one character per byte; text is UTF-8 (an
    undecodable byte the binlog reader kept as a lone surrogate is given back as itself)."""
    if binary:
        return value.encode("latin-1")
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def _salt(controls: Controls, env: Env[str, str] | None) -> bytes:
    environ = os.environ if env is None else env
    name = controls.salt_env
    salt = environ.get(name) if name is not None else None
    if not salt:
        problem = f"environment variable {name} (the salt of the column hashes) is not set or empty"
        raise MappingError(controls.salt_path or "columns.salt_env", problem)
    return salt.encode()


def _as_text(column: ColumnMeta, width: int) -> ColumnMeta:
    """A hashed or masked column's metadata: text of ``width`` characters."""
    return replace(
        column,
        type_code=types.STRING,
        meta=0,
        unsigned=False,
        charset=_UTF8MB4,
        mysql_type=f"char({width})",
        sql_type=_CHAR,
        length=width,
        enum_values=None,
        set_values=None,
    )
