"""MySQL GTID sets in binary form: the PREVIOUS_GTIDS body and the set COM_BINLOG_DUMP_GTID sends.

Owned here: decoding and encoding ``relay.gtid.GtidSet`` in MySQL's ``Gtid_set::encode`` layout,
in both formats — untagged (every MySQL since 5.6) and tagged (MySQL 8.3+, when a GTID of the set
carries a tag). Pure functions, run on the binlog reader thread (``relay.binlog.parse``) and on the
thread that opens a dump (``relay.binlog.stream``).

Layout (mysql-server sql/rpl_gtid_set.cc ``Gtid_set::encode``, ``encode_nsids_format``;
libs/mysql/gtid ``Tsid::encode_tsid``, ``Tag::encode_tag``): an 8-byte little-endian word with the
format in its high byte — untagged (0): the count of (uuid, tag) entries in the other 7 bytes;
tagged (1): the format again in the low byte and the count in between — then per entry the 16-byte
uuid, in the tagged format the tag as a serialized string (varlen length, then the bytes; length 0
for an untagged GTID of the set), the number of intervals (8 bytes) and the intervals as
(start, end exclusive), 8 bytes each. Entries are sorted by uuid, then tag (MySQL's ``Tsid`` order).
"""

from __future__ import annotations

import struct
import uuid

from relay.binlog.gtid import GtidSet
from relay.binlog.serialization import read_varlen, write_varlen
from relay.errors import DecodeError

_U64 = struct.Struct("<Q")
_TAG_MAX = 32  # mysql::gtid::tag_max_length
_GTID_FORMAT_UNTAGGED, _GTID_FORMAT_TAGGED = 0, 1


def format_uuid(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def tag_text(raw: bytes) -> str:
    """A GTID tag as MySQL validates it (``Tag::from_cstring``): letters, digits, '_', lower-cased."""
    tag = raw.decode("ascii", "replace").lower()
    if len(tag) > _TAG_MAX or not GtidSet.is_tag(tag):
        raise DecodeError(f"invalid GTID tag {raw!r}")
    return tag


def decode_mysql_gtid_set(data: bytes, pos: int, end: int) -> GtidSet:
    """An encoded MySQL GTID set (PREVIOUS_GTIDS body, COM_BINLOG_DUMP_GTID) at ``data[pos:end]``."""
    (word,) = _U64.unpack_from(data, pos)
    gtid_format = word >> 56
    if gtid_format == _GTID_FORMAT_TAGGED:
        count = (word >> 8) & 0xFFFFFFFFFFFF
    elif gtid_format == _GTID_FORMAT_UNTAGGED:
        count = word & 0x00FFFFFFFFFFFFFF
    else:
        raise DecodeError(f"unknown GTID set format {gtid_format}")
    p = pos + 8
    out = GtidSet(mariadb=False)
    for _ in range(count):
        uuid = format_uuid(data[p : p + 16])
        p += 16
        tag = ""
        if gtid_format == _GTID_FORMAT_TAGGED:
            size, p = read_varlen(data, p, end)
            tag = tag_text(data[p : p + size]) if size else ""
            p += size
        (n_intervals,) = _U64.unpack_from(data, p)
        p += 8
        for _ in range(n_intervals):
            lo, hi = struct.unpack_from("<QQ", data, p)  # hi is exclusive
            p += 16
            if not 0 < lo < hi:
                raise DecodeError(f"bad GTID interval [{lo}, {hi}) for {uuid}")
            out.add_interval((uuid, tag), lo, hi - 1)
    if p > end:
        raise DecodeError("encoded GTID set runs past the end of the event")
    return out


def encode_mysql_gtid_set(gtids: GtidSet) -> bytes:
    """The binary GTID set of COM_BINLOG_DUMP_GTID: untagged unless a GTID carries a tag, so that
    servers before MySQL 8.3 (which know only the untagged format) still read a tag-free set."""
    tagged = gtids.tagged
    items = [(tsid, ivs) for tsid, ivs in sorted(gtids.intervals.items()) if ivs]
    count = len(items)
    word = (1 << 56) | (count << 8) | 1 if tagged else count
    out = [struct.pack("<Q", word)]
    for (sid, tag), intervals in items:
        out.append(uuid.UUID(sid).bytes)
        if tagged:
            raw = tag.encode("ascii")
            out.append(write_varlen(len(raw)) + raw)
        out.append(struct.pack("<Q", len(intervals)))
        out.extend(struct.pack("<QQ", lo, hi + 1) for lo, hi in intervals)
    return b"".join(out)
