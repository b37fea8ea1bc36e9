"""Record keys: the LOGICAL key of a row change, the same for every shard of a logical table.

A key is a compact JSON object of the key columns' canal-text values in key order (``{"id":"42"}``), from
the after image (the before image of a DELETE). The key columns are the route's (spelled as the mapping
writes them, so every shard of a logical table makes the same key) or else the table's primary key. With
the route's ``key_shard`` the shard identity comes first, as ``"_shard"``: the physical ``db.table``
(``physical``) or a column's value (``column:<name>``), e.g. ``{"_shard":"shop_07.orders_33","id":"42"}``.
A table with neither key nor primary key is keyed by its physical ``db.table``: all its changes go to one
partition, so their order holds.

``KeyShape`` is what a table's keys share, worked out once per table map (``key_shape``; the route's key
columns are checked against the table's then, and a ``MappingError`` stops the relay: fail closed);
``of(image)`` makes a row's key and ``changes(row)`` says whether an UPDATE moves the row to another key.

Pure values and functions: per row, on the publisher thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapping.key_shard import KEY_SHARD_NONE, KEY_SHARD_PHYSICAL, SHARD_FIELD
from mapping.model import Route
from relay.binlog.events import ColumnMeta, RowImage
from relay.errors import MappingError
from relay.kafka import canal_json as codec_json
from relay.kafka.headers import text

Image = tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class KeyShape:
    """How the rows of one table (with these columns) are keyed."""

    key_columns: tuple[tuple[str, int], ...] | None  # (name in the key, column index); None: no key
    fallback_key: bytes  # the physical ``db.table``: the key of a table without key columns
    # (object format, column indexes) of the key columns, for distinct key names; None otherwise
    key_text: tuple[str, tuple[int, ...]] | None = None
    # the ``_shard`` value: a constant (``physical``) or a column index (``column:<name>``); None: none
    shard: str | int | None = None
    # column indexes whose change changes the key (key columns and shard column): an UPDATE touching
    # one of them is published as DELETE (old key) + INSERT (new key)
    key_indexes: tuple[int, ...] = ()
    # ``key_text``'s ``"name":`` fragments as UTF-8 for the C helper (``canal_json.object_bytes``, the
    # same bytes as the format's); None where it does not apply (a constant ``_shard``, no helper)
    key_fragments: tuple[bytes, ...] | None = None

    def of(self, image: Image | None) -> bytes:
        """The key of a row image (the fallback key without key columns or image)."""
        if self.key_columns is None or image is None:
            return self.fallback_key
        if self.key_text is None:  # repeated names in the key: the dict decides which value stays
            shard = self.shard
            head = {} if shard is None else {SHARD_FIELD: image[shard] if isinstance(shard, int) else shard}
            return codec_json.dumps(head | {name: image[i] for name, i in self.key_columns}).encode()
        form, indexes = self.key_text
        values = [image[i] for i in indexes]
        fast = codec_json.object_bytes
        if fast is not None and self.key_fragments is not None:
            found = fast(self.key_fragments, values)
            if found is not None:
                return found
        return codec_json.object_text(form, values).encode()

    def changes(self, row: RowImage) -> bool:
        """Whether an UPDATE row moves to another record key (a key or shard column changed)."""
        before, after = row.before, row.after
        if before is None or after is None:
            return False
        for i in self.key_indexes:  # a loop, not any(<generator>): this runs for every UPDATE row
            if before[i] != after[i]:
                return self.of(before) != self.of(after)
        return False


def key_shape(route: Route, columns: tuple[ColumnMeta, ...]) -> KeyShape:
    """The keys of ``route``'s table with ``columns``; ``MappingError`` when the route's key columns (or
    shard column) do not fit the table."""
    key_columns = _key_columns(route, columns)
    fallback = text(f"{route.physical_db}.{route.physical_table}")
    if key_columns is None:
        return KeyShape(key_columns=None, fallback_key=fallback)
    if route.key_shard != KEY_SHARD_NONE and any(n.lower() == SHARD_FIELD for n, _ in key_columns):
        where = f"{route.physical_db}.{route.physical_table}"
        raise MappingError(route.key_shard_rule, f"{where} has a key column named {SHARD_FIELD}")
    shard = _shard(route, columns)
    indexes = {i for _, i in key_columns} | ({shard} if isinstance(shard, int) else set())
    return KeyShape(
        key_columns=key_columns,
        fallback_key=fallback,
        key_text=_key_text(key_columns, shard),
        shard=shard,
        key_indexes=tuple(sorted(indexes)),
        key_fragments=_key_fragments(key_columns, shard),
    )


def _key_columns(route: Route, columns: tuple[ColumnMeta, ...]) -> tuple[tuple[str, int], ...] | None:
    checked = route.check_columns([c.name for c in columns])  # raises MappingError (fail closed)
    if checked is None or route.key_columns is None:
        return tuple((c.name, c.index) for c in columns if c.is_key) or None
    index = {c.name: c.index for c in columns}
    return tuple((wanted, index[actual]) for wanted, actual in zip(route.key_columns, checked, strict=True))


def _shard(route: Route, columns: tuple[ColumnMeta, ...]) -> str | int | None:
    """The key's ``_shard`` value: the physical ``db.table``, or the index of the shard column."""
    if route.key_shard == KEY_SHARD_PHYSICAL:
        return f"{route.physical_db}.{route.physical_table}"
    column = route.check_shard_column([c.name for c in columns])  # raises MappingError (fail closed)
    return None if column is None else next(c.index for c in columns if c.name == column)


def _key_fragments(
    key_columns: tuple[tuple[str, int], ...], shard: str | int | None
) -> tuple[bytes, ...] | None:
    """The key object's ``"name":`` fragments as UTF-8 (``_shard``'s first when it is a column), for the C
    helper; None for a constant ``_shard`` (written into the format), repeated names or names that do
    not encode."""
    if isinstance(shard, str) or len({name for name, _ in key_columns}) != len(key_columns):
        return None
    names = ([SHARD_FIELD] if isinstance(shard, int) else []) + [name for name, _ in key_columns]
    try:
        return tuple(f"{codec_json.dumps(name)}:".encode() for name in names)
    except UnicodeEncodeError:
        return None


def _key_text(
    key_columns: tuple[tuple[str, int], ...], shard: str | int | None
) -> tuple[str, tuple[int, ...]] | None:
    """The key's (object format, column indexes) for distinct key names; None otherwise."""
    if len({name for name, _ in key_columns}) != len(key_columns):
        return None
    fragments = [f"{codec_json.dumps(name)}:" for name, _ in key_columns]
    indexes = tuple(i for _, i in key_columns)
    if isinstance(shard, int):
        return codec_json.object_format([f'"{SHARD_FIELD}":', *fragments]), (shard, *indexes)
    form = codec_json.object_format(fragments)
    if isinstance(shard, str):  # a constant: written into the format, its % escaped
        constant = f'"{SHARD_FIELD}":{codec_json.dumps(shard)}'.replace("%", "%%")
        form = "{" + constant + "," + form[1:]
    return form, indexes
