"""The demo's read-back: every record of the logical topics, shown per topic and checked against MySQL.

Owns reading the topics with ``assign`` from offset 0 (no consumer-group join: nothing to commit), until
every change the sample wrote is there or a deadline passes (a broker's high watermark is not trusted); the
one-line rendering of a canal-json record; and the demo's promise — the latest state rebuilt from a topic
equals SELECT over its physical tables. Runs on the CLI's thread and prints (this is CLI code).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from relay.common.kafka_log import quiet
from relay.dev.demo_sample import DB_TOPIC, DDL_TOPIC, ORDERS_TOPIC, PARTITIONS, Written, physical_orders
from relay.errors import DemoError

TYPES = ("INSERT", "UPDATE", "DELETE", "DDL")
WIDTH = 100  # the longest line: a 100-column terminal shows every line whole
DEADLINE = 90.0  # seconds for the relay to catch up, and for the topics to hold every record


def say(text: str = "") -> None:
    print(text, flush=True)


def fit(text: str, width: int = WIDTH) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# -- reading the topics back -------------------------------------------------------------------------------


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    msg: dict[str, Any]

    @property
    def sequence(self) -> int:
        return int(self.msg["sequence"])

    @property
    def kind(self) -> str:
        return "DDL" if self.msg["isDdl"] else str(self.msg["type"])


def partitions_of(bootstrap: str) -> dict[str, int]:
    try:
        meta = AdminClient(quiet({"bootstrap.servers": bootstrap})).list_topics(timeout=10)
    except KafkaException as exc:
        raise DemoError(f"cannot list the broker's topics: {exc}") from exc
    return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}


def read_topics(bootstrap: str, parts: dict[str, int], done: Callable[[dict[str, list[Rec]]], bool]) -> Any:
    """Every record of the topics from offset 0 (``assign``: no group join) until ``done``, or a deadline."""
    consumer = Consumer(
        quiet({"bootstrap.servers": bootstrap, "group.id": "relay-demo", "enable.auto.commit": False})
    )
    consumer.assign([TopicPartition(t, p, 0) for t, n in parts.items() for p in range(n)])
    out: dict[str, list[Rec]] = {t: [] for t in parts}
    deadline = time.monotonic() + DEADLINE
    try:
        while not done(out):  # checked per batch of messages: it counts every record so far
            if time.monotonic() > deadline:
                have = ", ".join(f"{t}: {len(rs)}" for t, rs in out.items())
                raise DemoError(f"the topics are still short after {DEADLINE:.0f}s ({have} records)")
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    raise DemoError(f"reading {msg.topic()}: {msg.error()}")
                topic, value = str(msg.topic()), msg.value() or b"{}"
                rec = Rec(topic, msg.partition() or 0, msg.offset() or 0, msg.key(), json.loads(value))
                out[topic].append(rec)
    finally:
        consumer.close()
    return out


def distinct(records: list[Rec], kind: str | None = None) -> int:
    """Changes, not records: a DDL is on every partition, and a resent record repeats its sequence."""
    return len({r.sequence for r in records if kind is None or r.kind == kind})


def holds_all(written: Written) -> Callable[[dict[str, list[Rec]]], bool]:
    def done(out: dict[str, list[Rec]]) -> bool:
        ddl = written.counts[ORDERS_TOPIC]["DDL"]
        return (
            all(distinct([r for r in out[t] if r.kind != "DDL"]) >= written.rows(t) for t in written.counts)
            and len([r for r in out[ORDERS_TOPIC] if r.kind == "DDL"]) >= ddl * PARTITIONS
            and len(out[DDL_TOPIC]) >= ddl
        )

    return done


# -- showing them ------------------------------------------------------------------------------------------


def render(rec: Rec, partitions: str = "") -> str:
    """One line: type, logical db.table, key, data (old→new for an UPDATE), sequence, physical source."""
    m, src = rec.msg, rec.msg["source"]
    key = ",".join(f"{k}={v}" for k, v in json.loads(rec.key).items()) if rec.key else "-"
    if m["isDdl"]:
        body = m["sql"]
    elif m["type"] == "UPDATE" and m["old"]:
        data, old = m["data"][0], m["old"][0]
        body = " ".join(f"{c}:{old[c]}→{data[c]}" for c in old)
    else:
        body = " ".join(f"{c}={v}" for c, v in m["data"][0].items() if c != "id")
    head = f"    {m['type']:<6} {m['database']}.{m['table']} {key} "
    tail = f" seq={rec.sequence} ← {src['database']}.{src['table']} {partitions or f'p{rec.partition}'}"
    return head + fit(body, max(10, WIDTH - len(head) - len(tail))) + tail


def counts_line(topic: str, records: list[Rec], partitions: int, written: Counter[str]) -> str:
    """Changes by type, then whether they are exactly the changes the sample wrote."""
    counts = {k: distinct(records, k) for k in TYPES}
    same = all(counts[k] == written[k] for k in TYPES)
    check = "= written" if same else "written " + " ".join(f"{k}={written[k]}" for k in TYPES)
    kinds = " ".join(f"{k}={n}" for k, n in counts.items())
    return f"  {topic:<12} {partitions} partitions  {kinds}  ({len(records)} records) {check}"


def show_topic(topic: str, records: list[Rec], partitions: int, written: Counter[str]) -> None:
    """The counts line, then the first change of each type and one row of a multi-row statement."""
    say(counts_line(topic, records, partitions, written))
    firsts: dict[str, Rec] = {}
    for rec in sorted(records, key=lambda r: (r.sequence, r.partition)):
        firsts.setdefault(rec.kind, rec)
    multi = [r for r in records if r.msg["source"]["rowIndex"] > 0 and r.kind == "UPDATE"]
    shown = [firsts[k] for k in TYPES if k in firsts] + multi[:1]
    for rec in sorted(shown, key=lambda r: r.sequence):
        on = sorted(r.partition for r in records if r.sequence == rec.sequence)
        say(render(rec, "p" + ",".join(map(str, on))))


def show_audit(records: list[Rec]) -> None:
    say(f"  {DDL_TOPIC:<12} the DDL audit topic: {len(records)} record(s)")
    for rec in records:
        src = rec.msg["source"]
        say(fit(f"    {rec.msg['type']:<6} {src['file']}:{src['offset']}  {rec.msg['sql']}"))


# -- the demo's promise: the topic rebuilds the table ------------------------------------------------------


def rebuilt_state(records: list[Rec]) -> dict[str, dict[str, str]]:
    """The latest row per key, applying each change once in sequence order (as a consumer would)."""
    state: dict[str, dict[str, str]] = {}
    seen: set[int] = set()
    for rec in sorted((r for r in records if r.kind != "DDL"), key=lambda r: r.sequence):
        if rec.sequence in seen:
            continue
        seen.add(rec.sequence)
        row = rec.msg["data"][0]
        if rec.kind == "DELETE":
            state.pop(row["id"], None)
        else:  # a column added by a DDL is absent from earlier rows: both sides leave NULLs out
            state[row["id"]] = {c: v for c, v in row.items() if v is not None}
    return state


def selected_state(conn: Any, tables: list[str]) -> dict[str, dict[str, str]]:
    """The physical tables' rows as text (canal's text forms are MySQL's own CAST AS CHAR)."""
    state: dict[str, dict[str, str]] = {}
    with conn.cursor() as cur:
        for table in tables:
            db, name = table.split(".")
            cur.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema=%s "
                "AND table_name=%s ORDER BY ordinal_position",
                (db, name),
            )
            cols = [str(r[0]) for r in cur.fetchall()]
            cur.execute(f"SELECT {', '.join(f'CAST(`{c}` AS CHAR)' for c in cols)} FROM {table}")
            for row in cur.fetchall():
                values = {c: v for c, v in zip(cols, row, strict=True) if v is not None}
                state[values["id"]] = values
    return state


def check_consistency(conn: Any, topics: dict[str, list[Rec]]) -> bool:
    ok = True
    for topic, tables in ((ORDERS_TOPIC, physical_orders()), (DB_TOPIC, ["shop_00.customers"])):
        rebuilt, selected = rebuilt_state(topics[topic]), selected_state(conn, tables)
        same = rebuilt == selected
        ok &= same
        verdict = "OK" if same else f"MISMATCH ({_differences(rebuilt, selected)} rows differ)"
        say(
            f"  {topic:<12} latest state from the topic ({len(rebuilt)} rows) == "
            f"SELECT over {len(tables)} table(s): {verdict}"
        )
    return ok


def _differences(a: dict[str, dict[str, str]], b: dict[str, dict[str, str]]) -> int:
    return sum(1 for k in a.keys() | b.keys() if a.get(k) != b.get(k))
