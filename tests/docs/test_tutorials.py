"""Every tutorial runs as written: its runnable blocks (tests/docs/tutorials.py) are executed in order in one
bash, against the test session's MariaDB, Kafka (and ZooKeeper, for a tutorial that names it), given in the
variables ``relay dev up`` prints (``RELAY_TEST_MYSQL``, ``RELAY_TEST_KAFKA``, ``RELAY_TEST_ZK``), with the
checkout's ``relay`` first on ``PATH`` and ``VIRTUAL_ENV`` naming its ``.venv`` — what a reader has after
``source .venv/bin/activate``. A block the
test does not run is listed as a skipped test, with its reason."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from relay.dev.services import KafkaService, MySQLService
from tests.docs import tutorials

PAGES = [p for p in tutorials.pages() if any(b.runnable for b in tutorials.blocks(p))]
SKIPPED = [b for p in tutorials.pages() for b in tutorials.blocks(p) if b.skip_reason]
TIMEOUT_SECONDS = 420
# Run by scripts/test-long only: the rest keep scripts/test's time (about a minute each on 2 busy cores).
LONG = {"move-a-table.md", "cluster.md", "mirror-s3-duckdb.md"}


def test_every_shell_block_is_run_or_says_why() -> None:
    unmarked = [
        f"{b.page}:{b.line}"
        for p in tutorials.pages()
        for b in tutorials.blocks(p)
        if b.language in ("bash", "sh", "shell", "console") and not b.runnable and not b.skip_reason
    ]
    assert not unmarked, f"mark these blocks {tutorials.RUNNABLE} or <!-- not run: REASON -->: {unmarked}"
    assert len(PAGES) >= 3


def test_commands_are_counted_as_a_reader_types_them() -> None:
    text = "cd x  # go\nfor s in 1 2; do\n  echo $s\ndone\ncat > f <<'Y'\na: 1\nY\nrelay a \\\n  --b c\n"
    assert tutorials.commands(text) == [
        "cd x  # go", "for s in 1 2; do echo $s done", "cat > f <<'Y'", "relay a  --b c",
    ]  # fmt: skip


@pytest.mark.parametrize("block", SKIPPED, ids=[f"{b.page}:{b.line}" for b in SKIPPED])
def test_block_not_run(block: tutorials.Block) -> None:
    pytest.skip(f"{block.page}:{block.line} not run: {block.skip_reason}")


@pytest.mark.integration
@pytest.mark.parametrize(
    "page", [pytest.param(p, id=p.name, marks=[pytest.mark.long] if p.name in LONG else []) for p in PAGES]
)
def test_tutorial_runs_as_written(
    page: Path,
    mysql_service: MySQLService,
    kafka_service: KafkaService,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": str(Path(bin_dir).parent),  # as `activate` sets it: the Flink tutorial's checkout
        "RELAY_TEST_MYSQL": mysql_service.url,
        "RELAY_TEST_KAFKA": kafka_service.bootstrap_servers,
        "TMPDIR": str(tmp_path),  # the tutorial's `mktemp -d`
    }
    # Flink's mini cluster resolves this machine's host name, which a fresh root (or a container) may not: the
    # JVM reads names from a hosts file of the test's own (as tests/flink_check.py does); a reader's machine
    # resolves its own name.
    hosts = tmp_path / "jvm-hosts"
    hosts.write_text(f"127.0.0.1 localhost {socket.gethostname()}\n")
    env["JVM_ARGS"] = f"-Djdk.net.hosts.file={hosts}"
    if "RELAY_TEST_ZK" in page.read_text(encoding="utf-8"):  # ZooKeeper only for the tutorials that use it
        env["RELAY_TEST_ZK"] = request.getfixturevalue("zk_service").hosts
    proc = subprocess.Popen(
        ["bash", "-c", tutorials.script(page)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the relay a tutorial starts in the background is in its process group
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{page.name}: still running after {TIMEOUT_SECONDS} s:\n{out[-4000:]}")
    finally:
        # whatever the tutorial left running (a relay, when a block failed before its `kill`)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    if proc.returncode != 0:
        stopped = re.findall(r"^::block (\S+)$", out, re.MULTILINE)
        logs = "\n".join(
            f"--- {log}:\n{log.read_text(errors='replace')[-3000:]}" for log in tmp_path.rglob("relay.log")
        )
        pytest.fail(
            f"{stopped[-1] if stopped else page.name}: exit status {proc.returncode}\n{out[-6000:]}\n{logs}"
        )
    ran = sum(len(tutorials.commands(b.text)) for b in tutorials.blocks(page) if b.runnable)
    assert ran > 5
    print(f"{page.name}: {ran} commands ran")
