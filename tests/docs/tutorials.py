"""The runnable blocks of the tutorials (docs/tutorials/*.md), as a shell runs them.

A tutorial marks each ```bash block on the line before it: ``<!-- runnable -->`` (the test runs it) or
``<!-- not run: REASON -->`` (the test lists it as skipped, with the reason). A bash block with neither is an
error: a tutorial cannot grow a command nobody runs. The runnable blocks of one tutorial run in order, in one
bash (so a ``cd``, a variable or a background relay carries over, as in the reader's shell), with ``set -e``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "docs" / "tutorials"
RUNNABLE = "<!-- runnable -->"
_NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")
_FENCE = re.compile(r"^```(\S*)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    marker: str  # the line before the fence

    @property
    def runnable(self) -> bool:
        return self.marker == RUNNABLE

    @property
    def skip_reason(self) -> str | None:
        m = _NOT_RUN.match(self.marker)
        return m.group(1) if m else None


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        before = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        out.append(Block(page.name, start + 1, m.group(1), "\n".join(lines[start + 1 : i]), before))
        i += 1
    return out


def pages() -> list[Path]:
    return sorted(TUTORIALS.glob("*.md"))


def commands(text: str) -> list[str]:
    """The commands of a block as a reader types them: continuation lines joined, a here-document counted
    with the command that opens it, comments and blank lines left out."""
    out: list[str] = []
    heredoc: str | None = None
    pending = ""
    for raw in text.splitlines():
        if heredoc is not None:
            if raw.strip() == heredoc:
                heredoc = None
            continue
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if m := re.search(r"<<-?\s*'?\"?(\w+)'?\"?", line):
            heredoc = m.group(1)
        pending = f"{pending} {line}".strip()
        opens = pending.endswith(("\\", "do", "then", "{")) or pending.startswith(("for ", "if "))
        if opens and not re.search(r"\b(done|fi|})\s*(;.*)?$", pending):
            pending = pending.rstrip("\\")
            continue
        out.append(pending)
        pending = ""
    if pending:
        out.append(pending)
    return out


def script(page: Path) -> str:
    """One bash script of a tutorial's runnable blocks, each announced on stdout (``::block PAGE:LINE``) so a
    failure names the block it stopped in."""
    parts = ["set -euo pipefail"]
    for block in blocks(page):
        if block.runnable:
            parts.append(f"printf '\\n::block %s:%d\\n' '{block.page}' {block.line}")
            parts.append(block.text)
    return "\n".join(parts) + "\n"
