"""Every bad input is one clear line: every ``relay`` subcommand × the failure classes an operator meets.

The matrix (``tests/integration/cli_sweep.py``) is built from the CLI's own parser, so a command added
later is in it without an edit here. Each case runs as a real ``relay`` process — forked by a worker that
has the command imported already (``cli_sweep_worker``), two workers at once, each running several cases
side by side — against the session's real MariaDB, broker and ZooKeeper, with one thing broken per class.

Every case must end (a one-shot command within ``BOUND`` seconds; a long-running one keeps retrying, one
line per attempt, until SIGTERM stops it, then exits as documented) with an exit status ``relay --help``
documents, no traceback, and no other noise on stderr (no client library's log lines, no Python
warnings): a one-shot command's stderr is at most the one ``relay…: error:`` line (a config's problems, one
line each). Where a failure class changes the outcome of a command (against the same command in the sound
world, its *baseline*), the error must name the cause (the address, file, table…) and the setting or flag
to change. The run prints the matrix's size, what no input of a command reaches, and the slowest cases.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from relay.cli.main import EXIT_STATUSES
from tests.integration.cli_sweep import Case, Command, World, matrix, not_applicable
from tests.integration.relay_harness import REPO_ROOT, create_shards, drop_shards, single_table_mapping

pytestmark = pytest.mark.integration

BOUND = 15.0  # seconds a one-shot command may take to fail (connect timeouts included)
SLACK = 5.0  # a loaded 2-core machine's scheduling on top of that, never the command's own waits
TERM_AFTER = 14.0  # a long-running command is stopped with SIGTERM after this
WORKERS, PARALLEL = 2, 10
DOCUMENTED = {int(m) for m in re.findall(r"^  (\d+) ", EXIT_STATUSES, re.M)}
PROGRESS = re.compile(r"^\[\s*\d+(\.\d+)?s\] ")  # relay bench's progress: "[  12.3s] starting MariaDB …"
# the JVM's and Spark's own lines when a long-running command starts Spark (its log, like a relay's)
JVM_LINE = re.compile(
    r"^(WARNING: Using incubator modules|Using Spark's default log4j profile|Setting default log level"
    r"|To adjust logging level use|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO) )"
)
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|^\{\"")  # a long-running command's log lines


@dataclass
class Outcome:
    case: Case
    code: int
    seconds: float
    termed: bool
    killed: bool
    stdout: str
    stderr: str

    @property
    def last(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def world(mysql_service: Any, kafka_service: Any, zk_service: Any) -> Iterator[World]:
    root = Path(tempfile.mkdtemp(prefix="relay-sweep-"))
    os.chmod(root, 0o755)
    prefix = f"sw{time.monotonic_ns() % 10**6}"
    conn = mysql_service.connect()
    create_shards(conn, prefix, 1, 1)
    user, password = f"{prefix}_nogrant", "no-grant-pw"
    with conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    refused = socket.socket()
    refused.bind(("127.0.0.1", 0))  # bound, never listening: refused
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts into its backlog, never answers
    made = World(
        root,
        prefix,
        mysql_service,
        kafka_service.bootstrap_servers,
        str(zk_service.hosts),
        refused.getsockname()[1],
        silent.getsockname()[1],
        user,
        password,
    )
    made.mapping = single_table_mapping(prefix)
    made.relay = {
        "instance": f"{prefix}-i",
        "source": {
            "host": mysql_service.host,
            "port": mysql_service.port,
            "user": mysql_service.replication_user,
            "password": mysql_service.replication_password,
            "server_id": 7300,
            "connect_timeout": 5.0,
        },
        "filter": {"include": f"{prefix}_\\d+\\..*"},
        "kafka": {"bootstrap_servers": kafka_service.bootstrap_servers, "ddl_topic": f"{prefix}.ddl"},
        "snapshot": {"mode": "never"},
        "logging": {"level": "INFO"},
    }
    made.node = {
        "node": {"name": "sweep-node", "capacity": 1},
        "zookeeper": {"hosts": str(zk_service.hosts), "root": f"/relay-sweep/{uuid.uuid4().hex}"},
    }
    yield made
    refused.close()
    silent.close()
    with conn.cursor() as cur:
        cur.execute(f"DROP USER '{user}'@'%'")
    drop_shards(conn, prefix, 1)
    conn.close()
    shutil.rmtree(root, ignore_errors=True)


class Workers:
    """``WORKERS`` fork servers, fed cases round-robin; results by case id."""

    def __init__(self, out: Path, zookeeper: str) -> None:
        self.out, self.zookeeper = out, zookeeper
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.integration.cli_sweep_worker", "--parallel", str(PARALLEL)],
                cwd=REPO_ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                text=True,
            )
            for _ in range(WORKERS)
        ]
        for proc in self.procs:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert json.loads(ready) == {"ready": True}, ready + (proc.stderr.read() if proc.stderr else "")
        self.results: dict[str, dict[str, Any]] = {}
        self._readers = [threading.Thread(target=self._read, args=(p,), daemon=True) for p in self.procs]
        for reader in self._readers:
            reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            result = json.loads(line)
            self.results[result["id"]] = result

    def run(self, cases: list[Case]) -> dict[str, dict[str, Any]]:
        for n, case in enumerate(cases):
            proc = self.procs[n % WORKERS]
            assert proc.stdin is not None
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(case.folder),
                "LANG": "C.UTF-8",
                "RELAY_STATE_DIR": str(case.folder / "state"),
                "RELAY_DEV_DIR": str(case.folder / "dev"),
                "RELAY_ZOOKEEPER": self.zookeeper,
                **{k: v for k, v in os.environ.items() if k.startswith(("RELAY_PURE", "JAVA_HOME"))},
                **case.env,
            }
            job = {
                "id": case.id,
                "argv": case.argv,
                "env": env,
                "cwd": str(case.folder),
                "no_dac": case.no_dac,
                "stdout": str(case.folder / "stdout.txt"),
                "stderr": str(case.folder / "stderr.txt"),
                "term_after": TERM_AFTER,
                "timeout": TERM_AFTER + 30,
            }
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=1800)
        for reader in self._readers:
            reader.join(10)
        return self.results


def _problems(o: Outcome, baseline: Outcome | None) -> list[str]:
    """What is wrong with one outcome (empty: nothing)."""
    problems = []
    text = o.stdout + o.stderr
    long_running = o.case.command.long_running
    if "Traceback" in text:
        problems.append("a traceback")
    if o.killed:
        problems.append("did not stop on SIGTERM within 30 s")
    if o.code not in DOCUMENTED:
        problems.append(f"exit status {o.code} is not documented ({sorted(DOCUMENTED)})")
    noise = [line for line in o.stderr.splitlines() if line.strip() and not _allowed(line, o.case.command)]
    if noise:
        problems.append(f"stderr noise: {noise[:3]}")
    if o.termed and not long_running:
        problems.append(f"still running after {TERM_AFTER:.0f} s (a one-shot command must end)")
    elif not o.termed and not long_running and o.seconds > BOUND + SLACK:
        problems.append(f"took {o.seconds:.1f} s (bound {BOUND:.0f} s)")
    if o.termed and long_running:
        retries = [
            line
            for line in o.stderr.splitlines()
            if LOG_LINE.match(line) and (" WARNING " in line or " ERROR " in line)
        ]
        if len(retries) > TERM_AFTER / 0.5 + 2:
            problems.append(f"{len(retries)} warning lines in {TERM_AFTER:.0f} s: more than one per retry")
        if retries and o.case.kind != "baseline":  # what it waits for, and the setting that names it
            said = "\n".join(retries)
            for group in o.case.expect:
                if not any(_names(word, said) for word in group):
                    problems.append(f"its retry lines do not name any of {group}: {retries[-1][:200]!r}")
    changed = baseline is None or (baseline.code, _shape(baseline.last)) != (o.code, _shape(o.last))
    if o.case.kind != "baseline" and o.code == 2 and changed:
        for group in o.case.expect:
            if not any(_names(word, text) for word in group):
                problems.append(f"the error does not name any of {group}: {o.last!r}")
    return problems


def _names(word: str, text: str) -> bool:
    """``word`` is in ``text`` (``re:…``: the pattern matches in it)."""
    return bool(re.search(word[3:], text)) if word.startswith("re:") else word in text


def _allowed(line: str, command: Command) -> bool:
    """A line a command may write to stderr: its one error line (and the problems of a config, one a
    line), a warning it documents (``warning: …``), its progress (``replay: …``, ``[  1.2s] …``, a bar
    redrawn with ``\r``), and a long-running command's log lines."""
    if line.startswith(("relay: ", "relay ", "  - ", "\r", "warning: ", f"{command.words[0]}: ")):
        return True
    if line.lstrip().startswith("- ") or PROGRESS.match(line):
        return True
    return command.long_running and bool(LOG_LINE.match(line) or JVM_LINE.match(line))


