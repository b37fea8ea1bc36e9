"""The schema history in ZooKeeper, beside the ZooKeeper position node, for relays that take over.

Owned here: ``ZooKeeperSchemaHistory`` — each record is one or more persistent sequential znodes
``{path}/r-0000000012`` (``relay.schema.history.encode_parts``: a header line and a slice of the
zlib-compressed record, at most ``PART_BYTES`` each, well below ZooKeeper's 1 MB node limit). The
sequence numbers give the order written; loading reads the children in that order and reassembles
the records, leaving out a record whose last part was never written (a crash while appending: the
relay had not gone past its event).

Every part is created in one multi-op transaction with the leadership's fence checks
(``relay.positions.zookeeper.Fence``: the epoch node at this leader's epoch, the running node still
there), exactly as a position write is: a relay that lost its leadership can never append, so a
standby that takes over reads a history no zombie writes into. Without HA (``ha.enabled: false``)
there is no fence and one relay owns the node.

Why here and not in ``relay.positions``: the records are the schema history's (``relay.schema``
sits above ``relay.positions`` and uses its fence). Threads: the binlog reader thread appends; the
CLI's thread reads and appends for ``relay schema``; kazoo's threads do the I/O. Kazoo errors become
``SchemaError``.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError

from relay.errors import LeadershipError, SchemaError
from relay.positions.zookeeper import Fence
from relay.schema.history import PartAssembler, Record, SchemaHistory, encode_parts

log = logging.getLogger(__name__)

PREFIX = "r-"


class ZooKeeperSchemaHistory(SchemaHistory):
    """The history under the znode ``path`` (module docstring); ``fence`` guards every append."""

    def __init__(self, client: KazooClient, path: str, fence: Fence | None = None) -> None:
        super().__init__()
        self.client = client
        self.path = path.rstrip("/")
        self.fence = fence

    def describe(self) -> str:
        return f"zookeeper {self.path}"

    def load(self) -> None:
        self.records = self._read()

    def _read(self) -> list[Record]:
        assembler = PartAssembler(self.describe())
        try:
            children = sorted(c for c in self.client.get_children(self.path) if c.startswith(PREFIX))
        except NoNodeError:
            return []
        except (KazooException, KazooTimeoutError) as exc:
            raise SchemaError(f"cannot read the schema history {self.path}: {exc!r}") from exc
        for child in children:
            try:
                data, _ = self.client.get(f"{self.path}/{child}")
            except NoNodeError:
                continue
            except (KazooException, KazooTimeoutError) as exc:
                raise SchemaError(f"cannot read the schema history {self.path}/{child}: {exc!r}") from exc
            assembler.add(data)
        return assembler.records

    def _write(self, record: Record) -> None:
        try:
            self.client.ensure_path(self.path)
        except (KazooException, KazooTimeoutError) as exc:
            raise SchemaError(f"cannot write the schema history {self.path}: {exc!r}") from exc
        for part in encode_parts(record, self.part_bytes):
            self._create(part, record)

    def _create(self, part: bytes, record: Record) -> None:
        token = self.fence.guard() if self.fence is not None else None
        txn = self.client.transaction()
        for path, version in token.checks if token else ():
            txn.check(path, version)
        txn.create(f"{self.path}/{PREFIX}", part, sequence=True)
        try:
            results = list(txn.commit())
        except (KazooException, KazooTimeoutError) as exc:
            raise SchemaError(f"cannot write the schema history {self.path}: {exc!r}") from exc
        if not isinstance(results[-1], Exception):
            return
        failed = [
            (path, r)
            for (path, _), r in zip(token.checks if token else (), results, strict=False)
            if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ]
        if failed and token is not None:
            raise LeadershipError(
                f"schema history record at {record.at[0]}:{record.at[1]} not written: leadership of epoch "
                f"{token.epoch} is over ({failed[0][0]}: {type(failed[0][1]).__name__})"
            )
        raise SchemaError(f"cannot write the schema history {self.path}: {results[-1]!r}")
