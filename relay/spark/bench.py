"""Benchmark: decode + apply throughput of the Spark helpers on local Spark, next to a plain ``from_json``.

``python -m relay.spark.bench [--records N] [--runs R] [--master local[2]] [--driver-memory 4g]
[--small 10000] [--large 10000000] [--batch 5000] [--load 10000000] [--load-batch 1000000]
[--batches 100] [--formats delta,iceberg] [--json]`` (or ``relay spark bench``) builds N canal-json
records of a sharded ``bench.orders`` table (inserts, updates, deletes; 10 % of them repeated), caches
them as a DataFrame in Spark's ``kafka`` schema, then times, R times each:

- ``from_json``: the baseline — ``from_json`` of the value with the FlatMessage schema, nothing else;
- ``changes(json)``: ``changes(df, codec="canal-json")`` (from_json + the change-row projection);
- ``changes(auto)``: ``changes(df)`` with per-record codec detection (the protobuf UDF in the plan);
- ``typed``: ``typed(changes(df), "bench.orders")`` (Spark types from mysqlType);
- ``apply``: ``apply_changes`` into an empty Delta table (dedup by key/sequence, files, commit).

Every step but ``apply`` ends in Spark's ``noop`` sink, so the figure is the work itself. Then, for each
of ``--formats`` (Delta, Iceberg): the apply growth — two mirrored tables, ``--small`` and ``--large``
rows (built in Spark from ``spark.range`` and published with ``write_table``), each get a batch of
``--batch`` changes (60 % updates, 30 % inserts, 10 % deletes on ids 5000 and up: recent rows of the
small table, a range both tables hold) R times after a warm-up — each run NEW changes of the same keys
(later sequences), so each run rewrites what it touches: ``<fmt>_apply_growth_ratio`` is the large
table's median over the small one's; the same with ``--batch`` UPDATEs spread uniformly over all ids
(``<fmt>_apply_growth_ratio_uniform``); the initial load of ``--load`` INSERTs (built in Spark and staged
as Parquet before the clock starts: ``relay.spark.bench_load``) through ``apply_changes`` in micro-batches
of ``--load-batch`` (``<fmt>_load_rows_per_second``); and the
table's data files after ``--batches`` batches with maintenance every ``MAINTAIN_EVERY`` commits and no
time travel kept (``<fmt>_files_after_N_batches``: the current version; ``…_on_storage…``: every data
file on disk, tombstones included). Prints the median seconds of each (``--json``: one JSON object, also
when a format fails: then with ``failed``). A measurement tool for people, not a test: it prints."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from relay.errors import OptionError
from relay.spark.bench_load import MYSQL_TYPES, TABLE, load_records, stage_records

MODES = ("delta", "iceberg", "delta-spark")  # --formats: a format, or Delta written by Spark's connector
MAINTAIN_EVERY = 10  # commits between maintenance runs in the file-count measurement
SQL_TYPES = {"id": -5, "status": 12, "amount": 3, "note": 2005, "at": 93}


def _value(seq: int, kind: str, row: dict[str, str | None], old: dict[str, str | None] | None) -> bytes:
    shard = int(row["id"] or 0) % 16
    message = {
        "id": seq,
        "database": "bench",
        "table": "orders",
        "pkNames": ["id"],
        "isDdl": False,
        "type": kind,
        "es": 1_700_000_000_000 + seq,
        "ts": 1_700_000_000_000 + seq,
        "sql": "",
        "sqlType": SQL_TYPES,
        "mysqlType": MYSQL_TYPES,
        "data": [row],
        "old": [old] if old else None,
        "gtid": "",
        "source": {
            "server": "127.0.0.1:3306",
            "serverId": 1,
            "serverUuid": "",
            "database": f"bench_{shard:02d}",
            "table": f"orders_{shard:02d}",
            "file": "mysql-bin.000001",
            "offset": seq,
            "gtid": "",
            "rowIndex": 0,
        },
        "sequence": seq,
    }
    return json.dumps(message, separators=(",", ":")).encode()


def records(n: int, seed: int = 7) -> list[tuple[bytes, bytes, str, int, int]]:
    """(key, value, topic, partition, offset) of ``n`` canal-json changes, ~10 % repeated. Updated and
    deleted keys are drawn from ``ids`` in O(1) (drawing from ``list(live)`` made the whole run quadratic:
    53 s for 100,000 records, minutes past that)."""
    rng = random.Random(seed)
    live: dict[int, dict[str, str | None]] = {}
    ids: list[int] = []  # live's keys, in no particular order
    out: list[tuple[bytes, bytes, str, int, int]] = []
    next_id, seq = 1, 1 << 32
    while len(out) < n:
        seq += 1
        op = rng.random()
        old: dict[str, str | None] | None = None
        if op < 0.5 or len(live) < 100:
            row: dict[str, str | None] = {
                "id": str(next_id),
                "status": "NEW",
                "amount": f"{rng.randint(0, 99999)}.25",
                "note": rng.choice([None, "", "note ü"]),
                "at": "2024-05-01 10:00:00.123",
            }
            live[next_id], kind = row, "INSERT"
            ids.append(next_id)
            next_id += 1
        elif op < 0.85:
            ident = ids[rng.randrange(len(ids))]
            old = {"status": live[ident]["status"]}
            row = {**live[ident], "status": rng.choice(["PAID", "SHIPPED"])}
            live[ident], kind = row, "UPDATE"
        else:
            row, kind = live.pop(_draw_out(ids, rng)), "DELETE"
        key = json.dumps({"id": row["id"]}).encode()
        rec = (key, _value(seq, kind, row, old), "bench.orders", int(row["id"] or 0) % 4, len(out))
        out.append(rec)
        if rng.random() < 0.1 and len(out) < n:
            out.append((*rec[:4], len(out)))
    return out[:n]


def _draw_out(ids: list[int], rng: random.Random) -> int:
    """A random element of ``ids``, removed in O(1) (the last one takes its place)."""
    at = rng.randrange(len(ids))
    ident, last = ids[at], ids.pop()
    if at < len(ids):
        ids[at] = last
    return ident


def batch_records(
    n: int, first_id: int = 5000, seq: int = 1 << 40
) -> list[tuple[bytes, bytes, str, int, int]]:
    """``n`` changes on ids ``first_id`` and up: updates, inserts (ids past the updated ones), deletes."""
    out = []
    for i in range(n):
        ident = first_id + i
        row: dict[str, str | None] = {
            "id": str(ident),
            "status": "PAID",
            "amount": f"{i}.25",
            "note": "batch",
            "at": "2024-05-01 10:00:00.123",
        }
        kind = "UPDATE" if i % 10 < 6 else "INSERT" if i % 10 < 9 else "DELETE"
        key = json.dumps({"id": row["id"]}).encode()
        out.append((key, _value(seq + i, kind, row, None), "bench.orders", ident % 4, i))
    return out


def _table(spark: Any, rows: int) -> Any:
    """A mirrored ``bench.orders`` of ``rows`` rows, ids 0..rows-1, built in Spark."""
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    ident = F.col("id")
    return spark.range(rows).select(
        ident,
        F.lit("NEW").alias("status"),
        (ident % 100000 + F.lit(0.25)).cast("decimal(12,2)").alias("amount"),
        F.when(ident % 7 == 0, F.lit("note ü")).alias("note"),
        F.lit("2024-05-01 10:00:00.123").cast("timestamp_ntz").alias("at"),
        F.concat(F.lit('["'), ident.cast("string"), F.lit('"]')).alias("_key"),
        ident.alias("_sequence"),
        F.lit(1_700_000_000_000).alias("_es"),
        F.concat(F.lit("bench_"), F.lpad((ident % 16).cast("string"), 2, "0")).alias("_source"),
    )


def uniform_records(n: int, rows: int, seq: int = 1 << 41) -> list[tuple[bytes, bytes, str, int, int]]:
    """``n`` UPDATEs spread uniformly over ids 0..``rows``-1 (every range bucket of the table)."""
    step = max(1, rows // n)
    out = []
    for i in range(n):
        ident = (i * step) % rows
        row: dict[str, str | None] = {
            "id": str(ident),
            "status": "PAID",
            "amount": f"{i}.25",
            "note": "spread",
            "at": "2024-05-01 10:00:00.123",
        }
        key = json.dumps({"id": row["id"]}).encode()
        out.append((key, _value(seq + i, "UPDATE", row, None), "bench.orders", ident % 4, i))
    return out


def _frame(spark: Any, rows: list[tuple[bytes, bytes, str, int, int]]) -> Any:
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    df = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")
    df = df.withColumn("timestamp", F.current_timestamp()).withColumn("timestampType", F.lit(0)).cache()
    df.count()
    return df


# Where the measured tables go: a local temporary directory, or --root (an object store) with its settings.
_WHERE: dict[str, Any] = {"root": None, "options": {}}


@contextlib.contextmanager
def _scratch() -> Iterator[str]:
    """A fresh root for one measurement (removed after, when local)."""
    if _WHERE["root"] is None:
        with tempfile.TemporaryDirectory() as out:
            yield out
    else:
        yield f"{_WHERE['root'].rstrip('/')}/bench-{uuid.uuid4().hex[:10]}"


def _target(mode: str, out: str, **keep: Any) -> Any:
    """``mode``: a format, or ``delta-spark`` (Delta written by Spark's connector: ``writer="spark"``)."""
    from relay.spark.storage import Storage
    from relay.spark.tables import MirrorTarget

    fmt, _, writer = mode.partition("-")
    storage = Storage(out, dict(_WHERE["options"]))
    catalog: dict[str, str] = {}
    if fmt == "iceberg" and not storage.is_local:
        # an object store has no place for pyiceberg's SQLite catalog: the bench keeps one per measured
        # root in a local temporary directory (a catalog server is not what is measured)
        if _WHERE.get("catalogs") is None:
            _WHERE["catalogs"] = tempfile.mkdtemp(prefix="relay-bench-catalogs-")
        catalog = {"uri": f"sqlite:///{_WHERE['catalogs']}/{out.rstrip('/').rsplit('/', 1)[-1]}.db"}
    return MirrorTarget(storage, fmt, catalog, writer=writer or "driver", **keep)


def _applies(spark: Any, target: Any, batches: list[Any]) -> float:
    """The median seconds of applying each of ``batches`` (record lists) after the first (a warm-up)."""
    from relay.spark.apply import apply_changes
    from relay.spark.decode import changes

    took = []
    for records in batches:
        df = _frame(spark, records)
        begin = time.perf_counter()
        apply_changes(changes(df, codec="canal-json"), target)
        took.append(time.perf_counter() - begin)
        df.unpersist()
    return statistics.median(took[1:])


def apply_growth(spark: Any, mode: str, sizes: tuple[int, int], batch: int, runs: int) -> dict[str, Any]:
    """Median apply seconds of a batch of ``batch`` changes on recent keys, and of one of ``batch`` UPDATEs
    spread uniformly over every key, on tables of ``sizes`` rows in format ``fmt``; the ratios
    large/small. Every run applies NEW changes (later sequences) to the same keys: it rewrites what
    it touches (a repeat of an applied batch would change, and write, nothing)."""
    from relay.spark.apply import write_table

    fmt = mode.replace("-", "_")
    figures: dict[str, Any] = {}
    medians: dict[str, list[float]] = {"recent": [], "uniform": []}
    for size in sizes:
        with _scratch() as out:
            target = _target(mode, out)
            begin = time.perf_counter()
            write_table(_table(spark, size), target, TABLE)
            figures[f"{fmt}_build_{size}_seconds"] = round(time.perf_counter() - begin, 3)
            sequences = [(1 << 40) + run * batch for run in range(runs + 1)]
            recent = _applies(spark, target, [batch_records(batch, seq=s) for s in sequences])
            spread = _applies(
                spark, target, [uniform_records(batch, size, seq=s + (1 << 41)) for s in sequences]
            )
        for kind, seconds in (("recent", recent), ("uniform", spread)):
            suffix = "" if kind == "recent" else "_uniform"
            figures[f"{fmt}_apply_{size}_rows{suffix}_seconds"] = round(seconds, 3)
            medians[kind].append(seconds)
    figures[f"{fmt}_apply_growth_ratio"] = round(medians["recent"][1] / medians["recent"][0], 3)
    figures[f"{fmt}_apply_growth_ratio_uniform"] = round(medians["uniform"][1] / medians["uniform"][0], 3)
    return figures


def load_and_files(spark: Any, mode: str, rows: int, batches: int, batch: int, chunk: int) -> dict[str, Any]:
    """The initial load rate of ``rows`` INSERTs through ``apply_changes`` in micro-batches of ``chunk``
    (read from their staged Parquet), then the table's data files after ``batches`` batches of ``batch``
    recent-key changes, with the maintenance of a mirror that keeps no time travel (every
    ``MAINTAIN_EVERY`` commits, retention 0): the files of the current version, and every data file on
    storage."""
    from relay.spark.apply import apply_changes
    from relay.spark.decode import changes
    from relay.spark.tables import MirrorTable

    fmt = mode.replace("-", "_")
    figures: dict[str, Any] = {}
    with _scratch() as out, tempfile.TemporaryDirectory(prefix="relay-bench-records-") as staged:
        target = _target(mode, out, retention_hours=0.0, maintain_every=MAINTAIN_EVERY)
        paths = stage_records(spark, rows, chunk, staged)
        begin = time.perf_counter()
        for path in paths:  # as micro-batches with maxOffsetsPerTrigger bring them
            apply_changes(changes(spark.read.parquet(path), codec="canal-json"), target)
        seconds = time.perf_counter() - begin
        figures[f"{fmt}_load_{rows}_rows_seconds"] = round(seconds, 3)
        figures[f"{fmt}_load_rows_per_second"] = round(rows / seconds)
        for i in range(batches):
            first = rows - 10 * batch + (i * batch) % (10 * batch)
            df = _frame(spark, batch_records(batch, first_id=max(first, 0), seq=(1 << 40) + i * batch))
            apply_changes(changes(df, codec="canal-json"), target)
            df.unpersist()
        mirror = MirrorTable(target, TABLE)
        state = mirror.rows.state()
        figures[f"{fmt}_commits"] = state.commits if state else 0
        figures[f"{fmt}_maintenance_runs"] = figures[f"{fmt}_commits"] // MAINTAIN_EVERY
        figures[f"{fmt}_files_after_{batches}_batches"] = sum(len(f) for f in mirror.rows.files().values())
        stored = len(list(Path(out).rglob("*.parquet"))) if _WHERE["root"] is None else -1
        figures[f"{fmt}_files_on_storage_after_{batches}_batches"] = stored  # -1: not counted (remote)
    return figures


def _time(action: Callable[[], Any], runs: int) -> float:
    took = []
    for _ in range(runs):
        begin = time.perf_counter()
        action()
        took.append(time.perf_counter() - begin)
    return statistics.median(took)


def _whole(least: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < least:
            raise argparse.ArgumentTypeError(f"expected a whole number of at least {least}, got {text!r}")
        return int(text)

    return parse


_positive, _count = _whole(1), _whole(0)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m relay.spark.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=_positive, default=200_000)
    parser.add_argument("--runs", type=_positive, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g", help="the Spark driver's heap (default 4g)")
    parser.add_argument("--small", type=_positive, default=10_000, help="rows of the small mirrored table")
    parser.add_argument(
        "--large", type=_positive, default=10_000_000, help="rows of the large mirrored table"
    )
    parser.add_argument("--batch", type=_positive, default=5_000, help="changes in the batch applied to both")
    parser.add_argument(
        "--load", type=_positive, default=10_000_000, help="rows of the initial load measured"
    )
    parser.add_argument(
        "--load-batch", type=_positive, default=1_000_000, help="records per micro-batch of the initial load"
    )
    parser.add_argument("--batches", type=_count, default=100, help="batches applied before counting files")
    parser.add_argument(
        "--formats",
        default="delta,iceberg,delta-spark",
        help="table formats measured; delta-spark: Delta written by Spark's connector (MERGE)",
    )
    parser.add_argument(
        "--root",
        help="where the measured tables go (default: a local temporary directory; Iceberg on an object "
        "store: with a SQLite catalog of the bench's own in a local temporary directory)",
    )
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object of every figure (also on a failure)"
    )
    parser.add_argument(
        "--bootstrap-servers", help="a broker: also compare Spark's kafka source with relay-kafka on it"
    )
    parser.add_argument(
        "--source-records", type=_positive, default=1_000_000, help="records of that comparison"
    )
    parser.add_argument("--skip-decode", action="store_true", help="leave out the decode steps")
    return parser.parse_args(argv)


def _decode(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The decode steps (and an apply into an empty table) on ``--records`` records, median seconds."""
    from pyspark.sql import functions as F  # noqa: N812 (pyspark's convention)

    from relay.spark.apply import apply_changes
    from relay.spark.decode import CANAL_JSON_TYPE, changes, typed

    df = _frame(spark, records(args.records))
    columns = list(MYSQL_TYPES.items())

    def noop(frame: Any) -> Callable[[], None]:
        return lambda: frame.write.format("noop").mode("overwrite").save()

    def apply() -> None:
        with tempfile.TemporaryDirectory() as out:
            apply_changes(changes(df, codec="canal-json"), out)  # a path: a Delta table

    steps: list[tuple[str, Callable[[], Any]]] = [
        (
            "from_json (baseline)",
            noop(df.select(F.from_json(F.col("value").cast("string"), CANAL_JSON_TYPE))),
        ),
        ("changes(canal-json)", noop(changes(df, codec="canal-json"))),
        ("changes(auto)", noop(changes(df))),
        ("typed", noop(typed(changes(df, codec="canal-json"), TABLE, columns))),
        ("apply_changes", apply),
    ]
    figures: dict[str, Any] = {}
    if not args.json:
        print(f"{args.records} canal-json records, {args.master}, median of {args.runs} runs after a warm-up")
    for name, action in steps:
        action()  # warm-up: code generation, Python workers
        seconds = _time(action, args.runs)
        figures[f"{name.split()[0]}_seconds"] = round(seconds, 3)
        if not args.json:
            print(f"  {name:<22} {seconds:7.3f} s  {args.records / seconds:>10,.0f} records/s", flush=True)
    figures["changes_vs_from_json"] = round(
        figures["changes(canal-json)_seconds"] / figures["from_json_seconds"], 3
    )
    df.unpersist()
    return figures


def _show(fmt: str, growth: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"{fmt}: apply of {args.batch} changes (new ones every run), median of {args.runs} runs:")
    for size in (args.small, args.large):
        recent = growth[f"{fmt}_apply_{size}_rows_seconds"]
        spread = growth[f"{fmt}_apply_{size}_rows_uniform_seconds"]
        print(f"  {size:>12,} rows  recent keys {recent:7.3f} s  uniform {spread:7.3f} s")
    print(f"  apply_growth_ratio {growth[f'{fmt}_apply_growth_ratio']:.2f}", end="")
    print(f"  apply_growth_ratio_uniform {growth[f'{fmt}_apply_growth_ratio_uniform']:.2f}")
    print(f"  load of {args.load:,} rows: {growth[f'{fmt}_load_rows_per_second']:,} rows/s")
    current = growth[f"{fmt}_files_after_{args.batches}_batches"]
    stored = growth[f"{fmt}_files_on_storage_after_{args.batches}_batches"]
    runs = growth[f"{fmt}_maintenance_runs"]
    print(
        f"  after {args.batches} batches: {current} data files in the current version, {stored} on storage "
        f"({runs} maintenance runs: every {MAINTAIN_EVERY} commits, retention 0)",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    modes = [f for f in args.formats.split(",") if f]
    for mode in modes:  # a bad --formats is refused before anything is measured
        if mode not in MODES:
            raise OptionError(f"--formats: expected some of {', '.join(MODES)}, got {mode!r}")
        _target(mode, tempfile.gettempdir())
    from relay.spark.mirror import local_session

    spark = local_session(args.master, "relay-spark-bench", driver_memory=args.driver_memory)
    spark.sparkContext.setLogLevel("ERROR")
    figures: dict[str, Any] = {"records": args.records, "master": args.master, "runs": args.runs}
    figures["driver_memory"] = args.driver_memory
    if args.bootstrap_servers:
        from relay.spark import bench_source

        rows = load_records(spark, 0, args.source_records)
        sources = bench_source.compare(spark, args.bootstrap_servers, rows, args.source_records, args.runs)
        figures.update(sources)
        if not args.json:
            bench_source.show(sources, args.runs)
    if not args.skip_decode:
        figures.update(_decode(spark, args))
    from relay.spark.storage import parse_options

    _WHERE.update(root=args.root, options=parse_options(args.storage_option, "--storage-option"))
    try:
        for mode in modes:
            growth = apply_growth(spark, mode, (args.small, args.large), args.batch, args.runs)
            growth.update(load_and_files(spark, mode, args.load, args.batches, args.batch, args.load_batch))
            figures.update(growth)
            if not args.json:
                _show(mode.replace("-", "_"), growth, args)
    except Exception as exc:
        figures["failed"] = f"{type(exc).__name__}: {exc}"  # the formats measured before it still count
        raise
    finally:
        spark.stop()
        if _WHERE.get("catalogs"):
            shutil.rmtree(_WHERE.pop("catalogs"), ignore_errors=True)
        if args.json:
            print(json.dumps(figures), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
