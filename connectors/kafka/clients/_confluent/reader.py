"""The source's reader: explicit offset ranges read with one long-lived librdkafka consumer,
behind the ``RecordReader`` seam.

Nothing here retries on its own: a read that makes no progress for ``stall_timeout_s`` surfaces as
``RetriableKafkaError`` and the caller decides whether to try again.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, Mapping

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME as _CK_LOG_APPEND_TIME
from confluent_kafka import Consumer as _Consumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as _CkTopicPartition

from connectors.kafka.authorization import TOPIC, authorization_error
from connectors.kafka.clients import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    ConsumedBatch,
    ConsumedRecord,
    TopicPartition,
)
from connectors.kafka.kafka_errors import KafkaConnectorError, OffsetOutOfRangeError, RetriableKafkaError, UnknownTopicError
from connectors.kafka.clients._confluent.librdkafka import base_config, error_type_of, map_exception, map_kafka_error
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)


class ConfluentRecordReader:
    """Reads explicit offset ranges with one long-lived librdkafka consumer.

    The consumer never joins a group and never commits: its group id (``group.id`` when the
    configuration has one, Spark's meaning of the option, else a random one) only satisfies
    librdkafka and names the consumer to the brokers. Partitions are (un)assigned incrementally, so one consumer serves many reads
    (creating one costs far more than a small read).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        read_committed: bool,
        config: Mapping[str, Any],
        stall_timeout_s: float = 30.0,
    ) -> None:
        self.read_committed = read_committed
        self.stall_timeout_s = stall_timeout_s
        self._isolation = "read_committed" if read_committed else "read_uncommitted"
        conf: dict[str, Any] = base_config(bootstrap_servers)
        # librdkafka's 1000 ms default backoff after a fetch halves throughput of range reads.
        conf["fetch.queue.backoff.ms"] = 10
        # A range that ends in a commit marker (every range the sink wrote does) only completes
        # with the EOF of an empty fetch at the LSO, which the broker holds for fetch.wait.max.ms
        # (500 ms by default); a reassigned partition also waits for the fetch in flight.
        conf["fetch.wait.max.ms"] = 50
        conf.update(config)
        self._config = dict(config)
        conf.update(
            {
                "group.id": config.get("group.id") or f"eos-reader-{uuid.uuid4().hex}",
                "isolation.level": self._isolation,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                # Offsets are always explicit; an out-of-range one must fail, not silently jump.
                "auto.offset.reset": "error",
            }
        )
        try:
            self._consumer: _Consumer | None = _Consumer(conf)
        except KafkaException as exc:
            raise map_exception(exc, "reader: create") from exc
        self._assigned: set[TopicPartition] = set()
        # Each read() bumps this; an older, abandoned read generator must not touch the newer
        # read's assignment when it is finally closed or garbage collected.
        self._read_seq = 0

    def _client(self) -> _Consumer:
        if self._consumer is None:
            raise KafkaConnectorError("reader: used after close()")
        return self._consumer

    def _unassign(self, partitions: Iterable[TopicPartition]) -> None:
        parts = [tp for tp in partitions if tp in self._assigned]
        if not parts or self._consumer is None:
            return
        self._consumer.incremental_unassign([_CkTopicPartition(tp.topic, tp.partition) for tp in parts])
        self._assigned.difference_update(parts)

    def read(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> Iterator[ConsumedRecord]:
        for batch in self.read_batches(ranges):
            yield from batch.records()

    def read_batches(
        self, ranges: Mapping[TopicPartition, tuple[int, int]], include_headers: bool = True
    ) -> Iterator[ConsumedBatch]:
        consumer = self._client()
        self._read_seq += 1
        read_seq = self._read_seq
        # A read abandoned half way leaves its partitions assigned; start from a clean slate.
        self._unassign(list(self._assigned))
        pending: dict[tuple[str, int], tuple[int, int]] = {}
        for tp, (start, end) in ranges.items():
            if start < 0 or end < start:
                raise InvalidValueError(f"invalid offset range [{start}, {end}) for {tp}")
            if end > start:
                pending[(tp.topic, tp.partition)] = (start, end)
        if not pending:
            return
        assignment = [_CkTopicPartition(t, p, start) for (t, p), (start, _) in pending.items()]
        consumer.incremental_assign(assignment)
        self._assigned.update(TopicPartition(t, p) for t, p in pending)
        try:
            yield from self._consume(consumer, pending, read_seq, include_headers)
        finally:
            if self._read_seq == read_seq:
                self._unassign([TopicPartition(t, p) for t, p in pending])

    def _consume(
        self,
        consumer: _Consumer,
        pending: dict[tuple[str, int], tuple[int, int]],
        read_seq: int,
        include_headers: bool,
    ) -> Iterator[ConsumedBatch]:
        eof_seen: dict[tuple[str, int], int] = {}
        last_progress = time.monotonic()

        def finish(key: tuple[str, int]) -> None:
            del pending[key]
            self._unassign([TopicPartition(*key)])

        while pending:
            if self._read_seq != read_seq:
                raise KafkaConnectorError(
                    "reader: a newer read() started before this one finished; one reader serves "
                    "one read at a time"
                )
            # Short: a range that ends in a commit marker (every range the sink wrote) is found
            # complete by the position check after an empty consume, so this wait is paid by
            # every read task of such input (51 ms a task at 0.05 s, 11 ms now; bench/task_clients.py).
            messages = consumer.consume(num_messages=10000, timeout=0.01)
            if messages:
                last_progress = time.monotonic()
            records = [msg for msg in messages if msg.error() is None]
            if len(records) < len(messages):
                events = [msg for msg in messages if msg.error() is not None]
            else:
                events = []
            yield from self._batches(records, pending, include_headers, finish)
            for msg in events:
                key = (msg.topic(), msg.partition())
                bounds = pending.get(key)
                if bounds is None:
                    # Finished partition, or a stale event of an earlier assignment.
                    continue
                err = msg.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    # The EOF offset is the end of what this isolation level can see (LSO under
                    # read_committed). A range ending in aborted records or control markers
                    # yields no record at end-1, so EOF is what ends it.
                    eof_offset = msg.offset()
                    eof_seen[key] = eof_offset
                    if eof_offset is not None and eof_offset >= bounds[1]:
                        finish(key)
                    continue
                self._raise_consumer_error(err, key, bounds)
            if pending and not messages:
                self._finish_by_position(consumer, pending, finish)
                if pending and time.monotonic() - last_progress > self.stall_timeout_s:
                    raise self._stalled(consumer, pending, eof_seen)

    @staticmethod
    def _batches(
        records: list[Any],
        pending: dict[tuple[str, int], tuple[int, int]],
        include_headers: bool,
        finish: Callable[[tuple[str, int]], None],
    ) -> Iterator[ConsumedBatch]:
        """The records of one consume() call that fall in their ranges, a batch per partition.

        The source's per-record cost is here, so it is built from list comprehensions over the
        messages (one C call each per column), not from a loop of appends."""
        if not records:
            return
        partitions = [msg.partition() for msg in records]
        topics = {msg.topic() for msg in records}
        if len(topics) == 1 and min(partitions) == max(partitions):
            groups: dict[tuple[str, int], list[Any]] = {(topics.pop(), partitions[0]): records}
        else:
            groups = {}
            for msg, partition in zip(records, partitions):
                groups.setdefault((msg.topic(), partition), []).append(msg)
        for key, group in groups.items():
            bounds = pending.get(key)
            if bounds is None:
                # Finished partition, or a stale message of an earlier assignment.
                continue
            start, end = bounds
            offsets = [msg.offset() for msg in group]
            lowest, highest = min(offsets), max(offsets)
            if highest >= end - 1:
                finish(key)
            if lowest < start or highest >= end:
                inside = [i for i, offset in enumerate(offsets) if start <= offset < end]
                if not inside:
                    continue
                group = [group[i] for i in inside]
                offsets = [offsets[i] for i in inside]
            timestamps = [msg.timestamp() for msg in group]
            yield ConsumedBatch(
                topic=key[0],
                partition=key[1],
                offsets=offsets,
                keys=[msg.key() for msg in group],
                values=[msg.value() for msg in group],
                timestamps_ms=[ts for _, ts in timestamps],
                timestamp_types=[TIMESTAMP_LOG_APPEND_TIME if ts_type == _CK_LOG_APPEND_TIME
                                 else TIMESTAMP_CREATE_TIME for ts_type, _ in timestamps],
                headers=[tuple(headers) if headers else () for headers in
                         (msg.headers() for msg in group)] if include_headers else None,
            )

    def _finish_by_position(
        self,
        consumer: _Consumer,
        pending: dict[tuple[str, int], tuple[int, int]],
        finish: Callable[[tuple[str, int]], None],
    ) -> None:
        # Belt and braces for EOF: when the consumer sits idle, its position past the range's end
        # (it skipped control markers and aborted records) also proves the range complete.
        positions = consumer.position([_CkTopicPartition(t, p) for t, p in pending])
        for tp in positions:
            key = (tp.topic, tp.partition)
            if key in pending and tp.offset >= 0 and tp.offset >= pending[key][1]:
                finish(key)

    def _raise_consumer_error(
        self, err: KafkaError, key: tuple[str, int], bounds: tuple[int, int]
    ) -> None:
        context = f"reader ({self._isolation}) {key[0]}-{key[1]} [{bounds[0]}, {bounds[1]})"
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # The driver planned the range (DESCRIBE was allowed): what is refused is the fetch.
            raise authorization_error(self._config, ("READ",), TOPIC, key[0], error_name=err.name(),
                                      doing=f"the reader fetched {key[0]}-{key[1]}")
        if error_type_of(err) in (OffsetOutOfRangeError, UnknownTopicError) or err.fatal():
            raise map_kafka_error(err, context)
        # Transport errors and the like: librdkafka reconnects; the stall timeout bounds the wait.
        log.warning("%s: %s: %s", context, err.name(), err.str())

    def _stalled(
        self,
        consumer: _Consumer,
        pending: dict[tuple[str, int], tuple[int, int]],
        eof_seen: dict[tuple[str, int], int],
    ) -> KafkaConnectorError:
        # An assigned partition of a missing topic produces no event at all, only silence.
        for topic in sorted({t for t, _ in pending}):
            try:
                metadata = consumer.list_topics(topic=topic, timeout=5)
            except KafkaException:
                continue
            found = metadata.topics.get(topic)
            if found is None or (
                found.error is not None and error_type_of(found.error) is UnknownTopicError
            ):
                return UnknownTopicError(f"reader ({self._isolation}): topic {topic} does not exist")
        positions = {
            (tp.topic, tp.partition): tp.offset
            for tp in consumer.position([_CkTopicPartition(t, p) for t, p in pending])
        }
        details = []
        for (t, p), (s, e) in sorted(pending.items()):
            eof = eof_seen.get((t, p))
            reason = (
                f"the partition ends at {eof}, before the range's end"
                if eof is not None
                else "no records or end of partition received"
            )
            details.append(f"{t}-{p} [{s}, {e}) at position {positions.get((t, p))}: {reason}")
        hint = " (under read_committed the end is the LSO)" if self.read_committed else ""
        return RetriableKafkaError(
            f"reader ({self._isolation}): no progress for {self.stall_timeout_s:.0f} s before the "
            f"ranges were complete{hint}: {'; '.join(details)}",
            code="READ_TIMED_OUT",
        )

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            self._assigned.clear()
            consumer.close()
