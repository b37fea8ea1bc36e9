"""COLUMN_DEFAULT as the canal text MySQL gave existing rows (relay.ops.verify.source)."""

from __future__ import annotations

import pytest

from relay.ops.verify.source import NO_LITERAL, literal_default


@pytest.mark.parametrize(
    ("default", "nullable", "extra", "expected"),
    [
        ("7", False, "", "7"),  # a number, MariaDB and MySQL alike
        ("-1.50", False, "", "-1.50"),
        ("'it''s'", True, "", "it's"),  # MariaDB quotes a literal, doubling quotes
        ("''", False, "", ""),
        ("NULL", True, "", None),  # MariaDB: NULL as text
        (None, True, "", None),  # MySQL: SQL NULL
        (None, False, "", NO_LITERAL),  # NOT NULL without a default: an implicit one, not known here
        ("current_timestamp()", True, "", NO_LITERAL),  # MariaDB: an expression as itself
        ("CURRENT_TIMESTAMP", False, "DEFAULT_GENERATED", NO_LITERAL),  # MySQL marks it
        ("(rand())", False, "DEFAULT_GENERATED", NO_LITERAL),
        ("abc", False, "", "abc"),  # MySQL: a literal bare
    ],
)
def test_a_column_default_as_the_rows_value(
    default: str | None, nullable: bool, extra: str, expected: object
) -> None:
    assert literal_default(default, nullable, extra) == expected
