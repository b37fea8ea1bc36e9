"""Column controls and snapshot record times on real MariaDB and a real broker (issue 30, items 4 and 5).

- A table with excluded, hashed, masked and truncated columns, in every codec (debezium-json too): a row
  read by the snapshot, then an INSERT, an UPDATE (before and after images) and a DELETE from the binlog.
  An independent consumer reads the topic (canal-protobuf decoded with canal's generated protobuf classes,
  debezium-json as plain JSON, not with the relay's decoders): no excluded or raw controlled value is
  anywhere in a record (debezium-json's schema included), the hashed/masked/truncated values are what
  SELECT's values give under the documented rules, and the snapshot record's time lies between the relay's
  start and the moment it was read.
- A change of controls is a new mapping version, hot-reloaded at a batch boundary: rows before the switch
  have the old form, rows after it the new; a version hashing the primary key, or whose salt variable is
  unset, is refused and the relay keeps the version it runs.
- ``relay mapping validate --mysql`` checks the names against the server's columns.

Every wait is a condition with a deadline.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.canal.proto import entry_pb2, packet_pb2
from tests.integration.relay_harness import (
    REPO_ROOT,
    Rec,
    RelayThread,
    master_position,
    read_topic,
    wait_for,
    write_configs,
)

SALT_ENV = "RELAY_TEST_COLUMN_SALT"
SALT = "pepper-7d1f"
CONTROLS: dict[str, Any] = {
    "exclude": ["ssn"],
    "hash": {"email": "sha256"},
    "salt_env": SALT_ENV,
    "mask": {"phone": 4},
    "truncate": {"card": 4, "photo": 2},
}
TABLE = (
    "CREATE TABLE {db}.people (id INT PRIMARY KEY, email VARCHAR(64), phone VARCHAR(32), card VARCHAR(32), "
    "photo VARBINARY(32), ssn VARCHAR(16), note VARCHAR(64)) ENGINE=InnoDB"
)
# (id, email, phone, card, photo, ssn, note): each controlled value holds a marker that must not reach Kafka
ANN = (
    1,
    "ann.secret@example.com",
    "+33 6 PHONESECRET1",
    "4970-CARDSECRET1-3333",
    b"\x01\x02PHOTOSECRET1",
    "SSN-111-11",
    "a",
)
BOB = (
    2,
    "bob.secret@example.com",
    "+1 555 PHONESECRET2",
    "5100-CARDSECRET2-6666",
    b"\x03\x04PHOTOSECRET2",
    "SSN-222-22",
    "b",
)
BOB_AFTER = (
    2,
    "bob.other@example.com",
    "+1 555 PHONESECRET3",
    "6200-CARDSECRET3-9999",
    b"\x05\x06PHOTOSECRET3",
    "SSN-333-33",
    "c",
)
# Markers made of letters: digits alone turn up by chance in binary records (a sequence header held "0100").
SECRETS = (b"secret@", b"other@", b"PHONESECRET", b"CARDSECRET", b"PHOTOSECRET", b"SSN-")


@dataclass
class Change:
    """One row record as an independent consumer reads it: type, snapshot mark, time (ms), the before and
    after images (column -> value, None for SQL NULL) and the columns' MySQL types."""

    type: str
    snapshot: bool
    time_ms: int
    before: dict[str, str | None] | None
    after: dict[str, str | None] | None
    types: dict[str, str]


@pytest.fixture()
def schema(mysql_service: Any) -> Iterator[str]:
    prefix = f"cc{time.monotonic_ns() % 10**8}"
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {prefix}_00")
        cur.execute(TABLE.format(db=f"{prefix}_00"))
    try:
        yield prefix
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {prefix}_00")
        conn.close()


def people_mapping(
    prefix: str, codec: str, columns: dict[str, Any] | None, version: int = 1
) -> dict[str, Any]:
    table: dict[str, Any] = {"physical": ["people"], "topic": f"{prefix}.people"}
    if columns is not None:
        table["columns"] = columns
    return {
        "version": version,
        "unmapped": {"action": "drop"},
        "logical_dbs": {
            prefix: {"physical": [f"{prefix}_\\d+"], "codec": codec, "tables": {"people": table}}
        },
    }


