"""The clients of the simulated cluster, as the ``KafkaClients`` seam
(``connectors/kafka/clients/__init__.py``) defines them: producer, reader, admin and transaction
control.

A producer keeps its records in memory until ``flush()``, like a real client whose records are
not durable before they are acknowledged; records above ``message.max.bytes`` are refused at
``produce()``, and closing a producer leaves its open transaction open.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator, Mapping, Sequence

from connectors.kafka import kafka_errors as errors
from connectors.kafka.clients import (
    ConsumedBatch,
    ConsumedRecord,
    Headers,
    OffsetSpec,
    OpenTransaction,
    ProduceBatch,
    ProducerIdentity,
    TopicPartition,
    TransactionListing,
)
from connectors.kafka.clients.murmur2 import java_partition
from connectors.simulated_kafka.logs import TopicMeta
from connectors.simulated_kafka.records import PendingRecord, as_bytes, encode_headers
from connectors.simulated_kafka.transactions import Cluster
from twophase.errors import InvalidValueError

logger = logging.getLogger(__name__)

DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


class FakeProducer:
    """A producer of the fake cluster; transactional when given a transactional id."""

    def __init__(self, cluster: Cluster, transactional_id: str | None, config: Mapping[str, str]) -> None:
        self._cluster = cluster
        self._transactional_id = transactional_id
        self._timeout_ms = int(config.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        if self._timeout_ms <= 0:
            raise InvalidValueError(f"transaction.timeout.ms must be positive, got {self._timeout_ms}")
        self._producer_id: int | None = None
        self._epoch: int | None = None
        self._in_transaction = False
        self._registered: set[TopicPartition] = set()
        self._buffer: list[PendingRecord] = []
        self._topics: dict[str, TopicMeta] = {}
        self._round_robin: dict[str, int] = {}
        self._closed = False

    def _ensure_open(self) -> None:
        if self._closed:
            raise errors.KafkaConnectorError("the producer is closed")

    def _require_transactional(self) -> str:
        if self._transactional_id is None:
            raise errors.KafkaConnectorError("this producer has no transactional id")
        return self._transactional_id

    def _require_initialised(self) -> tuple[str, int]:
        transactional_id = self._require_transactional()
        if self._epoch is None:
            raise errors.InvalidTxnStateError(f"init_transactions() was not called for {transactional_id!r}")
        return transactional_id, self._epoch

    def init_transactions(self, timeout_s: float) -> ProducerIdentity:
        self._ensure_open()
        transactional_id = self._require_transactional()
        identity = self._cluster.init_transactions(transactional_id, self._timeout_ms)
        self._producer_id, self._epoch = identity.producer_id, identity.producer_epoch
        self._in_transaction = False
        self._registered.clear()
        self._buffer.clear()
        return identity

    def begin_transaction(self) -> None:
        self._ensure_open()
        transactional_id, epoch = self._require_initialised()
        # Beginning is local to the client in Kafka. The fake still looks at the broker state so
        # that reuse after fencing or after an EndTxn from elsewhere fails clearly.
        snapshot = self._cluster.snapshot("begin_transaction", transactional_id)
        if snapshot.fence_epoch is not None and snapshot.fence_epoch > epoch:
            raise errors.ProducerFencedError(
                f"PRODUCER_FENCED: producer of {transactional_id!r} with epoch {epoch} was fenced"
            )
        if snapshot.epoch != epoch:
            raise errors.InvalidTxnStateError(
                f"the transaction of {transactional_id!r} with epoch {epoch} was ended by EndTxn;"
                " create a new producer for the next transaction"
            )
        if self._in_transaction:
            raise errors.InvalidTxnStateError(f"{transactional_id!r} is already in a transaction")
        self._in_transaction = True
        self._registered.clear()

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        self._ensure_open()
        if self._transactional_id is not None:
            self._require_initialised()
            if not self._in_transaction:
                raise errors.InvalidTxnStateError(
                    f"produce() outside of a transaction on transactional producer {self._transactional_id!r}"
                )
        key_bytes = as_bytes(key, "key")
        value_bytes = as_bytes(value, "value")
        stored_headers, headers_size = encode_headers(headers)
        snapshot = self._cluster.snapshot("produce", self._transactional_id)
        size = len(key_bytes or b"") + len(value_bytes or b"") + headers_size
        if size > snapshot.message_max_bytes:
            raise errors.RecordTooLargeError(
                f"MESSAGE_TOO_LARGE: a record of {size} bytes for {topic!r} exceeds"
                f" message.max.bytes={snapshot.message_max_bytes}"
            )
        meta = self._topics.get(topic)
        if meta is None:
            meta = self._topics[topic] = self._cluster.topic_metadata(topic)
        if partition is None:
            partition = self._choose_partition(topic, key_bytes, meta.partition_count)
        elif not 0 <= partition < meta.partition_count:
            raise errors.UnknownTopicError(
                f"UNKNOWN_TOPIC_OR_PARTITION: {topic!r} has no partition {partition}"
            )
        tp = TopicPartition(topic, partition)
        new_partition = self._transactional_id is not None and tp not in self._registered
        if new_partition or snapshot.needs_broker(self._epoch):
            self._cluster.prepare_produce(
                self._transactional_id, self._epoch, self._timeout_ms, tp if new_partition else None
            )
            if new_partition:
                self._registered.add(tp)
        self._buffer.append(PendingRecord(
            topic, partition, key_bytes, value_bytes, stored_headers,
            snapshot.now_ms if timestamp_ms is None else int(timestamp_ms),
        ))

    def produce_batch(self, batch: ProduceBatch) -> None:
        count = len(batch.values)
        keys = batch.keys if batch.keys is not None else [None] * count
        topics = batch.topics if batch.topics is not None else [batch.topic] * count
        partitions = batch.partitions if batch.partitions is not None else [None] * count
        headers = batch.headers if batch.headers is not None else [None] * count
        for topic, value, key, partition, record_headers in zip(topics, batch.values, keys, partitions, headers):
            if topic is None:
                raise InvalidValueError("a batch without a topics column needs its topic")
            self.produce(topic, value, key, partition, record_headers)

    def look_up(self, topic: str, timeout_s: float) -> None:
        self._ensure_open()

    def start_transaction(self, timeout_s: float, topic: str | None = None) -> None:
        self.init_transactions(timeout_s)
        self.begin_transaction()

    def _choose_partition(self, topic: str, key: bytes | None, partition_count: int) -> int:
        # Keyed records go where Java's default partitioner (and the kit's librdkafka producer,
        # partitioner=murmur2_random) puts them on a real cluster. Records without a key are
        # spread evenly: round robin here, sticky and random in both real clients, which no
        # reader can tell apart.
        if key is not None:
            return java_partition(key, partition_count)
        turn = self._round_robin.get(topic, 0)
        self._round_robin[topic] = turn + 1
        return turn % partition_count

    def flush(self, timeout_s: float) -> None:
        self._ensure_open()
        epoch = self._epoch if self._transactional_id is not None else None
        log_append_topics = {name for name, meta in self._topics.items() if meta.log_append_time}
        self._cluster.append_produced(self._transactional_id, epoch, self._buffer, log_append_topics)
        # Only acknowledged records leave the buffer: a failed flush can be retried.
        self._buffer = []

    def identity(self) -> ProducerIdentity:
        """(producer id, epoch) from init_transactions, or after this producer's own abort (which
        bumps the epoch, as with transactions v2). An EndTxn sent by anyone else is not seen here:
        such a producer is done and must not be reused."""
        transactional_id, epoch = self._require_initialised()
        if self._producer_id is None:
            raise errors.InvalidTxnStateError(f"{transactional_id!r} has no producer id yet")
        return ProducerIdentity(self._producer_id, epoch)

    def abort_transaction(self, timeout_s: float) -> None:
        self._ensure_open()
        transactional_id, epoch = self._require_initialised()
        if not self._in_transaction:
            raise errors.InvalidTxnStateError(f"{transactional_id!r} has no transaction to abort")
        self._epoch = self._cluster.abort_own(transactional_id, epoch)
        self._in_transaction = False
        self._registered.clear()
        self._buffer = []

    def close(self) -> None:
        if self._buffer:
            logger.warning("fake Kafka: producer %r closed with %d unflushed records; they are dropped",
                           self._transactional_id, len(self._buffer))
        self._buffer = []
        self._closed = True


class FakeRecordReader:
    def __init__(self, cluster: Cluster, read_committed: bool) -> None:
        self._cluster = cluster
        self._read_committed = read_committed
        self._closed = False

    def read(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> Iterator[ConsumedRecord]:
        if self._closed:
            raise errors.KafkaConnectorError("the reader is closed")
        # Checked now rather than at the first next(), so that a bad range fails at the call.
        self._cluster.check_read(ranges, self._read_committed)
        return self._records(dict(ranges))

    def read_batches(self, ranges: Mapping[TopicPartition, tuple[int, int]],
                     include_headers: bool = True) -> Iterator[ConsumedBatch]:
        records = self.read(ranges)  # checks the ranges now, like read()
        return self._batches(records, include_headers)

    @staticmethod
    def _batches(records: Iterator[ConsumedRecord], include_headers: bool) -> Iterator[ConsumedBatch]:
        batch: ConsumedBatch | None = None
        for record in records:
            if batch is None or (batch.topic, batch.partition) != (record.topic, record.partition):
                if batch is not None:
                    yield batch
                batch = ConsumedBatch(record.topic, record.partition, headers=[] if include_headers else None)
            batch.offsets.append(record.offset)
            batch.keys.append(record.key)
            batch.values.append(record.value)
            batch.timestamps_ms.append(record.timestamp_ms)
            batch.timestamp_types.append(record.timestamp_type)
            if batch.headers is not None:
                batch.headers.append(record.headers)
        if batch is not None:
            yield batch

    def _records(self, ranges: dict[TopicPartition, tuple[int, int]]) -> Iterator[ConsumedRecord]:
        for tp in sorted(ranges):
            position, end = ranges[tp]
            while position < end:
                chunk = self._cluster.fetch(tp, position, end, self._read_committed)
                if not chunk:
                    break
                yield from chunk
                position = chunk[-1].offset + 1

    def close(self) -> None:
        self._closed = True


class FakeClusterAdmin:
    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def list_topics(self) -> list[str]:
        return self._cluster.list_topics()

    def partitions(self, topic: str) -> list[int]:
        return self._cluster.partitions(topic)

    def create_topic(self, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        self._cluster.create_topic(topic, partitions, config)

    def list_offsets(self, partitions: Iterable[TopicPartition], spec: OffsetSpec,
                     read_committed: bool = True) -> dict[TopicPartition, int]:
        return self._cluster.list_offsets(partitions, spec, read_committed)

    def broker_config(self, name: str) -> str | None:
        return self._cluster.broker_config(name)

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        self._cluster.commit_group_offsets(group_id, offsets)

    def delete_records_before(self, tp: TopicPartition, offset: int) -> None:
        """DeleteRecords: move the log start offset up to ``offset``, as retention would."""
        self._cluster.delete_records_before(tp, offset, as_request=True)

    def close(self) -> None:
        pass


class FakeTransactionControl:
    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def end_txn(self, transactional_id: str, identity: ProducerIdentity, commit: bool) -> None:
        self._cluster.end_txn(transactional_id, identity, commit)

    def end_txn_round(self, transactions: Sequence[tuple[str, ProducerIdentity]],
                         commit: bool) -> dict[str, errors.KafkaConnectorError | None]:
        # One EndTxn after another: the fake has no network round trip to save, and each keeps
        # its own injected faults.
        results: dict[str, errors.KafkaConnectorError | None] = {}
        for transactional_id, identity in transactions:
            try:
                self._cluster.end_txn(transactional_id, identity, commit)
                results[transactional_id] = None
            except errors.KafkaConnectorError as exc:
                results[transactional_id] = exc
        return results

    def list_open_transactions(self, transactional_id_prefix: str) -> list[OpenTransaction]:
        return self._cluster.list_open_transactions(transactional_id_prefix)

    def list_transactions(self, transactional_id_prefix: str) -> list[TransactionListing]:
        return self._cluster.list_transactions(transactional_id_prefix)

    def describe_transaction(self, transactional_id: str) -> TransactionListing | None:
        # The fake has no authorizer: every id may be described.
        found = [t for t in self._cluster.list_transactions(transactional_id) if t.transactional_id == transactional_id]
        return found[0] if found else None

    def close(self) -> None:
        pass
