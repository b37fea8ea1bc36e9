"""High availability: one active relay per instance, elected through ZooKeeper, and the fence it obeys.

Layout under ``ha.root`` (canal-like: canal keeps ``/otter/canal/destinations/{name}/running`` and
``.../cluster/{ip:port}``)::

    {root}/destinations/{instance}/running        ephemeral: the active relay (member, pid, epoch, since)
    {root}/destinations/{instance}/cluster/{id}   ephemeral: every live relay process, active or standing by
    {root}/destinations/{instance}/epoch          persistent: its data version is the epoch
    {root}/destinations/{instance}/position       persistent: the resume point (``ZooKeeperPositionStore``)

Election: one multi-op transaction creates ``running`` and sets ``epoch`` at the version just read, so
the winner's epoch (the new version) is unique and grows with every election. Losers watch ``running``
and try again when it goes — when the active relay stops (it deletes the node), dies, or its session
expires. The new leader reads the position from ZooKeeper and continues from there.

Fencing, so that two relays never publish at once (canal's HA lets them, see canal PR #5270):

- kazoo's connection listener (kazoo's thread; it only sets a flag, it never blocks) fences the leader
  as soon as the session is SUSPENDED or LOST — a standby can only be elected after the session has
  expired, which is after SUSPENDED;
- a lease: a heartbeat thread confirms every ``session_timeout / 5`` that ``running`` is still owned by
  this session; the lease runs ``session_timeout / 2`` from the start of the last confirmation. A
  process frozen (SIGSTOP, a long GC-like pause) past its session therefore finds itself fenced by the
  clock the moment it runs again, before kazoo's thread has even noticed the expiry;
- position writes carry the epoch: ``guard()`` hands the position store the checks that its write
  transaction must pass in ZooKeeper itself (``epoch`` still at our version, ``running`` still there),
  so a zombie that got past every local check still cannot move the position.

``check()`` is what the publish thread calls before every send and every ack. Once fenced, a term is
over for good: ``Relay.run`` stops with ``LeadershipError`` and ``relay run`` exits with status 3 (a
supervisor restarts it, and it stands by). Nothing is acked after the fence, so the new leader resumes
from a position that only counts what was delivered.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from relay.common import zookeeper
from relay.config.sections import HAConfig
from relay.errors import LeadershipError, LeadershipUnavailableError, ZooKeeperUnavailableError
from relay.positions.zookeeper import FenceToken

log = logging.getLogger(__name__)

_ZK_ERRORS = zookeeper.ERRORS


@dataclass(frozen=True)
class Layout:
    """The znode paths of one instance."""

    root: str
    instance: str

    @property
    def base(self) -> str:
        return f"{self.root.rstrip('/')}/destinations/{self.instance}"

    @property
    def running(self) -> str:
        return f"{self.base}/running"

    @property
    def cluster(self) -> str:
        return f"{self.base}/cluster"

    @property
    def epoch(self) -> str:
        return f"{self.base}/epoch"

    @property
    def position(self) -> str:
        return f"{self.base}/position"


def connect(config: HAConfig) -> KazooClient:
    """A started kazoo client; ``LeadershipUnavailableError`` when ZooKeeper does not answer in time."""
    try:
        return zookeeper.start_client(
            config.zookeeper,
            session_timeout=config.session_timeout_seconds,
            connect_timeout=config.connect_timeout_seconds,
            setting="ha.zookeeper",
        )
    except ZooKeeperUnavailableError as exc:
        raise LeadershipUnavailableError(str(exc)) from exc


def member_id(config: HAConfig) -> str:
    return config.member_id or f"{socket.gethostname()}:{os.getpid()}"


class Leadership:
    """This process's membership and, once elected, its term: ``start``, ``acquire``, ``check``, ``close``."""

    def __init__(
        self, config: HAConfig, instance: str, client: KazooClient | None = None, *, owns_client: bool = False
    ) -> None:
        self.config = config
        self.layout = Layout(config.root, instance)
        self.member = member_id(config)
        self.client = client
        self._own_client = client is None or owns_client
        self.epoch = 0
        self._session = 0
        self._fenced: str | None = None  # why this term is over; None while it lasts (or before it)
        self._leader = False
        self._confirmed = 0.0  # monotonic start of the last confirmation that we own ``running``
        self._done = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._since = time.time()
        self._facts: dict[str, Any] = {}  # what ``announce`` added to the member node

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        if self.client is None:
            self.client = connect(self.config)
        self.client.add_listener(self._on_state)
        try:
            for path in (self.layout.cluster, self.layout.epoch):
                self.client.ensure_path(path)
            self._register()
        except _ZK_ERRORS as exc:
            raise LeadershipError(f"cannot register in ZooKeeper under {self.layout.base}: {exc!r}") from exc

    def close(self) -> None:
        """Resign (the standby takes over at once instead of after the session timeout) and disconnect."""
        self._done.set()
        if self._heartbeat is not None:
            self._heartbeat.join(5.0)
        if self.client is None:
            return
        if self._leader and self._fenced is None:
            self._resign()
        self._fence("closed")
        self.client.remove_listener(self._on_state)
        if self._own_client:
            try:
                self.client.stop()
            finally:
                self.client.close()

    # -- election --------------------------------------------------------------------------------
    def acquire(self, stop: threading.Event, standing_by: Callable[[str], None] | None = None) -> bool:
        """Block until this process is the active relay (True) or ``stop`` is set (False)."""
        assert self.client is not None
        announced = ""
        while not stop.is_set():
            try:
                if self._try_elect():
                    return True
                changed = threading.Event()
                stat = self.client.exists(self.layout.running, watch=lambda _event, ev=changed: ev.set())
                active = self.active() if stat is not None else None
                if self.client.exists(self._member_path) is None:  # gone with an expired session
                    self._register()
            except _ZK_ERRORS as exc:
                log.warning(
                    "election for %s: ZooKeeper unavailable (%r); trying again", self.layout.base, exc
                )
                stop.wait(1.0)
                continue
            if active is not None and active.get("member") != announced:
                announced = str(active.get("member"))
                log.info("standing by: %s is active (epoch %s)", announced, active.get("epoch"))
                if standing_by is not None:
                    standing_by(announced)
            # The watch wakes us when the node goes; the poll covers a watch lost with a session.
            deadline = time.monotonic() + 1.0
            while not stop.is_set() and not changed.is_set() and time.monotonic() < deadline:
                changed.wait(0.1)
        return False

    def _try_elect(self) -> bool:
        """Create ``running`` and bump ``epoch`` in one transaction; False when another relay is active."""
        assert self.client is not None
        _, stat = self.client.get(self.layout.epoch)
        epoch = stat.version + 1
        started = time.monotonic()
        info = self._info(epoch=epoch)
        txn = self.client.transaction()
        txn.create(self.layout.running, info, ephemeral=True)
        txn.set_data(self.layout.epoch, info, version=stat.version)
        results = txn.commit()
        if isinstance(results[0], NodeExistsError) or any(isinstance(r, Exception) for r in results):
            return False  # someone else is active, or won this very round (the epoch moved)
        # A SUSPENDED between the commit and ``_leader`` is not lost: the lease counts from before the
        # commit, and the heartbeat fences a term whose running node is not this session's.
        self.epoch, self._session = epoch, self.client.client_id[0]
        self._confirmed, self._fenced, self._leader = started, None, True
        self._heartbeat = threading.Thread(target=self._renew, name="ha-lease", daemon=True)
        self._heartbeat.start()
        log.info("elected: %s is the active relay of %s, epoch %d", self.member, self.layout.base, epoch)
        return True

    def _resign(self) -> None:
        assert self.client is not None
        try:
            txn = self.client.transaction()
            txn.check(self.layout.epoch, self.epoch)
            txn.delete(self.layout.running)
            txn.commit()
            log.info("resigned as the active relay of %s (epoch %d)", self.layout.base, self.epoch)
        except _ZK_ERRORS as exc:
            log.warning("could not resign (%r); the session timeout will end the term", exc)

    # -- fencing ---------------------------------------------------------------------------------
    @property
    def lease_seconds(self) -> float:
        return self._session_timeout() / 2.0

    def fenced(self) -> str | None:
        """Why this process may not publish or ack (None: it may)."""
        if not self._leader:
            return self._fenced or "not elected"
        if self._fenced is not None:
            return self._fenced
        age = time.monotonic() - self._confirmed
        if age > self.lease_seconds:
            self._fence(f"lease expired: leadership not confirmed for {age:.1f} s")
        return self._fenced

    def check(self) -> None:
        reason = self.fenced()
        if reason is not None:
            raise LeadershipError(
                f"no longer the active relay of {self.layout.base} (epoch {self.epoch}): {reason}"
            )

    def guard(self) -> FenceToken:
        """For the position store: raises when fenced, else the checks its write must pass in ZooKeeper."""
        self.check()
        return FenceToken(
            self.epoch, self.member, ((self.layout.epoch, self.epoch), (self.layout.running, 0))
        )

    def _fence(self, reason: str) -> None:
        if self._fenced is None:
            self._fenced = reason
            if self._leader and reason != "closed":
                log.error("fenced (epoch %d): %s; no more publishing or acking", self.epoch, reason)

    def _on_state(self, state: str) -> None:
        """kazoo's listener, on kazoo's thread: set the flag and return, never block."""
        if state in (KazooState.SUSPENDED, KazooState.LOST) and self._leader:
            self._fence(f"ZooKeeper session {state}")

    def _renew(self) -> None:
        """The lease heartbeat (thread ``ha-lease``): confirm that ``running`` is still ours."""
        assert self.client is not None
        while not self._done.wait(self._session_timeout() / 5.0) and self._fenced is None:
            started = time.monotonic()
            try:
                stat = self.client.exists_async(self.layout.running).get(timeout=self.lease_seconds)
            except _ZK_ERRORS as exc:
                log.warning("leadership not confirmed: %r", exc)
                continue
            if stat is None or stat.ephemeralOwner != self._session:
                self._fence("the running node is gone or owned by another session")
            else:
                self._confirmed = started

    def _session_timeout(self) -> float:
        requested = self.config.session_timeout_seconds
        return requested if self.client is None else zookeeper.session_timeout(self.client, requested)

    # -- membership ------------------------------------------------------------------------------
    def announce(self, **facts: Any) -> None:
        """Add ``facts`` (the mapping this process runs) to its member node, for operators to read
        (``relay mapping history``); a failure is logged, never fatal: it is a report, not a fence."""
        self._facts.update(facts)
        if self.client is None:
            return
        try:
            self.client.set(self._member_path, self._info())
        except _ZK_ERRORS as exc:
            log.warning("could not update %s in ZooKeeper: %r", self._member_path, exc)

    def _info(self, **extra: Any) -> bytes:
        data = {"member": self.member, "host": socket.gethostname(), "pid": os.getpid(), "since": self._since}
        data.update(self._facts)
        data.update(extra)
        return json.dumps(data, sort_keys=True).encode("utf-8")

    @property
    def _member_path(self) -> str:
        return f"{self.layout.cluster}/{self.member}"

    def _register(self) -> None:
        assert self.client is not None
        path = self._member_path
        try:
            self.client.create(path, self._info(), ephemeral=True)
        except NodeExistsError:  # a previous session of this member id: replace it
            self.client.delete(path)
            self.client.create(path, self._info(), ephemeral=True)

    def active(self) -> dict[str, Any] | None:
        assert self.client is not None
        return read_json(self.client, self.layout.running)


def read_json(client: KazooClient, path: str) -> dict[str, Any] | None:
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
