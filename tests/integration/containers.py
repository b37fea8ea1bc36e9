"""A container engine for the deploy tests: find one, build the project's images, run and inspect containers.

Where no engine answers (``podman info`` / ``docker info``), ``require_engine`` skips the test saying so. The
images are built from ``deploy/`` with the engine's layer cache, once per test session: a rebuild after an
edit of the relay's source redoes only the compile step on; nothing changed, it takes seconds.

- ``RELAY_TEST_CONTAINER_ENGINE``: ``podman`` or ``docker`` (default: the first of them that answers);
- ``RELAY_TEST_CONTAINER_BUILD``: the build command. Default: the workplace's wrapper
  ``../shared/tools/containers build`` beside the checkout where it exists (it mounts the machine's package
  index settings and CA certificates for the build; a plain ``podman build`` cannot reach the index there),
  else ``<engine> build``.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE_USER = 10001  # deploy/Dockerfile's relay user
_BUILD_TIMEOUT = 3600.0


@functools.cache
def engine() -> str | None:
    """The container engine's program, or None where none answers."""
    chosen = os.environ.get("RELAY_TEST_CONTAINER_ENGINE")
    for name in [chosen] if chosen else ["podman", "docker"]:
        program = shutil.which(name)
        if program is None:
            continue
        try:
            answered = subprocess.run([program, "info"], capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if answered.returncode == 0:
            return program
    return None


def require_engine() -> str:
    program = engine()
    if program is None:
        pytest.skip(
            "no container engine answers here (podman or docker; RELAY_TEST_CONTAINER_ENGINE names one): "
            "the image and compose tests need one to build and run deploy/"
        )
    return program


def _default_build() -> str:
    wrapper = ROOT.parent / "shared" / "tools" / "containers"
    if wrapper.is_file() and os.access(wrapper, os.X_OK):
        require_engine()
        return f"{shlex.quote(str(wrapper))} build"
    return f"{require_engine()} build"


def build(tag: str, dockerfile: str, log: Path, build_args: Sequence[str] = ()) -> None:
    """Build ``dockerfile`` (relative to the repository) from the repository root as ``tag``."""
    command = shlex.split(os.environ.get("RELAY_TEST_CONTAINER_BUILD") or _default_build())
    args = [f"--build-arg={arg}" for arg in build_args]
    with log.open("ab") as out:
        done = subprocess.run(
            [*command, "-f", dockerfile, "-t", tag, *args, str(ROOT)],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=_BUILD_TIMEOUT,
            check=False,
        )
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        hint = (
            "\n(where a build cannot reach the package index by itself, RELAY_TEST_CONTAINER_BUILD names a "
            "build command that mounts the machine's index settings and CA certificates)"
            if "RELAY_TEST_CONTAINER_BUILD" not in os.environ
            else ""
        )
        failed = f"building {tag} from {dockerfile} failed (exit {done.returncode})"
        raise AssertionError(f"{failed}:\n{tail}{hint}")


def run(
    *args: str,
    timeout: float = 120.0,
    check: bool = True,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """``<engine> args…``; its standard output (a failure shows standard error). ``env`` adds variables to
    the engine's environment (``-e NAME`` then passes one on without its value on a command line)."""
    done = subprocess.run(
        [require_engine(), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **env} if env else None,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args[:3])}… exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def python_in(container: str, code: str, *, user: str | None = None, timeout: float = 120.0) -> Any:
    """Run ``code`` with python3 in a running container (code on standard input); its last output line,
    parsed as JSON."""
    who = ["--user", user] if user else []
    out = run("exec", "-i", *who, container, "python3", "-", stdin=code, timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])


def volume_owner(volume: str, path: str, image: str = "canal-relay:test") -> dict[str, int]:
    """{file under ``path`` in ``volume``: its owner uid}, read by a throwaway container of ``image``."""
    listing = run(
        "run", "--rm", "--user", "0", "-v", f"{volume}:/v:ro", "--entrypoint", "find", image,
        f"/v/{path.strip('/')}", "-printf", "%U %P\\n",
    )  # fmt: skip
    owners: dict[str, int] = {}
    for line in listing.splitlines():
        uid, _, name = line.partition(" ")
        owners[name] = int(uid)
    return owners


def logs(container: str) -> str:
    """A container's output, standard output and error together (the relay logs to standard error)."""
    done = subprocess.run(
        [require_engine(), "logs", container],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        timeout=60,
        check=False,
    )
    return done.stdout


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
