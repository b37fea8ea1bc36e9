"""What every ``start_*`` shares: its options, the ``Running`` handle it returns, a free loopback port.

Owns ``StartOptions``, ``Running`` (the service to connect to, its process, its directory), ``free_port``
and ``start_on_free_port`` (one retry on another port when the first was taken during start-up),
``find_binary`` (a missing program named with its Debian package) and ``fresh_dir``. Runs on the caller's
thread.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from relay.dev.programs import package_of
from relay.dev.services.processes import ServiceProcess
from relay.errors import PortInUseError, ServiceError

log = logging.getLogger(__name__)

S = TypeVar("S")

LOOPBACK = "127.0.0.1"
_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")


def free_port() -> int:
    """A port nobody listens on right now (another process may take it before we do: callers retry once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class StartOptions:
    """How to start one service. ``directory`` is the service's own: data, log and socket live in it."""

    directory: Path
    detached: bool = False
    timeout: float = 60.0
    extra_args: tuple[str, ...] = ()  # appended to the server's command line (last wins), e.g. for mariadbd


@dataclass
class Running(Generic[S]):
    """A started service: what to connect to, and the process behind it."""

    service: S
    process: ServiceProcess
    directory: Path

    def stop(self, remove_dir: bool = False, timeout: float = 15.0) -> None:
        self.process.stop(timeout)
        if remove_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Running[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(remove_dir=True)


def start_on_free_port(start_once: Callable[[int], Running[S]]) -> Running[S]:
    try:
        return start_once(free_port())
    except PortInUseError as exc:
        log.warning("port taken during start-up, retrying on another one: %s", exc)
        return start_once(free_port())


def find_binary(name: str) -> str:
    """The path of program ``name``; ``ServiceError`` naming its Debian package (``relay.dev.programs``)."""
    path = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *_SBIN_DIRS]))
    if path is None:
        package = package_of(name)
        raise ServiceError(
            f"{name} not found: install it with `apt-get install -y {package}` (or run scripts/bootstrap)"
        )
    return path


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
