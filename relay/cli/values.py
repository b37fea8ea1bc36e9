"""The values the ``relay`` command takes, checked where they are read: argparse ``type=`` functions.

Each one turns a command-line text into the value a command needs or raises
``argparse.ArgumentTypeError`` saying what was expected; the parser (``RelayParser``) then prints ONE
line — ``relay entries: error: argument --start-timestamp: expected an ISO time … or epoch
milliseconds, got 'yesterday'`` — and exits with status 2, before the command connects to anything.
Pure functions, on the CLI's thread.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn

from relay.common.redact import redact
from relay.errors import RelayError

Bad = argparse.ArgumentTypeError


class RelayParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (the usage is in ``--help``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {redact(message)} (see {self.prog} --help)\n")


def instant_ms(text: str) -> int:
    """An ISO time (``2026-11-20T08:00:00+00:00``; without an offset: local time) or epoch milliseconds."""
    value = text.strip()
    if value.isdigit():
        if len(value) < 12:  # before 1973 in ms, or seconds: almost certainly not meant
            raise Bad(
                f"{value!r} looks like seconds, not epoch milliseconds (give 13 digits, or an ISO time)"
            )
        return int(value)
    try:
        return int(datetime.fromisoformat(value).timestamp() * 1000)
    except ValueError:
        raise Bad(
            f"expected an ISO time (2026-11-20T08:00:00+00:00) or epoch milliseconds, got {text!r}"
        ) from None


def binlog_place(text: str) -> tuple[str, int]:
    """``FILE[:OFFSET]``: a binlog file name and an offset (default 4, the file's first event)."""
    name, colon, offset = text.partition(":")
    if not name.strip() or not re.fullmatch(r"[\w.+-]+", name):
        raise Bad(f"expected FILE[:OFFSET] such as mysql-bin.000042:1234, got {text!r}")
    if not colon:
        return name, 4
    if not offset.isdigit():
        raise Bad(f"the offset in {text!r} must be a whole number of bytes, such as mysql-bin.000042:1234")
    return name, int(offset)


def _number(kind: Callable[[str], Any], least: float, what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise Bad(f"expected {what}, got {text!r}") from None
        if value < least:
            raise Bad(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what  # argparse shows it in "invalid <name> value"
    return parse


positive_int = _number(int, 1, "a whole number of at least 1")
count = _number(int, 0, "a whole number of at least 0")
positive_float = _number(float, 1e-9, "a positive number")
seconds = _number(float, 0.0, "a number of seconds (0 or more)")


def server_id(text: str) -> int:
    value: int = _number(int, 1, "a replica server id (1 to 4294967295)")(text)
    if value > 0xFFFFFFFF:
        raise Bad(f"expected a replica server id (1 to 4294967295), got {text!r}")
    return value


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (a passthrough setting)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise Bad(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def db_table(text: str) -> str:
    """``db.table`` (physical or logical names: both parts present)."""
    db, dot, table = text.partition(".")
    if not db or not dot or not table:
        raise Bad(f"expected <db>.<table>, got {text!r}")
    return text


def regexes(text: str) -> str:
    """canal's filter: comma-separated regexes, each compiled here."""
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            re.compile(item)
        except re.error as exc:
            raise Bad(f"bad regex {item!r}: {exc}") from None
    return text


def mysql_url(text: str) -> str:
    """``mysql://user:password@host:port`` (checked here; parsed by the command)."""
    from relay.dev.services import MySQLService

    try:
        MySQLService.parse(text)
    except RelayError as exc:
        raise Bad(getattr(exc, "problem", str(exc))) from None
    return text


def offsets(text: str) -> str:
    """``earliest``, ``latest`` or a JSON object of topic → partition → offset (Spark's syntax)."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise Bad(f"expected earliest, latest or JSON, got {text!r} ({exc})") from None
    if not isinstance(value, dict):
        raise Bad(f"expected a JSON object of topic -> {{partition: offset}}, got {text!r}")
    return text


def gtid_set(text: str) -> str:
    """A GTID set in MySQL's (``uuid:1-100``) or MariaDB's (``0-1-100``) form."""
    from relay.binlog.gtid import GtidSet

    for mariadb in (False, True):
        try:
            GtidSet.parse(text, mariadb)
        except RelayError:
            continue
        except (ValueError, IndexError):
            continue
        return text
    raise Bad(f"expected a GTID set, MySQL uuid:1-100 or MariaDB 0-1-100, got {text!r}")


def instant(text: str) -> str:
    """``instant_ms``, checked; the text itself is kept (the command reads it again)."""
    instant_ms(text)
    return text


def choices(names: tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated subset of ``names`` (any case), in the order of ``names``."""

    def parse(text: str) -> tuple[str, ...]:
        wanted = {part.strip().lower() for part in text.split(",") if part.strip()}
        known = {n.lower(): n for n in names}
        unknown = sorted(wanted - known.keys())
        if unknown or not wanted:
            raise Bad(f"unknown {what} {', '.join(unknown) or '(none given)'}; choose from {','.join(names)}")
        return tuple(n for n in names if n.lower() in wanted)

    return parse


def setting(text: str) -> str:
    """``KEY=VALUE`` kept as text (the command splits it again)."""
    key_value(text)
    return text


def dotted_setting(text: str) -> str:
    """``SECTION.KEY=VALUE`` kept as text (``relay bench --set``)."""
    key, sep, _ = text.partition("=")
    if not sep or "." not in key or not all(part.strip() for part in key.split(".")):
        raise Bad(f"expected SECTION.KEY=VALUE such as publish.batch_size=512, got {text!r}")
    return text


def tables(text: str) -> str:
    """Comma-separated ``db.table`` names, kept as text."""
    items = [part.strip() for part in text.split(",")]
    if not any(items):
        raise Bad(f"expected comma-separated <db>.<table> names, got {text!r}")
    for item in items:
        db_table(item)
    return text


def binlog_file(text: str) -> str:
    """A binlog file name (``mysql-bin.000042``)."""
    if not re.fullmatch(r"[\w.+-]+", text):
        raise Bad(f"expected a binlog file name such as mysql-bin.000042, got {text!r}")
    return text


def subset(names: tuple[str, ...], what: str, extra: tuple[str, ...] = ()) -> Callable[[str], str]:
    """A comma-separated subset of ``names`` (any case; ``extra`` words also accepted), kept as text."""
    pick = choices(names, what)

    def parse(text: str) -> str:
        if text.strip().lower() not in extra:
            pick(text)
        return text

    return parse
