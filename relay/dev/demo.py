"""``relay demo``: the README's main command — the whole relay, end to end, on throwaway local services.

In a temp dir: starts MariaDB (ROW binlog) and Apache Kafka (one KRaft broker), creates a sharded sample
(``shop_00..03`` × ``orders_00..03`` → logical ``shop.orders``, plus the unsharded ``shop_00.customers`` →
``shop``), writes the demo's ``conf/relay.yaml`` and ``conf/mapping.yaml``, runs the relay from the binlog
position before the sample rows, writes inserts, updates, deletes and one ALTER, waits until the saved
position reaches the server's binlog end, reads every logical topic back and shows what landed there. Its last
check is the demo's promise: the latest state rebuilt from ``shop.orders`` equals SELECT over the physical
shards.

Runs in the CLI's thread (this is the CLI layer: printing is its job). The relay runs in a thread of this
process, stopped as SIGTERM stops it; with ``--keep`` it runs as a detached ``relay run`` process instead,
beside detached services, so that all three outlive the demo; the demo then prints how to reach them and
writes ``stop`` and ``read-topic`` scripts into the temp dir. The sample and the config files are
``relay.dev.demo_sample``'s, reading and checking the topics ``relay.dev.demo_topics``'.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import KafkaException

from relay.common.jars import KAFKA_VERSION
from relay.config.state import STATUS_FILE
from relay.dev.demo_sample import (
    DB_TOPIC,
    DDL_TOPIC,
    ORDERS,
    ORDERS_TOPIC,
    SHARDS,
    TABLES,
    Workload,
    Written,
    binlog_end,
    create_schema,
    write_configs,
)
from relay.dev.demo_topics import (
    DEADLINE,
    Rec,
    check_consistency,
    holds_all,
    partitions_of,
    read_topics,
    say,
    show_audit,
    show_topic,
)
from relay.errors import DemoError, RelayError

if TYPE_CHECKING:
    from relay.daemon.pipeline import Relay
    from relay.positions.store import ResumePoint

# -- the relay: a thread here, or a detached process with --keep -------------------------------------------


class RelayRunner(Protocol):
    pid: int

    def start(self) -> None: ...

    def failure(self) -> str | None: ...

    def stop(self) -> None: ...


class RelayThread:
    """``Relay.run`` in a thread of the demo; ``stop`` is what SIGTERM does to ``relay run``."""

    def __init__(self, config_path: Path) -> None:
        from mapping import load_mapping
        from relay.config.load import load_config
        from relay.wiring import build_relay

        config = load_config(config_path)
        self.relay: Relay | None = build_relay(
            config, load_mapping(config.config_path(config.mapping.file), "mapping.file")
        )
        self.pid = os.getpid()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="relay-demo", daemon=True)

    def _run(self) -> None:
        assert self.relay is not None
        try:
            self.relay.run()
        except BaseException as exc:  # handed to the demo's thread, which reports it
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def failure(self) -> str | None:
        if self.error is not None:
            return f"the relay stopped: {self.error}"
        return None if self.thread.is_alive() else "the relay thread ended"

    def stop(self) -> None:
        if self.relay is None:
            return
        self.relay.stop()
        if self.thread.ident is not None:  # started
            self.thread.join(30)
        # Its Kafka clients live until collected, and would log the broker's shutdown as errors.
        self.relay = self.error = None
        gc.collect()


class RelayProcess:
    """``relay run -c <config>`` in its own session, its output in ``relay.log``: it outlives the demo."""

    def __init__(self, config_path: Path, workdir: Path) -> None:
        self.config_path, self.log_path = config_path, workdir / "relay.log"
        self.argv = [sys.executable, "-m", "relay.cli", "run", "-c", str(config_path)]
        self.popen: subprocess.Popen[bytes] | None = None
        self.pid = self.start_time = 0

    def start(self) -> None:
        from relay.dev.services import proc_start_time

        with open(self.log_path, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.config_path.parent.parent,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # no terminal ^C, and it survives the demo's exit
            )
        self.pid = self.popen.pid
        self.start_time = proc_start_time(self.pid) or 0

    def failure(self) -> str | None:
        from relay.dev.services import log_tail

        if self.popen is None or self.popen.poll() is None:
            return None
        return f"relay run exited with {self.popen.returncode}:\n{log_tail(self.log_path, 15)}"

    def stop(self) -> None:
        from relay.dev.services import stop_pid

        if self.popen is not None:
            stop_pid(self.pid, self.start_time, timeout=20.0, popen=self.popen)


# -- progress and catching up ------------------------------------------------------------------------------


class Progress:
    """At most one progress line a second: rows written, rows and records published, the saved position.

    Reads what ``relay status`` reads (the status and position files), so it works the same for a relay
    thread and a ``relay run`` process."""

    def __init__(self, config_path: Path, runner: RelayRunner) -> None:
        from relay.config.load import load_config
        from relay.wiring import file_positions

        config = load_config(config_path)
        self.status_path = config.state_path(STATUS_FILE)
        self.positions = file_positions(config)
        self.runner = runner
        self.started = time.monotonic()
        self.next_line = self.started + 1.0
        self.written = 0

    def published(self) -> tuple[int, int, str]:
        """(rows, records, position) the relay has published and acknowledged: one status snapshot."""
        from relay.daemon.status import read_status

        status = read_status(self.status_path) or {}
        rows, records = int(status.get("rows_published", 0)), int(status.get("records_published", 0))
        return rows, records, str(status.get("last_position") or "-")

    def tick(self, written: int | None = None, force: bool = False) -> None:
        """Raise if the relay failed; print a line if a second has passed (or ``force``)."""
        if written is not None:
            self.written = written
        problem = self.runner.failure()
        if problem:
            raise DemoError(problem)
        now = time.monotonic()
        if not force and now < self.next_line:
            return
        self.next_line = now + 1.0
        rows, records, position = self.published()
        say(
            f"  {now - self.started:5.1f}s  written {self.written:>5} rows   published {rows:>5} rows "
            f"in {records:>5} records   at {position}"
        )

    def wait_caught_up(self, end: tuple[str, int]) -> ResumePoint:
        """Until the saved resume point is the server's binlog end (a transaction boundary: no skip) and
        the status file counts every row written."""
        from relay.kafka.codec import file_number

        deadline = time.monotonic() + DEADLINE
        target = (file_number(end[0]), end[1])
        while True:
            point = self.positions.load()
            if (
                point is not None
                and not point.skip
                and (file_number(point.journal), point.offset) >= target
                and self.published()[0] >= self.written
            ):
                self.tick(force=True)
                return point
            if time.monotonic() > deadline:
                raise DemoError(f"the relay did not reach {end[0]}:{end[1]} within {DEADLINE:.0f}s")
            self.tick()
            time.sleep(0.05)


# -- --keep: what is left running, and how to reach it -----------------------------------------------------

_READ_TOPIC = '''#!@PYTHON@
"""Print a topic of the `relay demo --keep` broker from its start: read-topic [TOPIC] [IDLE_SECONDS]."""
import sys
import time

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

topic = sys.argv[1] if len(sys.argv) > 1 else "shop.orders"
idle = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
bootstrap = "@BOOTSTRAP@"
meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-topic", "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
last = time.monotonic()
while time.monotonic() - last < idle:  # until nothing new for IDLE_SECONDS
    msg = consumer.poll(0.5)
    if msg is None or msg.error():
        continue
    last = time.monotonic()
    key = (msg.key() or b"").decode()
    value = msg.value()  # None: a tombstone (debezium-json writes one after each DELETE)
    text = value.decode() if value is not None else "(tombstone)"
    print(f"p{msg.partition()}@{msg.offset()} {key} {text}", flush=True)
consumer.close()
'''

_STOP = '''#!@PYTHON@
"""Stop what `relay demo --keep` left running (the relay first, as SIGTERM does), then remove its dir."""
import shutil
import sys

sys.path.insert(0, @ROOT@)
from relay.dev.services import stop_pid

for name, pid, start_time in @PROCS@:
    print(f"stopping {name} (pid {pid})", flush=True)
    stop_pid(pid, start_time, timeout=30.0)
shutil.rmtree(@WORKDIR@, ignore_errors=True)
print("removed", @WORKDIR@)
'''


def _script(path: Path, template: str, **values: str) -> Path:
    text = template.replace("@PYTHON@", sys.executable)
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    path.write_text(text)
    path.chmod(0o755)
    return path


def relay_command() -> str:
    """How to run ``relay`` here: on the PATH, beside this Python (a venv not activated), or as a module."""
    if shutil.which("relay"):
        return "relay"
    beside = Path(sys.executable).parent / "relay"
    return str(beside) if beside.exists() else f"{sys.executable} -m relay.cli"


# -- the whole demo ----------------------------------------------------------------------------------------


class Demo:
    """One run of the demo in ``workdir``; ``cleanup`` stops whatever it started, in reverse order."""

    def __init__(self, workdir: Path, keep: bool, orders: int) -> None:
        from relay.dev.services import EmbeddedKafka, EmbeddedMySQL

        self.workdir, self.keep, self.orders = workdir, keep, orders
        self.mysql = EmbeddedMySQL(workdir / "mysql", detached=keep)
        self.kafka = EmbeddedKafka(workdir / "kafka", detached=keep)
        self.runner: RelayRunner | None = None
        self.started = time.monotonic()

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:.1f}s"

    def run(self) -> int:
        mysql, bootstrap = self._services()
        with contextlib.closing(mysql.connect()) as conn:
            create_schema(conn)
            start = binlog_end(conn)
            say(f"Created shop_00..shop_{SHARDS - 1:02d} x orders_00..orders_{TABLES - 1:02d} and customers.")
            config = write_configs(self.workdir, mysql, bootstrap, start)
            say(f"Config:  {config}\nMapping: {config.parent / 'mapping.yaml'}")
            progress = self._relay(config)
            say(f"Relaying from {start[0]}:{start[1]} while the sample is written:")
            written = Workload(conn, self.orders, progress.tick).run()
            progress.tick(written.rows())
            end = binlog_end(conn)
            say(f"Wrote {written.rows()} row changes and 1 ALTER; binlog end {end[0]}:{end[1]}; catching up:")
            point = progress.wait_caught_up(end)
            say(f"Caught up, {self.elapsed()} after the start. What landed in each topic:")
            topics = self._show(bootstrap, written)
            where = progress.positions.path.relative_to(self.workdir)
            say(f"  position     {point} = binlog end, GTID {point.gtid or '-'} ({where})")
            ok = check_consistency(conn, topics)
        if self.keep:
            self._kept(mysql, bootstrap, config)
        return 0 if ok else 1

    def _services(self) -> tuple[Any, str]:
        say(f"Working in {self.workdir}")
        mysql = self.mysql.start()
        assert self.mysql.running is not None
        version, pid = mysql.version.split("-")[0], self.mysql.running.process.pid
        say(f"Started {mysql.flavor} {version} at {mysql.host}:{mysql.port} (pid {pid})")
        kafka = self.kafka.start()
        assert self.kafka.running is not None
        pid = self.kafka.running.process.pid
        say(f"Started Apache Kafka {KAFKA_VERSION} (KRaft) at {kafka.bootstrap_servers} (pid {pid})")
        return mysql, kafka.bootstrap_servers

    def _relay(self, config: Path) -> Progress:
        runner: RelayRunner = RelayProcess(config, self.workdir) if self.keep else RelayThread(config)
        self.runner = runner
        runner.start()
        how = f"`relay run` process, pid {runner.pid}" if self.keep else "a thread of this process"
        say(f"Started the relay ({how}).")
        return Progress(config, runner)

    def _show(self, bootstrap: str, written: Written) -> dict[str, list[Rec]]:
        parts = partitions_of(bootstrap)
        missing = [t for t in (ORDERS_TOPIC, DB_TOPIC, DDL_TOPIC) if t not in parts]
        if missing:
            raise DemoError(f"topics missing on the broker: {', '.join(missing)}")
        parts = {t: parts[t] for t in (ORDERS_TOPIC, DB_TOPIC, DDL_TOPIC)}
        topics: dict[str, list[Rec]] = read_topics(bootstrap, parts, holds_all(written))
        for topic in (ORDERS_TOPIC, DB_TOPIC):
            show_topic(topic, topics[topic], parts[topic], written.counts[topic])
        show_audit(topics[DDL_TOPIC])
        return topics

    def _kept(self, mysql: Any, bootstrap: str, config: Path) -> None:
        from relay.config.load import load_config
        from relay.ops.status import status_report

        assert self.mysql.running and self.kafka.running and isinstance(self.runner, RelayProcess)
        report = status_report(load_config(config))
        if not report["running"]:
            raise DemoError(f"relay status says the kept relay is not running: {report}")
        from relay.dev.demo_console import start_console

        console = start_console(self.workdir, config)
        procs = [
            ("console", console.pid, console.start_time),
            ("relay", self.runner.pid, self.runner.start_time),
            ("broker", self.kafka.running.process.pid, self.kafka.running.process.start_time),
            ("mariadbd", self.mysql.running.process.pid, self.mysql.running.process.start_time),
        ]
        root = repr(str(Path(__file__).resolve().parent.parent))
        stop = _script(
            self.workdir / "stop", _STOP, ROOT=root, PROCS=repr(procs), WORKDIR=repr(str(self.workdir))
        )
        read = _script(self.workdir / "read-topic", _READ_TOPIC, BOOTSTRAP=bootstrap)
        relay, pids = relay_command(), " ".join(str(p[1]) for p in procs)
        for line in (
            f"\nLeft running (relay status: {report['state']}, position {report['position']}):",
            f"  console   pid {procs[0][1]}: {console.url}  login: {console.user} / {console.password} "
            f"(operator; users in {console.users_path.name})",
            f"            log {console.log_path}",
            f"  relay     pid {procs[1][1]}: {relay} run -c {config}",
            f"            log {self.runner.log_path}",
            f"  broker    pid {procs[2][1]}: bootstrap servers {bootstrap}",
            f"  MariaDB   pid {procs[3][1]}: mysql://{mysql.user}:{mysql.password}@{mysql.host}:{mysql.port}",
            f"Connect:      mariadb -h {mysql.host} -P {mysql.port} -u {mysql.user} -p{mysql.password}",
            f"Status:       {relay} status -c {config}",
            f"Read a topic: {read} shop.orders   (or shop, {DDL_TOPIC})",
            f"Stop all:     {stop}",
            f"  (or: kill {pids}; rm -rf {self.workdir})",
        ):
            say(line)

    def cleanup(self) -> None:
        """Stop the relay (as SIGTERM would), the broker and MariaDB, and remove the temp dir."""
        problems: list[str] = []
        for name, stop in (
            ("the relay", self.runner.stop if self.runner else None),
            ("the broker", self.kafka.stop),
            ("MariaDB", self.mysql.stop),
        ):
            if stop is None:
                continue
            try:
                stop()
            except (RelayError, OSError) as exc:
                problems.append(f"stopping {name}: {exc}")
        shutil.rmtree(self.workdir, ignore_errors=True)
        for problem in problems:
            say(f"warning: {problem}")
        say(f"Stopped the relay, the broker and MariaDB; removed {self.workdir}.")


def run_demo(keep: bool = False, orders: int = ORDERS) -> int:
    """The demo; returns the exit status (1: the topic does not rebuild the table). Cleans up on any
    exit unless ``keep`` and the demo got to the end."""
    import pymysql

    if orders < 1:
        raise DemoError(f"--orders must be at least 1, got {orders}")
    workdir = Path(tempfile.mkdtemp(prefix="relay-demo-"))
    demo = Demo(workdir, keep, orders)
    kept = False
    try:
        status = demo.run()
        kept = keep
    except KeyboardInterrupt:
        say("\nInterrupted: stopping everything.")
        raise
    except pymysql.err.MySQLError as exc:
        raise DemoError(f"writing the sample: {exc}") from exc
    except KafkaException as exc:
        raise DemoError(f"reading the topics: {exc}") from exc
    finally:
        if not kept:
            demo.cleanup()
    say(f"Done in {demo.elapsed()}.")
    return status
