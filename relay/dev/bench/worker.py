"""One measurement in a process of its own: ``python -m relay.dev.bench.worker '<json spec>'``.

Each measured reader runs in a fresh child so that its peak RSS and CPU time are its own and the bench's
writer does not share its interpreter. Modes (``spec["mode"]``):

- ``relay-drain``: the relay (``relay.daemon.pipeline.Relay``) from ``start`` until its SAVED position reaches
  ``end`` — every row of the backlog acknowledged by Kafka and the position written;
- ``relay-live``: the relay from ``start`` until SIGTERM, recording when each row was acknowledged
  (``ack_file``) and printing progress (RSS, store fill) twice a second;
- ``stock-parse``: python-mysql-replication's reader over ``start..end``, decoding every row, nothing else;
- ``naive-relay``: that reader → ``json.dumps`` per row → ``produce`` → ``flush()`` per transaction;
- ``produce-only``: the ceiling. The relay runs over ``start..end`` once, untimed, keeping every batch of
  records it sent; then a fresh publisher with the same settings sends those same pre-encoded batches
  with the relay's window (``publish.max_inflight_batches``) and acks them in order, timed until every
  record is acknowledged: what the broker and librdkafka allow here with nothing to parse or encode
  (``spec["topic_suffix"]``: the timed pass to topics named with it appended, e.g. ``bench.w2.ceiling``);
- ``relay-snapshot``: the relay snapshotting the snapshot workload's table (``spec["config"]``) until Kafka
  acknowledged every row (``relay bench --peers`` measures it from outside, as the peers).

Output: JSON lines on stdout (``ready``, ``progress``, ``result``), read by ``relay.dev.bench.runner``.

The modes live in ``relay_modes`` (the relay's three) and ``baselines`` (the two stock readers); what is
measured of the process in ``probes``; the relay under measurement in ``harness``. Runs on the child's main
thread.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from relay.dev.bench.baselines import naive_relay, stock_parse
from relay.dev.bench.probes import profile_threads
from relay.dev.bench.relay_modes import produce_only, relay_drain, relay_live, relay_snapshot

MODES = {
    "relay-drain": relay_drain,
    "relay-live": relay_live,
    "stock-parse": stock_parse,
    "naive-relay": naive_relay,
    "produce-only": produce_only,
    "relay-snapshot": relay_snapshot,
}


def main(argv: Sequence[str]) -> int:
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec = json.loads(argv[0])
    dump = profile_threads(Path(spec["profile_to"]).with_suffix(".prof")) if spec.get("cprofile") else None
    MODES[spec["mode"]](spec)
    if dump is not None:
        dump()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
