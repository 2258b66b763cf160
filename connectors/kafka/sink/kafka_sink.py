"""The two-phase-commit Kafka sink as an in-process checkpoint participant (Flink's KafkaSink): the
writer side, one transaction per checkpoint from the sink's id pool
(``sink/internal/transactional_ids.py``), and the :class:`~connectors.kafka.sink.committer.KafkaCommitter`
it registers as its committer, which the lifecycle calls directly. The protocol:
``design/exactly-once-protocol.md``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Mapping

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients, ProducerClient
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaCommitter
from connectors.kafka.sink.config import KafkaSinkConfig, default_transactional_id_prefix
from connectors.kafka.kafka_errors import KafkaConnectorError
from connectors.kafka.sink.guardrails import check_sink
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.writer import KafkaTransactionWriter, ProducerRecord
from twophase.participants import TwoPhaseCommitSink
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)


class KafkaSink(TwoPhaseCommitSink[KafkaTransactionWriter, KafkaCommittable]):
    def __init__(
        self,
        config: KafkaSinkConfig,
        name: str = "kafka-sink",
        *,
        slot: int = 0,
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
        #: This writer's slot in the sink's id pool.
        self.slot = slot
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        self.id_pool = TransactionalIdPool(config.transactional_id_prefix) if config.exactly_once else None
        # Only this writer's ids are swept: a parallel writer of the same prefix may not have
        # re-committed its restored transactions yet, and aborting them would lose their records.
        self.committer = KafkaCommitter(self.clients, config, name, slot=slot)
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
            transactional_id = self.id_pool.transactional_id(self.slot, checkpoint_id, in_use)
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

    def serialize_committable(self, committable: KafkaCommittable) -> Any:
        return committable.to_json()

    def deserialize_committable(self, data: Any) -> KafkaCommittable:
        return KafkaCommittable.from_json(data)

    def close(self) -> None:
        if self._plain_producer is not None:
            self._plain_producer.flush(self.config.flush_timeout_s)
            self._plain_producer.close()
        self.committer.close()
