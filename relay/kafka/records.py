"""The values the publisher sends and tracks: ``Record`` (one Kafka record) and ``BatchHandle`` (one sent
batch, until every record of it is delivered).

Pure values, no I/O. The codec (``relay.kafka.codec``) makes records, the publisher
(``relay.kafka.publisher``) sends them and hands back handles, on the publisher thread (delivery
callbacks run there too, inside ``poll``). ``Record`` is built per row change: it has an ``__init__`` of
its own, so the compiled build constructs it natively (docs/architecture.md, "The compiled hot path").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay.errors import PublishError


@dataclass(init=False, slots=True)
class Record:
    """One Kafka record. ``partition`` None: by ``key`` with murmur2, or the client's choice when unkeyed.
    ``value`` None is a tombstone (compacted topics)."""

    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()

    def __init__(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[tuple[str, bytes], ...] = (),
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        self.value = value
        self.headers = headers

    @property
    def size(self) -> int:
        """Payload bytes (key, value, headers): what a size rejection is about."""
        head = sum(len(name.encode()) + len(value) for name, value in self.headers)
        return len(self.value or b"") + len(self.key or b"") + head


@dataclass(eq=False)
class BatchHandle:
    """One sent batch: delivered once ``pending`` reaches 0 with no ``error``."""

    batch_id: int
    records: int
    pending: int
    error: PublishError | None = None
    dead_lettered: int = 0
    aborted: bool = field(default=False, repr=False)
    committed: bool = True  # transactional mode: False until its transaction committed
    where: str = ""  # the batch's binlog positions, for log lines and error messages
    # The delivery report (a confluent_kafka ``Message``) of its last record delivered: where one record of
    # the batch landed (transactional mode's commit intent names it, ``relay.kafka.commit_intent``).
    landed: Any = field(default=None, repr=False)  # Any: mypyc cannot name ``object`` in a dataclass

    @property
    def label(self) -> str:
        """``batch 12 (mysql-bin.000003:4567..9876)``: how every log line and error names the batch."""
        return f"batch {self.batch_id} ({self.where})" if self.where else f"batch {self.batch_id}"

    @property
    def delivered(self) -> bool:
        return self.pending == 0 and self.error is None and self.committed

    def fail(self, error: PublishError) -> None:
        """Keep the first error: it is the cause; later ones are usually its consequences."""
        if self.error is None:
            self.error = error
