"""Random tables of every column type the README's type table names, and the oracle of each published value.

``table_columns(rng, flavor, count)`` draws a table: every integer width signed and UNSIGNED (some ZEROFILL),
YEAR, BIT(n), DECIMAL (wide, negative-capable, zero scale, UNSIGNED, ZEROFILL), FLOAT and DOUBLE (and
UNSIGNED), DATE, TIME(fsp), DATETIME(fsp), TIMESTAMP(fsp), CHAR/VARCHAR/TEXT in utf8mb4 and latin1,
BINARY/VARBINARY/BLOB, ENUM, SET, JSON and the spatial types — in random order and nullability, several of
each family. Each column knows its boundary values (the limits of its width, -1, 0, NULL, empty strings,
multibyte text, fractional seconds, zero dates) and draws random ones.

The oracle is the SERVER: each column has a SELECT expression whose result, under the README's convention
for its type, is what every codec must publish (``canal_text``: canal-json's ``data`` and canal-protobuf's
column values; ``debezium``: debezium-json's field value), and the canal ``mysqlType`` it must carry. The
relay's own code is never asked what a value should be. Used by ``test_types_generative``.
"""

from __future__ import annotations

import base64
import json
import math
import random
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, localcontext
from typing import Any

INTS = {
    "tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64,
}  # fmt: skip
MULTIBYTE = ("é", "€", "ß", "日本", "😀", "Ω")  # € is cp1252's 0x80 in MySQL's latin1
LATIN1 = ("é", "ÿ", "€", "ü", "Æ")


@dataclass(frozen=True)
class Raw:
    """A value given as SQL (a spatial constructor): inlined in the statement, never a parameter."""

    sql: str


@dataclass(frozen=True)
class Col:
    """One generated column: its declaration, what ``mysqlType`` it must have, how to draw its values."""

    name: str
    ddl: str  # the type, without NULL / NOT NULL
    family: str
    mysql_type: str
    nullable: bool
    pool: tuple[Any, ...]  # boundary values (parameters, or ``Raw`` SQL)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def declaration(self) -> str:
        if self.nullable:
            return f"`{self.name}` {self.ddl} NULL"
        default = " DEFAULT '2000-01-01 00:00:00'" if self.family == "timestamp" else ""
        return f"`{self.name}` {self.ddl} NOT NULL{default}"

    def draw(self, rng: random.Random, boundary: int | None = None) -> Any:
        """A boundary value (``boundary`` picks one, cycling) or, about a third of the time, a random one;
        NULL now and then in a nullable column."""
        if self.nullable and rng.random() < 0.08:
            return None
        if boundary is not None and (rng.random() < 0.7):
            return self.pool[boundary % len(self.pool)]
        return _random_value(self, rng)


# ---- the families ----------------------------------------------------------------------------------


def _int(rng: random.Random, name: str, nullable: bool) -> Col:
    kind = rng.choice(list(INTS))
    bits = INTS[kind]
    unsigned = rng.random() < 0.45
    zerofill = rng.random() < 0.12
    low, high = (0, (1 << bits) - 1) if unsigned or zerofill else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    ddl = kind + (f"({rng.randint(1, 12)}) zerofill" if zerofill else "") + (" unsigned" if unsigned else "")
    pool = (low, high, 0, 1, -1 if low < 0 else 2, low + 1, high - 1)
    mysql = kind + (" unsigned" if unsigned or zerofill else "")
    return Col(name, ddl, "int", mysql, nullable, pool, {"low": low, "high": high, "zerofill": zerofill})


