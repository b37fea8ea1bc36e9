"""The Kafka Java client's default partitioner for keyed records, in pure Python.

Owns ``murmur2`` (Kafka's ``Utils.murmur2``: MurmurHash2, 32-bit, seed ``0x9747b28c``) and
``partition_for_key`` (``toPositive(murmur2(key)) % num_partitions`` with ``toPositive(x) = x & 0x7fffffff``).
librdkafka's ``murmur2_random`` partitioner computes the same for non-empty keys, and so do Kafka's Java,
Go and Spark clients: every writer of a relay topic agrees on where a key lives, so the changes of one row
stay in one partition in binlog order whatever client wrote them.

Pure functions, no state: called per record on the publisher thread. The hash is done on unsigned 32-bit
ints (masking after every multiply) and read as Java's signed int only at the end.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: a signed 32-bit int, exactly as the Java client returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length & ~3
    if full:
        # Little-endian 32-bit words, as Kafka assembles them byte by byte.
        for (word,) in struct.iter_unpack("<I", data[:full]):
            k = (word * _M) & _MASK
            k ^= k >> _R
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        if tail == 3:
            h ^= data[full + 2] << 16
        if tail >= 2:
            h ^= data[full + 1] << 8
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (``abs`` would overflow on MIN_VALUE)."""
    return value & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner (and librdkafka's ``murmur2_random``) picks."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
