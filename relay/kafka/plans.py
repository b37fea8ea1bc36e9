"""Routing plans: what every row of one physical table shares once the mapping has routed it, and their cache.

``TablePlan`` holds a table's route (topic, logical names, codec), its columns, its column controls
(``relay.kafka.columns.Projection``, None for a table without), its keys
(``relay.kafka.keys.KeyShape``), its headers, its canal-json table (``relay.kafka.canal_json.JsonTable``,
for the canal-json codec) or debezium-json table (``relay.kafka.debezium_json.DebeziumTable``, made with
the mapping's ``debezium`` settings), and whether its topic is compacted (a tombstone then follows every
DELETE; in debezium-json also with ``tombstones_on_delete``).
``PlanCache`` makes a plan the first time a (db, table) is seen with a table map and keeps it while the
table map stays the same: a new mapping (hot reload) drops every plan, a DDL drops the table's, and a cache
grown past ``PLAN_CACHE_SIZE`` tables starts afresh. A table the mapping drops is cached as None.

``key_change`` builds the records of an UPDATE that changes the key, for both canal codecs.

Used by the record encoder (``relay.kafka.codec``) on the publisher thread; not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapping.model import DebeziumSettings, Mapping, Route
from relay.binlog.events import ColumnMeta, RowImage
from relay.kafka import canal_json as codec_json
from relay.kafka import debezium_json
from relay.kafka.columns import Projection, projection
from relay.kafka.headers import H_PART, H_SEQUENCE, H_TYPE, Headers, Origin, route_headers, tombstone
from relay.kafka.keys import KeyShape, key_shape
from relay.kafka.records import Record

PLAN_CACHE_SIZE = 65536
_MISS = object()


@dataclass(frozen=True, slots=True)
class TablePlan:
    """What every row of one physical table (with these columns) shares."""

    route: Route
    columns: tuple[ColumnMeta, ...]
    key: KeyShape
    headers: Headers  # db, table, physical db, physical table
    tag: Headers  # () or the tag header
    json: codec_json.JsonTable | None
    compact: bool = False  # the topic is compacted: a tombstone follows every DELETE
    # the route's column controls (relay.kafka.columns); None: the rows are published as read
    projection: Projection | None = None
    debezium: debezium_json.DebeziumTable | None = None  # the debezium-json codec's shared parts
    # debezium-json: a tombstone follows every DELETE (``tombstones_on_delete``, or a compacted topic)
    tombstones: bool = False


def table_plan(
    route: Route, columns: tuple[ColumnMeta, ...], compact: bool, debezium: DebeziumSettings | None = None
) -> TablePlan:
    headers, tag = route_headers(route)
    shown = projection(route, columns)  # raises MappingError (fail closed)
    published = columns if shown is None else shown.columns
    json_table = codec_json.json_table(route, published) if route.codec == "canal-json" else None
    key = key_shape(route, published)  # raises MappingError (fail closed)
    table, tombstones = None, False
    if route.codec == "debezium-json":
        # built from the PUBLISHED columns: an excluded column is absent, a hashed/masked one a string
        settings = debezium or DebeziumSettings()
        mode = settings.decimal_handling_mode
        table = debezium_json.debezium_table(route, published, key, settings.schemas_enable, mode)
        tombstones = settings.tombstones_on_delete or compact
    return TablePlan(
        route=route,
        columns=columns,
        key=key,
        headers=headers,
        tag=tag,
        json=json_table,
        compact=compact,
        projection=shown,
        debezium=table,
        tombstones=tombstones,
    )


def compacted(mapping: Mapping) -> bool:
    """Whether the mapping's topics are compacted (their ``cleanup.policy`` holds ``compact``)."""
    return "compact" in dict(mapping.topics.config).get("cleanup.policy", "")


class PlanCache:
    """The plans of the tables seen under the current mapping (see the module docstring)."""

    def __init__(self) -> None:
        self._plans: dict[tuple[str, str], TablePlan | None] = {}
        self._of: Mapping | None = None

    def get(self, mapping: Mapping, db: str, table: str, columns: tuple[ColumnMeta, ...]) -> TablePlan | None:
        """The plan of ``db``.``table`` with ``columns`` under ``mapping``; None: the mapping drops it."""
        if mapping is not self._of:
            self._plans.clear()
            self._of = mapping
        plan = self._plans.get((db, table), _MISS)
        if plan is None or (isinstance(plan, TablePlan) and plan.columns is columns):
            return plan
        if isinstance(plan, TablePlan) and plan.columns == columns:
            plan = replace(plan, columns=columns)  # same table map decoded again: identity for next time
        else:
            route = mapping.resolve(db, table)
            plan = None if route is None else table_plan(route, columns, compacted(mapping), mapping.debezium)
        if len(self._plans) >= PLAN_CACHE_SIZE:
            self._plans.clear()
        self._plans[(db, table)] = plan
        return plan

    def drop(self, db: str, table: str) -> None:
        """The table's definition changes (a DDL): its plan is made (and its key columns checked) afresh."""
        self._plans.pop((db, table), None)

    def known_columns(self) -> list[tuple[str, str, tuple[ColumnMeta, ...]]]:
        """(db, table, columns) of the tables planned since the mapping last changed and not dropped."""
        return [(db, table, plan.columns) for (db, table), plan in self._plans.items() if plan is not None]

    def known_tables(self) -> list[tuple[str, str, tuple[str, ...] | None]]:
        """(db, table, column names) of the tables planned since the mapping last changed (None: the
        table is dropped, its columns unknown)."""
        return [
            (db, table, None if plan is None else tuple(c.name for c in plan.columns))
            for (db, table), plan in self._plans.items()
        ]


def key_change(
    plan: TablePlan, origin: Origin, row: RowImage, seq: int, deleted: bytes, inserted: bytes, half: int
) -> list[Record]:
    """A key-changing UPDATE: the DELETE under the old key (and its tombstone on a compacted topic),
    then the INSERT under the new key; ``relay.part`` ``half`` and ``half`` + 1 (0 and 1 outside a
    transaction payload)."""
    topic, sequence_header = plan.route.topic, (H_SEQUENCE, str(seq).encode())
    old_key, new_key = plan.key.of(row.before), plan.key.of(row.after)
    delete = Record(
        topic,
        None,
        old_key,
        deleted,
        (
            *plan.headers,
            (H_TYPE, b"DELETE"),
            *plan.tag,
            origin.header,
            sequence_header,
            (H_PART, b"%d" % half),
        ),
    )
    insert = Record(
        topic,
        None,
        new_key,
        inserted,
        (
            *plan.headers,
            (H_TYPE, b"INSERT"),
            *plan.tag,
            origin.header,
            sequence_header,
            (H_PART, b"%d" % (half + 1)),
        ),
    )
    return [delete, tombstone(delete), insert] if plan.compact else [delete, insert]
