"""The benchmark's pure logic: percentiles, medians, ratios, the table, option parsing — and the hot-path
fast paths it drove (JSON fragments, compiled row readers) against the reference code they replace.
No timing is asserted anywhere: speed is what ``relay bench`` reports, not what a test checks."""

from __future__ import annotations

import json
import random
import struct

import pytest

import relay.kafka.canal_json as codec_json
from relay.binlog import rows as rows_mod
from relay.binlog import types as t
from relay.binlog.events import ColumnMeta
from relay.cli.bench import options_from_args, parse_settings
from relay.cli.main import build_parser
from relay.dev.bench import workloads as wl
from relay.dev.bench.stats import (
    Latency,
    Repeated,
    StallResult,
    WorkloadResult,
    median,
    percentile,
    ratio,
    render_stall,
    render_table,
    render_targets,
)
from relay.errors import ArgumentError


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    values = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert percentile(values, 0) == 15.0
    assert percentile(values, 100) == 50.0
    assert percentile(values, 50) == 35.0
    assert percentile(values, 40) == pytest.approx(29.0)  # numpy.percentile(values, 40)
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0


def test_percentile_does_not_depend_on_order_and_refuses_nonsense() -> None:
    data = [random.Random(3).random() for _ in range(101)]
    assert percentile(data, 50) == sorted(data)[50]
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_median_of_even_and_odd_counts() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_ratio_is_unknown_without_both_figures() -> None:
    assert ratio(30.0, 10.0) == 3.0
    assert ratio(None, 10.0) is None
    assert ratio(30.0, None) is None
    assert ratio(30.0, 0.0) is None


def test_repeated_reports_the_median_of_its_samples() -> None:
    assert Repeated().median is None
    r = Repeated()
    for x in (9.0, 1.0, 5.0):
        r.add(x)
    assert r.median == 5.0
    assert r.to_json() == {"median": 5.0, "samples": [9.0, 1.0, 5.0]}


def test_latency_from_seconds_in_milliseconds() -> None:
    lat = Latency.from_seconds([0.010] * 98 + [0.020, 0.500], offered=1000, achieved=990, missing=2)
    assert lat.samples == 100 and lat.missing == 2
    assert lat.p50_ms == pytest.approx(10.0)
    assert lat.p99_ms == pytest.approx(20.0 + (500.0 - 20.0) * 0.01)
    assert lat.max_ms == pytest.approx(500.0)
    empty = Latency.from_seconds([], offered=1000, achieved=0, missing=5)
    assert empty.p99_ms is None and empty.missing == 5


def _result() -> WorkloadResult:
    r = WorkloadResult("W1", "single rows", 20_000, 10 << 20)
    for relay, stock, naive, ceiling in (
        (12_000.0, 4_000.0, 1_500.0, 60_000.0),
        (15_000.0, 5_000.0, 1_600.0, 40_000.0),
        (9_000.0, 4_500.0, 1_400.0, 50_000.0),
    ):
        r.relay.add(relay)
        r.stock.add(stock)
        r.naive.add(naive)
        r.ceiling.add(ceiling)
        r.relay_rss_mb.add(90.0)
    r.latency = Latency.from_seconds([0.004, 0.006, 0.008], 1000, 1000, 0)
    return r


def test_ratios_are_of_the_medians() -> None:
    r = _result()
    assert r.relay.median == 12_000.0 and r.stock.median == 4_500.0
    assert r.vs_stock == pytest.approx(12_000 / 4_500)
    assert r.vs_naive == pytest.approx(12_000 / 1_500)
    data = r.to_json()
    assert data["relay_rows_per_s"]["median"] == 12_000.0
    assert data["relay_vs_stock"] == pytest.approx(2.6667, rel=1e-3)
    json.dumps(data)  # serializable as is


def test_table_shows_medians_ratios_and_latency_aligned() -> None:
    text = render_table([_result(), WorkloadResult("W2", "batches", 50_000, 1)])
    lines = text.splitlines()
    assert lines[0].split()[0] == "workload" and set(lines[1]) <= {"-", " "}
    w1 = lines[2].split()
    assert w1[:6] == ["W1", "20,000", "12,000", "4,500", "1,500", "50,000"]
    assert w1[6:11] == ["2.7x", "8.0x", "24%", "6.0", "8.0"]  # p99 of 4, 6, 8 ms: 7.96
    assert lines[3].split()[2:] == ["-"] * 11  # nothing measured: dashes, not zeros
    assert len({len(line) for line in lines}) == 1  # every line equally wide


