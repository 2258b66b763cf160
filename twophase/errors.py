"""The kit's error root, and the errors of the protocol core, whatever the external system.

Every exception the kit raises to its users derives from :class:`KafkaEosError`, so an application
can tell the kit's failures from its own with one ``except``. Each package keeps its errors in its
own ``errors.py`` (``connectors.kafka.errors``, ``connectors.spark.errors``,
``connectors.monitoring.errors``, ``connectors.tools.errors``, ``kafka_testkit.errors``); this
module imports nothing, so every process may import it.

Errors that used to be plain Python exceptions keep that base too (``ValueError`` for bad input,
``RuntimeError`` for a state the kit refuses), so code written against the old bases still catches
them.
"""

from __future__ import annotations

from typing import Sequence


class KafkaEosError(Exception):
    """The root of every error the kit raises to its users."""


class UnrecoverableCommitError(KafkaEosError):
    """A commit that no retry can make succeed (the transaction is gone). The coordinator does
    not retry commits that fail with it; it commits the checkpoint's other transactions all the
    same, then raises one error for all of the checkpoint's losses (:meth:`merged`)."""

    @classmethod
    def merged(cls, checkpoint_id: int, errors: Sequence["UnrecoverableCommitError"],
               committables: Sequence[object]) -> "UnrecoverableCommitError":
        """One error for every loss of checkpoint ``checkpoint_id`` (``errors``, raised by the
        commits of its ``committables``). A connector whose error can list its losses overrides
        this; the default is the first error."""
        return errors[0]


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
