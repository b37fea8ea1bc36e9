"""What the bench sees of a system from outside it: its processes' CPU and memory, and its topics filling.

Every system of the side-by-side comparison (the relay, Debezium on Kafka Connect, canal) is measured the
same way, by this module, without its help: ``ProcessProbe`` reads the CPU time and peak RSS of a process
and its descendants from /proc (the JVM's every thread included); ``TopicWatch`` polls the topics' high
watermarks on a thread of its own and notes, on the bench's clock, when the first record of the run was
acknowledged and when the last one was, with the system's CPU time at both moments. The rate itself comes
from the broker's clock afterwards (``relay.dev.bench.topics``: the topics are ``LogAppendTime``).
``TopicWatch`` runs one daemon thread; the rest runs on the caller's thread. Linux only (/proc).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.errors import BenchError

_TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    """Parent pid → child pids, from /proc/*/stat."""
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


class ProcessProbe:
    """CPU seconds and peak RSS of a process and every process below it (a JVM is one process)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._tree = [pid]
        self.refresh()

    def refresh(self) -> None:
        """Find the processes below the top one again (``cpu_seconds`` reads the last list found)."""
        tree = _children()
        found, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(tree.get(pid, ()))
        self._tree = found

    def pids(self) -> list[int]:
        return list(self._tree)

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the tree so far (its reaped children's included); None once the top
        process is gone (a zombie included: its figures are final but no longer its own to read)."""
        total = 0.0
        for pid in self._tree:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                if pid == self.pid:
                    return None
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if pid == self.pid and fields[0] == "Z":
                return None
            total += sum(int(v) for v in fields[11:15]) / _TICKS  # utime, stime, cutime, cstime
        return total

    def peak_rss_mb(self) -> float:
        """The sum of each live process's VmHWM (one process: its peak). Read it before the tree exits."""
        total = 0.0
        for pid in self._tree:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
        return total


@dataclass
class Marks:
    """When (bench monotonic clock) the run's first and last records were seen acknowledged, and the
    system's CPU seconds then; ``records`` the topics' record count at the end."""

    first_at: float | None = None
    first_cpu: float = 0.0
    done_at: float | None = None
    done_cpu: float = 0.0
    records: int = 0


class TopicWatch:
    """Polls the summed high watermarks of ``topics`` until they reach ``expected`` records.

    The high watermark moves when the broker has appended a record (``acks=all`` on one broker: acknowledged),
    so the first watermark above 0 is the run's first acknowledged record and reaching ``expected`` its last.
    """

    def __init__(
        self,
        bootstrap: str,
        topics: list[str],
        expected: int,
        probe: ProcessProbe | None,
        consumer: Any = None,  # a confluent_kafka Consumer; None: one made for ``bootstrap``
    ) -> None:
        from confluent_kafka import Consumer

        self.topics = topics
        self.expected = expected
        self.probe = probe
        self.marks = Marks()
        self._last_cpu = 0.0
        self._closed = False
        self.error: Exception | None = None
        self._consumer = consumer or Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "relay-bench-watch", "enable.auto.commit": False}
        )
        self._partitions = self._list_partitions()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-topic-watch", daemon=True)

    def _list_partitions(self) -> list[Any]:
        from confluent_kafka import TopicPartition

        meta = self._consumer.list_topics(timeout=30)
        return [TopicPartition(t, p) for t in self.topics for p in sorted(meta.topics[t].partitions)]

    def count(self) -> int:
        """The records in the topics now; the last count when the broker answers with a passing error (a
        partition whose leader is still being settled right after the topic was created)."""
        from confluent_kafka import KafkaException

        total = 0
        try:
            for tp in self._partitions:
                low, high = self._consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                total += high - max(low, 0)
        except KafkaException as exc:
            if not exc.args or not exc.args[0].retriable():
                raise
            return self.marks.records
        return int(total)

    def _cpu(self) -> float:
        """The system's CPU seconds now, or the last figure read while it ran."""
        if self.probe is not None:
            now = self.probe.cpu_seconds()
            if now is not None:
                self._last_cpu = now
        return self._last_cpu

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # the caller's wait() reports it
            self.error = exc
            self._done.set()

    def _watch(self) -> None:
        marks = self.marks
        polls = 0
        while not self._stop.is_set():
            polls += 1
            if self.probe is not None and polls % 200 == 0:
                self.probe.refresh()
            cpu = self._cpu()  # read before the watermarks: a record seen is then never ahead of its CPU
            records = self.count()
            now = time.monotonic()
            if records and marks.first_at is None:
                marks.first_at, marks.first_cpu = now, cpu
            if records >= self.expected:
                marks.done_at, marks.done_cpu, marks.records = now, self._cpu(), records
                self._done.set()
                return
            marks.records = records
            self._stop.wait(0.005)

    def start(self) -> TopicWatch:
        self._thread.start()
        return self

    def wait(self, timeout: float) -> bool:
        """True once every expected record is there; False at the deadline; the watch's own failure (it
        could not read the watermarks) raised as ``BenchError``."""
        done = self._done.wait(timeout)
        if self.error is not None:
            raise BenchError(f"watching {', '.join(self.topics)} failed: {self.error}") from self.error
        return done

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        if not self._closed:
            self._closed = True
            self._consumer.close()
