"""How the Kafka sink ends its transactions, checkpoint by checkpoint, through the one loop that ends
transactions (``twophase.participants.attempt_each``), for both Kafka sinks:
the in-process :class:`~connectors.kafka.sink.kafka_sink.KafkaSink` and the Spark sink's
driver (``connectors/spark/sink_driver.py``), through the one Kafka committing participant
(``committing_participant.py``).

Each checkpoint's transactions are ended together (the committer puts all their EndTxn requests in
flight at once). Every checkpoint is attempted even when one fails, so one failure leaves no other
transaction open to stall readers; then the first error is raised (for a checkpoint's lost
transactions the committer already raised them all in one error).
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaTransactionCommitter
from twophase.participants import attempt_each

log = logging.getLogger(__name__)


def by_checkpoint(committables: Sequence[tuple[int, KafkaCommittable]]) -> list[tuple[int, list[KafkaCommittable]]]:
    """The transactions grouped by checkpoint, in checkpoint order."""
    groups: dict[int, list[KafkaCommittable]] = {}
    for checkpoint_id, committable in committables:
        groups.setdefault(checkpoint_id, []).append(committable)
    return sorted(groups.items())


def commit_by_checkpoint(committer: KafkaTransactionCommitter, committables: Sequence[tuple[int, KafkaCommittable]],
                         recovering: bool = False) -> None:
    """Commit every checkpoint's transactions; the first error is raised once every checkpoint
    was attempted. ``recovering``: they come from a restored checkpoint (logged per checkpoint)."""
    def commit(checkpoint: tuple[int, list[KafkaCommittable]]) -> None:
        checkpoint_id, group = checkpoint
        started = time.monotonic()
        committer.commit_all(group, checkpoint_id)
        if recovering:
            log.info("re-committed %d transaction(s) of checkpoint %d on restore (%.0f ms): %s", len(group),
                     checkpoint_id, (time.monotonic() - started) * 1000,
                     ", ".join(str(c.transactional_id) for c in group))

    attempt_each(by_checkpoint(committables), commit)


def abort_by_checkpoint(committer: KafkaTransactionCommitter,
                        committables: Sequence[tuple[int, KafkaCommittable]]) -> None:
    """Abort every checkpoint's transactions; the first error is raised once every checkpoint was
    attempted."""
    attempt_each(by_checkpoint(committables), lambda checkpoint: committer.abort_all(checkpoint[1], checkpoint[0]))
