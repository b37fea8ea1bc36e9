"""The one MySQL connection helper on a real MariaDB: a password past ASCII logs in (PyMySQL would send a str
password as latin-1: a UTF-8 password set by the mysql client, or by deploy/mysql, would be refused)."""

from __future__ import annotations

import uuid
from typing import Any

from relay.common import mysql


def test_a_utf8_password_logs_in(mysql_service: Any) -> None:
    user, password = f"u{uuid.uuid4().hex[:8]}", "pässwörd ✓ & | ' \" \\"
    admin = mysql_service.connect()
    try:
        with admin.cursor() as cur:
            cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        conn = mysql.connect(mysql_service.host, mysql_service.port, user, password, tls=None)
        with conn.cursor() as cur:
            cur.execute("SELECT CURRENT_USER()")
            assert cur.fetchone()[0].startswith(f"{user}@")
        conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (user,))
        admin.close()


def _cipher(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        row = cur.fetchone()
    return str(row[1]) if row else ""


def test_without_source_tls_connections_share_one_preferred_context(mysql_service: Any) -> None:
    # PyMySQL builds a context per connection (the CA store loaded each time, ~30 ms) for PREFERRED mode
    s = mysql_service
    a = mysql.connect(s.host, s.port, s.user, s.password, tls=None)
    b = mysql.connect(s.host, s.port, s.user, s.password, tls=None)
    own = mysql_service.connect()  # PyMySQL's own PREFERRED connection: the same encryption, or none
    try:
        assert a.ctx is b.ctx
        assert a.ctx.verify_mode == own.ctx.verify_mode and a.ctx.check_hostname == own.ctx.check_hostname
        assert _cipher(a) == _cipher(b) == _cipher(own)
    finally:
        for conn in (a, b, own):
            conn.close()
