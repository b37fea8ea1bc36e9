"""The C helper of ``relay verify``'s topic read (``relay/ops/verify/_rowdigest.c``) against the Python path.

For every record it is sure of, ``data_digests`` must give the int ``data_digest(shard, parse_datas(...))``
gives; for every other it must give None (and the Python path decides). A seeded generator makes tables of
every digest kind (text, binary, BIT, DOUBLE, FLOAT) and canal-json values for them: texts with escapes,
non-ASCII, astral characters, ISO-8859-1 bytes, numbers in every layout; objects with keys reordered,
missing, extra or twice, numbers and literals where text belongs, raw control characters, lone surrogate
escapes, invalid UTF-8, whitespace between tokens, a data array not where the codec writes it. MD5 is
checked against hashlib at every length around its block edges. Seeds: a fixed set; ``RELAY_FUZZ_SEEDS=N``
runs N more; a failure prints its seed. Skipped where the helper is not built (``RELAY_PURE_PYTHON=1``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from typing import Any

import pytest

from relay.errors import VerifyError
from relay.ops.verify import topic, topic_values
from relay.ops.verify.digest import HashKind
from relay.ops.verify.shards import MULTISET, ROWS, Shard
from relay.source.snapshot_tables import TableSpec, column_meta

native = pytest.importorskip("relay.ops.verify._rowdigest", reason="the C helpers are not built")
if topic_values.data_digests is None:  # built, but this process runs pure Python
    pytest.skip("the relay runs pure Python here", allow_module_level=True)

# (DATA_TYPE, COLUMN_TYPE, extra information_schema fields) of the generated columns
TYPES: list[tuple[str, str, dict[str, Any]]] = [
    ("bigint", "bigint(20)", {}),
    ("varchar", "varchar(64)", {"CHARACTER_OCTET_LENGTH": 256, "COLLATION_ID": 45}),
    ("text", "text", {"CHARACTER_OCTET_LENGTH": 65535, "COLLATION_ID": 45}),
    ("varbinary", "varbinary(32)", {"CHARACTER_OCTET_LENGTH": 32, "COLLATION_ID": 63}),
    ("blob", "blob", {"CHARACTER_OCTET_LENGTH": 65535, "COLLATION_ID": 63}),
    ("double", "double", {}),
    ("float", "float", {}),
    ("bit", "bit(12)", {"NUMERIC_PRECISION": 12}),
    ("decimal", "decimal(12,2)", {"NUMERIC_PRECISION": 12, "NUMERIC_SCALE": 2}),
    ("datetime", "datetime(3)", {"DATETIME_PRECISION": 3}),
]


def _column(index: int, name: str, data_type: str, column_type: str, extra: dict[str, Any]) -> Any:
    row = {
        "COLUMN_NAME": name,
        "DATA_TYPE": data_type,
        "COLUMN_TYPE": column_type,
        "IS_NULLABLE": "YES",
        "CHARACTER_OCTET_LENGTH": None,
        "NUMERIC_PRECISION": None,
        "NUMERIC_SCALE": None,
        "DATETIME_PRECISION": None,
        "COLLATION_ID": None,
        **extra,
    }
    return column_meta(index, row, index == 0)


def _shard(rng: random.Random) -> Shard:
    count = rng.randint(1, 9)
    names = ["id"]
    while len(names) < count:
        name = rng.choice(["c", "é", "名", 'a"b', "x\\y", "\U0001f600", "n"]) + str(len(names))
        names.append(name)
    picked = [TYPES[0]] + [rng.choice(TYPES) for _ in range(count - 1)]
    metas = [_column(i, n, *picked[i]) for i, n in enumerate(names)]
    spec = TableSpec("db", "t", tuple(m for m, _ in metas), tuple(k for _, k in metas), (0,), "PRIMARY")
    from relay.ops.verify.digest import hash_kind

    kinds = tuple(hash_kind(m, k) for m, k in metas)
    return Shard(spec, None, kinds, (0,), None, False, ROWS, "")  # type: ignore[arg-type]


# number texts at the edges of the C helper's own layout (digits, signs, exponents, ranges, float32's range)
NUMBER_TEXTS = [
    "1.0E15", "1e-05", "-0.0", "0", "3.4028235E38", "NaN", "Infinity", "1_0", " 2 ", "x", "1.", ".5", "+1.5",
    "1e400", "-1e-5", "0.0001", "0.00009999", "999999999999999.9", "1e15", "-1e15", "3.4028236e38", "1e-46",
    "123456789012345678", "5e-324", "1E+3", "1e", "-", ".", "1.5e+", "٣",
]  # fmt: skip


def _text(rng: random.Random, kind: HashKind) -> str:
    if kind in (HashKind.DOUBLE, HashKind.FLOAT):
        return rng.choice(
            [
                repr(rng.uniform(-1e6, 1e6)),
                repr(rng.random() * 10 ** rng.randint(-30, 30)),
                str(rng.randint(-(10**18), 10**18)),
                rng.choice(NUMBER_TEXTS),
            ]
        )
    if kind == HashKind.BINARY and rng.random() < 0.8:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 20))).decode("latin-1")
    alphabet = ["a", "Z", "0", " ", '"', "\\", "/", "\n", "\t", "\b", "\f", "\r", "\x01", "\x1f", "\x7f",
                "é", "ÿ", "\x80", "Ā", "名", "\u2028", "\U0001f600", "\U0010fffd"]  # fmt: skip
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24)))


def _json_string(rng: random.Random, text: str) -> str:
    if rng.random() < 0.5:
        return json.dumps(text, ensure_ascii=rng.random() < 0.5)
    out = ['"']  # escapes of any character, as another writer may choose
    for ch in text:
        r = rng.random()
        if ch in '"\\' or ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}" if r < 0.5 else json.dumps(ch)[1:-1])
        elif r < 0.2 and ord(ch) < 0x10000:
            out.append(("\\u%04X" if r < 0.1 else "\\u%04x") % ord(ch))
        elif r < 0.25 and ch == "/":
            out.append("\\/")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _ws(rng: random.Random) -> str:
    return rng.choice(["", "", "", " ", "\n", " \t\r\n"])


# single bad bytes, overlong forms, encoded surrogates (high and low), beyond U+10FFFF
BAD_UTF8 = [b"\x80", b"\xc0", b"\xed", b"\xf5", b"\xff", b"\x01", b"\xc0\xaf", b"\xe0\x80\xaf",
            b"\xed\xa0\x80", b"\xed\xb2\x80", b"\xf4\x90\x80\x80", b"\xf0\x80\x80\xaf"]  # fmt: skip


def _value(rng: random.Random, shard: Shard) -> bytes:
    """A canal-json record value for ``shard``, most of them well formed, some broken in one way."""
    pairs: list[tuple[str, str]] = []
    for name, kind in zip(shard.names, shard.kinds, strict=True):
        if rng.random() < 0.15:
            pairs.append((name, "null"))
        else:
            pairs.append((name, _json_string(rng, _text(rng, kind))))
    flaw = rng.random()
    if flaw < 0.05 and pairs:
        pairs.pop(rng.randrange(len(pairs)))  # a missing column
    elif flaw < 0.10:
        pairs.append(("extra", '"1"'))  # a column the table lacks
    elif flaw < 0.15 and pairs:
        pairs.append(rng.choice(pairs))  # a column twice
    elif flaw < 0.20 and pairs:
        i = rng.randrange(len(pairs))
        pairs[i] = (pairs[i][0], rng.choice(["1", "-2.5", "true", "false", "[]", "{}", '["a"]', "nul"]))
    elif flaw < 0.25:
        rng.shuffle(pairs)  # another writer's key order (well formed)
    body = (
        "{"
        + _ws(rng)
        + ("," + _ws(rng)).join(
            f"{json.dumps(n, ensure_ascii=rng.random() < 0.5)}{_ws(rng)}:{_ws(rng)}{v}" for n, v in pairs
        )
        + _ws(rng)
        + "}"
    )
    raw = ("{" + '"data":[' + body + '],"old":null,"type":"INSERT"}').encode("utf-8", "surrogatepass")
    flaw = rng.random()
    if flaw < 0.03:
        raw = raw.replace(b'"data":[', b'"data": [', 1)  # not the codec's layout: the whole value is parsed
    elif flaw < 0.06:
        raw = raw.replace(b"\\u00", b"\\ud8", 1)  # perhaps a lone surrogate escape
    elif flaw < 0.09 and len(raw) > 20:
        at = rng.randrange(10, len(raw) - 10)
        bad = rng.choice(BAD_UTF8)
        quote = raw.find(b':"', at)  # inside a string where there is one after ``at``
        at = quote + 2 if quote > 0 and rng.random() < 0.7 else at
        raw = raw[:at] + bad + raw[at:]  # invalid UTF-8, or an encoded surrogate
    elif flaw < 0.11:
        raw = raw.replace(b'"data":[{', b'"data":[{"x":{"y":1},', 1)  # a nested object
    return raw


def _python(shard: Shard, value: bytes) -> tuple[str, Any]:
    try:
        return "digest", topic_values.data_digest(shard, topic_values.parse_datas([value])[0])
    except Exception as exc:
        return "error", type(exc).__name__


def run_seed(seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    sure = unsure = 0
    for _ in range(6):
        shard = _shard(rng)
        values = [_value(rng, shard) for _ in range(40)]
        found = native.data_digests(values, *shard.native_spec)
        for value, digest in zip(values, found, strict=True):
            kind, want = _python(shard, value)
            if digest is None:
                unsure += 1
                continue
            sure += 1
            assert (kind, want) == ("digest", digest), f"seed {seed}: {value!r} -> C {digest}, Python {want}"
        # the whole path: the helper, then Python for what it left
        oracle = [_python(shard, v) for v in values]
        if all(k == "digest" for k, _ in oracle):
            assert topic_values.digests_of(shard, values) == [d for _, d in oracle], (
                f"seed {seed}: digests_of"
            )
    return sure, unsure


SEEDS = list(range(60)) + [
    random.randrange(10**6) for _ in range(int(os.environ.get("RELAY_FUZZ_SEEDS", "0")))
]


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_records_digest_as_the_python_path(seed: int) -> None:
    run_seed(seed)


def test_the_helper_is_sure_of_the_codecs_records() -> None:
    """The codec's own layout (keys in table order, json.dumps text) is never left to Python."""
    rng = random.Random(7)
    shard = _shard(rng)
    values = []
    for n in range(200):
        data = {name: (None if n % 7 == i else _text(rng, kind))
                for i, (name, kind) in enumerate(zip(shard.names, shard.kinds, strict=True))}  # fmt: skip
        values.append(
            (
                '{"data":[' + json.dumps(data, ensure_ascii=False, separators=(",", ":")) + '],"old":null}'
            ).encode()
        )
    found = native.data_digests(values, *shard.native_spec)
    assert None not in found
    assert found == [topic_values.data_digest(shard, d) for d in topic_values.parse_datas(values)]


