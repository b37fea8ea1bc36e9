"""The schema history's stores — a file, ZooKeeper, a compacted Kafka topic — against the real services,
one contract for all three: what one relay appends, a restarted relay and a relay taking over on another
host (a new client, a new process's view) read back record for record, and the schema of every place
(also an older one: a replay) comes out the same; records larger than a part are kept in parts;
``relay schema show`` reads each store through the relay's config. ZooKeeper appends carry the
leadership's fence: a relay whose term is over cannot append.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kazoo.client import KazooClient

from relay.cli.main import main
from relay.config.sections import HAConfig
from relay.dev.services import KafkaService, ZooKeeperService
from relay.errors import LeadershipError
from relay.ha.leadership import Leadership
from relay.kafka.schema_history import KafkaSchemaHistory, KafkaSchemaHistoryConfig
from relay.positions.zookeeper import FenceToken
from relay.schema.history import FileSchemaHistory, Record, SchemaHistory
from relay.schema.model import Catalog, Collation, ColumnDef, TableDef
from relay.schema.zookeeper import ZooKeeperSchemaHistory

FILE = "mysql-bin.000123"
FACTS = Catalog(
    collations={"utf8mb4_general_ci": Collation("utf8mb4_general_ci", "utf8mb4", 45, True)},
    databases={"shop_07": "utf8mb4_general_ci"},
).facts_json()


def orders(*extra: ColumnDef, key: tuple[str, ...] = ("id",)) -> TableDef:
    columns = (ColumnDef("id", "bigint"), ColumnDef("status", "varchar", (16,), False, "utf8mb4_general_ci"))
    return TableDef("shop_07", "orders_33", (*columns, *extra), key, "utf8mb4_general_ci")


KEY = ("shop_07", "orders_33")
NOTE = ColumnDef("note", "text", (), False, "utf8mb4_general_ci")
RECORDS = [
    Record("snapshot", (FILE, 4), ((KEY, orders()), (("shop_07", "gone"), orders())), FACTS),
    Record(
        "ddl", (FILE, 4567), ((KEY, orders(NOTE)),), {"databases": {}}, "ALTER TABLE orders_33 ADD note TEXT"
    ),
    Record("ddl", (FILE, 9000), ((("shop_07", "gone"), None),), {"databases": {}}, "DROP TABLE gone"),
    Record("learned", (FILE, 9500), ((KEY, orders(NOTE, key=("id", "status"))),)),
]


@dataclass
class Backend:
    name: str
    open: Callable[[], SchemaHistory]  # a new handle on the same store: another process, another host
    config: dict[str, Any]  # the relay config sections that name this store


@pytest.fixture(params=["file", "zookeeper", "kafka"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    tag = uuid.uuid4().hex[:10]
    if request.param == "file":
        path = tmp_path / "schema-history.jsonl"  # the file in the state directory the config names
        yield Backend("file", lambda: FileSchemaHistory(path), {"state_dir": str(tmp_path)})
        return
    if request.param == "zookeeper":
        zk: ZooKeeperService = request.getfixturevalue("zk_service")
        root = f"/relay-test-{tag}"
        clients: list[KazooClient] = []

        def open_zk() -> SchemaHistory:
            client = KazooClient(hosts=zk.hosts, timeout=10.0)
            client.start(timeout=30)
            clients.append(client)
            return ZooKeeperSchemaHistory(client, f"{root}/destinations/t/schema")

        config = {"positions": {"backend": "zookeeper"}, "ha": {"zookeeper": zk.hosts, "root": root}}
        yield Backend("zookeeper", open_zk, config)
        for client in clients:
            client.stop()
            client.close()
        return
    kafka: KafkaService = request.getfixturevalue("kafka_service")
    topic = f"schema-history-{tag}"
    opened: list[SchemaHistory] = []

    def open_kafka() -> SchemaHistory:
        history = KafkaSchemaHistory(KafkaSchemaHistoryConfig(kafka.bootstrap_servers, topic, "t"))
        opened.append(history)
        return history

    config = {
        "positions": {"backend": "kafka"},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "transactions": True, "exactly_once": True},
        "schema": {"topic": topic},
    }
    yield Backend("kafka", open_kafka, config)
    for history in opened:
        history.close()


def loaded(backend: Backend) -> SchemaHistory:
    history = backend.open()
    history.load()
    return history


def test_restart_and_takeover_read_every_record_and_the_schema_of_each_place(backend: Backend) -> None:
    first = loaded(backend)
    assert first.records == [] and first.empty
    for record in RECORDS:
        first.append(record)
    first.close()

    # Restart / takeover: a new handle (another client) finds every record, in order.
    second = loaded(backend)
    assert second.records == RECORDS
    at_start, after_alter = second.catalog_at((FILE, 4)), second.catalog_at((FILE, 4567))
    assert at_start.table(*KEY) == orders() and at_start.table("shop_07", "gone") is not None
    assert after_alter.table(*KEY) == orders(NOTE)
    latest = second.catalog_at((FILE, 10_000))
    assert latest.table("shop_07", "gone") is None
    assert latest.table(*KEY) == orders(NOTE, key=("id", "status"))
    # A replay from an older place, after the newer records exist: the older schema.
    assert second.catalog_at((FILE, 4566)).table(*KEY) == orders()

    # The relay that took over goes on appending; the first one, restarted, sees that too.
    resync = Record("resync", (FILE, 9600), ((KEY, orders()),))
    second.append(resync)
    second.close()
    third = loaded(backend)
    assert third.records == [*RECORDS, resync]
    assert third.catalog_at((FILE, 9600)).table(*KEY) == orders()
    third.close()


def test_a_record_larger_than_a_part_is_kept_in_parts(backend: Backend) -> None:
    names = [(f"shop_{i:02d}", f"orders_{j:02d}") for i in range(16) for j in range(64)]
    tables = tuple((name, orders().renamed(*name)) for name in names)
    big = Record("snapshot", (FILE, 4), tables, FACTS)
    writer = loaded(backend)
    writer.part_bytes = 2_000  # a 1024-table snapshot compresses to many such parts
    writer.append(big)
    writer.append(RECORDS[1])
    writer.close()
    reader = loaded(backend)
    assert reader.records == [big, RECORDS[1]]
    assert len(reader.catalog_at((FILE, 5000)).tables) == 1024
    reader.close()


def test_relay_schema_show_reads_the_store_the_config_names(
    backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = loaded(backend)
    for record in RECORDS:
        writer.append(record)
    writer.close()
    data: dict[str, Any] = {"instance": "t", "state_dir": str(tmp_path)}
    for section, values in backend.config.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    cfg = tmp_path / "relay.yaml"
    cfg.write_text(yaml.safe_dump(data))
    table = ["--table", "shop_07.orders_33"]
    assert main(["schema", "show", "-c", str(cfg), *table, "--at", f"{FILE}:4567"]) == 0
    out = capsys.readouterr().out
    assert f"as of {FILE}:4567" in out and "note" in out and "primary key: (id)" in out
    assert main(["schema", "show", "-c", str(cfg), *table]) == 0  # no saved position: the newest record
    out = capsys.readouterr().out
    assert f"as of {FILE}:9500" in out and "primary key: (id, status)" in out
    assert main(["schema", "show", "-c", str(cfg), "--table", "shop_07.gone", "--at", f"{FILE}:9000"]) == 1
    assert "not known at this place" in capsys.readouterr().out


class StaticFence:
    """A zombie's view: the token it got while it led, handed out without any local check."""

    def __init__(self, token: FenceToken) -> None:
        self.token = token

    def guard(self) -> FenceToken:
        return self.token


