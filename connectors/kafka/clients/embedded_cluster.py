"""The kit's embedded Kafka cluster, selected with ``fake-kafka://<state file>``: what
``kafka-eos demo`` runs on when no broker is found (labelled as simulated Kafka), and the unit
tests' Kafka. It is a product part, beside the real clients, because a Spark job on it needs it
in every process: Spark's Python workers on the executors, which only see the bootstrap address,
find it through the entry point ``fake-kafka`` of ``pyspark_kafka_eos.kafka_clients``
(``factory.py``), as the driver does.

Unit and crash tests need a Kafka that several processes share (Spark runs its Python workers as
separate processes, and crash tests kill them with ``os._exit``), so the whole cluster lives in
one SQLite file: WAL mode, a busy timeout, and every operation one short SQL transaction
(``BEGIN IMMEDIATE`` for writes). A producer keeps its records in memory until ``flush()``, like a
real client whose records are not durable before they are acknowledged.

A fake that is not faithful is worse than none (librdkafka's mock cluster hands aborted records to
read_committed consumers), so the semantics follow Apache Kafka 4.0 with transactions v2, as
measured and written down in ``design/exactly-once-protocol.md``:

- each partition is a log with consecutive offsets; COMMIT and ABORT control markers take an
  offset, so consumers see gaps (aborted 5, committed 5, open 3 -> 0-4, 6-10, 12-14);
- read_uncommitted reads every data record up to the high watermark; read_committed reads
  non-transactional and committed records only, and no further than the last stable offset (LSO),
  the first offset of the earliest open transaction of the partition;
- ``list_offsets``: earliest = log start offset, latest = LSO (read_committed) or high watermark,
  a timestamp = first offset whose timestamp is >= it (a commit or abort marker included, as
  Kafka's offsetsForTimes searches every batch), else latest;
- ``init_transactions`` allocates a producer id once per transactional id, aborts the id's open
  transaction, bumps the epoch and fences every older producer of the id (PRODUCER_FENCED);
- EndTxn may come from any process that knows (transactional id, producer id, epoch); it bumps
  the epoch (transactions v2); resending the same EndTxn succeeds, the opposite result fails with
  INVALID_TXN_STATE, an epoch superseded by init or by a timeout fails with PRODUCER_FENCED,
  another producer id than the id's with INVALID_PRODUCER_ID_MAPPING;
- a transaction open longer than ``transaction.timeout.ms`` is aborted by the coordinator, which
  bumps the epoch and so fences its producer; ``init_transactions`` refuses a timeout above the
  broker's ``transaction.max.timeout.ms`` (INVALID_TRANSACTION_TIMEOUT);
- closing a producer leaves its open transaction open;
- a transaction registers a partition when the first record for it is produced (AddPartitionsToTxn)
  and its clock starts then; its records enter the log at ``flush()``; markers go to every
  registered partition;
- topics are never auto-created, and creating an existing one is no error; records above
  ``message.max.bytes`` are refused at ``produce()``;
- EndTxn(commit) of a transaction nothing was produced in is INVALID_TXN_STATE, EndTxn(abort) of
  it is accepted (Kafka 4.4, transactions v2); a read from beyond the log end is
  OFFSET_OUT_OF_RANGE.

Tests steer the cluster through ``FakeKafkaClients``: ``advance_time``, ``inject_errors``,
``set_available``, ``configure``, ``delete_records_before``, ``committed_group_offsets`` and
``log_entries``. Timeouts are enforced lazily, at the start of every operation that reaches the
broker, against a clock that tests move with ``advance_time`` (shared by all processes).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

from connectors.kafka import kafka_errors as errors
from connectors.kafka.clients import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
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
from connectors.kafka.clients.error_table import broker_error_names, kafka_error
from connectors.kafka.clients.murmur2 import java_partition
from twophase.errors import InvalidTypeError, InvalidValueError

logger = logging.getLogger(__name__)

#: Bootstrap addresses ``fake-kafka://<state file>`` select this cluster (see ``pyproject.toml``).
FAKE_SCHEME = "fake-kafka://"

DEFAULT_BROKER_CONFIG: dict[str, str] = {
    "transaction.max.timeout.ms": "900000",
    "message.max.bytes": "1048588",
}
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000

# Operations that reach the broker, by the names inject_errors() accepts.
OPERATIONS: frozenset[str] = frozenset(
    {
        "init_transactions",
        "produce",
        "flush",
        "abort_transaction",
        "end_transaction",
        "list_open_transactions",
        "list_transactions",
        "read",
        "list_offsets",
        "list_topics",
        "partitions",
        "create_topic",
        "broker_config",
        "commit_group_offsets",
        "delete_records",
    }
)

#: The Kafka errors inject_errors() accepts: the broker errors of the kit's error table, and
#: BROKER_UNAVAILABLE (no broker answers).
INJECTABLE_ERROR_NAMES: frozenset[str] = broker_error_names() | {"BROKER_UNAVAILABLE"}

_READ_CHUNK = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY, partition_count INTEGER NOT NULL, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS partition_logs (
    topic TEXT NOT NULL, partition_id INTEGER NOT NULL,
    log_start INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition_id));
CREATE TABLE IF NOT EXISTS records (
    topic TEXT NOT NULL, partition_id INTEGER NOT NULL, record_offset INTEGER NOT NULL,
    kind TEXT NOT NULL, txn INTEGER, record_key BLOB, record_value BLOB, headers TEXT,
    timestamp_ms INTEGER NOT NULL, timestamp_type INTEGER NOT NULL,
    PRIMARY KEY (topic, partition_id, record_offset));
CREATE TABLE IF NOT EXISTS transactional_ids (
    transactional_id TEXT PRIMARY KEY, producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL, fence_epoch INTEGER NOT NULL, timeout_ms INTEGER NOT NULL,
    current_txn INTEGER, last_ended_epoch INTEGER, last_ended_commit INTEGER);
CREATE TABLE IF NOT EXISTS transactions (
    id INTEGER PRIMARY KEY, transactional_id TEXT NOT NULL, producer_id INTEGER NOT NULL,
    epoch INTEGER NOT NULL, state TEXT NOT NULL, start_time_ms INTEGER NOT NULL,
    timeout_ms INTEGER NOT NULL, end_time_ms INTEGER);
CREATE INDEX IF NOT EXISTS transactions_by_state ON transactions (state);
CREATE TABLE IF NOT EXISTS transaction_partitions (
    txn INTEGER NOT NULL, topic TEXT NOT NULL, partition_id INTEGER NOT NULL,
    first_offset INTEGER, PRIMARY KEY (txn, topic, partition_id));
CREATE TABLE IF NOT EXISTS injected_errors (
    id INTEGER PRIMARY KEY, operation TEXT NOT NULL, error_name TEXT NOT NULL,
    remaining INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS group_offsets (
    group_id TEXT NOT NULL, topic TEXT NOT NULL, partition_id INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL, PRIMARY KEY (group_id, topic, partition_id));
"""

