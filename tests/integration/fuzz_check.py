"""The generative test's judge: every record of every topic read back and compared with the SELECTs.

``decode_record`` turns one Kafka record of any of the three codecs into a ``Change`` (images as column →
published value, ``mysqlType`` per column, the time it carries) with the codecs' wire formats read directly
(JSON; canal's protobuf messages) — no relay code. ``Check(run, bootstrap).problems()`` reads each topic of
a run to its end and lists every difference: a cell against the SELECT of its row version (``fuzz_types``
oracle), a ``mysqlType`` against the declared type, a snapshot row against the binlog INSERT of the same
row, a record without a real time, a record count against the statements written.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from relay.canal.proto import entry_pb2, packet_pb2
from tests.integration import fuzz_types as fz
from tests.integration.relay_harness import Rec, read_to_end

CANAL_TYPES = {"INSERT": "INSERT", "UPDATE": "UPDATE", "DELETE": "DELETE"}
DEBEZIUM_OPS = {"c": "INSERT", "u": "UPDATE", "d": "DELETE", "r": "INSERT"}


@dataclass
class Change:
    kind: str  # INSERT, UPDATE, DELETE
    snapshot: bool
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    time_ms: int
    types: dict[str, str] = field(default_factory=dict)  # mysqlType (canal codecs)
    micros: dict[str, int] = field(default_factory=dict)  # canal-json utcMicros of ``after``


def decode_record(rec: Rec, codec: str) -> Change | None:
    """One record as a ``Change``; None for a tombstone or a DDL barrier."""
    if rec.value is None:
        return None
    if codec == "canal-json":
        msg = rec.json
        if msg.get("isDdl"):
            return None
        data = msg["data"][0]
        old = (msg.get("old") or [{}])[0]
        kind = CANAL_TYPES[msg["type"]]
        before = {**data, **old} if kind == "UPDATE" else data if kind == "DELETE" else None
        after = data if kind != "DELETE" else None
        micros = (msg.get("utcMicros") or [{}])[0]
        return Change(
            kind, bool(msg.get("snapshot")), before, after, int(msg["es"]), msg["mysqlType"], micros
        )
    if codec == "canal-protobuf":
        return _protobuf(rec)
    body = json.loads(rec.value)
    payload = body["payload"]
    kind = DEBEZIUM_OPS[payload["op"]]
    return Change(kind, payload["op"] == "r", payload["before"], payload["after"], int(payload["ts_ms"]))


def _protobuf(rec: Rec) -> Change | None:
    packet = packet_pb2.Packet.FromString(rec.value)
    (raw,) = packet_pb2.Messages.FromString(packet.body).messages
    entry = entry_pb2.Entry.FromString(raw)
    rc = entry_pb2.RowChange.FromString(entry.storeValue)
    if rc.isDdl:
        return None
    (row,) = rc.rowDatas

    def image(columns: Any) -> dict[str, Any] | None:
        return {c.name: None if c.isNull else c.value for c in columns} or None

    snapshot = any(p.key == "relay.snapshot" and p.value == "true" for p in rc.props)
    kind = entry_pb2.EventType.Name(entry.header.eventType)
    types = {c.name: c.mysqlType for c in (row.afterColumns or row.beforeColumns)}
    before = image(row.beforeColumns) if kind != "INSERT" else None
    return Change(kind, snapshot, before, image(row.afterColumns), entry.header.executeTime, types)


class Check:
    """Reads a run's topics and lists every difference (module docstring)."""

    def __init__(self, run: Any, bootstrap: str) -> None:
        self.run, self.bootstrap = run, bootstrap
        self.found: list[str] = []

    def problems(self) -> list[str]:
        snapshot_rows: dict[str, dict[int, Change]] = {}
        inserts: dict[str, dict[int, Change]] = {}
        for part in ("a", "b"):
            for short, codec in (("cj", "canal-json"), ("pb", "canal-protobuf"), ("dz", "debezium-json")):
                table = f"{part}_{short}"
                records = read_to_end(self.bootstrap, f"{self.run.schema}.{table}", timeout=120)
                changes = self._topic(table, codec, records)
                snapshot_rows[table] = {_id(c.after): c for c in changes if c.snapshot}
                inserts[table] = {_id(c.after): c for c in changes if c.kind == "INSERT" and not c.snapshot}
        for short in ("cj", "pb", "dz"):
            self._same_twice(f"a_{short}", snapshot_rows[f"a_{short}"], inserts[f"a_{short}"])
        return self.found

    def _say(self, text: str) -> None:
        self.found.append(f"seed {self.run.seed} {self.run.mode}: {text}")

    def _topic(self, table: str, codec: str, records: list[Rec]) -> list[Change]:
        changes = [c for c in (decode_record(r, codec) for r in records) if c is not None]
        tombstones = sum(1 for r in records if r.value is None)
        part = table[0]
        kinds = Counter("snapshot" if c.snapshot else c.kind for c in changes)
        expected = self.run.ops.get(part, 0) + (2 * self.run.pre if part == "a" else 0)
        if len(changes) != expected:
            self._say(f"{table}: {len(changes)} change records ({dict(kinds)}), {expected} written")
        if codec == "debezium-json" and tombstones != self.run.deletes.get(part, 0):
            self._say(f"{table}: {tombstones} tombstones, {self.run.deletes.get(part, 0)} deletes")
        for change in changes:
            if change.time_ms <= 0:
                self._say(f"{table}: a {change.kind} record carries time {change.time_ms}")
            for image in (change.before, change.after):
                if image is not None:
                    self._image(table, codec, change, image)
        return changes

    def _image(self, table: str, codec: str, change: Change, image: dict[str, Any]) -> None:
        row_id, ver = _id(image), int(image["ver"])
        state = self.run.states.get(table, {}).get((row_id, ver))
        if state is None:
            self._say(f"{table} id={row_id} ver={ver}: a {change.kind} image of a row version never SELECTed")
            return
        for j, col in enumerate(self.run.sets[table[0]]):
            where = f"{table} id={row_id} ver={ver} {change.kind}{' (snapshot)' if change.snapshot else ''}"
            self._cell(codec, col, image.get(col.name), state[2 * j], state[2 * j + 1], where)
            if codec != "debezium-json" and change.types.get(col.name) != col.mysql_type:
                self._say(
                    f"{where} {col.name}: mysqlType {change.types.get(col.name)!r}, declared {col.ddl!r}"
                )
            if codec == "canal-json" and image is change.after and col.family == "timestamp":
                self._instant(change, col, state[2 * j + 1], where)

    def _cell(self, codec: str, col: fz.Col, ours: Any, canal: Any, server: Any, where: str) -> None:
        if codec == "debezium-json":
            expected = fz.debezium_expected(col, server, canal is None)
            if not fz.debezium_matches(col, ours, expected):
                self._say(f"{where} {col.name} {col.ddl}: debezium {ours!r}, SELECT gives {expected!r}")
        elif not fz.canal_matches(col, ours, canal):
            self._say(f"{where} {col.name} {col.ddl}: {codec} {ours!r}, SELECT gives {canal!r}")

    def _instant(self, change: Change, col: fz.Col, seconds: Any, where: str) -> None:
        if seconds is None or Decimal(str(seconds)) == 0:
            return
        micros = int(Decimal(str(seconds)) * 1_000_000)
        if change.micros.get(col.name) != micros:
            self._say(f"{where} {col.name}: utcMicros {change.micros.get(col.name)}, UNIX_TIMESTAMP {micros}")

    def _same_twice(self, table: str, snapshot: dict[int, Change], binlog: dict[int, Change]) -> None:
        """Each row written before the start is published by the snapshot and as its binlog INSERT (the
        relay started before them): both the same, cell for cell, type for type."""
        for row_id in range(1, self.run.pre + 1):
            one, two = snapshot.get(row_id), binlog.get(row_id)
            if one is None or two is None:
                self._say(f"{table} id={row_id}: snapshot {one is not None}, binlog INSERT {two is not None}")
                continue
            for name in sorted(set(one.after or {}) | set(two.after or {})):
                a, b = (one.after or {}).get(name), (two.after or {}).get(name)
                if a != b:
                    self._say(f"{table} id={row_id} {name}: snapshot {a!r}, binlog {b!r}")
            if one.types != two.types:
                diff = {
                    k: (one.types.get(k), two.types.get(k))
                    for k in one.types
                    if one.types.get(k) != two.types.get(k)
                }
                self._say(f"{table} id={row_id}: mysqlType snapshot/binlog differ {diff}")
            if one.micros != two.micros:
                self._say(f"{table} id={row_id}: utcMicros snapshot {one.micros}, binlog {two.micros}")


def _id(image: dict[str, Any] | None) -> int:
    assert image is not None
    return int(image["id"])
