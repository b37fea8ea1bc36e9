"""Pure logic of the Spark reader: option grammar, admission control, data-loss checks, type mapping."""

from __future__ import annotations

import pytest

from relay.spark import offsets as off
from relay.spark.types import spark_type_sql

A0, A1 = ("a", 0), ("a", 1)


def test_start_precedence_and_json() -> None:
    assert off.parse_start({}, "latest").kind == "latest"
    assert off.parse_start({"startingoffsets": "earliest"}, "latest").kind == "earliest"
    spec = off.parse_start({"startingoffsets": '{"a":{"0":5,"1":-2}}'}, "latest")
    assert spec.kind == "offsets" and spec.offsets == {A0: 5, A1: -2}
    both = {"startingoffsets": "earliest", "startingtimestamp": "1000", "startingoffsetsbytimestamp": "{}"}
    assert off.parse_start(both, "latest") == off.StartSpec("timestamp", timestamp=1000)
    with pytest.raises(off.OptionError, match="startingOffsets"):
        off.parse_start({"startingoffsets": "{bad"}, "latest")
    with pytest.raises(off.OptionError, match="endingOffsets"):
        off.parse_end({"endingoffsets": '{"a":{"0":-2}}'})


def test_offsets_json_round_trip() -> None:
    offsets = {A1: 7, A0: 3, ("b", 10): 1}
    data = off.to_json(offsets)
    assert data == {"a": {"0": 3, "1": 7}, "b": {"10": 1}}
    assert off.from_json(data) == offsets


def test_limit_splits_by_lag_exactly() -> None:
    start = {A0: 0, A1: 100}
    end = {A0: 90, A1: 110}
    limited = off.limit_offsets(start, end, 20)
    assert sum(limited[tp] - start[tp] for tp in end) == 20
    assert limited[A0] - 0 >= limited[A1] - 100  # more lag, bigger share
    assert off.limit_offsets(start, end, 1000) == end
    # A tiny budget still makes progress.
    one = off.limit_offsets(start, end, 1)
    assert sum(one[tp] - start[tp] for tp in end) == 1


def test_data_loss_is_an_error_or_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    lows, ends = {A0: 10, A1: 0}, {A0: 20, A1: 5}
    with pytest.raises(off.DataLossError, match="below the log start offset 10"):
        off.check_retained({A0: 3, A1: 0}, lows, ends, fail=True)
    with pytest.raises(off.DataLossError, match="went backwards"):
        off.check_retained({A0: 10, A1: 9}, lows, ends, fail=True)
    assert off.check_retained({A0: 3, A1: 9}, lows, ends, fail=False) == {A0: 10, A1: 0}
    assert "data loss" in caplog.text
    assert off.check_retained({A0: 15, A1: 5}, lows, ends, fail=True) == {A0: 15, A1: 5}


@pytest.mark.parametrize(
    ("mysql", "spark"),
    [
        ("decimal(12,2)", "decimal(12,2)"),
        ("decimal(65,30)", "string"),
        ("bigint", "bigint"),
        ("bigint unsigned", "decimal(20,0)"),
        ("int unsigned", "bigint"),
        ("tinyint", "tinyint"),
        ("varchar(16)", "string"),
        ("datetime(6)", "timestamp_ntz"),
        ("timestamp(3)", "timestamp"),
        ("date", "date"),
        ("time(3)", "string"),
        ("varbinary(8)", "binary"),
        ("longblob", "binary"),
        ("double", "double"),
        ("float", "float"),
        ("bit(5)", "bigint"),
        ("year", "int"),
        ("enum('a','b')", "string"),
        ("json", "string"),
    ],
)
def test_mysql_types(mysql: str, spark: str) -> None:
    assert spark_type_sql(mysql) == spark
