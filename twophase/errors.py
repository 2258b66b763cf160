"""The kit's error root, and the errors of the protocol core, whatever the external system.

Every exception the kit raises to its users derives from :class:`KafkaEosError`, so an application
can tell the kit's failures from its own with one ``except``. Each package keeps its errors in an
errors module named for it (``connectors.kafka.kafka_errors``, ``connectors.spark.spark_errors``,
``connectors.monitoring.monitoring_errors``, ``connectors.tools.tool_errors``,
``connectors.servers.server_errors``); this module imports nothing, so every process may import it.

Errors that used to be plain Python exceptions keep that base too (``ValueError`` for bad input,
``RuntimeError`` for a state the kit refuses), so code written against the old bases still catches
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


class KafkaEosError(Exception):
    """The root of every error the kit raises to its users."""


class UnrecoverableCommitError(KafkaEosError):
    """A commit that no retry can make succeed (the transaction is gone)."""


@dataclass(frozen=True)
class LostTransaction:
    """One transaction of a stored checkpoint that can no longer be committed: what was lost. The
    outcome ``LOST`` of ending it (``twophase/transaction_endings.py``) carries it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    record_count: int
    #: ``topic-partition`` names where the records were explicitly addressed (empty when the
    #: producer's partitioner chose: the client does not learn those partitions).
    partitions: tuple[str, ...] = ()
    #: Why the external system refused the commit, in a few words.
    reason: str = ""
    #: What the external system did with such a transaction, in the sink's words (e.g. "aborted by
    #: the broker before commit").
    what_happened: str = ""
    #: How to keep it from happening again, in the sink's words (its settings).
    prevention: str = ""

    def describe(self) -> str:
        where = f" on {', '.join(self.partitions)}" if self.partitions else ""
        return (f"{self.transactional_id} ({_counted(self.record_count, 'record')}{where}; producer id "
                f"{self.producer_id}, epoch {self.producer_epoch})")


class TransactionLostError(UnrecoverableCommitError):
    """Pre-committed transactions of one checkpoint can no longer be committed: their data will
    never be visible.

    Raised instead of ever passing over such a loss silently, once per checkpoint, listing every
    transaction of it that was lost (:attr:`lost`) after the commit of each was attempted (the rule
    of ``twophase/transaction_endings.py``). Typical causes: the transactions exceeded their
    timeout and the external system aborted them, or another producer took over their ids.
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
        happened = "; ".join(sorted({t.what_happened for t in lost if t.what_happened}))
        reasons = sorted({t.reason for t in lost if t.reason})
        prevention = "; ".join(sorted({t.prevention for t in lost if t.prevention}))
        why = f". Cause: {'; '.join(reasons)}" if reasons else ""
        again = f"checkpoint {checkpoint_id}" if checkpoint_id is not None else "the checkpoint"
        message = (
            f"{where}{_counted(count, 'transaction')} with {_counted(records, 'record')} "
            f"{'were' if count != 1 else 'was'} lost{f' ({happened})' if happened else ''}: "
            f"{', '.join(t.describe() for t in lost)}{why}. Those records will "
            f"never be visible, and a restart cannot bring them back: it commits {again} again and "
            "fails the same way. Re-produce them from the source: rewind the input to where the "
            "checkpoint began (for a Spark query `kafka-eos status` shows the source offsets) under a "
            "new checkpoint location and sink state, or replay them by hand"
            + (f" (its other {committed} transaction{'s' if committed != 1 else ''} did commit: a rewind "
               "writes their records again, so replay only the lost ones' then)" if committed else "")
            + (f"; then {prevention}" if prevention else "") + ".")
        return cls(message, checkpoint_id=checkpoint_id, lost=lost)

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


class CheckpointTriggerError(KafkaEosError, RuntimeError):
    """A checkpoint could not be triggered now (too many in flight, id not increasing, stopped)."""


class CheckpointAbortedError(KafkaEosError, RuntimeError):
    """A pending checkpoint was aborted (a participant declined, failed, or timed out).

    What its sinks pre-committed is aborted too, so the job must rewind to the last completed
    checkpoint before going on: the in-process pipeline does that by restoring."""

    def __init__(self, checkpoint_id: int, cause: str) -> None:
        super().__init__(f"checkpoint {checkpoint_id} aborted: {cause}")
        self.checkpoint_id = checkpoint_id
        self.cause = cause


class CheckpointFailureError(KafkaEosError, RuntimeError):
    """More consecutive checkpoint failures than ``tolerable_failed_checkpoints``: fail the job."""


class CheckpointCommitError(KafkaEosError, RuntimeError):
    """A stored checkpoint's commit could not be confirmed after bounded retries.

    Nothing is lost: the checkpoint stays in the store unmarked, and restoring from it commits its
    transactions again."""

    def __init__(self, checkpoint_id: int, participant: str, cause: BaseException) -> None:
        super().__init__(
            f"checkpoint {checkpoint_id} is stored but participant {participant!r} could not "
            f"commit it: {cause!r}; restore to commit it again"
        )
        self.checkpoint_id = checkpoint_id
        self.participant = participant


class CheckpointExistsError(KafkaEosError, FileExistsError):
    """Checkpoint ``id`` is already stored: another writer (a second or zombie driver of the same
    job) stored it first. What it stored stays; this writer must not commit."""


class CorruptCheckpointError(KafkaEosError, ValueError):
    """A ``_metadata`` file that is truncated, tampered with, or of an unknown format version."""


class CorruptOwnerError(KafkaEosError, ValueError):
    """An ``_owner`` record that is not a valid document of a known format version."""


class UnsupportedStateLocationError(KafkaEosError, ValueError):
    """A state location whose scheme the kit cannot open; the message names what would work."""


class ConditionalCreateUnsupportedError(KafkaEosError, RuntimeError):
    """The storage accepted a second create of an existing key: it ignores ``If-None-Match``."""


class FailpointCrash(KafkaEosError, RuntimeError):
    """Raised by a failpoint with the ``raise`` action: a simulated crash at that point."""

    def __init__(self, name: str) -> None:
        super().__init__(f"failpoint {name!r} fired")
        self.name = name


class CorruptStatisticsError(KafkaEosError, ValueError):
    """A checkpoint's ``_statistics`` file that is not a valid document of a known format version."""


