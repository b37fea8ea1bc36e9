"""MySQL column types (canal's ``mysqlType`` text) → Spark SQL types. Pure functions, any thread.

``decimal(p,s)`` → decimal(p,s) (text when p > 38, Spark's limit); tinyint/smallint/mediumint/int/bigint
→ the narrowest Spark integer holding every value, unsigned widened one step (bigint unsigned →
decimal(20,0)); float → float, double/real → double; bit(n) → long for n ≤ 63 and bit(64) → decimal(20,0)
(canal's text is the unsigned value: decimal keeps 2^63..2^64-1 exact and numeric, where binary would
neither sum nor compare as a number); year → int; date → date; datetime →
timestamp_ntz (MySQL DATETIME has no zone); timestamp → timestamp (an instant); binary/varbinary/*blob/
geometry → binary (canal's ISO-8859-1 text, one char per byte); time, char/varchar/*text, enum, set,
json → string. Unknown types → string, so nothing is lost.
"""

from __future__ import annotations

import re

_INTS = {
    "tinyint": ("tinyint", "smallint"),
    "smallint": ("smallint", "int"),
    "mediumint": ("int", "int"),
    "int": ("int", "bigint"),
    "integer": ("int", "bigint"),
    "bigint": ("bigint", "decimal(20,0)"),
}
_SIMPLE = {
    "float": "float",
    "double": "double",
    "real": "double",
    "bit": "bigint",
    "year": "int",
    "date": "date",
    "datetime": "timestamp_ntz",
    "timestamp": "timestamp",
    "binary": "binary",
    "varbinary": "binary",
    "tinyblob": "binary",
    "blob": "binary",
    "mediumblob": "binary",
    "longblob": "binary",
    "geometry": "binary",
}
_DECIMAL = re.compile(r"(?:decimal|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
MAX_PRECISION = 38


def spark_type_sql(mysql_type: str) -> str:
    """The Spark SQL type name for a canal ``mysqlType`` text (``decimal(12,2)``, ``int unsigned``…)."""
    text = mysql_type.strip().lower()
    base = re.split(r"[\s(]", text, maxsplit=1)[0]
    if base in _INTS:
        signed, unsigned = _INTS[base]
        return unsigned if "unsigned" in text else signed
    if base in ("decimal", "numeric"):
        match = _DECIMAL.match(text)
        precision, scale = (int(match.group(1)), int(match.group(2) or 0)) if match else (10, 0)
        return f"decimal({precision},{scale})" if precision <= MAX_PRECISION else "string"
    if base == "bit" and re.search(r"\(\s*64\s*\)", text):
        return "decimal(20,0)"  # up to 2^64-1: a bigint holds only 2^63-1
    return _SIMPLE.get(base, "string")
