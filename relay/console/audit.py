"""The console's record of every change made through it: who, when, what, on which instance, the outcome.

Owns ``<state-dir>/audit.jsonl``: one JSON line per state-changing request that reached its action (a
mapping applied or refused, a rollback, a drain, a move, a snapshot or verify started), appended and
flushed before the page answers, and the same line logged at INFO. The mapping store's own history keeps
each version's author too (the console's user, ``mapping.store.acting_as``); this file adds the actions
that leave no version. Read back newest first for the audit page. Runs on request threads.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from relay.common.redact import redact_value

log = logging.getLogger(__name__)

__all__ = ["AuditLog"]


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, user: str, action: str, instance: str, detail: dict[str, Any], outcome: str) -> None:
        entry = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "user": user,
            "action": action,
            "instance": instance,
            "detail": redact_value(detail),
            "outcome": outcome,
        }
        line = json.dumps(entry, ensure_ascii=False, default=str)
        with self._lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
        log.info("console audit: %s %s on %s: %s", user, action, instance or "-", outcome)

    def entries(self, limit: int = 500) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in reversed(lines[-limit:]):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out
