"""The cluster's instance definitions in ZooKeeper: versioned, with history, edited by compare-and-set.

Owns the ZooKeeper layout of the definitions, the kazoo client of ``relay instance`` and the translation
of kazoo's failures into ``ClusterError``s. Runs on the caller's thread (the CLI, and a node's child
reading its definition, ``relay.cluster.child``); kazoo runs its own connection thread.

Layout under the cluster root (``ha.root``'s default, ``/canal-relay``; docs/architecture.md, "Cluster"):

- ``<root>/instances/<name>``: the current version's text (``relay.cluster.versions``: a header line,
  then the YAML as written, ``${NAME}`` references unresolved); a removed instance's node holds its
  tombstone version, so its history stays and a later ``add`` continues it;
- ``<root>/instances/<name>/history/v0000000001`` …: every version's text, the tombstones included.

Every write reads the instances container's version, checks the definition against the other defined
instances (``relay.cluster.fleet``: no shared replica server id, source id, transactional id), reads the
instance's node (text + stat), checks its version against ``expected``, then commits ONE ZooKeeper
transaction: ``set_data(instances, version=read)`` (an empty write that bumps it) + ``set_data(node,
version=stat.version)`` + ``create(history/vN)`` (the first version: the node, the history container and
``v1`` created). If another writer changed any instance in between, ZooKeeper refuses a version (or the
history node exists) and nothing of the transaction is applied: ``InstanceConflictError`` — so two
concurrent adds cannot both slip a clash past the fleet check. With ``auth`` (``user:password``,
``relay instance --zk-auth``) the nodes are created with a digest ACL: that identity may edit, everyone
else (the nodes that run the instances) may only read.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoAuthError, NodeExistsError, NoNodeError
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from relay.cluster.definition import InstanceDefinition, check_name
from relay.cluster.fleet import fleet_problems
from relay.cluster.versions import StoredVersion, VersionInfo, parse_stored, stored_text
from relay.common import zookeeper
from relay.errors import (
    ClusterError,
    ClusterUnavailableError,
    InstanceConflictError,
    InstanceNotFoundError,
    InvalidConfigError,
    ZooKeeperUnavailableError,
)

__all__ = ["ZooKeeperInstanceStore"]


class ZooKeeperInstanceStore:
    """Instance definitions under ``<root>/instances``. Connects in the constructor; ``close()`` ends
    the session."""

    def __init__(
        self,
        hosts: str,
        root: str = "/canal-relay",
        timeout: float = 10.0,
        auth: str | None = None,
        setting: str = "--zookeeper",
    ) -> None:
        if not root.startswith("/"):
            raise ClusterError(f"--root: must be an absolute ZooKeeper path, got {root!r}")
        self.hosts = hosts
        self.root = root.rstrip("/") or "/"
        self.base = f"{root.rstrip('/')}/instances"
        self._auth = auth
        try:
            self._client = zookeeper.start_client(
                hosts, session_timeout=timeout, connect_timeout=timeout, auth=auth, setting=setting
            )
        except ZooKeeperUnavailableError as exc:
            raise ClusterUnavailableError(str(exc)) from exc

    @property
    def client(self) -> KazooClient:
        """The session this store reads with (``relay.cluster.remote`` reads the runtime nodes with it)."""
        return self._client

    @property
    def name(self) -> str:
        """What it is, for messages: ``zookeeper 127.0.0.1:2181/canal-relay/instances``."""
        return f"zookeeper {self.hosts}{self.base}"

    # -- reading --------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every instance with a node, removed ones included, sorted."""
        try:
            return sorted(self._client.get_children(self.base))
        except NoNodeError:
            return []
        except KazooException as exc:
            raise self._translate(exc, "list") from exc

    def current(self, name: str) -> StoredVersion:
        """The current version of ``name`` (a tombstone when removed); ``InstanceNotFoundError`` when
        it was never added."""
        return self._current(name)[0]

    def read(self, name: str) -> StoredVersion:
        """The current version of a defined instance; ``InstanceNotFoundError`` when it is not (never
        added, or removed)."""
        stored = self.current(name)
        if stored.definition is None:
            raise self._not_found(name, f"removed in version {stored.info.version}")
        return stored

    def history(self, name: str) -> list[VersionInfo]:
        """Every version of ``name``, oldest first."""
        self.current(name)  # unknown: InstanceNotFoundError
        try:
            children = self._client.get_children(self._history(name))
        except NoNodeError:
            children = []
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        numbers = sorted(int(c[1:]) for c in children if c.startswith("v") and c[1:].isdigit())
        return [self.version(name, n).info for n in numbers]

    def version(self, name: str, number: int) -> StoredVersion:
        """Version ``number`` of ``name``; ``ClusterError`` naming the stored ones when there is none."""
        path = self._version_node(name, number)
        try:
            data, _ = self._client.get(path)
        except NoNodeError:
            known = ", ".join(str(v.version) for v in self.history(name)) or "none"
            raise ClusterError(f"{name}: no stored version {number} (stored versions: {known})") from None
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        return parse_stored(name, data.decode("utf-8"), f"{self.name}/{name} version {number}")

    # -- writing --------------------------------------------------------------------------------
    def add(self, definition: InstanceDefinition, *, note: str = "") -> VersionInfo:
        """Store a new instance as version 1 — or, when it was removed, as the version after its
        tombstone; ``ClusterError`` when it is defined already."""
        name = check_name(definition.name)
        fleet = self.check_fleet(definition)
        try:
            stored, stat = self._current(name)
        except InstanceNotFoundError:
            return self._create(definition, fleet, note)
        if stored.definition is not None:
            raise ClusterError(
                f"{name}: already defined (version {stored.info.version}); change it with "
                "`relay instance update`"
            )
        return self._commit(name, definition, (stored.info.version, stat, fleet), note)

    def update(self, definition: InstanceDefinition, *, expected: int | None, note: str = "") -> VersionInfo:
        """Store ``definition`` as the next version if the current one is ``expected`` (None: the
        version read now); ``InstanceConflictError`` otherwise."""
        fleet = self.check_fleet(definition)
        stored, stat = self._defined(definition.name)
        return self._commit(definition.name, definition, (self._expect(stored, expected), stat, fleet), note)

    def remove(self, name: str, *, expected: int | None, note: str = "") -> VersionInfo:
        """Store a tombstone as the next version (the history stays); as ``update`` for ``expected``."""
        fleet = self._fleet_version()
        stored, stat = self._defined(name)
        return self._commit(name, None, (self._expect(stored, expected), stat, fleet), note)

    def check_fleet(self, definition: InstanceDefinition) -> int:
        """Refuse (``InvalidConfigError`` naming the keys) what ``definition`` would share with another
        defined instance (``relay.cluster.fleet``); the version of the instances container read before
        them, which the write then checks and bumps: an edit of any instance in between is a conflict."""
        fleet = self._fleet_version()
        others = []
        for other in self.names():
            if other != definition.name:
                stored = self.current(other)
                if stored.definition is not None:
                    others.append(stored.definition)
        InvalidConfigError.raise_all(fleet_problems(definition, others), definition.name)
        return fleet

    def close(self) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()

    # -- internals ------------------------------------------------------------------------------
    def _node(self, name: str) -> str:
        return f"{self.base}/{check_name(name)}"

    def _history(self, name: str) -> str:
        return f"{self._node(name)}/history"

    def _version_node(self, name: str, number: int) -> str:
        return f"{self._history(name)}/v{number:010d}"

    def _current(self, name: str) -> tuple[StoredVersion, Any]:
        try:
            data, stat = self._client.get(self._node(name))
        except NoNodeError:
            raise self._not_found(name, "never added") from None
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        return parse_stored(name, data.decode("utf-8"), f"{self.name}/{name}"), stat

    def _defined(self, name: str) -> tuple[StoredVersion, Any]:
        stored, stat = self._current(name)
        if stored.definition is None:
            raise self._not_found(name, f"removed in version {stored.info.version}")
        return stored, stat

    def _expect(self, stored: StoredVersion, expected: int | None) -> int:
        found = stored.info.version
        if expected is not None and expected != found:
            raise InstanceConflictError(
                f"{stored.info.instance}: your edit is based on version {expected}, the stored version is "
                f"{found}; nothing was stored (read it again and redo the edit)"
            )
        return found

    def _not_found(self, name: str, why: str) -> InstanceNotFoundError:
        defined = []
        for other in self.names():
            with contextlib.suppress(ClusterError):
                if self._current(other)[0].definition is not None:
                    defined.append(other)
        known = ", ".join(defined) or "none"
        return InstanceNotFoundError(f"{name}: no such instance ({why}); defined instances: {known}")

    def _fleet_version(self) -> int:
        try:
            self._ensure_base()
            stat = self._client.exists(self.base)
        except KazooException as exc:
            raise self._translate(exc, "read") from exc
        return int(stat.version) if stat is not None else 0

    def _create(self, definition: InstanceDefinition, fleet: int, note: str) -> VersionInfo:
        info = VersionInfo(definition.name, 1, note=note)
        data = stored_text(info, definition).encode("utf-8")
        try:
            tx = self._client.transaction()
            tx.set_data(self.base, b"", version=fleet)
            tx.create(self._node(definition.name), data, acl=self._acl())
            tx.create(self._history(definition.name), b"", acl=self._acl())
            tx.create(self._version_node(definition.name, 1), data, acl=self._acl())
            self._check(tx.commit(), definition.name, 0)
        except KazooException as exc:
            raise self._translate(exc, "write") from exc
        return parse_stored(definition.name, data.decode("utf-8"), self.name).info

    def _commit(
        self, name: str, definition: InstanceDefinition | None, read: tuple[int, Any, int], note: str
    ) -> VersionInfo:
        """Version ``expected + 1`` of ``name``, if its node and the instances container are still at the
        versions read (``read``: the definition's version, its node's stat, the container's version)."""
        expected, stat, fleet = read
        info = VersionInfo(name, expected + 1, note=note, removed=definition is None)
        data = stored_text(info, definition).encode("utf-8")
        try:
            with contextlib.suppress(NodeExistsError):  # a definition stored by other means may lack it
                self._client.create(self._history(name), b"", acl=self._acl())
            tx = self._client.transaction()
            tx.set_data(self.base, b"", version=fleet)
            tx.set_data(self._node(name), data, version=stat.version)
            tx.create(self._version_node(name, expected + 1), data, acl=self._acl())
            self._check(tx.commit(), name, expected)
        except KazooException as exc:
            raise self._translate(exc, "write") from exc
        return parse_stored(name, data.decode("utf-8"), self.name).info

    def _ensure_base(self) -> None:
        """The root as an open node (relays of the cluster create their election nodes under it), and
        ``instances`` under it with the editors' ACL."""
        if self._client.exists(self.base) is not None:
            return
        self._client.ensure_path(self.root)
        with contextlib.suppress(NodeExistsError):  # a concurrent first add created it
            self._client.create(self.base, b"", acl=self._acl())

    def _acl(self) -> list[Any] | None:
        """With ``auth`` (user:password): that identity may do everything, everyone else only read —
        nodes need no credentials to read their definitions, editors do to change them."""
        if not self._auth:
            return None
        user, _, password = self._auth.partition(":")
        return [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]

    def _check(self, results: list[Any], name: str, expected: int) -> None:
        errors = [r for r in results if isinstance(r, Exception)]
        if any(isinstance(e, BadVersionError | NodeExistsError) for e in errors):
            raise InstanceConflictError(
                f"{name}: another edit of the cluster's instances was stored while yours (version "
                f"{expected + 1}) was being written; nothing of yours was stored (read it again and redo "
                "the edit)"
            )
        for err in errors:
            if type(err).__name__ != "RolledBackError":
                raise err
        if errors:
            raise ClusterError(f"{self.name}/{name}: transaction rolled back: {errors}")

    def _translate(self, exc: KazooException, action: str) -> ClusterError:
        if isinstance(exc, NoAuthError):
            return ClusterError(
                f"{self.name}: not authorized to {action}: the definitions have a digest ACL; give the "
                "editors' identity (--zk-auth USER:PASSWORD or $RELAY_CLUSTER_ZK_AUTH)"
            )
        return ClusterUnavailableError(f"{self.name}: cannot {action}: {type(exc).__name__} {exc}")
