"""MySQL TLS for every connection the relay opens to the source (``source.tls``).

Owned here: ``TlsConfig`` (MySQL's ``--ssl-mode`` vocabulary), the ``ssl.SSLContext`` handed to PyMySQL,
and the check that a connection really is encrypted. Used on whatever thread opens a connection: the
parser thread (the binlog dump, ``relay.binlog.stream``), the CLI and the metrics exporter (queries).

PyMySQL falls back to plain text when the server does not offer TLS, so a mode other than ``disabled``
is not trusted blindly: ``ensure_encrypted`` asks the server (``Ssl_cipher``) and refuses a plain
connection, as ``--ssl-mode=REQUIRED`` does in MySQL's own clients.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import pymysql

from relay.errors import ConfigError, InvalidConfigError, SourceConnectionError, SourceError

MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")


@dataclass(frozen=True)
class TlsConfig:
    # disabled | preferred (TLS when the server offers it, unverified: PyMySQL's and MySQL's default) |
    # required (encrypt) | verify_ca (+ the chain) | verify_identity (+ the host name)
    mode: str = "preferred"
    ca: str = ""  # PEM file of the CA(s) to trust; "": the system's
    cert: str = ""  # client certificate (PEM), for servers that require X509
    key: str = ""  # its private key (PEM)

    @property
    def enabled(self) -> bool:
        """Encryption is required (the modes from ``required`` on)."""
        return self.mode not in ("disabled", "preferred")

    def validate(self, path: str = "source.tls") -> None:
        problems: list[ConfigError] = []
        if self.mode not in MODES:
            problems.append(
                ConfigError(f"{path}.mode", f"must be one of {', '.join(MODES)}, got {self.mode!r}")
            )
        if bool(self.cert) != bool(self.key):
            problems.append(ConfigError(f"{path}.cert", "cert and key go together: set both or neither"))
        InvalidConfigError.raise_all(problems)


def context(config: TlsConfig | None) -> ssl.SSLContext | None:
    """The client context for ``config`` (None: PyMySQL's own choice, or TLS off)."""
    if config is None or not config.enabled:
        return None
    try:
        ctx = ssl.create_default_context(cafile=config.ca or None)
        if config.mode == "required":  # encrypt only, like MySQL's REQUIRED: no certificate checks
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = config.mode == "verify_identity"
            ctx.verify_mode = ssl.CERT_REQUIRED
        if config.cert:
            ctx.load_cert_chain(config.cert, config.key or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError("source.tls", f"cannot load the TLS files: {exc}") from exc
    return ctx


def connect_arguments(config: TlsConfig | None) -> dict[str, Any]:
    """Extra ``pymysql.connect`` arguments."""
    if config is not None and config.mode == "disabled":
        return {"ssl_disabled": True}
    ctx = context(config)
    return {} if ctx is None else {"ssl": ctx}


def ensure_encrypted(conn: Any, config: TlsConfig | None, where: str) -> None:
    """Refuse a connection that should be encrypted but is not (the server offered no TLS)."""
    if config is None or not config.enabled:
        return
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            row = cur.fetchone()
    except pymysql.err.MySQLError as exc:
        conn.close()
        raise SourceConnectionError(f"{where}: checking the connection's encryption failed: {exc}") from exc
    if not row or not row[1]:
        conn.close()
        raise SourceError(
            f"{where}: source.tls.mode is {config.mode} but the server did not encrypt the connection "
            "(is TLS enabled on the server?)"
        )
