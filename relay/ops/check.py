"""``relay check``: everything a start would check, one line per check, nothing written anywhere.

Owns the sequence of checks and their verdicts (``Check``: ok, warn, FAIL, skip): the config (every
problem, one line each), the state directory (the place, an upgrade's stranded state, whether it can
be written), whether a relay already holds the instance, the mapping (its store, its warnings, the salt
variables of its column hashes), the source server, Kafka and the topics (``relay.ops.check_servers``),
ZooKeeper where the config uses it, and the metrics port. Only reads: files are stat-ed and read, MySQL
gets SELECT / SHOW statements, Kafka metadata and config descriptions (never a metadata request naming
a topic, which some brokers answer by creating it, and never ``validate_only`` creation, which Tansu
performs), ZooKeeper reads.
What only a write could prove (the exactly-once probe, a topic creation) is said to be unproven.
Runs on the CLI's thread; each network step has its configured timeout.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from mapping.model import Mapping
from relay.config.load import RelayConfig, load_config
from relay.config.state import POSITION_FILE, STATUS_FILE
from relay.errors import ConfigError, InvalidConfigError, RelayError
from relay.kafka.columns import salt_problems
from relay.ops.check_result import FAIL, OK, SKIP, WARN, Check, Emit
from relay.ops.check_servers import kafka_checks, source_checks


def run_checks(config_path: str, emit: Emit) -> bool:
    """Every check, each reported to ``emit`` as it completes; True when none failed."""
    failed = False

    def out(check: Check) -> None:
        nonlocal failed
        failed = failed or check.status == FAIL
        emit(check)

    config = _config(config_path, out)
    if config is None:
        return False
    for check in _state(config):
        out(check)
    out(_holder(config))
    mapping = _mapping(config, out)
    topics = source_checks(config, mapping, out)
    kafka_checks(config, mapping, topics, out)
    for check in _zookeeper(config):
        out(check)
    out(_metrics_port(config))
    return not failed


# --- the config and the state directory ------------------------------------------------------------


def _config(path: str, out: Emit) -> RelayConfig | None:
    try:
        config = load_config(path)
    except InvalidConfigError as exc:
        for err in exc.errors:
            out(Check(FAIL, "config", str(err)))
        return None
    except ConfigError as exc:
        out(Check(FAIL, "config", str(exc)))
        return None
    out(Check(OK, "config", f"{path}: valid (instance {config.instance})"))
    return config


def _state(config: RelayConfig) -> Iterator[Check]:
    where = config.state_directory
    problem = config.legacy_state_problem()
    if problem is not None:
        yield Check(FAIL, "state directory", problem)
        return
    if where.is_dir():
        writable = os.access(where, os.W_OK | os.X_OK)
        verdict = OK if writable else FAIL
        yield Check(verdict, "state directory", f"{where} {_writable(writable)}")
        return
    parent = _existing_parent(where)
    creatable = os.access(parent, os.W_OK | os.X_OK)
    detail = f"{where} does not exist; {parent} {_writable(creatable)}"
    yield Check(
        OK if creatable else FAIL, "state directory", detail + (": created at start" if creatable else "")
    )


def _writable(yes: bool) -> str:
    return f"{'is' if yes else 'is NOT'} writable by uid {os.geteuid()} (the relay's user must be able to)"


def _existing_parent(path: Path) -> Path:
    for parent in path.parents:
        if parent.exists():
            return parent
    return Path("/")


def _holder(config: RelayConfig) -> Check:
    """A relay already running this instance (its lock, its status file): a start would be refused, or
    stand by."""
    from relay.daemon.status import pid_running, read_status
    from relay.positions.lock import holder

    try:
        pid = holder(config.state_path(POSITION_FILE)) if config.positions.backend == "file" else None
    except RelayError as exc:
        return Check(WARN, "instance", f"cannot tell whether a relay holds it: {exc}")
    status = read_status(config.state_path(STATUS_FILE)) or {}
    running = status.get("pid")
    live = (
        isinstance(running, int) and pid_running(running) and status.get("state") not in ("stopped", "failed")
    )
    if pid is not None or live:
        who = f"pid {pid or running}"
        standby = " (with HA a second one stands by)" if config.ha.enabled else ": a start would be refused"
        return Check(WARN, "instance", f"{config.instance} is held by a running relay, {who}{standby}")
    return Check(OK, "instance", f"{config.instance}: no relay holds it here")


# --- the mapping -------------------------------------------------------------------------------------


def _mapping(config: RelayConfig, out: Emit) -> Mapping | None:
    from relay.wiring import mapping_store

    try:
        store = mapping_store(config)
    except RelayError as exc:
        out(Check(FAIL, "mapping", str(exc)))
        return None
    try:
        mapping = store.read()
    except RelayError as exc:
        problems = getattr(exc, "errors", None) or (exc,)
        for err in problems:
            out(Check(FAIL, "mapping", f"{store.name}: {err}"))
        return None
    finally:
        store.close()
    salts = salt_problems(mapping)  # a start refuses a hash whose salt variable is unset or empty
    for err in salts:
        out(Check(FAIL, "mapping", f"{store.name}: {err}"))
    if salts:
        return mapping
    dbs = len(mapping.logical_dbs)
    out(Check(OK, "mapping", f"{store.name}: version {mapping.version} valid ({dbs} logical dbs)"))
    for warning in mapping.warnings():
        out(Check(WARN, "mapping", str(warning)))
    return mapping


# --- ZooKeeper and the metrics port ------------------------------------------------------------------


def _zookeeper(config: RelayConfig) -> Iterator[Check]:
    if not (config.ha.enabled or config.positions.backend == "zookeeper"):
        return
    from relay.ops.cluster import members

    hosts = config.ha.zookeeper
    try:
        found = members(config.ha, config.instance)
    except RelayError as exc:
        yield Check(FAIL, "zookeeper", f"{hosts}: {exc}")
        return
    active = [str(m.get("member")) for m in found if m.get("active")]
    who = f"active relay {active[0]}" if active else "no active relay"
    yield Check(OK, "zookeeper", f"{hosts}: reachable; {who}, {len(found)} member(s) under {config.ha.root}")


def _metrics_port(config: RelayConfig) -> Check:
    port = config.metrics.port
    if not port:
        return Check(SKIP, "metrics", "metrics.port is 0 (no exporter)")
    with socket.socket(socket.AF_INET6 if ":" in config.metrics.host else socket.AF_INET) as sock:
        try:
            sock.bind((config.metrics.host, port))
        except OSError as exc:
            why = "in use (a running relay?)" if exc.errno == errno.EADDRINUSE else str(exc)
            return Check(FAIL, "metrics", f"{config.metrics.host}:{port}: {why}")
    return Check(OK, "metrics", f"{config.metrics.host}:{port} is free")
