"""A node's instance processes: start the ones it is assigned, restart a crashed one with a backoff, stop
(SIGTERM, which drains; SIGKILL past a bound) the ones taken away or whose definition changed.

Owns the child processes of ``relay cluster run`` and nothing of ZooKeeper: the supervisor
(``relay.cluster.node``) says which instances it wants at which definition version (``want``), and calls
``poll`` on its one thread (the node's main thread) after every wake-up; ``poll`` never blocks. Each child
is a process of its own (``relay cluster child``: one instance, HA on, fenced by its own epoch), in its
own session, so a crash of one never takes another down; its output goes to ``<state_dir>/<instance>/
relay.log``. A child exiting while wanted is restarted after ``restart_backoff_seconds``, doubling up to
``restart_backoff_max_seconds``; one that ran ``healthy_after_seconds`` starts the backoff over. One
that stopped on a schema error (``EXIT_SCHEMA_HELD``) is held instead: not restarted until ``release``
(``relay.cluster.holds``: after ``relay schema resync --instance``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.cluster.node_config import ChildrenConfig
from relay.config.state import SNAPSHOT_REQUEST_FILE

log = logging.getLogger(__name__)

__all__ = ["Children"]

EXIT_LEADERSHIP_LOST = 3  # relay.cli.main's: the child's term ended (fenced); it is restarted to stand by
EXIT_SCHEMA_HELD = (
    5  # `relay cluster child` stopped on a schema error: held, not restarted (relay.cluster.holds)
)
HELD = "held"  # the ``process`` of a child held after a schema error
LOG_FILE = "relay.log"


@dataclass
class _Child:
    instance: str
    version: int = 0
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    stopping_since: float | None = None  # monotonic time of the SIGTERM
    killed: bool = False
    restarts: int = 0
    backoff: float = 0.0
    not_before: float = 0.0  # monotonic: no restart before this
    last_exit: int | None = None
    last_error: str | None = None
    held: bool = False  # ended with EXIT_SCHEMA_HELD: not restarted until ``release``


class Children:
    """The child processes of one node, by instance name."""

    def __init__(
        self,
        command: Callable[[str, int], list[str]],
        state_dir: Path,
        config: ChildrenConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._command = command
        self._state_dir = state_dir
        self._config = config
        self._clock = clock
        self._children: dict[str, _Child] = {}
        self._wanted: dict[str, int] = {}

    def want(self, wanted: Mapping[str, int]) -> None:
        """Run exactly these instances (name → definition version) from the next ``poll`` on."""
        self._wanted = dict(wanted)

    def poll(self) -> None:
        """Reap, stop, escalate, (re)start: one non-blocking pass."""
        now = self._clock()
        for name in sorted(set(self._children) | set(self._wanted)):
            child = self._children.setdefault(name, _Child(name))
            self._reap(child, now)
            wanted = self._wanted.get(name)
            if child.process is not None:
                if wanted is None or wanted != child.version:
                    self._terminate(child, now, "moved away" if wanted is None else "definition changed")
                self._escalate(child, now)
            elif wanted is not None and now >= child.not_before and not child.held:
                self._start(child, wanted, now)
            elif wanted is None:
                del self._children[name]

    def release(self, instance: str) -> None:
        """Start a held child again (its schema was resynced) at the next ``poll``."""
        child = self._children.get(instance)
        if child is not None:
            child.held, child.not_before, child.backoff = False, self._clock(), 0.0

    def running(self) -> list[str]:
        """The instances with a live process (stopping ones included)."""
        return sorted(n for n, c in self._children.items() if c.process is not None)

    def stop_all(self, deadline: float) -> None:
        """SIGTERM every child, wait until ``deadline`` (monotonic) — no longer than each child's stop
        bound — then SIGKILL what is left, and reap. Blocks the caller (the node is leaving)."""
        self._wanted = {}
        now = self._clock()
        for child in self._children.values():
            if child.process is not None:
                self._terminate(child, now, "node stopping")
        while self.running() and self._clock() < deadline:
            self.poll()
            time.sleep(0.05)
        for child in self._children.values():
            if child.process is not None and child.process.poll() is None:
                log.warning("instance %s: still running at the node's stop bound: SIGKILL", child.instance)
                self._signal(child, signal.SIGKILL)
                child.killed = True
        for child in list(self._children.values()):
            if child.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.process.wait(timeout=5)
                self._reap(child, self._clock())

    def signal_all(self, sig: int) -> int:
        """Send ``sig`` to every live child process (0: none, only count them); how many there were.
        The one method safe from another thread (the node's session guard): it neither reaps nor
        changes what is wanted — the main thread's ``poll`` reaps what ended, as stopped on request
        (this notes when, as ``_terminate`` does: plain attribute writes), not as a crash."""
        count = 0
        for child in list(self._children.values()):
            process = child.process
            if process is None or process.poll() is not None:
                continue
            count += 1
            if sig:
                if child.stopping_since is None:
                    child.stopping_since = self._clock()
                child.killed = child.killed or sig == signal.SIGKILL
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)
        return count

    def report(self) -> dict[str, dict[str, Any]]:
        """Per instance: pid, since (seconds running), restarts, last exit status and error."""
        now = self._clock()
        out: dict[str, dict[str, Any]] = {}
        for name, child in self._children.items():
            alive = child.process is not None
            out[name] = {
                "pid": child.process.pid if child.process is not None else None,
                "process": "stopping"
                if child.stopping_since is not None
                else ("running" if alive else (HELD if child.held else "waiting")),
                "running_seconds": round(now - child.started, 1) if alive else None,
                "restarts": child.restarts,
                "last_exit": child.last_exit,
                "last_error": child.last_error,
                "definition_version": child.version,
                "restart_in_seconds": round(max(0.0, child.not_before - now), 1) if not alive else None,
            }
        return out

    def log_path(self, instance: str) -> Path:
        return self._state_dir / instance / LOG_FILE

    # -- internals ------------------------------------------------------------------------------
    def _start(self, child: _Child, version: int, now: float) -> None:
        path = self.log_path(child.instance)
        path.parent.mkdir(parents=True, exist_ok=True)
        # A request file an earlier child did not take: its request is still in ZooKeeper (answered
        # only once a relay took it), so it is handed over again, once (relay.cluster.requests).
        (path.parent / SNAPSHOT_REQUEST_FILE).unlink(missing_ok=True)
        argv = self._command(child.instance, version)
        with path.open("ab") as out:
            child.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        child.version, child.started, child.stopping_since, child.killed = version, now, None, False
        log.info(
            "instance %s: started (definition version %d, pid %d)", child.instance, version, child.process.pid
        )

    def _terminate(self, child: _Child, now: float, why: str) -> None:
        if child.stopping_since is None:
            log.info("instance %s: stopping (%s): SIGTERM to pid %s", child.instance, why, self._pid(child))
            child.stopping_since = now
            self._signal(child, signal.SIGTERM)

    def _escalate(self, child: _Child, now: float) -> None:
        since = child.stopping_since
        if since is not None and not child.killed and now - since > self._config.stop_timeout_seconds:
            log.warning("instance %s: not stopped %.0f s after SIGTERM: SIGKILL", child.instance, now - since)
            self._signal(child, signal.SIGKILL)
            child.killed = True

    def _reap(self, child: _Child, now: float) -> None:
        process = child.process
        if process is None or process.poll() is None:
            return
        code = process.returncode
        child.process, child.last_exit = None, code
        asked = child.stopping_since is not None
        child.stopping_since = None
        if asked and code in (0, -signal.SIGTERM, -signal.SIGKILL):
            child.not_before = now  # stopped because we asked: start again at once if wanted again
            return
        ran = now - child.started
        if ran >= self._config.healthy_after_seconds:
            child.backoff = 0.0
        child.backoff = (
            self._config.restart_backoff_seconds
            if child.backoff == 0.0
            else min(child.backoff * 2, self._config.restart_backoff_max_seconds)
        )
        child.restarts += 1
        child.not_before = now + child.backoff
        child.last_error = self._last_error(child.instance, code)
        if code == EXIT_SCHEMA_HELD:
            child.held = True
            log.error(
                "instance %s: stopped on a schema error: not restarted (%s)", child.instance, child.last_error
            )
            return
        level = logging.INFO if code == EXIT_LEADERSHIP_LOST else logging.WARNING
        log.log(
            level,
            "instance %s: exited with status %s after %.1f s; restart in %.1f s (%s)",
            child.instance,
            code,
            ran,
            child.backoff,
            child.last_error,
        )

    def _last_error(self, instance: str, code: int) -> str:
        """The child's last ERROR line (from the end of its log), else its exit status."""
        try:
            with self.log_path(instance).open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 16384))
                tail = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            tail = []
        for line in reversed(tail):
            if " ERROR " in line or line.startswith("relay: error:"):
                return line.strip()[-500:]
        return f"exit status {code}"

    @staticmethod
    def _pid(child: _Child) -> int | None:
        return child.process.pid if child.process is not None else None

    @staticmethod
    def _signal(child: _Child, sig: int) -> None:
        if child.process is not None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(sig)