def test_md5_prefix_equals_hashlib_around_every_block_edge() -> None:
    rng = random.Random(11)
    for size in [*range(0, 200), 1000, 4095, 4096, 65_537]:
        data = bytes(rng.randrange(256) for _ in range(size))
        want = int.from_bytes(hashlib.md5(data, usedforsecurity=False).digest()[:8], "big")
        assert native.md5_prefix(data) == want, size


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        native.data_digests([b"{}"], (b"a",), b"", (None,))
    with pytest.raises(TypeError, match="bytes"):
        native.data_digests([b"{}"], ("a",), b"\x00", (None,))
    with pytest.raises(TypeError, match="converter"):
        native.data_digests([b"{}"], (b"a",), b"\x03", (None,))
    assert native.data_digests([None, b"", b"[]"], (b"a",), b"\x00", (None,)) == [None, None, None]


# ---- row_records: a consumed batch read in C ------------------------------------------------------

HEADER_NAMES = [
    "relay.db", "relay.table", "relay.physical.db", "relay.physical.table", "relay.type", "relay.sequence",
    "relay.source.id", "relay.part", "relay.snapshot", "relay.tag", "other",
]  # fmt: skip


def _headers(rng: random.Random, physical: str) -> list[tuple[str, bytes | None]] | None:
    if rng.random() < 0.05:
        return None  # not the relay's record
    pdb, _, ptable = physical.partition(".")
    h: list[tuple[str, bytes | None]] = [
        ("relay.db", rng.choice([b"shop"] * 9 + [b"other"])),
        ("relay.table", rng.choice([b"orders"] * 9 + [b"items"])),
        ("relay.physical.db", pdb.encode()),
        ("relay.physical.table", ptable.encode()),
        ("relay.type", rng.choice([b"INSERT", b"UPDATE", b"DELETE"] * 5 + [b"QUERY", b"insert"])),
        ("relay.sequence", str(rng.randint(1, 50)).encode()),
        ("relay.source.id", rng.choice([b"src"] * 9 + [b"elsewhere"])),
        ("relay.part", rng.choice([b"0", b"1"])),
    ]
    flaw = rng.random()
    numbers = ("relay.sequence", "relay.part")
    odd = rng.random() < 0.03  # a number header made odd (the batch then fails, in both paths alike)
    if flaw < 0.05:
        h.pop(rng.randrange(len(h)))
    elif flaw < 0.10:
        name = rng.choice(HEADER_NAMES)
        value = rng.choice([b"x", b"12", None, b"shop", b"orders", b"7"])
        h.append((name, value if name not in numbers or odd else b"12"))
    elif flaw < 0.13:
        i = rng.randrange(len(h))
        if h[i][0] not in numbers or odd:
            h[i] = (h[i][0], rng.choice([None, b"", b"1_0", b" 3", b"+4", b"-", b"9" * 19]))
    elif flaw < 0.16:
        rng.shuffle(h)
    return h


