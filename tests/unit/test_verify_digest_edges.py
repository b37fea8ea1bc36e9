"""Forged topic values ``relay verify`` must hash, not crash on: a row digest exists for every text."""

from __future__ import annotations

from relay.ops.verify.digest import HashKind, canal_row_hash, column_text, digest_text


def test_a_lone_surrogate_gets_a_digest_unlike_any_server_text() -> None:
    forged = canal_row_hash([HashKind.TEXT], ["a\ud89b"])  # json.loads gives it for "a\\ud89b"
    assert forged != canal_row_hash([HashKind.TEXT], ["a"])
    assert digest_text(["\udc80"]) == b"1|\x80"  # the binlog decoder's escaped byte stays that byte


def test_a_float_beyond_its_range_is_compared_as_its_text() -> None:
    assert column_text(HashKind.FLOAT, "1e39") == "1e39"  # struct refuses to pack it: no OverflowError
    assert column_text(HashKind.FLOAT, "3.4028235E38") == "3.4028234663852886e38"
    assert column_text(HashKind.DOUBLE, "not a number") == "not a number"
