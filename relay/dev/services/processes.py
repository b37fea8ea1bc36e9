"""The server processes a development service runs: starting one, telling it apart, stopping it.

Owns ``spawn`` (a child with its output in a log file, attached or detached), ``ServiceProcess``, the
pid + start-time identity (``proc_start_time``, ``pid_alive``: a recycled pid is never taken for ours) and
``stop_pid`` (SIGTERM to the process group, then SIGKILL). Runs on the caller's thread; the only other code
that runs is the ``atexit`` hook stopping attached children a caller left running.

Attached children get ``PR_SET_PDEATHSIG=SIGKILL``: they die with the thread that started them even when
pytest is SIGKILLed. Detached ones run in their own session and outlive the starter. Linux only (``/proc``,
``prctl``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from relay.common.retry import RetryPolicy
from relay.errors import ServiceError

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_LOG_TAIL_LINES = 25


def proc_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22), None if gone.

    Stored beside a pid so that a recycled pid is never mistaken for our server, nor killed.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: fields after it are found from the last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":  # a zombie has exited; only its parent's wait() is missing
        return None
    return int(fields[19])


def pid_alive(pid: int, start_time: int) -> bool:
    return proc_start_time(pid) == start_time


def stop_pid(
    pid: int, start_time: int, timeout: float = 15.0, popen: subprocess.Popen[bytes] | None = None
) -> None:
    """Stop a server and its process group: SIGTERM, and SIGKILL once ``timeout`` has passed."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not pid_alive(pid, start_time):
            break
        with contextlib.suppress(ProcessLookupError):
            # Our servers lead their own process group (new session), so the group id is the pid.
            os.killpg(pid, sig)
        if _wait_gone(pid, start_time, wait, popen):
            break
    if pid_alive(pid, start_time):
        raise ServiceError(f"process {pid} is still alive after SIGKILL")
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)  # reap it, so no zombie is left behind


def _wait_gone(pid: int, start_time: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    if popen is not None:
        try:
            popen.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    backoff = RetryPolicy(initial=0.02, maximum=0.2, deadline=timeout).start()
    while pid_alive(pid, start_time):
        if not backoff.wait():
            return False
    return True


@dataclass
class ServiceProcess:
    """One server process we started; ``start_time`` tells it apart from a later process with its pid."""

    name: str
    pid: int
    start_time: int
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return pid_alive(self.pid, self.start_time)

    def stop(self, timeout: float = 15.0) -> None:
        _ATTACHED.pop(self.pid, None)
        stop_pid(self.pid, self.start_time, timeout, self.popen)

    def kill(self) -> None:
        """SIGKILL to its process group at once (no SIGTERM first: a crash, not a stop), then reaped."""
        _ATTACHED.pop(self.pid, None)
        if pid_alive(self.pid, self.start_time):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
        stop_pid(self.pid, self.start_time, 5.0, self.popen)

    def log_tail(self) -> str:
        return log_tail(self.log_path)


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


# Attached children still running, stopped at interpreter exit in case a caller forgot to (a normal
# exit does not trigger PR_SET_PDEATHSIG until the main thread is gone, and then only with SIGKILL).
_ATTACHED: dict[int, ServiceProcess] = {}


@atexit.register
def _stop_attached() -> None:
    for proc in list(_ATTACHED.values()):
        with contextlib.suppress(ServiceError):
            proc.stop(timeout=5.0)


def _die_with_parent() -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: the child only makes the call
    parent = os.getpid()

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def spawn(
    name: str,
    argv: list[str],
    log_path: Path,
    *,
    detached: bool,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> ServiceProcess:
    """Start one server with its output appended to ``log_path``.

    Attached children die with the *thread* that forked them (that is how ``PR_SET_PDEATHSIG`` works):
    start them from a thread that lives as long as they should, e.g. pytest's main thread.
    """
    with open(log_path, "ab") as out:
        popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop_pid signals the group; no terminal ^C
            # The hook only calls prctl and getppid, which is safe between fork and exec even with threads.
            preexec_fn=None if detached else _die_with_parent(),  # noqa: PLW1509
        )
    start_time = proc_start_time(popen.pid)
    proc = ServiceProcess(name, popen.pid, start_time or 0, log_path, popen)
    if not detached:
        _ATTACHED[popen.pid] = proc
    log.info("started %s pid=%d (%s)", name, popen.pid, "detached" if detached else "attached")
    return proc
