"""GTID sets in both flavours, as values that round-trip through text.

MySQL: ``uuid:1-5:7,uuid2:1-3`` (intervals per server uuid). MariaDB: ``0-1-100,1-2-7`` (the last
sequence number per replication domain, with the server id that wrote it). ``str(GtidSet.parse(s))``
gives the canonical text; ``add(gtid)`` records one more transaction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay.errors import SourceError

_MYSQL_GTID = re.compile(r"^([0-9a-fA-F-]{36}):(\d+)$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


@dataclass
class GtidSet:
    mariadb: bool
    # MySQL: uuid -> sorted, disjoint, inclusive intervals. MariaDB: domain -> (server_id, seq).
    intervals: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    domains: dict[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, mariadb: bool) -> GtidSet:
        text = "".join(text.split())
        out = cls(mariadb=mariadb)
        if not text:
            return out
        for part in text.split(","):
            if mariadb:
                m = _MARIADB_GTID.match(part)
                if not m:
                    raise SourceError(f"bad MariaDB GTID {part!r} in {text!r}: expected domain-server-seq")
                out.domains[int(m[1])] = (int(m[2]), int(m[3]))
                continue
            uuid, _, ranges = part.partition(":")
            if len(uuid) != 36 or not ranges:
                raise SourceError(f"bad MySQL GTID set element {part!r} in {text!r}: expected uuid:N[-M]")
            for rng in ranges.split(":"):
                lo, _, hi = rng.partition("-")
                if not lo.isdigit() or (hi and not hi.isdigit()):
                    raise SourceError(f"bad GTID interval {rng!r} in {text!r}")
                out._add_interval(uuid.lower(), int(lo), int(hi or lo))
        return out

    def _add_interval(self, uuid: str, lo: int, hi: int) -> None:
        ivs = self.intervals.setdefault(uuid, [])
        ivs.append((lo, hi))
        ivs.sort()
        merged: list[tuple[int, int]] = []
        for a, b in ivs:
            if merged and a <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.intervals[uuid] = merged

    def add(self, gtid: str) -> None:
        """Record one executed transaction's GTID."""
        if self.mariadb:
            m = _MARIADB_GTID.match(gtid)
            if not m:
                raise SourceError(f"bad MariaDB GTID {gtid!r}")
            self.domains[int(m[1])] = (int(m[2]), int(m[3]))
            return
        m = _MYSQL_GTID.match(gtid)
        if not m:
            raise SourceError(f"bad MySQL GTID {gtid!r}")
        uuid, gno = m[1].lower(), int(m[2])
        ivs = self.intervals.get(uuid)
        if ivs and ivs[-1][1] + 1 == gno:  # the common case: the next number of the last interval
            ivs[-1] = (ivs[-1][0], gno)
        else:
            self._add_interval(uuid, gno, gno)

    def contains(self, gtid: str) -> bool:
        if self.mariadb:
            m = _MARIADB_GTID.match(gtid)
            if not m:
                return False
            have = self.domains.get(int(m[1]))
            return have is not None and have[1] >= int(m[3])
        m = _MYSQL_GTID.match(gtid)
        if not m:
            return False
        gno = int(m[2])
        return any(a <= gno <= b for a, b in self.intervals.get(m[1].lower(), ()))

    def copy(self) -> GtidSet:
        return GtidSet(self.mariadb, {k: list(v) for k, v in self.intervals.items()}, dict(self.domains))

    def __str__(self) -> str:
        if self.mariadb:
            return ",".join(f"{d}-{s}-{q}" for d, (s, q) in sorted(self.domains.items()))
        parts = []
        for uuid, ivs in sorted(self.intervals.items()):
            rng = ":".join(str(a) if a == b else f"{a}-{b}" for a, b in ivs)
            parts.append(f"{uuid}:{rng}")
        return ",".join(parts)
