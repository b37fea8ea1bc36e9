"""The publisher's topic checks: which topics exist, their partition counts, and creating missing ones.

Owns the ``AdminClient`` and the cache of known topics and their partition counts. A topic is checked
(and, with ``topics.create``, created) before the first record goes to it; a delivery report saying the
broker does not know a topic drops it from the cache, so the next send checks it again.

Threads: the publisher thread (``KafkaPublisher.ensure_topics``, ``partitions`` and, per record, ``known``).
Every admin call has the ``admin_timeout_s`` deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from relay.common.kafka_log import quiet
from relay.common.retry import RetryPolicy
from relay.errors import ConfigError, MissingTopicError, PublishError
from relay.kafka.health import diagnose
from relay.kafka.settings import PublisherConfig
from relay.kafka.verdicts import describe

log = logging.getLogger(__name__)

DIAGNOSE_TIMEOUT_S = 5.0  # asked while the relay waits anyway: a short look, not the admin timeout


class TopicCatalog:
    """Known topics and their partition counts, learnt (or created) through the admin client."""

    def __init__(self, config: PublisherConfig, admin: AdminClient) -> None:
        self._config = config
        self._admin = admin
        self._partitions: dict[str, int] = {}

    def known(self, topic: str) -> bool:
        """Whether ``topic`` was checked (the per-record test before a send)."""
        return topic in self._partitions

    def count(self, topic: str) -> int | None:
        """The cached partition count of ``topic``; None when it is not known."""
        return self._partitions.get(topic)

    def names(self) -> list[str]:
        """The topics checked so far: the ones the relay writes to."""
        return sorted(self._partitions)

    def diagnose(self) -> list[str]:
        """Why the partitions of those topics may not take ``acks=all`` writes (``relay.kafka.health``)."""
        return diagnose(self._admin, self.names(), min(self._config.admin_timeout_s, DIAGNOSE_TIMEOUT_S))

    def forget(self, topic: str) -> None:
        """The broker said it does not know ``topic``: check (or create) it again before the next send."""
        self._partitions.pop(topic, None)

    def ensure(self, names: Iterable[str]) -> None:
        """Learn the partition counts of ``names`` and the dead-letter topic; create missing ones if allowed.

        Lists all topics rather than asking for the named ones: a metadata request for one topic
        auto-creates it on brokers with ``auto.create.topics.enable`` (and always on Tansu). A missing
        topic with creation off raises ``MissingTopicError`` (retriable, never a record rejection).
        """
        wanted = {*names, *([self._config.dead_letter_topic] if self._config.dead_letter_topic else [])}
        missing = wanted - self._partitions.keys()
        if not missing:
            return
        existing = self._list_topics()
        self._partitions.update({t: existing[t] for t in missing if t in existing})
        absent = sorted(missing - existing.keys())
        if not absent:
            return
        if not self._config.create_topics:
            # Retriable: at start the relay stops on it (a clear error before anything is sent); while
            # running, the batch is rolled back and retried with backoff until the topic exists.
            raise MissingTopicError(
                f"topic {absent[0]!r} does not exist and topics.create is false: create it "
                "(or allow creation); retrying with backoff"
            )
        self._create_topics(absent)

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (checked, or created, on first use)."""
        count = self._partitions.get(topic)
        if count is None:
            self.ensure([topic])
            count = self._partitions[topic]
        return count

    def _list_topics(self) -> dict[str, int]:
        try:
            meta = self._admin.list_topics(timeout=self._config.admin_timeout_s)
        except KafkaException as exc:
            raise PublishError(
                f"kafka {self._config.bootstrap_servers} (kafka.bootstrap_servers) did not answer within "
                f"{self._config.admin_timeout_s:g} s: {describe(exc.args[0])}"
            ) from exc
        return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}

    def _create_topics(self, names: list[str]) -> None:
        d = self._config.topic_defaults
        new = [NewTopic(n, d.partitions, d.replication_factor, config=dict(d.config)) for n in names]
        futures = self._admin.create_topics(new, request_timeout=self._config.admin_timeout_s)
        for name, future in futures.items():
            try:
                future.result(timeout=self._config.admin_timeout_s)
                log.info("created topic %s (%d partitions)", name, d.partitions)
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # another relay created it first
                if err.retriable() or err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
                    raise PublishError(f"cannot create topic {name!r}: {describe(err)}") from exc
                raise ConfigError(f"topic {name!r}", f"cannot be created: {describe(err)}") from exc
        self._await_metadata(names)

    def _await_metadata(self, names: list[str]) -> None:
        # Creation returns before every broker's metadata shows the topic: wait for it, with a deadline.
        backoff = RetryPolicy(initial=0.05, maximum=1.0, deadline=self._config.admin_timeout_s).start()
        while True:
            existing = self._list_topics()
            self._partitions.update({n: existing[n] for n in names if existing.get(n)})
            if all(n in self._partitions for n in names):
                self._await_leaders(names)
                return
            if not backoff.wait():
                raise PublishError(f"created topics {names} did not show in metadata in time")

    def _await_leaders(self, names: list[str]) -> None:
        """Wait until every partition of the just-created ``names`` answers ListOffsets from its leader.

        Metadata shows a new partition's leader before that broker serves it (KRaft applies the image to
        the metadata cache, then to the replica manager): a first produce request in that gap fails with
        NOT_LEADER_OR_FOLLOWER while the next one of the same partition lands — and since the broker holds
        no idempotence state for the partition yet, it accepts the later records first. The earlier ones are
        then sent again after them (``relay.kafka.delivery``): nothing lost, but a key's changes out of order
        in the log (seen: a cluster test's first records to a fresh topic). ListOffsets is served only by a
        partition's leader, so its answer closes the gap; nothing is written to the topic. Best effort: a
        broker that cannot answer it in ``admin_timeout_s`` is logged and produced to anyway."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        pending = {(n, p) for n in names for p in range(self._partitions[n])}
        backoff = RetryPolicy(initial=0.05, maximum=0.5, deadline=self._config.admin_timeout_s).start()
        while pending:
            latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
            asked = {TopicPartition(n, p): latest for n, p in sorted(pending)}
            try:
                futures = self._admin.list_offsets(asked, request_timeout=self._config.admin_timeout_s)
            except (KafkaException, ValueError, TypeError) as exc:  # a client or broker without ListOffsets
                log.warning("new topics %s: leaders not confirmed (%s); producing anyway", names, exc)
                return
            for tp, future in futures.items():
                try:
                    future.result()
                    pending.discard((tp.topic, tp.partition))
                except KafkaException as exc:
                    log.debug("new topic %s [%d] not served yet: %s", tp.topic, tp.partition, exc)
            if pending and not backoff.wait():
                log.warning(
                    "new topics: %d partition(s) not served by a leader within %g s (e.g. %s [%d]); "
                    "producing anyway",
                    len(pending),
                    self._config.admin_timeout_s,
                    *min(pending),
                )
                return


def probe_brokers(settings: dict[str, object], timeout: float) -> None:
    """The brokers of ``settings`` (an admin client's) answer a metadata request within ``timeout``; else a
    retriable ``PublishError`` naming them — before anything else of a start is done."""
    admin = AdminClient(quiet(dict(settings)))
    try:
        admin.list_topics(timeout=timeout)  # all topics: naming one creates it on some brokers
    except KafkaException as exc:
        raise PublishError(
            f"kafka {settings.get('bootstrap.servers')} (kafka.bootstrap_servers) did not answer within "
            f"{timeout:g} s: {describe(exc.args[0])}"
        ) from exc
