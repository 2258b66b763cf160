"""What takes part in a checkpoint: the participant contract, resettable sources and
two-phase-commit sinks (Flink's CheckpointedFunction, CheckpointListener and
TwoPhaseCommitSinkFunction, in Python).

A two-phase-commit sink has two sides, as in Flink's Sink V2: the writer side (begin, write,
pre-commit) runs where records are produced, and the committer side (:class:`CommittingParticipant`:
commit, abort, recover-and-commit, abort lingering) is driven by the commit lifecycle, which alone
decides when each step runs (``twophase/lifecycle.py``)."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Sequence, TypeVar

from twophase import failpoints
from twophase.checkpoint import JsonValue
from twophase.errors import IllegalStateError, UnrecoverableCommitError

if TYPE_CHECKING:
    from twophase.checkpoint_statistics import CommitFigures

log = logging.getLogger(__name__)

Offsets = TypeVar("Offsets")
Item = TypeVar("Item")
Txn = TypeVar("Txn")
Committable = TypeVar("Committable")


def attempt_each(items: Iterable[Item], end: Callable[[Item], None]) -> None:
    """The one loop that ends transactions: ``end`` every item, go on past a failure (so that one
    failure leaves no other transaction open to stall readers), then raise the first error."""
    errors: list[Exception] = []
    for item in items:
        try:
            end(item)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@dataclass(frozen=True)
class RestoredState:
    """What a participant gets back at (re)start.

    ``checkpoint_id`` is None on a fresh start. ``committed`` tells whether every participant
    confirmed the commit of that checkpoint before the job went down; when it is False a sink must
    commit the checkpoint's transactions again (idempotently).
    """

    checkpoint_id: int | None
    state: JsonValue | None
    committed: bool


class CheckpointParticipant(ABC):
    """An operator whose state goes into checkpoints, registered under a stable ``name``."""

    #: Stable operator id: the key of this participant's state in every checkpoint.
    name: str
    #: True when the state arrives through ``CheckpointCoordinator.acknowledge`` from elsewhere
    #: (e.g. Spark tasks) instead of from :meth:`snapshot_state`.
    acknowledges_externally: bool = False
    #: True when :meth:`notify_checkpoint_complete` commits external side effects.
    commits_on_notify: bool = False

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> JsonValue:
        """Return this participant's JSON-serializable state for ``checkpoint_id``."""

    @abstractmethod
    def restore(self, restored: RestoredState) -> None:
        """Take back the state of a restored checkpoint (or start fresh)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` is durably stored: make its side effects visible."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` will never complete: undo what was prepared for it."""

    def close(self) -> None:
        """Release resources. Not called on a crash, so nothing may depend on it."""


class ResettableSource(CheckpointParticipant, Generic[Offsets]):
    """A source that can be rewound to the offsets of a checkpoint (Flink's replayable source).

    For the in-process pipeline a source also hands out records with :meth:`poll`; engines such as
    Spark plan offset ranges themselves and only use the offsets as state.
    """

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> Offsets:
        """The offsets of the next record not yet emitted."""

    @abstractmethod
    def restore_state(self, offsets: Offsets | None) -> None:
        """Continue from ``offsets``; None means the configured starting position."""

    @abstractmethod
    def poll(self, max_records: int) -> Sequence[Any]:
        """Up to ``max_records`` next records; empty when none are available now."""

    def end_reached(self) -> bool:
        """True when a bounded source has emitted everything it ever will."""
        return False

    def restore(self, restored: RestoredState) -> None:
        self.restore_state(restored.state)


