"""What the cluster bench reads from outside the relay: ZooKeeper's own counters and a process tree's memory.

Owns ``four_letter`` (one ZooKeeper four-letter word over a plain socket), ``ZkCounts``/``zk_counts``
(znodes, ephemerals, watches, connections and requests received from ``mntr``, the last transaction id from
``srvr``: every create, set and delete advances it, so its growth over a window is ZooKeeper's write rate),
``tree_memory`` (RSS and PSS summed over a process and all its descendants, from ``/proc``) and
``znode_census`` (the cluster's znodes by kind of path). Runs on the bench's main thread; Linux only.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from relay.errors import BenchError


def four_letter(hosts: str, word: str, timeout: float = 5.0) -> str:
    """ZooKeeper's answer to ``word`` (``mntr``, ``srvr``, ``wchc`` …) from the first server in ``hosts``."""
    first = hosts.split("/", 1)[0].split(",", maxsplit=1)[0]
    host, _, port = first.rpartition(":")
    answer = b""
    try:
        with socket.create_connection((host or "127.0.0.1", int(port or 2181)), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            while chunk := sock.recv(65536):
                answer += chunk
    except OSError as exc:
        raise BenchError(f"ZooKeeper {first}: the four-letter word {word!r} got no answer: {exc}") from exc
    text = answer.decode("utf-8", "replace")
    if "is not executed because it is not in the whitelist" in text:
        raise BenchError(
            f"ZooKeeper {first} refuses {word!r}: allow it with 4lw.commands.whitelist=mntr,srvr,cons "
            "(or *) in its zoo.cfg"
        )
    return text


def parse_mntr(text: str) -> dict[str, str]:
    """``mntr``'s ``key<TAB>value`` lines as a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("\t")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_zxid(srvr: str) -> int:
    """The ``Zxid: 0x…`` of a ``srvr`` answer: the id of the last transaction the server applied."""
    for line in srvr.splitlines():
        if line.startswith("Zxid:"):
            return int(line.split(":", 1)[1].strip(), 16)
    raise BenchError(f"no Zxid in ZooKeeper's srvr answer: {srvr[:200]!r}")


@dataclass(frozen=True)
class ZkCounts:
    """One reading of a ZooKeeper server's own counters."""

    znodes: int
    ephemerals: int
    watches: int
    connections: int
    zxid: int
    data_bytes: int
    requests: int = 0  # packets received: every request (reads, writes, pings) since the server started

    def minus(self, other: ZkCounts) -> dict[str, int]:
        return {
            "znodes": self.znodes - other.znodes,
            "ephemerals": self.ephemerals - other.ephemerals,
            "watches": self.watches - other.watches,
            "connections": self.connections - other.connections,
            "data_bytes": self.data_bytes - other.data_bytes,
        }


def zk_counts(hosts: str) -> ZkCounts:
    """The server's znodes, ephemerals, watches, live connections, requests received and last zxid, now."""
    mntr = parse_mntr(four_letter(hosts, "mntr"))
    zxid = parse_zxid(four_letter(hosts, "srvr"))
    try:
        return ZkCounts(
            znodes=int(mntr["zk_znode_count"]),
            ephemerals=int(mntr["zk_ephemerals_count"]),
            watches=int(mntr["zk_watch_count"]),
            connections=int(mntr["zk_num_alive_connections"]),
            zxid=zxid,
            data_bytes=int(mntr.get("zk_approximate_data_size", "0")),
            requests=int(mntr.get("zk_packets_received", "0")),
        )
    except (KeyError, ValueError) as exc:
        raise BenchError(f"ZooKeeper's mntr answer lacks {exc}: {sorted(mntr)[:20]}") from exc


# ---- memory of a process tree -------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid → parent pid of every process now."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        out[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    return out


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (children, their children …)."""
    parents = _parents()
    tree, frontier = [pid], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier]
        tree += below
        frontier = below
    return tree


def _kib(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


@dataclass(frozen=True)
class TreeMemory:
    """Memory of a process tree: RSS summed (pages shared between processes counted in each) and PSS
    summed (shared pages divided among their sharers: what the tree costs the machine)."""

    rss_mb: float
    pss_mb: float
    processes: int


def tree_memory(pid: int) -> TreeMemory:
    pids = descendants(pid)
    rss = sum(_kib(Path(f"/proc/{p}/status"), "VmRSS:") for p in pids)
    pss = sum(_kib(Path(f"/proc/{p}/smaps_rollup"), "Pss:") for p in pids)
    return TreeMemory(rss / 1024, pss / 1024, len(pids))


def znode_census(client: KazooClient, root: str, instances: list[str]) -> dict[str, int]:
    """Every znode under ``root``, counted by its path with each instance's name written ``<i>`` and every
    name below a per-instance node written ``*`` (``destinations/<i>/schema/*``): where an instance's znodes
    are."""
    names = set(instances)
    counts: dict[str, int] = {}
    stack = [root.rstrip("/") or "/"]
    while stack:
        path = stack.pop()
        try:
            children = client.get_children(path)
        except NoNodeError:
            continue
        for child in children:
            full = f"{path.rstrip('/')}/{child}"
            stack.append(full)
            parts = full[len(root.rstrip("/")) + 1 :].split("/")
            seen_instance = False
            for k, part in enumerate(parts):
                if part in names:
                    parts[k], seen_instance = "<i>", True
                elif seen_instance and k >= 3:
                    parts[k] = "*"
            key = "/".join(parts)
            counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
