"""librdkafka error codes land on the connector's error types (no broker needed)."""

import pytest
from confluent_kafka import KafkaError

from connectors.kafka.confluent_clients import map_kafka_error
from connectors.kafka.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    RecordTooLargeError,
    RetriableKafkaError,
    UnknownTopicError,
)


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
