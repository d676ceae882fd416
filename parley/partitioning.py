"""Kafka's default key → partition mapping (murmur2, as the Java client does).

Every Parley producer uses it (librdkafka ``partitioner=murmur2_random``,
aiokafka's default), so any service can compute where a conversation's events
land: the gateway uses it to know which ``chat.tokens`` partition to read, the
router to keep a conversation on one partition.
"""

from __future__ import annotations

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as an unsigned 32-bit int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length - length % 4
    extra = length % 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes | str, partitions: int) -> int:
    if isinstance(key, str):
        key = key.encode()
    return (murmur2(key) & 0x7FFFFFFF) % partitions
