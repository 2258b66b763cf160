"""The seam between the Kafka connectors and the Kafka clients behind them.

The source and the sink speak only to these small typed interfaces; this module defines them and
imports no implementation. ``factory.clients_for`` picks the implementation for a bootstrap
address: ``confluent_clients.RealKafkaClients`` (librdkafka for the data path, kafka-python in
``clients/_kafka_python/transaction_control.py`` for the transaction control plane that librdkafka lacks), or one registered for
an address scheme, such as the kit's embedded test cluster (``fake-kafka://<file>``).

Errors crossing the seam are the types of ``connectors/kafka/kafka_errors.py``, never a client library's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Literal, Mapping, Protocol, Sequence, runtime_checkable

from connectors.kafka.kafka_errors import KafkaConnectorError

Headers = Sequence[tuple[str, bytes | None]]


# librdkafka / Java client timestamp types, as Spark's Kafka source exposes them.
TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


@dataclass(frozen=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    timestamp_type: int = TIMESTAMP_CREATE_TIME
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass
class ConsumedBatch:
    """Consecutive visible records of one partition, column by column.

    Readers hand records to Spark this way: one Python object per record costs more than
    everything else a record goes through on its way to Arrow."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    timestamps_ms: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    #: Per record, its headers; None when the reader was not asked for headers.
    headers: list[tuple[tuple[str, bytes | None], ...]] | None = None

    def __len__(self) -> int:
        return len(self.offsets)

    def records(self) -> Iterator[ConsumedRecord]:
        headers = self.headers if self.headers is not None else [()] * len(self.offsets)
        for offset, key, value, ts, ts_type, hs in zip(self.offsets, self.keys, self.values,
                                                       self.timestamps_ms, self.timestamp_types, headers):
            yield ConsumedRecord(self.topic, self.partition, offset, key, value, ts, ts_type, hs)


@dataclass(frozen=True)
class ProduceBatch:
    """Records to produce, column by column: record i is ``values[i]``, ``keys[i]``, ...

    A column left None is None for every record. The topic of record i is ``topics[i]`` when
    there is a topics column, else ``topic``. Types are checked by whoever builds the batch (the
    Spark sink checks its Arrow schema once per batch), not per record."""

    topic: str | None
    values: Sequence[bytes | str | None]
    keys: Sequence[bytes | str | None] | None = None
    topics: Sequence[str] | None = None
    partitions: Sequence[int | None] | None = None
    headers: Sequence[Headers | None] | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class ProducerIdentity:
    """What any process needs to end a transaction another process opened (EndTxn)."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction the broker reports as not yet ended (ListTransactions + DescribeTransactions)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    start_time_ms: int
    timeout_ms: int
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)


@dataclass(frozen=True)
class TransactionListing:
    """A transactional id the broker's transaction coordinators hold state for (ListTransactions),
    in whatever state: ``Ongoing``, ``CompleteCommit``, ``Empty`` ... Each one costs the broker
    memory and ``__transaction_state`` space until ``transactional.id.expiration.ms``."""

    transactional_id: str
    producer_id: int
    state: str


OffsetSpec = Literal["earliest", "latest"] | int  # an int is a timestamp in ms (offsetsForTimes)


class ProducerClient(Protocol):
    """One producer. Transactional when created with a transactional id."""

    def init_transactions(self, timeout_s: float) -> ProducerIdentity:
        """Fence every older producer of this transactional id, abort its open transaction, bump the
        epoch. Returns the new identity."""

    def begin_transaction(self) -> None: ...

    def look_up(self, topic: str, timeout_s: float) -> None:
        """Look ``topic`` up, which connects the client to the brokers. Registers nothing on them:
        a producer that goes no further leaves no transactional id behind."""

    def start_transaction(self, timeout_s: float, topic: str | None = None) -> None:
        """``init_transactions`` then ``begin_transaction``, without waiting for the identity:
        ``identity()`` gives it later (at pre-commit), when it is known without a wait.
        ``topic``: the topic the transaction will write to, looked up first (``look_up``; a
        client may use the lookup to connect before it asks for its transaction coordinator)."""

    def produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Queue one record. May raise RecordTooLargeError or UnknownTopicError at once."""

    def produce_batch(self, batch: ProduceBatch) -> None:
        """Queue every record of ``batch``, in order, as ``produce`` would one by one."""

    def flush(self, timeout_s: float) -> None:
        """Wait until every queued record is acknowledged; raise the first delivery error."""

    def identity(self) -> ProducerIdentity:
        """The current (producer id, epoch) of this transactional producer."""

    def abort_transaction(self, timeout_s: float) -> None: ...

    def close(self) -> None:
        """Release the client. An open transaction is left open on the broker (it is NOT aborted)."""