_ONGOING, _COMMITTED, _ABORTED = "ongoing", "committed", "aborted"

# Connections that a forked child inherited. SQLite connections must not be used across fork(),
# and closing one in the child could release the parent's locks, so they are kept referenced.
_inherited_connections: list[sqlite3.Connection] = []


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


@dataclass(frozen=True)
class _TopicMeta:
    partition_count: int
    log_append_time: bool


@dataclass(frozen=True)
class _Snapshot:
    """What a producer must know before queueing a record, read without taking the write lock."""

    now_ms: int
    message_max_bytes: int
    error_injected: bool
    earliest_deadline_ms: int | None
    epoch: int | None
    fence_epoch: int | None

    def needs_broker(self, producer_epoch: int | None) -> bool:
        """Whether something (an injected error, an expired transaction, a fence, an EndTxn from
        elsewhere) must be resolved under the write lock before the record may be queued."""
        if self.error_injected:
            return True
        if self.earliest_deadline_ms is not None and self.earliest_deadline_ms < self.now_ms:
            return True
        if producer_epoch is None:
            return False
        return self.epoch != producer_epoch or (self.fence_epoch or 0) > producer_epoch


@dataclass(slots=True)
class _PendingRecord:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: str | None
    timestamp_ms: int


def _as_bytes(data: object, what: str) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        # confluent-kafka accepts str and sends it UTF-8 encoded.
        return data.encode("utf-8")
    raise InvalidTypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


