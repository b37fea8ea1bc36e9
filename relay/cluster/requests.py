"""The node's side of the control plane: requests to an instance, through ZooKeeper, to its child.

``relay snapshot run|cancel --instance NAME`` (``relay.cluster.remote``) creates a persistent sequential
znode ``<root>/destinations/<name>/requests/r-<seq>``; the node running the instance takes the oldest
one when its relay is active (state running or retrying, its status file written by the child now
running), and hands it to the child through the request file the relay already reads
(``<state_dir>/<name>/snapshot-request.json``, ``relay.daemon.snapshot_requests``). It claims the
request first — one ZooKeeper transaction checks the request is still there and writes ``answers/<id>``
("handed", naming the node) — then writes the file, waits for the relay's answer in its status file,
and in ONE transaction writes the answer and deletes the request. A CLI whose deadline passes deletes
its request and then looks for the "handed" answer: either the node claimed it first (it is carried
out, and the CLI says so) or the node's claim fails (nothing was done).

Not lost, not applied twice: the request stays in ZooKeeper until its answer is written, so a node
that dies or loses the instance before that leaves it to the next node; that node first looks at the
relay's snapshot (its id is the request's id, continued from the saved position after a move): a
request already carried out is answered from it, never handed over again. One request at a time per
instance (the relay reads one file); a relay that has not taken the file within ``answer_timeout``
gets it removed and the request refused (nothing was started), one that took it is waited for. A
handed request whose child ended, or whose instance moved away, before answering is let go (its file
removed when untaken) and taken again from ZooKeeper as above; ``relay.cluster.children`` removes a file
left by an earlier node process before it starts a child.

Runs on the node's main thread (``relay.cluster.node``), with the node's kazoo client.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.cluster.layout import Paths
from relay.common.atomic import atomic_write_text
from relay.config.state import SNAPSHOT_REQUEST_FILE

log = logging.getLogger(__name__)

__all__ = ["READY_STATES", "RequestDesk"]

READY_STATES = ("running", "retrying")  # a relay in these states takes requests at batch boundaries
ANSWER_TIMEOUT = 30.0
ANSWER_KEEP_SECONDS = 3600.0  # an answer nobody collected (its CLI gave up) is removed after this


@dataclass
class _Handed:
    znode: str  # requests/r-<seq>
    request: dict[str, Any]
    at: float  # monotonic: when the request file was written
    pid: Any  # the child it was handed to


class RequestDesk:
    """Takes requests for the instances this node runs; one per instance at a time."""

    def __init__(
        self,
        node: str,
        paths: Paths,
        state_dir: Path,
        answer_timeout: float = ANSWER_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._node, self._paths, self._state_dir = node, paths, state_dir
        self._answer_timeout, self._clock = answer_timeout, clock
        self._handed: dict[str, _Handed] = {}
        self._pruned = 0.0

    def serve(self, client: KazooClient, records: Mapping[str, dict[str, Any]], watch: Any = None) -> None:
        """One pass over the instances this node runs (name → the status record it publishes, whose
        ``relay`` is the child's status file); ``watch`` is set on each request container."""
        for name in list(self._handed):
            if name not in records or records[name].get("pid") != self._handed[name].pid:
                self._drop(name)  # moved away, or its child ended: the request stays for the next one
        for name, record in sorted(records.items()):
            relay = _ready(record)
            if name in self._handed:
                self._collect(client, name, relay)
            elif relay is not None:
                self._take(client, name, relay, watch)
            else:
                _arm(client, self._paths.requests(name), watch)
        now = self._clock()
        if now - self._pruned > 60.0:
            self._pruned = now
            for name in records:
                self._prune(client, name)

    # -- internals ------------------------------------------------------------------------------
    def _take(self, client: KazooClient, name: str, relay: dict[str, Any], watch: Any) -> None:
        base = self._paths.requests(name)
        try:
            waiting = sorted(client.get_children(base, watch=watch))
        except NoNodeError:
            _arm(client, base, watch)
            return
        if not waiting:
            return
        znode = f"{base}/{waiting[0]}"
        try:
            data, stat = client.get(znode)
            request = json.loads(data.decode("utf-8"))
        except NoNodeError:
            return
        except (UnicodeDecodeError, ValueError):
            request, stat = None, None
        if not isinstance(request, dict) or not isinstance(request.get("id"), str):
            log.warning("instance %s: request %s is not a request: removed", name, znode)
            with contextlib.suppress(NoNodeError):
                client.delete(znode)
            return
        done = _carried_out(relay, request)
        if done is not None:
            log.info("instance %s: request %s was carried out before a move: answered", name, request["id"])
            self._answer(client, name, znode, request, done)
            return
        # Claimed only while the request is still there: a CLI that withdrew it (its deadline passed)
        # first finds it gone; one withdrawing it after this finds the "handed" answer.
        handed = {**self._about(request), "state": "handed"}
        if not _commit(client, self._paths, name, request["id"], handed, check=(znode, stat.version)):
            return
        path = self._state_dir / name / SNAPSHOT_REQUEST_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {k: request[k] for k in ("id", "action", "table", "where", "keys") if k in request}
        atomic_write_text(path, json.dumps(body) + "\n")
        self._handed[name] = _Handed(znode, request, self._clock(), relay.get("pid"))
        log.info(
            "instance %s: request %s (%s) handed to its relay", name, request["id"], request.get("action")
        )

    def _collect(self, client: KazooClient, name: str, relay: dict[str, Any] | None) -> None:
        handed = self._handed[name]
        request_id = handed.request["id"]
        answer = (relay or {}).get("snapshot_request")
        if isinstance(answer, dict) and answer.get("id") == request_id:
            self._answer(client, name, handed.znode, handed.request, answer)
            del self._handed[name]
            return
        if self._clock() - handed.at < self._answer_timeout:
            return
        file = self._state_dir / name / SNAPSHOT_REQUEST_FILE
        if not file.exists():
            return  # the relay took it: its answer comes at its next status write
        file.unlink(missing_ok=True)
        reason = (
            f"the relay of {name} on node {self._node} did not take the request within "
            f"{self._answer_timeout:.0f} s (nothing was started); try again"
        )
        self._answer(client, name, handed.znode, handed.request, {"accepted": False, "reason": reason})
        del self._handed[name]

    def _answer(
        self, client: KazooClient, name: str, znode: str, request: dict[str, Any], answer: dict[str, Any]
    ) -> None:
        """The answer written and the request removed, both or neither (a request withdrawn meanwhile:
        the answer alone)."""
        record = {**self._about(request), "state": "answered", **_answer_fields(answer)}
        if not _commit(client, self._paths, name, request["id"], record, delete=znode):
            _commit(client, self._paths, name, request["id"], record)

    def _about(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"id": request["id"], "action": request.get("action"), "node": self._node, "at": time.time()}

    def _drop(self, name: str) -> None:
        """Forget a handed request (it stays in ZooKeeper): its file too, when no relay took it."""
        handed = self._handed.pop(name)
        _remove_file(self._state_dir / name / SNAPSHOT_REQUEST_FILE, handed.request["id"])
        log.info("instance %s: request %s left for the relay that runs it next", name, handed.request["id"])

    def _prune(self, client: KazooClient, name: str) -> None:
        base = self._paths.answers(name)
        try:
            for child in client.get_children(base):
                data, _ = client.get(f"{base}/{child}")
                with contextlib.suppress(ValueError, UnicodeDecodeError, TypeError):
                    if (
                        time.time() - float(json.loads(data.decode("utf-8")).get("at", 0))
                        > ANSWER_KEEP_SECONDS
                    ):
                        client.delete(f"{base}/{child}")
        except NoNodeError:
            return


def _remove_file(path: Path, request_id: str) -> None:
    """The request file, when it still holds ``request_id`` (the relay has not taken it)."""
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        if json.loads(path.read_text(encoding="utf-8")).get("id") == request_id:
            path.unlink()


def _ready(record: dict[str, Any]) -> dict[str, Any] | None:
    """The child's status, when it is the status of the child running now and that relay is active."""
    relay = record.get("relay")
    if not isinstance(relay, dict) or record.get("process") != "running":
        return None
    if relay.get("pid") != record.get("pid") or relay.get("state") not in READY_STATES:
        return None
    return relay


def _carried_out(relay: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
    """An answer when the relay already runs (or ran) the snapshot this request started: its snapshot
    carries the request's id (continued from the saved position after the request's node went)."""
    snapshot = relay.get("snapshot")
    if request.get("action") == "run" and isinstance(snapshot, dict) and snapshot.get("id") == request["id"]:
        return {"accepted": True, "reason": None, "continued": True}
    answer = relay.get("snapshot_request")
    if isinstance(answer, dict) and answer.get("id") == request["id"]:
        return answer
    return None


def _answer_fields(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: answer.get(k) for k in ("accepted", "reason", "continued") if k in answer}


def _commit(
    client: KazooClient,
    paths: Paths,
    name: str,
    request_id: str,
    record: dict[str, Any],
    *,
    check: tuple[str, int] | None = None,
    delete: str | None = None,
) -> bool:
    """One transaction: ``answers/<id>`` written (created or replaced), with ``check`` (the request
    unchanged) and ``delete`` (the request removed); False when ZooKeeper refused it (nothing applied)."""
    path = paths.answer(name, request_id)
    data = json.dumps(record, sort_keys=True).encode()
    client.ensure_path(paths.answers(name))
    transaction = client.transaction()
    if check is not None:
        transaction.check(*check)
    if client.exists(path) is not None:
        transaction.set_data(path, data)
    else:
        transaction.create(path, data)
    if delete is not None:
        transaction.delete(delete)
    failed = [r for r in transaction.commit() if isinstance(r, Exception)]
    if failed:
        log.info("instance %s: request %s: %s (withdrawn or answered meanwhile)", name, request_id, failed)
    return not failed


def _arm(client: KazooClient, path: str, watch: Any) -> None:
    """A watch on the request container (its creation when there is none), so a request wakes the node."""
    if watch is None:
        return
    try:
        client.get_children(path, watch=watch)
    except NoNodeError:
        client.exists(path, watch=watch)
