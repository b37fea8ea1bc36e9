"""The console's users file: who may log in, with which role, and their passwords as scrypt hashes.

Owns the file's format, reading it (every problem named with its line's user), writing it (atomically,
mode 0600: hashes are secrets too), hashing and checking passwords. ``relay console user add|remove|
list|hash`` edit it (``relay.cli.console``); the console reads it at start and again whenever it changes
(a user removed is logged out at their next request). The format::

    # relay console users (relay console user add NAME --role operator)
    users:
      alice:
        role: operator          # viewer: reads every page; operator: also changes things
        password: scrypt$16384$8$1$<salt, base64>$<hash, base64>
      bob:
        role: viewer            # no password: logs in only through a reverse proxy's header (--auth-header)

Passwords are hashed with ``hashlib.scrypt`` (n=2^14, r=8, p=1, 16 random bytes of salt); a check is
constant-time. Runs on the caller's thread; no I/O but the file's own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml

from relay.common.atomic import Ownership, atomic_write_text
from relay.common.strict_yaml import load_strict
from relay.errors import ConsoleError

__all__ = ["ROLES", "User", "UsersFile", "check_password", "hash_password"]

ROLES = ("viewer", "operator")
_N, _R, _P = 2**14, 8, 1
_HEADER = "# relay console users: `relay console user add NAME --role viewer|operator` edits this file\n"
# A hash to check against when the user is unknown, so that a wrong name costs what a wrong password does.
_DUMMY = "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


@dataclass(frozen=True)
class User:
    """One user: ``password`` is the stored hash ("" for a user who logs in through a proxy only)."""

    name: str
    role: str
    password: str = ""

    @property
    def operator(self) -> bool:
        return self.role == "operator"


def hash_password(password: str) -> str:
    """``scrypt$n$r$p$salt$hash`` of ``password`` (a new random salt each time)."""
    if not password:
        raise ConsoleError("password", "must not be empty")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    enc = base64.b64encode
    return f"scrypt${_N}${_R}${_P}${enc(salt).decode()}${enc(digest).decode()}"


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the ``stored`` hash (False for an empty or malformed one)."""
    try:
        kind, n, r, p, salt, digest = (stored or _DUMMY).split("$")
        if kind != "scrypt":
            return False
        want = base64.b64decode(digest, validate=True)
        if len(want) != 32:
            return False
        got = hashlib.scrypt(
            password.encode("utf-8"),
            salt=base64.b64decode(salt, validate=True),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(want),
            maxmem=256 * 1024 * 1024,
        )
    except (ValueError, TypeError):  # binascii.Error is a ValueError
        return False
    return bool(stored) and hmac.compare_digest(got, want)


class UsersFile:
    """The users file at ``path``: ``load`` reads it (``ConsoleError`` naming the problem), ``save``
    writes it back atomically with mode 0600."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        return self.path.is_file()

    def stamp(self) -> tuple[int, int] | None:
        """What changes when the file is rewritten (its inode and modification time), None when absent."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def load(self) -> dict[str, User]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConsoleError(
                "--users",
                f"{self.path}: no such file (create it with `relay console user add NAME --role operator "
                f"--users {self.path}`)",
            ) from None
        except OSError as exc:
            raise ConsoleError("--users", f"{self.path}: {exc.strerror or exc}") from None
        return self._parse(text)

    def _parse(self, text: str) -> dict[str, User]:
        try:
            data, duplicates = load_strict(text)
        except yaml.YAMLError as exc:
            raise ConsoleError("--users", f"{self.path}: not YAML: {str(exc).splitlines()[0]}") from None
        if duplicates:
            raise ConsoleError(
                "--users", f"{self.path}: line {duplicates[0].line}: {duplicates[0].problem()}"
            )
        if data is None:
            return {}
        users = data.get("users") if isinstance(data, dict) else None
        if not isinstance(users, dict) or set(data) - {"users"}:
            raise ConsoleError(
                "--users", f"{self.path}: expected one top-level key `users:` (a map of users)"
            )
        out: dict[str, User] = {}
        for name, entry in users.items():
            out[str(name)] = _user(self.path, str(name), entry)
        return out

    def save(self, users: dict[str, User]) -> None:
        body = {
            "users": {
                u.name: {"role": u.role, **({"password": u.password} if u.password else {})}
                for u in sorted(users.values(), key=lambda u: u.name)
            }
        }
        text = _HEADER + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)
        try:
            atomic_write_text(self.path, text, ownership=Ownership(0o600, os.geteuid(), os.getegid()))
        except OSError as exc:
            raise ConsoleError("--users", f"{self.path}: cannot write: {exc.strerror or exc}") from None


def valid_name(name: str) -> str:
    """A user name as the file and the pages take it: 1-64 printable characters, no space or colon."""
    if not 0 < len(name) <= 64 or any(c.isspace() or c == ":" or not c.isprintable() for c in name):
        raise ConsoleError("NAME", f"{name!r}: a user name is 1-64 printable characters, no space or colon")
    return name


def _user(path: Path, name: str, entry: object) -> User:
    where = f"{path}: users.{name}"
    if not isinstance(entry, dict):
        raise ConsoleError("--users", f"{where}: expected role: and password:")
    unknown = set(entry) - {"role", "password"}
    if unknown:
        raise ConsoleError("--users", f"{where}: unknown key {sorted(unknown)[0]!r} (keys: role, password)")
    role = entry.get("role")
    if role not in ROLES:
        raise ConsoleError("--users", f"{where}.role: must be viewer or operator, got {role!r}")
    password = entry.get("password") or ""
    if not isinstance(password, str) or (password and not password.startswith("scrypt$")):
        raise ConsoleError(
            "--users",
            f"{where}.password: not a hash made by `relay console user add` (scrypt$…); a plain password "
            "is never accepted",
        )
    return User(name, str(role), password)