def test_a_relay_whose_leadership_is_over_cannot_append_to_the_zookeeper_history(
    zk_service: ZooKeeperService,
) -> None:
    config = HAConfig(enabled=True, zookeeper=zk_service.hosts, root=f"/relay-test-{uuid.uuid4().hex[:10]}",
                      session_timeout_seconds=6.0)  # fmt: skip
    client = KazooClient(hosts=zk_service.hosts, timeout=10.0)
    client.start(timeout=30)
    old, new = Leadership(config, "t"), Leadership(config, "t")
    try:
        old.start()
        assert old.acquire(threading.Event())
        path = f"{old.layout.base}/schema"
        ZooKeeperSchemaHistory(client, path, fence=old).append(RECORDS[0])
        token = old.guard()
        client.delete(old.layout.running)  # the old term ends without the old leader noticing
        new.start()
        assert new.acquire(threading.Event())
        ZooKeeperSchemaHistory(client, path, fence=new).append(RECORDS[1])
        zombie = ZooKeeperSchemaHistory(client, path, fence=StaticFence(token))
        with pytest.raises(LeadershipError, match=f"epoch {old.epoch} is over"):
            zombie.append(RECORDS[2])
        again = ZooKeeperSchemaHistory(client, path)
        again.load()
        assert again.records == RECORDS[:2]
    finally:
        new.close()
        old.close()
        client.stop()
        client.close()
