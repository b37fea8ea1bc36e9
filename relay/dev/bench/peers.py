"""The peers ``relay bench --peers`` runs beside the relay: what each is asked to do, and how it is started.

A peer is another CDC system a team would choose instead of the relay, installed by the bench itself from
Maven Central (``relay.common.jars``: pinned, resolved once into a local folder, offline afterwards) and
configured as its own documentation says for throughput. Each run gives a peer one ``Capture`` (a table of
the bench database, from a binlog position, or from a snapshot of the table) and gets back a running
``PeerProcess``; the bench measures it from outside (``relay.dev.bench.observe``) and reads what it wrote
(``relay.dev.bench.landed``), exactly as it does the relay. The peer: ``debezium``
(``relay.dev.bench.peer_debezium``); ``canal`` was looked for and does not install (``UNAVAILABLE`` says why).
Runs on the bench's main thread.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from relay.dev.bench.common import Context, Progress
from relay.errors import BenchError

# What Apache Kafka's bin/kafka-run-class.sh gives every Kafka JVM (KAFKA_JVM_PERFORMANCE_OPTS), and the heap
# bin/connect-standalone.sh gives Kafka Connect (KAFKA_HEAP_OPTS): how the peers' documentation runs them.
KAFKA_JVM_OPTS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
CONNECT_HEAP = ("-Xms256M", "-Xmx2G")


@dataclass(frozen=True)
class Capture:
    """One run's job: the changes of ``table`` from ``start`` (a binlog file and position, the MariaDB GTID
    position there in ``gtid``), or, with ``start`` None, a snapshot of the table's rows first."""

    table: str
    start: tuple[str, int] | None = None
    gtid: str = ""


class PeerProcess(Protocol):
    """A peer started for one run: its top process (every process it runs is below it)."""

    @property
    def pid(self) -> int: ...

    def alive(self) -> bool: ...

    def stop(self) -> None: ...

    def log_tail(self) -> str: ...


class Peer(Protocol):
    name: str  # as --peers names it
    format: str  # the decoder of its values (relay.dev.bench.landed.DECODERS)
    snapshots: bool  # whether it can snapshot a table (the snapshot workload S)

    @property
    def label(self) -> str:
        """Name and versions, for the report."""
        ...

    def install(self, progress: Progress) -> None:
        """Resolve what it needs (once; a no-op afterwards), or raise ``BenchError`` saying what's missing."""
        ...

    def topics(self, table: str) -> list[str]:
        """The topics a run on ``table`` writes its row changes to (the bench creates them, empty)."""
        ...

    def side_topics(self) -> list[str]:
        """Other topics it writes (schema changes), created beside them."""
        ...

    def start(self, ctx: Context, capture: Capture, workdir: Path) -> PeerProcess:
        """Start it on ``capture`` against ``ctx``'s MariaDB and Kafka; it runs until stopped."""
        ...


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise BenchError("java is not installed: the peers run on a JVM (scripts/bootstrap installs OpenJDK)")
    return found


def gtid_at(conn: Any, position: tuple[str, int]) -> str:
    """MariaDB's GTID position at a binlog file and position (``BINLOG_GTID_POS``): a GTID reader's start."""
    with conn.cursor() as cur:
        cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position[0], position[1]))
        found = cur.fetchone()
    return str(found[0]) if found and found[0] is not None else ""


def http_json(method: str, url: str, body: Any = None, timeout: float = 30.0) -> Any:
    """One REST call with a JSON body and answer; ``BenchError`` with the answer's text on an HTTP error."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read().decode()
    except urllib.error.HTTPError as exc:
        raise BenchError(f"{method} {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc
    return json.loads(text) if text else None


def wait_for_rest(url: str, proc: PeerProcess, timeout: float) -> None:
    """Until ``url`` answers, the process dies (its log's tail in the error) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise BenchError(f"the peer exited before its REST interface answered:\n{proc.log_tail()}")
        try:
            http_json("GET", url, timeout=2.0)
            return
        except (OSError, BenchError):
            time.sleep(0.2)
    raise BenchError(f"{url} did not answer within {timeout:.0f}s:\n{proc.log_tail()}")


# The peers --peers takes, each made by relay.dev.bench.peer_session.make_peer.
PEER_NAMES = ("debezium",)
# Peers that were looked for and do not install here, and why (--peers names the reason instead of running).
UNAVAILABLE = {
    "canal": "canal's launcher (com.alibaba.otter:canal.deployer) is on Maven Central only at 1.1.4, whose "
    "binlog decoder stops at MariaDB's TABLE_MAP metadata for ENUM columns (binlog_row_metadata=FULL, field "
    "type 10: 'unknow type : 10', retried forever); the releases that read it (1.1.7, 1.1.8) publish their "
    "modules there but no canal.deployer",
}
