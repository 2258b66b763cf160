"""What the Spark sink records about each checkpoint it commits (twophase.checkpoint_statistics).

One call per outcome, made by the commit path: :func:`record_commit` when a batch's commit log
line is written, :func:`record_recovery` when a restarted driver committed a checkpoint the
crashed one had stored, :func:`record_lost` when transactions could not be committed (every one of
the checkpoint, with its records). Each turns Kafka committables into counts and the sink's
options into the settings ``kafka-eos status`` needs, and never raises.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.errors import LostTransaction
from connectors.spark.options import SinkOptions
from twophase.checkpoint_statistics import (
    CheckpointOutcome,
    CommitTimings,
    LostTransactionRecord,
    StatisticsTotals,
    earlier_statistics_ids,
    read_totals,
    record_statistics,
)
from twophase.checkpoint_store import FileCheckpointStore


def _record(options: SinkOptions, store: FileCheckpointStore, checkpoint_id: int,
            committables: Sequence[KafkaCommittable], outcome: CheckpointOutcome, **figures: object) -> None:
    config = options.config
    transactional = [c for c in committables if c.transactional_id is not None and c.record_count]
    record_statistics(
        store, checkpoint_id, outcome=outcome,
        records=sum(c.record_count for c in committables),
        transactions=len(transactional),
        oldest_transaction_begin_ms=min((c.begin_timestamp_ms for c in transactional), default=None),
        transactional_id_prefix=config.transactional_id_prefix if config.exactly_once else None,
        transaction_timeout_ms=config.transaction_timeout_ms,
        restart_budget_ms=config.restart_budget_ms,
        **figures,  # type: ignore[arg-type]
    )


def totals_before(store: FileCheckpointStore, checkpoint_id: int) -> "Future[StatisticsTotals]":
    """Start reading the running totals before checkpoint ``checkpoint_id`` is stored (storing it
    may subsume the record that holds them, with ``eos.retainedCheckpoints=1``). The read (one
    small GET) runs while the checkpoint is committed, so it adds nothing to the commit; the
    result never raises."""
    ids = earlier_statistics_ids(store, checkpoint_id)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-eos-statistics")
    try:
        return executor.submit(read_totals, store, ids, checkpoint_id)
    finally:
        executor.shutdown(wait=False)


def record_commit(options: SinkOptions, store: FileCheckpointStore, checkpoint_id: int,
                  committables: Sequence[KafkaCommittable], timings: CommitTimings,
                  lingering_aborted: Sequence[str], before: "Future[StatisticsTotals] | None" = None) -> None:
    _record(options, store, checkpoint_id, committables, CheckpointOutcome.COMMITTED, timings=timings,
            lingering_aborted=tuple(lingering_aborted), totals_before=None if before is None else before.result())


def record_recovery(options: SinkOptions, store: FileCheckpointStore, checkpoint_id: int,
                    committables: Sequence[KafkaCommittable], end_txn_ms: float) -> None:
    _record(options, store, checkpoint_id, committables, CheckpointOutcome.RECOVERED,
            timings=CommitTimings(total_ms=end_txn_ms, end_txn_ms=end_txn_ms))


def record_lost(options: SinkOptions, store: FileCheckpointStore, checkpoint_id: int,
                committables: Sequence[KafkaCommittable], lost: Sequence[LostTransaction]) -> None:
    """Every lost transaction of the checkpoint, with its records (``TransactionLostError.lost``)."""
    _record(options, store, checkpoint_id, committables, CheckpointOutcome.LOST,
            lost=tuple(LostTransactionRecord(t.transactional_id, t.record_count, t.producer_id, t.producer_epoch,
                                             tuple(t.partitions)) for t in lost))
