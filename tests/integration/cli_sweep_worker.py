"""A fork server that runs ``relay`` commands for the bad-input sweep (``test_bad_input.py`` beside it).

Started as ``python -m tests.integration.cli_sweep_worker``; it imports the ``relay`` command and every
module its commands import lazily (not pyspark: no JVM), then reads one JSON case per line on stdin and
runs each in a forked child — a real process with its own pid, process group, signals, working directory,
environment, user and exit status, and stdout/stderr in files — exactly as ``relay …`` runs, without
paying the interpreter's start and the imports once per case (a few seconds each on a loaded 2-core
machine). Up to ``--parallel`` children run at once. A case past its ``term_after`` gets SIGTERM (a
long-running command's stop); past its ``timeout``, SIGKILL. One JSON result per case on stdout:
``{"id", "code", "seconds", "killed"}`` (``code``: the exit status, or -signal).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

PRELOAD_SKIP = ("relay.spark", "relay.dev.bench", "relay._native")


def preload() -> None:
    """Import the command and every module a command may import lazily (pyspark excepted)."""
    import relay
    import relay.cli.main

    for info in pkgutil.walk_packages(relay.__path__, "relay."):
        if info.name.startswith(PRELOAD_SKIP) or info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:  # a module that cannot load here loads in the child and says so there
            print(f"preload: {info.name}: {exc}", file=sys.stderr)


def drop_dac_override() -> None:
    """Lose root's power to read and write past file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), as an
    unprivileged account has none: a file of mode 000 is then unreadable here too. The interpreter's own
    files stay readable (they are the owner's or world-readable), unlike under another user."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [
            ("effective", ctypes.c_uint32),
            ("permitted", ctypes.c_uint32),
            ("inheritable", ctypes.c_uint32),
        ]

    libc = ctypes.CDLL(None, use_errno=True)
    header, data = Header(0x20080522, 0), (Data * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    keep = ~((1 << 1) | (1 << 2)) & 0xFFFFFFFF
    data[0].effective &= keep
    data[0].permitted &= keep
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def child(case: dict[str, Any]) -> None:
    """In the forked child: become the command's process and run it; never returns."""
    code = 70
    try:
        os.setsid()
        out = os.open(case["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        err = os.open(case["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (out, err, null):
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(case["env"])
        os.chdir(case["cwd"])
        if case.get("no_dac"):
            drop_dac_override()
        sys.argv = ["relay", *case["argv"]]
        from relay.cli.main import main

        try:
            code = main(case["argv"])
        except SystemExit as exc:  # argparse's own exits (--help, usage errors)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)


@dataclass
class Running:
    case: dict[str, Any]
    pid: int
    began: float
    termed: bool = False
    killed: bool = False


def serve(parallel: int) -> None:
    queue: list[dict[str, Any]] = []
    running: dict[int, Running] = {}
    stdin_open = True
    buffer = b""
    while stdin_open or queue or running:
        while queue and len(running) < parallel:
            case = queue.pop(0)
            pid = os.fork()
            if pid == 0:
                child(case)
            running[pid] = Running(case, pid, time.monotonic())
        if stdin_open:
            ready, _, _ = select.select([sys.stdin.fileno()], [], [], 0.05)
            if ready:
                chunk = os.read(sys.stdin.fileno(), 65536)
                if not chunk:
                    stdin_open = False
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        queue.append(json.loads(line))
        else:
            time.sleep(0.05)
        _reap(running)


def _reap(running: dict[int, Running]) -> None:
    now = time.monotonic()
    for pid, run in list(running.items()):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            del running[pid]
            code = os.waitstatus_to_exitcode(status)
            result = {"id": run.case["id"], "code": code, "seconds": round(now - run.began, 3)}
            result["killed"], result["termed"] = run.killed, run.termed
            print(json.dumps(result), flush=True)
            continue
        age = now - run.began
        term_after = run.case.get("term_after")
        if term_after is not None and age > term_after and not run.termed:
            run.termed = True
            _signal(pid, signal.SIGTERM)
        if age > run.case["timeout"] and not run.killed:
            run.killed = True
            _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)  # the child leads its own group: its children (a JVM, a server) too


def main() -> None:
    parallel = int(sys.argv[sys.argv.index("--parallel") + 1]) if "--parallel" in sys.argv else 8
    preload()
    print(json.dumps({"ready": True}), flush=True)
    serve(parallel)


if __name__ == "__main__":
    main()
