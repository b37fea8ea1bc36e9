"""``relay demo --keep``'s console: a ``relay console`` process over the kept relay, with a login to print.

Owns writing the demo's users file (an ``operator`` named ``admin`` with a fresh random password, hashed
by ``relay.console.users``) and starting ``relay console -c <the demo's relay.yaml> --port 0`` in its own
session, beside the relay, so it outlives the demo; its first lines say where it listens, which this
module waits for (with a deadline). Runs in the demo's thread.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from relay.errors import DemoError

_SERVING = re.compile(r"relay console: serving .* on (http://\S+)")
_START_SECONDS = 60.0


@dataclass(frozen=True)
class KeptConsole:
    pid: int
    start_time: int
    url: str
    user: str
    password: str
    log_path: Path
    users_path: Path


def start_console(workdir: Path, config: Path) -> KeptConsole:
    """Write the users file, start the console, wait until it says where it listens."""
    from relay.console.users import User, UsersFile, hash_password
    from relay.dev.services import log_tail, proc_start_time

    users_path, log_path = workdir / "console-users.yaml", workdir / "console.log"
    password = secrets.token_urlsafe(12)
    UsersFile(users_path).save({"admin": User("admin", "operator", hash_password(password))})
    argv = [sys.executable, "-m", "relay.cli", "console", "-c", str(config), "--port", "0"]
    argv += ["--users", str(users_path), "--state-dir", str(workdir / "console")]
    with open(log_path, "ab") as out:
        popen = subprocess.Popen(
            argv,
            cwd=config.parent.parent,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no terminal ^C, and it survives the demo's exit
        )
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        found = _SERVING.search(log_path.read_text(errors="replace"))
        if found:
            start = proc_start_time(popen.pid) or 0
            return KeptConsole(popen.pid, start, found.group(1), "admin", password, log_path, users_path)
        if popen.poll() is not None:
            raise DemoError(f"relay console exited with {popen.returncode}:\n{log_tail(log_path, 15)}")
        time.sleep(0.1)
    popen.kill()
    raise DemoError(f"relay console did not say where it listens within {_START_SECONDS:.0f} s")