def _encode_headers(headers: Headers | Mapping[str, bytes | None] | None) -> tuple[str | None, int]:
    """Headers as stored (JSON, values hex-encoded) and their size in bytes."""
    if not headers:
        return None, 0
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs: list[list[str | None]] = []
    size = 0
    for name, raw in items:
        value = _as_bytes(raw, f"header {name!r}")
        size += len(name.encode("utf-8")) + (len(value) if value is not None else 0)
        pairs.append([name, None if value is None else value.hex()])
    return json.dumps(pairs), size


def _decode_headers(stored: str | None) -> tuple[tuple[str, bytes | None], ...]:
    if stored is None:
        return ()
    return tuple((name, None if hexed is None else bytes.fromhex(hexed)) for name, hexed in json.loads(stored))


def _injected_error(error_name: str, operation: str) -> errors.KafkaConnectorError:
    message = f"{error_name} (injected into {operation})"
    if error_name == "BROKER_UNAVAILABLE":
        return errors.BrokerUnavailableError(message, code=error_name)
    return kafka_error(error_name, error_name, message)


class _Cluster:
    """The broker: every method is one SQL transaction on the shared state file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._create_schema()

    # -- storage ---------------------------------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            return conn
        if conn is not None:
            _inherited_connections.append(conn)
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 60000")
        self._enable_wal(conn)
        # NORMAL is durable across a process crash in WAL mode; only power loss could lose commits.
        conn.execute("PRAGMA synchronous = NORMAL")
        self._local.conn = conn
        self._local.pid = os.getpid()
        return conn

    @staticmethod
    def _enable_wal(conn: sqlite3.Connection) -> None:
        # Switching a fresh file to WAL needs an exclusive lock, which SQLite does not wait for
        # when several processes open the file at the same moment.
        for attempt in range(100):
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 99:
                    raise
                time.sleep(0.05)

    def _create_schema(self) -> None:
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            defaults = {"clock_offset_ms": "0", "available": "1", "next_producer_id": "1000"}
            defaults.update({f"config:{name}": value for name, value in DEFAULT_BROKER_CONFIG.items()})
            conn.executemany("INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)", defaults.items())
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def transaction(self, operation: str | None) -> Iterator[tuple[sqlite3.Connection, int]]:
        """One write transaction, yielding (connection, now in ms).

        With an ``operation`` it is a broker request: it fails while the broker is down or when an
        error is injected, before doing anything, and it first aborts expired transactions.
        Connector errors are raised before an operation writes anything, so on such an error the
        transaction still commits: the consumed injection and expired transactions must stick.
        """
        conn = self.connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = self._now(conn)
            if operation is not None:
                self._gate(conn, operation)
                self._expire_transactions(conn, now)
            yield conn, now
        except errors.KafkaConnectorError:
            conn.execute("COMMIT")
            raise
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        else:
            conn.execute("COMMIT")

    @staticmethod
    def _meta(conn: sqlite3.Connection, name: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def _now(self, conn: sqlite3.Connection) -> int:
        return int(time.time() * 1000) + int(self._meta(conn, "clock_offset_ms") or 0)

    def _gate(self, conn: sqlite3.Connection, operation: str) -> None:
        if self._meta(conn, "available") != "1":
            raise errors.BrokerUnavailableError(
                f"fake Kafka broker at {self.path} is unavailable ({operation})", code="BROKER_UNAVAILABLE"
            )
        row = conn.execute(
            "SELECT id, error_name FROM injected_errors WHERE operation = ? AND remaining > 0"
            " ORDER BY id LIMIT 1",
            (operation,),
        ).fetchone()
        if row is not None:
            conn.execute("UPDATE injected_errors SET remaining = remaining - 1 WHERE id = ?", (row[0],))
            raise _injected_error(row[1], operation)

    # -- logs and transactions -------------------------------------------------------------------

    def _expire_transactions(self, conn: sqlite3.Connection, now: int) -> None:
        expired = conn.execute(
            "SELECT id, transactional_id, epoch, timeout_ms FROM transactions"
            " WHERE state = ? AND start_time_ms + timeout_ms < ?",
            (_ONGOING, now),
        ).fetchall()
        for txn_id, transactional_id, epoch, timeout_ms in expired:
            logger.info(
                "fake Kafka: transaction of %r (epoch %d) exceeded transaction.timeout.ms=%d; aborting it",
                transactional_id, epoch, timeout_ms,
            )
            self._complete(conn, txn_id, commit=False, now=now)
            # The coordinator's abort bumps the epoch and fences the producer, and since the client
            # did not ask for it, no EndTxn retry is recognised afterwards.
            conn.execute(
                "UPDATE transactional_ids SET epoch = epoch + 1, fence_epoch = epoch + 1,"
                " current_txn = NULL, last_ended_epoch = NULL, last_ended_commit = NULL"
                " WHERE transactional_id = ?",
                (transactional_id,),
            )

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

    def _complete(self, conn: sqlite3.Connection, txn_id: int, commit: bool, now: int) -> None:
        """Write the COMMIT or ABORT marker to every partition the transaction registered."""
        kind = "commit" if commit else "abort"
        partitions = conn.execute(
            "SELECT topic, partition_id FROM transaction_partitions WHERE txn = ? ORDER BY topic, partition_id",
            (txn_id,),
        ).fetchall()
        for topic, partition in partitions:
            self._append(conn, topic, partition, [(kind, txn_id, None, None, None, now, TIMESTAMP_CREATE_TIME)])
        conn.execute(
            "UPDATE transactions SET state = ?, end_time_ms = ? WHERE id = ?",
            (_COMMITTED if commit else _ABORTED, now, txn_id),
        )

    def _end(self, conn: sqlite3.Connection, transactional_id: str, epoch: int, txn_id: int | None,
             commit: bool, now: int) -> None:
        """EndTxn accepted for the current epoch: markers (if anything was produced), then the
        transactions-v2 epoch bump, remembering the result so that a resent EndTxn succeeds."""
        if txn_id is not None:
            self._complete(conn, txn_id, commit, now)
        conn.execute(
            "UPDATE transactional_ids SET epoch = epoch + 1, current_txn = NULL,"
            " last_ended_epoch = ?, last_ended_commit = ? WHERE transactional_id = ?",
            (epoch, int(commit), transactional_id),
        )
        logger.debug("fake Kafka: %s transaction of %r (epoch %d)",
                     "committed" if commit else "aborted", transactional_id, epoch)

    @staticmethod
    def _require_current(conn: sqlite3.Connection, transactional_id: str, producer_epoch: int) -> int | None:
        """The open transaction of a producer that is still the current one for its id."""
        row = conn.execute(
            "SELECT epoch, fence_epoch, current_txn FROM transactional_ids WHERE transactional_id = ?",
            (transactional_id,),
        ).fetchone()
        if row is None:
            raise errors.TransactionalIdNotFoundError(f"transactional id {transactional_id!r} is unknown")
        epoch, fence_epoch, current_txn = row
        if producer_epoch < fence_epoch:
            raise errors.ProducerFencedError(
                f"PRODUCER_FENCED: producer of {transactional_id!r} with epoch {producer_epoch} was fenced"
                f" (current epoch {epoch}): a newer producer initialised the id or its transaction timed"
                " out, and its open transaction was aborted"
            )
        if producer_epoch != epoch:
            raise errors.InvalidTxnStateError(
                f"the transaction of {transactional_id!r} with epoch {producer_epoch} was already ended"
                " by EndTxn; create a new producer for the next transaction"
            )
        return current_txn

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
            (_ONGOING, tp.topic, tp.partition),
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

    # -- producer requests -----------------------------------------------------------------------

    def snapshot(self, operation: str, transactional_id: str | None) -> _Snapshot:
        """A read-only look at the broker for one produce() call, cheap enough for every record."""
        conn = self.connection()
        row = conn.execute(
            "SELECT (SELECT value FROM meta WHERE name = 'available'),"
            " (SELECT value FROM meta WHERE name = 'clock_offset_ms'),"
            " (SELECT value FROM meta WHERE name = 'config:message.max.bytes'),"
            " EXISTS (SELECT 1 FROM injected_errors WHERE operation = ? AND remaining > 0),"
            " (SELECT MIN(start_time_ms + timeout_ms) FROM transactions WHERE state = 'ongoing'),"
            " (SELECT epoch FROM transactional_ids WHERE transactional_id = ?),"
            " (SELECT fence_epoch FROM transactional_ids WHERE transactional_id = ?)",
            (operation, transactional_id, transactional_id),
        ).fetchone()
        available, clock_offset, max_bytes, injected, deadline, epoch, fence_epoch = row
        if str(available) != "1":
            raise errors.BrokerUnavailableError(
                f"fake Kafka broker at {self.path} is unavailable ({operation})", code="BROKER_UNAVAILABLE"
            )
        return _Snapshot(
            now_ms=int(time.time() * 1000) + int(clock_offset),
            message_max_bytes=int(max_bytes),
            error_injected=bool(injected),
            earliest_deadline_ms=deadline,
            epoch=epoch,
            fence_epoch=fence_epoch,
        )

    def topic_metadata(self, topic: str) -> _TopicMeta:
        row = self.connection().execute(
            "SELECT partition_count, config FROM topics WHERE name = ?", (topic,)
        ).fetchone()
        if row is None:
            raise errors.UnknownTopicError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic!r} does not exist")
        config = json.loads(row[1])
        return _TopicMeta(row[0], config.get("message.timestamp.type") == "LogAppendTime")

    def init_transactions(self, transactional_id: str, timeout_ms: int) -> ProducerIdentity:
        with self.transaction("init_transactions") as (conn, now):
            max_timeout = int(self._meta(conn, "config:transaction.max.timeout.ms") or 0)
            if timeout_ms > max_timeout:
                raise errors.TransactionTimeoutRefusedError(
                    f"INVALID_TRANSACTION_TIMEOUT: transaction.timeout.ms={timeout_ms} of {transactional_id!r}"
                    f" exceeds the broker's transaction.max.timeout.ms={max_timeout}"
                )
            row = conn.execute(
                "SELECT producer_id, epoch, current_txn FROM transactional_ids WHERE transactional_id = ?",
                (transactional_id,),
            ).fetchone()
            if row is None:
                producer_id, epoch = int(self._meta(conn, "next_producer_id") or 0), 0
                conn.execute("UPDATE meta SET value = ? WHERE name = 'next_producer_id'", (str(producer_id + 1),))
                conn.execute(
                    "INSERT INTO transactional_ids (transactional_id, producer_id, epoch, fence_epoch, timeout_ms)"
                    " VALUES (?, ?, 0, 0, ?)",
                    (transactional_id, producer_id, timeout_ms),
                )
            else:
                producer_id, old_epoch, current_txn = row
                if current_txn is not None:
                    logger.info("fake Kafka: init_transactions(%r) aborts the open transaction of epoch %d",
                                transactional_id, old_epoch)
                    self._complete(conn, current_txn, commit=False, now=now)
                epoch = old_epoch + 1
                conn.execute(
                    "UPDATE transactional_ids SET epoch = ?, fence_epoch = ?, timeout_ms = ?, current_txn = NULL,"
                    " last_ended_epoch = NULL, last_ended_commit = NULL WHERE transactional_id = ?",
                    (epoch, epoch, timeout_ms, transactional_id),
                )
            return ProducerIdentity(producer_id, epoch)

    def prepare_produce(self, transactional_id: str | None, producer_epoch: int | None, timeout_ms: int,
                        register: TopicPartition | None) -> None:
        """The produce() path under the write lock: resolve what the snapshot flagged and, for a
        partition new to the transaction, add it (AddPartitionsToTxn), which starts the
        transaction's clock on its first partition."""
        with self.transaction("produce") as (conn, now):
            if transactional_id is None or producer_epoch is None:
                return
            current_txn = self._require_current(conn, transactional_id, producer_epoch)
            if register is None:
                return
            if current_txn is None:
                (producer_id,) = conn.execute(
                    "SELECT producer_id FROM transactional_ids WHERE transactional_id = ?", (transactional_id,)
                ).fetchone()
                current_txn = conn.execute(
                    "INSERT INTO transactions (transactional_id, producer_id, epoch, state, start_time_ms, timeout_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (transactional_id, producer_id, producer_epoch, _ONGOING, now, timeout_ms),
                ).lastrowid
                conn.execute(
                    "UPDATE transactional_ids SET current_txn = ? WHERE transactional_id = ?",
                    (current_txn, transactional_id),
                )
            conn.execute(
                "INSERT OR IGNORE INTO transaction_partitions (txn, topic, partition_id) VALUES (?, ?, ?)",
                (current_txn, register.topic, register.partition),
            )

    def append_produced(self, transactional_id: str | None, producer_epoch: int | None,
                        records: list[_PendingRecord], log_append_topics: set[str]) -> None:
        with self.transaction("flush") as (conn, now):
            txn_id: int | None = None
            if transactional_id is not None and producer_epoch is not None:
                txn_id = self._require_current(conn, transactional_id, producer_epoch)
                if records and txn_id is None:
                    raise errors.InvalidTxnStateError(
                        f"records of {transactional_id!r} were produced outside of a registered transaction"
                    )
            by_partition: dict[tuple[str, int], list[_PendingRecord]] = {}
            for record in records:
                by_partition.setdefault((record.topic, record.partition), []).append(record)
            for (topic, partition), batch in by_partition.items():
                log_append = topic in log_append_topics
                first = self._append(conn, topic, partition, [
                    ("data", txn_id, r.key, r.value, r.headers,
                     now if log_append else r.timestamp_ms,
                     TIMESTAMP_LOG_APPEND_TIME if log_append else TIMESTAMP_CREATE_TIME)
                    for r in batch
                ])
                if txn_id is not None:
                    conn.execute(
                        "UPDATE transaction_partitions SET first_offset = ?"
                        " WHERE txn = ? AND topic = ? AND partition_id = ? AND first_offset IS NULL",
                        (first, txn_id, topic, partition),
                    )

    def abort_own(self, transactional_id: str, producer_epoch: int) -> int:
        """A producer aborting its own transaction; returns its epoch afterwards."""
        with self.transaction("abort_transaction") as (conn, now):
            txn_id = self._require_current(conn, transactional_id, producer_epoch)
            if txn_id is None:
                # Nothing was produced, so the broker never heard of the transaction: no EndTxn.
                return producer_epoch
            self._end(conn, transactional_id, producer_epoch, txn_id, commit=False, now=now)
            return producer_epoch + 1

    # -- transaction control ---------------------------------------------------------------------

    def end_transaction(self, transactional_id: str, identity: ProducerIdentity, commit: bool) -> None:
        with self.transaction("end_transaction") as (conn, now):
            row = conn.execute(
                "SELECT producer_id, epoch, current_txn, last_ended_epoch, last_ended_commit"
                " FROM transactional_ids WHERE transactional_id = ?",
                (transactional_id,),
            ).fetchone()
            if row is None:
                raise errors.TransactionalIdNotFoundError(
                    f"TRANSACTIONAL_ID_NOT_FOUND: the broker has no state for {transactional_id!r}"
                )
            producer_id, epoch, current_txn, last_ended_epoch, last_ended_commit = row
            result = "commit" if commit else "abort"
            if identity.producer_id != producer_id:
                # Kafka's INVALID_PRODUCER_ID_MAPPING, which the seam's error table (like the real
                # clients) turns into TransactionalIdNotFoundError.
                raise kafka_error(
                    "INVALID_PRODUCER_ID_MAPPING", "INVALID_PRODUCER_ID_MAPPING",
                    f"INVALID_PRODUCER_ID_MAPPING: {transactional_id!r} has producer id {producer_id},"
                    f" not {identity.producer_id}",
                )
            if identity.producer_epoch == epoch:
                if current_txn is None and commit:
                    # No partition was ever added: the broker never saw the transaction begin (its
                    # state is Empty), so there is nothing to commit: INVALID_TXN_STATE. An abort
                    # from Empty is accepted (Kafka 4.4 with transactions v2, measured by
                    # kafka_testkit/kafka_conformance.py): no marker, the epoch is bumped, and a resent
                    # abort succeeds. (Kafka 4.0 and the classic protocol refused it too.)
                    raise errors.InvalidTxnStateError(
                        f"INVALID_TXN_STATE: EndTxn({result}) of {transactional_id!r} (epoch {epoch}):"
                        " no transaction is ongoing (nothing was produced in it)"
                    )
                self._end(conn, transactional_id, epoch, current_txn, commit, now)
                return
            if last_ended_epoch is not None and identity.producer_epoch == last_ended_epoch:
                if bool(last_ended_commit) == commit:
                    logger.debug("fake Kafka: repeated EndTxn(%s) of %r (epoch %d) succeeds",
                                 result, transactional_id, last_ended_epoch)
                    return
                previous = "committed" if last_ended_commit else "aborted"
                raise errors.InvalidTxnStateError(
                    f"INVALID_TXN_STATE: cannot {result} the transaction of {transactional_id!r}"
                    f" (epoch {identity.producer_epoch}): it was already {previous}"
                )
            if identity.producer_epoch < epoch:
                raise errors.ProducerFencedError(
                    f"PRODUCER_FENCED: EndTxn({result}) of {transactional_id!r} with epoch"
                    f" {identity.producer_epoch}, but the current epoch is {epoch}: the transaction was"
                    " aborted (timed out or the id was re-initialised) and its data is gone"
                )
            raise errors.InvalidProducerEpochError(
                f"INVALID_PRODUCER_EPOCH: epoch {identity.producer_epoch} of {transactional_id!r} is ahead"
                f" of the broker's {epoch}"
            )

    def list_open_transactions(self, prefix: str) -> list[OpenTransaction]:
        with self.transaction("list_open_transactions") as (conn, _now):
            rows = conn.execute(
                "SELECT id, transactional_id, producer_id, epoch, start_time_ms, timeout_ms FROM transactions"
                " WHERE state = ? AND substr(transactional_id, 1, ?) = ? ORDER BY transactional_id",
                (_ONGOING, len(prefix), prefix),
            ).fetchall()
            found = []
            for txn_id, transactional_id, producer_id, epoch, start_time_ms, timeout_ms in rows:
                partitions = conn.execute(
                    "SELECT topic, partition_id FROM transaction_partitions WHERE txn = ?", (txn_id,)
                ).fetchall()
                found.append(OpenTransaction(
                    transactional_id=transactional_id,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    state="Ongoing",
                    start_time_ms=start_time_ms,
                    timeout_ms=timeout_ms,
                    partitions=frozenset(TopicPartition(t, p) for t, p in partitions),
                ))
            return found

    def list_transactions(self, prefix: str) -> list[TransactionListing]:
        """Every transactional id with state, as ListTransactions without filters reports it:
        Ongoing while a transaction is open, CompleteCommit/CompleteAbort after the last EndTxn,
        Empty after an InitProducerId."""
        with self.transaction("list_transactions") as (conn, _now):
            rows = conn.execute(
                "SELECT transactional_id, producer_id, current_txn, last_ended_epoch, last_ended_commit"
                " FROM transactional_ids WHERE substr(transactional_id, 1, ?) = ? ORDER BY transactional_id",
                (len(prefix), prefix),
            ).fetchall()
            return [
                TransactionListing(tid, pid, "Ongoing" if current is not None else "Empty" if ended is None
                                   else "CompleteCommit" if committed else "CompleteAbort")
                for tid, pid, current, ended, committed in rows
            ]

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
            ConsumedRecord(tp.topic, tp.partition, offset, key, value, ts, ts_type, _decode_headers(headers))
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


