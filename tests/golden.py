"""The golden records: a fixed binlog through the whole hot path, and the records it must give.

``tests/data/golden/binlog.gz`` is a binlog file written by a real MariaDB (``capture.py`` beside it says
which statements). ``replay()`` feeds it, as the server's dump protocol would frame it, through
``_PacketReader`` (over a socket pair), ``BinlogParser``, ``EntryBuilder``, ``XaBuffer``, ``Sink``, the
``RingStore`` (small MEMSIZE batches, DDL isolation) and ``RecordEncoder`` under three mappings (canal-json;
canal-protobuf with a declared key, a tag and a physical key shard; canal-json on compacted topics), and
renders every batch and every record (topic, partition as the publisher computes it, key, value, headers)
as one JSON line. ``tests/unit/test_golden_records.py`` compares those lines with
``tests/data/golden/records.jsonl``, byte for byte.

    PYTHONPATH=. .venv/bin/python tests/golden.py            # prints the lines
    PYTHONPATH=. .venv/bin/python tests/golden.py --write    # rewrites records.jsonl (review the diff!)

The records file was written by the pure-Python relay before any speed work; the compiled modules
(``scripts/build-compiled``) must reproduce it exactly, and so must every later change that does not mean
to change the record format.
"""

from __future__ import annotations

import base64
import gzip
import json
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mapping.load import parse_mapping
from mapping.model import Mapping
from relay.binlog.parse import BinlogParser
from relay.binlog.stream import _PacketReader
from relay.canal.entry import Entry, EntryPosition
from relay.canal.entry_builder import BuilderConfig, EntryBuilder
from relay.canal.ring_store import RingStore
from relay.canal.sink import Sink
from relay.canal.xa import XaBuffer
from relay.config.sections import BatchMode, SinkConfig, StoreConfig
from relay.kafka.codec import RecordEncoder
from relay.kafka.partitioner import partition_for_key
from relay.kafka.records import Record
from relay.positions.store import SourceIdentity

DATA = Path(__file__).resolve().parent / "data" / "golden"
BINLOG = DATA / "binlog.gz"
RECORDS = DATA / "records.jsonl"
LOG_FILE = "mysql-bin.000001"  # the file capture.py copies
ZONE = "+05:30"  # the zone TIMESTAMP text is rendered in (the server's, for a real relay)
SOURCE = SourceIdentity("db1.local", 3306, 1, "")
PARTITIONS = {"shop.types": 3, "shop.orders": 5, "shop": 2, "relay.ddl": 1}
_MAGIC = b"\xfebin"
_MAX_PACKET = 0xFFFFFF


def _mapping(codec: str, compact: bool) -> Mapping:
    tables: dict[str, Any] = {
        "types": {"physical": [r"types_\d+"], "topic": "shop.types"},
        "orders": {"physical": [r"orders_\d+"], "topic": "shop.orders"},
    }
    if codec == "canal-protobuf":
        tables["orders"].update(key=["line", "id"], tag="o", key_shard="physical", codec=codec)
        tables["types"].update(codec=codec)
    doc: dict[str, Any] = {
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            "shop": {
                "physical": [r"shop_\d+"],
                "topic": "shop",
                "tables": tables,
                "unclaimed_tables": "own_name",
            }
        },
    }
    if compact:
        doc["topics"] = {"config": {"cleanup.policy": "compact"}}
    return parse_mapping(doc)


MAPPINGS = {
    "json": _mapping("canal-json", compact=False),
    "protobuf": _mapping("canal-protobuf", compact=False),
    "json-compacted": _mapping("canal-json", compact=True),
}


def binlog_events() -> list[bytes]:
    """The binlog file's events, each exactly as the server stores it (header … CRC32)."""
    raw = gzip.decompress(BINLOG.read_bytes())
    if raw[:4] != _MAGIC:
        raise ValueError(f"{BINLOG}: not a binlog file")
    events, at = [], 4
    while at < len(raw):
        (size,) = struct.unpack_from("<I", raw, at + 9)
        events.append(raw[at : at + size])
        at += size
    return events


