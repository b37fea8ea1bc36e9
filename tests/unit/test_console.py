"""The console's pure parts: the users file and password hashes, the same-origin rule, the login's
``next``, the record browser's decoding of the three value formats, and its key syntax."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from relay.canal.proto.convert import messages_packet
from relay.console.guard import same_origin
from relay.console.records import decode
from relay.console.topics import key_bytes
from relay.console.users import User, UsersFile, check_password, hash_password
from relay.errors import ConsoleError
from tests.unit.test_proto import COLUMNS

COLUMN = COLUMNS[0].name


def test_a_password_checks_against_its_own_hash_only() -> None:
    hashed = hash_password("s3cret pässword")
    assert hashed.startswith("scrypt$") and "s3cret" not in hashed
    assert check_password("s3cret pässword", hashed)
    assert not check_password("s3cret password", hashed)
    assert hash_password("same") != hash_password("same")  # salted
    for broken in ("", "scrypt$", "md5$x", "scrypt$16384$8$1$!!$!!", hashed[:-4]):
        assert not check_password("s3cret pässword", broken)


def test_the_users_file_round_trips_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "users.yaml"
    users = {"alice": User("alice", "operator", hash_password("a")), "bob": User("bob", "viewer")}
    UsersFile(path).save(users)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert UsersFile(path).load() == users


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("users: [a, b]\n", "expected one top-level key `users:`"),
        ("users:\n  a: {role: admin}\n", "users.a.role: must be viewer or operator"),
        ("users:\n  a: {role: viewer, password: hunter2}\n", "a plain password is never accepted"),
        ("users:\n  a: {role: viewer, colour: red}\n", "unknown key 'colour'"),
        ("users:\n  a: {role: viewer}\n  a: {role: operator}\n", "line 3: duplicate key 'a'"),
        ("users: [\n", "not YAML"),
    ],
)
def test_a_bad_users_file_is_refused_naming_the_problem(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "users.yaml"
    path.write_text(text)
    with pytest.raises(ConsoleError, match=r"^--users: ") as found:
        UsersFile(path).load()
    assert problem in str(found.value) and str(path) in str(found.value)


def test_a_missing_users_file_names_the_command_that_makes_it(tmp_path: Path) -> None:
    with pytest.raises(ConsoleError, match="relay console user add NAME --role operator"):
        UsersFile(tmp_path / "none.yaml").load()


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({"host": "127.0.0.1:8080", "origin": "http://127.0.0.1:8080"}, True),
        ({"host": "127.0.0.1:8080", "origin": "http://127.0.0.1:9999"}, False),
        ({"host": "127.0.0.1:8080", "origin": "null"}, False),
        ({"host": "127.0.0.1:8080", "referer": "http://evil.example/x"}, False),
        ({"host": "127.0.0.1:8080", "referer": "http://127.0.0.1:8080/mappings/x"}, True),
        (
            {"host": "127.0.0.1:8080", "sec-fetch-site": "cross-site", "origin": "http://127.0.0.1:8080"},
            False,
        ),
        ({"host": "127.0.0.1:8080", "sec-fetch-site": "same-site", "origin": "http://127.0.0.1:8080"}, False),
        ({"host": "127.0.0.1:8080"}, True),  # not a browser: the CSRF token decides
        (
            {"host": "proxy:80", "x-forwarded-host": "console.example", "origin": "https://console.example"},
            True,
        ),
    ],
)
def test_changes_come_only_from_the_consoles_own_origin(headers: dict[str, str], allowed: bool) -> None:
    assert same_origin(headers) is allowed


def test_after_login_the_console_goes_only_to_its_own_pages() -> None:
    from relay.console.app import _next

    assert _next("/mappings/shop?version=2") == "/mappings/shop?version=2"
    for outside in ("http://evil.example/", "//evil.example/x", "javascript:alert(1)", "evil"):
        assert _next(outside) == "/"


def test_canal_json_shows_type_table_and_row() -> None:
    value = {
        "id": 7,
        "database": "shop",
        "table": "<script>",
        "isDdl": False,
        "type": "UPDATE",
        "data": [{"id": "1", "name": "<b>x</b>"}],
        "old": [{"name": "y"}],
    }
    shown = decode(json.dumps(value).encode())
    assert (shown.format, shown.type, shown.table) == ("canal-json", "UPDATE", "shop.<script>")
    assert shown.summary == "id=1, name=<b>x</b>"  # raw text: the template escapes it
    assert json.loads(shown.detail) == value


def test_debezium_json_with_and_without_schemas() -> None:
    payload = {"before": None, "after": {"id": 3}, "source": {"db": "shop", "table": "orders"}, "op": "c"}
    for value in (payload, {"schema": {}, "payload": payload}):
        shown = decode(json.dumps(value).encode())
        assert (shown.format, shown.type, shown.table, shown.summary) == (
            "debezium-json",
            "INSERT",
            "shop.orders",
            "id=3",
        )
    ddl = decode(
        json.dumps({"databaseName": "shop", "ddl": "ALTER TABLE t ADD c INT", "tableChanges": []}).encode()
    )
    assert (ddl.format, ddl.type, ddl.summary) == (
        "debezium-json",
        "SCHEMA CHANGE",
        "ALTER TABLE t ADD c INT",
    )


def test_canal_protobuf_is_decoded_from_canals_packet() -> None:
    from tests.unit.test_proto import update_entry

    shown = decode(messages_packet(42, [update_entry()]))
    assert (shown.format, shown.type, shown.table) == ("canal-protobuf", "UPDATE", "shop_07.orders_33")
    detail = json.loads(shown.detail)
    assert detail["batchId"] == 42 and len(detail["entries"][0]["rows"]) == 2
    assert shown.summary.startswith(f"{COLUMN}=42")


def test_a_tombstone_and_foreign_values() -> None:
    assert decode(None).format == "tombstone"
    assert decode(b"plain text").format == "text"
    assert decode(b"\xff\x00\x01").format == "bytes"


def test_a_key_is_written_as_on_the_topic_or_as_pairs() -> None:
    assert key_bytes('{"id":"42"}') == b'{"id":"42"}'
    assert key_bytes("id=42") == b'{"id":"42"}'
    assert key_bytes(" _shard = shop_01.orders_02 , id=7") == b'{"_shard":"shop_01.orders_02","id":"7"}'
    for bad in ("", "id", "=3"):
        with pytest.raises(ConsoleError):
            key_bytes(bad)
