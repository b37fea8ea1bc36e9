"""``relay check``: the source server and Kafka, as a start would find them, by reading only.

Owns the server-side checks of ``relay.ops.check``: the source's settings one by one
(``relay.source.server.settings_report``), what the start reads from it (binary logs, GTIDs,
its time zone), the account's grants (REPLICATION SLAVE in ``SHOW GRANTS``, SELECT on every captured
table when a snapshot or the schema history needs it), the mapping against the server's real tables,
where the relay would start; then Kafka: reachable, and every topic it publishes to present with the
mapping's settings, or absent and allowed to be created. Runs on the CLI's thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from mapping.model import Mapping
from relay.canal.sink import NameFilter
from relay.common import mysql
from relay.common.kafka_log import quiet
from relay.config.load import RelayConfig
from relay.config.sections import SinkConfig
from relay.errors import RelayError
from relay.ops.check_result import FAIL, OK, SKIP, WARN, Check, Emit
from relay.source.server import ServerInfo, inspect_server, server_settings, settings_report
from relay.source.start_point import resolve_start

_SYSTEM = ("mysql", "information_schema", "performance_schema", "sys")
_SHOWN = 5  # tables named in a line before "and N more"


def source_checks(config: RelayConfig, mapping: Mapping | None, out: Emit) -> set[str]:
    """The source's checks; the topics the mapping gives its real tables (empty when unknown)."""
    src = config.source
    what = f"source {src.address}"
    try:
        version, var = server_settings(src)
    except RelayError as exc:
        out(Check(FAIL, what, str(exc)))
        return set()
    out(Check(OK, what, f"{version}, as user {src.user}"))
    history = config.schema.history != "off"
    for setting, value, fix in settings_report(var, schema_history=history):
        out(
            Check(
                OK if fix is None else FAIL, f"{what} {setting}", value if fix is None else f"{value}; {fix}"
            )
        )
    try:
        info = inspect_server(src, schema_history=history)
    except RelayError as exc:  # binary logs not listable (grants), an unreadable time zone…
        out(Check(FAIL, what, str(exc)))
        return set()
    out(Check(OK, f"{what} binary logs", f"{len(info.binlogs)} files, end {info.end[0]}:{info.end[1]}"))
    out(_replication_grant(config))
    tables = _tables(config, out)
    topics: set[str] = set()
    if mapping is not None and tables is not None:
        topics = _against_tables(config, mapping, tables, out)
    out(_start(config, info))
    return topics


def _replication_grant(config: RelayConfig) -> Check:
    src = config.source
    try:
        conn = _connect(config)
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute("SHOW GRANTS FOR CURRENT_USER()")
            grants = " ".join(str(row[0]).upper() for row in cur.fetchall())
    except Exception as exc:
        return Check(WARN, "source grants", f"cannot read them: {exc}")
    if any(g in grants for g in ("REPLICATION SLAVE", "REPLICATION REPLICA", "ALL PRIVILEGES ON *.*")):
        return Check(OK, "source grants", "REPLICATION SLAVE (the binlog dump)")
    return Check(FAIL, "source grants", f"{src.user} lacks REPLICATION SLAVE: the binlog cannot be read")


def _tables(config: RelayConfig, out: Emit) -> list[tuple[str, str]] | None:
    """Every base table the account sees; SELECT checked on the captured ones when the start reads them."""
    from relay.wiring import sink_config

    marks = ", ".join(["%s"] * len(_SYSTEM))
    try:
        conn = _connect(config)
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = "
                f"'BASE TABLE' AND table_schema NOT IN ({marks}) ORDER BY 1, 2",
                _SYSTEM,
            )
            tables = [(str(db), str(t)) for db, t in cur.fetchall()]
            needs = config.snapshot.mode != "never" or config.schema.history != "off"
            if needs:
                out(_select_grant(cur, _captured(sink_config(config), tables)))
            else:
                out(Check(SKIP, "source grants", "SELECT: snapshot.mode never and schema.history off"))
    except Exception as exc:
        out(Check(FAIL, "source tables", f"cannot list them: {exc}"))
        return None
    return tables