class RecordReader(Protocol):
    """Reads explicit offset ranges, isolation level fixed at creation."""

    def read(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> Iterator[ConsumedRecord]:
        """Yield the visible records with start <= offset < end of every range.

        Offsets of control markers and (under read_committed) aborted records are skipped, so the
        yielded offsets may have gaps; the reader still stops at ``end``. ``end`` must not exceed
        the partition's end for the reader's isolation level (the LSO under read_committed)."""

    def read_batches(
        self, ranges: Mapping[TopicPartition, tuple[int, int]], include_headers: bool = True
    ) -> Iterator[ConsumedBatch]:
        """The records ``read`` yields, in the same order, as column batches of one partition."""

    def close(self) -> None: ...


class ClusterAdmin(Protocol):
    def list_topics(self) -> list[str]: ...

    def partitions(self, topic: str) -> list[int]:
        """Partition ids of ``topic``; raises UnknownTopicError."""

    def create_topic(
        self, topic: str, partitions: int, config: Mapping[str, str] | None = None
    ) -> None: ...

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: OffsetSpec,
        read_committed: bool = True,
    ) -> dict[TopicPartition, int]:
        """earliest: log start; latest: LSO under read_committed, else high watermark; an int
        timestamp: first offset with timestamp >= it, or the latest offset when there is none."""

    def broker_config(self, name: str) -> str | None:
        """A broker configuration value (DescribeConfigs), or None when the broker does not say."""

    def commit_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit offsets to a consumer group, for lag monitoring only."""

    def close(self) -> None: ...


class TransactionControl(Protocol):
    """Ends and finds transactions that other processes opened. One instance may be used by
    several threads at once (parallel commits)."""

    def end_txn(
        self, transactional_id: str, identity: ProducerIdentity, commit: bool
    ) -> None:
        """Send EndTxn. Repeating the same request after success is not an error."""

    def end_txn_round(
        self, transactions: Sequence[tuple[str, ProducerIdentity]], commit: bool
    ) -> dict[str, KafkaConnectorError | None]:
        """EndTxn for many transactions at once. Per transactional id: None when it ended, else
        the error ``end_txn`` would have raised for it. Raises nothing itself."""

    def list_open_transactions(self, transactional_id_prefix: str) -> list[OpenTransaction]:
        """Every transaction whose id starts with the prefix and that is not ended."""

    def list_transactions(self, transactional_id_prefix: str) -> list[TransactionListing]:
        """Every transactional id starting with the prefix that the broker holds state for, in any
        state, sorted by id."""

    def describe_transaction(self, transactional_id: str) -> TransactionListing | None:
        """The state the broker holds for one transactional id (DescribeTransactions), or None.
        Raises KafkaAuthorizationError when the principal may not DESCRIBE it: the listings above
        leave out, silently, every id the principal may not DESCRIBE."""

    def close(self) -> None: ...


class KafkaClients(Protocol):
    """Factory of clients for one cluster."""

    bootstrap_servers: str

    def producer(
        self, transactional_id: str | None, config: Mapping[str, str] | None = None
    ) -> ProducerClient: ...

    def reader(
        self, read_committed: bool = True, config: Mapping[str, str] | None = None
    ) -> RecordReader: ...

    def admin(self) -> ClusterAdmin: ...

    def txn_control(self) -> TransactionControl: ...


@runtime_checkable
class SimulatedCluster(KafkaClients, Protocol):
    """Clients of an embedded test cluster registered for an address scheme, which can also
    simulate a broker outage: the ``kafka-eos`` demo and replay take its broker down and back."""

    #: The cluster's state file.
    path: str

    def set_available(self, available: bool) -> None: ...
