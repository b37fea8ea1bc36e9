"""``relay cluster run``: one node of a cluster — it joins, takes part in the leader election, and runs
the instances it is assigned, each as its own child process.

Owns the node's loop (the main thread of ``relay cluster run``): every wake-up — a ZooKeeper watch fired
(nodes, drain marks, definitions, assignments, the leader), a signal, or one second passed — it

1. registers the node (ephemeral ``<root>/nodes/<name>``: capacity, drained, host, pid) when its session
   is new, and tries to lead when nobody does (``relay.cluster.leader``);
2. reads the cluster (``relay.cluster.layout.read_view``, re-arming the watches); the leader writes the
   placement when the plan moves anything;
3. wants exactly the instances assigned to it, at their definition's version (``relay.cluster.children``
   starts, restarts, stops them; ``relay.cluster.holds`` keeps one stopped on a schema error held),
   publishes each one's status into ZooKeeper (with the relay's whole status record, for ``relay status
   --instance``), and hands the requests made to them through ZooKeeper to their relays
   (``relay.cluster.requests``: ``relay snapshot … --instance``).

Fencing is each child's: a child is an HA relay of its instance (``ha.enabled`` with the cluster's
ZooKeeper), so its epoch, lease and Kafka ``transactional.id`` fence a zombie, and a child started for an
instance that still runs elsewhere stands by until that one has released it (after draining). The node
adds: it stops every child BEFORE its session can expire — no request answered by ZooKeeper for half
the session timeout (a cut, a freeze), it SIGTERMs them and SIGKILLs what is left by three quarters of
it after the last answer (``relay.cluster.session_guard``: its thread signals, the loop takes the order
first thing on every wake-up and runs nothing until ZooKeeper answers again); when its session is LOST,
it stops every child before joining again; and a child stops by itself when the node's process or its
node record goes (``relay.cluster.child``).

SIGTERM/SIGINT: a graceful hand-over. The node marks itself drained, the leader moves its instances,
each of its children drains (in-flight batches acked, position saved) and releases the instance, the
other node's child takes over, and the node leaves when it runs nothing (or at the stop bound).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from relay.cluster.children import Children
from relay.cluster.holds import SchemaHolds
from relay.cluster.layout import ClusterView, LiveNode, Paths, read_view
from relay.cluster.leader import LeaderTerm, apply_plan, resign, try_lead
from relay.cluster.node_config import NodeConfig
from relay.cluster.requests import RequestDesk
from relay.cluster.session_guard import SessionGuard, SessionWatch, StopOrder
from relay.common import zookeeper
from relay.common.retry import RetryPolicy
from relay.config.state import STATUS_FILE
from relay.daemon.status import read_status
from relay.errors import ZooKeeperUnavailableError

log = logging.getLogger(__name__)

__all__ = ["ClusterNode"]

_TICK = 1.0  # seconds between passes when no watch fires
CONNECT_RETRY = RetryPolicy(initial=1.0, maximum=30.0)  # joining while ZooKeeper does not answer


class ClusterNode:
    """One node. ``run()`` blocks until ``stop()`` (graceful hand-over) and returns the exit status."""

    def __init__(self, config: NodeConfig, children: Children) -> None:
        self.config = config
        self.name = config.name
        self.paths = Paths(config.root)
        self.children = children
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lost = threading.Event()
        self._client: KazooClient | None = None
        self._session = 0  # the session the node record was written in
        self._held_by = 0  # the session holding our record when it was not ours
        self._term: LeaderTerm | None = None
        self._published = 0.0
        self._written: set[str] = set()  # the instances whose status record this node wrote
        self._since = time.time()
        self.view = ClusterView()
        self.requests = RequestDesk(self.name, self.paths, Path(config.settings().state_dir))
        self.holds = SchemaHolds(self.name, self.paths)
        self.guard = SessionGuard(config.zookeeper.session_timeout_seconds)

    # -- control (any thread, signal handlers) --------------------------------------------------
    def stop(self) -> None:
        """Hand over and leave (``run`` returns when the children have stopped)."""
        self._stopping.set()
        self._wake.set()

    def _watch(self, _event: object = None) -> None:
        self._wake.set()

    def _on_state(self, state: str) -> None:
        # kazoo's thread: flags only
        if state == KazooState.LOST:
            self._lost.set()
        self._wake.set()

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> int:
        settings = self.config.settings()
        connected = self._connect()
        if connected is None:
            log.info("node %s stopped before it reached ZooKeeper", self.name)
            return 0
        client, connecting = connected
        self._client = client
        self.guard.session_timeout = zookeeper.session_timeout(client, settings.session_timeout_seconds)
        self.guard.heard(connecting)  # the server heard the session's connect request
        client.add_listener(self._on_state)
        watch = SessionWatch(client, self.paths.node(self.name), self.guard, self.children, self._wake.set)
        watch.start()
        log.info("node %s joining the cluster at %s%s", self.name, settings.zookeeper, self.paths.root)
        leave_by: float | None = None
        try:
            while True:
                self._wake.wait(_TICK)
                self._wake.clear()
                order = self.guard.take()  # before anything else: a frozen or cut node stops its children
                if order is not None:
                    self._stop_for_session(order)
                if self._lost.is_set():
                    self._session_lost()
                if self._stopping.is_set() and leave_by is None:
                    leave_by = time.monotonic() + self._handover_bound()
                    log.info("node %s stopping: handing its instances over", self.name)
                if client.connected:
                    self._pass(client)
                if self.guard.tripped():  # the guard stopped them: nothing starts until ZooKeeper answers
                    self.children.want({})
                self.children.poll()
                if leave_by is not None and (not self.children.running() or time.monotonic() > leave_by):
                    break
        finally:
            watch.close()
            self.children.stop_all(time.monotonic() + self.config.children.stop_timeout_seconds)
            self._leave(client)
        log.info("node %s left the cluster", self.name)
        return 0

    def _connect(self) -> tuple[KazooClient, float] | None:
        """The node's session and when its connect request was sent; while ZooKeeper does not answer,
        tried again with a backoff (1 s doubling to 30 s), one warning line per attempt, until it does or
        the node is stopped (None)."""
        settings = self.config.settings()
        backoff = CONNECT_RETRY.start(sleep=self._stopping.wait)
        while not self._stopping.is_set():
            connecting = time.monotonic()
            try:
                client = zookeeper.start_client(
                    settings.zookeeper,
                    session_timeout=settings.session_timeout_seconds,
                    connect_timeout=settings.connect_timeout_seconds,
                    auth=self.config.zookeeper.auth or None,
                    setting="zookeeper.hosts",
                )
                return client, connecting
            except ZooKeeperUnavailableError as exc:
                delay = backoff.next_delay()
                backoff.tries += 1
                log.warning(
                    "node %s cannot join yet (attempt %d): %s; trying again in %.1f s",
                    self.name, backoff.tries, exc, delay,
                )  # fmt: skip
                backoff.sleep(delay)
        return None

    def _pass(self, client: KazooClient) -> None:
        try:
            if int(client.client_id[0]) != self._session:
                self._register(client)
            elif self._stopping.is_set():
                self._register(client)  # the drained flag (idempotent)
            self._lead(client)
            self.view = read_view(client, self.paths.root, watch=self._watch)
            if self._term is not None:
                self._place(client)
            registered = self._session == int(client.client_id[0])
            # not registered (another live node holds this name): run nothing under its name
            mine = self._mine(self.view) if registered else {}
            report = self.children.report()
            wanted = self.holds.wanted(client, mine, report, self.children, self._watch)
            # nor while ZooKeeper has not answered since the session guard stopped everything
            self.children.want({} if self.guard.tripped() else wanted)
            records = self._records(report)
            self._publish(client, records)
            self.requests.serve(client, records if registered else {}, self._watch)
        except zookeeper.ERRORS as exc:
            log.warning("node %s: ZooKeeper: %s %s (trying again)", self.name, type(exc).__name__, exc)

    def _register(self, client: KazooClient) -> None:
        record = LiveNode(
            self.name,
            self.config.node.capacity,
            self._stopping.is_set(),
            socket.gethostname(),
            os.getpid(),
            self._since,
        ).record()
        path = self.paths.node(self.name)
        session = int(client.client_id[0])
        stat = client.exists(path)
        if stat is not None and int(stat.ephemeralOwner) != session:
            # our own record of an expired session (not yet removed), or a second node of this name
            if self._held_by != int(stat.ephemeralOwner):  # said once per holder
                log.error(
                    "node record %s is held by session %#x (another node named %r?): running nothing "
                    "until it goes",
                    path,
                    stat.ephemeralOwner,
                    self.name,
                )
            self._held_by = int(stat.ephemeralOwner)
            client.exists(path, watch=self._watch)
            return
        if stat is None:
            try:
                client.create(path, record, ephemeral=True, makepath=True)
            except NodeExistsError:
                return
        elif _without_since(client.get(path)[0]) != _without_since(record):
            client.set(path, record)  # only a change: every node watches this record
        if session != self._session:
            log.info(
                "node %s registered (session %#x, capacity %d)", self.name, session, self.config.node.capacity
            )
        self._session = session

    def _lead(self, client: KazooClient) -> None:
        term = self._term
        if term is not None:
            stat = client.exists(self.paths.leader)
            if stat is None or int(stat.ephemeralOwner) != int(client.client_id[0]):
                log.warning("node %s: no longer the leader (session ended)", self.name)
                self._term = term = None
        if term is None and not self._stopping.is_set() and self._session == int(client.client_id[0]):
            self._term = try_lead(client, self.paths, self.name, self._watch)

    def _place(self, client: KazooClient) -> None:
        term = self._term
        assert term is not None
        try:
            if apply_plan(client, self.paths, term, self.view, self.view.plan()):
                self.view = read_view(client, self.paths.root, watch=self._watch)
        except BadVersionError:
            log.warning("node %s: another node was elected leader; not placing", self.name)
            self._term = None

    def _mine(self, view: ClusterView) -> dict[str, int]:
        return {
            name: view.instances[name]
            for name, assignment in view.assignments.items()
            if assignment.node == self.name and name in view.instances
        }

    def _records(self, report: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The status record of each instance assigned to this node (its child, its status file)."""
        state_dir = Path(self.config.settings().state_dir)
        return {
            name: _status_record(self.name, report.get(name, {}), state_dir / name)
            for name in sorted(self._mine(self.view))
        }

    def _publish(self, client: KazooClient, records: dict[str, dict[str, Any]]) -> None:
        """Each instance's status record into ``destinations/<name>/status`` (rate-limited)."""
        now = time.monotonic()
        if now - self._published < self.config.children.status_interval_seconds:
            return
        self._published = now
        session = int(client.client_id[0])
        # every record written before too: an instance moved away whose child was already reaped
        # would otherwise keep this node's last record ("running") and block its new node's
        for name in sorted(set(self.children.report()) | set(records) | self._written):
            path = self.paths.status(name)
            if name not in records:
                _delete_own(client, path, session)
                self._written.discard(name)
                continue
            _write_own(client, path, json.dumps(records[name], sort_keys=True).encode(), session)
            self._written.add(name)

    # -- leaving and losing the session ---------------------------------------------------------
    def _handover_bound(self) -> float:
        return 2 * self.config.children.stop_timeout_seconds + self.config.zookeeper.session_timeout_seconds

    def _stop_for_session(self, order: StopOrder) -> None:
        """Stop every child before the session can expire (``relay.cluster.session_guard``); they start
        again from a pass in a live session."""
        log.info("node %s: every instance stopped for the session guard (%s)", self.name, order.why)
        self.children.want({})
        self.children.stop_all(order.kill_by)

    def _session_lost(self) -> None:
        self._lost.clear()
        self._term = None
        self._session = 0
        log.error(
            "node %s: ZooKeeper session lost: stopping every instance it ran before joining again", self.name
        )
        self.children.want({})
        self.children.stop_all(time.monotonic() + self.config.children.stop_timeout_seconds)

    def _leave(self, client: KazooClient) -> None:
        try:
            if client.connected:
                resign(client, self.paths, self._term)
                session = int(client.client_id[0])
                for name in self.children.report():
                    _delete_own(client, self.paths.status(name), session)
                _delete_own(client, self.paths.node(self.name), session)
        except zookeeper.ERRORS as exc:
            log.warning("node %s: leaving: %s (its session's end removes its nodes)", self.name, exc)
        finally:
            client.stop()
            client.close()