def _decimal(rng: random.Random, name: str, nullable: bool) -> Col:
    precision = rng.choice((1, 5, 10, 18, 19, 30, 38, 65, rng.randint(1, 65)))
    scale = rng.choice((0, 0, min(2, precision), min(precision, 30), rng.randint(0, min(precision, 30))))
    unsigned = rng.random() < 0.25
    zerofill = rng.random() < 0.1
    nines = "9" * (precision - scale) or "0"
    frac = "9" * scale
    top = Decimal(f"{nines}.{frac}" if scale else nines)
    tiny = Decimal(1).scaleb(-scale)
    pool: tuple[Any, ...] = (Decimal(0), top, tiny, Decimal(1) if precision > scale else tiny)
    if not (unsigned or zerofill):
        pool += (-top, -tiny, Decimal(-1) if precision > scale else -tiny)
    ddl = (
        f"decimal({precision},{scale})"
        + (" unsigned" if unsigned else "")
        + (" zerofill" if zerofill else "")
    )
    mysql = f"decimal({precision},{scale})" + (" unsigned" if unsigned or zerofill else "")
    params = {
        "precision": precision,
        "scale": scale,
        "signed": not (unsigned or zerofill),
        "zerofill": zerofill,
    }
    return Col(name, ddl, "decimal", mysql, nullable, pool, params)


def _float(rng: random.Random, name: str, nullable: bool) -> Col:
    double = rng.random() < 0.5
    unsigned = rng.random() < 0.25
    kind = "double" if double else "float"
    if double:
        pool: tuple[Any, ...] = (0.0, 1.5, 1.7976931348623157e308, 2.2250738585072014e-308, 5e-324, 0.1, 1e15)
        if not unsigned:
            pool += (-1.5, -1.7976931348623157e308, -5e-324, -0.0)
    else:
        pool = (
            0.0,
            1.5,
            3.4028234663852886e38,
            1.1754943508222875e-38,
            1.401298464324817e-45,
            0.1,
            16777217.0,
        )
        if not unsigned:
            pool += (-1.5, -3.4028234663852886e38, -1.401298464324817e-45)
    ddl = kind + (" unsigned" if unsigned else "")
    return Col(name, ddl, kind, ddl, nullable, pool, {"signed": not unsigned})


def _temporal(rng: random.Random, name: str, nullable: bool) -> Col:
    kind = rng.choice(("date", "time", "datetime", "timestamp", "year"))
    fsp = rng.choice((0, 0, 1, 3, 4, 6)) if kind in ("time", "datetime", "timestamp") else 0
    ddl = f"{kind}({fsp})" if fsp else kind
    f = "." + "9" * 6 if fsp else ""
    pools: dict[str, tuple[Any, ...]] = {
        "date": ("0000-00-00", "1000-01-01", "9999-12-31", "1970-01-01", "2024-02-29", "2024-02-00"),
        "time": ("-838:59:59", "838:59:59", "00:00:00", "-00:00:00.5" if fsp else "-00:00:01", "23:59:59" + f,
                 "-12:34:56.789012", "100:00:00.000001"),
        "datetime": ("0000-00-00 00:00:00", "1000-01-01 00:00:00", "9999-12-31 23:59:59",
                     "1970-01-01 00:00:00", "2024-02-29 12:34:56.123456", "2024-00-10 00:00:00"),
        "timestamp": ("1970-01-01 00:00:01", "2038-01-19 03:14:07" + f, "0000-00-00 00:00:00",
                      "2001-02-03 04:05:06.654321", "1999-12-31 23:59:59.5"),
        "year": (0, 1901, 2155, 1970, 2000),
    }  # fmt: skip
    return Col(name, ddl, kind, ddl, nullable, pools[kind], {"fsp": fsp})


def _bit(rng: random.Random, name: str, nullable: bool) -> Col:
    bits = rng.choice((1, 1, 5, 8, 31, 63, 64, rng.randint(1, 64)))
    top = (1 << bits) - 1
    return Col(name, f"bit({bits})", "bit", f"bit({bits})", nullable, (0, 1, top, top >> 1), {"bits": bits})


def _text(rng: random.Random, name: str, nullable: bool) -> Col:
    latin1 = rng.random() < 0.4
    charset = "latin1" if latin1 else "utf8mb4"
    kind = rng.choice(("char", "varchar", "varchar", "tinytext", "text", "mediumtext"))
    length = rng.randint(1, 30) if kind == "char" else rng.randint(1, 120)
    ddl = f"{kind}({length})" if kind in ("char", "varchar") else kind
    letters = LATIN1 if latin1 else MULTIBYTE
    longest = (letters[0] * length)[:length] if kind in ("char", "varchar") else "x" * 300
    pool = ("", "a", " ", 'it\'s \\ "q"', longest, "".join(letters)[: length if kind != "text" else 99], "0")
    mysql = ddl
    return Col(name, f"{ddl} CHARACTER SET {charset}", "text", mysql, nullable, pool,
               {"length": length if kind in ("char", "varchar") else 255, "letters": letters})  # fmt: skip