def _shape(line: str) -> str:
    return re.sub(r"\d+", "N", re.sub(r"/tmp/\S+", "PATH", line))


def test_every_subcommand_fails_every_bad_input_in_one_clear_line(world: World) -> None:
    cases = list(matrix(world))
    skipped = not_applicable(world)
    by_id = {c.id: c for c in cases}
    began = time.monotonic()
    results = Workers(world.root, world.zookeeper).run(cases)
    took = time.monotonic() - began
    outcomes: dict[str, Outcome] = {}
    for case_id, case in by_id.items():
        r = results.get(case_id)
        assert r is not None, f"{case_id}: no result"
        out, err = ((case.folder / n).read_text(errors="replace") for n in ("stdout.txt", "stderr.txt"))
        outcomes[case_id] = Outcome(case, r["code"], r["seconds"], r["termed"], r["killed"], out, err)
    failures = []
    for case_id, o in sorted(outcomes.items()):
        base = outcomes.get(f"{o.case.command.name} / baseline")
        for problem in _problems(o, base):
            failures.append(f"{case_id}: {problem}\n    relay {' '.join(o.case.argv)}\n    {o.last[:300]}")
    commands = {c.command.name for c in cases}
    classes = {c.kind for c in cases} - {"baseline"}
    slowest = sorted(outcomes.values(), key=lambda o: -o.seconds)[:5]
    one_shot = [o for o in outcomes.values() if not o.case.command.long_running]
    slowest_one_shot = max(one_shot, key=lambda o: o.seconds)
    baselines = sum(1 for c in cases if c.kind == "baseline")
    print(
        f"\nbad-input sweep: {len(commands)} subcommands × {len(classes)} failure classes: {len(cases)} "
        f"cases ({baselines} baselines), {len(skipped)} (command, class) pairs no input reaches; "
        f"{took:.0f} s on {WORKERS}×{PARALLEL} processes"
    )
    print(
        f"slowest one-shot case: {slowest_one_shot.case.id} {slowest_one_shot.seconds:.1f} s "
        f"(exit {slowest_one_shot.code}); slowest of all: "
        + "; ".join(f"{o.case.id} {o.seconds:.1f} s" for o in slowest)
    )
    tracebacks = sum(1 for o in outcomes.values() if "Traceback" in o.stdout + o.stderr)
    print(f"tracebacks: {tracebacks}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)
