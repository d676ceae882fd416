from __future__ import annotations

from parley.ids import reply_id, user_message_id
from parley.partitioning import murmur2, partition_for


def test_ids_are_deterministic_and_distinct() -> None:
    assert user_message_id("c", "m1") == user_message_id("c", "m1")
    assert user_message_id("c", "m1") != user_message_id("c", "m2")
    assert reply_id("c", "m1") != user_message_id("c", "m1")
    assert user_message_id("c1", "m") != user_message_id("c2", "m")


def test_murmur2_matches_kafkas_java_test_vectors() -> None:
    # From the Kafka source, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java (testMurmur2).
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        bytes([ord("a"), ord("b"), ord("c")]): 479470107,
    }
    for data, signed in vectors.items():
        assert murmur2(data) == signed & 0xFFFFFFFF, data


def test_partition_is_stable_and_in_range() -> None:
    for n in (1, 6, 12):
        parts = {partition_for(f"conv-{i}", n) for i in range(200)}
        assert parts <= set(range(n)) and (n == 1 or len(parts) > 1)
