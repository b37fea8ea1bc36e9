"""PARTIAL_UPDATE_ROWS_EVENT (binlog_row_value_options=PARTIAL_JSON): JSON diffs applied to the before
image must give exactly the text the full after image would have printed.

Binary JSON documents are built here with our own encoder written from MySQL's ``json_binary.h``
layout (objects keyed in MySQL's order: by length, then bytes); diff vectors and row images from
``json_diff.cc`` / ``rpl_record.cc``. Every expected value is ``jsonb.to_text`` of the document the
server would have stored — so the test compares with a full image, not with a hand-written string.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from relay.binlog import events as ev
from relay.binlog import jsonb, jsondiff
from relay.errors import DecodeError, IncompleteRowImageError
from tests.unit.test_binlog_parse import FILE, event, lenenc, names, parser, tlv
from tests.unit.test_binlog_tablemap_flavours import table_map

# ---- a binary JSON encoder (small format only) --------------------------------------------------------


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode()
    return len(raw), raw


def _scalar(value: Any) -> tuple[int, bytes]:
    if value is None or isinstance(value, bool):
        return jsonb.LITERAL, bytes([{None: 0, True: 1, False: 2}[value]])
    if isinstance(value, int):
        if -(2**15) <= value < 2**15:
            return jsonb.INT16, struct.pack("<h", value)
        if -(2**31) <= value < 2**31:
            return jsonb.INT32, struct.pack("<i", value)
        return jsonb.INT64, struct.pack("<q", value)
    if isinstance(value, float):
        return jsonb.DOUBLE, struct.pack("<d", value)
    raw = value.encode()
    assert len(raw) < 128
    return jsonb.STRING, bytes([len(raw)]) + raw


def _value(value: Any) -> tuple[int, bytes]:
    if isinstance(value, dict):
        return jsonb.SMALL_OBJECT, _container(sorted(value.items(), key=lambda kv: _key_order(kv[0])), True)
    if isinstance(value, list):
        return jsonb.SMALL_ARRAY, _container(list(enumerate(value)), False)
    return _scalar(value)


def _container(items: list[tuple[Any, Any]], is_object: bool) -> bytes:
    n = len(items)
    header = 4 + (4 * n if is_object else 0) + 3 * n
    keys = b"".join(str(k).encode() for k, _ in items) if is_object else b""
    key_entries, value_entries, body = b"", b"", b""
    offset = header
    if is_object:
        for k, _ in items:
            key_entries += struct.pack("<HH", offset, len(str(k).encode()))
            offset += len(str(k).encode())
    for _, v in items:
        kind, raw = _value(v)
        if kind in (jsonb.LITERAL, jsonb.INT16):  # inlined in the value entry
            value_entries += bytes([kind]) + raw.ljust(2, b"\x00")
        else:
            value_entries += bytes([kind]) + struct.pack("<H", offset + len(body))
            body += raw
    return struct.pack("<HH", n, header + len(keys) + len(body)) + key_entries + value_entries + keys + body


def doc(value: Any) -> bytes:
    kind, raw = _value(value)
    return bytes([kind]) + raw


def diff(op: int, path: str, value: Any = None) -> bytes:
    raw = lenenc(len(path.encode())) + path.encode()
    if op != jsondiff.REMOVE:
        body = doc(value)
        raw += lenenc(len(body)) + body
    return bytes([op]) + raw


def vector(*diffs: bytes) -> bytes:
    body = b"".join(diffs)
    return struct.pack("<I", len(body)) + body


R, INS, X = jsondiff.REPLACE, jsondiff.INSERT, jsondiff.REMOVE
BEFORE = {"a": {"b": [1, 2, 3], "abc": "x"}, "c": "y", "key with space": 1.5, "n": None}


def apply(*diffs: bytes, before: Any = BEFORE) -> str:
    raw = vector(*diffs)
    parsed, end = jsondiff.read_diffs(raw, 0, len(raw))
    assert end == len(raw)
    return jsondiff.apply_diffs(doc(before), parsed)


def after(value: Any) -> str:
    """What a full after image holding ``value`` prints."""
    return jsonb.to_text(doc(value))


# ---- the document tree -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [BEFORE, [], {}, [1, [2, [3, {}]], {"x": [None, True, False]}], {"é": "ü", "": 0}, 2.5, "s", 70000],
)
def test_tree_renders_like_to_text(value: Any) -> None:
    raw = doc(value)
    assert jsonb.render(jsonb.to_tree(raw)) == jsonb.to_text(raw)


# ---- diffs -------------------------------------------------------------------------------------------


def test_replace_nested_member_and_array_element() -> None:
    assert apply(diff(R, "$.a.b[1]", 20)) == after({**BEFORE, "a": {"b": [1, 20, 3], "abc": "x"}})
    assert apply(diff(R, "$.c", {"deep": [1]})) == after({**BEFORE, "c": {"deep": [1]}})
    assert apply(diff(R, '$."key with space"', -2.25)) == after({**BEFORE, "key with space": -2.25})
    assert apply(diff(R, "$.a.b[last]", "z")) == after({**BEFORE, "a": {"b": [1, 2, "z"], "abc": "x"}})


def test_insert_members_in_mysql_key_order() -> None:
    # "zz" (2 bytes) goes between "b"/"c" (1) and "abc" (3): MySQL orders keys by length, then bytes.
    want = {**BEFORE, "a": {"b": [1, 2, 3], "abc": "x", "zz": True}}
    assert apply(diff(INS, "$.a.zz", True)) == after(want)
    assert apply(diff(INS, "$.aa", 7)) == after({**BEFORE, "aa": 7})
    got = apply(diff(INS, "$.aa", 7))
    assert got.index('"aa"') < got.index('"key with space"') and got.index('"n"') < got.index('"aa"')


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("$.a.b[0]", [0, 1, 2, 3]),
        ("$.a.b[2]", [1, 2, 0, 3]),
        ("$.a.b[10]", [1, 2, 3, 0]),  # past the end: appended
        ("$.a.b[last]", [1, 2, 0, 3]),  # before the last element, as JSON_ARRAY_INSERT does
        ("$.a.b[last-2]", [0, 1, 2, 3]),
        ("$.a.b[last-9]", [0, 1, 2, 3]),
    ],
)
def test_insert_into_arrays(path: str, expected: list[int]) -> None:
    assert apply(diff(INS, path, 0)) == after({**BEFORE, "a": {"b": expected, "abc": "x"}})


def test_remove_members_and_elements() -> None:
    assert apply(diff(X, "$.c")) == after({k: v for k, v in BEFORE.items() if k != "c"})
    assert apply(diff(X, "$.a.b[last]")) == after({**BEFORE, "a": {"b": [1, 2], "abc": "x"}})
    assert apply(diff(X, "$.a.b[last-2]")) == after({**BEFORE, "a": {"b": [2, 3], "abc": "x"}})


def test_several_diffs_apply_in_order() -> None:
    got = apply(
        diff(X, "$.a.b[0]"), diff(INS, "$.a.b[5]", {"k": [1]}), diff(R, "$.a.b[2].k[0]", "v"), diff(X, "$.n")
    )
    want = {"a": {"b": [2, 3, {"k": ["v"]}], "abc": "x"}, "c": "y", "key with space": 1.5}
    assert got == after(want)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (diff(R, "$.nope", 1), "REPLACE \\$.nope: nothing to replace"),
        (diff(R, "$.a.b[3]", 1), "out of range"),
        (diff(X, "$.a.b[7]"), "out of range"),
        (diff(X, "$.a.nope"), "nothing to remove"),
        (diff(INS, "$.c", 1), "exists already"),
        (diff(INS, "$.c.x", 1), "cannot insert"),  # a member of a string
        (diff(R, "$", 1), "root"),
        (diff(INS, "$.a.b.x", 1), "cannot insert"),  # a member of an array
        (diff(R, "$.a[0]", 1), "does not exist|nothing to replace"),  # an index of an object
    ],
)
def test_diffs_the_server_would_reject_are_refused(change: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        apply(change)


def test_malformed_diff_vectors() -> None:
    with pytest.raises(DecodeError, match="operation 3"):
        jsondiff.read_diffs(vector(b"\x03" + lenenc(1) + b"$"), 0, 10)
    with pytest.raises(DecodeError, match="runs past"):
        raw = vector(diff(R, "$.a", 1))
        jsondiff.read_diffs(raw, 0, len(raw) - 1)
    with pytest.raises(DecodeError, match="cannot read a leg"):
        jsondiff.parse_path("$.a[*]")


# ---- the event ---------------------------------------------------------------------------------------

TABLE_ID = 81
# id INT, doc JSON, other JSON, name VARCHAR(10) utf8mb4
MAP = table_map(
    [(3, b""), (245, b"\x04"), (245, b"\x04"), (15, struct.pack("<H", 40))],
    tlv(4, names("id", "doc", "other", "name")) + tlv(2, lenenc(45)) + tlv(8, lenenc(0)),
    table_id=TABLE_ID,
)


def json_value(value: Any) -> bytes:
    raw = doc(value)
    return struct.pack("<I", len(raw)) + raw


def image(values: list[bytes | None]) -> bytes:
    nulls = sum(1 << i for i, v in enumerate(values) if v is None)
    return bytes([nulls]) + b"".join(v for v in values if v is not None)


def partial_event(*rows: bytes, before_bitmap: int = 0x0F) -> bytes:
    head = TABLE_ID.to_bytes(6, "little") + struct.pack("<HH", 1, 2)
    return head + lenenc(4) + bytes([before_bitmap, 0x0F]) + b"".join(rows)


def decode(body: bytes) -> ev.RowsEvent:
    p = parser()
    p.parse(event(ev.TABLE_MAP_EVENT, MAP), 1)
    e = p.parse(event(ev.PARTIAL_UPDATE_ROWS_EVENT, body, log_pos=777), 1)
    assert isinstance(e, ev.RowsEvent) and e.kind == ev.UPDATE
    return e


def name(text: str) -> bytes:
    return bytes([len(text)]) + text.encode()


def test_partial_update_rows_event() -> None:
    other = {"o": [1, 2]}
    before = image([struct.pack("<i", 1), json_value(BEFORE), json_value(other), name("a")])
    # value_options 1 (PARTIAL_JSON), partial bits: doc (JSON column 0) yes, other (1) no.
    after_image = b"\x01\x01" + image(
        [struct.pack("<i", 1), vector(diff(R, "$.a.b[1]", 20), diff(X, "$.n")), json_value([3]), name("b")]
    )
    # A second row without diffs: value_options 0, no partial bits, a full image.
    before2 = image([struct.pack("<i", 2), json_value({"x": 1}), None, name("c")])
    after2 = b"\x00" + image([struct.pack("<i", 2), json_value({"x": 2}), None, name("c")])
    e = decode(partial_event(before + after_image, before2 + after2))
    first, second = e.rows
    assert first.before == ("1", after(BEFORE), after(other), "a")
    want = {"a": {"b": [1, 20, 3], "abc": "x"}, "c": "y", "key with space": 1.5}
    assert first.after == ("1", after(want), "[3]", "b")
    assert second == ev.RowImage(("2", '{"x": 1}', None, "c"), ("2", '{"x": 2}', None, "c"))


def test_partial_update_needing_a_missing_before_document_is_refused() -> None:
    before = image([struct.pack("<i", 1), None, json_value({}), name("a")])
    after_image = b"\x01\x01" + image(
        [struct.pack("<i", 1), vector(diff(INS, "$.k", 1)), json_value({}), name("a")]
    )
    with pytest.raises(DecodeError, match=rf"{FILE}:\d+: .*db.t column doc \(row 0 of the event\).*NULL"):
        decode(partial_event(before + after_image))
    # binlog_row_image=MINIMAL: the before image lacks the column altogether — refused, once per event,
    # by the incomplete-image check before any diff is looked at.
    minimal = bytes([0]) + struct.pack("<i", 1)
    with pytest.raises(IncompleteRowImageError, match=r"incomplete before image: column\(s\) doc"):
        decode(partial_event(minimal + after_image, before_bitmap=0x01))


def test_partial_update_whose_diff_does_not_fit_names_table_column_and_position() -> None:
    before = image([struct.pack("<i", 1), json_value({"a": 1}), json_value({}), name("a")])
    after_image = b"\x01\x01" + image(
        [struct.pack("<i", 1), vector(diff(R, "$.b", 2)), json_value({}), name("a")]
    )
    with pytest.raises(
        DecodeError, match=r"mysql-bin.000007:\d+: event type 39: db.t column doc .*REPLACE \$.b"
    ):
        decode(partial_event(before + after_image))


def test_unknown_value_options_are_refused() -> None:
    before = image([struct.pack("<i", 1), json_value({}), json_value({}), name("a")])
    after_image = b"\x02" + image([struct.pack("<i", 1), json_value({}), json_value({}), name("a")])
    with pytest.raises(DecodeError, match="value_options 2"):
        decode(partial_event(before + after_image))