def _packets(events: list[bytes]) -> bytes:
    """The dump protocol's framing of ``events``: each an OK byte + the event, in 16 MB packets."""
    out = bytearray()
    for seq, event in enumerate(events):
        payload = b"\x00" + event
        while True:
            chunk, payload = payload[:_MAX_PACKET], payload[_MAX_PACKET:]
            out += len(chunk).to_bytes(3, "little") + bytes([seq & 0xFF]) + chunk
            if len(chunk) < _MAX_PACKET:
                break
    return bytes(out)


def _received(events: list[bytes]) -> Iterator[bytes]:
    """``events`` as ``_PacketReader`` hands them out, read from one end of a socket pair."""
    ours, theirs = socket.socketpair()
    writer = threading.Thread(target=theirs.sendall, args=(_packets(events),), daemon=True)
    writer.start()
    try:
        reader = _PacketReader(ours, read_timeout=30.0)
        for _ in events:
            packet = reader.next(30.0)
            if packet is None:
                raise TimeoutError("the socket pair stopped delivering packets")
            yield packet
    finally:
        writer.join(30.0)
        ours.close()
        theirs.close()


def entries() -> list[Entry]:
    """Every entry the sink lets through, in order."""
    parser = BinlogParser(checksum=True, mariadb=True, log_file=LOG_FILE, timestamp_zone=ZONE)
    builder = EntryBuilder(BuilderConfig(mariadb=True))
    xa = XaBuffer(1 << 20)
    sink = Sink(SinkConfig(filter=r"shop_\d+\..*"))
    out: list[Entry] = []
    for packet in _received(binlog_events()):
        event = parser.parse(packet, 1)
        out += sink.process(xa.process(event, builder.build(event)))
    return out


def _bytes(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _position(p: EntryPosition | None) -> str | None:
    return None if p is None else f"{p.journal}:{p.offset}:{p.server_id}:{p.gtid}:{p.timestamp}"


def _record_line(name: str, record: Record) -> str:
    partition = record.partition
    if partition is None and record.key is not None:
        partition = partition_for_key(record.key, PARTITIONS[record.topic])
    return json.dumps(
        {
            "mapping": name,
            "topic": record.topic,
            "partition": partition,
            "key": _bytes(record.key),
            "value": _bytes(record.value),
            "headers": [[k, _bytes(v)] for k, v in record.headers],
        },
        ensure_ascii=True,
    )


def replay() -> list[str]:
    """One line per store batch and per record, in the order the relay would send them."""
    store = RingStore(
        StoreConfig(buffer_size=64, memunit=1024, batch_mode=BatchMode.MEMSIZE, ddl_isolation=True)
    )
    encoders = {
        name: RecordEncoder(
            m, SOURCE, ddl_topic="relay.ddl", partitions=PARTITIONS.__getitem__, source_id="golden"
        )
        for name, m in MAPPINGS.items()
    }
    lines: list[str] = []
    pending = entries()
    while pending or store.fill().entries:
        while pending and store.try_put(pending[:1]):
            pending.pop(0)
        batch = store.try_get(8)
        span = batch.position_range
        lines.append(
            json.dumps(
                {
                    "batch": [batch.first_seq, batch.last_seq],
                    "start": _position(span.start if span else None),
                    "end": _position(span.end if span else None),
                    "ack": _position(span.ack if span else None),
                }
            )
        )
        for entry in batch.entries:
            for name, encoder in encoders.items():
                lines += (_record_line(name, r) for r in encoder.encode(entry))
        store.ack(batch.last_seq)
    return lines


def main(argv: list[str]) -> int:
    lines = replay()
    if argv[1:] == ["--write"]:
        RECORDS.write_text("".join(line + "\n" for line in lines), encoding="ascii")
        print(f"wrote {RECORDS}: {len(lines)} lines")
    else:
        sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
