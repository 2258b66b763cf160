"""Ends pre-committed Kafka transactions from any process (Flink's KafkaCommitter).

Commit and abort go through EndTxn (``TransactionControl``), not through the producer that opened
the transaction: that producer lives in a Spark task or a process that may be long gone. Retriable
errors are retried with tenacity, bounded by ``commit_retry_timeout_s`` and by the transaction's
own timeout (after which the broker has aborted it anyway). A transaction that can no longer be
committed raises :class:`TransactionLostError`; it is never passed over.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Iterable, Sequence

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from connectors.kafka.clients import KafkaClients, TransactionControl
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.config import KafkaSinkConfig
from connectors.kafka.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    RetriableKafkaError,
    TransactionalIdNotFoundError,
    LostTransaction,
    TransactionLostError,
)
from twophase.participants import attempt_each

log = logging.getLogger(__name__)

# Jittered, so parallel commits that failed together do not retry in lockstep.
RETRY_BACKOFF = wait_exponential(multiplier=0.05, max=2.0) + wait_random(0, 0.05)

_LOST = (ProducerFencedError, InvalidProducerEpochError, InvalidTxnStateError, TransactionalIdNotFoundError)


def _now_ms() -> int:
    return int(time.time() * 1000)


class KafkaTransactionCommitter:
    def __init__(self, clients: KafkaClients, config: KafkaSinkConfig) -> None:
        self.clients = clients
        self.config = config
        self._control_client: TransactionControl | None = None
        self._control_lock = threading.Lock()

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
        if control is not None:
            control.close()

    # -- one transaction -------------------------------------------------------------------------

    def commit(self, committable: KafkaCommittable, checkpoint_id: int) -> None:
        """Commit one transaction; safe to repeat. A lost one raises :class:`TransactionLostError`
        naming it alone."""
        if committable.transactional_id is None or committable.record_count == 0:
            return  # nothing was produced, so the broker has no transaction to end
        self._warn_if_old(committable, checkpoint_id)
        try:
            self._end(committable, checkpoint_id, commit=True)
        except _LOST as exc:
            raise TransactionLostError.for_checkpoint(
                checkpoint_id, [self._lost(committable, checkpoint_id, exc)]) from exc
        except RetriableKafkaError as exc:
            if _now_ms() >= committable.expires_at_ms:
                raise TransactionLostError.for_checkpoint(
                    checkpoint_id, [self._lost(committable, checkpoint_id, exc)]) from exc
            raise
        log.debug("checkpoint %d: committed %s (%d records)", checkpoint_id,
                  committable.transactional_id, committable.record_count)

    @staticmethod
    def _warn_if_old(committable: KafkaCommittable, checkpoint_id: int) -> None:
        age_ms = _now_ms() - committable.begin_timestamp_ms
        if age_ms > committable.transaction_timeout_ms / 2:
            log.warning("checkpoint %d: transaction %s waited %d ms for its commit, more than half "
                        "of its transaction.timeout.ms=%d", checkpoint_id, committable.transactional_id,
                        age_ms, committable.transaction_timeout_ms)

    def abort(self, committable: KafkaCommittable, checkpoint_id: int) -> None:
        """Abort one transaction. Already ended (aborted, fenced, which aborted it, or committed) is fine."""
        if committable.transactional_id is None or committable.record_count == 0:
            return
        try:
            self._end(committable, checkpoint_id, commit=False)
        except (ProducerFencedError, InvalidProducerEpochError, TransactionalIdNotFoundError) as exc:
            log.info("checkpoint %d: transaction %s was already ended by the broker (%s)",
                     checkpoint_id, committable.transactional_id, type(exc).__name__)
        except InvalidTxnStateError:
            # Not ongoing under this producer epoch: already committed (or never begun). Either
            # way there is nothing to abort.
            log.info("checkpoint %d: transaction %s is no longer open (already committed or never begun); "
                     "nothing to abort", checkpoint_id, committable.transactional_id)
            return
        log.debug("checkpoint %d: aborted %s", checkpoint_id, committable.transactional_id)

    def _end(self, committable: KafkaCommittable, checkpoint_id: int, commit: bool) -> None:
        assert committable.transactional_id is not None
        # Retrying after the broker's own timeout is pointless: it has aborted the transaction.
        remaining_s = max(0.0, (committable.expires_at_ms - _now_ms()) / 1000) if commit else None
        budget = self.config.commit_retry_timeout_s if remaining_s is None else min(
            self.config.commit_retry_timeout_s, remaining_s)
        retrying = Retrying(
            retry=retry_if_exception_type(RetriableKafkaError),
            stop=stop_after_delay(budget),
            wait=RETRY_BACKOFF,
            reraise=True,
            before_sleep=lambda state: log.warning(
                "checkpoint %d: %s of %s failed (attempt %d): %r; retrying", checkpoint_id,
                "commit" if commit else "abort", committable.transactional_id, state.attempt_number,
                state.outcome.exception() if state.outcome else None),
        )
        for attempt in retrying:
            with attempt:
                self.control().end_transaction(committable.transactional_id, committable.identity, commit)

    @staticmethod
    def _lost(committable: KafkaCommittable, checkpoint_id: int, cause: Exception) -> LostTransaction:
        """What was lost with one transaction, logged with its checkpoint and transactional id
        (the error raised for the checkpoint lists them all)."""
        expired = _now_ms() >= committable.expires_at_ms
        reason = ("past transaction.timeout.ms" if expired else
                  "fenced (transaction.timeout.ms passed on the broker's clock, or another producer "
                  "re-initialised the transactional id)"
                  if isinstance(cause, (ProducerFencedError, InvalidProducerEpochError)) else
                  f"commit refused ({type(cause).__name__})")
        lost = LostTransaction(
            transactional_id=committable.transactional_id or "", producer_id=committable.producer_id,
            producer_epoch=committable.producer_epoch, record_count=committable.record_count,
            partitions=tuple(str(tp) for tp in committable.partitions), reason=reason)
        log.error("checkpoint %d: transaction %s (producer id %d, epoch %d, %d records, transaction.timeout.ms=%d) "
                  "is lost: %s (%r)", checkpoint_id, lost.transactional_id, lost.producer_id, lost.producer_epoch,
                  lost.record_count, committable.transaction_timeout_ms, reason, cause)
        return lost

    # -- many transactions -----------------------------------------------------------------------

    def commit_all(self, committables: Sequence[KafkaCommittable], checkpoint_id: int) -> None:
        """Commit every transaction given, all their EndTxn requests in flight at once.
        Transactions that fail retriably are then retried one by one, ``commit_parallelism`` at a
        time. All are attempted even when one fails, so one lost transaction does not leave others
        open (stalling readers). Then every lost transaction is raised in one
        :class:`TransactionLostError` (the operator must re-produce all of them, not the first);
        without a loss, the first other error is raised."""
        to_end = [c for c in committables if c.transactional_id is not None and c.record_count != 0]
        if not to_end:
            return
        for committable in to_end:
            self._warn_if_old(committable, checkpoint_id)
        errors: list[BaseException] = []
        lost: list[LostTransaction] = []
        retry: list[KafkaCommittable] = []
        results = self.control().end_transactions(
            [(c.transactional_id or "", c.identity) for c in to_end], commit=True)
        for committable in to_end:
            error = results.get(committable.transactional_id or "")
            if error is None:
                log.debug("checkpoint %d: committed %s (%d records)", checkpoint_id,
                          committable.transactional_id, committable.record_count)
            elif isinstance(error, _LOST):
                lost.append(self._lost(committable, checkpoint_id, error))
            elif isinstance(error, RetriableKafkaError):
                log.warning("checkpoint %d: commit of %s failed: %r; retrying", checkpoint_id,
                            committable.transactional_id, error)
                retry.append(committable)
            else:
                errors.append(error)
        for error in self._commit_each(retry, checkpoint_id):
            if isinstance(error, TransactionLostError):
                lost.extend(error.lost)
            else:
                errors.append(error)
        if lost:
            # One error for the whole checkpoint: every lost transaction is counted, not the first.
            for other in errors:
                log.warning("checkpoint %d: besides the lost transactions, a commit failed: %r", checkpoint_id, other)
            committed = len(to_end) - len(lost) - len(errors)
            # Each lost transaction was logged; whoever surfaces the error logs it whole.
            raise TransactionLostError.for_checkpoint(checkpoint_id, lost, committed=committed)
        if errors:
            raise errors[0]

    def _commit_each(self, committables: Sequence[KafkaCommittable], checkpoint_id: int) -> list[BaseException]:
        """``commit`` (with its retries) for each, ``commit_parallelism`` at a time; the errors."""
        errors: list[BaseException] = []
        if not committables:
            return errors
        workers = min(self.config.commit_parallelism, len(committables))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kafka-eos-commit") as pool:
            futures = [pool.submit(self.commit, c, checkpoint_id) for c in committables]
            for future in as_completed(futures):
                exc = future.exception()
                if exc is not None:
                    errors.append(exc)
        return errors

    def abort_all(self, committables: Iterable[KafkaCommittable], checkpoint_id: int) -> None:
        """Abort every transaction given; all are attempted even when one fails, then the first
        error is raised."""
        def abort(committable: KafkaCommittable) -> None:
            try:
                self.abort(committable, checkpoint_id)
            except Exception as exc:
                log.warning("checkpoint %d: abort of %s failed: %r", checkpoint_id, committable.transactional_id, exc)
                raise

        attempt_each(committables, abort)
