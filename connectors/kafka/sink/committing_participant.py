"""The committer side of the Kafka sink, as one participant of the commit lifecycle
(``twophase/lifecycle.py``), for both engines: the in-process
:class:`~connectors.kafka.sink.kafka_sink.KafkaSink` delegates its committer side to it, and the
Spark sink's driver (``connectors/spark/sink_driver.py``) registers it with the committables its
tasks sent.

It only says how: one attempt at ending each transaction (``committer.py``: EndTxn for all at
once, one outcome each), which transactions linger (``internal/abort_strategy.py``), and the
figures of its part of the checkpoint's statistics (``statistics.py``). When each runs, what is
retried and what follows a failure is the lifecycle's, through the one loop of
``twophase/transaction_endings.py``.
"""

from __future__ import annotations

from typing import Sequence

from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaTransactionCommitter
from connectors.kafka.sink.internal.abort_strategy import LingeringTransactions
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.statistics import commit_figures
from twophase.checkpoint import JsonValue
from twophase.checkpoint_statistics import CommitFigures
from twophase.participants import CommittingParticipant
from twophase.transaction_endings import Ending


class KafkaCommittingParticipant(CommittingParticipant[KafkaCommittable]):
    """A checkpoint's state for it is the list of its transactions' committables (JSON)."""

    def __init__(self, committer: KafkaTransactionCommitter, name: str, *, slot: int | None = None,
                 in_flight: Sequence[str] = (), sweeps_after_commit: bool = False) -> None:
        self.name = name
        self.committer = committer
        self.config = committer.config
        #: The one retry layer's bound for this sink's endings (eos.brokerRetryTimeoutMs).
        self.retry_timeout_s = self.config.commit_retry_timeout_s
        #: Only this writer's transactional ids are swept (None: every id of the prefix).
        self.slot = slot
        #: Ids of transactions this process is committing right now, which no sweep may abort.
        self.in_flight = list(in_flight)
        #: Spark's micro-batches: between two batches no transaction of the sink may be open.
        self.sweeps_after_commit = sweeps_after_commit

    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, KafkaCommittable]]:
        return [(checkpoint_id, KafkaCommittable.from_json(c)) for c in (state or [])]

    def end_transactions(self, committables: Sequence[tuple[int, KafkaCommittable]], commit: bool,
                         recovering: bool) -> list[Ending]:
        return self.committer.end_transactions(committables, commit)

    def lingering_transactions(self, keep: Sequence[KafkaCommittable],
                               checkpoint_id: int | None) -> list[tuple[int, KafkaCommittable]]:
        prefix = self.config.transactional_id_prefix
        if not self.config.exactly_once or prefix is None:
            return []
        kept = [c.transactional_id for c in keep if c.transactional_id] + self.in_flight
        finder = LingeringTransactions(self.committer.control(), TransactionalIdPool(prefix),
                                       self.config.commit_retry_timeout_s)
        return [(-1, c) for c in finder.find(kept, slot=self.slot)]

    def figures(self, committables: Sequence[KafkaCommittable]) -> CommitFigures:
        return commit_figures(self.config, committables)
