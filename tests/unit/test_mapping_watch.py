"""Hot-reload decisions: the watcher hands over a new valid version once, keeps the old mapping (and says
why, naming the key) when the new one is invalid; the switch gate holds a switch until no batch is in
flight and a rolled-back range has been re-acknowledged. File store on a temp dir, no network."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mapping import editor, parse_mapping
from mapping.store import FileMappingStore
from mapping.watch import MappingWatcher, SwitchGate, check_against_tables

BASE = {"version": 1, "logical_dbs": {"shop": {"physical": ["shop_\\d+"]}}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup(tmp_path: Path) -> tuple[FileMappingStore, MappingWatcher, Clock]:
    store = FileMappingStore(tmp_path / "mapping.yaml", tmp_path / "state" / "mapping-history")
    store.create(parse_mapping(BASE))
    clock = Clock()
    return store, MappingWatcher(store, store.read(), interval_seconds=1.0, clock=clock), clock


def test_a_new_version_is_handed_over_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, watcher, clock = setup(tmp_path)
    assert watcher.poll() is None
    new = store.write(editor.set_topic(store.read(), "shop", "shop.all"), expected=1)
    clock.now += 0.5
    assert watcher.poll() is None  # checked at most once per interval
    clock.now += 1.0
    assert watcher.poll() == new
    with caplog.at_level(logging.INFO, logger="mapping.watch"):
        watcher.accept(new)
    assert "from version 1 to version 2" in caplog.text
    assert "logical db shop topic" in caplog.text
    clock.now += 1.0
    assert watcher.poll() is None and watcher.current() == new


def test_an_invalid_version_keeps_the_old_mapping_and_names_the_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, watcher, clock = setup(tmp_path)
    store.path.write_text("version: 2\nlogical_dbs:\n  shop:\n    physical: ['shop_(']\n")
    clock.now += 1.0
    with caplog.at_level(logging.ERROR, logger="mapping.watch"):
        assert watcher.poll() is None
        clock.now += 1.0
        assert watcher.poll() is None
    assert watcher.current().version == 1
    assert watcher.rejected is not None and "logical_dbs.shop.physical[0]" in str(watcher.rejected)
    assert caplog.text.count("refused the new mapping") == 1  # said once, not at every check
    store.path.write_text("version: 3\nlogical_dbs:\n  shop:\n    physical: ['shop_\\d+']\n    topic: t\n")
    clock.now += 1.0
    fixed = watcher.poll()
    assert fixed is not None and fixed.version == 3 and watcher.rejected is None


def test_a_rewrite_with_equal_content_is_no_switch(tmp_path: Path) -> None:
    store, watcher, clock = setup(tmp_path)
    store.path.write_text(store.path.read_text() + "\n# a comment\n")
    clock.now += 1.0
    assert watcher.poll() is None


def test_switch_gate() -> None:
    gate = SwitchGate()
    assert gate.may_switch(inflight=0, ack_sequence=-1)
    assert not gate.may_switch(inflight=1, ack_sequence=10)
    assert gate.hold_new_batches(pending=True, ack_sequence=-1)  # drain what is in flight
    assert not gate.hold_new_batches(pending=False, ack_sequence=-1)
    gate.rolled_back(get_sequence=40)  # batches up to 40 were taken, some maybe delivered, then rolled back
    assert not gate.may_switch(inflight=0, ack_sequence=20)
    assert not gate.hold_new_batches(pending=True, ack_sequence=20)  # keep re-delivering under the old one
    assert gate.may_switch(inflight=0, ack_sequence=40)
    assert gate.hold_new_batches(pending=True, ack_sequence=40)


def test_switch_gate_after_a_restart_under_the_saved_version() -> None:
    # A previous process may have published up to a store's worth (16 entries) past the saved position.
    gate = SwitchGate()
    gate.resumed(tail_entries=16)
    assert not gate.may_switch(inflight=0, ack_sequence=-1)
    assert not gate.hold_new_batches(pending=True, ack_sequence=10)  # re-deliver the tail first
    assert gate.may_switch(inflight=0, ack_sequence=15)
    gate = SwitchGate()
    gate.resumed(tail_entries=16)
    gate.tail_covered()  # the saved position reached the binlog end seen at start: nothing more to cover
    assert gate.may_switch(inflight=0, ack_sequence=3)
    gate.rolled_back(get_sequence=8)  # a rollback still counts
    assert not gate.may_switch(inflight=0, ack_sequence=3)


def test_check_against_tables_sees_what_static_checks_cannot() -> None:
    m = parse_mapping(BASE)
    m = editor.add_table(m, "shop", "orders", physical=["orders_\\d+"], key=["order_id"])
    assert check_against_tables(m, [("shop_1", "orders_1", ["ORDER_ID", "x"]), ("shop_1", "t", None)]) is None
    # orders_2\d and orders_\d8 share only orders_28: no example of either pattern shows it
    narrow = editor.set_table(m, "shop", "orders", physical=["orders_2\\d"])
    overlap = editor.add_table(narrow, "shop", "hot", physical=["orders_\\d8"])
    error = check_against_tables(overlap, [("shop_1", "orders_28", None)])
    assert error is not None and "claimed by both" in str(error)
    no_col = editor.set_key(m, "shop.orders", ["nope"])
    error = check_against_tables(no_col, [("shop_1", "orders_1", ["order_id"])])
    assert error is not None and error.errors[0].key == "logical_dbs.shop.tables.orders.key[0]"
    shard = editor.set_table(m, "shop", "orders", key_shard="column:region")
    error = check_against_tables(shard, [("shop_1", "orders_1", ["order_id"])])
    assert error is not None and error.errors[0].key == "logical_dbs.shop.tables.orders.key_shard"
    assert check_against_tables(shard, [("shop_1", "orders_1", ["order_id", "Region"])]) is None


def test_a_missing_store_keeps_the_mapping_quietly(tmp_path: Path) -> None:
    store = FileMappingStore(tmp_path / "absent.yaml", tmp_path / "state" / "mapping-history")
    clock = Clock()
    watcher = MappingWatcher(store, parse_mapping(BASE), clock=clock)
    assert watcher.poll() is None and watcher.rejected is None
    store.create(editor.set_topic(parse_mapping(BASE), "shop", "t"))
    clock.now += 1.0
    new = watcher.poll()
    assert new is not None and new.logical_db("shop").topic == "t"  # type: ignore[union-attr]
