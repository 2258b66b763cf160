"""The Kafka sink's committer (Flink's KafkaCommitter): ends pre-committed transactions from any
process, and finds the lingering ones. The Spark sink's driver registers it as the participant
whose state is its tasks' committables; the in-process :class:`~connectors.kafka.sink.kafka_sink.KafkaSink`
registers it as its committer. The lifecycle goes to it directly (``twophase/lifecycle.py``).

Commit and abort go through EndTxn (``TransactionControl``), not through the producer that opened
the transaction: that producer lives in a Spark task or a process that may be long gone. An
attempt (:meth:`KafkaCommitter.attempt_endings`) sends each transaction it is handed one EndTxn,
in EndTxn rounds (every request of a round in flight at once), and answers one outcome each
(``twophase/transaction_endings.py``, Flink's ``CommitRequest``):

- ended: committed, aborted, or found already ended as asked (an abort of a transaction the broker
  already ended, by a fence, a timeout or a commit);
- retry later: a transient error (``RetriableKafkaError``) while the transaction's own timeout has
  not passed;
- lost, with what was lost: a commit refused because the transaction is gone (fenced, past
  ``transaction.timeout.ms``, unknown to the broker), or a transient error after the timeout;
- failed: anything else.

Nothing here retries: the loop does (``twophase/transaction_endings.py``), bounded by
``eos.brokerRetryTimeoutMs`` (``KafkaSinkConfig.commit_retry_timeout_s``).
"""

from __future__ import annotations

import logging
import threading
from typing import Sequence

from connectors.kafka.clients import KafkaClients, TransactionControl
from connectors.kafka.kafka_errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaConnectorError,
    LostTransaction,
    ProducerFencedError,
    RetriableKafkaError,
    TransactionalIdNotFoundError,
)
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.sink.internal.lingering_transaction_listing import LingeringTransactionListing
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.statistics import commit_figures
from twophase.checkpoint import JsonValue, wall_clock_ms
from twophase.checkpoint_statistics import CommitFigures
from twophase.participants import CommittingParticipant
from twophase.transaction_endings import Ending, TransactionCommitter

log = logging.getLogger(__name__)

#: A commit refused with one of these: the transaction is gone, its records with it.
_GONE = (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError, TransactionalIdNotFoundError)
#: What the broker does with a transaction that outlives its timeout, and how to keep it from
#: happening (the lost transactions' error says both).
LOST_WHAT_HAPPENED = "aborted by the broker before commit, e.g. past transaction.timeout.ms"
LOST_PREVENTION = ("keep commits and restarts within transaction.timeout.ms, or raise it (eos.transactionTimeoutMs, "
                   "at most the brokers' transaction.max.timeout.ms)")