def write(mysql: Any, prefix: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    conn = mysql.connect()
    try:
        with conn.cursor() as cur:
            for sql, args in statements:
                cur.execute(sql.format(db=f"{prefix}_00"), args)
    finally:
        conn.close()


INSERT = "INSERT INTO {db}.people VALUES (%s, %s, %s, %s, %s, %s, %s)"
UPDATE = (
    "UPDATE {db}.people SET email = %s, phone = %s, card = %s, photo = %s, ssn = %s, note = %s WHERE id = %s"
)


def decode(rec: Rec, codec: str) -> Change:
    if codec == "debezium-json":
        return decode_debezium(rec)
    if codec == "canal-json":
        msg = rec.json
        after = msg["data"][0]
        before = {**after, **msg["old"][0]} if msg["type"] == "UPDATE" else None
        if msg["type"] == "DELETE":
            before, after = after, None
        return Change(msg["type"], bool(msg.get("snapshot")), int(msg["es"]), before, after, msg["mysqlType"])
    packet = packet_pb2.Packet.FromString(rec.value)
    (raw,) = packet_pb2.Messages.FromString(packet.body).messages
    entry = entry_pb2.Entry.FromString(raw)
    rc = entry_pb2.RowChange.FromString(entry.storeValue)
    (row,) = rc.rowDatas

    def image(columns: Any) -> dict[str, str | None] | None:
        return {c.name: None if c.isNull else c.value for c in columns} or None

    snapshot = any(p.key == "relay.snapshot" and p.value == "true" for p in rc.props)
    kind = entry_pb2.EventType.Name(entry.header.eventType)
    types = {c.name: c.mysqlType for c in (row.afterColumns or row.beforeColumns)}
    return Change(
        kind, snapshot, entry.header.executeTime, image(row.beforeColumns), image(row.afterColumns), types
    )


def decode_debezium(rec: Rec) -> Change:
    """A debezium-json change event (schemas on): values made comparable with ``published`` (photo's
    base64 bytes as latin-1 text, numbers as text); the types are the ``after`` struct's field types."""
    body = rec.json
    payload = body["payload"]

    def image(values: dict[str, Any] | None) -> dict[str, str | None] | None:
        if values is None:
            return None
        out = {k: None if v is None else str(v) for k, v in values.items()}
        if values.get("photo") is not None:
            out["photo"] = base64.b64decode(values["photo"]).decode("latin-1")
        return out

    (after,) = (f for f in body["schema"]["fields"] if f["field"] == "after")
    assert payload["source"]["ts_ms"] == payload["ts_ms"]
    kind = {"c": "INSERT", "r": "INSERT", "u": "UPDATE", "d": "DELETE"}[payload["op"]]
    types = {f["field"]: f["type"] for f in after["fields"]}
    snapshot = payload["source"]["snapshot"] == "true"
    assert snapshot == (payload["op"] == "r")
    return Change(kind, snapshot, payload["ts_ms"], image(payload["before"]), image(payload["after"]), types)


def published(row: tuple[Any, ...]) -> dict[str, str | None]:
    """What the controls make of a row, computed here from the values written (not by the relay's code)."""
    rid, email, _phone, card, photo, _ssn, note = row
    return {
        "id": str(rid),
        "email": hashlib.sha256((SALT + email).encode()).hexdigest(),
        "phone": "****",
        "card": card[:4],
        "photo": photo[:2].decode("latin-1"),
        "note": note,
    }


def assert_nothing_leaks(records: list[Rec]) -> None:
    for rec in records:
        raw = b"".join([rec.key or b"", rec.value or b"", *rec.headers.values()])  # a tombstone: no value
        leaked = [s for s in SECRETS if s in raw]
        assert not leaked, f"{leaked} reached Kafka at {rec.partition}:{rec.offset}"
        assert b"ssn" not in (rec.value or b"")  # the excluded name is gone too (data, types, columns)


@pytest.mark.parametrize("codec", ["canal-json", "canal-protobuf", "debezium-json"])
def test_controlled_columns_never_reach_kafka_and_snapshot_rows_carry_their_read_time(
    codec: str,
    mysql_service: Any,
    kafka_service: Any,
    schema: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix, bootstrap = schema, kafka_service.bootstrap_servers
    topic = f"{prefix}.people"
    write(mysql_service, prefix, (INSERT, ANN))  # before the relay starts: read by its snapshot
    monkeypatch.setenv(SALT_ENV, SALT)
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=people_mapping(prefix, codec, CONTROLS),
        start=None,
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={"snapshot": {"mode": "when_needed"}, "logging": {"level": "INFO"}},
    )
    started = int(time.time() * 1000)
    with RelayThread(cfg):
        read_topic(bootstrap, topic, until=lambda rs: len(rs) >= 1, timeout=120)
        seen = int(time.time() * 1000)
        write(
            mysql_service,
            prefix,
            (INSERT, BOB),
            (UPDATE, (*BOB_AFTER[1:], 2)),
            ("DELETE FROM {db}.people WHERE id = 1", ()),
        )
        expected = 5 if codec == "debezium-json" else 4  # debezium-json: the DELETE's tombstone too
        records = read_topic(bootstrap, topic, until=lambda rs: len(rs) >= expected, timeout=120)
    assert_nothing_leaks(records)
    rows = sorted((r for r in records if r.value), key=lambda r: r.offset)  # one key each: see below
    changes = [decode(r, codec) for r in rows]
    by_type = {(c.type, c.snapshot): c for c in changes}
    assert set(by_type) == {("INSERT", True), ("INSERT", False), ("UPDATE", False), ("DELETE", False)}

    snap = by_type["INSERT", True]
    assert snap.after == published(ANN)
    assert started <= snap.time_ms <= seen  # the time its chunk was read, not 0
    assert by_type["INSERT", False].after == published(BOB)
    update = by_type["UPDATE", False]
    assert update.after == published(BOB_AFTER)
    assert update.before == published(BOB)  # the before image is controlled too
    assert by_type["DELETE", False].before == published(ANN)
    for change in changes:
        if not change.snapshot:
            assert change.time_ms >= started - 1000  # binlog times: whole seconds
        if codec == "debezium-json":  # the schema's fields: the published columns
            assert change.types == {
                "id": "int32", "email": "string", "phone": "string", "card": "string", "photo": "bytes",
                "note": "string",
            }  # fmt: skip
        else:
            assert change.types["email"] == "char(64)" and change.types["phone"] == "char(4)"
            assert change.types["card"] == "varchar(32)" and "ssn" not in change.types
    # Against SELECT: what is left of the table, under the same rules.
    conn = mysql_service.connect()
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, email, phone, card, photo, ssn, note FROM {prefix}_00.people")
        (row,) = cur.fetchall()
    conn.close()
    assert published(row) == update.after


def test_a_change_of_controls_is_a_new_version_switched_at_a_batch_boundary(
    mysql_service: Any, kafka_service: Any, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, bootstrap = schema, kafka_service.bootstrap_servers
    topic = f"{prefix}.people"
    monkeypatch.setenv(SALT_ENV, SALT)
    conn = mysql_service.connect()
    cfg = write_configs(
        tmp_path,
        mysql=mysql_service,
        bootstrap=bootstrap,
        mapping=people_mapping(prefix, "canal-json", None),
        start=master_position(conn),
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={"mapping": {"reload_check_seconds": 0.05}, "logging": {"level": "INFO"}},
    )
    conn.close()
    mfile = cfg.parent / "mapping.yaml"
    with RelayThread(cfg) as running:
        write(mysql_service, prefix, (INSERT, ANN))
        read_topic(bootstrap, topic, until=lambda rs: len(rs) >= 1)
        mfile.write_text(yaml.safe_dump(people_mapping(prefix, "canal-json", CONTROLS, version=2)))
        wait_for(lambda: running.relay.mapping.version == 2, 30, "the relay to switch to version 2")
        write(mysql_service, prefix, (INSERT, BOB))
        read_topic(bootstrap, topic, until=lambda rs: len(rs) >= 2)

        watcher = running.relay.watcher
        assert watcher is not None
        # Refused: a control on the primary key; then a hash whose salt variable is not set.
        bad_key = {**CONTROLS, "mask": {"phone": 4, "id": 2}}
        mfile.write_text(yaml.safe_dump(people_mapping(prefix, "canal-json", bad_key, version=3)))
        wait_for(
            lambda: watcher.refusal is not None and watcher.refusal.version == 3, 30, "version 3 refused"
        )
        assert watcher.refusal is not None
        assert "primary key column 'id' cannot be masked" in watcher.refusal.reason
        no_salt = {**CONTROLS, "salt_env": "RELAY_TEST_NO_SUCH_SALT"}
        mfile.write_text(yaml.safe_dump(people_mapping(prefix, "canal-json", no_salt, version=4)))
        wait_for(
            lambda: watcher.refusal is not None and watcher.refusal.version == 4, 30, "version 4 refused"
        )
        assert "RELAY_TEST_NO_SUCH_SALT" in watcher.refusal.reason
        write(mysql_service, prefix, (INSERT, (3, *BOB_AFTER[1:])))
        records = read_topic(bootstrap, topic, until=lambda rs: len(rs) >= 3)
        assert running.relay.mapping.version == 2
    # relay verify cannot compare a controlled table with the source yet: it says so instead of differing
    verify = subprocess.run(
        [sys.executable, "-m", "relay.cli", "verify", "-c", str(cfg), "--table", f"{prefix}.people"],
        check=False, cwd=REPO_ROOT, env={**os.environ}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert verify.returncode == 2, (verify.stdout, verify.stderr)
    assert "has column controls (exclude=ssn" in verify.stderr, verify.stderr
    ordered = sorted(records, key=lambda r: int(r.json["sequence"]))
    first, *after = [decode(r, "canal-json") for r in ordered]
    assert first.after is not None and first.after["ssn"] == "SSN-111-11"  # before the switch: as read
    assert first.after["email"] == ANN[1]
    assert [c.after for c in after] == [published(BOB), published((3, *BOB_AFTER[1:]))]
    assert_nothing_leaks(ordered[1:])


def test_mapping_validate_checks_the_controls_against_the_servers_columns(
    mysql_service: Any, schema: str, tmp_path: Path
) -> None:
    prefix = schema
    mfile = tmp_path / "mapping.yaml"
    env = {**os.environ, "RELAY_STATE_DIR": str(tmp_path / "state")}

    def validate(columns: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        mfile.write_text(yaml.safe_dump(people_mapping(prefix, "canal-json", columns)))
        return subprocess.run(
            [sys.executable, "-m", "relay.cli", "mapping", "validate", str(mfile), "--mysql",
             mysql_service.url],
            check=False, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    ok = validate(CONTROLS)
    assert ok.returncode == 0, ok.stderr
    assert "checked against" in ok.stdout
    path = f"logical_dbs.{prefix}.tables.people.columns"
    for columns, where, problem in (
        ({"exclude": ["sn"]}, f"{path}.exclude[0]", f"'sn' is not a column of {prefix}_00.people"),
        (
            {"hash": {"id": "sha256"}, "salt_env": SALT_ENV},
            f"{path}.hash.id",
            "primary key column 'id' cannot be hashed",
        ),
        ({"truncate": {"id": 2}}, f"{path}.truncate.id", "primary key column 'id' cannot be truncated"),
        ({"include": ["email"]}, f"{path}.include", "primary key column 'id' cannot be left out"),
        ({"mask": {"phone": 0}}, f"{path}.mask.phone", "N must be an integer from 1 to 65535"),
        (
            {"hash": {"email": "sha1"}, "salt_env": SALT_ENV},
            f"{path}.hash.email",
            "unknown hash algorithm 'sha1'",
        ),
    ):
        refused = validate(columns)
        assert refused.returncode == 2, (columns, refused.stdout, refused.stderr)
        assert where in refused.stderr and problem in refused.stderr, refused.stderr
    mfile.write_text(yaml.safe_dump(people_mapping(prefix, "canal-json", CONTROLS)))
    shown = subprocess.run(
        [sys.executable, "-m", "relay.cli", "mapping", "resolve", "-f", str(mfile), f"{prefix}_00.people"],
        check=False, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    expected = (
        f"columns: exclude=ssn hash=email(sha256) mask=phone(4) truncate=card(4),photo(2) salt_env={SALT_ENV}"
    )
    assert expected in shown.stdout, shown.stdout
    # --all: every table of the server, the controls checked against each one's columns
    mfile.write_text(yaml.safe_dump(people_mapping(prefix, "canal-json", {"mask": {"id": 3, "nope": 2}})))
    every = subprocess.run(
        [sys.executable, "-m", "relay.cli", "mapping", "resolve", "--all", "--json", "-f", str(mfile),
         "--mysql", mysql_service.url],
        check=False, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert every.returncode == 1, every.stderr
    report = yaml.safe_load(every.stdout)
    (route,) = [r for r in report["routes"] if r["db"] == f"{prefix}_00"]
    assert route["columns"] == {"mask": {"id": 3, "nope": 2}}
    problems = " | ".join(report["ambiguous"])
    assert "primary key column 'id' cannot be masked" in problems and "'nope' is not a column" in problems
