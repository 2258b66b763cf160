"""The simulated cluster's state: one SQLite file that every process shares.

Unit and crash tests need a Kafka that several processes share (Spark runs its Python workers as
separate processes, and crash tests kill them with ``os._exit``), so the whole cluster lives in
one SQLite file: WAL mode, a busy timeout, and every operation one short SQL transaction
(``BEGIN IMMEDIATE`` for writes). Here are the file's schema (topics, partition logs, records,
transactional ids, transactions, consumer group offsets, broker configuration, injected errors),
its connections, its clock and the gate every broker request passes: the broker is available,
and no error is injected into the request. Timeouts are enforced lazily, at the start of every
request, against the clock that tests move (shared by all processes).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Iterator

from connectors.kafka import kafka_errors as errors
from connectors.kafka.clients.error_table import broker_error_names, kafka_error

DEFAULT_BROKER_CONFIG: dict[str, str] = {
    "transaction.max.timeout.ms": "900000",
    "message.max.bytes": "1048588",
}

# Operations that reach the broker, by the names inject_errors() accepts.
OPERATIONS: frozenset[str] = frozenset(
    {
        "init_transactions",
        "produce",
        "flush",
        "abort_transaction",
        "end_txn",
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

ONGOING, COMMITTED, ABORTED = "ongoing", "committed", "aborted"

# Connections that a forked child inherited. SQLite connections must not be used across fork(),
# and closing one in the child could release the parent's locks, so they are kept referenced.
_inherited_connections: list[sqlite3.Connection] = []


def injected_error(error_name: str, operation: str) -> errors.KafkaConnectorError:
    message = f"{error_name} (injected into {operation})"
    if error_name == "BROKER_UNAVAILABLE":
        return errors.BrokerUnavailableError(message, code=error_name)
    return kafka_error(error_name, error_name, message)


class ClusterStore(ABC):
    """The state file: every broker request is one SQL transaction on it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._create_schema()

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
            raise injected_error(row[1], operation)

    @abstractmethod
    def _expire_transactions(self, conn: sqlite3.Connection, now: int) -> None:
        """Abort every transaction open longer than its timeout, before a broker request: the
        transaction coordinator's part (``transactions.Cluster``)."""
