"""Simulated Kafka (``fake-kafka://<file>``) for ``kafka-eos demo`` and the unit tests: faithful to the
transactional semantics the protocol relies on, and checked by the same conformance checks as a real
broker (``kafka_testkit/kafka_conformance.py``). A run on it is never evidence about a real broker."""

from connectors.simulated_kafka.clients import FakeClusterAdmin, FakeProducer, FakeRecordReader, FakeTransactionControl
from connectors.simulated_kafka.fake_kafka import FAKE_SCHEME, FakeKafkaClients
from connectors.simulated_kafka.records import LogEntry
from connectors.simulated_kafka.store import INJECTABLE_ERROR_NAMES, OPERATIONS, injected_error

__all__ = [
    "FAKE_SCHEME",
    "INJECTABLE_ERROR_NAMES",
    "OPERATIONS",
    "FakeClusterAdmin",
    "FakeKafkaClients",
    "FakeProducer",
    "FakeRecordReader",
    "FakeTransactionControl",
    "LogEntry",
    "injected_error",
]
