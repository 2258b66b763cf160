"""What takes part in a checkpoint: participants, resettable sources and two-phase-commit sinks
(Flink's CheckpointedFunction and TwoPhaseCommitSinkFunction). A committing participant names the
committer that ends its transactions (``transaction_endings.TransactionCommitter``, Flink's Sink V2
Committer). The protocol: ``design/exactly-once-protocol.md``."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Sequence, TypeVar

from twophase import failpoints
from twophase.checkpoint import JsonValue
from twophase.errors import IllegalStateError

if TYPE_CHECKING:
    from twophase.transaction_endings import TransactionCommitter

log = logging.getLogger(__name__)

Offsets = TypeVar("Offsets")
Txn = TypeVar("Txn")
Committable = TypeVar("Committable")


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

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> JsonValue:
        """Return this participant's JSON-serializable state for ``checkpoint_id``."""

    @abstractmethod
    def restore(self, restored: RestoredState) -> None:
        """Take back the state of a restored checkpoint (or start fresh)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` is committed (the engine says so once the lifecycle completed it):
        forget what was kept for it. Nothing of exactly-once may depend on it (a crash skips it)."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """``checkpoint_id`` will never complete, and what its participants pre-committed was
        aborted by the lifecycle: forget what was kept for it."""

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
    """A participant whose checkpointed state names pre-committed transactions, and the
    :attr:`committer` that ends them (Flink: the committables a sink's writer hands on, and the
    committer the sink creates). The commit lifecycle (``twophase/lifecycle.py``) goes to the
    committer itself: nothing forwards to it."""

    #: Abort lingering transactions after every commit, not only at recovery: for engines where no
    #: transaction of the sink may be open between checkpoints (Spark's micro-batches).
    sweeps_after_commit = False
    #: What ends this participant's transactions.
    committer: TransactionCommitter[Committable]

    @abstractmethod
    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, Committable]]:
        """The transactions checkpoint ``checkpoint_id`` must commit, given this participant's
        ``state`` in it, each with the checkpoint it was pre-committed for, oldest first."""

    def snapshot_state(self, checkpoint_id: int) -> JsonValue:
        raise IllegalStateError(f"participant {self.name!r} has no snapshot: its state comes from the engine's "
                                "tasks (the Spark sink's)")

    def restore(self, restored: RestoredState) -> None:
        """Reset what this process holds; the lifecycle recovers the transactions."""


class TwoPhaseCommitSink(CommittingParticipant[Committable], Generic[Txn, Committable]):
    """Exactly-once sink: one transaction per checkpoint, committed when the checkpoint completes.

    Subclasses implement the writer side (begin, write, pre-commit) and set :attr:`committer`;
    this base keeps the pre-committed transactions keyed by checkpoint id. ``snapshot_state(N)``
    pre-commits the current transaction and returns every committable not yet confirmed committed
    (an older one survives in newer checkpoints until its commit is confirmed, so no retention can
    lose it); the notifications forget them. What the lifecycle does with them:
    ``design/exactly-once-protocol.md``.
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
    def serialize_committable(self, committable: Committable) -> JsonValue: ...

    @abstractmethod
    def deserialize_committable(self, data: JsonValue) -> Committable: ...

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

    # -- the committer side's bookkeeping ---------------------------------------------------------

    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, Committable]]:
        if self._pending:
            # This process pre-committed them: the objects are at hand, no need to parse the state.
            return [(cid, c) for cid in sorted(self._pending) if cid <= checkpoint_id for c in self._pending[cid]]
        return [(int(entry["checkpoint_id"]), self.deserialize_committable(data))
                for entry in state or [] for data in entry["committables"]]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for cid in [cid for cid in self._pending if cid <= checkpoint_id]:
            del self._pending[cid]

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self._pending.pop(checkpoint_id, None)

    def restore(self, restored: RestoredState) -> None:
        self._pending.clear()
        self._current = None
        self._current_checkpoint_id = (restored.checkpoint_id or 0) + 1

    def pending_checkpoint_ids(self) -> list[int]:
        return sorted(self._pending)

    def pending_committables(self) -> list[Committable]:
        """Pre-committed transactions not yet confirmed committed, oldest checkpoint first."""
        return [c for cid in sorted(self._pending) for c in self._pending[cid]]
