"""Java's default partitioning of keyed records: Kafka's ``Utils.murmur2`` and ``Utils.toPositive``.

A keyed record must land where a Java producer would put it, whichever client wrote it: jobs
that join or compact by key, or read a partition's keys with another application, rely on it.
librdkafka does the same with ``partitioner=murmur2_random`` (the kit's producer default); this
module is the same function in Python, for the kit's embedded test cluster and the tests that
check both agree.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data`` as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length % 4
    # Java's switch falls through from case 3 to case 1.
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: the sign bit cleared (not ``abs``, which differs at MIN_VALUE)."""
    return number & 0x7FFFFFFF


def java_partition(key: bytes, partition_count: int) -> int:
    """The partition Java's built-in partitioner gives a record with this (serialized) key."""
    return to_positive(murmur2(key)) % partition_count
