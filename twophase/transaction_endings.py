"""Ending transactions: the one loop (:func:`end_transactions`) that commits or aborts them, for a
checkpoint's commit, a recovery, an abort and a sweep; the one layer that retries them; and the
committer contract (:class:`TransactionCommitter`, Flink's ``Committer``), whose attempts answer one
:class:`Ending` per transaction. Three names, three layers: the **loop** runs **attempts**
(``attempt_endings``), and the Kafka committer makes an attempt as **EndTxn rounds**
(``TransactionControl.end_txn_round``). The outcomes and the rule that follows a failure (steps
1-4 below, all in :func:`end_transactions`, which settles what it ended before it returns):
``design/exactly-once-protocol.md``, "Ending transactions".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from abc import ABC, abstractmethod
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Generic, Sequence, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_exponential, wait_random

from twophase.errors import (
    CheckpointCommitError,
    IllegalStateError,
    LostTransaction,
    TransactionLostError,
    UnrecoverableCommitError,
)

if TYPE_CHECKING:
    from twophase.checkpoint_statistics import CommitFigures

log = logging.getLogger(__name__)

#: The first wait between two attempts, doubled up to ``MAX_WAIT_S``, jittered so that parallel
#: endings that failed together do not retry in lockstep.
FIRST_WAIT_S = 0.05
MAX_WAIT_S = 2.0
Committable = TypeVar("Committable")

_WAIT = wait_exponential(multiplier=FIRST_WAIT_S, max=MAX_WAIT_S) + wait_random(0, FIRST_WAIT_S)


class EndingOutcome(str, Enum):
    """What one attempt at ending one transaction gave (the module doc says what each means)."""

    ENDED = "ended"
    RETRY_LATER = "retry_later"
    LOST = "lost"
    FAILED = "failed"


@dataclass(frozen=True)
class Ending:
    """What one attempt at ending one transaction gave."""

    outcome: EndingOutcome
    #: The transaction's id; None for a committable with nothing to end (nothing was written).
    transaction: str | None = None
    #: The failure (``RETRY_LATER``, ``LOST``, ``FAILED``).
    error: BaseException | None = None
    #: What was lost (``LOST`` only).
    lost: LostTransaction | None = None

    @classmethod
    def ended(cls, transaction: str | None) -> "Ending":
        return cls(EndingOutcome.ENDED, transaction)

    @classmethod
    def retry_later(cls, transaction: str | None, error: BaseException) -> "Ending":
        return cls(EndingOutcome.RETRY_LATER, transaction, error)

    @classmethod
    def lost_with(cls, transaction: str | None, lost: LostTransaction, error: BaseException) -> "Ending":
        return cls(EndingOutcome.LOST, transaction, error, lost)

    @classmethod
    def failed(cls, transaction: str | None, error: BaseException) -> "Ending":
        return cls(EndingOutcome.FAILED, transaction, error)


class TransactionCommitter(ABC, Generic[Committable]):
    """Ends a sink's pre-committed transactions (Flink's ``Committer``): one attempt at each, and
    which transactions linger. When each runs, what is retried and what follows a failure is the
    commit lifecycle's, through the loop of this module."""

    #: Stable name, for log lines and errors.
    name: str
    #: How long the one retry layer attempts again a transaction whose ending asked to be retried
    #: later (the Kafka sink: ``eos.brokerRetryTimeoutMs``).
    retry_timeout_s: float = 60.0

    @abstractmethod
    def attempt_endings(self, committables: Sequence[tuple[int, Committable]], commit: bool) -> list[Ending]:
        """One attempt at committing (``commit``) or aborting each, answering exactly one
        :class:`Ending` each, in order. Never retries, and never raises
        for one transaction's failure: the outcome says it. A commit of a committed transaction is
        ended (commits are idempotent); so is an abort of one already ended."""

    @abstractmethod
    def lingering_transactions(self, keep: Sequence[Committable]) -> list[tuple[int, Committable]]:
        """Every open transaction of this sink except those in ``keep``: transactions nobody will
        ever end, which stall readers until they do. The lifecycle aborts them (the sweep)."""

    def figures(self, committables: Sequence[Committable]) -> "CommitFigures | None":
        """What the checkpoint's statistics record of ``committables`` (the lifecycle adds what was
        lost of them); None (the default): nothing is recorded."""
        return None


@dataclass(frozen=True)
class EndRequest:
    """One transaction to end: the committer that ends it, with the checkpoint it was
    pre-committed for and its committable."""

    committer: TransactionCommitter[Any]
    checkpoint_id: int
    committable: Any


