"""The text a store keeps for a new mapping version: the file a person wrote, with only the edit in it.

Owns round-trip editing of a mapping's YAML (ruamel.yaml): comments, key order, quoting, flow or block
style and indentation stay as they were; only the values an edit changed are written, and ``version``.
``stored_text(current_text, current, new)`` is what the stores (``mapping.store``, ``mapping.store_zk``)
write. An edit made by ``mapping.editor`` (a ``Mapping`` with no text) is applied to the current text
as the difference between the two canonical forms; a version that brings its own text (``rollback``
to a version, ``import`` of a file: ``Mapping.text``) is written as that text, with the new version
number. Whatever the path, the result is parsed again and must give exactly ``new``: if it does not
(YAML anchors, odd layouts), the canonical dump is written instead and the loss of the comments is
logged — the content is never wrong. Pure functions, on the caller's thread (the CLI's).
"""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Mapping as Tree
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from mapping.load import dump_mapping, parse_mapping
from mapping.model import Mapping
from relay.errors import MappingError

__all__ = ["stored_text", "strip_header"]

log = logging.getLogger(__name__)
_HEADER = re.compile(r"#\s*relay-mapping\s+\{.*\}\s*\n?")
_COMMENT_SLOT = 2  # ruamel keeps a mapping value's end-of-line comment (+ the comment lines after it) here


def strip_header(text: str) -> str:
    """``text`` without the store's ``# relay-mapping {...}`` first line (a history record's)."""
    match = _HEADER.match(text)
    return text[match.end() :] if match else text


def stored_text(current_text: str | None, current: Mapping | None, new: Mapping, source: str) -> str:
    """The text to store for ``new`` (without the history header): ``new.text`` or the current text with
    the edit applied, the version set; the canonical dump when that cannot give ``new`` exactly."""
    if new.text is not None:
        base, old = strip_header(new.text), None
    elif current_text is not None and current is not None:
        base, old = strip_header(current_text), current.to_dict()
    else:
        return dump_mapping(new)
    try:
        text = _edited(base, old, new)
    except (YAMLError, MappingError, KeyError, TypeError, ValueError) as exc:
        log.warning("%s: comments and layout not kept (%s); writing the canonical form", source, exc)
        return dump_mapping(new)
    try:
        same = parse_mapping(text, source=source) == new
    except MappingError:
        same = False
    if not same:
        log.warning(
            "%s: comments and layout could not be kept for this edit; writing the canonical form", source
        )
        return dump_mapping(new)
    return text


# --- round trip ------------------------------------------------------------------------------


def _yaml(text: str) -> tuple[YAML, Any]:
    _, sequence, dash = load_yaml_guess_indent(text)  # a block list's item indent and its dash's offset
    yaml = YAML()  # round trip
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long line the person wrote
    mapping = _mapping_indent(text)
    yaml.indent(mapping=mapping, sequence=sequence or mapping, offset=dash or 0)
    yaml.representer.add_representer(type(None), _null)
    return yaml, yaml.load(text)


_KEY_LINE = re.compile(r"^( *)[^\s#-][^:#]*:(\s|$)")


def _mapping_indent(text: str) -> int:
    """How far the file indents a nested mapping's keys (the first nesting found; default 2)."""
    previous: int | None = None
    for line in text.splitlines():
        match = _KEY_LINE.match(line)
        if match is None:
            continue
        column = len(match.group(1))
        if previous is not None and column > previous:
            return column - previous
        previous = column
    return 2


def _null(representer: Any, data: None) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")  # not an empty value


def _edited(base: str, old: dict[str, Any] | None, new: Mapping) -> str:
    yaml, doc = _yaml(base)
    if not isinstance(doc, CommentedMap):
        raise ValueError("the mapping is not a YAML mapping of keys")
    if old is not None:
        target = new.to_dict()
        for section in ("defaults", "topics", "unmapped"):
            if old.get(section) != target.get(section):
                _patch(
                    _child_map(doc, section),
                    old.get(section) or {},
                    target.get(section) or {},
                    (doc, section),
                )
        _patch_dbs(doc, old.get("logical_dbs") or {}, target.get("logical_dbs") or {})
    if "version" in doc:
        doc["version"] = new.version
    else:
        doc.insert(0, "version", new.version)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


