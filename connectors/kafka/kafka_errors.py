"""Errors raised by the Kafka connectors, all under :class:`KafkaConnectorError`.

The client seam (``connectors.kafka.clients``) translates librdkafka, kafka-python and fake-cluster errors into
these types (through the one table of ``clients/error_table.py``), so the source and the sink decide
what is retriable and what is lost in one place, whatever client sits behind the seam.
"""

from __future__ import annotations

# The lost transactions of a checkpoint are the core's (one error whatever the sink): named here too.
from twophase.errors import KafkaEosError, LostTransaction, TransactionLostError  # noqa: F401


class KafkaConnectorError(KafkaEosError):
    """Base class of every error raised by ``connectors.kafka``."""


class RetriableKafkaError(KafkaConnectorError):
    """A transient condition: coordinator loading or moved, concurrent transactions, network.

    ``code`` is Kafka's error name (for example ``COORDINATOR_LOAD_IN_PROGRESS``) when known.
    """

    def __init__(self, message: str, code: str | None = None, *, stale_metadata: bool = False) -> None:
        super().__init__(message)
        self.code = code
        #: Kafka says the client's metadata is stale (a leader or leader epoch moved): the retry
        #: must look the cluster up again, which the retrying admin does with a new client.
        self.stale_metadata = stale_metadata


class BrokerUnavailableError(RetriableKafkaError):
    """No broker answered within the client's timeout."""


class KafkaUnreachableError(BrokerUnavailableError):
    """Kafka did not serve a request within the retry bounds of a running query (a cluster that
    lost its quorum or in-sync replicas, or is unreachable), after every transient error had been
    retried. The message is one line naming what was unreachable, the bound, and the last error.
    Still a transient condition (a later batch or a restart may find the cluster back), but this
    request's retries are spent."""

    def __init__(self, message: str, *, what: str, code: str | None = None,
                 last_error: Exception | None = None) -> None:
        super().__init__(message)
        #: What was being done, e.g. ``describing topic input``.
        self.what = what
        #: Kafka's (or librdkafka's) name of the last error.
        self.code = code
        #: The last transient error, whose message ends this one's.
        self.last_error = last_error


class ProducerFencedError(KafkaConnectorError):
    """A newer producer initialised the same transactional id (PRODUCER_FENCED, error 90).

    The fenced producer's open transaction was aborted by the broker: its data is gone.
    """


class InvalidProducerEpochError(KafkaConnectorError):
    """The (producer id, epoch) pair is older than the broker's (INVALID_PRODUCER_EPOCH, error 47)."""


class InvalidTxnStateError(KafkaConnectorError):
    """The transaction is in a state that does not allow the request (INVALID_TXN_STATE, error 48),
    for example a commit of a transaction that was already aborted."""


class TransactionalIdNotFoundError(KafkaConnectorError):
    """The broker has no state for this transactional id (expired or never initialised)."""


class KafkaAuthorizationError(KafkaConnectorError):
    """The brokers' authorizer refused a request (``*_AUTHORIZATION_FAILED``): an ACL is missing.

    The message is one line naming the principal, the operations and the resource, and the
    ``kafka-acls.sh`` command that grants them (``connectors.kafka.authorization``). Not retriable:
    waiting does not grant an ACL.
    """

    def __init__(self, message: str, *, principal: str | None, operations: tuple[str, ...],
                 resource_type: str, resource_name: str, pattern: str, code: str) -> None:
        super().__init__(message)
        #: ``User:app``, or None where the client's settings do not say (certificates, tokens).
        self.principal = principal
        self.operations = operations
        #: Kafka's resource type: TOPIC, GROUP, TRANSACTIONAL_ID or CLUSTER.
        self.resource_type = resource_type
        self.resource_name = resource_name
        #: LITERAL or PREFIXED.
        self.pattern = pattern
        #: Kafka's error name, e.g. TOPIC_AUTHORIZATION_FAILED.
        self.code = code


class TransactionTimeoutRefusedError(KafkaConnectorError, ValueError):
    """The sink's transaction timeout exceeds the brokers' ``transaction.max.timeout.ms``: read from
    the brokers (DescribeConfigs), or refused by them at InitProducerId (INVALID_TRANSACTION_TIMEOUT).
    A configuration error: the message names the option and the limit."""

    @classmethod
    def exceeding(cls, timeout_ms: int | str | None, limit_ms: int | str | None = None, *,
                  how: str) -> "TransactionTimeoutRefusedError":
        """``how``: how the refusal was learnt, e.g. ``read with DescribeConfigs``."""
        timeout = f"={timeout_ms}" if timeout_ms is not None else ""
        limit = f"={limit_ms}" if limit_ms is not None else ""
        bound = f"at most {limit_ms}" if limit_ms is not None else "at most that limit (15 minutes by default)"
        return cls(f"eos.transactionTimeoutMs{timeout} (the producers' transaction.timeout.ms) exceeds the "
                   f"brokers' transaction.max.timeout.ms{limit} ({how}); set eos.transactionTimeoutMs (or "
                   f"kafka.transaction.timeout.ms) to {bound}, or raise transaction.max.timeout.ms on the brokers")


class UnknownTopicError(KafkaConnectorError):
    """The topic does not exist."""


class RecordTooLargeError(KafkaConnectorError):
    """A record is larger than the broker (or producer) accepts (MESSAGE_TOO_LARGE)."""


class OffsetOutOfRangeError(KafkaConnectorError):
    """Requested offsets are no longer (or not yet) in the partition's log."""


class UnsupportedClientSettingError(KafkaConnectorError, ValueError):
    """A ``kafka.*`` option that the transaction control plane (kafka-python) cannot honour."""


class DataLossError(KafkaConnectorError, RuntimeError):
    """Offsets a checkpoint asks for are gone (retention or compaction) and failOnDataLoss is on."""