class FakeProducer:
    """A producer of the fake cluster; transactional when given a transactional id."""

    def __init__(self, cluster: _Cluster, transactional_id: str | None, config: Mapping[str, str]) -> None:
        self._cluster = cluster
        self._transactional_id = transactional_id
        self._timeout_ms = int(config.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))
        if self._timeout_ms <= 0:
            raise InvalidValueError(f"transaction.timeout.ms must be positive, got {self._timeout_ms}")
        self._producer_id: int | None = None
        self._epoch: int | None = None
        self._in_transaction = False
        self._registered: set[TopicPartition] = set()
        self._buffer: list[_PendingRecord] = []
        self._topics: dict[str, _TopicMeta] = {}
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
        key_bytes = _as_bytes(key, "key")
        value_bytes = _as_bytes(value, "value")
        stored_headers, headers_size = _encode_headers(headers)
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
        self._buffer.append(_PendingRecord(
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
    def __init__(self, cluster: _Cluster, read_committed: bool) -> None:
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
    def __init__(self, cluster: _Cluster) -> None:
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
    def __init__(self, cluster: _Cluster) -> None:
        self._cluster = cluster

    def end_transaction(self, transactional_id: str, identity: ProducerIdentity, commit: bool) -> None:
        self._cluster.end_transaction(transactional_id, identity, commit)

    def end_transactions(self, transactions: Sequence[tuple[str, ProducerIdentity]],
                         commit: bool) -> dict[str, errors.KafkaConnectorError | None]:
        # One EndTxn after another: the fake has no network round trip to save, and each keeps
        # its own injected faults.
        results: dict[str, errors.KafkaConnectorError | None] = {}
        for transactional_id, identity in transactions:
            try:
                self._cluster.end_transaction(transactional_id, identity, commit)
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


class FakeKafkaClients:
    """``KafkaClients`` of the fake cluster stored at ``path``, plus the controls tests need.

    Every instance opened on the same path, in any process, sees the same cluster.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.bootstrap_servers = FAKE_SCHEME + self.path
        self._cluster = _Cluster(self.path)

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
