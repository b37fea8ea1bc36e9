"""``relay dev up | down | status``: real local MariaDB, Apache Kafka and ZooKeeper for a developer's machine.

Owns the dev state directory (``$RELAY_DEV_DIR``, default ``./.relay-dev``): one sub-directory per service
(data and log) and ``state.json``, which records each detached server's pid, process start time, address
and directory so that a later ``down`` or ``status`` — another process — can find them. Runs on the CLI's
main thread; ``up`` starts the services concurrently on worker threads (detached children do not depend
on the thread that forked them). Hands the user the addresses to connect to, as text or ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from relay.cli import values
from relay.dev import services
from relay.errors import ArgumentError, RelayError, ServiceError

log = logging.getLogger(__name__)

SERVICES = ("mysql", "kafka", "zk")
_STATE_FILE = "state.json"


@dataclass(frozen=True)
class ServiceRecord:
    """One detached server as ``state.json`` remembers it; ``address`` is the service's text form.

    ``others``: the (pid, start time) of every further process of the service — the other nodes of a Kafka
    cluster — and ``broker``: which broker the ``kafka`` service is (``kafka`` or ``tansu``)."""

    name: str
    pid: int
    start_time: int
    address: str
    directory: str
    log: str
    others: tuple[tuple[int, int], ...] = ()
    broker: str = ""

    def processes(self) -> list[tuple[int, int]]:
        return [(self.pid, self.start_time), *((int(p), int(t)) for p, t in self.others)]

    def alive(self) -> bool:
        return all(services.pid_alive(pid, start) for pid, start in self.processes())

    def answers(self) -> bool:
        if self.name == "mysql":
            return services.mysql_answers(services.MySQLService.parse(self.address))
        if self.name == "kafka":
            return services.kafka_answers(services.KafkaService.parse(self.address))
        return services.zookeeper_answers(services.ZooKeeperService.parse(self.address))

    def describe(self) -> dict[str, Any]:
        """What a user needs to connect, by service kind."""
        out: dict[str, Any] = {"pid": self.pid, "directory": self.directory, "log": self.log}
        if self.name == "mysql":
            svc = services.MySQLService.parse(self.address)
            out.update(
                url=svc.url, replication_url=svc.replication_url, flavor=svc.flavor, version=svc.version
            )
        elif self.name == "kafka":
            out["bootstrap_servers"] = self.address
            out["broker"] = self.broker or "tansu"  # a state file from before Apache Kafka was the default
            out["brokers"] = len(self.processes())
        else:
            out["hosts"] = self.address
        return out


def state_dir(args: argparse.Namespace) -> Path:
    chosen = args.state_dir or os.environ.get("RELAY_DEV_DIR") or ".relay-dev"
    return Path(chosen).absolute()


def load_state(directory: Path) -> dict[str, ServiceRecord]:
    path = directory / _STATE_FILE
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        return {name: ServiceRecord(**fields) for name, fields in raw["services"].items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise ServiceError(f"{path} is not a relay dev state file ({exc}); remove it by hand") from exc


def save_state(directory: Path, records: dict[str, ServiceRecord]) -> None:
    path = directory / _STATE_FILE
    if not records:
        path.unlink(missing_ok=True)
        return
    body = {"version": 1, "services": {name: asdict(rec) for name, rec in sorted(records.items())}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Serialize dev commands on one state directory (two ``up`` at once would start everything twice)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _starter(name: str, args: argparse.Namespace) -> Callable[[services.StartOptions], services.Running[Any]]:
    if name == "kafka" and args.broker == "tansu":
        return services.start_tansu
    if name == "kafka":
        return lambda opts: services.start_kafka(opts, brokers=args.brokers)
    starters: dict[str, Callable[[services.StartOptions], services.Running[Any]]] = {
        "mysql": services.start_mysql,
        "zk": services.start_zookeeper,
    }
    return starters[name]


def _start_one(name: str, directory: Path, args: argparse.Namespace) -> ServiceRecord:
    service_dir = directory / name
    shutil.rmtree(service_dir, ignore_errors=True)  # left over from a server that died without `down`
    running = _starter(name, args)(services.StartOptions(service_dir, detached=True))
    proc = running.process
    others: tuple[tuple[int, int], ...] = ()
    if isinstance(running, services.KafkaCluster):
        others = tuple((n.process.pid, n.process.start_time) for n in running.nodes[1:] if n.process)
    broker = args.broker if name == "kafka" else ""
    address, log_path = str(running.service), str(proc.log_path)
    return ServiceRecord(name, proc.pid, proc.start_time, address, str(service_dir), log_path, others, broker)


def _stop_record(record: ServiceRecord) -> None:
    for pid, start_time in record.processes():
        services.stop_pid(pid, start_time)
    shutil.rmtree(record.directory, ignore_errors=True)


def cmd_up(args: argparse.Namespace) -> int:
    directory = state_dir(args)
    wanted = _parse_only(args.only)
    with locked(directory):
        records = load_state(directory)
        if "kafka" in wanted and "kafka" in records and records["kafka"].alive():
            mismatch = _kafka_mismatch(records["kafka"], args)
            if mismatch:
                print(f"relay dev up: {mismatch}", file=sys.stderr)
                return 2
        missing = [name for name in wanted if name not in records or not records[name].alive()]
        for name in missing:
            if name in records:  # a cluster with a dead node: stop the rest before starting afresh
                _stop_record(records.pop(name))
        with ThreadPoolExecutor(max_workers=len(SERVICES)) as pool:
            futures = {name: pool.submit(_start_one, name, directory, args) for name in missing}
        errors: list[str] = []
        started: dict[str, ServiceRecord] = {}
        for name, future in futures.items():
            # exception() rather than result(): whatever went wrong, the servers that did start must be
            # stopped below, never left running unrecorded.
            exc = future.exception()
            if exc is None:
                started[name] = future.result()
            else:
                log.debug("starting %s failed", name, exc_info=exc)
                errors.append(f"{name}: {exc}")
        if errors:
            for record in started.values():  # all or nothing: a half-started set only confuses
                _stop_record(record)
            raise ServiceError("dev up: nothing started: " + "; ".join(errors))
        records.update(started)
        save_state(directory, records)
    _report(directory, {name: records[name] for name in wanted}, started, args.json)
    return 0


def _kafka_mismatch(record: ServiceRecord, args: argparse.Namespace) -> str:
    """Why the running ``kafka`` is not the one asked for ('' when it is)."""
    running = record.describe()
    if running["broker"] != args.broker or running["brokers"] != args.brokers:
        return (
            f"kafka is already running as {running['broker']} with {running['brokers']} node(s), not "
            f"--broker {args.broker} --brokers {args.brokers}: run relay dev down first"
        )
    return ""


def _parse_only(text: str | None) -> list[str]:
    if not text:
        return list(SERVICES)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(SERVICES))
    if unknown:
        raise ArgumentError(
            "--only", f"unknown service(s) {', '.join(unknown)}; choose from {', '.join(SERVICES)}"
        )
    return [name for name in SERVICES if name in names]


def _report(
    directory: Path, records: dict[str, ServiceRecord], started: dict[str, ServiceRecord], as_json: bool
) -> None:
    if as_json:
        described = {n: {"started": n in started, **r.describe()} for n, r in records.items()}
        print(json.dumps({"state_dir": str(directory), "services": described}, indent=2))
        return
    for name, record in records.items():
        info = record.describe()
        how = "started" if name in started else "already running"
        print(f"{name:<6} {how}, pid {record.pid}")
        for key in ("url", "replication_url", "bootstrap_servers", "hosts"):
            if key in info:
                print(f"       {key}: {info[key]}")
    print("\nTo run the tests against these servers:")
    env = {"mysql": "RELAY_TEST_MYSQL", "kafka": "RELAY_TEST_KAFKA", "zk": "RELAY_TEST_ZK"}
    for name, record in records.items():
        value = services.MySQLService.parse(record.address).url if name == "mysql" else record.address
        print(f"  export {env[name]}='{value}'")
    print(f"\nState in {directory}; stop everything with: relay dev down")


def cmd_down(args: argparse.Namespace) -> int:
    directory = state_dir(args)
    stopped: list[str] = []
    with locked(directory):
        records = load_state(directory)
        for name, record in sorted(records.items()):
            _stop_record(record)
            stopped.append(name)
            del records[name]
            save_state(directory, records)
    with contextlib.suppress(OSError):
        (directory / "lock").unlink()
        directory.rmdir()  # only when empty: never remove what we did not create
    if args.json:
        print(json.dumps({"state_dir": str(directory), "stopped": stopped}))
    else:
        print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def cmd_dev_status(args: argparse.Namespace) -> int:
    directory = state_dir(args)
    records = load_state(directory)  # no lock: state.json is replaced atomically, and status writes nothing
    rows: dict[str, dict[str, Any]] = {}
    for name, record in sorted(records.items()):
        alive = record.alive()
        rows[name] = {"alive": alive, "answers": alive and record.answers(), **record.describe()}
    if args.json:
        print(json.dumps({"state_dir": str(directory), "services": rows}, indent=2))
    elif not rows:
        print(f"nothing recorded in {directory}; start with: relay dev up")
    else:
        for name, row in rows.items():
            state = "up" if row["answers"] else ("not answering" if row["alive"] else "dead")
            address = row.get("url") or row.get("bootstrap_servers") or row.get("hosts")
            print(f"{name:<6} {state:<14} pid {row['pid']:<8} {address}")
    if not rows:
        return 3
    return 0 if all(row["answers"] for row in rows.values()) else 1


def add_dev_parser(subparsers: Any) -> None:
    """Add ``dev`` with ``up``, ``down`` and ``status`` to the ``relay`` command."""
    dev = subparsers.add_parser(
        "dev",
        help="run local MariaDB, Apache Kafka and ZooKeeper for development",
        description="Run real local servers on free loopback ports, detached from this shell: MariaDB "
        "(ROW binlog, FULL row image and metadata), Apache Kafka (KRaft; one broker, or --brokers 3) and "
        "ZooKeeper. Their data, logs and state.json live in the state directory.",
    )
    dev.add_argument(
        "--state-dir",
        metavar="DIR",
        help="state directory (default: $RELAY_DEV_DIR, else ./.relay-dev)",
    )
    actions = dev.add_subparsers(dest="dev_action", metavar="{up,down,status}", required=True)
    up = actions.add_parser(
        "up",
        help="start the servers (those already running are kept)",
        description="Start the servers that are not already running and print how to connect to them. "
        "Starting is all or nothing: if one server fails, those started by this call are stopped again "
        "and the failing server's log tail is printed.",
    )
    up.add_argument(
        "--only",
        type=values.subset(SERVICES, "service(s)"),
        metavar="LIST",
        help="comma-separated subset of: mysql,kafka,zk (default: all)",
    )
    up.add_argument(
        "--brokers",
        type=int,
        choices=(1, 3),
        default=1,
        metavar="N",
        help="Apache Kafka nodes (each a broker and a KRaft controller): 1 (default), or 3 for a replicated "
        "cluster (topics get replication factor 3 and min.insync.replicas 2 by default)",
    )
    up.add_argument(
        "--broker",
        choices=("kafka", "tansu"),
        default="kafka",
        help="kafka: Apache Kafka from the jars scripts/bootstrap resolved (default); tansu: the Tansu "
        "broker (Kafka protocol, memory storage; one node)",
    )
    up.set_defaults(func=cmd_up)
    down = actions.add_parser(
        "down",
        help="stop the servers and delete their data",
        description="Stop every recorded server "
        "(SIGTERM, then SIGKILL after a deadline) and delete its data directory.",
    )
    down.set_defaults(func=cmd_down)
    status = actions.add_parser(
        "status",
        help="show each server, its pid and address, and whether it answers",
        description="Show each recorded server and whether it answers. Exit status: 0 all answer, "
        "1 some server is dead or not answering, 3 nothing is recorded.",
    )
    status.set_defaults(func=cmd_dev_status)
    for sub in (up, down, status):
        sub.add_argument("--json", action="store_true", help="print one machine-readable JSON object")
        # also after the action (`relay dev up --state-dir DIR`), where an operator puts it; SUPPRESS
        # keeps a value given before the action (`relay dev --state-dir DIR up`)
        sub.add_argument(
            "--state-dir",
            metavar="DIR",
            default=argparse.SUPPRESS,
            help="state directory (default: $RELAY_DEV_DIR, else ./.relay-dev)",
        )


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m relay.cli.dev dev up``), the same arguments as ``relay dev``."""
    parser = argparse.ArgumentParser(prog="relay", description="canal-relay development commands")
    add_dev_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except RelayError as exc:
        print(f"relay dev: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