def end_transactions(requests: Sequence[EndRequest], *, commit: bool, checkpoint_id: int | None,
                     after_first: Callable[[], None] | None = None,
                     first_commit_of_stored: bool = False) -> list[Ending]:
    """End every request: 1. every transaction is attempted, whatever becomes of the others; 2. those
    that answered ``RETRY_LATER`` are attempted again, together, with jittered exponential backoff,
    until each has another outcome or the committers' ``retry_timeout_s`` passed; 3. what did not
    end is raised (:func:`_settle`). Returns each one's :class:`Ending`, in order, once all ended.
    ``after_first``: called once the first request had its first attempt, before the others have
    theirs (the ``mid_commit`` failpoint's place). ``first_commit_of_stored``: the first commit of
    a checkpoint just stored, whose failure (other than a loss) is a CheckpointCommitError naming
    the participant: stored, not confirmed, so a restore commits it again."""
    endings: list[Ending | None] = [None] * len(requests)
    action = "commit" if commit else "abort"
    bound_s = max((r.committer.retry_timeout_s for r in requests), default=0.0)

    def attempt(indices: list[int]) -> list[int]:
        """One attempt at each of ``indices``, committer by committer; the ones still to retry."""
        rounds = [indices[:1], indices[1:]] if after_first is not None and len(indices) > 1 else [indices]
        for number, part in enumerate(rounds):
            if number:
                assert after_first is not None
                after_first()
            for committer, group in _by_committer([(i, requests[i]) for i in part]):
                answered = committer.attempt_endings(
                    [(requests[i].checkpoint_id, requests[i].committable) for i in group], commit)
                if len(answered) != len(group):
                    raise IllegalStateError(f"committer {committer.name!r} answered {len(answered)} "
                                            f"endings for {len(group)} transactions")
                for i, ending in zip(group, answered):
                    endings[i] = ending
        return [i for i in indices if _ending(endings, i).outcome is EndingOutcome.RETRY_LATER]

    def before_sleep(state: RetryCallState) -> None:
        pending = state.outcome.result() if state.outcome else []
        for i in pending:
            log.warning("checkpoint %s: %s of transaction %s (checkpoint %d) failed (attempt %d): %r; retrying",
                        checkpoint_id, action, _ending(endings, i).transaction, requests[i].checkpoint_id,
                        state.attempt_number, _ending(endings, i).error)

    pending = list(range(len(requests)))

    def attempt_pending() -> list[int]:
        nonlocal pending
        pending = attempt(pending)
        return pending

    if requests:
        Retrying(retry=retry_if_result(bool), stop=stop_after_delay(bound_s), wait=_WAIT, before_sleep=before_sleep,
                 retry_error_callback=lambda state: state.outcome.result() if state.outcome else None)(attempt_pending)
    ended = [_ending(endings, i) for i in range(len(requests))]
    _settle(requests, ended, commit=commit, checkpoint_id=checkpoint_id, first_commit_of_stored=first_commit_of_stored)
    return ended


def _settle(requests: Sequence[EndRequest], endings: Sequence[Ending], *, commit: bool, checkpoint_id: int | None,
            first_commit_of_stored: bool) -> None:
    """3. Raise for what did not end: one :class:`~twophase.errors.TransactionLostError` naming every
    loss, else the first failure (a CheckpointCommitError around it on a stored checkpoint's first
    commit), after a line for each. (4. A crash stops the loop where it is: the stored decision
    covers what it leaves half done.)"""
    action = "commit" if commit else "abort"
    lost = [e for e in endings if e.outcome is EndingOutcome.LOST]
    failed = [i for i, e in enumerate(endings) if e.outcome in (EndingOutcome.FAILED, EndingOutcome.RETRY_LATER)]
    for i in failed:
        log.error("checkpoint %s: %s of transaction %s did not end: %r", checkpoint_id, action,
                  endings[i].transaction, endings[i].error)
    if lost:
        ended = sum(1 for e in endings if e.outcome is EndingOutcome.ENDED and e.transaction is not None)
        error = TransactionLostError.for_checkpoint(
            checkpoint_id, [e.lost for e in lost if e.lost is not None], committed=ended)
        log.error("checkpoint %s: %s", checkpoint_id, error)
        raise error
    if failed:
        first = endings[failed[0]].error
        assert first is not None
        if first_commit_of_stored and checkpoint_id is not None \
                and not isinstance(first, (CheckpointCommitError, UnrecoverableCommitError)):
            raise CheckpointCommitError(checkpoint_id, requests[failed[0]].committer.name, first) from first
        raise first


def ended_transactions(endings: Sequence[Ending]) -> list[str]:
    """The ids of the transactions that ended."""
    return [e.transaction for e in endings if e.outcome is EndingOutcome.ENDED and e.transaction is not None]


def _ending(endings: list[Ending | None], index: int) -> Ending:
    ending = endings[index]
    assert ending is not None
    return ending


def _by_committer(indexed: list[tuple[int, EndRequest]]) -> list[tuple[TransactionCommitter[Any], list[int]]]:
    grouped: dict[int, tuple[TransactionCommitter[Any], list[int]]] = {}
    for index, request in indexed:
        grouped.setdefault(id(request.committer), (request.committer, []))[1].append(index)
    return list(grouped.values())
