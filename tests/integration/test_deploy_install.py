"""The runbook's systemd install, run as written in a fresh Debian 12 container, and the unit's service run
the way systemd would run it.

The install block of docs/runbook.md ("systemd") becomes the build of an image FROM debian:bookworm (plus
systemd's tools, which a host has): it must install the compiled relay, its user, the unit, and pass
``systemd-analyze verify``. systemd itself cannot run here, so the service is started as the unit says —
``ExecStart`` as ``User``, in ``WorkingDirectory``, with ``EnvironmentFile`` — with the whole file system
read-only but the ``StateDirectory`` (what ``ProtectSystem=strict`` leaves writable), against the test MariaDB
and broker, with the config the runbook says to write (its state paths taken from the runbook's YAML block).
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import json
import re
import shlex
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
)

# Building the images takes minutes the first time (and after an edit of the relay's source): more than the
# suite's 300 s per test, which the setup of the first test here includes.
pytestmark = pytest.mark.timeout(3600)

RUNBOOK = containers.ROOT / "docs" / "runbook.md"
UNIT = containers.ROOT / "deploy" / "systemd" / "canal-relay@.service"
INSTANCE = "shop"  # the runbook's example instance
IMAGE = "canal-relay-install:test"


def _runbook_systemd_section() -> str:
    text = RUNBOOK.read_text(encoding="utf-8")
    start = text.index("### systemd")
    return text[start : text.index("\n### ", start + 1)]


def install_block() -> str:
    """The shell block of the runbook's systemd section: the install steps."""
    return re.findall(r"```sh\n(.*?)```", _runbook_systemd_section(), re.DOTALL)[0]


def state_settings() -> dict[str, Any]:
    """The YAML block of the runbook's systemd section: the paths it says to set."""
    block = re.findall(r"```yaml\n(.*?)```", _runbook_systemd_section(), re.DOTALL)[0]
    return dict(yaml.safe_load(block))


