"""Column controls (``columns:`` in the mapping) without a server: the mapping's checks, the checks against a
table's columns, and what both codecs make of a controlled table's rows (the integration test reads them
from Kafka: tests/integration/test_column_controls.py)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from mapping.load import dump_mapping, parse_mapping
from mapping.model import Mapping
from relay.binlog.events import ColumnMeta, RowImage
from relay.canal.entry import Entry, EntryPosition, EntryType, EventType, Header, RowChange, TxnContext
from relay.canal.proto import entry_pb2, packet_pb2
from relay.errors import InvalidMappingError, MappingError
from relay.kafka.codec import RecordEncoder
from relay.kafka.columns import known_problems, salt_problems
from relay.positions.store import SourceIdentity

SALT = "RELAY_TEST_COLUMN_SALT"
PEOPLE = (
    ColumnMeta(0, "id", 3, 0, False, False, None, True, "int", 4, 10),
    ColumnMeta(1, "email", 15, 256, True, False, 45, False, "varchar(64)", 12, 256),
    ColumnMeta(2, "phone", 15, 128, True, False, 45, False, "varchar(32)", 12, 128),
    ColumnMeta(3, "card", 15, 128, True, False, 45, False, "varchar(32)", 12, 128),
    ColumnMeta(4, "photo", 15, 16, True, False, 63, False, "varbinary(16)", -3, 16),
    ColumnMeta(5, "ssn", 15, 64, True, False, 45, False, "varchar(16)", 12, 64),
    ColumnMeta(6, "age", 3, 0, True, False, None, False, "int", 4, 10),
)
ROW = (
    "1",
    "ann@example.com",
    "+33 6 12 34 56 78",
    "4970-1234-5678-9012",
    "\x89PNG\x00\xff",
    "123-45-6789",
    "41",
)
CONTROLS: dict[str, Any] = {
    "exclude": ["ssn"],
    "hash": {"email": "sha256"},
    "salt_env": SALT,
    "mask": {"phone": 4},
    "truncate": {"card": 4, "photo": 2},
}


def people(columns: dict[str, Any] | None = CONTROLS, codec: str = "canal-json", **table: Any) -> Mapping:
    spec: dict[str, Any] = {"physical": ["people"], "topic": f"crm.{codec}", **table}
    if columns is not None:
        spec["columns"] = columns
    return parse_mapping(
        {
            "unmapped": {"action": "drop"},
            "logical_dbs": {"crm": {"physical": [r"crm_\d+"], "codec": codec, "tables": {"people": spec}}},
        }
    )


def errors_of(mapping: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidMappingError) as caught:
        parse_mapping(mapping)
    return [str(e) for e in caught.value.errors]


def table_with(columns: dict[str, Any], **table: Any) -> dict[str, Any]:
    spec = {"physical": ["people"], "columns": columns, **table}
    return {"logical_dbs": {"crm": {"physical": ["crm"], "tables": {"people": spec}}}}


def entry(event_type: EventType, *rows: RowImage, columns: tuple[ColumnMeta, ...] = PEOPLE) -> Entry:
    h = Header("mysql-bin.000001", 1000, 9, 1763700000000, 100, event_type, "crm_01", "people")
    rc = RowChange(event_type=event_type, table_id=7, columns=columns, rows=rows)
    return Entry(h, EntryType.ROWDATA, rc, TxnContext(EntryPosition("mysql-bin.000001", 900)), 1)


def encoder(mapping: Mapping) -> RecordEncoder:
    return RecordEncoder(mapping, SourceIdentity("db", 3306, 9), ddl_topic=None, partitions=lambda _: 1)


def digest(value: str | bytes, salt: str = "pepper") -> str:
    raw = value.encode() if isinstance(value, str) else value
    return hashlib.sha256(salt.encode() + raw).hexdigest()


# --- the mapping's own checks ------------------------------------------------------------------------


def test_controls_parse_dump_and_compare_as_part_of_the_mapping() -> None:
    m = people()
    assert parse_mapping(dump_mapping(m)) == m
    assert m != people(None)  # a change of controls is a change of the mapping (a new version)
    route = m.resolve("crm_01", "people")
    assert route is not None and route.columns is not None
    shown = route.columns.describe()
    assert shown == "exclude=ssn hash=email(sha256) mask=phone(4) truncate=card(4),photo(2) salt_env=" + SALT


def test_a_table_adds_to_its_db_and_wins_per_column() -> None:
    m = parse_mapping(
        {
            "logical_dbs": {
                "crm": {
                    "physical": ["crm"],
                    "columns": {"exclude": ["ssn", "phone"], "hash": {"email": "sha256"}, "salt_env": SALT},
                    "tables": {"people": {"physical": ["people"], "columns": {"mask": {"phone": 3}}}},
                }
            }
        }
    )
    own = m.resolve("crm", "people")
    other = m.resolve("crm", "leads")  # an unclaimed table: the db's controls
    assert own is not None and own.columns is not None and other is not None and other.columns is not None
    assert own.columns.as_dict() == {
        "exclude": ["ssn"], "hash": {"email": "sha256"}, "mask": {"phone": 3}, "salt_env": SALT,
    }  # fmt: skip
    assert other.columns.as_dict() == {
        "exclude": ["ssn", "phone"],
        "hash": {"email": "sha256"},
        "salt_env": SALT,
    }


@pytest.mark.parametrize(
    ("columns", "table", "path", "problem"),
    [
        (
            {"hash": {"id": "sha256"}, "salt_env": SALT},
            {"key": ["id"]},
            "columns.hash.id",
            "key column 'id' cannot be hashed",
        ),
        (
            {"exclude": ["region"]},
            {"key_shard": "column:region"},
            "columns.exclude[0]",
            "key_shard column 'region'",
        ),
        ({"mask": {"phone": 0}}, {}, "columns.mask.phone", "N must be an integer from 1 to 65535, not 0"),
        ({"truncate": {"card": -2}}, {}, "columns.truncate.card", "not -2"),
        ({"mask": {"phone": "4"}}, {}, "columns.mask.phone", "expected an integer N, got text '4'"),
        (
            {"hash": {"email": "md5"}, "salt_env": SALT},
            {},
            "columns.hash.email",
            "unknown hash algorithm 'md5'",
        ),
        ({"hash": {"email": "sha256"}}, {}, "columns.salt_env", "hash needs salt_env"),
        ({"include": ["id"], "exclude": ["ssn"]}, {}, "columns.include", "give include or exclude, not both"),
        ({"exclude": ["ssn"], "mask": {"SSN": 3}}, {}, "columns.mask.SSN", "also controlled at"),
        ({"excluded": ["ssn"]}, {}, "columns.excluded", "unknown key (did you mean 'exclude'?)"),
    ],
)
def test_bad_controls_are_refused_naming_the_key_path(
    columns: dict[str, Any], table: dict[str, Any], path: str, problem: str
) -> None:
    found = errors_of(table_with(columns, **table))
    where = f"logical_dbs.crm.tables.people.{path}"
    assert any(e.startswith(where) and problem in e for e in found), found


# --- against the table's columns -----------------------------------------------------------------------


def test_the_primary_key_and_unknown_columns_are_refused_when_the_table_is_planned() -> None:
    for columns, problem in (
        ({"mask": {"id": 3}}, "crm_01.people: primary key column 'id' cannot be masked"),
        ({"exclude": ["nope"]}, "'nope' is not a column of crm_01.people (columns: id, email"),
        ({"truncate": {"age": 2}}, "column 'age' is int; truncate takes text or binary columns"),
        ({"include": ["email", "phone"]}, "primary key column 'id' cannot be left out; add it to include"),
    ):
        with pytest.raises(MappingError) as caught:
            encoder(people(columns)).encode(entry(EventType.INSERT, RowImage(None, ROW)))
        assert problem in str(caught.value), caught.value


def test_a_new_version_is_checked_against_the_tables_already_published() -> None:
    tables = [("crm_01", "people", PEOPLE)]
    assert known_problems(people(), tables) == []
    (problem,) = known_problems(people({"hash": {"ID": "sha512"}, "salt_env": SALT}), tables)
    assert problem.key == "logical_dbs.crm.tables.people.columns.hash.ID"
    assert "primary key column 'id' cannot be hashed" in str(problem)


def test_a_missing_salt_is_named() -> None:
    (problem,) = salt_problems(people(), {})
    assert problem.key == "logical_dbs.crm.tables.people.columns.salt_env"
    assert f"environment variable {SALT}" in str(problem) and "not set or empty" in str(problem)
    assert salt_problems(people(), {SALT: "pepper"}) == []
    assert salt_problems(people(None), {}) == []


# --- what the codecs publish -----------------------------------------------------------------------


def test_canal_json_publishes_the_controlled_values_in_both_images(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SALT, "pepper")
    enc = encoder(people())
    changed = ("1", "bob@example.com", "+1 555", "5000-0000", "\x00\x01\x02", "999-99-9999", "42")
    (insert,) = enc.encode(entry(EventType.INSERT, RowImage(None, ROW)))
    (update,) = enc.encode(entry(EventType.UPDATE, RowImage(ROW, changed)))
    for record in (insert, update):
        for secret in ("ann@example.com", "12 34", "5678", "123-45-6789", "999-99", "bob@", "PNG"):
            assert secret.encode() not in record.value
    value = json.loads(insert.value)
    assert value["data"] == [
        {
            "id": "1",
            "email": digest("ann@example.com"),
            "phone": "****",
            "card": "4970",
            "photo": "\x89P",
            "age": "41",
        }
    ]
    assert value["mysqlType"] == {
        "id": "int", "email": "char(64)", "phone": "char(4)", "card": "varchar(32)", "photo": "varbinary(16)",
        "age": "int",
    }  # fmt: skip
    assert value["sqlType"] == {"id": 4, "email": 1, "phone": 1, "card": 12, "photo": -3, "age": 4}
    assert insert.key == b'{"id":"1"}'
    old = json.loads(update.value)["old"]
    # the before image's controlled values; the phone's mask is the same before and after: not changed
    assert old == [{"email": digest("ann@example.com"), "card": "4970", "photo": "\x89P", "age": "41"}]
    assert json.loads(update.value)["data"][0]["email"] == digest("bob@example.com")


def test_canal_protobuf_publishes_the_controlled_values_in_both_images(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SALT, "pepper")
    enc = encoder(people(codec="canal-protobuf"))
    changed = (*ROW[:1], "bob@example.com", *ROW[2:])
    (update,) = enc.encode(entry(EventType.UPDATE, RowImage(ROW, changed)))
    packet = packet_pb2.Packet.FromString(update.value)
    (raw,) = packet_pb2.Messages.FromString(packet.body).messages
    rc = entry_pb2.RowChange.FromString(entry_pb2.Entry.FromString(raw).storeValue)
    (row,) = rc.rowDatas
    for image, email in ((row.beforeColumns, "ann@example.com"), (row.afterColumns, "bob@example.com")):
        assert [c.name for c in image] == ["id", "email", "phone", "card", "photo", "age"]  # no ssn
        values = {c.name: c.value for c in image}
        assert values["email"] == digest(email) and values["phone"] == "****" and values["card"] == "4970"
        assert values["photo"] == "\x89P"
        assert {c.name: (c.mysqlType, c.sqlType) for c in image}["email"] == ("char(64)", 1)
    assert [c.name for c in row.afterColumns if c.updated] == ["email"]
    assert b"123-45-6789" not in update.value and b"ann@example.com" not in update.value


def test_debezium_json_publishes_the_controlled_values_and_its_schema_has_the_published_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SALT, "pepper")
    controls = {**CONTROLS, "mask": {"phone": 4, "age": 2}}  # a masked INT is text: a string field
    enc = encoder(people(controls, codec="debezium-json"))
    changed = ("1", "bob@example.com", "+1 555", "5000-0000", "\x00\x01\x02", "999-99-9999", "42")
    (update,) = enc.encode(entry(EventType.UPDATE, RowImage(ROW, changed)))
    delete, tombstone = enc.encode(entry(EventType.DELETE, RowImage(ROW, None)))
    assert tombstone.value is None
    for record in (update, delete):
        assert record.value is not None
        for secret in ("ann@example.com", "12 34", "5678", "123-45-6789", "999-99", "bob@", "PNG", "ssn"):
            assert secret.encode() not in record.value
    value = json.loads(update.value or b"")
    photo = base64.b64encode(b"\x89P").decode()  # truncated to 2 bytes, then Debezium's base64 bytes
    assert value["payload"]["before"] == {
        "id": 1, "email": digest("ann@example.com"), "phone": "****", "card": "4970", "photo": photo,
        "age": "**",
    }  # fmt: skip
    assert value["payload"]["after"]["email"] == digest("bob@example.com")
    assert json.loads(delete.value or b"")["payload"]["before"] == value["payload"]["before"]
    fields = {f["field"]: f for f in value["schema"]["fields"]}
    for image in ("before", "after"):
        shown = {f["field"]: (f["type"], f["optional"]) for f in fields[image]["fields"]}
        assert shown == {
            "id": ("int32", False), "email": ("string", True), "phone": ("string", True),
            "card": ("string", True), "photo": ("bytes", True), "age": ("string", True),
        }  # fmt: skip
    key = json.loads(update.key or b"")
    assert key["payload"] == {"id": 1} and key["schema"]["name"] == "crm.people.Key"


def test_a_hashed_binary_value_hashes_its_bytes_and_null_stays_null(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SALT, "pepper")
    enc = encoder(people({"hash": {"photo": "sha512", "email": "sha256"}, "salt_env": SALT}))
    row = ("2", None, None, None, "\x00\xff", None, None)
    (insert,) = enc.encode(entry(EventType.INSERT, RowImage(None, row)))
    data = json.loads(insert.value)["data"][0]
    assert data["photo"] == hashlib.sha512(b"pepper\x00\xff").hexdigest() and data["email"] is None


def test_a_table_without_controls_takes_no_extra_step() -> None:
    enc = encoder(people(None))
    assert enc.encode(entry(EventType.INSERT, RowImage(None, ROW)))
    (plan,) = [p for p in enc._plans._plans.values() if p is not None]
    assert plan.projection is None


def test_a_key_change_publishes_both_halves_controlled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SALT, "pepper")
    moved = ("7", *ROW[1:])
    delete, insert = encoder(people()).encode(entry(EventType.UPDATE, RowImage(ROW, moved)))
    assert (delete.key, insert.key) == (b'{"id":"1"}', b'{"id":"7"}')
    for record in (delete, insert):
        assert b"ann@example.com" not in record.value and b"123-45-6789" not in record.value
        assert json.loads(record.value)["data"][0]["email"] == digest("ann@example.com")


def test_relay_check_fails_on_a_missing_salt(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from relay.config.load import parse_config
    from relay.ops import check

    monkeypatch.delenv(SALT, raising=False)
    (tmp_path / "mapping.yaml").write_text(dump_mapping(people()))
    config = parse_config({"mapping": {"file": str(tmp_path / "mapping.yaml")}}, str(tmp_path))
    found: list[Any] = []
    check._mapping(config, found.append)
    assert [c.status for c in found] == ["FAIL"], found
    assert SALT in found[0].detail, found
