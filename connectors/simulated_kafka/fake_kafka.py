"""The simulated cluster as clients see it, selected with ``fake-kafka://<state file>``: what
``kafka-eos demo`` runs on when no broker is found (labelled as simulated Kafka), and the unit
tests' Kafka. It is a product part, beside the real clients, because a Spark job on it needs it
in every process: Spark's Python workers on the executors, which only see the bootstrap address,
find it through the entry point ``fake-kafka`` of ``pyspark_kafka_eos.kafka_clients``
(``connectors/kafka/clients/factory.py``), as the driver does.

Tests steer the cluster through ``FakeKafkaClients``: ``advance_time``, ``inject_errors``,
``set_available``, ``configure``, ``delete_records_before``, ``committed_group_offsets`` and
``log_entries``. Timeouts are enforced lazily, at the start of every operation that reaches the
broker, against a clock that tests move with ``advance_time`` (shared by all processes).
"""

from __future__ import annotations

import os
from typing import Mapping

from connectors.kafka.clients import TopicPartition
from connectors.simulated_kafka.clients import FakeClusterAdmin, FakeProducer, FakeRecordReader, FakeTransactionControl
from connectors.simulated_kafka.records import LogEntry
from connectors.simulated_kafka.store import INJECTABLE_ERROR_NAMES, OPERATIONS
from connectors.simulated_kafka.transactions import Cluster
from twophase.errors import InvalidValueError

#: Bootstrap addresses ``fake-kafka://<state file>`` select this cluster (see ``pyproject.toml``).
FAKE_SCHEME = "fake-kafka://"


class FakeKafkaClients:
    """``KafkaClients`` of the fake cluster stored at ``path``, plus the controls tests need.

    Every instance opened on the same path, in any process, sees the same cluster.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.bootstrap_servers = FAKE_SCHEME + self.path
        self._cluster = Cluster(self.path)

    def __reduce__(self) -> tuple[type[FakeKafkaClients], tuple[str]]:
        # Pickled to Spark executors: only the path travels; each process opens its own connection.
        return (FakeKafkaClients, (self.path,))

    def producer(self, transactional_id: str | None, config: Mapping[str, str] | None = None) -> FakeProducer:
        return FakeProducer(self._cluster, transactional_id, config or {})

    def reader(self, read_committed: bool = True, config: Mapping[str, str] | None = None) -> FakeRecordReader:
        return FakeRecordReader(self._cluster, read_committed)

    def admin(self) -> FakeClusterAdmin:
        return FakeClusterAdmin(self._cluster)

    def txn_control(self) -> FakeTransactionControl:
        return FakeTransactionControl(self._cluster)

    # -- controls for tests (they work while the broker is "down") -------------------------------

    def now_ms(self) -> int:
        """The cluster's clock: wall time plus every advance_time()."""
        with self._cluster.transaction(None) as (_conn, now):
            return now

    def advance_time(self, ms: int) -> None:
        """Move the cluster's clock forward (for every process), e.g. past transaction timeouts."""
        if ms < 0:
            raise InvalidValueError("the clock only moves forward")
        with self._cluster.transaction(None) as (conn, _now):
            conn.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) + ? WHERE name = 'clock_offset_ms'", (ms,)
            )

    def inject_errors(self, operation: str, error_name: str, count: int = 1) -> None:
        """Make the next ``count`` calls of ``operation`` fail with the Kafka error ``error_name``
        before doing anything. Injections for one operation are used up in the order given."""
        if operation not in OPERATIONS:
            raise InvalidValueError(f"unknown operation {operation!r}; one of {sorted(OPERATIONS)}")
        if error_name not in INJECTABLE_ERROR_NAMES:
            raise InvalidValueError(f"unknown Kafka error {error_name!r}; one of {sorted(INJECTABLE_ERROR_NAMES)}")
        if count < 1:
            raise InvalidValueError("count must be at least 1")
        with self._cluster.transaction(None) as (conn, _now):
            conn.execute(
                "INSERT INTO injected_errors (operation, error_name, remaining) VALUES (?, ?, ?)",
                (operation, error_name, count),
            )

    def set_available(self, available: bool) -> None:
        """Take the broker down (every request fails with BrokerUnavailableError) or bring it back.
        The clock keeps running meanwhile, so transactions can time out while it is down."""
        with self._cluster.transaction(None) as (conn, _now):
            conn.execute("UPDATE meta SET value = ? WHERE name = 'available'", ("1" if available else "0",))

    def configure(self, **settings: object) -> None:
        """Set broker configuration, e.g. ``configure(**{"transaction.max.timeout.ms": 60000})``."""
        with self._cluster.transaction(None) as (conn, _now):
            conn.executemany(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
                ((f"config:{name}", str(value)) for name, value in settings.items()),
            )

    def delete_records_before(self, tp: TopicPartition, offset: int) -> None:
        """Simulate retention: the log of ``tp`` starts at ``offset`` from now on."""
        self._cluster.delete_records_before(tp, offset, as_request=False)

    def committed_group_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        with self._cluster.transaction(None) as (conn, _now):
            rows = conn.execute(
                "SELECT topic, partition_id, committed_offset FROM group_offsets WHERE group_id = ?",
                (group_id,),
            ).fetchall()
        return {TopicPartition(topic, partition): offset for topic, partition, offset in rows}

    def log_entries(self, tp: TopicPartition) -> list[LogEntry]:
        """The raw log of a partition, markers and undecided records included. Pure inspection:
        it does not apply transaction timeouts."""
        with self._cluster.transaction(None) as (conn, _now):
            rows = conn.execute(
                "SELECT r.record_offset, r.kind, t.transactional_id, t.producer_id, t.epoch, t.state,"
                " r.record_key, r.record_value, r.timestamp_ms FROM records r"
                " LEFT JOIN transactions t ON t.id = r.txn"
                " WHERE r.topic = ? AND r.partition_id = ? ORDER BY r.record_offset",
                (tp.topic, tp.partition),
            ).fetchall()
        return [LogEntry(*row) for row in rows]