def test_markdown_table_for_the_readme() -> None:
    text = render_table([_result()], markdown=True)
    lines = text.splitlines()
    assert lines[0].startswith("| workload |") and lines[1].startswith("|---|")
    assert lines[2].startswith("| W1 | 20,000 | 12,000 |")


def test_targets_say_met_missed_or_not_measured() -> None:
    text = render_targets([_result(), WorkloadResult("W4", "big rows", 100, 1)]).splitlines()
    assert text[0].startswith("W1: vs stock 2.7x (target 5.0x): MISSED; p99 8.0 ms (target 50 ms): met")
    assert text[0].endswith("24% of the produce-only ceiling")
    assert text[1] == "W4: vs stock - (target 1.5x): not measured; p99 - ms (target 50 ms): not measured"


def test_stall_verdict_against_the_store_budget() -> None:
    ok = StallResult(1 << 30, 150.0, 16.0, 15.8, 0, 30.0)
    assert ok.limit_mb == 216.0 and ok.to_json()["within_limit"] is True
    assert "within" in render_stall(ok)
    over = StallResult(1 << 30, 400.0, 16.0, 15.8, 0, 30.0)
    assert over.to_json()["within_limit"] is False and "OVER" in render_stall(over)


def test_command_line_options() -> None:
    args = build_parser().parse_args(
        ["bench", "--quick", "--workloads", "w2,W3", "--w2-rows", "500", "--set", "publish.batch_size=512"]
    )
    opts = options_from_args(args)
    assert opts.workloads == ("W2", "W3") and opts.repeat == 1
    assert opts.rows["W2"] == 500 and opts.rows["W3"] == 10_000
    assert opts.settings == {"publish.batch_size": 512}
    default = options_from_args(build_parser().parse_args(["bench"]))
    assert default.repeat == 3 and default.stall_mb == 1024
    assert default.workloads == ("W1", "W2", "W3", "W4", "W5") and default.rows["W5"] == 1_000_000
    with pytest.raises((SystemExit, ArgumentError)):  # the parser's type, else the options' check
        options_from_args(build_parser().parse_args(["bench", "--workloads", "W9"]))


def test_settings_values_are_read_as_yaml() -> None:
    assert parse_settings(["publish.batch_wait_seconds=0.005", "kafka.ddl_topic=null"]) == {
        "publish.batch_wait_seconds": 0.005,
        "kafka.ddl_topic": None,
    }
    with pytest.raises(ArgumentError, match="--set"):
        parse_settings(["no_section=1"])


# ---- the fast paths equal the reference ----------------------------------------------------------------

NASTY = [
    "",
    "a",
    'q"uote',
    "back\\slash",
    "ctl\x00\x1f\n\t",
    "ünï€😀",
    "latin \xff\x80",
    "%s %d %%",
    "</script>",
]


@pytest.mark.parametrize("value", NASTY)
def test_json_object_text_equals_dumps_of_the_dict(value: str) -> None:
    names = ("id", "na%me", 'q"n', "ü")
    keys = tuple(f"{codec_json.dumps(n)}:" for n in names)
    form = codec_json.object_format(keys)
    for values in ((value, "1", None, value), (None, None, None, None), ("x", value, "y", "z")):
        assert codec_json.object_text(form, values) == codec_json.dumps(dict(zip(names, values, strict=True)))


def test_json_old_text_equals_the_changed_columns_dict() -> None:
    names = ("a", "b", "c")
    keys = tuple(f"{codec_json.dumps(n)}:" for n in names)
    before, after = ("1", None, 'x"'), ("1", "2", "y")
    assert (
        codec_json.old_text(keys, before, after)
        == "[" + codec_json.dumps(codec_json.changed(names, before, after)) + "]"
    )
    assert codec_json.old_text(keys, before, before) == "null"


def _col(index: int, type_code: int, meta: int = 0, unsigned: bool = False) -> ColumnMeta:
    return ColumnMeta(
        index=index,
        name=f"c{index}",
        type_code=type_code,
        meta=meta,
        nullable=True,
        unsigned=unsigned,
        charset=45,  # utf8mb4
        is_key=False,
        mysql_type="x",
        sql_type=0,
        length=0,
    )


