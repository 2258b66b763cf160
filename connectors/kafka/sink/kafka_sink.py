"""The two-phase-commit Kafka sink as an in-process checkpoint participant (Flink's KafkaSink).

Each checkpoint's records go into one transaction of an id from the sink's pool
(``sink/internal/transactional_ids.py``: ``{prefix}-{writer}-{checkpoint % 2}``). pre-commit flushes it; the
commit lifecycle stores its handle and then commits it with EndTxn. On recovery, the lifecycle has
the handles of an unconfirmed checkpoint committed again and every other open transaction of this
writer aborted, so no read_committed consumer stays stalled. Those endings go through the one loop
of ``twophase/transaction_endings.py`` into the one Kafka committing participant
(``committing_participant.py``), which the Spark sink uses too.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Mapping, Sequence

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients, ProducerClient
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaTransactionCommitter
from connectors.kafka.sink.committing_participant import KafkaCommittingParticipant
from connectors.kafka.sink.config import KafkaSinkConfig, default_transactional_id_prefix
from connectors.kafka.kafka_errors import KafkaConnectorError
from connectors.kafka.sink.guardrails import check_sink
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.writer import KafkaTransactionWriter, ProducerRecord
from twophase.participants import TwoPhaseCommitSink
from twophase.errors import InvalidValueError
from twophase.transaction_endings import Ending

log = logging.getLogger(__name__)


class KafkaSink(TwoPhaseCommitSink[KafkaTransactionWriter, KafkaCommittable]):
    def __init__(
        self,
        config: KafkaSinkConfig,
        name: str = "kafka-sink",
        *,
        writer: int = 0,
        job_id: str | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        super().__init__(name)
        if config.exactly_once and config.transactional_id_prefix is None:
            if job_id is None:
                raise InvalidValueError(
                    "exactly_once needs a transactional id prefix unique to this job and sink: set "
                    "KafkaSinkConfig.transactional_id_prefix, or pass job_id to derive one"
                )
            config = replace(config, transactional_id_prefix=default_transactional_id_prefix(job_id, name))
        self.config = config
        self.writer_index = writer
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        self.committer = KafkaTransactionCommitter(self.clients, config)
        self.id_pool = TransactionalIdPool(config.transactional_id_prefix) if config.exactly_once else None
        # Only this writer's ids are swept: a parallel writer of the same prefix may not have
        # re-committed its restored transactions yet, and aborting them would lose their records.
        self.committing = KafkaCommittingParticipant(self.committer, name, slot=writer)
        self.retry_timeout_s = config.commit_retry_timeout_s
        self._plain_producer: ProducerClient | None = None
        check_sink(config, self.clients)

    @property
    def transactional_id_prefix(self) -> str | None:
        return self.config.transactional_id_prefix

    def begin_transaction(self, checkpoint_id: int) -> KafkaTransactionWriter:
        if not self.config.exactly_once and self._plain_producer is None:
            self._plain_producer = self.clients.producer(None, dict(self.config.client_config))
        transactional_id = None
        if self.id_pool is not None:
            # Ids of transactions pre-committed but not yet known committed stay theirs.
            in_use = {c.transactional_id for c in self.pending_committables() if c.transactional_id}
            transactional_id = self.id_pool.transactional_id(self.writer_index, checkpoint_id, in_use)
        return KafkaTransactionWriter(self.clients, self.config, transactional_id, checkpoint_id,
                                      producer=self._plain_producer)

    def write(self, txn: KafkaTransactionWriter, value: ProducerRecord | Mapping[str, Any]) -> None:
        try:
            txn.write(value)
        except (KafkaConnectorError, TypeError, ValueError):
            # Nothing of a transaction with a bad record may become visible: abort it now rather
            # than leave it to stall readers until recovery.
            txn.abort()
            self._current = None
            raise

    def pre_commit(self, txn: KafkaTransactionWriter) -> KafkaCommittable:
        try:
            return txn.pre_commit()
        except Exception:
            txn.abort()
            raise

    # The committer side is the one Kafka committing participant's, which the Spark sink uses too.

    def end_transactions(self, committables: Sequence[tuple[int, KafkaCommittable]], commit: bool,
                         recovering: bool) -> list[Ending]:
        return self.committing.end_transactions(committables, commit, recovering)

    def lingering_transactions(self, keep: Sequence[KafkaCommittable],
                               checkpoint_id: int | None) -> list[tuple[int, KafkaCommittable]]:
        return self.committing.lingering_transactions(keep, checkpoint_id)

    def serialize_committable(self, committable: KafkaCommittable) -> Any:
        return committable.to_json()

    def deserialize_committable(self, data: Any) -> KafkaCommittable:
        return KafkaCommittable.from_json(data)

    def close(self) -> None:
        if self._plain_producer is not None:
            self._plain_producer.flush(self.config.flush_timeout_s)
            self._plain_producer.close()
        self.committer.close()
