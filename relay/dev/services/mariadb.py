"""The embedded MariaDB: a fresh datadir, ``mariadbd`` with a ROW binlog, and the accounts the relay uses.

Owns ``start_mysql`` (``mariadb-install-db``, the server's flags: ROW format, FULL image and metadata, light
settings for throwaway servers), ``prepare_accounts`` (root with a password, no anonymous accounts) and
``create_replication_user`` (the least-privilege ``relay`` account, also used on servers named in the
environment). Runs on the caller's thread.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pymysql

from relay.dev.services.endpoints import MySQLService
from relay.dev.services.launch import (
    LOOPBACK,
    Running,
    StartOptions,
    find_binary,
    fresh_dir,
    start_on_free_port,
)
from relay.dev.services.processes import log_tail, spawn
from relay.dev.services.readiness import mysql_answers, wait_until
from relay.errors import ServiceError

ROOT_PASSWORD = "relay-root"
REPLICATION_USER = "relay"
REPLICATION_PASSWORD = "relay-repl"
# unix socket paths are limited to 108 bytes (sun_path), and mariadbd refuses longer ones.
_MAX_SOCKET_PATH = 100


def start_mysql(opts: StartOptions) -> Running[MySQLService]:
    """A fresh MariaDB with a ROW / FULL-image / FULL-metadata binlog, a root and a ``relay`` account."""
    install_db = find_binary("mariadb-install-db")
    mariadbd = find_binary("mariadbd")
    socket_path = opts.directory / "mysqld.sock"
    if len(str(socket_path)) > _MAX_SOCKET_PATH:
        raise ServiceError(f"directory path too long for a unix socket: {socket_path}")

    def start_once(port: int) -> Running[MySQLService]:
        data = _install_mysql_datadir(install_db, opts.directory)
        argv = [mariadbd, *_mariadbd_args(data, socket_path, port), *opts.extra_args]
        proc = spawn(
            "mariadbd", argv, opts.directory / "mariadbd.log", detached=opts.detached, cwd=opts.directory
        )
        # A fresh datadir has only a password-less root@localhost: reach it over the socket.
        boot = MySQLService(LOOPBACK, port, "root", "", "mariadb")
        local: dict[str, Any] = {"unix_socket": str(socket_path)}
        try:
            wait_until(lambda: mysql_answers(boot, **local), opts.timeout, f"mariadbd on port {port}", proc)
            service = prepare_accounts(boot, ROOT_PASSWORD, **local).with_server_info()
        except pymysql.err.MySQLError as exc:
            proc.stop()
            raise ServiceError(f"setting up accounts on mariadbd port {port} failed: {exc}") from exc
        except BaseException:
            proc.stop()
            raise
        return Running(service, proc, opts.directory)

    return start_on_free_port(start_once)


def _install_mysql_datadir(install_db: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = fresh_dir(directory / "data")
    tmp = fresh_dir(directory / "tmp")
    argv = [
        install_db,
        "--no-defaults",
        f"--datadir={data}",
        # Passed through to the bootstrap server: its temporary tables must not share /tmp with other
        # installs running at the same time ("Could not remove temporary table /tmp/#sql-temptable…").
        f"--tmpdir={tmp}",
        f"--user={getpass.getuser()}",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
    ]
    with open(directory / "install.log", "wb") as out:
        env = {**os.environ, "TMPDIR": str(tmp)}
        result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False, timeout=180, env=env)
    if result.returncode != 0:
        tail = log_tail(directory / "install.log")
        raise ServiceError(f"mariadb-install-db failed ({result.returncode})\n{tail}")
    return data


def _mariadbd_args(data: Path, socket_path: Path, port: int) -> list[str]:
    return [
        "--no-defaults",
        f"--datadir={data}",
        f"--user={getpass.getuser()}",
        f"--port={port}",
        f"--bind-address={LOOPBACK}",
        f"--socket={socket_path}",
        f"--pid-file={data.parent / 'mariadbd.pid'}",
        f"--tmpdir={data.parent / 'tmp'}",
        "--log-bin=mysql-bin",
        "--binlog-format=ROW",
        "--binlog-row-metadata=FULL",
        "--binlog-row-image=FULL",
        "--server-id=1",
        "--skip-name-resolve",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        # Light and fast for throwaway servers: small caches, no fsync per commit, no perf schema.
        "--innodb-buffer-pool-size=64M",
        "--innodb-log-file-size=32M",
        "--innodb-flush-log-at-trx-commit=0",
        "--sync-binlog=0",
        "--innodb-doublewrite=0",
        "--innodb-use-native-aio=0",
        "--performance-schema=OFF",
        "--max-connections=300",
    ]


def prepare_accounts(admin: MySQLService, root_password: str, **connect_kw: Any) -> MySQLService:
    """Make a fresh server usable: no anonymous accounts, root with a password over TCP, a ``relay`` user.

    Runs with ``sql_log_bin=0`` so that a fresh server's binlog holds only what the tests do. Returns the
    service as root (with ``root_password``) carrying the ``relay`` account as its replication account.
    """
    with contextlib.closing(admin.connect(**connect_kw)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        # An anonymous ''@'localhost' would shadow 'relay'@'%' and deny it access.
        cur.execute("SELECT User, Host FROM mysql.user WHERE User = ''")
        for user, host in cur.fetchall():
            cur.execute("DROP USER %s@%s", (user, host))
        for host in ("localhost", LOOPBACK):
            cur.execute("CREATE USER IF NOT EXISTS 'root'@%s", (host,))
            cur.execute("ALTER USER 'root'@%s IDENTIFIED BY %s", (host, root_password))
            cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'root'@%s WITH GRANT OPTION", (host,))
    return create_replication_user(replace(admin, user="root", password=root_password))


def create_replication_user(admin: MySQLService) -> MySQLService:
    """Create (or reset) the least-privilege ``relay`` account; return ``admin`` carrying it.

    The relay reads the binlog (REPLICATION SLAVE), asks where it ends (SHOW MASTER STATUS / SHOW BINARY
    LOGS) and reads table schemas (SELECT). MariaDB ≥ 10.5 moved those SHOW statements from REPLICATION
    CLIENT to BINLOG MONITOR (REPLICATION CLIENT became an alias that no longer grants them).
    """
    monitor = "BINLOG MONITOR" if admin.flavor == "mariadb" else "REPLICATION CLIENT"
    with contextlib.closing(admin.connect()) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE USER IF NOT EXISTS %s@'%%'", (REPLICATION_USER,))
        cur.execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (REPLICATION_USER, REPLICATION_PASSWORD))
        cur.execute(f"GRANT REPLICATION SLAVE, {monitor}, SELECT ON *.* TO %s@'%%'", (REPLICATION_USER,))
    return replace(admin, replication_user=REPLICATION_USER, replication_password=REPLICATION_PASSWORD)