def unit(instance: str) -> dict[str, str]:
    """The unit's [Service] settings for ``instance`` (%i and %S expanded)."""
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNIT)
    return {k: v.replace("%i", instance).replace("%S", "/var/lib") for k, v in parser["Service"].items()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An image made by running the runbook's install block as written, in the release's tree."""
    containers.require_engine()
    work = tmp_path_factory.mktemp("install")
    script = base64.b64encode(install_block().encode()).decode()
    dockerfile = work / "install.Dockerfile"
    dockerfile.write_text(
        "FROM debian:bookworm\n"
        # A host has systemd (systemd-analyze); this fresh root does not.
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "systemd ca-certificates && rm -rf /var/lib/apt/lists/*\n"
        "COPY . /usr/src/canal-relay\n"
        "WORKDIR /usr/src/canal-relay\n"
        f"RUN echo {script} | base64 -d >/tmp/install.sh\n"
        "RUN DEBIAN_FRONTEND=noninteractive bash -eux /tmp/install.sh\n"
    )
    containers.build(IMAGE, str(dockerfile), work / "build.log")
    return IMAGE


def test_the_install_leaves_the_compiled_relay_its_user_and_a_valid_unit(installed: str) -> None:
    settings = unit(INSTANCE)
    program = shlex.split(settings["ExecStart"])[0]
    version = containers.run("run", "--rm", "--entrypoint", program, installed, "--version")
    assert "compiled (mypyc: " in version, version
    verified = containers.run(
        "run", "--rm", "--entrypoint", "systemd-analyze", installed,
        "verify", f"/etc/systemd/system/canal-relay@{INSTANCE}.service",
    )  # fmt: skip
    assert "error" not in verified.lower(), verified
    facts = containers.run(
        "run", "--rm", "--entrypoint", "sh", installed, "-c",
        f"id -u {settings['User']}; id -gn {settings['User']}; stat -c '%a %U:%G' /etc/canal-relay "
        f"/etc/canal-relay/{INSTANCE}.env /etc/canal-relay/{INSTANCE}.yaml; test ! -e /opt/canal-relay/build "
        "&& echo no-build-env; command -v gcc || true",
    ).split("\n")  # fmt: skip
    assert facts[1] == settings["Group"]
    assert facts[2:5] == ["750 root:canal-relay", "600 root:root", "640 root:canal-relay"], facts
    assert "no-build-env" in facts


@pytest.fixture
def shards(mysql_service: MySQLService) -> Iterator[str]:
    prefix = f"inst{uuid.uuid4().hex[:6]}"
    conn = mysql_service.connect()
    try:
        create_shards(conn, prefix, shards=2, tables=1)
        yield prefix
    finally:
        drop_shards(conn, prefix, 2)
        conn.close()


@pytest.fixture
def names() -> Iterator[dict[str, str]]:
    made = {
        "container": containers.unique("relay-unit-test"),
        "volume": containers.unique("relay-unit-state"),
    }
    try:
        yield made
    finally:
        containers.run("rm", "-f", "-t", "0", made["container"], check=False)
        containers.run("volume", "rm", "-f", made["volume"], check=False)


def _etc(tmp_path: Path, mysql: MySQLService, kafka: KafkaService, prefix: str) -> tuple[Path, Path]:
    """/etc/canal-relay as the runbook has it filled in: the config (its state paths from the runbook), the
    mapping, and the env file with the password (given to the container the way systemd reads it: as root)."""
    etc = tmp_path / "etc"
    etc.mkdir()
    config: dict[str, Any] = {
        "instance": INSTANCE,
        "source": {
            "host": mysql.host,
            "port": mysql.port,
            "user": mysql.replication_user,
            "password": "${RELAY_MYSQL_PASSWORD}",
            "server_id": 7000 + uuid.uuid4().int % 900,
        },
        "filter": {"include": f"{prefix}_\\d+\\..*"},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "ddl_topic": f"{prefix}.ddl"},
        "snapshot": {"mode": "never"},
    }
    for key, value in state_settings().items():
        if isinstance(value, dict):
            config.setdefault(key, {}).update(value)
        else:
            config[key] = value
    (etc / f"{INSTANCE}.yaml").write_text(yaml.safe_dump(config))
    mapping = Path(config["mapping"]["file"])
    assert mapping.parent == Path("/etc/canal-relay"), "the runbook keeps the mapping beside the config"
    (etc / mapping.name).write_text(yaml.safe_dump(sharded_mapping(prefix)))
    etc.chmod(0o755)
    for file in etc.iterdir():
        file.chmod(0o644)
    env_file = tmp_path / f"{INSTANCE}.env"
    env_file.write_text(f"RELAY_MYSQL_PASSWORD={mysql.replication_password}\n")
    env_file.chmod(0o600)
    return etc, env_file


def test_the_unit_runs_the_relay_as_its_user_writing_only_its_state_directory(
    installed: str,
    mysql_service: MySQLService,
    kafka_service: KafkaService,
    shards: str,
    names: dict[str, str],
    tmp_path: Path,
) -> None:
    settings = unit(INSTANCE)
    state = f"/var/lib/{settings['StateDirectory']}"
    mode = settings.get("StateDirectoryMode", "0755")
    etc, env_file = _etc(tmp_path, mysql_service, kafka_service, shards)
    # The unit points the relay's state directory at its StateDirectory; the config the runbook writes says
    # the same, so that the commands run by hand find it too.
    variable, _, value = settings["Environment"].partition("=")
    assert (variable, value) == ("RELAY_STATE_DIR", state)
    assert state_settings()["state_dir"].format(instance=INSTANCE) == state
    # What systemd does for StateDirectory=: the folder, owned by the unit's user, with its mode.
    container, volume = names["container"], names["volume"]
    containers.run("volume", "create", volume)
    user = settings["User"]
    containers.run(
        "run", "--rm", "--user", "0", "-v", f"{volume}:{state}", "--entrypoint", "sh", installed, "-c",
        f"chown {user}:{settings['Group']} {state} && chmod {mode} {state}",
    )  # fmt: skip
    # ExecStart as User, in WorkingDirectory, with EnvironmentFile, on a read-only system
    # (ProtectSystem=strict), a private /tmp (PrivateTmp=yes): the state directory is the one writable place.
    assert settings["ProtectSystem"] == "strict" and settings["WorkingDirectory"] == state
    assert settings["EnvironmentFile"] == f"/etc/canal-relay/{INSTANCE}.env"
    relay, *arguments = shlex.split(settings["ExecStart"])
    containers.run(
        "run", "-d", "--name", container, "--network", "host", "--read-only", "--tmpfs", "/tmp",
        "--user", user, "--workdir", settings["WorkingDirectory"], "--env-file", str(env_file),
        "-e", settings["Environment"],
        "-v", f"{etc}:/etc/canal-relay:ro", "-v", f"{volume}:{state}",
        "--entrypoint", relay, installed, *arguments,
    )  # fmt: skip
    config = f"/etc/canal-relay/{INSTANCE}.yaml"

    def status() -> dict[str, Any]:
        # As the runbook runs it: as the unit's user, without the unit's environment (the config's state_dir).
        without = ("env", "-u", "RELAY_STATE_DIR")
        asked = ("exec", "--user", user, container, *without, relay, "status", "-c", config, "--json")
        out = containers.run(*asked, check=False)
        return dict(json.loads(out)) if out.strip().startswith("{") else {}

    wait_for(lambda: status().get("state") == "running", 120, "the relay started as the unit runs it")
    with contextlib.closing(mysql_service.connect()) as conn, conn.cursor() as cur:
        for i in range(30):
            cur.execute(
                f"INSERT INTO {shards}_{i % 2:02d}.orders_00 (id, status, amount, note) "
                "VALUES (%s, 'new', 1.25, 'x')",
                (i,),
            )
        conn.commit()
        expected = select_orders(conn, shards, 2, 1)
    topic = f"{shards}.orders"
    read_topic(kafka_service.bootstrap_servers, topic, lambda got: apply_records(got) == expected, 120)

    containers.run("stop", "-t", settings["TimeoutStopSec"], container, timeout=120)
    code = containers.run("inspect", "--format", "{{.State.ExitCode}}", container).strip()
    assert code == "0", f"SIGTERM ({settings['KillSignal']}) is a clean stop: exit {code}"
    uid = int(containers.run("run", "--rm", "--entrypoint", "id", installed, "-u", user).strip())
    owners = containers.volume_owner(volume, "", image=installed)
    for written in ("position.json", "status.json"):
        assert owners.get(written) == uid, owners
    assert set(owners.values()) == {uid}, owners
