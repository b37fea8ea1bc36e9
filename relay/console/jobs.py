"""Snapshots and verify runs started from the console, watched while they run and kept once done.

Owns the jobs: a snapshot request (``relay snapshot run``: the fleet hands it to the running relay, then a
thread follows the relay's progress — ``relay snapshot status`` — until it is done, failed or cancelled)
and a verify run (``relay verify --table T`` against the topic, in a thread of the console: the same
``relay.ops.verify.setup`` steps the command takes — the source session at the relay's position, the
shards of the current mapping, the topic's latest state, the passes — with its progress callback feeding
the page). Each job is a JSON file in ``<state-dir>/runs/`` (who started it, when, its progress, its
outcome: the verify report with its keys, exactly as ``relay verify --json`` prints it), so past runs
stay listed across restarts. At most ``MAX_RUNNING`` jobs run at once; a job left running by a console
that stopped is listed as interrupted. Runs on request threads and one thread per job (``console-job-…``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from relay.common.atomic import atomic_write_text
from relay.common.redact import redact, redact_value
from relay.console.fleet import Fleet
from relay.errors import ConsoleError, RelayError

log = logging.getLogger(__name__)

__all__ = ["Jobs"]

MAX_RUNNING = 2
FOLLOW_HOURS = 12.0  # a snapshot followed longer than this is left to `relay snapshot status`
KEEP = 200  # past runs kept on disk
SHOW_WITHIN = 60.0  # seconds for an accepted snapshot to appear in the relay's status (as the CLI waits)


class Jobs:
    """The jobs of one console, kept in ``folder``."""

    def __init__(self, fleet: Fleet, folder: Path) -> None:
        self.fleet, self.folder = fleet, folder
        self._lock = threading.Lock()
        self._live: dict[str, dict[str, Any]] = {}
        self._stops: dict[str, threading.Event] = {}
        folder.mkdir(parents=True, exist_ok=True)

    # -- listing ----------------------------------------------------------------------------------------
    def all(self) -> list[dict[str, Any]]:
        """Every job, newest first: the live ones as they are now, the others as last saved."""
        found: dict[str, dict[str, Any]] = {}
        for path in sorted(self.folder.glob("*.json"), reverse=True)[: 2 * KEEP]:
            try:
                job = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(job, dict) and "id" in job:
                if job.get("state") == "running":
                    job["state"] = "interrupted"  # its console stopped before it ended
                found[str(job["id"])] = job
        with self._lock:
            found.update({k: dict(v) for k, v in self._live.items()})
        return sorted(found.values(), key=lambda j: str(j.get("started", "")), reverse=True)

    def get(self, job_id: str) -> dict[str, Any] | None:
        return next((j for j in self.all() if j.get("id") == job_id), None)

    # -- starting ---------------------------------------------------------------------------------------
    def snapshot(self, instance: str, table: str, where: str, user: str) -> dict[str, Any]:
        """Ask the instance's relay for a snapshot of ``table``; follow it when accepted."""
        job = self._new("snapshot", instance, table, user, where=where)
        answer = self.fleet.snapshot(instance, table, where)
        job["answer"] = answer
        if not answer.get("accepted"):
            job.update(state="refused", error=str(answer.get("reason") or "refused"), ended=_now())
            self._save(job)
            return job
        job["snapshot_id"] = answer.get("snapshot_id") or answer.get("id")
        return self._start(job, self._follow_snapshot)

    def verify(self, instance: str, table: str, where: str, user: str) -> dict[str, Any]:
        if "." not in table:
            raise ConsoleError("table", f"{table!r}: give the logical db.table, e.g. shop.orders")
        job = self._new("verify", instance, table, user, where=where)
        return self._start(job, self._run_verify)

    def _new(self, kind: str, instance: str, table: str, user: str, **extra: Any) -> dict[str, Any]:
        with self._lock:
            if len(self._live) >= MAX_RUNNING:
                raise ConsoleError("jobs", f"{len(self._live)} jobs run already: wait for one to end")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        return {
            "id": f"{stamp}-{kind}-{uuid.uuid4().hex[:6]}",
            "kind": kind,
            "instance": instance,
            "table": table,
            "by": user,
            "started": _now(),
            "state": "running",
            "progress": "",
            "percent": 0.0,
            **extra,
        }

    def _start(self, job: dict[str, Any], body: Any) -> dict[str, Any]:
        stop = threading.Event()
        with self._lock:
            self._live[job["id"]] = job
            self._stops[job["id"]] = stop
        self._save(job)
        thread = threading.Thread(target=self._run, args=(job, body, stop), name=f"console-job-{job['id']}")
        thread.daemon = True
        thread.start()
        return dict(job)

    def _run(self, job: dict[str, Any], body: Any, stop: threading.Event) -> None:
        try:
            body(job, stop)
        except RelayError as exc:
            job.update(state="failed", error=redact(str(exc)))
        except Exception as exc:  # a bug must end the job visibly, not kill the console
            log.exception("job %s failed", job["id"])
            job.update(state="failed", error=redact(f"{type(exc).__name__}: {exc}"))
        finally:
            job.setdefault("ended", _now())
            with self._lock:
                self._live.pop(job["id"], None)
                self._stops.pop(job["id"], None)
            self._save(job)
            self._prune()

    def stop_all(self) -> None:
        with self._lock:
            stops = list(self._stops.values())
        for stop in stops:
            stop.set()

    # -- the two kinds ----------------------------------------------------------------------------------
    def _follow_snapshot(self, job: dict[str, Any], stop: threading.Event) -> None:
        began = time.monotonic()
        deadline = began + FOLLOW_HOURS * 3600
        wanted = job.get("snapshot_id")
        while not stop.wait(1.0) and time.monotonic() < deadline:
            report = self.fleet.snapshot_progress(job["instance"])
            if wanted and report.get("snapshot_id") != wanted and report.get("done") is not None:
                if time.monotonic() - began > SHOW_WITHIN:  # accepted, yet the relay's status never showed it
                    job.update(state="failed", error=f"the relay's status does not show snapshot {wanted}")
                    return
                continue  # the relay's status still shows the snapshot before this one
            job.update(
                progress=report.get("snapshot") or "waiting for the relay's status to show it",
                percent=report.get("snapshot_percent") or 0.0,
                tables=report.get("snapshot_tables") or {},
            )
            state = report.get("snapshot_state")
            if report.get("done") is True or state == "done":
                job.update(state="done", percent=100.0)
                return
            if report.get("done") is None and report.get("snapshot_id") is None and state != "running":
                job.update(state="failed", error="no relay runs the instance now (relay snapshot status)")
                return
            if state in ("failed", "cancelled"):
                job.update(state=state, error=report.get("snapshot") or state)
                return
        job.update(state="interrupted" if stop.is_set() else "unfinished", error="no longer followed")

    def _run_verify(self, job: dict[str, Any], stop: threading.Event) -> None:
        from relay.ops.verify.engine import VerifyOptions
        from relay.ops.verify.setup import plan_shards, session, topic_target, verify
        from relay.wiring import mapping_store

        config = self.fleet.config(job["instance"], "source.")
        store = mapping_store(config)
        try:
            mapping = store.read()
        finally:
            store.close()
        options = VerifyOptions(job["table"], where=job.get("where", ""))

        def progress(what: str, done: int, total: int) -> None:
            job.update(
                progress=f"{done:,}/{total:,} rows {what}", percent=100.0 * done / total if total else 0.0
            )

        with session(config, config.snapshot.max_rows_per_second, options.where) as (reader, published):
            shards = plan_shards(config, mapping, options.table, reader, mirror=False, where=options.where)
            target = topic_target(config, mapping, options.table, shards)
            try:
                report = verify(
                    reader, published, target, shards, options, config=config, progress=progress, stop=stop
                )
            finally:
                target.close()
        job.update(
            state="equal" if report.equal else "differences",
            percent=100.0,
            report=redact_value(report.to_json()),
            text=redact(report.text()),
            progress=f"{report.total.rows:,} rows compared in {report.seconds:.1f} s",
        )

    # -- files ------------------------------------------------------------------------------------------
    def _save(self, job: dict[str, Any]) -> None:
        try:
            atomic_write_text(
                self.folder / f"{job['id']}.json", json.dumps(job, default=str) + "\n", durable=False
            )
        except OSError as exc:
            log.warning("job %s: cannot save it: %s", job["id"], exc)

    def _prune(self) -> None:
        for path in sorted(self.folder.glob("*.json"), reverse=True)[KEEP:]:
            path.unlink(missing_ok=True)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
