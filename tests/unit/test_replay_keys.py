"""``relay replay --remap`` recomputes a moved canal-json row's key under the current mapping, shard
identity included (``key_shard``). Pure function, no network."""

from __future__ import annotations

import json

from mapping.load import parse_mapping
from relay.kafka.remap import remap_value


def route(key_shard: str):  # type: ignore[no-untyped-def]
    m = parse_mapping(
        {
            "logical_dbs": {
                "shop": {
                    "physical": [r"shop_\d+"],
                    "tables": {
                        "orders": {"physical": [r"orders_\d+"], "topic": "shop.o2", "key_shard": key_shard}
                    },
                }
            }
        }
    )
    found = m.resolve("shop_07", "orders_33")
    assert found is not None
    return found


VALUE = json.dumps(
    {"database": "shop", "table": "orders", "pkNames": ["id"], "data": [{"id": "42", "region": "eu"}]}
).encode()


def test_remapped_keys_carry_the_shard_identity() -> None:
    assert remap_value(VALUE, route("none"), b'{"id":"42"}')[1] == b'{"id":"42"}'
    assert (
        remap_value(VALUE, route("physical"), b'{"id":"42"}')[1]
        == b'{"_shard":"shop_07.orders_33","id":"42"}'
    )
    assert remap_value(VALUE, route("column:Region"), b'{"id":"42"}')[1] == b'{"_shard":"eu","id":"42"}'
    assert (
        remap_value(VALUE, route("column:zone"), b'{"id":"42"}')[1] == b'{"id":"42"}'
    )  # no such column: kept
