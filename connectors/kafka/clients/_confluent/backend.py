"""The real Kafka clients behind the seam of ``connectors.kafka.clients``: ``RealKafkaClients`` assembles them.

librdkafka (confluent-kafka) carries the data path and the cluster admin
(``clients/_confluent/producer.py``, ``clients/_confluent/reader.py``, ``clients/_confluent/admin.py``); the transaction
control plane that librdkafka lacks (EndTxn for another process's transaction, ListTransactions,
DescribeTransactions) comes from kafka-python (``clients/_kafka_python/transaction_control.py``). Every one of them turns Kafka's
errors into the connector's through the one table of ``clients/error_table.py``.
"""

from __future__ import annotations

from typing import Any, Mapping

from connectors.kafka.clients import TransactionControl
from connectors.kafka.clients._confluent.admin import ConfluentClusterAdmin
from connectors.kafka.clients._confluent.producer import ConfluentProducer
from connectors.kafka.clients._confluent.reader import ConfluentRecordReader


class RealKafkaClients:
    """``KafkaClients`` for a real cluster. ``config`` is librdkafka client configuration passed
    to every client (security settings, timeouts); per-client ``config`` arguments override it."""

    def __init__(
        self,
        bootstrap_servers: str,
        config: Mapping[str, Any] | None = None,
        reader_stall_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.config: dict[str, Any] = dict(config or {})
        self.reader_stall_timeout_s = reader_stall_timeout_s

    def _merged(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(self.config)
        merged.update(config or {})
        return merged

    def producer(
        self, transactional_id: str | None, config: Mapping[str, str] | None = None
    ) -> ConfluentProducer:
        return ConfluentProducer(self.bootstrap_servers, transactional_id, self._merged(config))

    def reader(
        self, read_committed: bool = True, config: Mapping[str, str] | None = None
    ) -> ConfluentRecordReader:
        return ConfluentRecordReader(
            self.bootstrap_servers,
            read_committed,
            self._merged(config),
            stall_timeout_s=self.reader_stall_timeout_s,
        )

    def admin(self) -> ConfluentClusterAdmin:
        return ConfluentClusterAdmin(self.bootstrap_servers, self.config)

    def txn_control(self) -> TransactionControl:
        from connectors.kafka.clients._kafka_python.transaction_control import KafkaPythonTransactionControl

        return KafkaPythonTransactionControl(self.bootstrap_servers, self.config)
