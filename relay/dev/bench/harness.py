"""The relay a bench worker measures: its config and mapping, its publisher warmed up, its thread.

Owns the bench's mapping (``relay_mapping``: logical db ``bench``, one topic per table) and relay config
(``relay_config_data`` from the worker's spec), ``warm_up`` (the producer id fetched before the clock
starts), the publishers that record what they sent (``AckRecorder``, ``BatchCapture``) and ``build_relay``
(the relay of a spec, from ``relay.wiring``). Runs on the worker's main thread; ``run_in_thread`` gives
the relay a thread of its own.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from relay.kafka.publisher import KafkaPublisher
from relay.kafka.records import BatchHandle, Record

TOPIC_PARTITIONS = 3


def relay_mapping(partitions: int = TOPIC_PARTITIONS) -> dict[str, Any]:
    """Logical db ``bench`` ← ``relay_bench``; one topic per table (``bench.w1`` …), canal-json."""
    return {
        "version": 1,
        "topics": {"partitions": partitions, "create": True},
        "unmapped": {"action": "drop"},
        "logical_dbs": {"bench": {"physical": ["relay_bench"], "topic": "bench.{table}"}},
    }


def write_mapping_file(path: Path) -> None:
    """``relay_mapping()`` as the mapping file a relay's config names (``Relay.run`` reads it at start)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(relay_mapping()))


def relay_config_data(spec: dict[str, Any]) -> dict[str, Any]:
    if "config" in spec:  # a whole configuration (the snapshot workload's, relay.dev.bench.snapshot)
        return dict(spec["config"])
    work = spec["workdir"]
    data: dict[str, Any] = {
        "instance": spec["instance"],
        "source": {
            "host": spec["mysql"]["host"],
            "port": spec["mysql"]["port"],
            "user": spec["mysql"]["user"],
            "password": spec["mysql"]["password"],
            "server_id": spec["server_id"],
            "start": {"journal": spec["start"][0], "offset": spec["start"][1]},
        },
        "filter": {"include": "relay_bench\\..*"},
        # The workloads' rows are all in the binlog from "start": no snapshot of the tables beside.
        "snapshot": {"mode": "never"},
        "kafka": {"bootstrap_servers": spec["kafka"], "ddl_topic": "bench.ddl"},
        "state_dir": str(work),
        "status": {"interval_seconds": 1.0},
        "publish": {"drain_seconds": 2.0},
        "logging": {"level": "WARNING"},
    }
    for key, value in spec.get("settings", {}).items():  # --set section.key=value from the command line
        section, _, name = key.partition(".")
        data.setdefault(section, {})[name] = value
    return data


class AckRecorder(KafkaPublisher):
    """The relay's publisher, noting when each batch came back fully delivered (the relay then acks it).

    Only the two public calls the relay makes are wrapped; what is recorded is parsed after the run.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sent: dict[int, Sequence[Record]] = {}
        self.acked: list[tuple[float, Sequence[Record]]] = []

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        self.sent[batch_id] = records
        return super().send(batch_id, records, where)

    def completed_prefix(self) -> list[BatchHandle]:
        done = super().completed_prefix()
        if done:
            now = time.monotonic()
            for handle in done:
                self.acked.append((now, self.sent.pop(handle.batch_id, ())))
        return done

    def ack_times(self) -> list[tuple[int, str, float]]:
        out = []
        for when, records in self.acked:
            for rec in records:
                headers = dict(rec.headers)
                kind = headers.get("relay.type", b"").decode()
                if rec.key is None or kind not in ("INSERT", "UPDATE", "DELETE"):
                    continue
                out.append((int(json.loads(rec.key)["id"]), kind, when))
        return out


WARM_UP_TOPIC = "bench.warmup"


def warm_up(publisher: KafkaPublisher, timeout: float = 30.0) -> float:
    """Deliver one record before the clock starts; returns how long that took.

    An idempotent producer delivers nothing until it has its producer id (about 0.5 s after it is
    created, on Tansu): a one-off of a relay's start, like the server checks, not part of its rate.
    """
    began = time.monotonic()
    publisher.ensure_topics([WARM_UP_TOPIC])
    publisher.send(-1, [Record(WARM_UP_TOPIC, 0, None, b"warm-up")], "warm-up")
    while publisher.inflight():
        if publisher.failed() is not None or time.monotonic() - began > timeout:
            raise SystemExit(f"the producer did not deliver a warm-up record: {publisher.failed()}")
        publisher.poll(0.01)
        publisher.completed_prefix()
    return time.monotonic() - began


def build_relay(
    spec: dict[str, Any], publisher_class: type[KafkaPublisher] = KafkaPublisher
) -> tuple[Any, Any, float]:
    """The relay of ``spec`` on a warmed-up ``publisher_class``: (relay, publisher, warm-up seconds)."""
    from mapping import parse_mapping
    from relay.config.load import parse_config
    from relay.wiring import build_relay, publisher_config

    Path(spec["workdir"]).mkdir(parents=True, exist_ok=True)
    config = parse_config(relay_config_data(spec), base_dir=spec["workdir"])
    mapping = parse_mapping(relay_mapping())
    write_mapping_file(
        config.config_path(config.mapping.file)
    )  # the relay reads the store again when it starts
    publisher = publisher_class(publisher_config(config, mapping))
    warm = warm_up(publisher)
    return build_relay(config, mapping, publisher=publisher), publisher, warm


def run_in_thread(relay: Any) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            relay.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="relay", daemon=True)
    return thread, errors


def reached(point: Any, end: tuple[str, int]) -> bool:
    return point is not None and point.skip == 0 and (point.journal, point.offset) >= end


class BatchCapture(KafkaPublisher):
    """The relay's publisher, keeping a copy of every batch of records it was given to send."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.batches: list[tuple[int, list[Record]]] = []

    def send(self, batch_id: int, records: Sequence[Record], where: str = "") -> BatchHandle:
        self.batches.append((batch_id, list(records)))
        return super().send(batch_id, records, where)