Owner = tuple[CommentedMap, Any] | None  # the mapping and key holding a node (None: the document)


def _patch(node: CommentedMap, old: Tree[str, Any], new: Tree[str, Any], owner: Owner) -> None:
    """Make ``node`` say what ``new`` says where ``new`` differs from ``old`` (both canonical)."""
    for key, value in new.items():
        if key in old and old[key] == value:
            continue
        child = node.get(key)
        if isinstance(value, dict) and isinstance(old.get(key), dict) and isinstance(child, CommentedMap):
            _patch(child, old[key], value, (node, key))
        elif key in node:
            node[key] = _value(value, child)
        else:
            _add(node, key, _value(value, None))
    for key in old:
        if key not in new and key in node:
            _pop(node, key, owner)


def _patch_dbs(doc: CommentedMap, old: Tree[str, Any], new: Tree[str, Any]) -> None:
    """Logical dbs and their tables, wherever the file defines a table (nested or the flat section)."""
    if old == new:
        return
    dbs = _child_map(doc, "logical_dbs")
    for name, db in new.items():
        if name not in old:
            _add(dbs, name, _value(db, None))
            continue
        if db == old[name]:
            continue
        node = _child_map(dbs, name)
        fields = {k: v for k, v in db.items() if k != "tables"}
        _patch(node, {k: v for k, v in old[name].items() if k != "tables"}, fields, (dbs, name))
        _patch_tables(doc, node, (dbs, name), old[name].get("tables") or {}, db.get("tables") or {})
    for name in old:
        if name not in new:
            if name in dbs:
                _pop(dbs, name, (doc, "logical_dbs"))
            flat = doc.get("tables")
            if isinstance(flat, CommentedMap):
                for key in [k for k in flat if str(k).partition(".")[0] == name]:
                    _pop(flat, key, (doc, "tables"))


def _patch_tables(
    doc: CommentedMap, db_node: CommentedMap, db_owner: Owner, old: Tree[str, Any], new: Tree[str, Any]
) -> None:
    assert db_owner is not None
    db = str(db_owner[1])
    for name, table in new.items():
        if name in old and old[name] == table:
            continue
        where = _table_home(doc, db_node, db, name)
        if where is None:
            _add(_child_map(db_node, "tables"), name, _value(table, None))
        else:
            holder, key = where
            _patch(_child_map(holder, key), old.get(name) or {}, table, where)
    for name in old:
        if name not in new:
            where = _table_home(doc, db_node, db, name)
            if where is not None:
                holder, key = where
                _pop(holder, key, (db_node, "tables") if holder is db_node.get("tables") else (doc, "tables"))
    nested = db_node.get("tables")
    if isinstance(nested, CommentedMap) and not nested and "tables" not in new:
        _pop(db_node, "tables", db_owner)


def _table_home(
    doc: CommentedMap, db_node: CommentedMap, db: str, table: str
) -> tuple[CommentedMap, str] | None:
    nested = db_node.get("tables")
    if isinstance(nested, CommentedMap) and table in nested:
        return nested, table
    flat = doc.get("tables")
    if isinstance(flat, CommentedMap) and f"{db}.{table}" in flat:
        return flat, f"{db}.{table}"
    return None


def _child_map(node: CommentedMap, key: str) -> CommentedMap:
    """``node[key]`` as a mapping to edit in place (created, or replacing a null, when needed)."""
    child = node.get(key)
    if not isinstance(child, CommentedMap):
        child = CommentedMap()
        if key in node:
            node[key] = child
        else:
            _add(node, key, child)
    elif child.fa.flow_style() and not child:
        child.fa.set_block_style()  # `tables: {}` gets its first entry as a block
    return child


def _value(value: Any, like: Any) -> Any:
    """A canonical value as ruamel nodes: lists of text in flow style (``[a, b]``, as the documented
    example writes them) unless the value it replaces was a block list."""
    if isinstance(value, dict):
        out = CommentedMap()
        for key, item in value.items():
            out[key] = _value(item, None)
        return out
    if isinstance(value, list):
        seq = CommentedSeq(_value(item, None) for item in value)
        block = isinstance(like, CommentedSeq) and not like.fa.flow_style()
        if not block and all(isinstance(item, str | int | float | bool) for item in value):
            seq.fa.set_flow_style()
        return seq
    return value


