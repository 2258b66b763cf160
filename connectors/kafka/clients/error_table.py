"""Kafka's errors, and the connector error each one becomes: the one table every client uses.

librdkafka (the data path), kafka-python (the transaction control plane) and the kit's test cluster
name the same broker error differently (``UNKNOWN_TOPIC_OR_PART``, ``UNKNOWN_TOPIC_OR_PARTITION``);
the code a broker sends is the same everywhere. Each client hands :func:`kafka_error` that code (or
librdkafka's name of a local error, or Kafka's name), so what is retriable, what is lost and what is
refused is decided here once, whatever client met the error.

Kafka itself classifies every broker error code: retriable or not, and whether the client's
metadata is stale (``org.apache.kafka.common.protocol.Errors``; kafka-python's ``kafka.errors``
carries the same classification of all of them, with ``errno``, ``retriable`` and
``invalid_metadata``). The table takes that classification for every code, and overrides it by
hand only where a code means something to the exactly-once protocol or to the user: fenced, an
invalid transaction state, an unknown producer or transactional id, a refused transaction timeout,
a missing topic, an offset out of range, a record too large. So a broker error no test has met yet
(``UNKNOWN_LEADER_EPOCH`` during a rolling restart, ``KAFKA_STORAGE_ERROR``, ...) is retried when
Kafka says it is transient, instead of failing the query.

The table is built at the first error, not at import: importing kafka-python's ``kafka.errors``
imports the whole ``kafka`` package (about 0.1 s), and every Python process of a query (each task
worker, the source runner, the read planning) imports this module through librdkafka's clients,
though most of them never meet an error (bench/README.md, the first batch).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from connectors.kafka.authorization import AUTHORIZATION_ERROR_NAMES, Denied
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

#: Kafka's INVALID_TRANSACTION_TIMEOUT: the producer's transaction timeout exceeds the brokers' limit.
INVALID_TRANSACTION_TIMEOUT = 50

# The codes whose meaning to the protocol (or to the user) is not just "retriable or not", by
# Kafka's code and name. Every other code takes Kafka's own classification (_classified).
_PROTOCOL_ERRORS: dict[int, tuple[str, type[KafkaConnectorError]]] = {
    1: ("OFFSET_OUT_OF_RANGE", OffsetOutOfRangeError),
    # Retriable to Kafka (stale metadata), but to a query a topic that does not exist is an error
    # to name; the source and the sink look a new topic up again before they give up.
    3: ("UNKNOWN_TOPIC_OR_PARTITION", UnknownTopicError),
    7: ("REQUEST_TIMED_OUT", BrokerUnavailableError),
    10: ("MESSAGE_TOO_LARGE", RecordTooLargeError),
    18: ("RECORD_LIST_TOO_LARGE", RecordTooLargeError),
    47: ("INVALID_PRODUCER_EPOCH", InvalidProducerEpochError),
    48: ("INVALID_TXN_STATE", InvalidTxnStateError),
    49: ("INVALID_PRODUCER_ID_MAPPING", TransactionalIdNotFoundError),
    90: ("PRODUCER_FENCED", ProducerFencedError),
    100: ("UNKNOWN_TOPIC_ID", UnknownTopicError),
    105: ("TRANSACTIONAL_ID_NOT_FOUND", TransactionalIdNotFoundError),
}


def _kafka_classification() -> dict[int, tuple[str, type[KafkaConnectorError], bool]]:
    """Every broker error code Kafka defines: its name, the connector error it becomes, and
    whether it means the client's metadata is stale (Kafka's InvalidMetadataException)."""
    import kafka.errors as kafka_errors

    table: dict[int, tuple[str, type[KafkaConnectorError], bool]] = {}
    for code, error in kafka_errors.kafka_errors.items():
        if code is None or code <= 0:  # NONE, and UNKNOWN_SERVER_ERROR (-1): nothing to classify
            continue
        retriable = bool(getattr(error, "retriable", False))
        table[code] = (error.message, RetriableKafkaError if retriable else KafkaConnectorError,
                       bool(getattr(error, "invalid_metadata", False)))
    for code, (name, error_type) in _PROTOCOL_ERRORS.items():
        stale = table.get(code, (name, error_type, False))[2]
        table[code] = (name, error_type, stale)
    return table


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


@dataclass(frozen=True)
class _Table:
    #: Kafka's code -> (Kafka's name, the connector error, whether the metadata is stale).
    by_code: dict[int, tuple[str, type[KafkaConnectorError], bool]]
    #: Kafka's and librdkafka's names -> the connector error.
    by_name: dict[str, type[KafkaConnectorError]]
    #: The codes and names that mean the client's metadata is stale.
    stale_metadata: frozenset[int | str]


@functools.cache
def _table() -> _Table:
    by_code = _kafka_classification()
    by_name: dict[str, type[KafkaConnectorError]] = {
        **{name: error_type for name, error_type, _ in by_code.values()},
        # Kafka's current names where kafka-python keeps an older one.
        **{name: error_type for name, error_type in _PROTOCOL_ERRORS.values()},
        "NOT_LEADER_OR_FOLLOWER": RetriableKafkaError,
        **_LIBRDKAFKA_LOCAL_ERRORS,
    }
    stale = frozenset([code for code, (_, _, is_stale) in by_code.items() if is_stale]
                      + [name for name, _, is_stale in by_code.values() if is_stale] + ["NOT_LEADER_OR_FOLLOWER"])
    return _Table(by_code, by_name, stale)


def broker_error_names() -> frozenset[str]:
    """Kafka's names of the broker errors in the table."""
    return frozenset(name for name, _, _ in _table().by_code.values()) | {
        name for name, _ in _PROTOCOL_ERRORS.values()} | {"NOT_LEADER_OR_FOLLOWER"}


def error_type(code: int | str) -> type[KafkaConnectorError] | None:
    """The connector error type of Kafka's error ``code``, or of a local error's or broker error's
    name; None for an error outside the table."""
    if isinstance(code, int):
        found = _table().by_code.get(code)
        return found[1] if found is not None else None
    return _table().by_name.get(code)


def is_stale_metadata(code: int | str) -> bool:
    """Whether Kafka says error ``code`` (or name) means the client's metadata is out of date (a
    leader moved, a replica or a leader epoch is unknown): the retry must look it up again."""
    return code in _table().stale_metadata


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
        return found(message, code=name, stale_metadata=is_stale_metadata(code))
    return found(message)
