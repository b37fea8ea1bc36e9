"""Flink SQL as an independent reader of the relay's canal-json topics (``tests/flink/canal_json_state.py``)
and debezium-json topics (``tests/flink/debezium_json_state.py``).

``flink_state`` writes the values of records read from Kafka — each partition in offset order, exactly as
consumed, never re-sorted — to a file and has Flink's ``canal-json`` format materialise it by key, in the
separate ``.venv-flink`` environment that ``scripts/bootstrap`` installs (PyFlink's pinned dependencies
would clash with the project's). A topic whose records of one key are out of binlog order leaves Flink
with a stale row, which the caller's comparison with ``SELECT`` shows.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
FLINK_PYTHON = REPO_ROOT / ".venv-flink" / "bin" / "python"
SCRIPT = REPO_ROOT / "tests" / "flink" / "canal_json_state.py"
DEBEZIUM_SCRIPT = REPO_ROOT / "tests" / "flink" / "debezium_json_state.py"


def flink_state(
    values: Iterable[bytes | None], key: str, columns: list[str], work: Path
) -> dict[str, dict[str, str | None]]:
    """The rows Flink SQL's canal-json format materialises from ``values`` (in consumption order)."""
    return _run(SCRIPT, values, [key, ",".join(columns)], work)


def flink_debezium_state(
    values: Iterable[bytes | None], key: str, columns: dict[str, str], schema_include: bool, work: Path
) -> dict[str, dict[str, Any]]:
    """The rows Flink SQL's debezium-json format materialises from ``values`` (in consumption order);
    ``columns``: name → Flink SQL type; bytes come back as hex."""
    declared = ",".join(f"{name}:{kind}" for name, kind in columns.items())
    return _run(DEBEZIUM_SCRIPT, values, [key, "true" if schema_include else "false", declared], work)


def _run(
    script: Path, values: Iterable[bytes | None], args: list[str], work: Path
) -> dict[str, dict[str, Any]]:
    if not FLINK_PYTHON.exists():
        raise AssertionError(f"{FLINK_PYTHON} is missing: run scripts/bootstrap (it installs PyFlink there)")
    path = work / "flink-input.json"
    with open(path, "wb") as out:
        for value in values:
            if value is not None:  # a tombstone: Flink's Kafka source hands canal-json nothing
                out.write(value.replace(b"\n", b" ") + b"\n")
    # Flink's mini cluster resolves this machine's host name; a fresh root (or a container) may have no
    # entry for it: the JVM resolves names from a hosts file of the test's own instead.
    hosts = work / "flink-hosts"
    hosts.write_text(f"127.0.0.1 localhost {socket.gethostname()}\n")
    done = subprocess.run(  # noqa: PLW1510 - the return code is asserted
        [str(FLINK_PYTHON), str(script), str(path), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JVM_ARGS": f"-Djdk.net.hosts.file={hosts}"},
    )
    assert done.returncode == 0, f"Flink failed:\n{done.stderr[-3000:]}"
    state: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return state