# --- comments around added and removed keys ----------------------------------------------------
#
# ruamel hangs the comment lines that follow a subtree on the subtree's last value (its end-of-line
# comment slot), although they introduce what comes after: the next key, the next section. A key added
# at the end of a mapping takes them over, and a removed key hands them on, so they stay where they are.


def _add(node: CommentedMap, key: Any, value: Any) -> None:
    """Add ``key`` at the end of ``node``, before the comment lines that followed the last key."""
    if not node:
        node[key] = value
        return
    last = list(node.keys())[-1]
    tail = _take_tail(node, last)
    node[key] = value
    if tail:
        _append(*_last_holder(node, key), tail)


def _pop(node: CommentedMap, key: Any, owner: Owner) -> None:
    """Remove ``key`` (with its end-of-line comment and the comment lines continuing it) and keep the
    comment lines that introduce what follows."""
    keys = list(node.keys())
    at = keys.index(key)
    column = _column(node, key)
    tail = _introduction(_take_tail(node, key), column)
    del node[key]
    if not tail:
        return
    if at > 0:
        _append(*_last_holder(node, keys[at - 1]), tail)
    elif not node and owner is not None:  # now `key: {}`: the lines follow it
        node.fa.set_flow_style()
        token = CommentToken("\n" + tail, CommentMark(0), None)
        node.ca.comment = [token, None]
        _slots(*owner)[_COMMENT_SLOT] = token
    elif owner is not None:
        _append(owner[0], owner[1], tail)  # after the line of the key that holds ``node``
    else:
        _append_start(node, tail)


def _column(node: CommentedMap, key: Any) -> int:
    try:
        return int(node.lc.key(key)[1])
    except (KeyError, TypeError, IndexError, AttributeError):
        return 0


def _introduction(tail: str, column: int) -> str:
    """Drop the leading comment lines indented past ``column``: they continue the removed key's
    end-of-line comment (a comment column); the rest (after a blank line, or less indented) stays."""
    lines = tail.split("\n")
    while lines and lines[0].strip().startswith("#") and len(lines[0]) - len(lines[0].lstrip()) > column:
        lines.pop(0)
    return "\n".join(lines)


def _last_holder(node: CommentedMap, key: Any) -> tuple[CommentedMap, Any]:
    """The mapping and key whose value's comment slot ends the subtree of ``node[key]``."""
    value = node[key]
    while isinstance(value, CommentedMap) and value and not value.fa.flow_style():
        node, key = value, list(value.keys())[-1]
        value = node[key]
    return node, key


def _take_tail(node: CommentedMap, key: Any) -> str:
    """Detach and return the lines after the first line of the comment ending ``node[key]``'s subtree."""
    holder, last = _last_holder(node, key)
    slots = holder.ca.items.get(last)
    if not slots or len(slots) <= _COMMENT_SLOT or slots[_COMMENT_SLOT] is None:
        return ""
    token = slots[_COMMENT_SLOT]
    first, _, rest = str(token.value).partition("\n")
    token.value = first + "\n"
    return rest


def _slots(holder: CommentedMap, key: Any) -> list[Any]:
    slots: list[Any] = holder.ca.items.setdefault(key, [None, None, None, None])
    while len(slots) <= _COMMENT_SLOT:
        slots.append(None)
    return slots


def _append(holder: CommentedMap, key: Any, tail: str) -> None:
    slots = _slots(holder, key)
    token = slots[_COMMENT_SLOT]
    if token is None:
        slots[_COMMENT_SLOT] = CommentToken("\n" + tail, CommentMark(0), None)
    else:
        token.value = str(token.value) + tail


def _append_start(doc: CommentedMap, tail: str) -> None:
    """Comment lines before the document's first key."""
    lines = [CommentToken(line + "\n", CommentMark(0), None) for line in tail.rstrip("\n").split("\n")]
    if doc.ca.comment is None:
        doc.ca.comment = [None, lines]
    else:
        doc.ca.comment[1] = [*(doc.ca.comment[1] or []), *lines]
