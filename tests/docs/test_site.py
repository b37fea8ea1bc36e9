"""The documentation site builds: ``mkdocs build --strict`` over mkdocs.yml and docs/, as ``scripts/docs
build`` does. A broken link, a link to a missing anchor, a nav entry without its page or a page left out
of the nav fails it, with mkdocs' own warning lines in the failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    problems = [ln for ln in proc.stderr.splitlines() if "WARNING" in ln or "ERROR" in ln]
    shown = "\n".join(problems or [proc.stderr[-3000:]])
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{shown}"
    assert (tmp_path / "site" / "index.html").is_file()