def _bytes(rng: random.Random, name: str, nullable: bool) -> Col:
    kind = rng.choice(("binary", "varbinary", "tinyblob", "blob", "mediumblob"))
    length = rng.randint(1, 16) if kind == "binary" else rng.randint(1, 64)
    ddl = f"{kind}({length})" if kind in ("binary", "varbinary") else kind
    top = length if kind in ("binary", "varbinary") else 255
    pool = (b"", b"\x00", b"\xff" * top, bytes(range(min(top, 256))), b"a\x00b", b"\x80\x81")
    return Col(name, ddl, "bytes", ddl, nullable, pool, {"length": top})


def _members(rng: random.Random, name: str, nullable: bool) -> Col:
    kind = rng.choice(("enum", "set"))
    # No member outside the BMP: information_schema (and SHOW CREATE TABLE) print one as '?', so a definition
    # read from the server cannot name it (README, "Column types": a known limit, not tested as a value).
    names = ["a", "b c", "it''s", "é", "€", "x", "zz", "m"][: rng.randint(2, 8)]
    listed = ",".join(f"'{m}'" for m in names)
    plain = [m.replace("''", "'") for m in names]
    if kind == "enum":
        pool: tuple[Any, ...] = (plain[0], plain[-1], *plain[1:3])
    else:
        pool = ("", plain[0], ",".join(plain), ",".join(plain[::2]))
    return Col(name, f"{kind}({listed}) CHARACTER SET utf8mb4", kind, f"{kind}({listed})", nullable, pool,
               {"members": plain})  # fmt: skip


def _json(rng: random.Random, name: str, nullable: bool, flavor: str) -> Col:
    pool = ("{}", "[]", "null", "true", "1.5", '"text é"', '{"a": 1, "b": [true, null, "x"], "c": {"d": -2}}',
            "[1, 2.25, -3e+20]")  # fmt: skip
    return Col(name, "json", "json", "longtext" if flavor == "mariadb" else "json", nullable, pool)


_SPATIAL = {
    "geometry": ("POINT(1 2)", "LINESTRING(0 0,1 1,2 5)", "POLYGON((0 0,4 0,4 4,0 4,0 0))"),
    "point": ("POINT(0 0)", "POINT(-1.5 2.25)", "POINT(1e10 -1e-10)"),
    "linestring": ("LINESTRING(0 0,1 1)", "LINESTRING(-1 -1,2 3,4 -5)"),
    "polygon": ("POLYGON((0 0,1 0,1 1,0 0))", "POLYGON((0 0,10 0,10 10,0 10,0 0),(2 2,3 2,3 3,2 2))"),
    "multipoint": ("MULTIPOINT(0 0,1 1)", "MULTIPOINT(5 5)"),
    "geometrycollection": ("GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))",),
}


def _spatial(rng: random.Random, name: str, nullable: bool) -> Col:
    kind = rng.choice(list(_SPATIAL))
    pool = tuple(Raw(f"ST_GeomFromText('{wkt}')") for wkt in _SPATIAL[kind])
    return Col(name, kind, "geometry", "geometry", nullable, pool, {"kind": kind})


FAMILIES = ("int", "int", "int", "decimal", "float", "temporal", "temporal", "bit", "text", "text", "bytes",
            "members", "json", "spatial")  # fmt: skip


