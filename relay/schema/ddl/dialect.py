"""The SQL dialect the schema history reads DDL with: sqlglot's MySQL, taught the column types it lacks.

Owns ``DIALECT``. sqlglot's MySQL dialect refuses or mis-reads some column types a server accepts, and a
statement it cannot read stops the relay (or, with full row metadata, leaves the table to be learned
from the binlog). What is added here, each as the MySQL and MariaDB manuals define the type:

* ``FLOAT UNSIGNED`` / ``FLOAT(p[,s]) UNSIGNED``: sqlglot raises "Cannot convert FLOAT to unsigned";
  here it parses as FLOAT with the data type's ``unsigned`` argument set (``unsigned_float``);
* ``REAL``: a DOUBLE (MySQL's default; sqlglot reads it as FLOAT) — the binlog writes a DOUBLE;
* spatial subtypes (POINT, LINESTRING, POLYGON, MULTIPOINT, MULTILINESTRING, MULTIPOLYGON,
  GEOMETRYCOLLECTION, GEOMCOLLECTION) and MariaDB's INET4, INET6 (and UUID, which sqlglot knows):
  sqlglot has no type for most of them; with user-defined types allowed they parse as a named type,
  which ``relay.schema.ddl.columns`` maps (spatial → GEOMETRY, the binlog's type for all of them).

Pure and stateless; used by ``relay.schema.ddl.apply`` and ``relay.schema.ddl.columns`` on the thread
applying a statement.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.tokens import TokenType  # type: ignore[attr-defined]


class RelayMySQL(MySQL):
    """MySQL as sqlglot reads it, plus the types listed in the module docstring."""

    SUPPORTS_USER_DEFINED_TYPES = True

    class Tokenizer(MySQL.Tokenizer):
        KEYWORDS: ClassVar[dict[str, Any]] = {**MySQL.Tokenizer.KEYWORDS, "REAL": TokenType.DOUBLE}

    class Parser(MySQL.Parser):  # type: ignore[misc,valid-type]
        SIGNED_TO_UNSIGNED_TYPE_TOKEN: ClassVar[dict[Any, Any]] = {
            **MySQL.Parser.SIGNED_TO_UNSIGNED_TYPE_TOKEN,
            TokenType.FLOAT: TokenType.FLOAT,  # kept a FLOAT; ``_parse_types`` records the UNSIGNED
        }

        def _parse_types(self, *args: Any, **kwargs: Any) -> Any:
            parsed = super()._parse_types(*args, **kwargs)
            if (
                isinstance(parsed, exp.DataType)
                and parsed.this == exp.DataType.Type.FLOAT
                and self._prev is not None
                and self._prev.text.upper() == "UNSIGNED"
            ):
                parsed.set("unsigned", True)
            return parsed


DIALECT = RelayMySQL()


def unsigned_float(dtype: exp.DataType) -> bool:
    """Whether a FLOAT data type was declared UNSIGNED (``RelayMySQL``)."""
    return bool(dtype.args.get("unsigned"))
