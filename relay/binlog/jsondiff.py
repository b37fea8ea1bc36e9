"""Partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``): JSON diffs applied to the
before image, giving the text the full after image would have printed.

Owned here: reading a logged ``Json_diff_vector`` and applying it to a document tree
(``relay.binlog.jsonb.to_tree``). Pure functions, run on the binlog reader thread by
``relay.binlog.rows`` for each partially logged JSON column of a PARTIAL_UPDATE_ROWS_EVENT.

Layout (mysql-server sql/json_diff.cc ``Json_diff_vector::write_binary`` / ``Json_diff::write_binary``):
a 4-byte little-endian length of what follows, then diffs, each: the operation (1 byte: 0 REPLACE,
1 INSERT, 2 REMOVE), the path's length (length-encoded) and text (``Json_path::to_string``: ``$``,
``.member`` or ``."quoted member"``, ``[n]``, ``[last]``, ``[last-n]``), and except for REMOVE the
value's length (length-encoded) and binary JSON.

Application follows the server's own ``apply_json_diffs`` (json_diff.cc): REPLACE needs an existing
value at the path; INSERT adds an object member that must not exist yet, or inserts into an array
at the index (clamped to the array's end; ``[last]`` inserts before the last element); REMOVE needs
an existing member or element; the root itself can be neither replaced, inserted nor removed. Where
the server would reject a diff (``REJECTED``) we raise ``DecodeError`` instead of guessing. Object
members stay in MySQL's key order — by length, then bytes (json_dom.h ``Json_key_comparator``) —
which is the order a full image would have stored them in.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass

from relay.binlog import jsonb
from relay.binlog.jsonb import JsonObject, Node
from relay.binlog.tablemap import read_lenenc
from relay.errors import DecodeError

REPLACE, INSERT, REMOVE = 0, 1, 2
_OPERATIONS = ("REPLACE", "INSERT", "REMOVE")
_U32 = struct.Struct("<I")
# One path leg: .member, ."quoted member", [n], [last], [last-n].
_LEG = re.compile(
    r'\s*(?:\.\s*(?:"((?:[^"\\]|\\.)*)"|([^.\[\s"]+))|\[\s*(?:(\d+)|last(?:\s*-\s*(\d+))?)\s*\])'
)


@dataclass(frozen=True, slots=True)
class ArrayCell:
    """An array leg: ``index`` from the start, or from the end when ``from_end`` (``last-index``)."""

    index: int
    from_end: bool


Leg = str | ArrayCell  # a member name or an array cell


@dataclass(frozen=True, slots=True)
class Diff:
    operation: int
    path: str
    legs: tuple[Leg, ...]
    value: bytes | None  # binary JSON; None for REMOVE


def parse_path(text: str) -> tuple[Leg, ...]:
    """The legs of a seekable JSON path (no wildcards or ranges, which diffs never hold)."""
    stripped = text.strip()
    if not stripped.startswith("$"):
        raise DecodeError(f"JSON diff path {text!r} does not start with $")
    legs: list[Leg] = []
    pos = 1
    while pos < len(stripped):
        m = _LEG.match(stripped, pos)
        if not m:
            raise DecodeError(f"JSON diff path {text!r}: cannot read a leg at {stripped[pos:]!r}")
        quoted, plain, index, from_end = m.groups()
        if quoted is not None:
            legs.append(json.loads('"' + quoted + '"'))
        elif plain is not None:
            legs.append(plain)
        elif index is not None:
            legs.append(ArrayCell(int(index), False))
        else:
            legs.append(ArrayCell(int(from_end or 0), True))
        pos = m.end()
    return tuple(legs)


def read_diffs(data: bytes, pos: int, end: int) -> tuple[tuple[Diff, ...], int]:
    """The diff vector at ``pos`` → (diffs, position after it)."""
    if pos + 4 > end:
        raise DecodeError("JSON diff vector length runs past the row")
    (length,) = _U32.unpack_from(data, pos)
    pos += 4
    stop = pos + length
    if stop > end:
        raise DecodeError(f"JSON diff vector of {length} bytes runs past the row")
    diffs: list[Diff] = []
    while pos < stop:
        operation = data[pos]
        if operation > REMOVE:
            raise DecodeError(f"unknown JSON diff operation {operation}")
        size, pos = read_lenenc(data, pos + 1)
        path = data[pos : pos + size].decode("utf-8")
        pos += size
        value = None
        if operation != REMOVE:
            size, pos = read_lenenc(data, pos)
            value = data[pos : pos + size]
            pos += size
        if pos > stop:
            raise DecodeError("JSON diff runs past its vector")
        diffs.append(Diff(operation, path, parse_path(path), value))
    return tuple(diffs), stop


def apply_diffs(before: bytes, diffs: tuple[Diff, ...]) -> str:
    """The text of the document ``before`` (binary JSON) after ``diffs``; DecodeError if the server
    would have rejected one of them."""
    doc = jsonb.to_tree(before)
    for diff in diffs:
        try:
            doc = _apply(doc, diff)
        except DecodeError as exc:  # the server's enum_json_diff_status::REJECTED
            raise DecodeError(f"{_OPERATIONS[diff.operation]} {diff.path}: {exc}") from None
    return jsonb.render(doc)


def _apply(doc: Node, diff: Diff) -> Node:
    if not diff.legs:
        raise DecodeError("a diff cannot change the document root")
    parent = _seek(doc, diff.legs[:-1])
    last = diff.legs[-1]
    value = jsonb.to_tree(diff.value) if diff.value is not None else None
    if diff.operation == REPLACE:
        _replace(parent, last, value)
    elif diff.operation == INSERT:
        _insert(parent, last, value)
    else:
        _remove(parent, last)
    return doc


def _cell(array: list[Node], cell: ArrayCell) -> tuple[int, bool]:
    """(position, within bounds) of an array leg (json_path.h ``Json_array_index``)."""
    size = len(array)
    if cell.from_end:
        return (size - 1 - cell.index if cell.index < size else 0), cell.index < size
    return min(cell.index, size), cell.index < size


def _seek(node: Node, legs: tuple[Leg, ...]) -> Node:
    for leg in legs:
        if isinstance(leg, ArrayCell) and isinstance(node, list):
            at, inside = _cell(node, leg)
            if not inside:
                raise DecodeError("array index out of range")
            node = node[at]
        elif isinstance(leg, str) and isinstance(node, JsonObject):
            found = [value for key, value in node.members if key == leg]
            if not found:
                raise DecodeError(f"no member {leg!r}")
            node = found[0]
        else:
            raise DecodeError("the path does not exist in the document")
    return node


def _member_at(obj: JsonObject, key: str) -> int:
    for i, (name, _) in enumerate(obj.members):
        if name == key:
            return i
    return -1


def _key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8")
    return len(raw), raw


def _replace(parent: Node, leg: Leg, value: Node | None) -> None:
    assert value is not None
    if isinstance(leg, ArrayCell) and isinstance(parent, list):
        at, inside = _cell(parent, leg)
        if not inside:
            raise DecodeError("array index out of range")
        parent[at] = value
    elif isinstance(leg, str) and isinstance(parent, JsonObject) and (at := _member_at(parent, leg)) >= 0:
        parent.members[at] = (leg, value)
    else:
        raise DecodeError("nothing to replace at the path")


def _insert(parent: Node, leg: Leg, value: Node | None) -> None:
    assert value is not None
    if isinstance(leg, ArrayCell) and isinstance(parent, list):
        parent.insert(_cell(parent, leg)[0], value)
    elif isinstance(leg, str) and isinstance(parent, JsonObject):
        if _member_at(parent, leg) >= 0:
            raise DecodeError(f"member {leg!r} exists already")
        order = _key_order(leg)
        members = parent.members
        at = next((i for i, (k, _) in enumerate(members) if _key_order(k) > order), len(members))
        members.insert(at, (leg, value))
    else:
        raise DecodeError("cannot insert there")


def _remove(parent: Node, leg: Leg) -> None:
    if isinstance(leg, ArrayCell) and isinstance(parent, list):
        at, inside = _cell(parent, leg)
        if not inside:
            raise DecodeError("array index out of range")
        del parent[at]
    elif isinstance(leg, str) and isinstance(parent, JsonObject) and (at := _member_at(parent, leg)) >= 0:
        del parent.members[at]
    else:
        raise DecodeError("nothing to remove at the path")
