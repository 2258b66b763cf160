"""The one error table derives every broker error's class from Kafka's own classification
(kafka-python's ``kafka.errors``), overriding it by hand only where a code means something to the
protocol. The codes a rolling restart of a real 3-node cluster produced, which the table of 20
hand-written codes failed the query on, are retried."""

from __future__ import annotations

import kafka.errors as kafka_errors
import pytest

from connectors.kafka.clients.error_table import broker_error_names, error_type, is_stale_metadata, kafka_error
from connectors.kafka.kafka_errors import (
    BrokerUnavailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaConnectorError,
    OffsetOutOfRangeError,
    ProducerFencedError,
    RecordTooLargeError,
    RetriableKafkaError,
    TransactionalIdNotFoundError,
    TransactionTimeoutRefusedError,
    UnknownTopicError,
)


@pytest.mark.parametrize("code, name, stale", [
    (75, "UNKNOWN_LEADER_EPOCH", True),
    (74, "FENCED_LEADER_EPOCH", True),
    (9, "REPLICA_NOT_AVAILABLE", True),
    (56, "KAFKA_STORAGE_ERROR", True),
    (78, "OFFSET_NOT_AVAILABLE", False),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", False),
    (6, "NOT_LEADER_OR_FOLLOWER", True),
    (51, "CONCURRENT_TRANSACTIONS", False),
])
def test_what_kafka_deems_transient_is_retried(code: int, name: str, stale: bool) -> None:
    error = kafka_error(code, name, f"admin: list offsets of t-0: {name}")
    assert type(error) is RetriableKafkaError
    assert error.code == name and error.stale_metadata is stale
    assert is_stale_metadata(code) is stale


@pytest.mark.parametrize("code, expected", [
    (1, OffsetOutOfRangeError), (3, UnknownTopicError), (7, BrokerUnavailableError),
    (10, RecordTooLargeError), (18, RecordTooLargeError), (47, InvalidProducerEpochError),
    (48, InvalidTxnStateError), (49, TransactionalIdNotFoundError), (90, ProducerFencedError),
    (100, UnknownTopicError), (105, TransactionalIdNotFoundError),
])
def test_codes_that_mean_something_to_the_protocol_keep_their_own_error(code: int, expected: type) -> None:
    assert type(kafka_error(code, "X", "m")) is expected


def test_a_refused_transaction_timeout_is_its_own_error() -> None:
    assert isinstance(kafka_error(50, "INVALID_TRANSACTION_TIMEOUT", "m"), TransactionTimeoutRefusedError)


def test_every_code_kafka_defines_is_classified_as_kafka_does_unless_overridden() -> None:
    overridden = {1, 3, 7, 10, 18, 47, 48, 49, 50, 90, 100, 105}
    classified = 0
    for code, kafka_class in kafka_errors.kafka_errors.items():
        if code is None or code <= 0 or code in overridden:
            continue
        found = error_type(code)
        assert found is (RetriableKafkaError if kafka_class.retriable else KafkaConnectorError), kafka_class
        assert kafka_class.message in broker_error_names()
        classified += 1
    assert classified > 100  # the whole of Kafka's list, not a hand-picked few