def table_columns(rng: random.Random, flavor: str, count: int) -> list[Col]:
    """``count`` columns in random order: each family at least twice (YEAR and signed integers included,
    so an integer after a YEAR is always there), the rest drawn at random."""
    makers = {"int": _int, "decimal": _decimal, "float": _float, "temporal": _temporal, "bit": _bit,
              "text": _text, "bytes": _bytes, "members": _members, "spatial": _spatial}  # fmt: skip
    chosen = [f for f in dict.fromkeys(FAMILIES) for _ in range(2)]
    chosen += [rng.choice(FAMILIES) for _ in range(max(0, count - len(chosen)))]
    rng.shuffle(chosen)
    cols: list[Col] = []
    for i, family in enumerate(chosen):
        name, nullable = f"c{i}", rng.random() < 0.6
        col = _json(rng, name, nullable, flavor) if family == "json" else makers[family](rng, name, nullable)
        cols.append(col)
    # Always a YEAR right before a signed TINYINT holding -1 in every row (the reported case: 255 was
    # published), wherever it lands.
    at = rng.randrange(len(cols) + 1)
    year = Col(f"c{len(cols)}", "year", "year", "year", False, (0, 1901, 2155, 1970, 2024))
    tiny = Col(f"c{len(cols) + 1}", "tinyint", "int", "tinyint", False, (-1,), {"low": -1, "high": -1})
    cols[at:at] = [year, tiny]
    return cols


def _random_value(col: Col, rng: random.Random) -> Any:
    p, family = col.params, col.family
    if family == "int":
        return rng.randint(p["low"], p["high"])
    if family == "decimal":
        digits = "".join(rng.choice("0123456789") for _ in range(p["precision"]))
        sign = "-" if p["signed"] and rng.random() < 0.5 else ""
        whole = digits[: p["precision"] - p["scale"]] or "0"
        return Decimal(f"{sign}{whole}.{digits[len(whole) :] or '0'}" if p["scale"] else f"{sign}{whole}")
    if family in ("float", "double"):
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isnan(value) or math.isinf(value):
            value = rng.uniform(-1e6, 1e6)
        if family == "float":
            value = max(min(value, 3.4e38), -3.4e38) if abs(value) > 1e-30 else rng.uniform(-1, 1)
        return abs(value) if not p["signed"] else value
    if family == "bit":
        return rng.getrandbits(p["bits"])
    if family == "text":
        return "".join(rng.choice(("a", "Z", " ", *p["letters"])) for _ in range(rng.randint(0, p["length"])))
    if family == "bytes":
        return rng.randbytes(rng.randint(0, p["length"]))
    if family in ("enum", "set"):
        members = p["members"]
        if family == "enum":
            return rng.choice(members)
        return ",".join(m for m in members if rng.random() < 0.5)
    if family == "json":
        return json.dumps(
            {"k": rng.randint(-(1 << 40), 1 << 40), "s": rng.choice(MULTIBYTE), "l": [rng.random()]}
        )
    if family == "geometry":
        return _random_geometry(col.params["kind"], rng)
    return _random_temporal(col, rng)


def _random_temporal(col: Col, rng: random.Random) -> Any:
    family, fsp = col.family, col.params.get("fsp", 0)
    frac = f".{rng.randint(0, 999999):06d}" if fsp else ""
    if family == "year":
        return rng.choice((0, rng.randint(1901, 2155)))
    if family == "date":
        return f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if family == "time":
        sign = "-" if rng.random() < 0.4 else ""
        return f"{sign}{rng.randint(0, 838)}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}"
    if family == "datetime":
        return (
            f"{rng.randint(1000, 9999)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{frac}"
        )
    moment = datetime.fromtimestamp(rng.randint(1, (1 << 31) - 2), UTC)  # a TIMESTAMP
    return moment.strftime("%Y-%m-%d %H:%M:%S") + frac


def _random_geometry(kind: str, rng: random.Random) -> Raw:
    def point() -> str:
        return f"{rng.uniform(-180, 180):.6f} {rng.uniform(-90, 90):.6f}"

    wkt = {
        "point": f"POINT({point()})",
        "geometry": f"POINT({point()})",
        "linestring": f"LINESTRING({point()},{point()},{point()})",
        "multipoint": f"MULTIPOINT({point()},{point()})",
        "geometrycollection": f"GEOMETRYCOLLECTION(POINT({point()}))",
    }.get(kind)
    if wkt is None:  # a polygon: a triangle, closed
        a, b, c = point(), point(), point()
        wkt = f"POLYGON(({a},{b},{c},{a}))"
    return Raw(f"ST_GeomFromText('{wkt}')")


# ---- the oracle: the server's values, under the README's conventions ----------------------------------


