"""On-demand snapshot requests: how ``relay snapshot run|cancel`` reaches a running relay.

The channel is a file next to the status file (``snapshot.request_file``): the CLI writes one JSON
request atomically (``{"id", "action": "run"|"cancel", "table": "<logical db>.<table>", "where"}``, and for
a snapshot of given keys ``"keys": {"<physical db.table>": {"columns": [...], "values": [[...], ...]}}``,
``relay.source.snapshot_keys``), the
relay's publisher thread looks for it at batch boundaries (at most every ``CHECK_SECONDS``), removes it
and answers in its status file (``snapshot_request``: id, accepted, reason). A file needs no extra
service and works wherever the CLI can reach the status file (the same host or volume); with HA, the
request goes to the active relay's file. ``run`` re-reads every shard of one logical table — the
physical tables the CURRENT mapping routes to it and the sink filters keep — with the watermark rules of
``relay.source.snapshot``, while the live stream goes on.

Owns ``SnapshotDesk``, the publisher thread's side of the channel: it takes a request at a batch
boundary, asks for the snapshot that a mapping switch calls for (tables the new version routes and the
old one dropped), and keeps the last answer for the status file (``relay.daemon.reporting``).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from mapping.model import Mapping
from relay.canal.captures import CapturedTables
from relay.errors import RelayError
from relay.source.instance import CanalInstance
from relay.source.snapshot_control import NO_CAPTURED_TABLE
from relay.source.snapshot_keys import check_request

log = logging.getLogger(__name__)

CHECK_SECONDS = 0.5


def take_request(path: Path) -> dict[str, Any] | None:
    """The waiting request, removed from ``path``; None when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read the snapshot request %s: %s", path, exc)
        return None
    path.unlink(missing_ok=True)
    try:
        request = json.loads(text)
    except ValueError:
        return {"id": None, "action": "invalid"}
    return request if isinstance(request, dict) else {"id": None, "action": "invalid"}


def logical_table(mapping: Mapping, table: str) -> Any:
    """A predicate over physical (db, table): routed by ``mapping`` to the logical ``db.table``."""

    def only(db: str, name: str) -> bool:
        route = mapping.resolve(db, name)
        return route is not None and f"{route.logical_db}.{route.logical_table}" == table

    return only


def _among(only: Any, tables: set[str]) -> Any:
    """``only``, narrowed to the physical ``db.table`` names of a key request."""

    def among(db: str, name: str) -> bool:
        return f"{db}.{name}" in tables and bool(only(db, name))

    return among


def handle(instance: CanalInstance, mapping: Mapping, request: dict[str, Any]) -> dict[str, Any]:
    """Carry out one request; the answer the status file shows."""
    action = request.get("action")
    reason: str | None
    if action == "cancel":
        reason = instance.cancel_snapshot()
    elif action == "run":
        table, where = str(request.get("table") or ""), str(request.get("where") or "")
        keys = request.get("keys")
        only = logical_table(mapping, table)
        if "." not in table:
            reason = f"--table must name a logical db.table, got {table!r}"
        elif ";" in where:
            reason = "--where must be one SQL condition (no ';')"
        elif keys is not None and (where or check_request(keys)):
            reason = check_request(keys) or "keys and --where exclude each other"
        else:
            if keys is not None:
                only = _among(only, set(keys))
            above = request.get("above_generation")
            try:
                reason = instance.request_snapshot(
                    only,
                    str(request.get("id")),
                    where,
                    keys,
                    above_generation=above if isinstance(above, int) else None,
                )
            except RelayError as exc:
                reason = str(exc)
            if reason == NO_CAPTURED_TABLE:
                reason = (
                    f"--table {table}: no table of the server that mapping version {mapping.version} routes "
                    "to it is kept by filter.include/filter.exclude"
                )
    else:
        reason = f"unknown request {action!r}"
    answer = {"id": request.get("id"), "action": action, "accepted": reason is None, "reason": reason}
    answer["at"] = time.time()
    if reason is None:
        log.info("snapshot request %s (%s) accepted", request.get("id"), action)
    else:
        log.warning("snapshot request %s (%s) refused: %s", request.get("id"), action, reason)
    return answer


def after_mapping_switch(instance: CanalInstance, old: Mapping, new: Mapping) -> dict[str, Any] | None:
    """A new mapping version that routes tables the old one dropped: snapshot those tables."""

    def added(db: str, table: str) -> bool:
        return new.resolve(db, table) is not None and old.resolve(db, table) is None

    request = {"id": f"mapping-v{new.version}", "action": "run-added"}
    try:
        reason = instance.request_snapshot(added, str(request["id"]))
    except RelayError as exc:
        reason = str(exc)
    if reason == NO_CAPTURED_TABLE:
        return None
    if reason is not None:
        log.warning(
            "mapping version %d adds tables, but they are not snapshotted: %s; run `relay snapshot run`",
            new.version,
            reason,
        )
    return {**request, "accepted": reason is None, "reason": reason, "at": time.time()}


class SnapshotDesk:
    """Takes on-demand snapshot requests for the publisher thread and keeps the last answer.

    ``after_switch``: a mapping switch snapshots the tables it adds (``snapshot.mode`` is not ``never``).
    ``captures``: the instance's captured tables, which follow every switch.
    """

    def __init__(
        self,
        instance: CanalInstance,
        request_path: Path,
        *,
        after_switch: bool,
        captures: CapturedTables | None = None,
    ) -> None:
        self._instance, self._path, self._after_switch = instance, request_path, after_switch
        self._captures = captures
        self._next_check = 0.0
        self.answer: dict[str, Any] | None = None  # the last request's answer, shown in the status file

    def take(self, mapping: Mapping) -> bool:
        """A ``relay snapshot run|cancel`` request waiting in its file: carried out now, under
        ``mapping`` (at most every ``CHECK_SECONDS``). True when one was answered."""
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + CHECK_SECONDS
        request = take_request(self._path)
        if request is None:
            return False
        self.answer = handle(self._instance, mapping, request)
        return True

    def mapping_switched(self, old: Mapping, new: Mapping) -> None:
        """Right after a switch: the captured tables follow ``new`` (snapshots, the schema history's
        checks), and the tables ``new`` routes and ``old`` did not are snapshotted."""
        if self._captures is not None:
            self._captures.route_with(new)
        if self._after_switch:
            self.answer = after_mapping_switch(self._instance, old, new)