def _without_since(record: bytes) -> dict[str, Any]:
    try:
        data = json.loads(record.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return {k: v for k, v in data.items() if k != "since"} if isinstance(data, dict) else {}


def _status_record(node: str, process: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    """What the node publishes for one instance: its process, a summary for ``relay cluster status``,
    and ``relay``, the relay's whole status record (``relay status --instance`` shows it as the local
    command shows the status file)."""
    status = read_status(state_dir / STATUS_FILE) or {}
    # the relay's own lag (relay.daemon.status.lag_seconds: 0 when caught up), only while the process that
    # wrote it runs — as `relay status --instance` shows it (relay.cluster.operate)
    alive = process.get("process") == "running" and status.get("pid") == process.get("pid")
    return {
        "node": node,
        "process": process.get("process", "waiting"),
        "pid": process.get("pid"),
        "restarts": process.get("restarts", 0),
        "last_exit": process.get("last_exit"),
        "last_error": status.get("error") or process.get("last_error"),
        "definition_version": process.get("definition_version"),
        "state": status.get("state") if process.get("pid") else None,
        "lag_seconds": status.get("lag_seconds") if alive else None,
        "ha_role": status.get("ha_role"),
        "published_at": time.time(),
        "state_dir": str(state_dir),
        "relay": status or None,
    }


def _write_own(client: KazooClient, path: str, data: bytes, session: int) -> None:
    stat = client.exists(path)
    if stat is None:
        with contextlib.suppress(NodeExistsError):
            client.create(path, data, ephemeral=True, makepath=True)
    elif int(stat.ephemeralOwner) == session:
        client.set(path, data, version=stat.version)


def _delete_own(client: KazooClient, path: str, session: int) -> None:
    stat = client.exists(path)
    if stat is not None and int(stat.ephemeralOwner) == session:
        with contextlib.suppress(NoNodeError, BadVersionError):
            client.delete(path, version=stat.version)
