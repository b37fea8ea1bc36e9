"""The one list of programs the code and tests run (relay/dev/programs.py) covers every program they look up,
and runs standalone with the system python3 (scripts/bootstrap reads it before the virtualenv exists)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from relay.dev import programs
from relay.dev.services import find_binary
from relay.errors import ServiceError

ROOT = Path(__file__).resolve().parents[2]


def test_every_program_looked_up_is_listed() -> None:
    used: set[str] = set()
    for path in [*ROOT.glob("relay/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        text = path.read_text(encoding="utf-8")
        used.update(re.findall(r'find_binary\(\s*"([\w.-]+)"', text))
        used.update(re.findall(r'shutil\.which\(\s*"([\w.-]+)"', text))
        used.update(re.findall(r'subprocess\.\w+\(\s*\[\s*"([\w.-]+)"', text))
    used.discard("relay")  # the project's own entry point (pip installs it)
    assert used, "the scan found nothing: the patterns are out of date"
    listed = set(programs.PROGRAMS) | set(programs.OPTIONAL)
    assert used <= listed, f"not in relay/dev/programs.py: {used - listed}"


def test_the_list_runs_standalone_and_prints_program_and_package() -> None:
    out = subprocess.run(
        [sys.executable, "-I", str(ROOT / "relay/dev/programs.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = dict(line.split("\t") for line in out.splitlines())
    assert lines["mariadb-tzinfo-to-sql"] == "mariadb-client"
    assert lines["/usr/share/java/zookeeper.jar"] == "zookeeper"
    assert not set(programs.OPTIONAL) & set(lines), "optional programs are not for bootstrap to install"


def test_a_missing_program_names_its_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    with pytest.raises(ServiceError, match=r"apt-get install -y mariadb-client\b"):
        find_binary("mariadb-tzinfo-to-sql")
    with pytest.raises(KeyError, match="not listed"):
        programs.package_of("no-such-tool")