def oracle_sql(col: Col) -> list[str]:
    """The SELECT expressions of ``col``: [canal text source, Debezium source] (more for some types)."""
    c = f"`{col.name}`"
    f = col.family
    if f in ("bytes", "geometry"):
        canal = f"HEX({c})"
    elif f == "bit" or col.params.get("zerofill"):
        canal = f"CAST({c}+0 AS CHAR)"
    elif f == "float":
        canal = f"CAST({c} AS DOUBLE)"
    elif f == "double":
        canal = c
    else:
        canal = f"CAST({c} AS CHAR CHARACTER SET utf8mb4)"
    debezium = {
        "date": f"DATEDIFF({c}, '1970-01-01')",
        "datetime": f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {c})",
        "timestamp": f"UNIX_TIMESTAMP({c})",
        "time": f"(CASE WHEN {c} < TIME'00:00:00' THEN -1 ELSE 1 END) * ((HOUR({c}) * 3600 "
        f"+ MINUTE({c}) * 60 + SECOND({c})) * 1000000 + MICROSECOND({c}))",
        "geometry": f"CONCAT(ST_SRID({c}), ':', HEX(ST_AsBinary({c})))",
        "year": f"CAST({c} AS UNSIGNED)",
    }.get(f, canal)
    return [canal, debezium]


def canal_matches(col: Col, ours: str | None, server: Any) -> bool:
    """Whether canal's text ``ours`` is the server's value under the convention for ``col``'s type."""
    if server is None or ours is None:
        return ours is None and server is None
    f = col.family
    if f in ("bytes", "geometry"):
        return bool(ours.encode("latin-1").hex().upper() == server)
    if f == "float":  # Java's Float.toString: reads back as exactly the stored float32
        return _f32(float(ours)) == float(server)
    if f == "double":  # Java's Double.toString: reads back as exactly the stored double
        return float(ours) == float(server)
    return bool(ours == server)


def debezium_expected(col: Col, server: Any, is_null: bool) -> Any:
    """Debezium's value (MySQL connector defaults, as ``relay.kafka.debezium_types`` documents them)."""
    if is_null:
        return None
    f, p = col.family, col.params
    if server is None:  # a zero date: null where the column may be NULL, else the epoch
        if col.nullable:
            return None
        return "1970-01-01T00:00:00Z" if f == "timestamp" else 0
    if f == "int":
        n = int(server)
        return n - (1 << 64) if col.mysql_type == "bigint unsigned" and n >= 1 << 63 else n
    if f == "decimal":
        with localcontext() as exact:
            exact.prec = 100
            unscaled = int(Decimal(str(server)).scaleb(p["scale"]))
        size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
        return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
    if f in ("float", "double"):
        return _f32(float(server)) if f == "float" else float(server)
    if f in ("date", "time", "year"):
        return int(server)
    if f == "datetime":
        return int(server) // 1000 if p["fsp"] <= 3 else int(server)
    if f == "timestamp":
        return _iso(Decimal(str(server)), p["fsp"], col.nullable)
    if f == "bytes":
        return base64.b64encode(bytes.fromhex(server)).decode()
    if f == "bit":
        return (
            int(server) == 1
            if p["bits"] == 1
            else base64.b64encode(int(server).to_bytes((p["bits"] + 7) // 8, "little")).decode()
        )
    if f == "geometry":
        srid, wkb = str(server).split(":")
        return {"wkb": base64.b64encode(bytes.fromhex(wkb)).decode(), "srid": int(srid)}
    return server  # CHAR, VARCHAR, TEXT, ENUM, SET, JSON (a string)


def debezium_matches(col: Col, ours: Any, expected: Any) -> bool:
    if col.family == "float" and ours is not None and expected is not None:
        return _f32(float(ours)) == expected  # a FLOAT32 reader reads the JSON number as a float32
    return bool(ours == expected)


def _iso(seconds: Decimal, fsp: int, nullable: bool) -> str | None:
    if seconds == 0:
        return None if nullable else "1970-01-01T00:00:00Z"
    whole = int(seconds)
    text = datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if fsp:
        text += "." + str(int((seconds - whole) * 1_000_000)).zfill(6)[:fsp]
    return text + "Z"


def _f32(value: float) -> float:
    result: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return result
