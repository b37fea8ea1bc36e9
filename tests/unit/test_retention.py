"""Retention runway arithmetic and the server's expiry settings (MySQL 8 / MariaDB variable rules)."""

from __future__ import annotations

import math

import pytest

from relay.source.retention import Retention, expire_seconds


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"binlog_expire_logs_seconds": "3600", "expire_logs_days": "0"}, 3600.0),
        ({"binlog_expire_logs_seconds": "3600", "expire_logs_days": "7"}, 3600.0),  # seconds win (MySQL 8)
        ({"binlog_expire_logs_seconds": "0", "expire_logs_days": "2"}, 172_800.0),  # 5.7 / MariaDB < 10.6
        ({"expire_logs_days": "0.5"}, 43_200.0),  # MariaDB allows fractions of a day
        ({"binlog_expire_logs_seconds": "0", "expire_logs_days": "0"}, 0.0),  # never
        ({"binlog_expire_logs_seconds": "2592000", "binlog_expire_logs_auto_purge": "OFF"}, 0.0),
        ({}, 0.0),
    ],
)
def test_expire_seconds_follows_the_server_variables(variables: dict[str, str], expected: float) -> None:
    assert expire_seconds(variables) == expected


def test_runway_counts_from_the_files_last_write() -> None:
    closed = Retention(expire_seconds=3600, journal="mysql-bin.000007", file_time=1_000.0)
    assert closed.runway(now=1_600.0) == 3000.0
    assert closed.runway(now=10_000.0) == 0.0  # due: the next rotation may purge it


def test_the_current_file_never_expires_while_written_and_no_expiry_is_infinite() -> None:
    assert Retention(3600, "mysql-bin.000009", None).runway(now=1e9) == 3600
    assert math.isinf(Retention(0, "mysql-bin.000009", 1.0).runway(now=1e9))
    assert Retention(3600, "mysql-bin.000001", None, present=False).runway() == 0.0
