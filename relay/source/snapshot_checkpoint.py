"""A snapshot's checkpoint: what it has read of each table, saved with every resume point.

The checkpoint is a JSON-ready dict: the snapshot's ``id``, its row filter (``where``), the keys asked
for (``keys``, an on-demand snapshot of given keys: ``relay.source.snapshot_keys``), ``done``,
``cancelled``, ``skipped`` (tables left out, and why) and per table (``db.table``) the last key put
(``after``), the rows and chunks put, whether it is ``done`` and its row estimate. Each chunk entry
carries the state after it (``SnapshotEntry.checkpoint``); ``CanalInstance`` saves the state of the last
acknowledged chunk in ``ResumePoint.extra[EXTRA_KEY]``, so a restart continues every table after its
last acknowledged key. A finished snapshot is saved ``compacted``.

Pure functions on the dict; the running snapshot moves it on under its lock on the parser thread
(``relay.source.snapshot_watermarks``), status readers read it anywhere.
"""

from __future__ import annotations

from typing import Any

from relay.source.snapshot_tables import TableSpec

EXTRA_KEY = "snapshot"  # ResumePoint.extra key of the checkpoint
# ResumePoint.extra key of when the rows of the point's last entry were read (ms since the epoch), where
# that entry is a snapshot chunk: it has no binlog time (``ResumePoint.timestamp`` stays 0, which the
# failover's placing by time relies on), so this is the time a heartbeat reports for the point.
READ_MS_KEY = "snapshot_read_ms"


def new_state(tables: list[TableSpec], snapshot_id: str, where: str = "") -> dict[str, Any]:
    """A fresh checkpoint: every table to read, none read."""
    return {
        "id": snapshot_id,
        "where": where,
        "done": not tables,
        "tables": {
            s.name: {"after": None, "rows": 0, "chunks": 0, "done": False, "estimated_rows": s.estimated_rows}
            for s in tables
        },
    }


def advance(
    state: dict[str, Any],
    table: str,
    after: list[str | None] | None,
    rows: int,
    done: bool,
    skipped: dict[str, str],
) -> None:
    """Record a chunk of ``table`` put: ``rows`` rows up to the key ``after``, the table's last when
    ``done``; the snapshot is done when every table is."""
    entry = state["tables"][table]
    entry["after"] = after
    entry["rows"] += rows
    entry["chunks"] += 1
    entry["done"] = done
    if skipped:
        state["skipped"] = dict(skipped)
    state["done"] = all(t["done"] for t in state["tables"].values())


def state_rows(state: dict[str, Any]) -> int:
    """Rows put by the snapshot a checkpoint describes (full or compacted)."""
    if "rows" in state:
        return int(state["rows"])
    return sum(int(t["rows"]) for t in state.get("tables", {}).values())


def read_percent(state: dict[str, Any]) -> float:
    """How much of a snapshot is read: rows read over the rows expected (a table's estimate from
    ``information_schema`` until it is done, then what it had); below 100 until every table is done."""
    if state.get("done"):
        return 100.0
    tables: dict[str, Any] = state.get("tables", {})
    read = sum(int(t["rows"]) for t in tables.values())
    expected = sum(
        int(t["rows"]) if t["done"] else max(int(t.get("estimated_rows") or 0), int(t["rows"]) + 1)
        for t in tables.values()
    )
    return min(99.9, 100.0 * read / expected) if expected else 0.0


def compacted(state: dict[str, Any]) -> dict[str, Any]:
    """A finished snapshot's checkpoint without its per-table entries: saved with every later position,
    it stays small however many shards there were."""
    if not state.get("done") or "rows" in state:
        return state
    tables = state.get("tables", {})
    return {
        "id": state.get("id"),
        "done": True,
        "cancelled": bool(state.get("cancelled")),
        "rows": state_rows(state),
        "table_count": len(tables),
        "skipped": state.get("skipped", {}),
        **({"place": state["place"]} if "place" in state else {}),  # the next snapshot numbers on from it
    }
