"""Records as the simulated cluster holds them: what a producer hands it (keys, values and header
values as bytes, str or None, as confluent-kafka takes them), the stored form of headers, a
produced record waiting for ``flush()``, and a raw log entry as tests inspect it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from connectors.kafka.clients import Headers
from twophase.errors import InvalidTypeError


@dataclass(frozen=True)
class LogEntry:
    """One raw entry of a partition log, markers included (for tests, via ``log_entries``)."""

    offset: int
    kind: str  # "data", "commit" or "abort"
    transactional_id: str | None
    producer_id: int | None
    producer_epoch: int | None
    transaction_state: str | None  # "ongoing", "committed" or "aborted"; None if not transactional
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


@dataclass(slots=True)
class PendingRecord:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: str | None
    timestamp_ms: int


def as_bytes(data: object, what: str) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        # confluent-kafka accepts str and sends it UTF-8 encoded.
        return data.encode("utf-8")
    raise InvalidTypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


def encode_headers(headers: Headers | Mapping[str, bytes | None] | None) -> tuple[str | None, int]:
    """Headers as stored (JSON, values hex-encoded) and their size in bytes."""
    if not headers:
        return None, 0
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs: list[list[str | None]] = []
    size = 0
    for name, raw in items:
        value = as_bytes(raw, f"header {name!r}")
        size += len(name.encode("utf-8")) + (len(value) if value is not None else 0)
        pairs.append([name, None if value is None else value.hex()])
    return json.dumps(pairs), size


def decode_headers(stored: str | None) -> tuple[tuple[str, bytes | None], ...]:
    if stored is None:
        return ()
    return tuple((name, None if hexed is None else bytes.fromhex(hexed)) for name, hexed in json.loads(stored))
