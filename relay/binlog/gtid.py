"""GTID sets in both flavours, as values that round-trip through text.

MySQL: ``uuid:1-5:7,uuid2:1-3`` (intervals per server uuid). Since MySQL 8.3 a GTID may carry a
*tag* (``uuid:tag:n``, MySQL manual "GTID Format and Storage"): a set then lists, per uuid, the
untagged intervals first and then each tag with its intervals — ``uuid:1-5:aa:1-3:bb:7`` — which is
how MySQL's ``Gtid_set::to_string`` prints it (tsids sorted by uuid, then tag; the empty tag first).
A tag is ``[A-Za-z_][A-Za-z0-9_]{0,31}`` and MySQL stores it lower-cased (``Tag::from_cstring``), so
``uuid:MyTag:1`` and ``uuid:mytag:1`` are the same GTID. Untagged and tagged intervals of one uuid
are independent sets of numbers.

MariaDB: ``0-1-100,1-2-7`` (the last sequence number per replication domain, with the server id that
wrote it). ``str(GtidSet.parse(s))`` gives the canonical text (MySQL separates uuids with ",", without
the newline ``@@gtid_executed`` shows); ``add(gtid)`` records one more transaction, ``merge`` adds a
whole set, ``contains`` / ``includes`` test membership.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from relay.errors import SourceError

_TAG = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
_MYSQL_GTID = re.compile(rf"^([0-9a-fA-F-]{{36}})(?::({_TAG}))?:(\d+)$")
_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TAG_ONLY = re.compile(rf"^{_TAG}$")
_GNO_END = 2**63 - 1  # MySQL's GNO_END: the largest valid GNO is 2^63 - 2

# (uuid, tag) — MySQL's TSID, "transaction source identifier"; tag "" for an untagged GTID.
Tsid = tuple[str, str]
Intervals = list[tuple[int, int]]


def _check_gno(value: int, where: str) -> int:
    if not 0 < value < _GNO_END:
        raise SourceError(f"GTID number {value} out of range 1..{_GNO_END - 1} in {where!r}")
    return value


def _merge_sorted(ivs: Intervals) -> Intervals:
    ivs.sort()
    merged: Intervals = []
    for a, b in ivs:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


@dataclass
class GtidSet:
    mariadb: bool
    # MySQL: (uuid, tag) -> sorted, disjoint, inclusive intervals. MariaDB: domain -> (server_id, seq).
    intervals: dict[Tsid, Intervals] = field(default_factory=dict)
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
            else:
                out._parse_mysql_element(part, text)
        return out

    def _parse_mysql_element(self, part: str, text: str) -> None:
        """``uuid(:tag)?(:interval)+`` repeated: a tag applies to the intervals after it."""
        uuid, *tokens = part.split(":")
        uuid = uuid.lower()
        if not _UUID.match(uuid) or not tokens:
            raise SourceError(f"bad MySQL GTID set element {part!r} in {text!r}: expected uuid[:tag]:N[-M]")
        tag, pending_tag = "", False
        for token in tokens:
            if _TAG_ONLY.match(token):
                if pending_tag:
                    raise SourceError(f"GTID tag {tag!r} without intervals in {text!r}")
                tag, pending_tag = token.lower(), True
                continue
            lo, _, hi = token.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise SourceError(f"bad GTID interval {token!r} in {text!r}")
            start = _check_gno(int(lo), text)
            end = _check_gno(int(hi), text) if hi else start
            if end < start:
                raise SourceError(f"GTID interval {token!r} ends before it starts in {text!r}")
            self.add_interval((uuid, tag), start, end)
            pending_tag = False
        if pending_tag:
            raise SourceError(f"GTID tag {tag!r} without intervals in {text!r}")

    def add_interval(self, tsid: Tsid, lo: int, hi: int) -> None:
        """Add the inclusive interval ``lo``-``hi`` of one (uuid, tag)."""
        ivs = self.intervals.setdefault(tsid, [])
        ivs.append((lo, hi))
        self.intervals[tsid] = _merge_sorted(ivs)

    @staticmethod
    def is_tag(text: str) -> bool:
        """True for a valid GTID tag (MySQL ``Tag::is_character_valid``, at most 32 characters)."""
        return bool(_TAG_ONLY.match(text))

    @staticmethod
    def split_mysql(gtid: str) -> tuple[Tsid, int]:
        """``uuid[:tag]:gno`` → ((uuid, tag), gno), normalised as MySQL stores them."""
        m = _MYSQL_GTID.match(gtid)
        if not m:
            raise SourceError(f"bad MySQL GTID {gtid!r}: expected uuid[:tag]:N")
        return (m[1].lower(), (m[2] or "").lower()), int(m[3])

    def add(self, gtid: str) -> None:
        """Record one executed transaction's GTID."""
        if self.mariadb:
            m = _MARIADB_GTID.match(gtid)
            if not m:
                raise SourceError(f"bad MariaDB GTID {gtid!r}")
            self.domains[int(m[1])] = (int(m[2]), int(m[3]))
            return
        tsid, gno = self.split_mysql(gtid)
        ivs = self.intervals.get(tsid)
        if ivs and ivs[-1][1] + 1 == gno:  # the common case: the next number of the last interval
            ivs[-1] = (ivs[-1][0], gno)
        else:
            self.add_interval(tsid, gno, gno)

    def merge(self, other: GtidSet) -> None:
        """Add every transaction of ``other`` (MariaDB: the later position per domain)."""
        if other.mariadb != self.mariadb:
            raise SourceError("cannot merge a MySQL GTID set with a MariaDB one")
        for domain, (server, seq) in other.domains.items():
            have = self.domains.get(domain)
            if have is None or seq > have[1]:
                self.domains[domain] = (server, seq)
        for tsid, ivs in other.intervals.items():
            self.intervals[tsid] = _merge_sorted([*self.intervals.get(tsid, []), *ivs])

    def contains(self, gtid: str) -> bool:
        if self.mariadb:
            m = _MARIADB_GTID.match(gtid)
            if not m:
                return False
            have = self.domains.get(int(m[1]))
            return have is not None and have[1] >= int(m[3])
        try:
            tsid, gno = self.split_mysql(gtid)
        except SourceError:
            return False
        return any(a <= gno <= b for a, b in self.intervals.get(tsid, ()))

    def includes(self, other: GtidSet) -> bool:
        """True when every transaction of ``other`` is in this set (MySQL's GTID_SUBSET(other, self))."""
        if other.mariadb != self.mariadb:
            return False
        for domain, (_, seq) in other.domains.items():
            have = self.domains.get(domain)
            if have is None or have[1] < seq:
                return False
        for tsid, ivs in other.intervals.items():
            mine = self.intervals.get(tsid, [])
            if not all(any(a <= lo and hi <= b for a, b in mine) for lo, hi in ivs):
                return False
        return True

    @property
    def tagged(self) -> bool:
        """True when some GTID of the set carries a tag (MySQL's ``Gtid_format::tagged``)."""
        return any(tag for _, tag in self.intervals)

    def copy(self) -> GtidSet:
        return GtidSet(self.mariadb, {k: list(v) for k, v in self.intervals.items()}, dict(self.domains))

    def __str__(self) -> str:
        if self.mariadb:
            return ",".join(f"{d}-{s}-{q}" for d, (s, q) in sorted(self.domains.items()))
        parts: list[str] = []
        last_uuid = ""
        for (uuid, tag), ivs in sorted(self.intervals.items()):
            if not ivs:
                continue
            rng = ":".join(str(a) if a == b else f"{a}-{b}" for a, b in ivs)
            text = f"{tag}:{rng}" if tag else rng
            if uuid == last_uuid:
                parts[-1] += ":" + text
            else:
                parts.append(f"{uuid}:{text}")
                last_uuid = uuid
        return ",".join(parts)
