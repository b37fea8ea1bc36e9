"""Consistent cuts, proved with an invariant no single table shows (``tests.spark.bank``).

A real relay (real MariaDB binlog → real Apache Kafka, ``kafka.transaction_topic`` on) publishes the bank
workload while it runs: transfers between checking and savings accounts sharded over two databases, orders
with their items, deletions of both. ``relay spark mirror --transaction-topic`` runs as its own process (its
own Spark) with small micro-batches (``--max-offsets-per-trigger``), so transactions span micro-batches,
partitions and topics and the hold-back has work; it is SIGKILLed — when it can be caught between two
tables' commits of a micro-batch — and started again from its checkpoint.

All the while the test reads, again and again, with the format's own library (deltalake / pyiceberg, not
Spark and not our reading code): (1) the latest cut — ``relay.spark.cut.find_cut`` names the versions — in
which the total balance must be constant and no order lack an item, EVERY time; (2) each table's latest
version, which must break the invariant at least once in the run: a run where it never does proves nothing,
and the test fails saying so. At the end the cut equals SELECT, and so does DuckDB over the data files that
``relay spark cut --json`` lists for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from relay.errors import CutError
from relay.spark.cut import Cut, find_cut, table_logs
from relay.spark.storage import Storage
from relay.spark.tables import MirrorTarget
from tests.integration.relay_harness import REPO_ROOT, RelayThread, master_position, wait_for, write_configs
from tests.spark import bank
from tests.spark.conftest import BUCKET_NAME

COLUMNS = {
    "checking": ("id", "balance"),
    "savings": ("id", "balance"),
    "orders": ("id", "n_items", "total"),
    "items": ("order_id", "line", "amount"),
}


class MirrorProcess:
    """``relay -v spark mirror …`` in its own process group (its JVM and Python workers with it), so a
    SIGKILL of the group is a crash of the whole job."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log_path = args, log
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "-v", "spark", "mirror", *self.args],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def kill(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(30)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def bank_prefix(mysql_service: Any) -> Iterator[str]:
    prefix = f"bk{time.monotonic_ns() % 10**8}"
    with contextlib.closing(mysql_service.connect()) as conn:
        bank.create(conn, prefix)
    yield prefix
    with contextlib.closing(mysql_service.connect()) as conn:
        bank.drop(conn, prefix)


def _delta_read(target: MirrorTarget, table: str, version: int | None) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    uri = f"{target.storage.root}/{table}"
    options = {} if target.storage.is_local else dict(target.storage.options)
    got = DeltaTable(uri, version=version, storage_options=options).to_pyarrow_table()
    return pa.table(got).select(list(COLUMNS[table.split(".", 1)[1]])).to_pylist()


def _iceberg_catalog(target: MirrorTarget) -> Any:
    from pyiceberg.catalog import load_catalog

    props = {"type": "sql", "uri": f"sqlite:///{target.storage.root}/_relay_catalog.sqlite", **target.catalog}
    if not target.storage.is_local:
        s3 = target.storage.options
        props.update(
            {
                "s3.endpoint": s3["AWS_ENDPOINT_URL"],
                "s3.access-key-id": s3["AWS_ACCESS_KEY_ID"],
                "s3.secret-access-key": s3["AWS_SECRET_ACCESS_KEY"],
                "s3.region": s3["AWS_REGION"],
            }
        )
    return load_catalog("relay", **props)


def _iceberg_read(catalog: Any, table: str, version: int | None) -> list[dict[str, Any]]:
    from pyiceberg.exceptions import NoSuchTableError

    db, name = table.split(".", 1)
    try:
        found = catalog.load_table((db, name))
    except NoSuchTableError:
        return []
    return found.scan(snapshot_id=version).to_arrow().select(list(COLUMNS[name])).to_pylist()


class Reader:
    """Reads the mirror as a user would, with the format's own library."""

    def __init__(self, target: MirrorTarget, prefix: str) -> None:
        self.target, self.prefix = target, prefix
        self.catalog: Any = None  # Iceberg: opened once the mirror has made it (before, no table exists)

    def table(self, name: str, version: int | None) -> list[dict[str, Any]]:
        full = f"{self.prefix}.{name}"
        if self.target.format == "iceberg":
            if self.catalog is None:
                local = self.target.storage.is_local and "uri" not in self.target.catalog
                if local and not Path(self.target.storage.root, "_relay_catalog.sqlite").exists():
                    return []
                self.catalog = _iceberg_catalog(self.target)
            return _iceberg_read(self.catalog, full, version)
        if version is None and not _delta_exists(self.target, full):
            return []
        return _delta_read(self.target, full, version)

    def cut(self, cut: Cut) -> dict[str, list[dict[str, Any]]]:
        """The tables at the cut's versions (a table the cut does not hold did not exist yet: no rows)."""
        return {
            name: self.table(name, cut.tables[f"{self.prefix}.{name}"].version)
            if f"{self.prefix}.{name}" in cut.tables
            else []
            for name in bank.TABLES
        }

    def latest(self) -> dict[str, list[dict[str, Any]]]:
        """Each table's latest version, one after the other (what a reader without cuts sees)."""
        return {name: self.table(name, None) for name in bank.TABLES}


def _delta_exists(target: MirrorTarget, table: str) -> bool:
    from deltalake import DeltaTable

    options = {} if target.storage.is_local else dict(target.storage.options)
    return bool(DeltaTable.is_deltatable(f"{target.storage.root}/{table}", storage_options=options))


def _as_set(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {tuple(int(v) if v is not None else None for v in r.values()) for r in rows}


def _same(got: dict[str, list[dict[str, Any]]], want: dict[str, list[dict[str, Any]]]) -> bool:
    return all(
        _as_set(got[t]) == _as_set([{c: r[c] for c in COLUMNS[t]} for r in want[t]]) for t in bank.TABLES
    )


def _diff(got: dict[str, list[dict[str, Any]]], want: dict[str, list[dict[str, Any]]]) -> str:
    out = []
    for t in bank.TABLES:
        g, w = _as_set(got[t]), _as_set([{c: r[c] for c in COLUMNS[t]} for r in want[t]])
        if g != w:
            out.append(f"{t}: {len(g - w)} rows not in the source's (e.g. {sorted(g - w)[:3]}), "
                       f"{len(w - g)} missing (e.g. {sorted(w - g)[:3]})")  # fmt: skip
    return "; ".join(out)


def _logs_text(target: MirrorTarget) -> str:
    return "; ".join(
        f"{name} batches {log.batches} commits {[(c.version, c.batch) for c in log.commits]}"
        for name, log in table_logs(target).items()
    )


def _incomplete_batch(target: MirrorTarget, cut: Cut) -> bool:
    """Whether a table already committed a micro-batch past the cut's: the newest is half committed."""
    logs = table_logs(target)
    return any(
        log.commits and log.commits[0].app == cut.app and log.commits[0].batch > cut.batch
        for log in logs.values()
    )


def bank_relay(folder: Path, mysql_service: Any, bootstrap: str, prefix: str, conn: Any) -> Path:
    """The relay's config for the bank workload: from the binlog's end now, its databases only, the
    transaction topic ``{prefix}.txn`` on."""
    return write_configs(
        folder,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=bank.mapping(prefix),
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={"kafka": {"transaction_topic": f"{prefix}.txn"}},
    )


def run_invariant(
    mysql_service: Any, kafka_service: Any, prefix: str, tmp: Path, target: MirrorTarget, budget: int = 400
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    conn = mysql_service.connect()
    cfg = bank_relay(tmp / "relay", mysql_service, bootstrap, prefix, conn)
    args = [
        "--bootstrap-servers", bootstrap, "--topics", ",".join(bank.topics(prefix)),
        "--transaction-topic", f"{prefix}.txn", "--out", target.storage.root, "--format", target.format,
        "--checkpoint", str(tmp / "checkpoint"), "--trigger-seconds", "1",
        "--max-offsets-per-trigger", "400",
    ]  # fmt: skip
    for key, value in target.storage.options.items():
        args += ["--storage-option", f"{key}={value}"]
    for key, value in target.catalog.items():
        args += ["--catalog-option", f"{key}={value}"]
    mirror = MirrorProcess(args, tmp / "mirror.log")
    reader = Reader(target, prefix)
    seed = int(os.environ.get("RELAY_BANK_SEED", "7"))  # the writers' choices; printed on failure
    cut_reads = latest_reads = latest_broken = 0
    killed_mid_batch = False
    cuts: set[str] = set()  # the distinct transactions the cuts read were at
    after_restart: set[str] = set()
    try:
        with RelayThread(cfg):
            opening = bank.open_accounts(conn, prefix)
            mirror.start()
            with bank.Writers(mysql_service.connect, prefix, seed=seed, budget=budget) as writers:
                killed_at = None
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:
                    assert mirror.alive() or killed_at is not None, mirror.log()[-3000:]
                    try:
                        cut = find_cut(target)
                    except CutError:
                        time.sleep(0.2)  # no cut yet (nothing mirrored): wait for the first
                        continue
                    read = reader.cut(cut)
                    broken = bank.violations(read)
                    assert not broken, (
                        f"seed {seed}: the cut at {cut.transaction} (micro-batch {cut.batch}, versions "
                        f"{ {n: t.version for n, t in cut.tables.items()} }) breaks it: {broken[:5]}; the "
                        f"tables' logs now: {_logs_text(target)}"
                    )
                    # The cut is the source's state right after its transaction: the committed
                    # transactions replayed in GTID order up to it (not only a state that keeps the sums).
                    want = bank.replay(writers.log_now(opening), bank.gtid_seq(cut.transaction.id))
                    assert _same(read, want), (
                        f"seed {seed}: the cut at {cut.transaction} is not the source after it: "
                        f"{_diff(read, want)}"
                    )
                    cut_reads += 1
                    cuts.add(cut.transaction.id)
                    if killed_at is not None and mirror.alive():
                        after_restart.add(cut.transaction.id)
                    latest_reads += 1
                    if bank.violations(reader.latest()):
                        latest_broken += 1
                    if (
                        killed_at is None
                        and len(cuts) >= 2
                        and (_incomplete_batch(target, cut) or cut_reads > 200)
                    ):
                        killed_mid_batch = _incomplete_batch(target, cut)
                        mirror.kill()  # a crash, between two tables' commits when caught there
                        killed_at = time.monotonic()
                    elif killed_at is not None and not mirror.alive() and time.monotonic() - killed_at > 3:
                        mirror.start()  # the same checkpoint: the half-committed micro-batch is run again
                    if len(after_restart) >= 2 and cut_reads >= 40 and latest_broken:
                        break
            expected = bank.select(conn, prefix)
            everything = bank.replay(writers.log_now(opening), 2**62)
            assert _same({t: [{c: r[c] for c in COLUMNS[t]} for r in rows] for t, rows in expected.items()},
                         everything), "the replay oracle itself differs from SELECT"  # fmt: skip
            assert mirror.alive(), mirror.log()[-3000:]

            def caught_up() -> bool:
                with contextlib.suppress(CutError):
                    got = reader.cut(find_cut(target))
                    assert not bank.violations(got), bank.violations(got)
                    return _same(got, expected)
                return False

            wait_for(caught_up, 900, "the latest cut to equal SELECT")
    finally:
        mirror.kill()
        conn.close()
    assert writers.committed["transfer"] > 20 and writers.committed["order"] > 10, writers.committed
    assert cut_reads >= 40 and len(after_restart) >= 2, (
        f"only {cut_reads} cut reads, {len(after_restart)} cuts after the restart"
    )
    assert latest_broken >= 1, (
        f"the workload proves nothing: none of {latest_reads} reads of the tables' latest versions broke the "
        "invariant, so the cut's reads passing shows nothing"
    )
    assert re.search(r"waiting \{'[^']+': [1-9]", mirror.log()), (
        "no micro-batch held a transaction back: the hold-back was not exercised"
    )
    print(
        f"{target.format} seed {seed}: {cut_reads} cut reads ({len(cuts)} transactions) all consistent "
        f"and equal to the replay; {latest_broken} of {latest_reads} "
        f"latest reads broke the invariant; killed between two tables' commits: {killed_mid_batch}"
    )
    _check_cut_command(target, prefix, expected)


def _check_cut_command(target: MirrorTarget, prefix: str, expected: dict[str, list[dict[str, Any]]]) -> None:
    """``relay spark cut --json`` names the cut; DuckDB over the data files it lists reads exactly it."""
    import duckdb

    command = [
        sys.executable,
        "-m",
        "relay.cli",
        "spark",
        "cut",
        "--out",
        target.storage.root,
        "--format",
        target.format,
        "--json",
    ]
    for key, value in target.storage.options.items():
        command += ["--storage-option", f"{key}={value}"]
    for key, value in target.catalog.items():
        command += ["--catalog-option", f"{key}={value}"]
    done = subprocess.run(command, check=False, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["source"] == prefix and found["transaction"]["id"]
    assert set(found["tables"]) == {f"{prefix}.{t}" for t in bank.TABLES}
    if not target.storage.is_local:
        return
    for name in bank.TABLES:
        files = [
            f[len("file://") :] if f.startswith("file://") else f
            for f in found["tables"][f"{prefix}.{name}"]["files"]
        ]
        cols = ", ".join(COLUMNS[name])
        rows = duckdb.sql(f"SELECT {cols} FROM read_parquet($files)", params={"files": files}).fetchall()
        assert {tuple(int(v) for v in r) for r in rows} == _as_set(
            [{c: r[c] for c in COLUMNS[name]} for r in expected[name]]
        ), name


# Both formats on local disk in scripts/test, with a budget of 150 transactions (a SIGKILL, a read per
# micro-batch); the 400-transaction runs, ~10 minutes a format, in the longer suite (scripts/test-long).
@pytest.mark.timeout(2400)
@pytest.mark.parametrize(
    ("fmt", "budget"),
    [
        ("delta", 150),
        ("iceberg", 150),
        pytest.param("delta", 400, marks=pytest.mark.long),
        pytest.param("iceberg", 400, marks=pytest.mark.long),
    ],
)
def test_cuts_keep_an_invariant_no_single_table_shows(
    mysql_service: Any, kafka_service: Any, bank_prefix: str, tmp_path: Path, fmt: str, budget: int
) -> None:
    target = MirrorTarget(Storage(str(tmp_path / "out")), fmt)
    run_invariant(mysql_service, kafka_service, bank_prefix, tmp_path, target, budget)


# The same on an object store (the session's S3 API server): the longer suite.
@pytest.mark.long
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("fmt", ["delta", "iceberg"])
def test_cuts_keep_the_invariant_on_s3(
    mysql_service: Any, kafka_service: Any, bank_prefix: str, tmp_path: Path, fmt: str, s3: dict[str, str]
) -> None:
    storage = Storage(f"s3://{BUCKET_NAME}/{bank_prefix}-{fmt}", s3)
    catalog = {"uri": f"sqlite:///{tmp_path}/catalog.sqlite"} if fmt == "iceberg" else {}
    target = MirrorTarget(storage, fmt, catalog)
    run_invariant(mysql_service, kafka_service, bank_prefix, tmp_path, target, 150)
