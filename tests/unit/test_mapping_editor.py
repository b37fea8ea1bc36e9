"""Mapping edits and comparisons: every edit validates its result and names the offending key; diffs say
which logical rules changed and which physical tables move. Pure logic, no network."""

from __future__ import annotations

from typing import Any

import pytest

from mapping import editor, parse_mapping
from mapping.diff import logical_changes, moves, summary, text_diff
from relay.errors import InvalidMappingError, MappingError

BASE: dict[str, Any] = {
    "version": 3,
    "unmapped": {"action": "drop"},
    "logical_dbs": {
        "shop": {
            "physical": ["shop_\\d+"],
            "tables": {
                "orders": {"physical": ["orders_\\d+"], "key": ["order_id"], "tag": "orders"},
                "customers": {"physical": ["customers"]},
            },
        }
    },
}
LIVE = [("shop_00", "orders_00"), ("shop_01", "orders_07"), ("shop_00", "customers"), ("shop_00", "items_1")]


def base() -> Any:
    return parse_mapping(BASE)


def test_add_set_remove_db_and_table_keep_the_version() -> None:
    m = editor.add_db(base(), "crm", physical=["crm_\\d+"], topic="crm.all")
    assert m.version == 3 and m.logical_db("crm").topic == "crm.all"  # type: ignore[union-attr]
    m = editor.set_db(m, "crm", topic=None, codec="canal-protobuf")
    assert m.logical_db("crm").topic is None and m.logical_db("crm").codec == "canal-protobuf"  # type: ignore[union-attr]
    m = editor.add_table(m, "shop", "items", physical=["items_\\d+"], topic="shop.items", key=["item_id"])
    assert m.resolve("shop_00", "items_1").topic == "shop.items"  # type: ignore[union-attr]
    m = editor.set_table(m, "shop", "items", tag="it", key=editor.UNSET)
    assert m.logical_db("shop").table("items").key == ("item_id",)  # type: ignore[union-attr]
    m = editor.remove_table(editor.remove_db(m, "crm"), "shop", "items")
    assert m == base()


def test_topics_tags_and_keys() -> None:
    m = editor.add_topic(base(), "shop.customers", "shop.customers")
    assert m.resolve("shop_00", "customers").topic == "shop.customers"  # type: ignore[union-attr]
    with pytest.raises(MappingError) as info:
        editor.add_topic(m, "shop.customers", "again")
    assert info.value.key == "logical_dbs.shop.tables.customers.topic"
    m = editor.remove_topic(m, "shop.customers")
    assert m.resolve("shop_00", "customers").topic == "shop"  # type: ignore[union-attr]
    m = editor.set_tag(editor.remove_tag(m, "shop.orders"), "shop.orders", "o2")
    assert m.resolve("shop_00", "orders_00").tag == "o2"  # type: ignore[union-attr]
    m = editor.add_key(m, "shop.orders", ["shop_id"])
    assert m.resolve("shop_00", "orders_00").key_columns == ("order_id", "shop_id")  # type: ignore[union-attr]
    m = editor.remove_key(m, "shop.orders", ["ORDER_ID"])
    assert m.resolve("shop_00", "orders_00").key_columns == ("shop_id",)  # type: ignore[union-attr]
    m = editor.remove_key(m, "shop.orders")
    assert m.resolve("shop_00", "orders_00").key_columns is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda m: editor.set_topic(m, "shop.orders", "bad topic"), "logical_dbs.shop.tables.orders.topic"),
        (
            lambda m: editor.add_table(m, "shop", "x", physical=["orders_("]),
            "logical_dbs.shop.tables.x.physical[0]",
        ),
        (lambda m: editor.add_table(m, "shop", "orders"), "logical_dbs.shop.tables.orders"),
        (lambda m: editor.set_db(m, "nope", topic="t"), "logical_dbs.nope"),
        (lambda m: editor.remove_table(m, "shop", "nope"), "logical_dbs.shop.tables.nope"),
        (lambda m: editor.set_db(m, "shop", codec="xml"), "logical_dbs.shop.codec"),
        (lambda m: editor.remove_tag(m, "shop.customers"), "logical_dbs.shop.tables.customers.tag"),
        (lambda m: editor.add_key(m, "shop.orders", ["order_id"]), "logical_dbs.shop.tables.orders.key"),
        (lambda m: editor.add_db(m, "shop2", physical=["shop_00"]), "logical_dbs.shop2.physical[0]"),
    ],
)
def test_invalid_edits_are_refused_naming_the_key(edit: Any, key: str) -> None:
    with pytest.raises(MappingError) as info:
        edit(base())
    errors = info.value.errors if isinstance(info.value, InvalidMappingError) else (info.value,)
    assert any(e.key.startswith(key) for e in errors), [str(e) for e in errors]


def test_tags_and_keys_need_a_table() -> None:
    with pytest.raises(MappingError, match="belong to a logical table"):
        editor.set_tag(base(), "shop", "t")


def test_diff_lists_logical_changes_and_physical_moves() -> None:
    old = base()
    new = editor.set_topic(
        editor.add_table(old, "shop", "items", physical=["items_\\d+"]), "shop.orders", "so"
    )
    lines = logical_changes(old, new)
    assert "+ logical table shop.items: physical ['items_\\\\d+'], topic {logical_db}" in lines
    assert "~ logical table shop.orders topic: (inherited/default) -> so" in lines
    found = {(m.db, m.table): m for m in moves(old, new, LIVE)}
    assert set(found) == {("shop_00", "orders_00"), ("shop_01", "orders_07"), ("shop_00", "items_1")}
    assert (
        found[("shop_00", "orders_00")].describe().startswith("shop_00.orders_00: topic shop as shop.orders")
    )
    assert "-> topic so" in found[("shop_00", "orders_00")].describe()
    assert "items_1" in found[("shop_00", "items_1")].describe()  # logical name changes, topic stays
    assert "+        topic: so\n" in text_diff(old, new)
    assert text_diff(old, old) == ""
    assert summary(old, new).startswith("+ logical table shop.items; ~ logical table shop.orders topic")


def test_an_edit_whose_patterns_overlap_is_refused_by_an_example_name() -> None:
    with pytest.raises(InvalidMappingError) as info:
        editor.add_table(base(), "shop", "hot", physical=["orders_0\\d"])  # inside orders_\d+
    assert [e.key for e in info.value.errors] == ["logical_dbs.shop.tables.hot.physical[0]"]
    assert "'orders_00' matches both" in str(info.value)


def test_moves_report_an_ambiguity_only_live_names_reveal() -> None:
    # orders_2\d and orders_\d8 share only orders_28: no example of either shows it, the live names do
    old = editor.set_table(base(), "shop", "orders", physical=["orders_2\\d"])
    new = editor.add_table(old, "shop", "hot", physical=["orders_\\d8"])
    found = moves(old, new, [*LIVE, ("shop_00", "orders_28")])
    errors = [m for m in found if m.error]
    assert [(m.db, m.table) for m in errors] == [("shop_00", "orders_28")]
    assert "claimed by both" in (errors[0].error or "")
