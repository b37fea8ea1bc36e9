"""The embedded ZooKeeper: a standalone server from Debian's package, bound to loopback.

Owns ``start_zookeeper`` and its ``zoo.cfg`` (admin HTTP server off, every four-letter word allowed).
Runs on the caller's thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from relay.dev.programs import FILES, package_of
from relay.dev.services.endpoints import ZooKeeperService
from relay.dev.services.launch import (
    LOOPBACK,
    Running,
    StartOptions,
    find_binary,
    fresh_dir,
    start_on_free_port,
)
from relay.dev.services.processes import spawn
from relay.dev.services.readiness import wait_until, zookeeper_answers
from relay.errors import ServiceError

ZOOKEEPER_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
_SLF4J_SIMPLE = "/usr/share/java/slf4j-simple.jar"


def start_zookeeper(opts: StartOptions) -> Running[ZooKeeperService]:
    """A standalone ZooKeeper from Debian's package, bound to loopback, its admin HTTP server off."""
    java = find_binary("java")
    classpath = os.environ.get("RELAY_ZOOKEEPER_CLASSPATH", ZOOKEEPER_CLASSPATH)
    jar = classpath.split(":")[-1]
    if not Path(jar).exists():
        package = package_of(jar) if jar in FILES else "zookeeper"
        raise ServiceError(
            f"{jar} not found: install it with `apt-get install -y {package}` (or run scripts/bootstrap)"
        )
    if Path(_SLF4J_SIMPLE).exists():
        classpath += ":" + _SLF4J_SIMPLE  # without a binding ZooKeeper logs nothing, not even why it failed
    opts.directory.mkdir(parents=True, exist_ok=True)

    def start_once(port: int) -> Running[ZooKeeperService]:
        config = _write_zoo_cfg(opts.directory, port)
        argv = [java, "-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *opts.extra_args]
        argv += ["-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)]
        proc = spawn(
            "zookeeper", argv, opts.directory / "zookeeper.log", detached=opts.detached, cwd=opts.directory
        )
        service = ZooKeeperService(f"{LOOPBACK}:{port}")
        try:
            wait_until(lambda: zookeeper_answers(service), opts.timeout, f"zookeeper on port {port}", proc)
        except BaseException:
            proc.stop()
            raise
        return Running(service, proc, opts.directory)

    return start_on_free_port(start_once)


def _write_zoo_cfg(directory: Path, port: int) -> Path:
    data = fresh_dir(directory / "data")
    config = directory / "zoo.cfg"
    config.write_text(
        "tickTime=2000\n"
        f"dataDir={data}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={LOOPBACK}\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=*\n"
        "maxClientCnxns=0\n"
    )
    return config
