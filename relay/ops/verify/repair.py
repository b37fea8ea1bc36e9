"""``relay verify --repair``: the differing keys snapshotted again by the running relay, then checked again.

The keys go to the relay through its snapshot request channel (``relay.ops.snapshot.send_request``, the
file ``relay snapshot run`` writes; ``relay.daemon.snapshot_requests`` takes it at a batch boundary) as a
key request (``relay.source.snapshot_keys``): each key's row as it is now is published again, with a new
identity that sorts after everything the target holds for it, and a key the source no longer has is
published as a DELETE — so the topic, and a mirror job applying it, converge. A table without a key is
snapshotted whole. Differing records beyond the relay's position (forged, or another source's under this
source id) sort after anything the relay would publish for their keys: the request then asks the relay to
move to a binlog generation above theirs first, so the repair's rows, and every later change of those
keys, sort after them. When the relay has acknowledged the snapshot, the same keys are compared again (until
they settle or ``--repair-timeout``). Only one snapshot runs at a time: a request refused because one is
running is asked again until the deadline. Runs on the CLI's thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from relay.config.load import RelayConfig
from relay.config.state import STATUS_FILE
from relay.daemon.status import read_status
from relay.errors import RelayError, SnapshotRequestError
from relay.kafka.codec import GENERATION_SHIFT
from relay.ops.snapshot import await_answer, send_request
from relay.ops.verify.engine import VerifyOptions
from relay.ops.verify.report import Report
from relay.ops.verify.setup import StorePublished, verify
from relay.ops.verify.shards import MULTISET, JoinKey, Shard
from relay.ops.verify.source import SourceReader
from relay.ops.verify.target import Target

log = logging.getLogger(__name__)


def key_request(
    report: Report, shards: list[Shard]
) -> tuple[dict[str, Any], dict[str, list[JoinKey] | None]]:
    """(the relay's key request, the join keys to check again) for the report's differences."""
    by_name = {s.name: s for s in shards}
    request: dict[str, Any] = {}
    again: dict[str, list[JoinKey] | None] = {}
    for d in report.differences:
        shard = by_name[d.shard]
        if shard.method == MULTISET:
            request[d.shard], again[d.shard] = None, None
            continue
        key = shard.join_of(d.key)
        values = shard.key_dict(key)
        entry = request.setdefault(d.shard, {"columns": list(values), "values": []})
        entry["values"].append(list(values.values()))
        listed = again.setdefault(d.shard, [])
        assert listed is not None
        listed.append(key)
    return request, again


def above_generation(report: Report) -> int | None:
    """The highest binlog generation of the differing records that are not the relay's (beyond its
    position): the repair's rows must be published above it (``SnapshotControl.request``)."""
    found = [
        d.target_identity[0] >> GENERATION_SHIFT
        for d in report.differences
        if d.foreign and d.target_identity
    ]
    return max(found) if found else None


def _ask(
    config: RelayConfig,
    table: str,
    keys: dict[str, Any],
    deadline: float,
    stop: threading.Event,
    above: int | None = None,
) -> str:
    while True:
        request_id = send_request(config, "run", table, keys=keys, above_generation=above)
        answer = await_answer(config, request_id, timeout=max(5.0, min(30.0, deadline - time.monotonic())))
        if answer.get("accepted"):
            return request_id
        reason = str(answer.get("reason"))
        if "still running" not in reason or time.monotonic() > deadline:
            raise SnapshotRequestError(f"the relay refused the repair: {reason}")
        log.info("a snapshot is running; asking again (%s)", reason)
        stop.wait(2.0)


def _await_done(config: RelayConfig, request_id: str, deadline: float, stop: threading.Event) -> None:
    """Until the relay has acknowledged every chunk of the snapshot (its status file says so)."""
    while time.monotonic() < deadline and not stop.is_set():
        status = read_status(config.state_path(STATUS_FILE)) or {}
        snap = status.get("snapshot")
        if isinstance(snap, dict) and snap.get("id") == request_id:
            if snap.get("failure"):
                raise SnapshotRequestError(f"the repair snapshot failed: {snap['failure']}")
            if snap.get("done"):
                return
        stop.wait(0.2)
    raise SnapshotRequestError(f"the repair snapshot {request_id} was not acknowledged in time")


def repair(
    config: RelayConfig,
    report: Report,
    reader: SourceReader,
    published: StorePublished,
    target: Target,
    shards: list[Shard],
    options: VerifyOptions,
    timeout: float,
    stop: threading.Event,
) -> None:
    """Snapshot the differing keys again and check them; the outcome goes to ``report.repair``."""
    request, again = key_request(report, shards)
    asked = sum(len(v) if v is not None else 1 for v in again.values())
    deadline = time.monotonic() + timeout
    outcome: dict[str, Any] = {"asked": asked, "request": None, "repaired": 0, "remaining": []}
    report.repair = outcome
    try:
        above = above_generation(report)
        if above is not None:
            outcome["generation_above"] = above
        request_id = _ask(config, report.table, request, deadline, stop, above)
        outcome["request"] = request_id
        _await_done(config, request_id, deadline, stop)
    except RelayError as exc:
        outcome["remaining"] = [d.line() for d in report.differences]
        outcome["differ"], outcome["not_verified"] = len(report.differences), len(report.skipped)
        outcome["summary"] = f"not done: {exc}"
        return
    after = verify(
        reader, published, target, shards, options, config=config, stop=stop, keys=again, deadline=deadline
    )
    left = [d.line() for d in after.differences] + [
        f"skipped {s.shard} {s.key}: {s.reason}" for s in after.skipped
    ]
    outcome["remaining"] = left
    outcome["differ"], outcome["not_verified"] = len(after.differences), len(after.skipped)
    outcome["repaired"] = max(0, len(report.differences) - len(after.differences) - len(after.skipped))
    outcome["summary"] = f"snapshot {request_id} of {asked} key(s)/table(s) published; checked again: " + (
        "all equal" if not left else f"{len(left)} still differ or did not settle"
    )
