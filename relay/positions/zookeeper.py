"""The ZooKeeper position store: an instance's resume point in one persistent znode, by compare-and-set.

``save`` is a single ZooKeeper multi-op transaction: the leadership checks a ``Fence`` asks for (the
epoch node still at this leader's epoch, the running node still there) plus the write of the position
node at the version this store last saw. So a write either lands whole or not at all, and it lands
only while (a) nobody else wrote the node since this store read or wrote it (``PositionConflictError``
otherwise) and (b) the writer is still the elected leader of the current epoch (``LeadershipError``
otherwise): a zombie relay can never move the position, whatever its threads believe.

The node holds JSON: ``{"epoch": N, "leader": "host:pid", "position": <ResumePoint>}``.

Threads: called from the publisher thread (``CanalInstance.ack``) and at start; kazoo's own threads
do the I/O. Kazoo errors are translated into ``PositionError`` here.
"""

from __future__ import annotations

import json
import logging
import posixpath
from dataclasses import dataclass
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError

from relay.errors import LeadershipError, PositionConflictError, PositionError
from relay.positions.store import ResumePoint

log = logging.getLogger(__name__)

_ABSENT = -1  # "the node does not exist": the next save creates it


@dataclass(frozen=True)
class FenceToken:
    """What a write must still find in ZooKeeper to be allowed: ``checks`` are (path, data version)."""

    epoch: int
    leader: str
    checks: tuple[tuple[str, int], ...]


class Fence(Protocol):
    """The leadership seen by the store: ``guard`` raises ``LeadershipError`` once leadership is in doubt."""

    def guard(self) -> FenceToken: ...


class ZooKeeperPositionStore:
    """A ``PositionStore`` in the znode ``path``; ``fence`` (the leadership) guards every write."""

    def __init__(self, client: KazooClient, path: str, fence: Fence | None = None) -> None:
        self.client = client
        self.path = path
        self.fence = fence
        self._version: int | None = None  # the node version last read or written; None: not known yet

    def describe(self) -> str:
        return f"zookeeper {self.path}"

    def load(self) -> ResumePoint | None:
        try:
            data, stat = self.client.get(self.path)
        except NoNodeError:
            self._version = _ABSENT
            return None
        except (KazooException, KazooTimeoutError) as exc:
            raise PositionError(f"cannot read the position node {self.path}: {exc!r}") from exc
        self._version = stat.version
        return _decode(data, self.path)

    def save(self, point: ResumePoint) -> None:
        token = self.fence.guard() if self.fence is not None else None
        if self._version is None:
            self._learn_version()
        assert self._version is not None
        body = _encode(point, token)
        try:
            self._ensure_parent()
            results = self._commit(body, token)
        except (KazooException, KazooTimeoutError) as exc:
            self._version = None  # unknown whether it landed: re-read before the next compare-and-set
            raise PositionError(f"cannot write the position node {self.path}: {exc!r}") from exc
        self._check(results, token, point)

    # -- internals -------------------------------------------------------------------------------
    def _learn_version(self) -> None:
        """Before the first write without a read: adopt the node's current version (or its absence)."""
        try:
            stat = self.client.exists(self.path)
        except (KazooException, KazooTimeoutError) as exc:
            raise PositionError(f"cannot read the position node {self.path}: {exc!r}") from exc
        self._version = _ABSENT if stat is None else stat.version

    def _ensure_parent(self) -> None:
        if self._version == _ABSENT:
            self.client.ensure_path(posixpath.dirname(self.path))

    def _commit(self, body: bytes, token: FenceToken | None) -> list[Any]:
        txn = self.client.transaction()
        for path, version in token.checks if token else ():
            txn.check(path, version)
        if self._version == _ABSENT:
            txn.create(self.path, body)
        else:
            txn.set_data(self.path, body, version=self._version)
        return list(txn.commit())

    def _check(self, results: list[Any], token: FenceToken | None, point: ResumePoint) -> None:
        """Interpret the transaction's results: the last op is the write, the ones before it the fence."""
        write = results[-1]
        if not isinstance(write, Exception):
            self._version = 0 if self._version == _ABSENT else write.version
            return
        fence_failed = [
            (path, r)
            for (path, _), r in zip(token.checks if token else (), results, strict=False)
            if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ]
        if fence_failed:
            path, err = fence_failed[0]
            raise LeadershipError(
                f"position {point} not saved: leadership of epoch {token.epoch if token else '?'} is over "
                f"({path}: {type(err).__name__}); a newer leader owns the position"
            )
        self._version = None
        if isinstance(write, BadVersionError | NodeExistsError | NoNodeError):
            raise PositionConflictError(
                f"position {point} not saved: {self.path} was changed by another writer "
                f"({type(write).__name__})"
            )
        raise PositionError(f"cannot write the position node {self.path}: {write!r}")


def _encode(point: ResumePoint, token: FenceToken | None) -> bytes:
    data = {
        "epoch": token.epoch if token else 0,
        "leader": token.leader if token else "",
        "position": json.loads(point.to_json()),
    }
    return json.dumps(data, sort_keys=True).encode("utf-8")


def _decode(data: bytes, where: str) -> ResumePoint:
    try:
        envelope = json.loads(data.decode("utf-8"))
        position = envelope["position"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PositionError(f"{where}: not a saved position node ({exc!r})") from exc
    return ResumePoint.from_json(json.dumps(position), where=where)


def read_position_node(client: KazooClient, path: str) -> tuple[ResumePoint | None, int | None]:
    """The saved point and the epoch that wrote it, for ``relay status`` (None, None when absent)."""
    try:
        data, _ = client.get(path)
    except NoNodeError:
        return None, None
    except (KazooException, KazooTimeoutError) as exc:
        raise PositionError(f"cannot read the position node {path}: {exc!r}") from exc
    try:
        epoch = int(json.loads(data.decode("utf-8")).get("epoch", 0))
    except (ValueError, AttributeError):
        epoch = None
    return _decode(data, path), epoch