def _index(native_reader: Any) -> Any:
    rng = random.Random(3)
    keyed = [_shard(rng), _shard(rng)]
    spec0, spec1 = keyed[0].spec, keyed[1].spec
    a = Shard(
        TableSpec("shop_00", "orders", spec0.columns, spec0.kinds, (0,), "PRIMARY"), None,  # type: ignore[arg-type]
        keyed[0].kinds, (0,), None, False, ROWS, "",
    )  # fmt: skip
    b = Shard(
        TableSpec("shop_01", "orders", spec1.columns, spec1.kinds, (0,), "PRIMARY"), None,  # type: ignore[arg-type]
        keyed[1].kinds, (0,), None, False, ROWS, "",
    )  # fmt: skip
    c = Shard(
        TableSpec("shop_02", "orders", spec1.columns, spec1.kinds, (), ""), None,  # type: ignore[arg-type]
        keyed[1].kinds, (), None, False, MULTISET, "",
    )  # fmt: skip
    index = topic.TopicIndex({}, ["shop.orders"], "shop.orders", "src", [a, b, c])
    return index, [a, b, c]


def _messages(rng: random.Random, shards: list[Shard]) -> list[Any]:
    from confluent_kafka import KafkaError, Message

    out = []
    for offset in range(120):
        shard = rng.choice(shards)
        physical = rng.choice([shard.name] * 9 + ["shop_09.orders"])
        key = json.dumps({"id": str(rng.randint(1, 12))}).encode()
        value = _value(rng, shard) if rng.random() < 0.9 else None
        headers = _headers(rng, physical)
        if rng.random() < 0.03:  # a partition's end, or (rarely) a failure to read one
            code = KafkaError._PARTITION_EOF if rng.random() < 0.97 else KafkaError.UNKNOWN_TOPIC_OR_PART
            part = rng.randint(0, 1)
            out.append(Message(topic="shop.orders", partition=part, offset=offset, error=KafkaError(code)))
            continue
        out.append(
            Message(
                topic="shop.orders",
                partition=rng.randint(0, 1),
                offset=offset,
                key=key,
                value=value,
                headers=headers,
            )
        )
    return out


