"""Topics and partition logs of the simulated cluster: appends, reads, offsets, retention,
consumer group offsets and broker configuration (the admin requests).

The semantics follow Apache Kafka 4.0, as measured and written down in
``design/exactly-once-protocol.md``:

- each partition is a log with consecutive offsets; COMMIT and ABORT control markers take an
  offset, so consumers see gaps (aborted 5, committed 5, open 3 -> 0-4, 6-10, 12-14);
- read_uncommitted reads every data record up to the high watermark; read_committed reads
  non-transactional and committed records only, and no further than the last stable offset (LSO),
  the first offset of the earliest open transaction of the partition;
- ``list_offsets``: earliest = log start offset, latest = LSO (read_committed) or high watermark,
  a timestamp = first offset whose timestamp is >= it (a commit or abort marker included, as
  Kafka's offsetsForTimes searches every batch), else latest;
- topics are never auto-created, and creating an existing one is no error; a read from beyond the
  log end is OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass
from typing import Iterable, Mapping

from connectors.kafka import kafka_errors as errors
from connectors.kafka.clients import ConsumedRecord, OffsetSpec, TopicPartition
from connectors.simulated_kafka.records import decode_headers
from connectors.simulated_kafka.store import ONGOING, ClusterStore
from twophase.errors import InvalidValueError

logger = logging.getLogger(__name__)

_READ_CHUNK = 1000


@dataclass(frozen=True)
class TopicMeta:
    """What a producer keeps of a topic it produces to."""

    partition_count: int
    log_append_time: bool


class PartitionLogs(ClusterStore):
    """The cluster's topics and partition logs."""

    # -- logs ------------------------------------------------------------------------------------

    @staticmethod
    def _append(
        conn: sqlite3.Connection,
        topic: str,
        partition: int,
        rows: list[tuple[str, int | None, bytes | None, bytes | None, str | None, int, int]],
    ) -> int:
        """Append (kind, txn, key, value, headers, timestamp, timestamp type) rows; returns the
        offset of the first."""
        (first,) = conn.execute(
            "SELECT next_offset FROM partition_logs WHERE topic = ? AND partition_id = ?",
            (topic, partition),
        ).fetchone()
        conn.executemany(
            "INSERT INTO records (topic, partition_id, record_offset, kind, txn, record_key,"
            " record_value, headers, timestamp_ms, timestamp_type) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((topic, partition, first + i, *row) for i, row in enumerate(rows)),
        )
        conn.execute(
            "UPDATE partition_logs SET next_offset = ? WHERE topic = ? AND partition_id = ?",
            (first + len(rows), topic, partition),
        )
        return first

    @staticmethod
    def _partition_bounds(conn: sqlite3.Connection, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, high watermark)."""
        row = conn.execute(
            "SELECT log_start, next_offset FROM partition_logs WHERE topic = ? AND partition_id = ?",
            (tp.topic, tp.partition),
        ).fetchone()
        if row is None:
            known = conn.execute("SELECT 1 FROM topics WHERE name = ?", (tp.topic,)).fetchone()
            what = f"partition {tp}" if known else f"topic {tp.topic!r}"
            raise errors.UnknownTopicError(f"UNKNOWN_TOPIC_OR_PARTITION: {what} does not exist")
        return row[0], row[1]

    @staticmethod
    def _last_stable_offset(conn: sqlite3.Connection, tp: TopicPartition, log_start: int, high_watermark: int) -> int:
        (first_open,) = conn.execute(
            "SELECT MIN(p.first_offset) FROM transactions t JOIN transaction_partitions p ON p.txn = t.id"
            " WHERE t.state = ? AND p.topic = ? AND p.partition_id = ? AND p.first_offset IS NOT NULL",
            (ONGOING, tp.topic, tp.partition),
        ).fetchone()
        if first_open is None:
            return high_watermark
        return max(first_open, log_start)

    def _end_offset(self, conn: sqlite3.Connection, tp: TopicPartition, read_committed: bool) -> tuple[int, int]:
        """(log start offset, the end readable at the isolation level)."""
        log_start, high_watermark = self._partition_bounds(conn, tp)
        if not read_committed:
            return log_start, high_watermark
        return log_start, self._last_stable_offset(conn, tp, log_start, high_watermark)

    def topic_metadata(self, topic: str) -> TopicMeta:
        row = self.connection().execute(
            "SELECT partition_count, config FROM topics WHERE name = ?", (topic,)
        ).fetchone()
        if row is None:
            raise errors.UnknownTopicError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic!r} does not exist")
        config = json.loads(row[1])
        return TopicMeta(row[0], config.get("message.timestamp.type") == "LogAppendTime")

    # -- reads -----------------------------------------------------------------------------------

    def check_read(self, ranges: Mapping[TopicPartition, tuple[int, int]], read_committed: bool) -> None:
        with self.transaction("read") as (conn, _now):
            for tp, (start, end) in ranges.items():
                if start > end:
                    raise InvalidValueError(f"read range of {tp} is backwards: [{start}, {end})")
                log_start, readable_end = self._end_offset(conn, tp, read_committed)
                _, high_watermark = self._partition_bounds(conn, tp)
                # A fetch from beyond the log end is OFFSET_OUT_OF_RANGE in Kafka, whatever the
                # isolation level, before the seam's own check of the range's end below.
                if start > high_watermark:
                    raise errors.OffsetOutOfRangeError(
                        f"OFFSET_OUT_OF_RANGE: offset {start} of {tp} is beyond the log end offset {high_watermark}"
                    )
                # An empty range fetches nothing, so retention cannot have taken anything from it.
                if start < log_start and start != end:
                    raise errors.OffsetOutOfRangeError(
                        f"OFFSET_OUT_OF_RANGE: offset {start} of {tp} is below the log start offset {log_start}"
                    )
                if end > readable_end:
                    level = "last stable offset" if read_committed else "high watermark"
                    raise InvalidValueError(f"read range [{start}, {end}) of {tp} goes beyond the {level} {readable_end}")

    def fetch(self, tp: TopicPartition, start: int, end: int, read_committed: bool) -> list[ConsumedRecord]:
        """Up to one chunk of visible records from ``start``; the range was checked before."""
        # Below the LSO every transaction is decided, so "committed" is all read_committed needs.
        visibility = (
            " AND (r.txn IS NULL OR EXISTS (SELECT 1 FROM transactions t WHERE t.id = r.txn AND t.state = 'committed'))"
            if read_committed else ""
        )
        rows = self.connection().execute(
            "SELECT r.record_offset, r.record_key, r.record_value, r.timestamp_ms, r.timestamp_type, r.headers"
            " FROM records r WHERE r.topic = ? AND r.partition_id = ? AND r.record_offset >= ?"
            f" AND r.record_offset < ? AND r.kind = 'data'{visibility} ORDER BY r.record_offset LIMIT ?",
            (tp.topic, tp.partition, start, end, _READ_CHUNK),
        ).fetchall()
        return [
            ConsumedRecord(tp.topic, tp.partition, offset, key, value, ts, ts_type, decode_headers(headers))
            for offset, key, value, ts, ts_type, headers in rows
        ]

    # -- admin -----------------------------------------------------------------------------------

    def list_topics(self) -> list[str]:
        with self.transaction("list_topics") as (conn, _now):
            return [name for (name,) in conn.execute("SELECT name FROM topics ORDER BY name")]

    def partitions(self, topic: str) -> list[int]:
        with self.transaction("partitions") as (conn, _now):
            row = conn.execute("SELECT partition_count FROM topics WHERE name = ?", (topic,)).fetchone()
            if row is None:
                raise errors.UnknownTopicError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic!r} does not exist")
            return list(range(row[0]))

    def create_topic(self, topic: str, partitions: int, config: Mapping[str, str] | None) -> None:
        if not topic or partitions < 1:
            raise InvalidValueError(f"a topic needs a name and at least one partition, got {topic!r} with {partitions}")
        with self.transaction("create_topic") as (conn, _now):
            if conn.execute("SELECT 1 FROM topics WHERE name = ?", (topic,)).fetchone():
                # The seam's create_topic is idempotent (the real admin ignores TOPIC_ALREADY_EXISTS:
                # setup code reruns after crashes); the existing topic is left as it is.
                logger.info("fake Kafka: topic %r already exists", topic)
                return
            conn.execute(
                "INSERT INTO topics (name, partition_count, config) VALUES (?, ?, ?)",
                (topic, partitions, json.dumps({k: str(v) for k, v in (config or {}).items()})),
            )
            conn.executemany(
                "INSERT INTO partition_logs (topic, partition_id, log_start, next_offset) VALUES (?, ?, 0, 0)",
                ((topic, p) for p in range(partitions)),
            )

    def list_offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec,
                     read_committed: bool) -> dict[TopicPartition, int]:
        if isinstance(spec, bool) or not (spec in ("earliest", "latest") or isinstance(spec, int)):
            raise InvalidValueError(f"offset spec must be 'earliest', 'latest' or a timestamp in ms, not {spec!r}")
        if isinstance(spec, int) and spec < 0:
            # Kafka's wire protocol uses -1/-2 for latest/earliest; the seam spells those out.
            raise InvalidValueError(f"a timestamp must not be negative, got {spec}; use 'latest' or 'earliest'")
        with self.transaction("list_offsets") as (conn, _now):
            result: dict[TopicPartition, int] = {}
            for tp in partitions:
                log_start, latest = self._end_offset(conn, tp, read_committed)
                if spec == "earliest":
                    result[tp] = log_start
                elif spec == "latest":
                    result[tp] = latest
                else:
                    (found,) = conn.execute(
                        "SELECT MIN(record_offset) FROM records WHERE topic = ? AND partition_id = ?"
                        " AND timestamp_ms >= ? AND record_offset >= ? AND record_offset < ?",
                        (tp.topic, tp.partition, spec, log_start, latest),
                    ).fetchone()
                    result[tp] = latest if found is None else found
            return result

    def broker_config(self, name: str) -> str | None:
        with self.transaction("broker_config") as (conn, _now):
            return self._meta(conn, f"config:{name}")

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        with self.transaction("commit_group_offsets") as (conn, _now):
            for tp in offsets:
                self._partition_bounds(conn, tp)
            conn.executemany(
                "INSERT OR REPLACE INTO group_offsets (group_id, topic, partition_id, committed_offset)"
                " VALUES (?, ?, ?, ?)",
                ((group_id, tp.topic, tp.partition, offset) for tp, offset in offsets.items()),
            )

    def delete_records_before(self, tp: TopicPartition, offset: int, as_request: bool) -> None:
        with self.transaction("delete_records" if as_request else None) as (conn, _now):
            log_start, high_watermark = self._partition_bounds(conn, tp)
            if offset > high_watermark or offset < 0:
                raise errors.OffsetOutOfRangeError(
                    f"OFFSET_OUT_OF_RANGE: cannot delete {tp} before {offset}: the high watermark is {high_watermark}"
                )
            new_start = max(log_start, offset)
            conn.execute(
                "DELETE FROM records WHERE topic = ? AND partition_id = ? AND record_offset < ?",
                (tp.topic, tp.partition, new_start),
            )
            conn.execute(
                "UPDATE partition_logs SET log_start = ? WHERE topic = ? AND partition_id = ?",
                (new_start, tp.topic, tp.partition),
            )
