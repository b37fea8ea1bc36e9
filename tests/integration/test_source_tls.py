"""MySQL TLS (``source.tls``) against a real MariaDB with TLS on: queries and the binlog dump are encrypted
and verified; a plain server is refused when TLS is asked for; a REQUIRE SSL account refuses plain text."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from relay.binlog.events import RowsEvent
from relay.common import mysql
from relay.common.tls import TlsConfig
from relay.config.sections import SourceConfig
from relay.dev.programs import package_of
from relay.errors import ConfigError, SourceError
from relay.source.binlog_source import BinlogSource
from relay.source.retention import RetentionProbe
from relay.source.server import inspect_server
from relay.source.snapshot_tables import describe_table
from relay.source.start_point import StartPoint

pytestmark = pytest.mark.integration


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certs(d: Path, name: str = "ca") -> dict[str, Path]:
    """A CA, and a server certificate for 127.0.0.1 signed by it."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", f"{name}.pem", "-CAkey", f"{name}.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=d)  # fmt: skip
    return {"ca": d / f"{name}.pem", "cert": d / "server.pem", "key": d / "server.key"}


@pytest.fixture
def tls_server(
    mysql_server_factory: Callable[..., Any], tmp_path: Path
) -> tuple[Any, dict[str, Path], SourceConfig]:
    if shutil.which("openssl") is None:
        pytest.skip(
            f"no openssl to make certificates: install it with apt-get install -y {package_of('openssl')}"
        )
    certs = make_certs(tmp_path)
    service = mysql_server_factory(
        f"--ssl-ca={certs['ca']}", f"--ssl-cert={certs['cert']}", f"--ssl-key={certs['key']}"
    )
    conn = service.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE USER 'tls_relay'@'%' IDENTIFIED BY 'tls-pw-123' REQUIRE SSL")
        cur.execute("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'tls_relay'@'%'")
        cur.execute("GRANT SELECT ON tl.* TO 'tls_relay'@'%'")  # what a snapshot reads
        cur.execute("CREATE DATABASE tl")
        cur.execute("CREATE TABLE tl.t (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE tl.big (id INT PRIMARY KEY, body MEDIUMTEXT)")
    conn.close()
    source = SourceConfig(
        host="127.0.0.1",
        port=service.port,
        user="tls_relay",
        password="tls-pw-123",
        server_id=7311,
        tls=TlsConfig(mode="verify_identity", ca=str(certs["ca"])),
    )
    return service, certs, source


def test_queries_and_the_binlog_dump_run_over_verified_tls(
    tls_server: tuple[Any, dict[str, Path], SourceConfig],
) -> None:
    service, _, source = tls_server
    info = inspect_server(source)
    src = BinlogSource(source)
    src.open(StartPoint(info.end[0], info.end[1]))
    try:
        conn = service.connect()
        with conn.cursor() as cur:
            cur.execute("INSERT INTO tl.t VALUES (1)")
        conn.close()
        deadline = time.monotonic() + 20
        seen = None
        while seen is None and time.monotonic() < deadline:
            event = src.read(timeout=1.0)
            if isinstance(event, RowsEvent):
                seen = event
        assert seen is not None, "no row event came through the TLS dump"
    finally:
        src.close()
    retention = RetentionProbe(source).check(info.end[0])  # its queries and its short dump use TLS too
    assert retention.present


def test_a_snapshot_chunk_is_read_over_tls(tls_server: tuple[Any, dict[str, Path], SourceConfig]) -> None:
    """The snapshot's row reader reads the result packets off PyMySQL's socket itself: over TLS too, with
    rows larger than a TLS record and than one protocol packet's worth of small reads."""
    service, _, source = tls_server
    rows = {i: chr(ord("a") + i % 26) * (i * 7_919 % 70_000) for i in range(1, 40)}
    conn = service.connect()
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO tl.big VALUES (%s, %s)", list(rows.items()))
    conn.close()
    reader = mysql.connect(source.host, source.port, source.user, source.password, tls=source.tls)
    try:
        with reader.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            assert cur.fetchone()[1], "the snapshot connection is not encrypted"
        spec = describe_table(reader, "tl", "big")
        sql, params = spec.chunk_query(None, 1000)
        got = spec.read(reader, sql, params)
        with reader.cursor() as cur:  # PyMySQL goes on with the connection afterwards
            cur.execute("SELECT COUNT(*) FROM tl.big")
            assert cur.fetchone()[0] == len(rows)
    finally:
        reader.close()
    assert {int(str(r[0])): r[1] for r in got} == rows


def test_plain_text_is_refused_both_ways(
    tls_server: tuple[Any, dict[str, Path], SourceConfig], mysql_service: Any, tmp_path: Path
) -> None:
    _, _, source = tls_server
    with pytest.raises(SourceError, match="Access denied"):  # the account is REQUIRE SSL
        inspect_server(replace(source, tls=TlsConfig(mode="disabled")))
    (tmp_path / "other").mkdir()
    other = make_certs(tmp_path / "other", "other")
    with pytest.raises(SourceError):  # a server certificate the configured CA did not sign
        inspect_server(replace(source, tls=TlsConfig(mode="verify_ca", ca=str(other["ca"]))))
    plain = SourceConfig(
        host=mysql_service.host,
        port=mysql_service.port,
        user=mysql_service.replication_user,
        password=mysql_service.replication_password,
        tls=TlsConfig(mode="required"),
    )
    if _server_has_tls(mysql_service):
        pytest.skip("the session server offers TLS: no plain server to be refused by")
    with pytest.raises(SourceError, match=r"did not encrypt|SSL is required"):
        inspect_server(plain)


def _server_has_tls(service: Any) -> bool:
    conn = service.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'have_ssl'")
            row = cur.fetchone()
    finally:
        conn.close()
    return bool(row) and str(row[1]).upper() == "YES"


def test_tls_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"source\.tls\.mode"):
        TlsConfig(mode="maybe").validate()
    with pytest.raises(ConfigError, match=r"source\.tls\.cert"):
        TlsConfig(mode="required", cert="/x.pem").validate()
