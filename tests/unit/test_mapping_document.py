"""A mapping edit keeps the file a person wrote: comments, key order, quoting and layout; only the edited
values and the version change (``mapping.document``). Before this, one edit turned the documented
example's 92 lines into 33 lines of canonical YAML without a comment."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from mapping import editor
from mapping.document import stored_text, strip_header
from mapping.load import dump_mapping, parse_mapping
from mapping.model import Mapping
from mapping.store import FileMappingStore

EXAMPLE = Path(__file__).resolve().parents[2] / "conf" / "mapping.yaml"


def _comments(text: str) -> list[str]:
    return [line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line]


def _changed(before: str, after: str) -> tuple[list[str], list[str]]:
    """Lines only in ``before``, lines only in ``after`` (as multisets, order aside)."""
    old, new = before.splitlines(), after.splitlines()
    gone = [line for line in old if old.count(line) > new.count(line)]
    came = [line for line in new if new.count(line) > old.count(line)]
    return sorted(set(gone)), sorted(set(came))


def _stored(text: str, edit: object) -> str:
    current = parse_mapping(text)
    new = edit(current).with_version(current.version + 1)  # type: ignore[operator]
    out = stored_text(text, current, new, "test")
    assert parse_mapping(out) == new
    assert out != dump_mapping(new), "the canonical form was written: the layout was not kept"
    return out


def test_an_edit_of_the_documented_example_changes_two_lines() -> None:
    text = EXAMPLE.read_text()
    out = _stored(text, lambda m: editor.set_topic(m, "shop.orders", "shop.orders.v2"))
    assert len(out.splitlines()) == len(text.splitlines()) == 126
    gone, came = _changed(text, out)
    assert [line.split("#")[0].strip() for line in gone] == ["topic: shop.orders", "version: 1"]
    assert [line.split("#")[0].strip() for line in came] == ["topic: shop.orders.v2", "version: 2"]
    assert _comments(out) == _comments(text)  # every comment, in its place


@pytest.mark.parametrize(
    ("label", "edit", "dropped"),
    [
        ("remove a table", lambda m: editor.remove_table(m, "shop", "customers"), 3),
        ("remove a tag", lambda m: editor.remove_tag(m, "shop.orders"), 1),
        ("remove the key", lambda m: editor.remove_key(m, "shop.orders"), 1),
        (
            "remove key_shard with its continued comment",
            lambda m: editor.set_table(m, "shop", "orders", key_shard=None),
            2,
        ),
    ],
)
def test_a_removal_drops_its_lines_and_keeps_what_introduces_the_next_section(
    label: str, edit: object, dropped: int
) -> None:
    text = EXAMPLE.read_text()
    out = _stored(text, edit)
    assert len(out.splitlines()) == len(text.splitlines()) - dropped, label
    # the comment block before the flat `tables:` section and the header are still there
    assert "# A flat alternative to logical_dbs.<db>.tables, handy for adding one table: keys are" in out
    assert out.index("# A flat alternative") < out.index("\ntables:")
    assert out.startswith("# canal-relay mapping: physical MySQL databases/tables")


def test_added_tables_and_dbs_go_before_the_comments_of_the_next_section() -> None:
    text = EXAMPLE.read_text()
    out = _stored(
        text, lambda m: editor.add_table(m, "shop", "items", physical=["items_\\d+"], key=["item_id"])
    )
    assert "      items:\n        physical: [items_\\d+]\n        key: [item_id]\n" in out
    assert out.index("items:") < out.index("# A flat alternative")
    out = _stored(text, lambda m: editor.add_db(m, "crm", physical=["crm_\\d+"], topic="crm"))
    assert "  crm:\n    physical: [crm_\\d+]\n    topic: crm\n" in out
    assert out.index("crm:") < out.index("# A flat alternative")
    assert _comments(text) == _comments(out)


def test_the_last_db_removed_leaves_an_empty_section_and_every_other_comment() -> None:
    text = EXAMPLE.read_text()
    current = parse_mapping(text)
    new = editor.remove_db(current, "shop").with_version(2)
    out = stored_text(text, current, new, "test")
    assert parse_mapping(out) == new
    assert "logical_dbs: {}\n\n# A flat alternative" in out


FLAT = """\
# hand-written, flat tables
logical_dbs:
  shop:
    physical:
      - 'shop_\\d+'   # block list, quoted