class CommittingParticipant(CheckpointParticipant, Generic[Committable]):
    """The committer side of a two-phase-commit sink: its checkpointed state names pre-committed
    transactions, and the commit lifecycle (``twophase/lifecycle.py``) ends them.

    The lifecycle runs every step; a subclass only says how. Once a checkpoint is stored its
    transactions are committed, never aborted, whoever gets there: the lifecycle right after
    storing it, or the recovery of whichever process comes next. Transactions pre-committed for a
    checkpoint that was never stored are aborted.
    """

    commits_on_notify = True
    #: Abort lingering transactions after every commit, not only at recovery: for engines where no
    #: transaction of the sink may be open between checkpoints (Spark's micro-batches).
    sweeps_after_commit = False

    @abstractmethod
    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, Committable]]:
        """The transactions checkpoint ``checkpoint_id`` must commit, given this participant's
        ``state`` in it, each with the checkpoint it was pre-committed for, oldest first."""

    @abstractmethod
    def commit_transactions(self, committables: Sequence[tuple[int, Committable]], recovering: bool) -> None:
        """Commit every one (idempotently: a repeat of a done commit succeeds). Attempt all of them
        even when one fails, then raise the first error. ``recovering``: they come from a
        restored checkpoint, not from this process's own pre-commit."""

    @abstractmethod
    def abort_transactions(self, committables: Sequence[tuple[int, Committable]]) -> None:
        """Abort every one. A transaction found already ended (committed, aborted, fenced) is not
        an error. Attempt all of them even when one fails, then raise the first error."""

    @abstractmethod
    def abort_lingering(self, keep: Sequence[Committable], checkpoint_id: int | None) -> list[str]:
        """Abort every open transaction of this sink except those in ``keep``, so that no reader
        stays stalled behind a transaction nobody will ever end; return their ids."""

    def committed(self, checkpoint_id: int) -> None:
        """Every transaction of checkpoints <= ``checkpoint_id`` is committed: forget them."""

    def lost(self, checkpoint_id: int, committables: Sequence[Committable], error: UnrecoverableCommitError) -> None:
        """Transactions of stored checkpoint ``checkpoint_id`` can never be committed: ``error``
        (one for all of them, raised next) names what of this participant's ``committables`` was
        lost. Called once per checkpoint, after every commit was attempted, to record the loss
        where monitoring reads it."""

    def figures(self, committables: Sequence[Committable],
                lost: UnrecoverableCommitError | None) -> "CommitFigures | None":
        """What the checkpoint's statistics record of this participant's ``committables`` (and of
        what ``lost`` says was lost of them); None (the default): nothing is recorded."""
        return None

    def snapshot_state(self, checkpoint_id: int) -> JsonValue:
        raise IllegalStateError(f"participant {self.name!r} acknowledges externally; it has no snapshot")

    def restore(self, restored: RestoredState) -> None:
        """Reset what this process holds; the lifecycle recovers the transactions."""


