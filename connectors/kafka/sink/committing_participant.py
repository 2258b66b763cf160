"""The committer side of the Kafka sink, as one participant of the commit lifecycle
(``twophase/lifecycle.py``), for both engines: the in-process
:class:`~connectors.kafka.sink.kafka_sink.KafkaSink` delegates its transaction endings to it, and
the Spark sink's driver (``connectors/spark/sink_driver.py``) registers it with the committables
its tasks sent.

It only says how: commit and abort a checkpoint's transactions (``commit_loop.py``: EndTxn for
each checkpoint's transactions at once), abort lingering ones (``internal/abort_strategy.py``),
and the figures of its part of the checkpoint's statistics (``statistics.py``). When each runs is
the lifecycle's.
"""

from __future__ import annotations

from typing import Any, Sequence

from connectors.kafka.sink.commit_loop import abort_by_checkpoint, commit_by_checkpoint
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaTransactionCommitter
from connectors.kafka.sink.internal.abort_strategy import LingeringTransactionAborter
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.statistics import commit_figures
from twophase.checkpoint import JsonValue
from twophase.checkpoint_statistics import CommitFigures
from twophase.errors import UnrecoverableCommitError
from twophase.participants import CommittingParticipant


class KafkaCommittingParticipant(CommittingParticipant[KafkaCommittable]):
    """A checkpoint's state for it is the list of its transactions' committables (JSON)."""

    def __init__(self, committer: KafkaTransactionCommitter, name: str, *, slot: int | None = None,
                 in_flight: Sequence[str] = (), sweeps_after_commit: bool = False) -> None:
        self.name = name
        self.committer = committer
        self.config = committer.config
        #: Only this writer's transactional ids are swept (None: every id of the prefix).
        self.slot = slot
        #: Ids of transactions this process is committing right now, which no sweep may abort.
        self.in_flight = list(in_flight)
        #: Spark's micro-batches: between two batches no transaction of the sink may be open.
        self.sweeps_after_commit = sweeps_after_commit

    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, KafkaCommittable]]:
        return [(checkpoint_id, KafkaCommittable.from_json(c)) for c in (state or [])]

    def commit_transactions(self, committables: Sequence[tuple[int, KafkaCommittable]], recovering: bool) -> None:
        commit_by_checkpoint(self.committer, committables, recovering)

    def abort_transactions(self, committables: Sequence[tuple[int, KafkaCommittable]]) -> None:
        abort_by_checkpoint(self.committer, committables)

    def abort_lingering(self, keep: Sequence[KafkaCommittable], checkpoint_id: int | None) -> list[str]:
        prefix = self.config.transactional_id_prefix
        if not self.config.exactly_once or prefix is None:
            return []
        kept = [c.transactional_id for c in keep if c.transactional_id] + self.in_flight
        aborter = LingeringTransactionAborter(self.committer, TransactionalIdPool(prefix),
                                              self.config.commit_retry_timeout_s)
        return aborter.abort_lingering(kept, slot=self.slot)

    def figures(self, committables: Sequence[Any], lost: UnrecoverableCommitError | None) -> CommitFigures:
        return commit_figures(self.config, committables, lost)
