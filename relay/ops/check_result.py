"""What one check of ``relay check`` found: a verdict, what was checked, and what was seen, as one line.

Shared by ``relay.ops.check`` (the sequence) and ``relay.ops.check_servers`` (the server checks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.common.redact import redact

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"


@dataclass(frozen=True)
class Check:
    status: str
    what: str
    detail: str

    def line(self) -> str:
        """One line: the verdict, what was checked, what was found (secrets redacted, one line)."""
        detail = " | ".join(part.strip() for part in redact(self.detail).splitlines() if part.strip())
        return f"{self.status:<4}  {self.what}: {detail}"


Emit = Callable[[Check], None]
