"""librdkafka error codes land on the connector's error types, and every client maps a broker error
through the one table to the same type (no broker needed)."""

import pytest
from confluent_kafka import KafkaError

from connectors.kafka.clients._confluent.librdkafka import map_kafka_error
from connectors.kafka.clients._kafka_python.transaction_control import _map_error_code
from connectors.kafka.kafka_errors import (
    BrokerUnavailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    RecordTooLargeError,
    RetriableKafkaError,
    UnknownTopicError,
)
from connectors.simulated_kafka import injected_error


@pytest.mark.parametrize("code, expected", [
    (KafkaError._FENCED, ProducerFencedError),
    (KafkaError.INVALID_PRODUCER_EPOCH, InvalidProducerEpochError),
    (KafkaError.INVALID_TXN_STATE, InvalidTxnStateError),
    (KafkaError.MSG_SIZE_TOO_LARGE, RecordTooLargeError),
    (KafkaError.UNKNOWN_TOPIC_OR_PART, UnknownTopicError),
    (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, RetriableKafkaError),
    (KafkaError.CONCURRENT_TRANSACTIONS, RetriableKafkaError),
    (KafkaError.NOT_LEADER_FOR_PARTITION, RetriableKafkaError),
    (KafkaError.LEADER_NOT_AVAILABLE, RetriableKafkaError),
])
def test_mapping(code, expected):
    mapped = map_kafka_error(KafkaError(code), "doing something for 'tid-1'")
    assert isinstance(mapped, expected)
    assert "tid-1" in str(mapped)


@pytest.mark.parametrize("kafka_code, librdkafka_code, name, expected", [
    (90, KafkaError.PRODUCER_FENCED, "PRODUCER_FENCED", ProducerFencedError),
    (47, KafkaError.INVALID_PRODUCER_EPOCH, "INVALID_PRODUCER_EPOCH", InvalidProducerEpochError),
    (48, KafkaError.INVALID_TXN_STATE, "INVALID_TXN_STATE", InvalidTxnStateError),
    (3, KafkaError.UNKNOWN_TOPIC_OR_PART, "UNKNOWN_TOPIC_OR_PARTITION", UnknownTopicError),
    (10, KafkaError.MSG_SIZE_TOO_LARGE, "MESSAGE_TOO_LARGE", RecordTooLargeError),
    (7, KafkaError.REQUEST_TIMED_OUT, "REQUEST_TIMED_OUT", BrokerUnavailableError),
    (6, KafkaError.NOT_LEADER_FOR_PARTITION, "NOT_LEADER_OR_FOLLOWER", RetriableKafkaError),
    (51, KafkaError.CONCURRENT_TRANSACTIONS, "CONCURRENT_TRANSACTIONS", RetriableKafkaError),
])
def test_every_client_maps_a_broker_error_to_the_same_type(kafka_code, librdkafka_code, name, expected):
    librdkafka = map_kafka_error(KafkaError(librdkafka_code), "librdkafka")
    kafka_python = _map_error_code(kafka_code, "kafka-python")
    fake = injected_error(name, "produce")
    assert type(librdkafka) is type(kafka_python) is type(fake) is expected
