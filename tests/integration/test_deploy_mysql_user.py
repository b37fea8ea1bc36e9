"""deploy/mysql/init/10-relay-user.sh against the real server: secrets and patterns go in as they are.

The script runs as the compose mysql service runs it (environment variables, the server's client), here
pointed at the test server over TCP with the mysql client's own MYSQL_HOST / MYSQL_TCP_PORT. Every program
it starts is wrapped to record its command line, which must never hold a password.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from relay.dev.services import MySQLService

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "mysql" / "init" / "10-relay-user.sh"
# Every character the old sed substitution mangled or choked on, a comment sign, a dollar and a non-ASCII one.
RELAY_PASSWORD = "p&w|d\\x'y\"z #1 $HOME ü&&\\\\"
ADMIN_PASSWORD = "a&b|c\\d'e\"f #g $PATH"
PATTERN = "shop\\_%"
WRAPPED = ("mysql", "mariadb", "od", "sed", "tr", "cat", "mktemp", "rm", "dirname")


@pytest.fixture
def admin(mysql_service: MySQLService) -> Iterator[MySQLService]:
    """An administrator whose own password holds the same characters (it goes into the option file)."""
    name = f"relay_admin_{uuid.uuid4().hex[:8]}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (name, ADMIN_PASSWORD))
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION", (name,))
    try:
        yield MySQLService(mysql_service.host, mysql_service.port, name, ADMIN_PASSWORD, mysql_service.flavor)
    finally:
        with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (name,))


@pytest.fixture
def relay_user(mysql_service: MySQLService) -> Iterator[str]:
    name = f"relay_{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (name,))


@pytest.fixture
def schemas(mysql_service: MySQLService) -> Iterator[tuple[str, str]]:
    """Two databases: one the pattern shop\\_% covers (shop_…), one only a lost backslash would (shopX…)."""
    tag = uuid.uuid4().hex[:8]
    inside, outside = f"shop_rt{tag}", f"shopXrt{tag}"
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        for db in (inside, outside):
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)")
            cur.execute(f"INSERT INTO `{db}`.t VALUES (1)")
    try:
        yield inside, outside
    finally:
        with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
            for db in (inside, outside):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def _wrappers(directory: Path, log: Path) -> str:
    """A PATH whose programs first log their arguments (one NUL-separated record per call)."""
    directory.mkdir()
    for name in WRAPPED:
        real = shutil.which(name)
        if real is None:
            continue
        wrapper = directory / name
        record = f'printf "%s\\0" "$0" "$@" >>"{log}"\nprintf "\\n\\0" >>"{log}"\n'
        wrapper.write_text(f'#!/bin/sh\n{record}exec {real} "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return f"{directory}:{os.environ['PATH']}"


def _run_script(tmp_path: Path, admin: MySQLService, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("mysql") is None and shutil.which("mariadb") is None:
        pytest.skip("no mysql or mariadb client (Debian: mariadb-client; scripts/bootstrap installs it)")
    log = tmp_path / "argv.log"
    wrappers = tmp_path / f"bin{len(list(tmp_path.glob('bin*')))}"
    base = {
        "PATH": _wrappers(wrappers, log),
        "HOME": str(tmp_path),  # no ~/.my.cnf of the machine's user
        "MYSQL_HOST": admin.host,
        "MYSQL_TCP_PORT": str(admin.port),
        "RELAY_ADMIN_USER": admin.user,
        "MYSQL_ROOT_PASSWORD": admin.password,
        "TMPDIR": str(tmp_path),
    }
    return subprocess.run(
        ["/bin/sh", str(SCRIPT)], env={**base, **env}, capture_output=True, text=True, timeout=60, check=False
    )


def _argv_records(tmp_path: Path) -> list[str]:
    log = tmp_path / "argv.log"
    return log.read_text(errors="replace").split("\0") if log.exists() else []


def _connect(service: MySQLService, user: str, password: str) -> pymysql.Connection[Any]:
    # The password's UTF-8 bytes, as the mysql client sends them (PyMySQL would send a str as latin-1).
    return pymysql.connect(host=service.host, port=service.port, user=user, password=password.encode())


def _grants(service: MySQLService, user: str, password: str) -> list[str]:
    conn = _connect(service, user, password)
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        return [row[0] for row in cur.fetchall()]


def _can_select(service: MySQLService, user: str, password: str, db: str) -> bool:
    conn = _connect(service, user, password)
    with contextlib.closing(conn), conn.cursor() as cur:
        try:
            cur.execute(f"SELECT id FROM `{db}`.t")
        except pymysql.err.OperationalError as exc:
            assert exc.args[0] in (1142, 1044), exc  # SELECT command denied / access denied to database
            return False
        return cur.fetchall() == ((1,),)


def test_the_init_script_takes_passwords_and_patterns_as_they_are(
    tmp_path: Path,
    mysql_service: MySQLService,
    admin: MySQLService,
    relay_user: str,
    schemas: tuple[str, str],
) -> None:
    env = {
        "RELAY_MYSQL_USER": relay_user,
        "RELAY_MYSQL_PASSWORD": RELAY_PASSWORD,
        "RELAY_CAPTURED_SCHEMAS": PATTERN,
    }
    done = _run_script(tmp_path, admin, env)
    assert done.returncode == 0, done.stderr

    # The account logs in with exactly that password, and holds exactly the relay's grants.
    grants = _grants(mysql_service, relay_user, RELAY_PASSWORD)
    monitor = "BINLOG MONITOR" if mysql_service.flavor == "mariadb" else "REPLICATION CLIENT"
    global_grant = next(g for g in grants if " ON *.* " in g)
    assert global_grant.startswith(f"GRANT REPLICATION SLAVE, {monitor} ON *.* TO `{relay_user}`@`%`"), grants
    assert f"GRANT SELECT ON `{PATTERN}`.* TO `{relay_user}`@`%`" in grants, grants
    assert len(grants) == 2, grants
    assert not any(word in g for g in grants for word in ("ALL PRIVILEGES", "SUPER", "GRANT OPTION"))

    # shop\_% covers shop_… only: the backslash kept the underscore literal.
    inside, outside = schemas
    assert _can_select(mysql_service, relay_user, RELAY_PASSWORD, inside)
    assert not _can_select(mysql_service, relay_user, RELAY_PASSWORD, outside)

    # No password on any command line of any program the script ran (the wrappers logged them all).
    records = _argv_records(tmp_path)
    assert any(r.endswith("/mysql") or r.endswith("/mariadb") for r in records), records
    for secret in (RELAY_PASSWORD, ADMIN_PASSWORD, "p&w", "a&b"):
        assert not [r for r in records if secret in r], f"{secret!r} was on a command line"
    # Its option file is gone.
    assert not [p for p in tmp_path.iterdir() if p.is_file() and p.name.startswith("tmp")]


def test_running_it_again_sets_the_new_password(
    tmp_path: Path, mysql_service: MySQLService, admin: MySQLService, relay_user: str
) -> None:
    env = {"RELAY_MYSQL_USER": relay_user, "RELAY_CAPTURED_SCHEMAS": PATTERN}
    assert _run_script(tmp_path, admin, {**env, "RELAY_MYSQL_PASSWORD": "first&one"}).returncode == 0
    second = "second|one\\'\""
    done = _run_script(tmp_path, admin, {**env, "RELAY_MYSQL_PASSWORD": second})
    assert done.returncode == 0, done.stderr
    assert len(_grants(mysql_service, relay_user, second)) == 2
    with pytest.raises(pymysql.err.OperationalError):
        _grants(mysql_service, relay_user, "first&one")


def test_a_missing_password_or_a_wrong_administrator_stops_it_with_a_message(
    tmp_path: Path, admin: MySQLService, relay_user: str
) -> None:
    done = _run_script(tmp_path, admin, {"RELAY_MYSQL_USER": relay_user})
    assert done.returncode != 0 and "RELAY_MYSQL_PASSWORD" in done.stderr
    wrong = MySQLService(admin.host, admin.port, admin.user, admin.password + "x", admin.flavor)
    done = _run_script(tmp_path, wrong, {"RELAY_MYSQL_USER": relay_user, "RELAY_MYSQL_PASSWORD": "pw"})
    assert done.returncode != 0 and "Access denied" in done.stderr
