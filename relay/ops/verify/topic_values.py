"""The values of a topic's records for ``relay verify``: a record's ``data`` row, and its row digest.

``parse_value`` reads a canal-json or canal-protobuf record (type, data, old); ``parse_datas`` the rows of
many canal-json records in one ``json.loads``; ``data_digest`` / ``digests_of`` give a row's digest in the
shard's column order (``relay.ops.verify.digest``), through the C helper ``relay/ops/verify/_rowdigest.c``
where it is built (``data_digests``; ``row_records`` reads a consumed batch for ``relay.ops.verify.topic``).
Pure functions, any thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from relay import _native
from relay.canal.proto.convert import decode_messages_packet
from relay.errors import ProtoDecodeError, VerifyError
from relay.ops.verify.digest import ABSENT, canal_row_hash, column_text, digest_of, digest_text
from relay.ops.verify.shards import Shard

_TEXT_TYPES = frozenset({str, type(None)})
_DATA, _OLD = b'"data":[', b'],"old":'

# The C helper (relay/ops/verify/_rowdigest.c, built with the compiled modules): canal-json records' row
# digests straight from their bytes, the same ints as ``data_digest(shard, parse_datas(...))``, None for a
# record it leaves to that Python path; not used where it is not built or the relay runs pure Python.
DataDigests = Callable[
    [list[bytes], tuple[bytes, ...], bytes, tuple[Callable[[str], str] | None, ...]], list[int | None]
]
# Beside it, ``row_records``: a consumed batch read in C (``TopicIndex._batch``).
RowRecords = Callable[
    [list[Any], bytes, bytes, bytes, dict[bytes, Any], set[bytes], dict[tuple[str, int], int]],
    tuple[list[Any], int],
]
data_digests: DataDigests | None = None
row_records: RowRecords | None = None
if _native.mode == "compiled":
    try:
        from relay.ops.verify._rowdigest import data_digests as _data_digests
        from relay.ops.verify._rowdigest import row_records as _row_records

        data_digests, row_records = _data_digests, _row_records
    except ImportError:  # an interrupted build: the Python path
        pass


def parse_value(value: bytes) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """(type, data, old) of a row record, canal-json or canal-protobuf: ``data`` the row (the before image
    of a DELETE), ``old`` an UPDATE's previous values of its changed columns (protobuf: all of them)."""
    if value[:1] == b"{":
        try:
            m = json.loads(value)
        except ValueError as exc:  # not JSON, or not UTF-8: no relay wrote it
            raise VerifyError(f"a record of the topic is not canal-json: {exc}") from exc
        if not isinstance(m, dict) or not isinstance(m.get("data") or [{}], list):
            raise VerifyError("a record of the topic is not canal-json: no data array")
        data = (m.get("data") or [{}])[0]
        old = (m.get("old") or [None])[0]
        return str(m.get("type")), data, old
    try:
        _, entries = decode_messages_packet(value)
    except ProtoDecodeError as exc:
        raise VerifyError(f"a record of the topic is neither canal-json nor canal-protobuf: {exc}") from exc
    rc = entries[0].store_value
    names = [c.name for c in rc.columns]  # type: ignore[union-attr]
    row = rc.rows[0]  # type: ignore[union-attr]
    image = row.after if row.after is not None else row.before
    before = dict(zip(names, row.before, strict=True)) if row.before is not None and row.after else None
    return rc.event_type.name, dict(zip(names, image or (), strict=True)), before  # type: ignore[union-attr]


def parse_all(texts: list[bytes]) -> list[Any]:
    """Each JSON text parsed, in one ``json.loads`` (each alone where one of them is not JSON)."""
    try:
        parsed = json.loads(b"[" + b",".join(texts) + b"]")
    except ValueError:
        parsed = None
    if isinstance(parsed, list) and len(parsed) == len(texts):
        return parsed
    out: list[Any] = []
    for text in texts:
        try:
            out.append(json.loads(text))
        except ValueError:
            out.append(None)
    return out


def parse_datas(values: list[bytes]) -> list[dict[str, Any]]:
    """The rows (``data``) of records. canal-json: only the ``data`` objects are parsed, together — the
    codec writes ``"data":[{…}],"old":`` and those bytes, with their unescaped quotes, cannot occur
    inside a JSON string — else each whole value (``parse_value``)."""
    slices: list[bytes | None] = []
    for value in values:
        start = value.find(_DATA) if value[:1] == b"{" else -1
        end = value.find(_OLD, start) if start > 0 else -1
        slices.append(value[start + len(_DATA) : end] if end > start > 0 else None)
    found = parse_all([s for s in slices if s is not None])
    it = iter(found)
    out = []
    for value, piece in zip(values, slices, strict=True):
        data = next(it) if piece is not None else None
        out.append(data if isinstance(data, dict) else parse_value(value)[1])
    return out


def row_values(shard: Shard, data: dict[str, Any]) -> tuple[Any, ...]:
    """A record's row in the shard's column order (``ABSENT`` where the record has no such column)."""
    names = shard.names
    if len(data) == len(names) and shard.names_set.issuperset(data):
        return tuple([data[n] for n in names])
    return tuple([data.get(n, ABSENT) for n in names])


def data_digest(shard: Shard, data: dict[str, Any]) -> int:
    """The digest of a record's row (``canal_row_hash`` in the shard's column order)."""
    names = shard.names
    if len(data) != len(names) or not shard.names_set.issuperset(data):
        digest = canal_row_hash(shard.kinds, row_values(shard, data))
        return digest ^ 1 if not shard.names_set.issuperset(data) else digest  # a column only the target has
    texts = list(shard.values_of(data))
    if not _TEXT_TYPES.issuperset(map(type, texts)):  # a JSON number or another type where text was expected
        kinds = shard.kinds
        return digest_of(digest_text([column_text(kinds[i], v) for i, v in enumerate(texts)]))
    for i, convert in shard.str_converters:  # the columns whose digest text is not their canal text
        text = texts[i]
        if text is not None:
            texts[i] = convert(text)
    return digest_of(digest_text(texts))


def digests_of(shard: Shard, values: list[bytes]) -> list[int]:
    """The row digests of records of one shard (``data_digest`` of each one's ``data``): by the C helper
    where it is built, the Python path for what it leaves."""
    found: list[int | None] = (
        data_digests(values, *shard.native_spec) if data_digests is not None else [None] * len(values)
    )
    left = [i for i, d in enumerate(found) if d is None]
    if left:
        for i, data in zip(left, parse_datas([values[i] for i in left]), strict=True):
            found[i] = data_digest(shard, data)
    return found  # type: ignore[return-value]