def _connect(config: RelayConfig) -> Any:
    s = config.source
    return mysql.connect(s.host, s.port, s.user, s.password, tls=s.tls, connect_timeout=s.connect_timeout)


def _captured(sink: SinkConfig, tables: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    include = NameFilter("filter.include", sink.filter, empty_value=True)
    exclude = NameFilter("filter.exclude", sink.black_filter, empty_value=False)
    return [(d, t) for d, t in tables if include.matches(f"{d}.{t}") and not exclude.matches(f"{d}.{t}")]


def _select_grant(cur: Any, captured: list[tuple[str, str]]) -> Check:
    denied: list[str] = []
    for db, table in captured:
        try:
            cur.execute(f"SELECT 1 FROM `{db}`.`{table}` LIMIT 0")
            cur.fetchall()
        except Exception:
            denied.append(f"{db}.{table}")
    if denied:
        more = f" and {len(denied) - _SHOWN} more" if len(denied) > _SHOWN else ""
        shown = ", ".join(denied[:_SHOWN])
        return Check(
            FAIL, "source grants", f"no SELECT on {shown}{more} (snapshots and the schema history read them)"
        )
    return Check(OK, "source grants", f"SELECT on the {len(captured)} captured tables")


def _against_tables(
    config: RelayConfig, mapping: Mapping, tables: list[tuple[str, str]], out: Emit
) -> set[str]:
    from relay.wiring import sink_config

    captured = _captured(sink_config(config), tables)
    coverage = mapping.validate_against(captured, raise_errors=False)
    for err in coverage.errors:
        out(Check(FAIL, "mapping against the source", str(err)))
    for warning in coverage.warnings:
        out(Check(WARN, "mapping against the source", str(warning)))
    if not coverage.errors:
        found = f"{len(captured)} captured tables: {len(coverage.routes)} published, "
        found += f"{len(coverage.dropped)} dropped, {len(coverage.unmapped)} by the unmapped rule"
        out(Check(OK, "mapping against the source", found))
    return {r.topic for r in coverage.routes}


def _start(config: RelayConfig, info: ServerInfo) -> Check:
    from relay.wiring import open_positions

    try:
        with open_positions(config) as store:
            saved = store.load()
            where = store.describe()
        start = resolve_start(config.source, info, saved)
    except RelayError as exc:
        return Check(FAIL, "start", str(exc))
    snapshot = (
        ""
        if saved is not None or config.snapshot.mode == "never"
        else "; snapshots the captured tables first"
    )
    return Check(OK, "start", f"{start.reason} ({where}){snapshot}")


# --- Kafka ---------------------------------------------------------------------------------------


def kafka_checks(config: RelayConfig, mapping: Mapping | None, live: set[str], out: Emit) -> None:
    k = config.kafka
    producer_only = ("linger", "compression", "batch", "queue")
    client: dict[str, str | int | float | bool] = {"bootstrap.servers": k.bootstrap_servers, "log_level": 0}
    client.update({key: str(v) for key, v in k.settings.items() if not key.startswith(producer_only)})
    admin = AdminClient(quiet(client))
    try:
        meta = admin.list_topics(timeout=k.connect_timeout_seconds)  # all topics: creates none
    except KafkaException as exc:
        why = f"unreachable within {k.connect_timeout_seconds:g} s: {exc.args[0].str()}"
        why += " (kafka.bootstrap_servers)"
        out(Check(FAIL, f"kafka {k.bootstrap_servers}", why))
        return
    out(Check(OK, f"kafka {k.bootstrap_servers}", f"reachable, {len(meta.brokers)} broker(s)"))
    existing = {name: t for name, t in meta.topics.items() if t.error is None}
    wanted = _wanted_topics(config, mapping, live)
    owned = _relay_owned(config)
    create_ops = _authorized(lambda: admin.describe_cluster(include_authorized_operations=True))
    for topic, settings in sorted(wanted.items()):
        if topic in existing:
            out(_present(admin, topic, len(existing[topic].partitions), settings))
        else:
            out(_absent(mapping, topic, create_ops, owned=topic in owned))
    if k.exactly_once:
        probe = f"the read_committed probe writes to {k.positions_topic}.probe: proved at start only"
        out(Check(SKIP, "kafka exactly-once", probe))
    if k.heartbeat_query:
        out(Check(SKIP, "heartbeat query", "it writes to the source: run (and proved) at start only"))


def _wanted_topics(config: RelayConfig, mapping: Mapping | None, live: set[str]) -> dict[str, dict[str, str]]:
    """Each topic the relay publishes to, with the settings it must have (the mapping's for its own)."""
    k = config.kafka
    own = mapping.topics.topic_config() if mapping is not None else {}
    wanted = {t: dict(own) for t in {*(mapping.topic_names() if mapping else ()), *live}}
    for topic in (k.ddl_topic, k.dead_letter_topic, k.transaction_topic):
        if topic:
            wanted.setdefault(topic, {})
    if k.heartbeat_topic:
        wanted[k.heartbeat_topic] = {"cleanup.policy": "compact"}
    if k.exactly_once:
        wanted[k.positions_topic] = {"cleanup.policy": "compact"}
        if config.schema.history != "off":
            wanted[config.schema.topic] = {"cleanup.policy": "compact"}
    return wanted


def _relay_owned(config: RelayConfig) -> set[str]:
    """The compacted topics the relay creates itself whatever the mapping's ``topics.create`` (one
    partition, compacted: ``relay.kafka.compacted``): heartbeats, and in exactly-once mode the positions
    and the schema history."""
    k = config.kafka
    owned = {k.heartbeat_topic} if k.heartbeat_topic else set()
    if k.exactly_once:
        owned.add(k.positions_topic)
        if config.schema.history != "off":
            owned.add(config.schema.topic)
    return owned


def _authorized(call: Callable[[], object]) -> set[str] | None:
    """The operations the broker says this account may do (None: it does not say)."""
    try:
        result = call().result(15)  # type: ignore[attr-defined]
    except Exception:
        return None
    ops = getattr(result, "authorized_operations", None)
    return None if ops is None else {str(getattr(op, "name", op)).upper() for op in ops}


def _present(admin: AdminClient, topic: str, partitions: int, settings: dict[str, str]) -> Check:
    what = f"topic {topic}"
    ops = _authorized(
        lambda: admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic]
    )
    if ops is not None and "WRITE" not in ops and "ALL" not in ops:
        return Check(
            FAIL, what, f"present, but this account may not write to it (allowed: {', '.join(sorted(ops))})"
        )
    if not settings:
        return Check(OK, what, f"present, {partitions} partition(s)")
    try:
        future = admin.describe_configs([ConfigResource("topic", topic)])
        found = {n: c.value for n, c in next(iter(future.values())).result(15).items()}
    except Exception as exc:
        return Check(WARN, what, f"present, {partitions} partition(s); its settings cannot be read: {exc}")
    wrong = [
        f"{n}={found.get(n)!r} (the mapping says {v!r})"
        for n, v in settings.items()
        if str(found.get(n)) != v
    ]
    if wrong:
        return Check(FAIL, what, f"present with other settings: {'; '.join(wrong)}")
    return Check(
        OK, what, f"present, {partitions} partition(s), {', '.join(f'{n}={v}' for n, v in settings.items())}"
    )


def _absent(mapping: Mapping | None, topic: str, ops: set[str] | None, *, owned: bool = False) -> Check:
    """An absent topic: created at start when the relay may (``owned``: the relay's own compacted topic,
    created whatever ``topics.create`` says), else a failure naming what to change."""
    what = f"topic {topic}"
    if mapping is not None and not mapping.topics.create and not owned:
        return Check(FAIL, what, "absent, and topics.create is false: create it before the start")
    if ops is not None and not ops & {"CREATE", "ALL"}:
        return Check(
            FAIL, what, f"absent, and this account may not create topics (allowed: {', '.join(sorted(ops))})"
        )
    proof = "" if ops is not None else " (the broker does not report this account's rights: not proved)"
    return Check(OK, what, f"absent: created at start{proof}")
