"""The simulated cluster's transaction coordinator: producer ids, epochs, fencing, transactions
and their markers, and the produce path that goes through it.

The semantics follow Apache Kafka 4.0 with transactions v2, as measured and written down in
``design/exactly-once-protocol.md``:

- ``init_transactions`` allocates a producer id once per transactional id, aborts the id's open
  transaction, bumps the epoch and fences every older producer of the id (PRODUCER_FENCED);
- EndTxn may come from any process that knows (transactional id, producer id, epoch); it bumps
  the epoch (transactions v2); resending the same EndTxn succeeds, the opposite result fails with
  INVALID_TXN_STATE, an epoch superseded by init or by a timeout fails with PRODUCER_FENCED,
  another producer id than the id's with INVALID_PRODUCER_ID_MAPPING;
- a transaction open longer than ``transaction.timeout.ms`` is aborted by the coordinator, which
  bumps the epoch and so fences its producer; ``init_transactions`` refuses a timeout above the
  broker's ``transaction.max.timeout.ms`` (INVALID_TRANSACTION_TIMEOUT);
- a transaction registers a partition when the first record for it is produced (AddPartitionsToTxn)
  and its clock starts then; its records enter the log at ``flush()``; markers go to every
  registered partition;
- EndTxn(commit) of a transaction nothing was produced in is INVALID_TXN_STATE, EndTxn(abort) of
  it is accepted (Kafka 4.4, transactions v2).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from dataclasses import dataclass

from connectors.kafka import kafka_errors as errors
from connectors.kafka.clients import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    OpenTransaction,
    ProducerIdentity,
    TopicPartition,
    TransactionListing,
)
from connectors.kafka.clients.error_table import kafka_error
from connectors.simulated_kafka.logs import PartitionLogs
from connectors.simulated_kafka.records import PendingRecord
from connectors.simulated_kafka.store import ABORTED, COMMITTED, ONGOING

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
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


class Cluster(PartitionLogs):
    """The broker: the partition logs with the transaction coordinator. Every request is one SQL
    transaction on the shared state file."""

    # -- transactions ----------------------------------------------------------------------------

    def _expire_transactions(self, conn: sqlite3.Connection, now: int) -> None:
        expired = conn.execute(
            "SELECT id, transactional_id, epoch, timeout_ms FROM transactions"
            " WHERE state = ? AND start_time_ms + timeout_ms < ?",
            (ONGOING, now),
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
            (COMMITTED if commit else ABORTED, now, txn_id),
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

    # -- producer requests -----------------------------------------------------------------------

    def snapshot(self, operation: str, transactional_id: str | None) -> Snapshot:
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
        return Snapshot(
            now_ms=int(time.time() * 1000) + int(clock_offset),
            message_max_bytes=int(max_bytes),
            error_injected=bool(injected),
            earliest_deadline_ms=deadline,
            epoch=epoch,
            fence_epoch=fence_epoch,
        )

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
                    (transactional_id, producer_id, producer_epoch, ONGOING, now, timeout_ms),
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
                        records: list[PendingRecord], log_append_topics: set[str]) -> None:
        with self.transaction("flush") as (conn, now):
            txn_id: int | None = None
            if transactional_id is not None and producer_epoch is not None:
                txn_id = self._require_current(conn, transactional_id, producer_epoch)
                if records and txn_id is None:
                    raise errors.InvalidTxnStateError(
                        f"records of {transactional_id!r} were produced outside of a registered transaction"
                    )
            by_partition: dict[tuple[str, int], list[PendingRecord]] = {}
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

    def end_txn(self, transactional_id: str, identity: ProducerIdentity, commit: bool) -> None:
        with self.transaction("end_txn") as (conn, now):
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
                (ONGOING, len(prefix), prefix),
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
