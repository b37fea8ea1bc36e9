"""The first read of a topic for ``relay verify``, split over forked processes by partition.

Reading a topic from its start is the verify's longest step, and it is Python work per record (the
headers, the ``data`` parse, the row digest: ``relay.ops.verify.topic``) under one GIL. ``begin(index)``
forks one child per group of partitions — in the caller's thread, which must be the only thread running
Python (the verify's main thread, before its helper thread and its source reads start) — each child reading
its partitions to their end with the index's own code and sending back, pickled through a pipe, what it
holds per key; the returned ``collect`` (run later, on any thread: the verify's helper thread while the main
thread reads the source's chunk digests) reads the pipes and merges the results into the index. A key's
records all sit in one partition, so the merge only adds; where a key does appear in two (a topic whose
partitions were changed) the higher change identity wins, as in one read.

A child touches nothing of the parent's but memory: no inherited connection is used (its sockets are left
alone and ``os._exit`` skips every finaliser), no librdkafka instance is open at the fork (the metadata
consumer is closed first), and it logs nothing. A child that fails sends its error, which the parent raises.
Without ``os.fork``, with one partition, on a machine whose cores are all busy (the load average at or
above their number) or that has two cores or fewer (one is left to the source and the broker), or with
``RELAY_VERIFY_PROCESSES=1``, the index reads in-process.
"""

from __future__ import annotations

import os
import pickle
import select
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from relay.errors import VerifyError
from relay.ops.verify.target import Held, Multiset

if TYPE_CHECKING:
    from relay.ops.verify.topic import TopicIndex

__all__ = ["begin"]

PROCESSES_ENV = "RELAY_VERIFY_PROCESSES"  # how many processes read a topic at most (1: in-process)
MAX_PROCESSES = 4


def processes(partitions: int) -> int:
    """How many children read ``partitions`` partitions (1: read in-process). More processes help only
    where cores are idle, and one core is left to the source's digests and the broker: with the load average
    at or above the cores (measured: no gain there, the pickling its cost), or on two cores (measured idle,
    100,000 records: 0.39x the plain SELECT in-process with 1.9 s of CPU, 0.38x over two children with 2.4
    s), the read stays in-process unless ``RELAY_VERIFY_PROCESSES`` asks for more."""
    if not hasattr(os, "fork"):
        return 1
    asked = os.environ.get(PROCESSES_ENV)
    try:
        most = int(asked or MAX_PROCESSES)
    except ValueError:
        most = MAX_PROCESSES
    if not asked and os.getloadavg()[0] >= (os.cpu_count() or 1):
        return 1
    spare = (os.cpu_count() or 1) - 1 if not asked else most
    return max(1, min(most, partitions, MAX_PROCESSES, spare))


def begin(index: TopicIndex) -> Callable[[], int]:
    """Start the first read of ``index``'s topics (forked children, or nothing yet: then ``collect`` reads
    in-process); returns ``collect``, which finishes the read and returns the records read."""
    parts = index.partitions()
    workers = processes(len(parts)) if not index.held and not index.records else 1
    if workers <= 1:
        return index.refresh
    groups = [parts[i::workers] for i in range(workers)]
    children: list[tuple[int, int]] = []
    for group in groups:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: read, send, leave without running anything of the parent's
            os.close(read_end)
            for _, other in children:
                os.close(other)
            _child(index, group, write_end)
        os.close(write_end)
        children.append((pid, read_end))
    return lambda: _collect(index, children)


def _child(index: TopicIndex, group: list[tuple[str, int]], out: int) -> None:
    code = 0
    try:
        index.only = set(group)
        index.refresh(log_it=False)
        payload: Any = ("ok", _payload(index))
    except BaseException as exc:
        payload, code = ("error", f"{type(exc).__name__}: {exc}"), 1
    try:
        with os.fdopen(out, "wb") as pipe:
            pickle.dump(payload, pipe, protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        os._exit(code)


def _payload(index: TopicIndex) -> dict[str, Any]:
    """What a child sends: its keys, and what it holds for each as columns (flat arrays, names numbered):
    a few buffers to unpickle, where a tuple of tuples per key cost the parent more than the merge."""
    names: dict[str, int] = {}
    keys: list[Any] = []
    seqs, parts, digests, offsets = array("q"), array("q"), array("Q"), array("q")
    shards, topics, partitions, deleted = array("I"), array("I"), array("i"), bytearray()
    for key, h in index.held.items():
        topic, partition, offset = h.where
        keys.append(key)
        seqs.append(h.identity[0])
        parts.append(h.identity[1])
        deleted.append(h.deleted)
        shards.append(names.setdefault(h.shard, len(names)))
        digests.append(h.digest)
        topics.append(names.setdefault(topic, len(names)))
        partitions.append(partition)
        offsets.append(offset)
    multisets = {n: (m.rows, m.latest, m.behind, m.where) for n, m in index.multisets.items()}
    return {
        "names": list(names),
        "held": (keys, seqs, parts, bytes(deleted), shards, digests, topics, partitions, offsets),
        "multisets": multisets,
        "snapshot_seq": index.snapshot_seq,
        "next": index.next_offsets,
        "records": index.records,
    }


def _collect(index: TopicIndex, children: list[tuple[int, int]]) -> int:
    """Every child's result, read as it comes, merged into ``index``; the records read."""
    chunks: dict[int, list[bytes]] = {fd: [] for _, fd in children}
    open_fds = set(chunks)
    try:
        while open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], 5.0)
            for fd in ready:
                data = os.read(fd, 1 << 20)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.discard(fd)
    finally:
        for fd in chunks:
            os.close(fd)
        for pid, _ in children:
            os.waitpid(pid, 0)
    read = 0
    for _, fd in children:
        try:
            kind, body = pickle.loads(b"".join(chunks[fd]))
        except (pickle.UnpicklingError, EOFError, ValueError) as exc:
            raise VerifyError(f"a process reading the topic ended without its result ({exc})") from exc
        if kind != "ok":
            raise VerifyError(f"reading the topic: {body}")
        read += _merge(index, body)
    index.finish_read(read)
    return read


def _merge(index: TopicIndex, body: dict[str, Any]) -> int:
    held = index.held
    names = body["names"]
    for key, seq, part, deleted, shard, digest, topic, partition, offset in zip(*body["held"], strict=True):
        identity = (seq, part)
        cur = held.get(key)
        if cur is None or identity > cur.identity or (identity == cur.identity and deleted):
            held[key] = Held(identity, deleted == 1, names[shard], digest, (names[topic], partition, offset))
    for name, (rows, latest, behind, where) in body["multisets"].items():
        if latest > index.multisets[name].latest:
            index.multisets[name] = Multiset(rows, latest, behind, where)
    index.snapshot_seq.update(body["snapshot_seq"])
    index.next_offsets.update(body["next"])
    return int(body["records"])
