"""The golden records: a fixed MariaDB binlog (``tests/data/golden/binlog.gz``) through the stream's packet
reader, the parser, the entry builder, the sink, the ring store and the record encoder (canal-json,
canal-protobuf, compacted canal-json) must give exactly the records in ``tests/data/golden/records.jsonl``:
the same batches, topics, partitions, keys, values and headers, byte for byte. See ``tests/golden.py``."""

from __future__ import annotations

import base64
import json

from relay.binlog.events import TableMapEvent
from relay.binlog.parse import BinlogParser
from relay.canal.entry import RowChange
from tests import golden
from tests.data.golden import capture


def _show(line: str) -> str:
    """A line with its base64 fields decoded, for a readable failure."""
    doc = json.loads(line)
    for name in ("key", "value"):
        if doc.get(name) is not None:
            doc[name] = base64.b64decode(doc[name]).decode("utf-8", "backslashreplace")
    return json.dumps(doc, ensure_ascii=False)[:4000]


def test_records_equal_the_golden_file_byte_for_byte() -> None:
    expected = golden.RECORDS.read_text(encoding="ascii").splitlines()
    actual = golden.replay()
    for i, (want, got) in enumerate(zip(expected, actual, strict=False)):
        assert got == want, f"line {i + 1} differs:\n  golden: {_show(want)}\n  now:    {_show(got)}"
    assert len(actual) == len(expected)


def test_the_fixture_covers_every_column_type_and_change_kind() -> None:
    changes = [e.store_value for e in golden.entries() if isinstance(e.store_value, RowChange)]
    decoded = {c.name for rc in changes if not rc.is_ddl for c in rc.columns}
    assert {name for name, _ in capture.COLUMNS} <= decoded
    kinds = {(rc.event_type.name, rc.is_ddl) for rc in changes}
    assert {("INSERT", False), ("UPDATE", False), ("DELETE", False)} <= kinds
    assert {k for k, ddl in kinds if ddl} >= {"CREATE", "ALTER", "TRUNCATE", "RENAME", "ERASE", "CINDEX"}


def test_every_table_map_of_the_golden_binlog_says_what_its_table_declares() -> None:
    """The golden binlog's TABLE_MAPs decoded where their tables are known (``capture.COLUMNS``): each
    column's signedness and type text as declared, so a miscounted optional-metadata field (a YEAR taking a
    signedness bit, GEOMETRY a charset) is seen on the server's own events, not only on built ones."""
    declared = {name: ddl for name, ddl in capture.COLUMNS}
    parser = BinlogParser(checksum=True, mariadb=True, log_file=golden.LOG_FILE, timestamp_zone=golden.ZONE)
    seen = 0
    for packet in golden._received(golden.binlog_events()):
        event = parser.parse(packet, 1)
        if not isinstance(event, TableMapEvent) or not event.table.startswith("types_"):
            continue
        seen += 1
        for column in event.columns[1:]:
            ddl = declared[column.name]
            assert column.unsigned == (" unsigned" in ddl), (column.name, ddl)
            kind = ddl.split()[0].split("(")[0]
            assert column.mysql_type.split("(")[0].split()[0] in (kind, "longtext"), (column.name, ddl)
            if " unsigned" in ddl:
                assert column.mysql_type.endswith(" unsigned"), (column.name, column.mysql_type)
    assert seen > 0
