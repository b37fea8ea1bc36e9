"""Row images of WRITE/UPDATE/DELETE_ROWS events → canal's text values.

Owned here: ``RowDecoder.decode_rows`` (called by the event parser on the binlog reader thread for every
rows event): the row loop and the per-table plans built from ``relay.binlog.values``' decoders. It hands
``RowImage`` tuples — one text value or None per column — to the entry builder.

Layout (MySQL ``Rows_log_event``): the column count (packed integer), the bitmap of columns present
in the before image (DELETE, UPDATE) or after image (INSERT), for UPDATE a second bitmap for the
after image; then rows until the end: a null bitmap over the present columns only, then each
present, non-NULL value in its binary form. An image that lacks a column (binlog_row_image
MINIMAL/NOBLOB in the writing session) raises ``IncompleteRowImageError``: the relay needs FULL images,
and a missing column must never be published as if it were NULL.

Speed: this is the per-row hot path. For each table map a plan is built once — one decoder closure
per column, chosen by type when the plan is built — and cached (by object identity, then by the
column tuple), so decoding a row is a loop over prebuilt functions without per-value type dispatch.

The value decoders and canal's text form of each type are in ``relay.binlog.values``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, tzinfo

from mypy_extensions import mypyc_attr

from relay import _native
from relay.binlog import jsonb, jsondiff
from relay.binlog import types as t
from relay.binlog.events import DELETE, INSERT, UPDATE, ColumnMeta, RowImage, TableMapEvent
from relay.binlog.values import (
    INLINE_DECODERS,
    Instant,
    NativeStep,
    TimestampZone,
    ValueDecoder,
    native_step,
    value_decoder,
    vector_text,
)
from relay.errors import DecodeError, IncompleteRowImageError

__all__ = ["Instant", "RowDecoder", "TimestampZone", "value_decoder", "vector_text"]


# ---- plans and the row loop ---------------------------------------------------------------------

# (column index, decoder) for each column present in an image, in column order.
Steps = tuple[tuple[int, ValueDecoder], ...]


# Reads one row image after its null bitmap: (event bytes, offset) → (values, offset after them).
Values = tuple[str | None, ...]
ImageReader = Callable[[bytes, int], tuple[Values, int]]
_MAX_READERS = 64  # compiled readers per (plan, columns present): one per distinct null bitmap seen

# The C row reader (relay/binlog/_rowimage.c, built with the compiled modules): ``Reader(steps, ncols)``
# reads a whole image in C, calling the Python decoders only for the types it leaves to them. None where
# it is not built or the relay runs pure Python: the readers generated below then read every image.
CSteps = tuple[tuple[int, int, int, int, object, ValueDecoder], ...]  # (index, op, a, b, obj, decoder)
C_READER: Callable[[CSteps, int], ImageReader] | None = None
if _native.mode == "compiled":
    try:
        from relay.binlog._rowimage import Reader as _CReader

        C_READER = _CReader
    except ImportError:  # an interrupted build: the Python readers
        pass


class _Plan:
    """The prebuilt decoders of one table map, the step lists per columns-present bitmap, and the
    image readers per columns-present bitmap (each with its compiled readers per null bitmap)."""

    __slots__ = ("by_bitmap", "decoders", "full", "native", "ncols", "readers")

    def __init__(self, columns: tuple[ColumnMeta, ...], zone: TimestampZone) -> None:
        self.decoders = tuple(value_decoder(c, zone) for c in columns)
        # What the C reader does per column (``values.native_step``); () without it.
        self.native: tuple[NativeStep, ...] = (
            tuple(native_step(c) for c in columns) if C_READER is not None else ()
        )
        self.ncols = len(columns)
        self.full = (1 << self.ncols) - 1
        self.by_bitmap: dict[int, Steps] = {self.full: tuple(enumerate(self.decoders))}
        self.readers: dict[int, ImageReader] = {}

    def steps(self, present: int) -> Steps:
        steps = self.by_bitmap.get(present)
        if steps is None:
            steps = tuple((i, d) for i, d in enumerate(self.decoders) if present >> i & 1)
            self.by_bitmap[present] = steps
        return steps

    def image_reader(self, present: int) -> ImageReader:
        """The reader of row images with these columns present (made once: most events hold one row)."""
        reader = self.readers.get(present)
        if reader is None:
            reader = self.readers[present] = _image_reader(self, present)
        return reader


def _compile_reader(steps: Steps, nulls: int, ncols: int) -> ImageReader:
    """A row reader specialised for one set of present, non-NULL columns.

    Why: a row is the per-row hot path, and a generic loop pays per value for the loop, a tuple
    unpack and a call. The generated function reads consecutive fixed-width columns (integers,
    FLOAT, DOUBLE) with one ``struct`` call and calls the other decoders directly; its output is
    exactly the generic loop's (``_image``), which remains the reference and the fallback.
    """
    namespace: dict[str, object] = {}
    lines = ["def read(data, pos):"]
    out = ["None"] * ncols
    run: list[tuple[int, str, int, Callable[[float], str]]] = []

    def flush() -> None:
        if not run:
            return
        name = f"_s{run[0][0]}"
        namespace[name] = struct.Struct("<" + "".join(code for _, code, _, _ in run)).unpack_from
        lines.append(f"    {''.join(f'a{i}, ' for i, _, _, _ in run)}= {name}(data, pos)")
        lines.append(f"    pos += {sum(size for _, _, size, _ in run)}")
        for index, _, _, render in run:
            if render is str:
                out[index] = f"str(a{index})"
            else:
                namespace[f"_r{index}"] = render
                out[index] = f"_r{index}(a{index})"
        run.clear()

    for bit, (index, decode) in enumerate(steps):
        if nulls >> bit & 1:
            continue
        inline = INLINE_DECODERS.get(decode)
        if inline is not None:
            run.append((index, *inline))
            continue
        flush()
        namespace[f"_d{index}"] = decode
        lines.append(f"    v{index}, pos = _d{index}(data, pos)")
        out[index] = f"v{index}"
    flush()
    lines.append(f"    return ({', '.join(out)},), pos")
    exec(compile("\n".join(lines), "<relay.binlog.rows reader>", "exec"), namespace)
    return namespace["read"]  # type: ignore[return-value]


_MAX_CACHED = 2048


# Where compiled (scripts/build-compiled), still subclassed by interpreted code (test doubles).
@mypyc_attr(allow_interpreted_subclasses=True)
class RowDecoder:
    """Decodes the rows of rows events for one replication connection, TIMESTAMP in its ``zone``.

    Holds the compiled plans per table map. The parser shares one columns tuple between the table
    maps of an unchanged table, so identity (``id``) finds the plan without hashing; holding the tuple
    keeps its id from being reused while cached. Equal tuples of other origin are found by value. Not
    thread-safe: owned by the parser, on the reader thread.
    """

    def __init__(self, zone: TimestampZone | tzinfo | str = UTC) -> None:
        self.zone = zone if isinstance(zone, TimestampZone) else TimestampZone(zone)
        self._by_id: dict[int, tuple[tuple[ColumnMeta, ...], _Plan]] = {}
        self._by_value: dict[tuple[ColumnMeta, ...], _Plan] = {}

    def plan(self, table: TableMapEvent) -> _Plan:
        columns = table.columns
        hit = self._by_id.get(id(columns))
        if hit is not None and hit[0] is columns:
            return hit[1]
        plan = self._by_value.get(columns)
        if plan is None:
            if len(self._by_value) >= _MAX_CACHED:
                self._by_value.clear()
            plan = _Plan(columns, self.zone)
            self._by_value[columns] = plan
        if len(self._by_id) >= _MAX_CACHED:
            self._by_id.clear()
        self._by_id[id(columns)] = (columns, plan)
        return plan

    def decode_rows(
        self, kind: str, data: bytes, pos: int, end: int, table: TableMapEvent, *, partial: bool = False
    ) -> tuple[RowImage, ...]:
        """Decode the rows part of a rows event.

        ``data[pos:end]`` starts at the column count (after the post-header and, for v2 events, the
        extra-data block) and ends before the checksum. ``kind`` is INSERT / UPDATE / DELETE;
        ``partial``: a PARTIAL_UPDATE_ROWS_EVENT (JSON diffs applied to the before image).
        """
        return _decode_rows(kind, data, pos, end, table, self.plan(table), partial)


def _packed_int(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if size is None:
        raise DecodeError(f"rows event: bad packed integer prefix 0x{first:02x}")
    return int.from_bytes(data[pos + 1 : pos + 1 + size], "little"), pos + 1 + size


def _image(data: bytes, pos: int, steps: Steps, ncols: int) -> tuple[tuple[str | None, ...], int]:
    """One row image: the null bitmap over the present columns, then their values."""
    null_bytes = (len(steps) + 7) >> 3
    nulls = int.from_bytes(data[pos : pos + null_bytes], "little")
    pos += null_bytes
    values: list[str | None] = [None] * ncols
    if nulls == 0:
        for index, decode in steps:
            values[index], pos = decode(data, pos)
    else:
        bit = 1
        for index, decode in steps:
            if not nulls & bit:
                values[index], pos = decode(data, pos)
            bit <<= 1
    return tuple(values), pos


def _decode_rows(
    kind: str, data: bytes, pos: int, end: int, table: TableMapEvent, plan: _Plan, partial: bool
) -> tuple[RowImage, ...]:
    try:
        ncols, pos = _packed_int(data, pos)
        if ncols == 0:  # MySQL refuses it too ("Invalid m_width"); a row would take no bytes
            raise DecodeError(f"rows event for {table.schema}.{table.table} has no columns")
        if ncols > plan.ncols:
            raise DecodeError(
                f"rows event for {table.schema}.{table.table} has {ncols} columns, its table map {plan.ncols}"
            )
        bitmap_bytes = (ncols + 7) >> 3
        first_bits = int.from_bytes(data[pos : pos + bitmap_bytes], "little")
        pos += bitmap_bytes
        second_bits = first_bits
        if kind == UPDATE:
            second_bits = int.from_bytes(data[pos : pos + bitmap_bytes], "little")
            pos += bitmap_bytes
        present = (first_bits, second_bits if kind == UPDATE else first_bits)
        full = plan.full
        if first_bits & full != full or second_bits & full != full:
            # Once per event, not per row: the bitmaps say which columns every row image holds.
            raise _incomplete(kind, table, first_bits, second_bits, full)
        if partial:
            return _partial_rows(data, pos, end, plan, present, table)
        rows = _rows(kind, data, pos, end, plan, present)
    except (IndexError, struct.error, ValueError, OverflowError) as exc:
        raise DecodeError(f"rows event for {table.schema}.{table.table} is malformed: {exc}") from exc
    return rows


def _incomplete(
    kind: str, table: TableMapEvent, first: int, second: int, full: int
) -> IncompleteRowImageError:
    """The error for a rows event whose images lack columns (binlog_row_image MINIMAL / NOBLOB).

    A FULL image has every column's bit set (MySQL and MariaDB both set all of them); INSERT has only
    an after image, DELETE only a before image, UPDATE both (``first`` before, ``second`` after).
    """
    if kind == UPDATE:
        image, bits = ("before", first) if first & full != full else ("after", second)
    else:
        image, bits = ("after" if kind == INSERT else "before"), first
    missing = tuple(c.name for c in table.columns if not bits >> c.index & 1)
    return IncompleteRowImageError(f"{table.schema}.{table.table}", image, missing)


def _image_reader(plan: _Plan, present: int) -> ImageReader:
    """Reads one row image (null bitmap included): in C where built, else with the generated reader of
    its null bitmap."""
    steps = plan.steps(present)
    if C_READER is not None and plan.native:
        native = plan.native
        return C_READER(tuple((i, *native[i], d) for i, d in steps), plan.ncols)
    ncols = plan.ncols
    null_bytes = (len(steps) + 7) >> 3
    readers: dict[bytes, ImageReader] = {}  # compiled, by the raw null bitmap

    def read(data: bytes, pos: int) -> tuple[Values, int]:
        start = pos + null_bytes
        key = data[pos:start]
        reader = readers.get(key)
        if reader is None:
            if len(readers) >= _MAX_READERS:  # many distinct NULL patterns: the generic loop
                return _image(data, pos, steps, ncols)
            reader = readers[key] = _compile_reader(steps, int.from_bytes(key, "little"), ncols)
        return reader(data, start)

    return read


def _rows(
    kind: str, data: bytes, pos: int, end: int, plan: _Plan, present: tuple[int, int]
) -> tuple[RowImage, ...]:
    first = plan.image_reader(present[0])
    rows: list[RowImage] = []
    append = rows.append
    if kind == UPDATE:
        second = plan.image_reader(present[1])
        while pos < end:
            before, pos = first(data, pos)
            after, pos = second(data, pos)
            append(RowImage(before, after))
    elif kind == DELETE:
        while pos < end:
            image, pos = first(data, pos)
            append(RowImage(image, None))
    else:
        while pos < end:
            image, pos = first(data, pos)
            append(RowImage(None, image))
    if pos != end:
        raise DecodeError(f"rows event: row data ends at {pos}, the event at {end}")
    return tuple(rows)


# ---- PARTIAL_UPDATE_ROWS_EVENT -------------------------------------------------------------------


def _partial_rows(
    data: bytes, pos: int, end: int, plan: _Plan, present: tuple[int, int], table: TableMapEvent
) -> tuple[RowImage, ...]:
    """The rows of a PARTIAL_UPDATE_ROWS_EVENT: before image, value_options, partial bits, after image.

    A rare event (only JSON_SET/JSON_REPLACE/JSON_REMOVE updates write it), decoded without the
    compiled readers: JSON columns of the before image keep their binary form for the diffs.
    """
    json_columns = [i for i, c in enumerate(table.columns) if c.type_code == t.JSON]
    before_steps, after_steps = plan.steps(present[0]), plan.steps(present[1])
    out: list[RowImage] = []
    while pos < end:
        before, documents, pos = _image_keeping_json(data, pos, before_steps, table)
        options, pos = _packed_int(data, pos)
        if options > 1:  # only PARTIAL_JSON (1) exists; MySQL refuses others as corrupt too
            raise DecodeError(f"unknown binlog_row_value_options {options} in a partial update row")
        partial: frozenset[int] = frozenset()
        if options:
            size = (len(json_columns) + 7) >> 3
            bits = int.from_bytes(data[pos : pos + size], "little")
            pos += size
            partial = frozenset(c for k, c in enumerate(json_columns) if bits >> k & 1)
        after, pos = _partial_after_image(data, pos, end, after_steps, table, partial, documents, len(out))
        out.append(RowImage(before, after))
    if pos != end:
        raise DecodeError(f"rows event: row data ends at {pos}, the event at {end}")
    return tuple(out)


def _image_keeping_json(
    data: bytes, pos: int, steps: Steps, table: TableMapEvent
) -> tuple[Values, dict[int, bytes], int]:
    """A row image, plus the binary document of each non-NULL JSON column in it."""
    null_bytes = (len(steps) + 7) >> 3
    nulls = int.from_bytes(data[pos : pos + null_bytes], "little")
    pos += null_bytes
    values: list[str | None] = [None] * len(table.columns)
    documents: dict[int, bytes] = {}
    for bit, (index, decode) in enumerate(steps):
        if nulls >> bit & 1:
            continue
        column = table.columns[index]
        if column.type_code == t.JSON:
            start = pos + column.meta
            pos = start + int.from_bytes(data[pos:start], "little")
            documents[index] = data[start:pos]
            values[index] = jsonb.to_text(documents[index])
        else:
            values[index], pos = decode(data, pos)
    return tuple(values), documents, pos


def _partial_after_image(
    data: bytes,
    pos: int,
    end: int,
    steps: Steps,
    table: TableMapEvent,
    partial: frozenset[int],
    documents: dict[int, bytes],
    row: int,
) -> tuple[Values, int]:
    null_bytes = (len(steps) + 7) >> 3
    nulls = int.from_bytes(data[pos : pos + null_bytes], "little")
    pos += null_bytes
    values: list[str | None] = [None] * len(table.columns)
    for bit, (index, decode) in enumerate(steps):
        if nulls >> bit & 1:
            continue
        if index not in partial:
            values[index], pos = decode(data, pos)
            continue
        column = table.columns[index]
        where = f"{table.schema}.{table.table} column {column.name} (row {row} of the event)"
        diffs, pos = jsondiff.read_diffs(data, pos, end)
        document = documents.get(index)
        if document is None:
            raise DecodeError(
                f"{where}: a partial JSON update without the document in the before image (NULL, or "
                "binlog_row_image is not FULL); the after value cannot be computed"
            )
        try:
            values[index] = jsondiff.apply_diffs(document, diffs)
        except DecodeError as exc:
            raise DecodeError(f"{where}: partial JSON update cannot be applied exactly: {exc}") from exc
    return tuple(values), pos