class TwoPhaseCommitSink(CommittingParticipant[Committable], Generic[Txn, Committable]):
    """Exactly-once sink: one transaction per checkpoint, committed when the checkpoint completes.

    Subclasses implement the transaction operations; this base keeps the pre-committed
    transactions keyed by checkpoint id. The commit lifecycle drives them:

    - ``snapshot_state(N)``: pre-commit the current transaction, start the next one, and return
      every committable not yet confirmed committed (an older one survives in newer checkpoints
      until its commit is confirmed, so no retention of old checkpoints can lose it);
    - once N is stored, every pending transaction of a checkpoint <= N is committed, in checkpoint
      order (a missed commit is made good by the next checkpoint's, as in Flink);
    - ``notify_checkpoint_aborted(N)``: abort what was pre-committed for N;
    - on restore, the restored committables are committed again unless the checkpoint is known
      committed (``recover_and_commit`` must be idempotent), then lingering transactions are
      aborted (``recover_and_abort``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._current: Txn | None = None
        self._current_checkpoint_id = 1  # the checkpoint the current transaction is meant for
        self._pending: dict[int, list[Committable]] = {}

    # -- what a subclass implements -------------------------------------------------------------

    @abstractmethod
    def begin_transaction(self, checkpoint_id: int) -> Txn:
        """Start a transaction meant to be pre-committed in checkpoint ``checkpoint_id``.

        The id makes transaction names deterministic, so a restarted job fences its zombies."""

    @abstractmethod
    def write(self, txn: Txn, value: Any) -> None:
        """Write one value inside ``txn``."""

    @abstractmethod
    def pre_commit(self, txn: Txn) -> Committable:
        """Make ``txn`` durable but invisible (flush) and return the handle to commit it later."""

    @abstractmethod
    def commit(self, committable: Committable, checkpoint_id: int) -> None:
        """Make the transaction visible. Must be idempotent."""

    @abstractmethod
    def abort(self, committable: Committable, checkpoint_id: int) -> None:
        """Discard a pre-committed transaction."""

    @abstractmethod
    def serialize_committable(self, committable: Committable) -> JsonValue: ...

    @abstractmethod
    def deserialize_committable(self, data: JsonValue) -> Committable: ...

    def recover_and_commit(self, committable: Committable, checkpoint_id: int) -> None:
        """Commit a transaction of a restored checkpoint. Must be idempotent."""
        self.commit(committable, checkpoint_id)

    @abstractmethod
    def recover_and_abort(self, keep: Sequence[Committable], restored_checkpoint_id: int | None) -> None:
        """Abort every transaction of this sink still open, except those in ``keep``, so that no
        reader stays stalled behind a transaction nobody will ever end."""

    # -- the writer side ------------------------------------------------------------------------

    def invoke(self, value: Any) -> None:
        """Write one value into the current transaction."""
        if self._current is None:
            self._current = self.begin_transaction(self._current_checkpoint_id)
        self.write(self._current, value)

    def snapshot_state(self, checkpoint_id: int) -> JsonValue:
        if self._current is None:
            self._current = self.begin_transaction(checkpoint_id)
        failpoints.hit(failpoints.BEFORE_PRE_COMMIT, sink=self.name, checkpoint_id=checkpoint_id)
        committable = self.pre_commit(self._current)
        failpoints.hit(failpoints.AFTER_PRE_COMMIT, sink=self.name, checkpoint_id=checkpoint_id)
        self._pending.setdefault(checkpoint_id, []).append(committable)
        self._current = None
        self._current_checkpoint_id = checkpoint_id + 1
        return [
            {"checkpoint_id": cid, "committables": [self.serialize_committable(c) for c in cs]}
            for cid, cs in sorted(self._pending.items())
        ]

    # -- the committer side, driven by the lifecycle ----------------------------------------------

    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, Committable]]:
        if self._pending:
            # This process pre-committed them: the objects are at hand, no need to parse the state.
            return [(cid, c) for cid in sorted(self._pending) if cid <= checkpoint_id for c in self._pending[cid]]
        return [(int(entry["checkpoint_id"]), self.deserialize_committable(data))
                for entry in state or [] for data in entry["committables"]]

    def commit_transactions(self, committables: Sequence[tuple[int, Committable]], recovering: bool) -> None:
        def commit(pair: tuple[int, Committable]) -> None:
            cid, committable = pair
            if recovering:
                log.info("sink %s: re-committing a transaction of checkpoint %d on restore", self.name, cid)
                self.recover_and_commit(committable, cid)
            else:
                self.commit(committable, cid)

        attempt_each(committables, commit)

    def abort_transactions(self, committables: Sequence[tuple[int, Committable]]) -> None:
        def abort(pair: tuple[int, Committable]) -> None:
            cid, committable = pair
            try:
                self.abort(committable, cid)
            except Exception as exc:
                log.warning("sink %s: aborting a transaction of checkpoint %d failed: %r", self.name, cid, exc)
                raise

        attempt_each(committables, abort)

    def abort_lingering(self, keep: Sequence[Committable], checkpoint_id: int | None) -> list[str]:
        self.recover_and_abort(keep, checkpoint_id)
        return []

    def committed(self, checkpoint_id: int) -> None:
        for cid in [cid for cid in self._pending if cid <= checkpoint_id]:
            del self._pending[cid]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit every pending transaction of a checkpoint <= ``checkpoint_id`` (what the
        lifecycle does once the checkpoint is stored)."""
        self.commit_transactions(self.committables(checkpoint_id, None), recovering=False)
        self.committed(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.abort_transactions([(checkpoint_id, c) for c in self._pending.pop(checkpoint_id, [])])

    def restore(self, restored: RestoredState) -> None:
        self._pending.clear()
        self._current = None
        self._current_checkpoint_id = (restored.checkpoint_id or 0) + 1

    def pending_checkpoint_ids(self) -> list[int]:
        return sorted(self._pending)

    def pending_committables(self) -> list[Committable]:
        """Pre-committed transactions not yet confirmed committed, oldest checkpoint first."""
        return [c for cid in sorted(self._pending) for c in self._pending[cid]]
