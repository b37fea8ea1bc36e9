"""The golden records: a fixed MariaDB binlog (``tests/data/golden/binlog.gz``) through the stream's packet
reader, the parser, the entry builder, the sink, the ring store and the record encoder (canal-json,
canal-protobuf, compacted canal-json) must give exactly the records in ``tests/data/golden/records.jsonl``:
the same batches, topics, partitions, keys, values and headers, byte for byte. See ``tests/golden.py``."""

from __future__ import annotations

import base64
import json

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
