"""Errors raised by the Kafka connectors, all under :class:`KafkaConnectorError`.

The client seam (``connectors.kafka.clients``) translates librdkafka, kafka-python and fake-cluster errors into
these types (through the one table of ``clients/error_table.py``), so the source and the sink decide
what is retriable and what is lost in one place, whatever client sits behind the seam.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from twophase.errors import KafkaEosError, UnrecoverableCommitError


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


@dataclass(frozen=True)
class LostTransaction:
    """One transaction of a checkpoint that can no longer be committed: what was lost."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    record_count: int
    #: ``topic-partition`` names where the records were explicitly addressed (empty when the
    #: producer's partitioner chose: the client does not learn those partitions).
    partitions: tuple[str, ...] = ()
    #: Why the broker refused the commit, in a few words.
    reason: str = ""

    def describe(self) -> str:
        where = f" on {', '.join(self.partitions)}" if self.partitions else ""
        return (f"{self.transactional_id} ({_counted(self.record_count, 'record')}{where}; producer id "
                f"{self.producer_id}, epoch {self.producer_epoch})")


class TransactionLostError(KafkaConnectorError, UnrecoverableCommitError):
    """Pre-committed transactions of one checkpoint can no longer be committed: their data will
    never be visible.

    Raised instead of ever passing over such a loss silently, once per checkpoint, listing every
    transaction of it that was lost (:attr:`lost`) after the commit of each was attempted. Typical
    causes: the transactions exceeded ``transaction.timeout.ms`` and the broker aborted them, or
    another producer re-initialised their transactional ids (PRODUCER_FENCED).
    """

    def __init__(self, message: str, *, checkpoint_id: int | None, lost: Sequence[LostTransaction]) -> None:
        super().__init__(message)
        self.checkpoint_id = checkpoint_id
        self.lost: tuple[LostTransaction, ...] = tuple(lost)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments: the default reduce would call __init__(message) alone.
        return (_rebuild_transaction_lost, (str(self), self.checkpoint_id, self.lost))

    @classmethod
    def for_checkpoint(cls, checkpoint_id: int | None, lost: Sequence[LostTransaction],
                       committed: int = 0) -> "TransactionLostError":
        """The one error of a checkpoint's losses, its message one paragraph: what was lost, why
        a restart cannot help, and what to do instead. ``committed``: the checkpoint's other
        transactions that did commit (a rewind would write their records twice)."""
        lost = sorted(lost, key=lambda t: t.transactional_id)
        count, records = len(lost), sum(t.record_count for t in lost)
        where = "" if checkpoint_id is None else f"checkpoint {checkpoint_id}: "
        reasons = sorted({t.reason for t in lost if t.reason})
        why = f". Cause: {'; '.join(reasons)}" if reasons else ""
        again = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "the checkpoint"
        message = (
            f"{where}{_counted(count, 'transaction')} with {_counted(records, 'record')} "
            f"{'were' if count != 1 else 'was'} lost (aborted by the broker before commit, e.g. past "
            f"transaction.timeout.ms): {', '.join(t.describe() for t in lost)}{why}. Those records will "
            f"never be visible, and a restart cannot bring them back: it commits {again} again and "
            "fails the same way. Re-produce them from the source: rewind the input to where the "
            "checkpoint began (for a Spark query `kafka-eos status` shows the source offsets) under a "
            "new checkpoint location and sink state, or replay them by hand"
            + (f" (its other {committed} transaction{'s' if committed != 1 else ''} did commit: a rewind "
               "writes their records again, so replay only the lost ones' then)" if committed else "")
            + "; then keep commits and "
            "restarts within transaction.timeout.ms, or raise it (eos.transactionTimeoutMs, at most "
            "the brokers' transaction.max.timeout.ms).")
        return cls(message, checkpoint_id=checkpoint_id, lost=lost)

    @classmethod
    def merged(cls, checkpoint_id: int, errors: Sequence[UnrecoverableCommitError],
               committables: Sequence[object]) -> "TransactionLostError":
        """One error for every loss of a checkpoint (its first transaction is committed alone,
        then the rest; several sinks may lose some), counting how many of its ``committables``
        (``KafkaCommittable``, or ``(checkpoint id, KafkaCommittable)``) did commit."""
        lost = [t for error in errors for t in getattr(error, "lost", ())]
        ends = [item[1] if isinstance(item, tuple) else item for item in committables]
        transactional = sum(1 for c in ends if getattr(c, "transactional_id", None) is not None
                            and getattr(c, "record_count", 0))
        return cls.for_checkpoint(checkpoint_id, lost, committed=max(0, transactional - len(lost)))

    @property
    def transactional_ids(self) -> tuple[str, ...]:
        return tuple(t.transactional_id for t in self.lost)

    @property
    def transactional_id(self) -> str:
        """The first lost transaction's id (for callers written when the error named one)."""
        return self.lost[0].transactional_id if self.lost else ""

    @property
    def transaction_count(self) -> int:
        return len(self.lost)

    @property
    def record_count(self) -> int:
        """Records of every lost transaction."""
        return sum(t.record_count for t in self.lost)


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _rebuild_transaction_lost(message: str, checkpoint_id: int | None,
                              lost: tuple[LostTransaction, ...]) -> TransactionLostError:
    return TransactionLostError(message, checkpoint_id=checkpoint_id, lost=lost)