tables:
  shop.orders:        # flat form
    physical: ["orders_\\\\d+"]
    tag: o
"""


def test_a_table_of_the_flat_section_is_edited_where_it_is_written() -> None:
    out = _stored(FLAT, lambda m: editor.set_tag(m, "shop.orders", "orders"))
    # the version line goes first (after the leading comment); the rest as written, the tag edited
    assert out == FLAT.replace("tag: o", "tag: orders").replace("logical_dbs:", "version: 2\nlogical_dbs:")
    out = _stored(FLAT, lambda m: editor.remove_table(m, "shop", "orders"))
    assert "shop.orders" not in out and "'shop_\\d+'" in out
    out = _stored(FLAT, lambda m: editor.set_db(m, "shop", physical=["shop_\\d+", "legacy"]))
    assert "    physical:\n      - shop_\\d+\n      - legacy\n" in out  # a block list stays a block list


def test_a_version_line_is_added_when_the_file_has_none_and_a_store_header_is_dropped() -> None:
    text = "logical_dbs:\n  shop: {physical: [shop]}   # inline\n"
    out = _stored(text, lambda m: editor.set_db(m, "shop", topic="s"))
    assert out.startswith("version: 2\n") and "# inline" in out
    header = '# relay-mapping {"version": 1, "saved": "2026-01-01T00:00:00Z", "by": "a@b", "note": ""}\n'
    out = _stored(header + "version: 1\n" + text, lambda m: editor.set_db(m, "shop", topic="s"))
    assert "relay-mapping" not in out and strip_header(header + "x: 1\n") == "x: 1\n"


def test_a_rollback_or_import_writes_that_versions_own_text_under_the_new_number() -> None:
    old_text = "# version one, as written\nversion: 1\nlogical_dbs:\n  shop: {physical: [shop]}  # one\n"
    old = parse_mapping(old_text)
    current = editor.set_db(old, "shop", topic="s").with_version(2)
    out = stored_text(dump_mapping(current), current, old.with_version(3), "test")
    assert out == old_text.replace("version: 1", "version: 3")


def test_what_cannot_be_kept_is_written_canonically_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    # crm takes its topic from shop through a YAML merge key: removing it cannot be written in place
    text = (
        "logical_dbs:\n  shop: &shop {physical: [shop], topic: common}\n"
        "  crm:\n    <<: *shop\n    physical: [crm]\n"
    )
    current = parse_mapping(text)
    new = editor.remove_topic(current, "crm").with_version(2)
    caplog.set_level(logging.WARNING, logger="mapping.document")
    out = stored_text(text, current, new, "merged.yaml")
    assert out == dump_mapping(new) and parse_mapping(out) == new  # the content is right
    assert "merged.yaml: comments and layout could not be kept" in caplog.text


def test_the_file_store_keeps_the_comments_in_the_file_and_in_every_history_record(tmp_path: Path) -> None:
    path = tmp_path / "mapping.yaml"
    path.write_text(EXAMPLE.read_text())
    store = FileMappingStore(path, tmp_path / "state" / "mapping-history")
    one: Mapping = store.read()
    two = store.write(editor.set_topic(one, "shop.orders", "o2"), expected=1, note="o2")
    assert len(path.read_text().splitlines()) == 126 and "topic: o2" in path.read_text()
    three = store.write(editor.remove_tag(two, "shop.orders"), expected=2)
    assert [v.version for v in store.history()] == [1, 2, 3]
    for number in (1, 2, 3):
        record = (tmp_path / "state" / "mapping-history" / f"{number:08d}.yaml").read_text()
        assert "# A flat alternative to logical_dbs" in record
    assert store.version(2) == two and store.version(3) == three
    back = store.write(store.version(1), expected=3, note="rollback")  # version 1's own text
    assert path.read_text() == EXAMPLE.read_text().replace("version: 1", "version: 4")
    assert back.version == 4
