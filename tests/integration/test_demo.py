"""``relay demo`` as a newcomer runs it: a subprocess that starts its own MariaDB and broker, relays a sharded
sample, shows every logical topic and checks that ``shop.orders`` rebuilds the shards; then leaves nothing
behind — or, with ``--keep``, leaves services and relay running, reachable as it says, until its ``stop``."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.dev import services
from relay.dev.services import MySQLService
from relay.errors import ServiceError
from tests.integration.relay_harness import read_topic

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _servers_installed() -> None:
    try:
        services.find_binary("mariadbd")
    except ServiceError as exc:
        pytest.skip(str(exc))


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def processes_in(workdir: Path) -> list[int]:
    """Live (not zombie) processes whose command line or working directory is inside ``workdir``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, a zombie (no cwd), or not ours to read
            continue
        if str(workdir) in cmdline or Path(cwd).is_relative_to(workdir):
            found.append(int(entry.name))
    return found


def workdir_of(output: str) -> Path:
    match = re.search(r"^Working in (/\S*relay-demo-\w+)$", output, re.MULTILINE)
    assert match, output
    return Path(match.group(1))


@contextlib.contextmanager
def left_behind(workdir_holder: list[Path]) -> Iterator[None]:
    """Whatever happens in the test, kill what the demo left in its temp dir and remove the dir."""
    try:
        yield
    finally:
        for workdir in workdir_holder:
            for pid in processes_in(workdir):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(workdir, ignore_errors=True)


def assert_topics_shown(out: str) -> None:
    counts = r"INSERT=(\d+) UPDATE=(\d+) DELETE=(\d+) DDL=(\d+) +\(\d+ records\) = written$"
    orders = re.search(rf"^  shop\.orders +3 partitions +{counts}", out, re.MULTILINE)
    customers = re.search(rf"^  shop +3 partitions +{counts}", out, re.MULTILINE)
    assert orders and customers, out
    assert [int(n) > 0 for n in orders.groups()] == [True] * 4, orders.group(0)
    assert orders.group(4) == "1" and customers.group(4) == "0"
    assert re.search(r"^  relay\.ddl .*: 1 record", out, re.MULTILINE), out
    assert re.search(r"^    ALTER .*ALTER TABLE shop_00\.orders_00 ADD COLUMN note", out, re.MULTILINE)
    for kind in ("INSERT", "UPDATE", "DELETE"):  # a decoded record of each type, with its physical source
        assert re.search(rf"^    {kind} shop\.orders id=\d+ .* seq=\d+ ← shop_0\d\.orders_0\d p", out, re.M)
    assert re.search(r"^  position +mysql-bin\.\d+:\d+ = binlog end", out, re.MULTILINE), out
    assert re.search(r"^  shop\.orders .* == SELECT over 16 table\(s\): OK$", out, re.MULTILINE), out
    assert re.search(r"^  shop .* == SELECT over 1 table\(s\): OK$", out, re.MULTILINE), out
    assert "MISMATCH" not in out


def test_demo_relays_the_sharded_sample_shows_every_topic_and_leaves_nothing_behind() -> None:
    workdirs: list[Path] = []
    with left_behind(workdirs):
        result = run_cli("demo")
        out = result.stdout
        workdirs.append(workdir_of(out))
        assert result.returncode == 0, out + result.stderr
        assert_topics_shown(out)
        assert re.search(r"^ +\d+\.\ds +written +\d+ rows +published +\d+ rows", out, re.MULTILINE)
        assert max(len(line) for line in out.splitlines() if "/tmp/" not in line) <= 100
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", out)]
        assert len(pids) == 2, out  # MariaDB and the broker; the relay ran in the demo's own process
        assert processes_in(workdirs[0]) == []
        assert [pid for pid in pids if services.proc_start_time(pid) is not None] == []
        assert not workdirs[0].exists()


def console_page(url: str, user: str, password: str) -> str:
    """The fleet page of ``url`` after logging in with the form, as a browser would (cookie kept)."""
    import http.cookiejar
    import urllib.parse
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    form = urllib.parse.urlencode({"user": user, "password": password, "next": "/"}).encode()
    request = urllib.request.Request(
        f"{url.rstrip('/')}/login", data=form, headers={"Origin": url.rstrip("/")}
    )
    with opener.open(request, timeout=30) as answer:  # 303 to the fleet page, followed
        return str(answer.read().decode())


def printed(out: str, pattern: str) -> str:
    match = re.search(pattern, out, re.MULTILINE)
    assert match, f"{pattern!r} not in:\n{out}"
    return match.group(1)


def test_demo_keep_leaves_services_and_relay_running_as_printed_until_its_stop() -> None:
    workdirs: list[Path] = []
    with left_behind(workdirs):
        result = run_cli("demo", "--keep")
        out = result.stdout
        workdirs.append(workdir_of(out))
        assert result.returncode == 0, out + result.stderr
        assert_topics_shown(out)
        config = printed(out, r"^Config: +(\S+)$")
        mysql = MySQLService.parse(printed(out, r"^  MariaDB +pid \d+: (mysql://\S+)$"))
        bootstrap = printed(out, r"bootstrap servers (\S+)$")
        stop = printed(out, r"^Stop all: +(\S+)$")
        read = printed(out, r"^Read a topic: +(\S+) ")
        relay_pid = int(printed(out, r"^  relay +pid (\d+):"))
        assert set(processes_in(workdirs[0])) >= {relay_pid}

        # as printed: MySQL answers with the sample, `relay status` sees the running relay
        with contextlib.closing(mysql.connect()) as conn, conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM shop_01.orders_02")
            assert cur.fetchone()[0] > 0
            cur.execute(
                "INSERT INTO shop_01.orders_02 (id, status, amount, customer_id, created_at) "
                "VALUES (99001, 'NEW', 9.99, 1, NOW(3))"
            )
        status = run_cli("status", "-c", config, timeout=60)
        assert status.returncode == 0, status.stdout + status.stderr
        assert re.search(r"^running +True$", status.stdout, re.MULTILINE), status.stdout
        # the kept relay keeps relaying: the new row reaches the logical topic
        rows = read_topic(bootstrap, "shop.orders", until=lambda rs: any(b"99001" in r.value for r in rs))
        assert any(r.json["data"] and r.json["data"][0]["id"] == "99001" for r in rows)
        audit = subprocess.run(
            [read, "relay.ddl", "2"], check=False, capture_output=True, text=True, timeout=60
        )
        assert audit.returncode == 0 and "ADD COLUMN note" in audit.stdout, audit.stdout + audit.stderr
        # the console over the kept relay, with the login printed: its fleet page shows the relay running
        found = re.search(r"^  console +pid (\d+): (http://\S+)  login: (\S+) / (\S+) ", out, re.MULTILINE)
        assert found, out
        assert int(found.group(1)) in processes_in(workdirs[0])
        page = console_page(found.group(2), found.group(3), found.group(4))
        assert 'data-instance="demo"' in page and 'data-field="state">running<' in page, page[:3000]

        stopped = subprocess.run([stop], check=False, capture_output=True, text=True, timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert processes_in(workdirs[0]) == []
        assert not workdirs[0].exists()
