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
from connectors.kafka.clients.java_client_settings import librdkafka_config

# Consumer settings a producer or admin handle would only warn about (librdkafka's CONFWARN).
_CONSUMER_ONLY = ("group.id",)


class RealKafkaClients:
    """``KafkaClients`` for a real cluster. ``config`` is the client configuration passed to every
    client (security settings, timeouts), in librdkafka's names or Java's client's; per-client
    ``config`` arguments override it.

    Java's names are translated here (``java_client_settings``), where every client is built, so
    the kit's tools, its driver and its executors all take them; trust and key stores are turned
    into PEM files in this process, since their paths are local to each node."""

    def __init__(
        self,
        bootstrap_servers: str,
        config: Mapping[str, Any] | None = None,
        reader_stall_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._given: dict[str, Any] = dict(config or {})
        self.config: dict[str, Any] = librdkafka_config(self._given)
        self.reader_stall_timeout_s = reader_stall_timeout_s

    def __getstate__(self) -> dict[str, Any]:
        # Converted stores are files of this process: another process converts them again.
        return {"bootstrap_servers": self.bootstrap_servers, "config": self._given,
                "reader_stall_timeout_s": self.reader_stall_timeout_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["bootstrap_servers"], state["config"], state["reader_stall_timeout_s"])

    def _merged(self, config: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(self.config)
        if config:
            merged.update(librdkafka_config(config))
        return merged

    def _without_consumer_settings(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in config.items() if key not in _CONSUMER_ONLY}

    def producer(
        self, transactional_id: str | None, config: Mapping[str, str] | None = None
    ) -> ConfluentProducer:
        return ConfluentProducer(self.bootstrap_servers, transactional_id,
                                 self._without_consumer_settings(self._merged(config)))

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
        return ConfluentClusterAdmin(self.bootstrap_servers, self._without_consumer_settings(self.config))

    def txn_control(self) -> TransactionControl:
        from connectors.kafka.clients._kafka_python.transaction_control import KafkaPythonTransactionControl

        return KafkaPythonTransactionControl(self.bootstrap_servers, self._without_consumer_settings(self.config))
