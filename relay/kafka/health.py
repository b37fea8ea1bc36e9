"""Why Kafka does not acknowledge: what the cluster's metadata says about the partitions the relay writes.

``diagnose`` is asked only once a batch has waited for Kafka longer than it should
(``relay.daemon.kafka_wait``): it lists the cluster's brokers and the topics' partitions, and the topics'
``min.insync.replicas``, and names each partition that cannot take an ``acks=all`` write now — no leader,
a replica on a broker that left the cluster, fewer in-sync replicas than ``min.insync.replicas`` — in one
line a person reads (the same line goes to the log and to ``relay status`` as ``kafka_waiting``). An empty
list: the metadata shows nothing wrong (a slow or frozen broker still listed, or a network in between).

Threads: the publisher thread. Every admin call has the caller's deadline; a failure is itself the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

SHOWN = 3  # partitions named per kind of problem; the rest are counted


def diagnose(admin: AdminClient, topics: Iterable[str], timeout: float) -> list[str]:
    """What keeps ``topics``' partitions from acknowledging ``acks=all`` writes, one line per kind."""
    names = sorted(set(topics))
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        return [f"the cluster does not answer a metadata request: {exc.args[0].str()}"]
    brokers = set(meta.brokers)
    needed = _min_isr(admin, names, timeout)
    leaderless: list[str] = []
    short: list[str] = []
    gone: set[int] = set()
    for name in names:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None:
            continue
        for number, part in sorted(topic.partitions.items()):
            where = f"{name} [{number}]"
            gone.update(r for r in part.replicas if r not in brokers)
            if part.leader < 0 or part.leader not in brokers:
                leaderless.append(where)
            elif name in needed and len(part.isrs) < needed[name]:
                in_sync = f"{_ids(part.isrs)} of {_ids(part.replicas)}"
                short.append(
                    f"{where} has {len(part.isrs)} replica(s) in sync ({in_sync}) and min.insync.replicas "
                    f"is {needed[name]}"
                )
    lines = []
    if gone:
        lines.append(f"broker(s) {_ids(sorted(gone))} not in the cluster (down?); {len(brokers)} answer")
    if leaderless:
        lines.append(f"no leader for {_some(leaderless)}")
    if short:
        lines.append(f"{_some(short)}: Kafka takes no acks=all write there until enough replicas are in sync")
    return lines


def _min_isr(admin: AdminClient, names: list[str], timeout: float) -> dict[str, int]:
    """Each topic's ``min.insync.replicas`` (topics whose configs cannot be read are left out)."""
    if not names:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    found: dict[str, int] = {}
    try:
        futures: dict[Any, Any] = admin.describe_configs(resources, request_timeout=timeout)
    except KafkaException:
        return found
    for resource, future in futures.items():
        try:
            entry = future.result(timeout)["min.insync.replicas"]
            found[resource.name] = int(entry.value)
        except (KafkaException, KeyError, ValueError, TypeError):
            continue
    return found


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids) or "none"


def _some(items: list[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown if len(items) <= SHOWN else f"{shown} and {len(items) - SHOWN} more partition(s)"