class KafkaCommitter(CommittingParticipant[KafkaCommittable], TransactionCommitter[KafkaCommittable]):
    """As a participant, a checkpoint's state for it is the list of its transactions' committables
    (JSON), the Spark sink's tasks' commit messages."""

    def __init__(self, clients: KafkaClients, config: KafkaSinkConfig, name: str, *, slot: int | None = None,
                 in_flight: Sequence[str] = (), sweeps_after_commit: bool = False,
                 control: TransactionControl | None = None) -> None:
        self.name = name
        self.clients = clients
        self.config = config
        self.committer = self
        #: The one retry layer's bound for this sink's endings (eos.brokerRetryTimeoutMs).
        self.retry_timeout_s = config.commit_retry_timeout_s
        #: Only this writer slot's transactional ids are swept (None: every id of the prefix).
        self.slot = slot
        #: Ids of transactions this process is committing right now, which no sweep may abort.
        self.in_flight = list(in_flight)
        #: Spark's micro-batches: between two batches no transaction of the sink may be open.
        self.sweeps_after_commit = sweeps_after_commit
        #: A control client the caller lends (and closes itself), or None: made at first use, closed by close().
        self._control_client: TransactionControl | None = control
        self._owns_control = control is None
        self._control_lock = threading.Lock()

    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, KafkaCommittable]]:
        return [(checkpoint_id, KafkaCommittable.from_json(c)) for c in (state or [])]

    def lingering_transactions(self, keep: Sequence[KafkaCommittable]) -> list[tuple[int, KafkaCommittable]]:
        prefix = self.config.transactional_id_prefix
        if not self.config.exactly_once or prefix is None:
            return []
        kept = [c.transactional_id for c in keep if c.transactional_id] + self.in_flight
        listing = LingeringTransactionListing(self.control(), TransactionalIdPool(prefix),
                                              self.config.commit_retry_timeout_s)
        return [(-1, c) for c in listing.lingering(kept, slot=self.slot)]

    def figures(self, committables: Sequence[KafkaCommittable]) -> CommitFigures:
        return commit_figures(self.config, committables)

    def control(self) -> TransactionControl:
        """The transaction control client, made at first use. One client is shared by the
        parallel commits: its requests are multiplexed over one connection per broker, and a
        client per thread would pay a bootstrap each."""
        with self._control_lock:
            if self._control_client is None:
                self._control_client = self.clients.txn_control()
            return self._control_client

    def close(self) -> None:
        with self._control_lock:
            control, self._control_client = self._control_client, None
        if control is not None and self._owns_control:
            control.close()

    def attempt_endings(self, committables: Sequence[tuple[int, KafkaCommittable]], commit: bool) -> list[Ending]:
        """One attempt at committing (or aborting) each, the EndTxn requests pipelined in one round;
        one :class:`Ending` each, in order. A committable with nothing written has nothing to end.
        A transactional id named twice (two checkpoints' transactions) is ended in checkpoint order,
        one round after the other."""
        endings: list[Ending | None] = [None] * len(committables)
        rounds: list[dict[str, int]] = []
        for index, (checkpoint_id, committable) in enumerate(committables):
            if committable.transactional_id is None or committable.record_count == 0:
                endings[index] = Ending.ended(None)  # nothing was produced: the broker has no transaction
                continue
            if commit:
                self._warn_if_old(committable, checkpoint_id)
            free = next((r for r in rounds if committable.transactional_id not in r), None)
            if free is None:
                free = {}
                rounds.append(free)
            free[committable.transactional_id] = index
        for by_id in rounds:
            results = self.control().end_txn_round(
                [(tid, committables[i][1].identity) for tid, i in by_id.items()], commit)
            for tid, index in by_id.items():
                checkpoint_id, committable = committables[index]
                endings[index] = self._outcome(committable, checkpoint_id, commit, results.get(tid))
        return [e if e is not None else Ending.ended(None) for e in endings]

    def _outcome(self, committable: KafkaCommittable, checkpoint_id: int, commit: bool,
                 error: KafkaConnectorError | None) -> Ending:
        tid = committable.transactional_id
        action = "commit" if commit else "abort"
        if error is None:
            log.debug("checkpoint %d: %s of %s done (%d records)", checkpoint_id, action, tid, committable.record_count)
            return Ending.ended(tid)
        if not commit and isinstance(error, _GONE):
            # Not ongoing under this producer epoch: fenced or timed out (which aborted it),
            # committed, or never begun. Either way there is nothing to abort.
            log.info("checkpoint %d: transaction %s is no longer open (%s); nothing to abort", checkpoint_id, tid,
                     type(error).__name__)
            return Ending.ended(tid)
        if commit and (isinstance(error, _GONE) or (
                isinstance(error, RetriableKafkaError) and wall_clock_ms() >= committable.expires_at_ms)):
            return Ending.lost_with(tid, self._lost(committable, checkpoint_id, error), error)
        if isinstance(error, RetriableKafkaError):
            return Ending.retry_later(tid, error)
        return Ending.failed(tid, error)

    @staticmethod
    def _warn_if_old(committable: KafkaCommittable, checkpoint_id: int) -> None:
        age_ms = wall_clock_ms() - committable.begin_timestamp_ms
        if age_ms > committable.transaction_timeout_ms / 2:
            log.warning("checkpoint %d: transaction %s waited %d ms for its commit, more than half "
                        "of its transaction.timeout.ms=%d", checkpoint_id, committable.transactional_id,
                        age_ms, committable.transaction_timeout_ms)

    @staticmethod
    def _lost(committable: KafkaCommittable, checkpoint_id: int, cause: Exception) -> LostTransaction:
        """What was lost with one transaction, logged with its checkpoint and transactional id
        (the error raised for the checkpoint lists them all)."""
        expired = wall_clock_ms() >= committable.expires_at_ms
        reason = ("past transaction.timeout.ms" if expired else
                  "fenced (transaction.timeout.ms passed on the broker's clock, or another producer "
                  "re-initialised the transactional id)"
                  if isinstance(cause, (ProducerFencedError, InvalidProducerEpochError)) else
                  f"commit refused ({type(cause).__name__})")
        lost = LostTransaction(
            transactional_id=committable.transactional_id or "", producer_id=committable.producer_id,
            producer_epoch=committable.producer_epoch, record_count=committable.record_count,
            partitions=tuple(str(tp) for tp in committable.partitions), reason=reason,
            what_happened=LOST_WHAT_HAPPENED, prevention=LOST_PREVENTION)
        log.error("checkpoint %d: transaction %s (producer id %d, epoch %d, %d records, transaction.timeout.ms=%d) "
                  "is lost: %s (%r)", checkpoint_id, lost.transactional_id, lost.producer_id, lost.producer_epoch,
                  lost.record_count, committable.transaction_timeout_ms, reason, cause)
        return lost