class NewerStateFormatError(KafkaEosError, RuntimeError):
    """A state file written by a newer version of the kit (its ``format_version`` is higher than
    any this version reads): a downgrade. Refused in one line naming the file, its version, the
    versions this kit reads and what to do; the file is never rewritten. Not a corrupt file: no
    caller falls back to older state past it (``twophase/state_versions.py``)."""

    def __init__(self, message: str, *, location: str = "", version: int | None = None,
                 readable: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.location = location
        self.version = version
        self.readable = readable

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_newer_state, (str(self), self.location, self.version, self.readable))


def _rebuild_newer_state(message: str, location: str, version: int | None,
                         readable: tuple[int, ...]) -> "NewerStateFormatError":
    return NewerStateFormatError(message, location=location, version=version, readable=readable)


# The general errors: what the kit raises where no more specific error above (or in a package's
# errors.py) says more. Each keeps the builtin base it used to be raised as.


class InvalidValueError(KafkaEosError, ValueError):
    """A value the kit cannot use: an argument, a setting, an option, a field of a record or of a
    stored document. The message names it and what would be valid."""


class InvalidTypeError(KafkaEosError, TypeError):
    """A value of a type the kit cannot use, e.g. a record field that is neither bytes nor str."""


class IllegalStateError(KafkaEosError, RuntimeError):
    """A call the kit refuses in the current state (e.g. registering a participant after
    ``restore()``), or a state it found and must not go on from (e.g. tasks of one batch that
    wrote under different checkpoints)."""


class MissingExtraError(KafkaEosError, RuntimeError):
    """A feature needs a package of an optional extra that is not installed; the message names
    the ``pip install 'pyspark-kafka-eos[EXTRA]'`` that adds it."""


class StateStorageError(KafkaEosError, OSError):
    """The kit's state storage could not do an operation (opened read-only, the store refused)."""


class StateFileExistsError(KafkaEosError, FileExistsError):
    """A state file (or savepoint) the kit creates exactly once already exists."""


class StateFileNotFoundError(KafkaEosError, FileNotFoundError):
    """A state file (or savepoint) the kit needs does not exist."""