def _outcome(batch: list[Any], reader: Any) -> Any:
    saved = topic.row_records
    topic.row_records = reader
    try:
        index, _ = _index(reader)
        pending = {("shop.orders", 0), ("shop.orders", 1)}
        read = index._batch(batch, pending)
    except VerifyError as exc:  # a failure to read, or a record no relay wrote: both must say the same
        return ("error", str(exc))
    finally:
        topic.row_records = saved
    held = {k: (v.identity, v.deleted, v.shard, v.digest, v.where) for k, v in index.held.items()}
    sets = {n: (dict(m.rows), m.latest) for n, m in index.multisets.items()}
    return ("state", held, sets, read, pending, index.next_offsets)


@pytest.mark.parametrize("seed", SEEDS[:40] + SEEDS[60:])
def test_generated_batches_index_as_the_python_path(seed: int) -> None:
    rng = random.Random(seed)
    _, shards = _index(native.row_records)
    batch = _messages(rng, shards)
    python, c = _outcome(batch, None), _outcome(batch, native.row_records)
    assert c == python, f"seed {seed}"
    assert python[0] == "error" or python[1], f"seed {seed}: nothing indexed (the test would prove nothing)"


def test_most_generated_batches_index_rows() -> None:
    """The batches above mostly end in a state (an error now and then): the comparison is of indexes."""
    states = 0
    for seed in SEEDS[:40]:
        rng = random.Random(seed)
        _, shards = _index(native.row_records)
        states += _outcome(_messages(rng, shards), None)[0] == "state"
    assert states >= 20
