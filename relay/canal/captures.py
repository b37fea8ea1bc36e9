"""Which physical tables a relay captures: those the sink filters keep and the mapping in use routes.

Owns ``CapturedTables``, a predicate ``(db, table) -> bool`` over the filters (``filter.include`` /
``filter.exclude``) and a mapping that a hot reload replaces (``route_with``). Snapshots list their tables
with it, and the schema history (``relay.schema.tracker``) refuses what it cannot follow only in tables it
keeps: a table the relay does not publish is never a reason to stop. Built by ``relay.wiring``; read on
the parser and snapshot threads, replaced on the publisher thread (one attribute, swapped whole).
"""

from __future__ import annotations

from mapping.model import Mapping
from relay.canal.sink import NameFilter


class CapturedTables:
    """``captures(db, table)``: the filters keep the table and the mapping in use routes it."""

    def __init__(self, include: NameFilter, exclude: NameFilter, mapping: Mapping) -> None:
        self.include, self.exclude = include, exclude
        self.mapping = mapping

    def __call__(self, db: str, table: str) -> bool:
        name = f"{db}.{table}"
        return (
            self.include.matches(name)
            and not self.exclude.matches(name)
            and self.mapping.resolve(db, table) is not None
        )

    def route_with(self, mapping: Mapping) -> None:
        """A new mapping version is in use (hot reload): it decides from now on."""
        self.mapping = mapping
