"""Who wrote each record of a partition, as the broker stores it: the producer id and epoch of every record
batch, read with a bare Kafka Fetch request (no client library exposes them).

A test's independent witness of fencing: a transactional producer's epoch grows with every
``init_transactions`` of its ``transactional.id`` (the relay's new leader calls it once per term), so in
a partition the data batches' ``(producer id, producer epoch)`` must never go back in offset order — a
zombie's late batch would. Only the 61-byte header of each v2 record batch is decoded (compression does
not matter); control batches (commit/abort markers) are told apart by their attribute bit.

Fetch v4 (read_uncommitted: every batch the log holds, aborted ones included — the caller decides what a
``read_committed`` consumer saw) against the partition's leader, found from the cluster's metadata. v4 is
the oldest version Kafka 4 still serves and one Tansu serves.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

_FETCH, _VERSION = 1, 4
_TRANSACTIONAL, _CONTROL = 0x10, 0x20
_HEADER = 61  # bytes of a v2 batch header up to its record count


@dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: bool
    commit: bool | None = None  # a control batch: its marker commits (True) or aborts (False)


def _leader(bootstrap: str, topic: str, partition: int) -> tuple[str, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    broker = meta.brokers[meta.topics[topic].partitions[partition].leader]
    return broker.host, int(broker.port)


def _request(topic: str, partition: int, offset: int, correlation: int) -> bytes:
    name = topic.encode()
    body = struct.pack(">hhih", _FETCH, _VERSION, correlation, 10) + b"relay-test"
    body += struct.pack(">iiiib", -1, 200, 1, 4 << 20, 0)  # replica, max wait, min/max bytes, uncommitted
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iiqi", 1, partition, offset, 4 << 20)
    return struct.pack(">i", len(body)) + body


def _receive(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _records(response: bytes) -> tuple[int, bytes]:
    """(the partition's error code, its records) of a one-topic, one-partition Fetch v4 response."""
    at = 4 + 4  # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", response, at)
    assert topics == 1, f"fetch answered {topics} topics"
    (length,) = struct.unpack_from(">h", response, at + 4)
    at += 6 + length
    (partitions,) = struct.unpack_from(">i", response, at)
    assert partitions == 1, f"fetch answered {partitions} partitions"
    _, error, _, _ = struct.unpack_from(">ihqq", response, at + 4)
    at += 4 + 4 + 2 + 8 + 8
    (aborted,) = struct.unpack_from(">i", response, at)
    at += 4 + max(aborted, 0) * 16
    (size,) = struct.unpack_from(">i", response, at)
    at += 4
    return error, response[at : at + max(size, 0)]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A zigzag varint at ``at``: (its value, where the next field starts)."""
    shift = raw = 0
    while True:
        byte = data[at]
        raw |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def _marker(records: bytes, at: int) -> bool:
    """Whether the control record at ``at`` (a batch's first) is a COMMIT marker (else ABORT)."""
    _, at = _varint(records, at)  # the record's length
    at += 1  # attributes
    _, at = _varint(records, at)  # timestamp delta
    _, at = _varint(records, at)  # offset delta
    size, at = _varint(records, at)
    assert size >= 4, f"control record key of {size} bytes"
    _, kind = struct.unpack_from(">hh", records, at)  # version, type (0 abort, 1 commit)
    return bool(kind == 1)


def _batches(records: bytes) -> list[Batch]:
    out, at = [], 0
    while at + _HEADER <= len(records):
        base, length = struct.unpack_from(">qi", records, at)
        if at + 12 + length > len(records):
            break  # a partial batch at the end of the fetch
        magic = records[at + 16]
        assert magic == 2, f"record batch at offset {base}: magic {magic}, not 2"
        attributes, last_delta = struct.unpack_from(">hi", records, at + 21)
        producer, epoch = struct.unpack_from(">qh", records, at + 43)
        control = bool(attributes & _CONTROL)
        out.append(
            Batch(
                base,
                base + last_delta,
                producer,
                epoch,
                bool(attributes & _TRANSACTIONAL),
                control,
                _marker(records, at + _HEADER) if control else None,
            )
        )
        at += 12 + length
    return out


def read_batches(
    bootstrap: str, topic: str, partition: int, until: int, timeout: float = 60.0
) -> list[Batch]:
    """Every batch of ``topic``/``partition`` covering offsets below ``until`` (its data and markers)."""
    host, port = _leader(bootstrap, topic, partition)
    deadline = time.monotonic() + timeout
    out: list[Batch] = []
    offset, correlation = 0, 0
    with socket.create_connection((host, port), timeout=30) as sock:
        while offset < until:
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}/{partition}: batches read up to {offset}, not {until}")
            correlation += 1
            sock.sendall(_request(topic, partition, offset, correlation))
            (size,) = struct.unpack(">i", _receive(sock, 4))
            response = _receive(sock, size)
            (answered,) = struct.unpack_from(">i", response)
            assert answered == correlation, f"fetch answer {answered} for request {correlation}"
            error, records = _records(response)
            assert error == 0, f"{topic}/{partition}: fetch at {offset}: error code {error}"
            batches = [b for b in _batches(records) if b.last_offset >= offset]
            out.extend(batches)
            if batches:
                offset = batches[-1].last_offset + 1
    return out


@dataclass(frozen=True)
class Writer:
    """Who wrote a record: its batch's producer id and epoch, and whether its transaction committed."""

    producer_id: int
    producer_epoch: int
    committed: bool


def writers(batches: list[Batch], offsets: list[int]) -> list[Writer]:
    """The writer of the data batch holding each of ``offsets`` (ascending). A transactional batch's
    outcome is its producer id's next marker in the partition (a batch with none yet is not committed) —
    by producer id, not epoch: the abort of a fenced producer's open transaction is written with the
    bumped epoch; a batch outside transactions counts as committed."""
    outcome: dict[int, bool] = {}  # data batch base offset -> committed
    open_: dict[int, list[int]] = {}
    for b in batches:
        writer = b.producer_id
        if b.control:
            for base in open_.pop(writer, []):
                outcome[base] = bool(b.commit)
        elif b.transactional:
            open_.setdefault(writer, []).append(b.base_offset)
        else:
            outcome[b.base_offset] = True
    data = [b for b in batches if not b.control]
    out, i = [], 0
    for offset in offsets:
        while i < len(data) and data[i].last_offset < offset:
            i += 1
        assert i < len(data) and data[i].base_offset <= offset, f"no data batch holds offset {offset}"
        b = data[i]
        out.append(Writer(b.producer_id, b.producer_epoch, outcome.get(b.base_offset, False)))
    return out
