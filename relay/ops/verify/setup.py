"""Putting a ``relay verify`` run together from a relay's configuration: the shards, the source reader, the
relay's saved position, the topic side; and the run itself (``verify``).

The shards are the physical tables of the configured source that the CURRENT mapping routes to the
logical table and the sink filters keep (as an on-demand snapshot chooses them). The relay's saved
position (``relay.wiring.open_positions``, any backend) says how far it has published; it must belong to
the server ``source`` names (the relay reads the standby after a failover: verify against it then). A
mirror side (``relay.ops.verify.mirror.MirrorTarget``) is built by the CLI, which alone may reach
``relay.spark``. Runs on the caller's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from mapping.model import Mapping
from relay.config.load import RelayConfig
from relay.config.state import STATUS_FILE
from relay.daemon.status import pid_running, read_status
from relay.errors import VerifyError
from relay.kafka.codec import compacted
from relay.ops.verify.engine import Progress, Verifier, VerifyOptions
from relay.ops.verify.report import Report
from relay.ops.verify.shards import MULTISET, JoinKey, Shard, build_shard
from relay.ops.verify.source import RateLimit, SourceReader
from relay.ops.verify.target import Target
from relay.ops.verify.topic import TopicIndex
from relay.ops.verify.topic_target import TopicTarget
from relay.positions.store import PositionStore, ResumePoint
from relay.source.snapshot_plan import check_where
from relay.wiring import open_positions, snapshot_captures

log = logging.getLogger(__name__)


class StorePublished:
    """The relay's saved resume point, read again on every call."""

    def __init__(self, store: PositionStore) -> None:
        self.store = store

    def point(self) -> ResumePoint | None:
        return self.store.load()


def routed(config: RelayConfig, mapping: Mapping, table: str) -> Callable[[str, str], bool]:
    """Physical tables the relay captures and ``mapping`` routes to the logical ``table``."""
    captures = snapshot_captures(config, mapping)

    def only(db: str, name: str) -> bool:
        if not captures(db, name):
            return False
        route = mapping.resolve(db, name)
        return route is not None and f"{route.logical_db}.{route.logical_table}" == table

    return only


def plan_shards(
    config: RelayConfig, mapping: Mapping, table: str, reader: SourceReader, *, mirror: bool, where: str
) -> list[Shard]:
    if "." not in table:
        raise VerifyError(f"--table must name a logical db.table, got {table!r}")
    only = routed(config, mapping, table)
    tables = reader.tables()
    found = [(db, name, rows) for db, name, rows in tables if only(db, name)]
    if not found:
        seen = f"the account {config.source.user!r} sees {len(tables)} table(s) there" + (
            "" if tables else ": does source.user have SELECT on the captured tables? (relay check says)"
        )
        raise VerifyError(
            f"--table {table}: no table of {config.source.address} that mapping version {mapping.version} "
            f"routes to it is kept by filter.include/filter.exclude ({seen})"
        )
    if where:
        problem = check_where(config.source, [f"{db}.{name}" for db, name, _ in found], where)
        if problem is not None:
            raise VerifyError(problem)
    exact = reader.double_layout_ok()
    shards = []
    for db, name, rows in found:
        route = mapping.resolve(db, name)
        assert route is not None
        if route.columns is not None:  # the topic holds what the controls made of the rows, not the rows
            raise VerifyError(
                f"--table {table}: {db}.{name} has column controls ({route.columns.describe()}); "
                "relay verify does not compare controlled tables yet (the topic holds excluded, hashed, "
                "masked or truncated values the source does not)"
            )
        spec = reader.describe(db, name, rows)
        shard = build_shard(spec, route, mirror=mirror, digests_exact=exact, where=where)
        shards.append(replace(shard, defaults=reader.defaults(db, name)))
    return shards


def first_point(
    published: StorePublished, wait_seconds: float, stop: threading.Event | None = None
) -> ResumePoint | None:
    """The relay's saved position; a relay that has not saved one yet (just started) is waited for up to
    ``wait_seconds`` (``--wait``), as a relay behind is."""
    deadline = time.monotonic() + wait_seconds
    halt = stop or threading.Event()
    point = published.point()
    while point is None and time.monotonic() < deadline and not halt.wait(0.5):
        point = published.point()
    return point


def relay_running(config: RelayConfig) -> bool:
    """Whether a relay runs with ``config`` now: its status file names a live process."""
    data = read_status(config.state_path(STATUS_FILE))
    pid = data.get("pid") if data else None
    return isinstance(pid, int) and pid > 0 and pid_running(pid)


def check_server(
    reader: SourceReader, point: ResumePoint | None, config: RelayConfig, waited: float = 0.0
) -> None:
    """The saved position must be a place in the binlog of the server read."""
    if point is None:
        after = f" after {waited:g} s (--wait)" if waited else " and no relay runs with this config"
        raise VerifyError(
            f"instance {config.instance} has no saved position{after}: the relay has published nothing to "
            "compare; start it (relay status shows its position once it saved one)"
        )
    if point.source is None:
        return
    server_id, uuid = reader.identity()
    same = point.source.server_uuid == uuid if point.source.server_uuid and uuid else None
    if same is None:
        same = point.source.server_id in (0, server_id)
    if not same:
        raise VerifyError(
            f"the relay's position is in the binlog of {point.source.address} (server id "
            f"{point.source.server_id}), not of {config.source.address} (server id {server_id}): it reads "
            "another server (a failover?); point source.host/port at that server to verify"
        )


def topic_target(config: RelayConfig, mapping: Mapping, table: str, shards: list[Shard]) -> TopicTarget:
    topics = sorted({s.route.topic for s in shards})
    notes = []
    if any(s.method == MULTISET for s in shards) and compacted(mapping):
        notes.append("a table without a key cannot be rebuilt from a compacted topic")
    index = TopicIndex(
        {"bootstrap.servers": config.kafka.bootstrap_servers, **dict(config.kafka.settings)},
        topics,
        table,
        config.source_id,
        shards,
        connect_timeout=config.kafka.connect_timeout_seconds,
    )
    target = TopicTarget(index)
    target.notes = notes
    return target


@contextmanager
def session(config: RelayConfig, rate: float, where: str) -> Iterator[tuple[SourceReader, StorePublished]]:
    """An open source reader and the relay's position store, closed after."""
    reader = SourceReader(config.source, RateLimit(rate), where)
    reader.open()
    try:
        with open_positions(config) as store:
            yield reader, StorePublished(store)
    finally:
        reader.close()


def verify(
    reader: SourceReader,
    published: StorePublished,
    target: Target,
    shards: list[Shard],
    options: VerifyOptions,
    *,
    config: RelayConfig,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    keys: dict[str, list[JoinKey] | None] | None = None,
    deadline: float | None = None,
) -> Report:
    """One run; ``keys`` (and ``deadline``): only those keys, re-checked until then (after a repair)."""
    wait = options.wait_seconds if relay_running(config) else 0.0  # a relay that is not running saves none
    check_server(reader, first_point(published, wait, stop), config, wait)
    verifier = Verifier(options, reader, target, published, shards, progress=progress, stop=stop)
    report = verifier.run(pending_only=keys, deadline=deadline)
    report.notes = [*getattr(target, "notes", []), *report.notes]
    for shard in shards:
        if shard.method == MULTISET:
            report.notes.append(f"{shard.name}: {shard.reason}")
    return report
