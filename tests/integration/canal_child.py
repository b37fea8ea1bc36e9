"""A canal consumer run as a child process by the crash tests.

It runs a ``CanalInstance`` with a file position store, takes batches, appends every entry of a batch
to an output file (fsync), then acks. It kills itself with SIGKILL at the points named on the command
line, so the test controls whether the kill lands inside a batch (written, not acked) or between
batches (acked). It exits 0 when it sees the row that marks the end of the workload.

Usage: canal_child.py CONFIG_JSON
  CONFIG_JSON: {"mysql": {...}, "schema": str, "start": [file, pos], "positions": path, "out": path,
                "batch_size": int, "buffer_size": int,
                "kill": {"inside": [batch numbers], "after_ack": [...]}}
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from relay.canal.entry import Entry, EntryType, RowChange
from relay.config.sections import InstanceConfig, SinkConfig, SourceConfig, StartConfig, StoreConfig
from relay.positions.store import FilePositionStore
from relay.wiring import canal_instance


def describe(entry: Entry) -> dict[str, object]:
    """What the test compares: the entry's place in the binlog and its content."""
    h = entry.header
    out: dict[str, object] = {
        "file": entry.txn.start.journal,
        "txn": entry.txn.start.offset,
        "idx": entry.txn_index,
        "type": EntryType(entry.entry_type).name,
        "offset": h.logfile_offset,
        "table": f"{h.schema_name}.{h.table_name}",
    }
    value = entry.store_value
    if isinstance(value, RowChange):
        out["event"] = value.event_type.name
        out["sql"] = value.sql
        out["rows"] = [[r.before, r.after] for r in value.rows]
    return out


def main() -> int:
    cfg = json.loads(Path(sys.argv[1]).read_text())
    m = cfg["mysql"]
    source = SourceConfig(
        host=m["host"],
        port=m["port"],
        user=m["user"],
        password=m["password"],
        server_id=m.get("server_id", 7001),
        start=StartConfig(journal=cfg["start"][0], offset=cfg["start"][1]),
    )
    instance = canal_instance(
        InstanceConfig(
            source=source,
            store=StoreConfig(buffer_size=cfg["buffer_size"], batch_mode="ITEMSIZE"),
            sink=SinkConfig(filter=f"{cfg['schema']}\\..*", empty_transaction_interval_ms=3_600_000),
        ),
        FilePositionStore(cfg["positions"]),
    )
    kill_inside = set(cfg["kill"].get("inside", []))
    kill_after = set(cfg["kill"].get("after_ack", []))
    instance.start()
    batches = 0
    seen_marker = False
    with open(cfg["out"], "a", encoding="utf-8") as out:
        while True:
            message = instance.get_without_ack(cfg["batch_size"], timeout=1.0)
            if not message.entries:
                continue
            batches += 1
            for n, entry in enumerate(message.entries):
                out.write(json.dumps(describe(entry)) + "\n")
                out.flush()
                os.fsync(out.fileno())
                if batches in kill_inside and n == len(message.entries) // 2:
                    os.kill(os.getpid(), signal.SIGKILL)
                seen_marker = seen_marker or entry.header.table_name == "done_marker"
            instance.ack(message.batch_id)
            if batches in kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            if seen_marker and message.entries[-1].entry_type == EntryType.TRANSACTIONEND:
                instance.stop()
                return 0


if __name__ == "__main__":
    sys.exit(main())
