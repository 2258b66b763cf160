"""Kafka's errors, and the connector error each one becomes: the one table every client uses.

librdkafka (the data path), kafka-python (the transaction control plane) and the kit's test cluster
name the same broker error differently (``UNKNOWN_TOPIC_OR_PART``, ``UNKNOWN_TOPIC_OR_PARTITION``);
the code a broker sends is the same everywhere. Each client hands :func:`kafka_error` that code (or
librdkafka's name of a local error, or Kafka's name), so what is retriable, what is lost and what is
refused is decided here once, whatever client met the error.
"""

from __future__ import annotations

from connectors.kafka.authorization import AUTHORIZATION_ERROR_NAMES, Denied
from connectors.kafka.errors import (
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

#: Kafka's INVALID_TRANSACTION_TIMEOUT: the producer's transaction timeout exceeds the brokers' limit.
INVALID_TRANSACTION_TIMEOUT = 50

# Broker errors by Kafka's code and name (org.apache.kafka.common.protocol.Errors).
_BROKER_ERRORS: dict[int, tuple[str, type[KafkaConnectorError]]] = {
    1: ("OFFSET_OUT_OF_RANGE", OffsetOutOfRangeError),
    3: ("UNKNOWN_TOPIC_OR_PARTITION", UnknownTopicError),
    5: ("LEADER_NOT_AVAILABLE", RetriableKafkaError),
    6: ("NOT_LEADER_OR_FOLLOWER", RetriableKafkaError),
    7: ("REQUEST_TIMED_OUT", BrokerUnavailableError),
    10: ("MESSAGE_TOO_LARGE", RecordTooLargeError),
    13: ("NETWORK_EXCEPTION", RetriableKafkaError),
    14: ("COORDINATOR_LOAD_IN_PROGRESS", RetriableKafkaError),
    15: ("COORDINATOR_NOT_AVAILABLE", RetriableKafkaError),
    16: ("NOT_COORDINATOR", RetriableKafkaError),
    18: ("RECORD_LIST_TOO_LARGE", RecordTooLargeError),
    19: ("NOT_ENOUGH_REPLICAS", RetriableKafkaError),
    47: ("INVALID_PRODUCER_EPOCH", InvalidProducerEpochError),
    48: ("INVALID_TXN_STATE", InvalidTxnStateError),
    49: ("INVALID_PRODUCER_ID_MAPPING", TransactionalIdNotFoundError),
    51: ("CONCURRENT_TRANSACTIONS", RetriableKafkaError),
    90: ("PRODUCER_FENCED", ProducerFencedError),
    100: ("UNKNOWN_TOPIC_ID", UnknownTopicError),
    105: ("TRANSACTIONAL_ID_NOT_FOUND", TransactionalIdNotFoundError),
}

# librdkafka's local errors (negative codes, names with a leading underscore) that stand for one of
# the broker's: the client's own view of a fencing, a missing topic, a broker it cannot reach.
_LIBRDKAFKA_LOCAL_ERRORS: dict[str, type[KafkaConnectorError]] = {
    "_FENCED": ProducerFencedError,
    "_STATE": InvalidTxnStateError,
    "_UNKNOWN_TOPIC": UnknownTopicError,
    "_UNKNOWN_PARTITION": UnknownTopicError,
    "_AUTO_OFFSET_RESET": OffsetOutOfRangeError,
    "_TRANSPORT": BrokerUnavailableError,
    # A request in flight to a node that left the cluster's metadata (it went down): another node
    # serves its partitions once the cluster has moved them.
    "_DESTROY_BROKER": BrokerUnavailableError,
    "_ALL_BROKERS_DOWN": BrokerUnavailableError,
    "_TIMED_OUT": BrokerUnavailableError,
    "_MSG_TIMED_OUT": BrokerUnavailableError,
    "_TIMED_OUT_QUEUE": BrokerUnavailableError,
    "_RESOLVE": BrokerUnavailableError,
}

_BY_NAME: dict[str, type[KafkaConnectorError]] = {
    **{name: error_type for name, error_type in _BROKER_ERRORS.values()},
    **_LIBRDKAFKA_LOCAL_ERRORS,
}

#: Kafka's names of the broker errors in the table.
BROKER_ERROR_NAMES: frozenset[str] = frozenset(name for name, _ in _BROKER_ERRORS.values())


def error_type(code: int | str) -> type[KafkaConnectorError] | None:
    """The connector error type of Kafka's error ``code``, or of a local error's or broker error's
    name; None for an error outside the table."""
    if isinstance(code, int):
        found = _BROKER_ERRORS.get(code)
        return found[1] if found is not None else None
    return _BY_NAME.get(code)


def kafka_error(code: int | str, name: str, message: str, *, retriable: bool = False,
                denied: Denied | None = None) -> KafkaConnectorError:
    """The connector error for Kafka's error ``code`` (see :func:`error_type`).

    ``name`` is the client's name of the error, kept as a retriable error's ``code``; ``message``
    says what was being done, for whom, and what the client reported. ``retriable``: whether the
    client deems an error outside the table transient. ``denied`` builds the error of a refused
    request where the caller knows what that request needed (principal, operation, resource)."""
    if code in AUTHORIZATION_ERROR_NAMES and denied is not None:
        return denied(AUTHORIZATION_ERROR_NAMES[code])
    if code == INVALID_TRANSACTION_TIMEOUT:
        return TransactionTimeoutRefusedError.exceeding(None, how=f"refused: {message}")
    found = error_type(code)
    if found is None:
        found = RetriableKafkaError if retriable else KafkaConnectorError
    if issubclass(found, RetriableKafkaError):
        return found(message, code=name)
    return found(message)