def test_compiled_row_reader_equals_the_generic_loop() -> None:
    """Every null pattern of a row mixing inlined (ints, double) and called (varchar, date) decoders."""
    columns = (
        _col(0, t.LONGLONG),
        _col(1, t.LONG, unsigned=True),
        _col(2, t.DOUBLE, meta=8),
        _col(3, t.VARCHAR, meta=64),
        _col(4, t.SHORT),
        _col(5, t.TINY, unsigned=True),
        _col(6, t.DATE),
    )
    plan = rows_mod._Plan(columns, rows_mod.TimestampZone())
    steps = plan.steps(plan.full)
    values: dict[int, bytes] = {
        0: struct.pack("<q", -(2**62)),
        1: struct.pack("<I", 4_000_000_000),
        2: struct.pack("<d", 0.1),
        3: bytes([5]) + "héé".encode()[:5],
        4: struct.pack("<h", -7),
        5: bytes([255]),
        6: (2026 * 16 * 32 + 11 * 32 + 21).to_bytes(3, "little"),
    }
    for nulls in range(1 << len(columns)):
        body = b"".join(v for i, v in values.items() if not nulls >> i & 1)
        data = nulls.to_bytes(1, "little") + body
        want = rows_mod._image(data, 0, steps, len(columns))
        reader = rows_mod._compile_reader(steps, nulls, len(columns))
        assert reader(data, 1) == want, f"null bitmap {nulls:07b}"


# ---- workloads: the pure parts ---------------------------------------------------------------------------


class _FakeCursor:
    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def __enter__(self) -> _FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, sql: str, args: object = None) -> int:
        assert sql == "SHOW BINARY LOGS"
        return len(self.rows)

    def fetchall(self) -> list[tuple[str, int]]:
        return self.rows


class _FakeConn:
    def __init__(self, rows: list[tuple[str, int]]) -> None:
        self.rows = rows

    def cursor(self) -> _FakeCursor:
        return _FakeCursor(self.rows)


def test_backlog_bytes_within_and_across_binlog_files() -> None:
    conn = _FakeConn([("mysql-bin.000001", 1000), ("mysql-bin.000002", 500), ("mysql-bin.000003", 300)])
    assert wl.binlog_bytes(conn, ("mysql-bin.000002", 100), ("mysql-bin.000002", 400)) == 300
    # 900 left in file 1, file 2 from its header (offset 4) to its end, 200 - 4 of file 3
    assert wl.binlog_bytes(conn, ("mysql-bin.000001", 100), ("mysql-bin.000003", 200)) == 900 + 496 + 196


def test_workload_rows_have_eleven_columns_and_w4_rows_about_4_kb() -> None:
    small, big = wl.row(7), wl.row(7, big=True)
    assert len(small) == len(big) == len(wl.COLUMNS.split(", ")) == 11
    assert 4000 <= len(big[9]) + len(big[10]) <= 4200
    assert {wl.rows_per_step(n) for n in wl.STEP_WORKLOADS} == {1, 10, 100, 1000}


def test_w5_targets_say_vs_stock_and_peak_rss_against_the_bound() -> None:
    opts = options_from_args(
        build_parser().parse_args(["bench", "--workloads", "W5", "--w5-rows", "5000000"])
    )
    assert opts.workloads == ("W5",) and opts.rows["W5"] == 5_000_000
    assert opts.store_budget_mb == 16.0 and opts.rss_bound_mb == 216.0
    bigger = options_from_args(build_parser().parse_args(["bench", "--set", "store.memunit=4096"]))
    assert bigger.rss_bound_mb == 64.0 + 200.0
    r = WorkloadResult("W5", "bulk", 1_400_000, 1 << 27, rss_bound_mb=216.0)
    for relay, stock, rss in (
        (70_000.0, 20_000.0, 150.0),
        (66_000.0, 21_000.0, 190.0),
        (60_000.0, 19_000.0, 160.0),
    ):
        r.relay.add(relay)
        r.stock.add(stock)
        r.relay_rss_mb.add(rss)
    line = render_targets([r])
    assert line == (
        "W5: vs stock 3.3x (target 3.0x): met; peak RSS 190 MB (bound 216 MB: store budget 16 + 200): within"
    )
    assert r.to_json()["rss_within_bound"] is True
    r.relay_rss_mb.add(230.0)  # one drain over the bound is over, whatever the median
    assert render_targets([r]).endswith("peak RSS 230 MB (bound 216 MB: store budget 16 + 200): OVER")
