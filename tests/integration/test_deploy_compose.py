"""deploy/test/compose.yml: the production shape in containers — MariaDB (its account made by
deploy/mysql/init/10-relay-user.sh), ZooKeeper, the development broker, two relays (one active, one standing
by) with the production config deploy/conf, and the Spark mirror — all built here.

A row written to MariaDB must come out of Kafka (read by an independent consumer) and out of the mirror as
``SELECT`` shows it; every file the relays and the mirror write must be on their volumes and belong to the
image's user; ``relay snapshot run`` must work inside the active relay's container; stopping the active relay
must hand over to the standby. Skipped where no container engine or compose tool exists, or where containers
cannot reach each other by service name.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration import containers
from tests.integration.relay_harness import wait_for

# Building the images takes minutes the first time (and after an edit of the relay's source): more than the
# suite's 300 s per test, which the setup of the first test here includes.
pytestmark = pytest.mark.timeout(3600)

COMPOSE_FILE = containers.ROOT / "deploy" / "test" / "compose.yml"
CONFIG = "/etc/relay/relay.yaml"
# The characters the old init script mangled, in both secrets: they reach MariaDB and the relay unchanged.
RELAY_PASSWORD = "r&l|y\\'\"#1"
ROOT_PASSWORD = "ro&t|\\'\"#2"
IMAGES = {
    "canal-relay-spark:test": ("deploy/Dockerfile", ("WITH_SPARK=true",)),
    "canal-relay-test-mariadb:10.11": ("deploy/test/mariadb.Dockerfile", ()),
    "canal-relay-test-zookeeper:3.8": ("deploy/test/zookeeper.Dockerfile", ()),
    "canal-relay-test-broker:tansu": ("deploy/test/broker.Dockerfile", ()),
}

READ_TOPIC = """
import json, sys, time
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
topic, want, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
meta = AdminClient({"bootstrap.servers": "kafka:9092"}).list_topics(topic, timeout=20).topics[topic]
consumer = Consumer({"bootstrap.servers": "kafka:9092", "group.id": "t", "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
out, rows = [], 0
while rows < want and time.monotonic() < deadline:
    msg = consumer.poll(0.5)
    if msg is None or msg.error():
        continue
    value = json.loads(msg.value())
    rows += not value.get("isDdl")
    out.append({"partition": msg.partition(), "offset": msg.offset(), "key": (msg.key() or b"").decode(),
                "headers": {k: v.decode() for k, v in msg.headers() or []}, "value": value})
consumer.close()
print(json.dumps(out))
"""

# The answer is written and flushed, then os._exit: the reader was seen (CI) to end with status 134,
# "terminate called without an active exception" — a native thread pool (pyarrow's, delta-rs's) torn down
# by the interpreter's exit; the rows printed before it are all this check needs.
READ_MIRROR = """
import json, os, sys
rows = []
path = "/var/lib/relay/mirror/shop.orders"  # the Delta table (the mirror's default format), read by delta-rs
if os.path.isdir(os.path.join(path, "_delta_log")):
    from deltalake import DeltaTable
    wanted = ("id", "status", "amount", "_source")
    rows = [{k: str(row[k]) for k in wanted} for row in DeltaTable(path).to_pyarrow_table().to_pylist()]
sys.stdout.write(json.dumps(rows) + "\\n")
sys.stdout.flush()
os._exit(0)
"""


@dataclass
class Stack:
    project: str
    log: Path

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def volume(self, name: str) -> str:
        return f"{self.project}_{name}"

    def sql(self, statements: str) -> list[list[str]]:
        """Statements run by root in the mysql container (the password in its environment, not argv)."""
        out = containers.run(
            "exec", "-i", "-e", "MYSQL_PWD", self.container("mysql"), "mariadb", "-uroot", "-N", "-B",
            stdin=statements, env={"MYSQL_PWD": ROOT_PASSWORD},
        )  # fmt: skip
        return [line.split("\t") for line in out.splitlines()]

    def status(self, service: str) -> dict[str, Any]:
        container = self.container(service)
        out = containers.run("exec", container, "relay", "status", "-c", CONFIG, "--json", check=False)
        return dict(json.loads(out)) if out.strip().startswith("{") else {}

    def active(self) -> str | None:
        running = [s for s in ("relay-a", "relay-b") if self.status(s).get("state") == "running"]
        return running[0] if len(running) == 1 else None

    def records(self, want: int, reader: str = "relay-b", timeout: float = 60.0) -> list[dict[str, Any]]:
        """The records of shop.orders, read by a consumer of its own in ``reader``'s container until it has
        ``want`` row records (DDL barriers not counted) or ``timeout`` passed."""
        code = READ_TOPIC
        out = containers.run(
            "exec", "-i", self.container(reader), "python3", "-", "shop.orders", str(want), str(timeout),
            stdin=code, timeout=timeout + 60,
        )  # fmt: skip
        return list(json.loads(out.strip().splitlines()[-1]))


def _compose_command() -> list[str]:
    named = os.environ.get("RELAY_TEST_COMPOSE")
    if named:
        return shlex.split(named)
    engine = Path(containers.require_engine()).name
    if engine == "podman" and shutil.which("podman-compose"):
        return ["podman-compose"]
    if engine == "docker":
        return ["docker", "compose"]
    pytest.skip("no compose tool for the container engine (podman-compose; RELAY_TEST_COMPOSE names one)")


def _compose(stack: Stack, *args: str, timeout: float = 600.0, check: bool = True) -> None:
    env = {**os.environ, "RELAY_MYSQL_PASSWORD": RELAY_PASSWORD, "MYSQL_ROOT_PASSWORD": ROOT_PASSWORD}
    command = [*_compose_command(), "-p", stack.project, "-f", str(COMPOSE_FILE), *args]
    with stack.log.open("ab") as log:
        done = subprocess.run(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {done.returncode}; see {stack.log}")


@pytest.fixture(scope="module")
def stack(relay_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    _compose_command()
    logs = tmp_path_factory.mktemp("compose")
    for tag, (dockerfile, args) in IMAGES.items():
        containers.build(tag, dockerfile, logs / "images.log", args)
    stack = Stack(containers.unique("crtest"), logs / "compose.log")
    try:
        _compose(stack, "up", "-d", "--no-build")
        resolves = subprocess.run(
            [containers.require_engine(), "exec", stack.container("relay-a"), "getent", "hosts", "mysql"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if resolves.returncode != 0:  # every test of the module needs it: skipped, each with the reason
            pytest.skip(
                "containers cannot reach each other by service name on this engine's network (podman with "
                "CNI needs the dnsname plugin: Debian's golang-github-containernetworking-plugin-dnsname)"
            )
        yield stack
    finally:
        for service in ("relay-a", "relay-b", "spark-mirror", "mysql", "kafka", "zookeeper"):
            logs.joinpath(f"{service}.log").write_text(containers.logs(stack.container(service)))
        # Nothing of a test outlives it: the containers with their anonymous volumes (the image's VOLUME where
        # a service mounts none, e.g. the mirror's /var/lib/relay), then the named volumes and the network.
        label = f"label=io.podman.compose.project={stack.project}"
        started = containers.run("ps", "-a", "-q", "--filter", label, check=False).split()
        if started:
            containers.run("rm", "-f", "-v", "-t", "5", *started, check=False, timeout=120)
        _compose(stack, "down", "-v", "-t", "5", check=False)
        for kind in ("volume", "network"):
            names = containers.run(kind, "ls", "-q", "--filter", label, check=False).split()
            if names:
                containers.run(kind, "rm", "-f", *names, check=False)


def test_services_reach_each_other_and_one_relay_is_active(stack: Stack) -> None:
    wait_for(lambda: stack.active() is not None, 240, "relay-a or relay-b active, the other a standby")
    standby = {"relay-a": "relay-b", "relay-b": "relay-a"}[stack.active() or ""]
    assert stack.status(standby).get("state") != "running"


def _orders(stack: Stack) -> dict[str, dict[str, str]]:
    """{"shop_NN.orders_NN/id": row} as SELECT shows it."""
    rows = {}
    for db, table in (("shop_00", "orders_00"), ("shop_01", "orders_07")):
        for id_, status, amount in stack.sql(f"SELECT id, status, amount FROM {db}.{table} ORDER BY id"):
            rows[f"{db}.{table}/{id_}"] = {"id": id_, "status": status, "amount": amount}
    return rows


def _latest(records: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """The latest row per key, reading each partition in offset order (a consumer's view)."""
    state: dict[str, dict[str, str]] = {}
    for rec in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        value = rec["value"]
        if value.get("isDdl"):
            continue
        key = json.loads(rec["key"])
        name = f"{key['_shard']}/{key['id']}"
        if value["type"] == "DELETE":
            state.pop(name, None)
        else:
            state[name] = {k: str(value["data"][0][k]) for k in ("id", "status", "amount")}
    return state


def test_a_row_reaches_kafka_and_the_mirror(stack: Stack) -> None:
    stack.sql(
        "CREATE DATABASE shop_00; CREATE DATABASE shop_01;"
        "CREATE TABLE shop_00.orders_00 (id BIGINT PRIMARY KEY, status VARCHAR(16), amount DECIMAL(12,2));"
        "CREATE TABLE shop_01.orders_07 (id BIGINT PRIMARY KEY, status VARCHAR(16), amount DECIMAL(12,2));"
        # The same id in two shards: two rows, kept apart by the shard in the key (deploy/conf/mapping.yaml).
        "INSERT INTO shop_00.orders_00 VALUES (1, 'new', 10.50), (2, 'new', 20.00);"
        "INSERT INTO shop_01.orders_07 VALUES (1, 'paid', 99.99);"
        "UPDATE shop_00.orders_00 SET status = 'paid' WHERE id = 2;"
    )
    expected = _orders(stack)
    assert len(expected) == 3
    deadline = time.monotonic() + 120
    while _latest(stack.records(4, timeout=20)) != expected:
        assert time.monotonic() < deadline, f"Kafka: {_latest(stack.records(4, timeout=5))} != {expected}"

    def mirror() -> dict[str, dict[str, str]]:
        rows = containers.python_in(stack.container("spark-mirror"), READ_MIRROR)
        return {f"{r['_source']}/{r['id']}": {k: r[k] for k in ("id", "status", "amount")} for r in rows}

    wait_for(lambda: mirror() == expected, 300, "the mirror holds the rows SELECT shows", interval=2)


def test_state_is_written_to_the_volumes_by_the_image_user(stack: Stack) -> None:
    active = stack.active()
    assert active is not None
    owners = containers.volume_owner(stack.volume(f"{active}-state"), "")
    assert "shop/status.json" in owners, owners
    assert set(owners.values()) == {containers.IMAGE_USER}, owners
    mirror = containers.volume_owner(stack.volume("mirror-data"), "")
    assert any(name.startswith("shop.orders/_delta_log/") for name in mirror), mirror
    assert set(mirror.values()) == {containers.IMAGE_USER}, mirror


def test_snapshot_run_inside_the_active_relay(stack: Stack) -> None:
    active = stack.active()
    assert active is not None
    earlier = stack.records(1000, timeout=10)
    seen = {(r["partition"], r["offset"]) for r in earlier}
    rows = sum(not r["value"].get("isDdl") for r in earlier)
    containers.run(
        "exec", stack.container(active), "relay", "snapshot", "run", "-c", CONFIG, "--table", "shop.orders",
        "--follow", timeout=300,
    )  # fmt: skip
    records = stack.records(rows + 3, timeout=60)
    new = [r for r in records if (r["partition"], r["offset"]) not in seen]
    snapshot = [r for r in new if r["headers"].get("relay.snapshot") == "true"]
    assert len(snapshot) == 3, new
    assert _latest(records) == _orders(stack)


def test_the_standby_takes_over_when_the_active_relay_stops(stack: Stack) -> None:
    active = stack.active()
    assert active is not None
    standby = "relay-b" if active == "relay-a" else "relay-a"
    containers.run("stop", "-t", "45", stack.container(active), timeout=90)
    code = containers.run("inspect", "--format", "{{.State.ExitCode}}", stack.container(active))
    assert code.strip() == "0", "a graceful stop"
    wait_for(lambda: stack.status(standby).get("state") == "running", 120, f"{standby} takes over")
    stack.sql("INSERT INTO shop_01.orders_07 VALUES (2, 'new', 5.00);")
    expected = _orders(stack)
    deadline = time.monotonic() + 120
    while _latest(stack.records(1000, reader=standby, timeout=10)) != expected:
        assert time.monotonic() < deadline, "the standby did not publish the new row"
