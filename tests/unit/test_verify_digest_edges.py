"""Forged topic records `relay verify` must compare or name, not crash on: a row digest exists for every
text, a copy under the relay's identity is what the topic holds, an unreadable record is named by place."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Message

from relay.errors import VerifyError
from relay.ops.verify import topic
from relay.ops.verify.digest import HashKind, canal_row_hash, column_text, digest_text
from relay.ops.verify.shards import ROWS, Shard
from relay.source.snapshot_tables import TableSpec, column_meta


def test_a_lone_surrogate_gets_a_digest_unlike_any_server_text() -> None:
    forged = canal_row_hash([HashKind.TEXT], ["a\ud89b"])  # json.loads gives it for "a\\ud89b"
    assert forged != canal_row_hash([HashKind.TEXT], ["a"])
    assert digest_text(["\udc80"]) == b"1|\x80"  # the binlog decoder's escaped byte stays that byte


def test_a_float_beyond_its_range_is_compared_as_its_text() -> None:
    assert column_text(HashKind.FLOAT, "1e39") == "1e39"  # struct refuses to pack it: no OverflowError
    assert column_text(HashKind.FLOAT, "3.4028235E38") == "3.4028234663852886e38"
    assert column_text(HashKind.DOUBLE, "not a number") == "not a number"


def _index() -> Any:
    meta = [
        column_meta(
            0, {**_COLUMN, "COLUMN_NAME": "id", "DATA_TYPE": "bigint", "COLUMN_TYPE": "bigint"}, True
        ),
        column_meta(
            1, {**_COLUMN, "COLUMN_NAME": "status", "CHARACTER_OCTET_LENGTH": 64, "COLLATION_ID": 45}, False
        ),
    ]
    spec = TableSpec(
        "shop_00", "orders", tuple(m for m, _ in meta), tuple(k for _, k in meta), (0,), "PRIMARY"
    )
    shard = Shard(spec, None, (HashKind.TEXT, HashKind.TEXT), (0,), None, False, ROWS, "")  # type: ignore[arg-type]
    return topic.TopicIndex({}, ["shop.orders"], "shop.orders", "src", [shard]), shard


_COLUMN = {
    "IS_NULLABLE": "NO", "DATA_TYPE": "varchar", "COLUMN_TYPE": "varchar(16)", "CHARACTER_OCTET_LENGTH": None,
    "NUMERIC_PRECISION": None, "NUMERIC_SCALE": None, "DATETIME_PRECISION": None, "COLLATION_ID": None,
}  # fmt: skip


def _record(offset: int, status: str | None, sequence: int = 7, raw: bytes | None = None) -> Any:
    headers = [
        ("relay.db", b"shop"), ("relay.table", b"orders"), ("relay.physical.db", b"shop_00"),
        ("relay.physical.table", b"orders"), ("relay.type", b"INSERT"), ("relay.source.id", b"src"),
        ("relay.sequence", str(sequence).encode()),
    ]  # fmt: skip
    value = raw or b'{"data":[{"id":"1","status":"' + str(status).encode() + b'"}],"old":null}'
    return Message(
        topic="shop.orders", partition=0, offset=offset, key=b'{"id":"1"}', value=value, headers=headers
    )


def test_of_equal_identities_the_later_record_is_the_topics_state() -> None:
    """Compaction keeps a key's last record: a copy written under the relay's identity with other bytes
    (someone else's) is what readers see, so it is what verify compares; an older identity later changes
    nothing."""
    index, shard = _index()
    index._batch([_record(0, "PAID"), _record(1, "FORGED"), _record(2, "OLD", sequence=6)], set())
    held = index.held[("1",)]
    assert held.where == ("shop.orders", 0, 1)
    assert (
        held.digest
        == canal_row_hash(shard.kinds, ["1", "FORGED"])
        != canal_row_hash(shard.kinds, ["1", "PAID"])
    )


def test_an_unreadable_record_is_named_unless_a_later_one_replaces_it() -> None:
    index, _ = _index()
    index._batch([_record(0, None, raw=b'{"data":[{"id": oops}],"old":null}'), _record(1, "PAID")], set())
    assert index.held[("1",)].where == ("shop.orders", 0, 1)
    index, _ = _index()
    with pytest.raises(
        VerifyError, match=r"shop.orders \[0\] offset 1: a record of the topic is not canal-json"
    ):
        index._batch([_record(0, "PAID"), _record(1, None, raw=b'{"data":[{"id": oops}],"old":null}')], set())
