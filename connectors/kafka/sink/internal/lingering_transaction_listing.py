"""Finding a sink's lingering transactions (open transactions nobody will ever end) by listing them.

A crashed task, a crashed driver, a zombie task attempt or a task count that shrank between runs
can leave a transaction of the sink open. An open transaction holds back the last stable offset of
every partition it wrote to, so every read_committed consumer of those partitions stalls behind it
until it ends or times out (``transaction.timeout.ms``, up to 15 minutes by default).

This is Flink's "listing" abort strategy: ListTransactions finds the sink's ongoing transactions
by id prefix and DescribeTransactions gives their (producer id, epoch); the lifecycle's sweep then
ends them with EndTxn(abort), through the loop of ``twophase/transaction_endings.py``.
It needs no knowledge of which ids were ever used, so it also finds ids of writer slots that no longer
exist and ids named by an older version of the kit.
"""

from __future__ import annotations

import logging
from typing import Iterable

from connectors.kafka.clients import TransactionControl
from connectors.kafka.clients.broker_retry import BrokerRetryPolicy
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool

log = logging.getLogger(__name__)

# A lingering transaction found on the broker: it is open, so it holds records, but how many is unknown.
UNKNOWN_RECORD_COUNT = -1


class LingeringTransactionListing:
    """Lists the open transactions of one sink's id pool, except those it is told to keep; the
    lifecycle aborts them through the loop that ends transactions."""

    def __init__(self, control: TransactionControl, pool: TransactionalIdPool, retry_timeout_s: float) -> None:
        self.control = control
        self.pool = pool
        self.retry_timeout_s = retry_timeout_s

    def lingering(self, keep: Iterable[str] = (), slot: int | None = None) -> list[KafkaCommittable]:
        """Every open transaction of the pool (of ``slot`` only, if given) whose id is not in
        ``keep``, as committables to abort.

        ``keep`` names transactions that are pre-committed and will be committed (a restored
        checkpoint's). ``slot`` confines an in-process writer to its own ids: a parallel writer of
        the same sink may not have re-committed its restored transactions yet. The listing is a
        read, retried like the source's planning requests (``BrokerRetryPolicy``, within
        eos.brokerRetryTimeoutMs; at the bound, one line naming the listing)."""
        kept = set(keep)
        found = []
        open_txns = BrokerRetryPolicy.from_seconds(self.retry_timeout_s).call(
            lambda: self.control.list_open_transactions(f"{self.pool.prefix}-"),
            f"listing the open transactions of {self.pool.prefix}-*")
        for txn in open_txns:
            txn_slot = self.pool.slot_of(txn.transactional_id)
            if txn_slot is None or txn.transactional_id in kept:
                continue
            if slot is not None and txn_slot != slot:
                continue
            log.info("aborting lingering transaction %s (pid %d, epoch %d, open since %d)",
                     txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.start_time_ms)
            found.append(KafkaCommittable(
                transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch, partitions=tuple(sorted(txn.partitions)),
                record_count=UNKNOWN_RECORD_COUNT, checkpoint_id=-1, begin_timestamp_ms=txn.start_time_ms,
                transaction_timeout_ms=txn.timeout_ms))
        return found
