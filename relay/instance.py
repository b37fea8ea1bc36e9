"""One canal instance: source → entry builder → sink → ring store, served through canal's streaming API.

The composition root of the canal core. Like canal's ``CanalInstanceWithSpring`` it starts the
downstream end first (positions → store → server) and the parser last, and stops the parser first.

Threads: ``start()`` checks the server and resolves the start position in the caller's thread (so a
misconfigured server is refused before anything runs), then one parser thread reads the binlog,
builds entries, filters them and puts them into the store (blocking while the store is full — that is
the back-pressure that pauses parsing). Consumers call ``get_without_ack`` / ``ack`` / ``rollback``
from their own thread; ``ack`` saves the resume point of the acknowledged prefix.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace

from relay.binlog_source import BinlogSource, ServerInfo, SourceConfig, StartPoint, resolve_start
from relay.entry_builder import BuilderConfig, EntryBuilder
from relay.errors import RelayError, ServerError
from relay.positions import PositionStore, ResumePoint, resume_after
from relay.protocol import Entry
from relay.ring_store import RingStore, StoreConfig
from relay.server import EmbeddedServer, Message
from relay.sink import Sink, SinkConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceConfig:
    """Everything one canal instance needs; built from the YAML config by ``relay.config``."""

    name: str = "default"
    source: SourceConfig = field(default_factory=SourceConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    poll_seconds: float = 0.2  # how often the parser thread looks at its stop flag while waiting


class CanalInstance:
    """A running canal instance. ``start`` → ``get_without_ack``/``ack``/``rollback`` → ``stop``."""

    def __init__(self, config: InstanceConfig, positions: PositionStore) -> None:
        self.config = config
        self.positions = positions
        self.source = BinlogSource(config.source)
        self.store = RingStore(config.store)
        self.server = EmbeddedServer(self.store)
        self.sink = Sink(config.sink)
        self.info: ServerInfo | None = None
        self.start_point: StartPoint | None = None
        self.last_saved: ResumePoint | None = None
        self._resume: dict[int, ResumePoint] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        saved = self.positions.load()
        self.info = self.source.check()
        self.start_point = resolve_start(self.config.source, self.info, saved)
        self.source.open(self.start_point)
        self._thread = threading.Thread(
            target=self._run_parser, name=f"parser-{self.config.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the parser first, then the store; unacknowledged batches are simply not saved."""
        self._stopping.set()
        self.store.close()
        if self._thread is not None:
            self._thread.join(timeout)
        self.source.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    # -- parser thread ---------------------------------------------------------------------------
    def _run_parser(self) -> None:
        assert self.start_point is not None and self.info is not None
        start = self.start_point
        builder = EntryBuilder(BuilderConfig(mariadb=self.info.mariadb, gtid_set=start.gtid_set))
        skip_at = (start.journal, start.offset) if start.skip else None
        try:
            while not self._stopping.is_set():
                event = self.source.read(self.config.poll_seconds)
                if event is None:
                    continue
                entries = builder.build(event)
                if skip_at is not None and entries:
                    entries, skip_at = _drop_published(entries, skip_at, start.skip)
                entries = self.sink.process(entries)
                if entries:
                    self._put(entries)
        except RelayError as exc:
            if not self._stopping.is_set():
                log.error("instance %s: parser stopped: %s", self.config.name, exc)
                self._failure = exc
        except BaseException as exc:
            log.exception("instance %s: parser crashed", self.config.name)
            self._failure = exc
        finally:
            self.source.close()

    def _put(self, entries: list[Entry]) -> None:
        while not self._stopping.is_set():
            if self.store.put(entries, timeout=self.config.poll_seconds):
                return

    # -- streaming API ---------------------------------------------------------------------------
    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def get_without_ack(self, batch_size: int, timeout: float | None = None) -> Message:
        self._raise_failure()
        message = self.server.get_without_ack(batch_size, timeout)
        if message.entries:
            point = replace(resume_after(message.entries[-1]), source=self.source.identity)
            with self._lock:
                self._resume[message.batch_id] = point
        return message

    def ack(self, batch_id: int) -> ResumePoint:
        """Acknowledge a batch (the oldest outstanding one) and save the resume point after it."""
        with self._lock:
            point = self._resume.get(batch_id)
            if point is None:
                raise ServerError(f"batch {batch_id} is not outstanding")
            self.server.ack(batch_id)
            del self._resume[batch_id]
            self.positions.save(point)
            self.last_saved = point
        log.debug("instance %s: batch %d acked, position %s saved", self.config.name, batch_id, point)
        return point

    def rollback(self, batch_id: int | None = None) -> None:
        with self._lock:
            if batch_id is None:
                self.server.rollback()
                self._resume.clear()
            else:
                self.server.rollback(batch_id)
                for bid in [b for b in self._resume if b >= batch_id]:
                    del self._resume[bid]


def _drop_published(
    entries: list[Entry], skip_at: tuple[str, int], skip: int
) -> tuple[list[Entry], tuple[str, int] | None]:
    """Drop the first ``skip`` entries of the transaction at ``skip_at``: they were published before."""
    kept = []
    done = False
    for e in entries:
        start = e.txn.start
        if (start.journal, start.offset) == skip_at:
            if e.txn_index < skip:
                continue
        else:
            done = True  # a later transaction: nothing more to skip
        kept.append(e)
    return kept, (None if done else skip_at)
