"""murmur2 and the keyed-record partitioner against the Java client's own test vectors."""

from __future__ import annotations

import pytest

from relay.kafka.partitioner import murmur2, partition_for_key, to_positive

# Kafka's clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka's src/rdmurmur2.c unittest_murmur2, labelled there ``java_murmur2_results`` (int32 as hex).
_UNALIGNED = b"PreAmbleWillBeRemoved,ThePrePartThatIs"
LIBRDKAFKA_JAVA_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    _UNALIGNED: 0x78424F1C,
    _UNALIGNED[1:]: 0x4A62B377,
    _UNALIGNED[2:]: 0xE0E4E09E,
    _UNALIGNED[3:]: 0x62B8B43F,
    b"": 0x106E08D9,
}


def _signed(u32: int) -> int:
    return u32 - 2**32 if u32 & 0x80000000 else u32


@pytest.mark.parametrize(("data", "expected"), sorted(KAFKA_UTILS_TEST_VECTORS.items()))
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("data", "expected"), sorted(LIBRDKAFKA_JAVA_VECTORS.items()))
def test_murmur2_matches_librdkafka_java_results(data: bytes, expected: int) -> None:
    assert murmur2(data) == _signed(expected)


def test_vectors_cover_every_tail_length() -> None:
    # The hash has a separate path for 0..3 trailing bytes; the vectors must reach all of them.
    keys = [*KAFKA_UTILS_TEST_VECTORS, *LIBRDKAFKA_JAVA_VECTORS]
    assert {len(k) % 4 for k in keys} == {0, 1, 2, 3}


def test_murmur2_is_a_signed_32_bit_int() -> None:
    for i in range(2000):
        h = murmur2(f"key-{i}".encode())
        assert -(2**31) <= h < 2**31


def test_empty_key_is_hashed_not_randomised() -> None:
    # Java hashes an empty (non-null) key like any other; only a null key is placed without the hash.
    assert partition_for_key(b"", 7) == 0x106E08D9 % 7


def test_to_positive_clears_the_sign_bit_only() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(123) == 123


def test_partition_for_key_is_to_positive_mod_n() -> None:
    for key, h in KAFKA_UTILS_TEST_VECTORS.items():
        for n in (1, 3, 12, 64):
            assert partition_for_key(key, n) == (h & 0x7FFFFFFF) % n


def test_partition_for_key_differs_from_abs_on_negative_hashes() -> None:
    # "21" hashes negative: abs() would give another partition for some counts; Kafka uses the mask.
    h = KAFKA_UTILS_TEST_VECTORS[b"21"]
    assert partition_for_key(b"21", 7) == (h & 0x7FFFFFFF) % 7
    assert any(abs(h) % n != (h & 0x7FFFFFFF) % n for n in range(2, 50))


def test_non_positive_partition_count_is_refused() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)
