"""The commit lifecycle: the one place that judges the checkpoint store, deciding what becomes of
a checkpoint (commit, replay, abort), what a (re)start does and what a savepoint adds; every engine
(the in-process coordinator, the Spark sink's driver) hands it what it knows and gets back what
happened. It reads the store through its read-only view (:attr:`CommitLifecycle.stored`,
``twophase/stored_checkpoints.py``), the one it lends those that only look. It owns no thread and
no clock, and keeps nothing between calls but its participants.

:meth:`CommitLifecycle.complete` carries out the decision in numbered steps (0: a stored checkpoint
not confirmed committed is committed first, and a checkpoint at or below the newest stored one is
a replay; then 1 store, 2 commit, 3 mark, 4 sweep, 5 record, 6 subsume).
:meth:`CommitLifecycle.recover`: 1 commit the stored checkpoint, 2 abort lingering, 3 rewind.
:meth:`CommitLifecycle.abort_unless_stored`: a stored checkpoint is committed, never aborted. The
protocol, its crash windows and their failpoints: ``design/exactly-once-protocol.md``.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Mapping, Sequence

from twophase import failpoints
from twophase.checkpoint import CompletedCheckpoint, JsonValue
from twophase.checkpoint_statistics import (
    CheckpointOutcome,
    CommitFigures,
    CommitTimings,
    LostTransactionRecord,
    record_statistics,
)
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import (
    CheckpointExistsError,
    InvalidValueError,
    LostTransaction,
    TransactionLostError,
    UnrecoverableCommitError,
)
from twophase.participants import CheckpointParticipant, CommittingParticipant, RestoredState
from twophase.stored_checkpoints import StoredCheckpoints
from twophase.transaction_endings import EndRequest, Ending, end_transactions, ended_transactions

log = logging.getLogger(__name__)


def _ms(seconds: float) -> float:
    return seconds * 1000


_warned: set[str] = set()


def _renamed(old: str, new: str) -> None:
    """One DeprecationWarning per old name and process, at its caller's line."""
    if old not in _warned:
        _warned.add(old)
        warnings.warn(f"{old} is renamed {new}; the old name is removed in the release after 0.2.0",
                      DeprecationWarning, stacklevel=3)


@dataclass(frozen=True)
class Completion:
    """What :meth:`CommitLifecycle.complete` did with one checkpoint."""

    checkpoint_id: int
    #: The timings of its steps; None for a replay, which commits nothing new.
    timings: CommitTimings | None = None
    #: The newest stored checkpoint, when this checkpoint's id is at or below it: a replay of a
    #: decided checkpoint. What the replay's participants acknowledged was aborted.
    replay_of: int | None = None


class Abandonment(str, Enum):
    """What :meth:`CommitLifecycle.abandon` did with a checkpoint an engine gave up on."""

    #: It was stored: its transactions are committed (now, or before), never aborted.
    COMMITTED = "committed"
    #: Never stored: its transactions are aborted.
    ABORTED = "aborted"
    #: Ending its transactions failed; the next recovery commits (stored) or aborts (not) them.
    LEFT_TO_RECOVERY = "left_to_recovery"


class CommitLifecycle:
    def __init__(self, store: FileCheckpointStore, participants: Sequence[CheckpointParticipant]) -> None:
        self.store = store
        #: What the store holds, read-only: for those that look without deciding.
        self.stored = StoredCheckpoints(store)
        self.participants = list(participants)
        self.committers = [p for p in self.participants if isinstance(p, CommittingParticipant)]

    # -- complete --------------------------------------------------------------------------------

    def complete(self, checkpoint: CompletedCheckpoint, *, started: float | None = None) -> Completion:
        """Steps 0-6 of the module doc for ``checkpoint``. ``started``: the monotonic time the engine
        began this commit (its work until step 1 is ``prepare_ms``). Whether the checkpoint got
        stored is the store's to say: nothing is called back."""
        begun = time.monotonic()
        checkpoint_id = checkpoint.checkpoint_id
        # 0. A stored checkpoint's transactions are committed before anything else (whoever gets
        # there first: a crash after storing it leaves that to the next process); and a checkpoint
        # at or below the newest stored one is a replay of a decided checkpoint.
        newest, committed = self.stored.newest_readable()
        if newest is not None and not committed:
            self.commit_stored(newest)
        if newest is not None and checkpoint_id <= newest.checkpoint_id:
            self.abort_best_effort(checkpoint_id, checkpoint.operator_states)
            return Completion(checkpoint_id, replay_of=newest.checkpoint_id)
        # 1. store: the decision.
        self.store.add(checkpoint, subsume=False)
        stored = time.monotonic()
        failpoints.hit(failpoints.AFTER_CHECKPOINT_STORED, checkpoint_id=checkpoint_id)
        # 2. commit: the first transaction alone, then the rest (failpoint mid_commit between).
        requests = self._requests(checkpoint)
        if requests:
            failpoints.hit(failpoints.BEFORE_COMMIT, checkpoint_id=checkpoint_id)
        self._end_commit(checkpoint_id, requests, first_attempt=True)
        committed_at = time.monotonic()
        # 3. mark.
        self.store.mark_committed(checkpoint_id)
        marked = time.monotonic()
        failpoints.hit(failpoints.AFTER_COMMIT, checkpoint_id=checkpoint_id)
        # 4. sweep.
        lingering = self._sweep(checkpoint_id, requests, [p for p in self.committers if p.sweeps_after_commit])
        swept = time.monotonic()
        timings = CommitTimings(
            total_ms=_ms(swept - (started if started is not None else begun)),
            prepare_ms=_ms(begun - started) if started is not None else 0.0,
            store_ms=_ms(stored - begun), commit_ms=_ms(committed_at - stored), mark_ms=_ms(marked - committed_at),
            sweep_ms=_ms(swept - marked))
        # 5. record.
        self._record(checkpoint_id, CheckpointOutcome.COMMITTED, requests, timings, lingering or ())
        # 6. subsume.
        self.store.subsume(newest=checkpoint_id)
        return Completion(checkpoint_id, timings)

    def stored_despite(self, checkpoint_id: int, error: OSError) -> bool:
        """Whether checkpoint ``checkpoint_id`` is this engine's stored decision although
        :meth:`complete` failed with ``error`` on the store: a failed write may still have landed,
        so the store's listing says; another writer's checkpoint of this id is not ours."""
        return not isinstance(error, CheckpointExistsError) and self.stored.is_listed(checkpoint_id)

    def abort_best_effort(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> None:
        """:meth:`abort_transactions`, logging a failure instead of raising it: for transactions
        of a checkpoint that is not committed now (a replay's, tasks' under a wrong id); the sweep
        after the next commit ends what remains."""
        try:
            self.abort_transactions(checkpoint_id, states)
        except failpoints.FailpointCrash:
            raise
        except Exception as exc:
            log.warning("checkpoint %d: aborting pre-committed transactions failed: %r; the next sweep "
                        "aborts them as lingering", checkpoint_id, exc)

    # -- recover ---------------------------------------------------------------------------------

    def adopt_savepoint(self, checkpoint: CompletedCheckpoint, *, committed: bool, origin: str) -> None:
        """Put a savepoint's checkpoint (read from ``origin``) into the store, marked committed if
        ``committed``, so a failover after a restore from it returns to it. Refused (InvalidValueError)
        where the store holds newer checkpoints: their decisions would outrank the savepoint's."""
        checkpoint_id = checkpoint.checkpoint_id
        listed = self.stored.ids()
        newer = [i for i in listed if i > checkpoint_id]
        if newer:
            raise InvalidValueError(
                f"checkpoint directory {str(self.store.directory)!r} holds checkpoints {newer} newer "
                f"than savepoint {origin!r} (checkpoint {checkpoint_id}); restore a savepoint into a fresh "
                "checkpoint directory"
            )
        if checkpoint_id not in listed:
            self.store.add(checkpoint)
        if committed:
            self.store.mark_committed(checkpoint_id)

    def recover_where_due(self, next_checkpoint_id: int | None, *, run_starts: bool) -> int | None:
        """The recovery, where it is due before the participants of checkpoint
        ``next_checkpoint_id`` (None: not known) begin; returns the newest stored checkpoint id
        (None: nothing stored), whose participants, replayed, have nothing to write.

        It is due when a run starts (``run_starts``: the engine knows none of this run's checkpoints
        began yet), and then only for a stored checkpoint not confirmed committed (a crash
        interrupted its commit) or a replayed one (``next_checkpoint_id`` is stored already). An
        engine whose run crashed before storing anything leaves what lingers to the sweep after its
        first commit."""
        newest, committed = self.stored.newest_readable()
        replay = newest is not None and next_checkpoint_id is not None and next_checkpoint_id <= newest.checkpoint_id
        if run_starts or (newest is not None and not committed) or replay:
            self.recover(newest, committed=committed)
        return newest.checkpoint_id if newest is not None else None

    def recover(self, checkpoint: CompletedCheckpoint | None, *, committed: bool,
                abort_lingering: bool = True) -> None:
        """Steps 1-3 of recovery (module doc) from ``checkpoint`` (None: a fresh start).
        ``committed``: the store confirms its commit. ``abort_lingering=False`` where writers of
        the next checkpoint may already write; the sweep after the next commit ends what lingers."""
        restored_id = checkpoint.checkpoint_id if checkpoint else None
        log.info("recovering from %s (committed=%s)",
                 f"checkpoint {restored_id}" if checkpoint else "nothing (fresh start)", committed)
        failpoints.hit(failpoints.DURING_RESTORE, checkpoint_id=restored_id)
        # What this process holds goes first: the committables below come from the stored state.
        for participant in self.committers:
            participant.restore(RestoredState(restored_id, checkpoint.state_of(participant.name) if checkpoint
                                              else None, committed))
        requests = self._requests(checkpoint) if checkpoint is not None else []
        # 1. commit the stored checkpoint.
        if checkpoint is not None and not committed:
            self.commit_stored(checkpoint, requests)
        # 2. abort lingering (raises if an abort fails: the recovery is retried whole).
        if abort_lingering:
            self._sweep(restored_id, requests, self.committers, failing=True)
        # 3. rewind.
        for participant in self.participants:
            if not isinstance(participant, CommittingParticipant):
                participant.restore(RestoredState(restored_id, checkpoint.state_of(participant.name)
                                                  if checkpoint else None, committed))

    def commit_stored(self, checkpoint: CompletedCheckpoint, requests: list[EndRequest] | None = None) -> None:
        """Commit a stored checkpoint that is not confirmed committed (again: commits are
        idempotent), mark it and record it as recovered."""
        checkpoint_id = checkpoint.checkpoint_id
        requests = self._requests(checkpoint) if requests is None else requests
        log.info("checkpoint %d is stored but not confirmed committed: committing its %d transaction(s) again",
                 checkpoint_id, len(requests))
        started = time.monotonic()
        endings = self._end_commit(checkpoint_id, requests, first_attempt=False)
        took = time.monotonic() - started
        log.info("checkpoint %d: re-committed %d transaction(s) on restore (%.0f ms): %s", checkpoint_id,
                 len(requests), _ms(took), ", ".join(ended_transactions(endings)) or "none with records")
        self.store.mark_committed(checkpoint_id)
        self._record(checkpoint_id, CheckpointOutcome.RECOVERED, requests,
                     CommitTimings(total_ms=_ms(took), commit_ms=_ms(took)), ())

    # -- abort -----------------------------------------------------------------------------------

    def abort_unless_stored(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> bool:
        """An engine gave up on ``checkpoint_id``, whose participants pre-committed ``states``:
        returns whether it was stored, and so committed rather than aborted.

        A stored checkpoint's transactions are committed, never aborted: if it is not confirmed
        committed yet it is committed now, and True is returned. Otherwise every transaction
        pre-committed for it that the states name is aborted (by the rule of
        ``transaction_endings.py``) and False is returned."""
        if self.stored.is_listed(checkpoint_id):
            if not self.stored.is_committed(checkpoint_id):
                self.commit_stored(self.store.load(checkpoint_id))
            return True
        self.abort_transactions(checkpoint_id, states)
        return False

    def abandon(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> Abandonment:
        """:meth:`abort_unless_stored` for an engine that reports its own failure and wants none of
        ours (Spark);
        never raises. A checkpoint never stored then has the lingering transactions swept too:
        what its tasks left open without the engine passing on their acknowledgement."""
        try:
            stored = self.abort_unless_stored(checkpoint_id, states)
        except failpoints.FailpointCrash:
            raise
        except Exception as exc:
            if self.stored.is_listed(checkpoint_id):
                log.warning("checkpoint %d failed after it was stored: its transactions are committed, not aborted; "
                            "committing them here failed (%r), the next recovery does", checkpoint_id, exc)
            else:
                log.warning("checkpoint %d failed: aborting its pre-committed transactions failed (%r); the next "
                            "recovery aborts them as lingering", checkpoint_id, exc)
            return Abandonment.LEFT_TO_RECOVERY
        if stored:
            log.warning("checkpoint %d failed after it was stored: its transactions are committed, not aborted",
                        checkpoint_id)
            return Abandonment.COMMITTED
        aborted = self.sweep(checkpoint_id)
        log.warning("checkpoint %d failed: aborted its pre-committed transactions and %d more its tasks left open "
                    "(%s)", checkpoint_id, len(aborted), ", ".join(aborted) or "none")
        return Abandonment.ABORTED

    def abort_transactions(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> None:
        """Abort every transaction pre-committed for ``checkpoint_id`` that ``states`` name, by a
        process that will not commit them (by that rule). Only for transactions no stored
        checkpoint holds: :meth:`abort_unless_stored` decides that."""
        requests = [EndRequest(p.committer, pre_committed_for, committable) for p in self.committers
                    if states.get(p.name) is not None
                    for pre_committed_for, committable in p.committables(checkpoint_id, states[p.name])
                    if pre_committed_for == checkpoint_id]
        end_transactions(requests, commit=False, checkpoint_id=checkpoint_id)

    def sweep(self, checkpoint_id: int | None) -> list[str]:
        """Abort every lingering transaction of the sinks (none of theirs may be open now: the
        engine says so); returns their ids. Failures are logged: the next sweep retries."""
        return self._sweep(checkpoint_id, [], self.committers) or []

    # -- the names of 0.1.0, for one release ----------------------------------------------------

    def abort(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> bool:
        """Deprecated (0.1.0's name, removed after 0.2.0): :meth:`abort_unless_stored`, which may
        commit, as its name now says."""
        _renamed("CommitLifecycle.abort", "CommitLifecycle.abort_unless_stored")
        return self.abort_unless_stored(checkpoint_id, states)

    def stored_checkpoint(self) -> tuple[CompletedCheckpoint | None, bool]:
        """Deprecated (0.1.0's name, removed after 0.2.0): ``stored.newest_readable()``."""
        _renamed("CommitLifecycle.stored_checkpoint", "CommitLifecycle.stored.newest_readable")
        return self.stored.newest_readable()

    def newest_stored_id(self) -> int | None:
        """Deprecated (0.1.0's name, removed after 0.2.0): ``stored.newest_listed_id()``, the
        newest listed id, readable or not."""
        _renamed("CommitLifecycle.newest_stored_id", "CommitLifecycle.stored.newest_listed_id")
        return self.stored.newest_listed_id()

    # -- the steps' parts ------------------------------------------------------------------------

    def _requests(self, checkpoint: CompletedCheckpoint) -> list[EndRequest]:
        return [EndRequest(p.committer, pre_committed_for, committable) for p in self.committers
                for pre_committed_for, committable in p.committables(checkpoint.checkpoint_id,
                                                                      checkpoint.state_of(p.name))]

    def _end_commit(self, checkpoint_id: int, requests: list[EndRequest], first_attempt: bool) -> list[Ending]:
        """Commit ``requests`` of stored checkpoint ``checkpoint_id`` (the first one alone, then the
        rest: failpoint ``mid_commit`` between, on the first attempt); a loss is recorded and
        raised, and another failure of the first attempt is a CheckpointCommitError (stored, not
        confirmed: restore to commit it again)."""
        mid_commit = (lambda: failpoints.hit(failpoints.MID_COMMIT, checkpoint_id=checkpoint_id)) \
            if first_attempt else None
        try:
            return end_transactions(requests, commit=True, checkpoint_id=checkpoint_id, after_first=mid_commit,
                                    first_commit_of_stored=first_attempt)
        except UnrecoverableCommitError as exc:
            self._record(checkpoint_id, CheckpointOutcome.LOST, requests, None, (),
                         lost=exc.lost if isinstance(exc, TransactionLostError) else ())
            raise

    def _sweep(self, checkpoint_id: int | None, requests: list[EndRequest],
               participants: Sequence[CommittingParticipant[Any]], failing: bool = False) -> list[str] | None:
        """Abort the lingering transactions of ``participants``, keeping those ``requests`` name;
        returns their ids, or None if the sweep failed (logged: housekeeping, the next sweep
        retries), unless ``failing``, where the failure is raised."""
        try:
            lingering, unlisted = self._lingering(checkpoint_id, requests, participants)
            endings = end_transactions(lingering, commit=False, checkpoint_id=checkpoint_id)
            if unlisted:
                raise unlisted[0]
        except failpoints.FailpointCrash:
            raise
        except Exception as exc:
            if failing:
                raise
            log.warning("checkpoint %s: aborting lingering transactions failed: %r; retried by the next sweep",
                        checkpoint_id, exc)
            return None
        aborted = ended_transactions(endings)
        if aborted:
            log.info("checkpoint %s: aborted %d lingering transaction(s): %s", checkpoint_id, len(aborted),
                     ", ".join(aborted))
        return aborted

    @staticmethod
    def _lingering(checkpoint_id: int | None, requests: list[EndRequest],
                   participants: Sequence[CommittingParticipant[Any]]) -> tuple[list[EndRequest], list[Exception]]:
        """What lingers, participant by participant, keeping what ``requests`` name; a participant
        whose listing failed stops none of the others (the rule of the loop that then aborts
        them): its error is returned, to be raised once the others' are aborted."""
        lingering: list[EndRequest] = []
        unlisted: list[Exception] = []
        for participant in participants:
            committer = participant.committer
            keep = [r.committable for r in requests if r.committer is committer]
            try:
                lingering += [EndRequest(committer, pre_committed_for, committable)
                              for pre_committed_for, committable in committer.lingering_transactions(keep)]
            except failpoints.FailpointCrash:
                raise
            except Exception as exc:
                log.warning("checkpoint %s: listing the lingering transactions of %s failed: %r", checkpoint_id,
                            participant.name, exc)
                unlisted.append(exc)
        return lingering, unlisted

    def _record(self, checkpoint_id: int, outcome: CheckpointOutcome, requests: list[EndRequest],
                timings: CommitTimings | None, lingering: Sequence[str], *,
                lost: Sequence[LostTransaction] = ()) -> None:
        """Record the checkpoint's statistics; ``lost``: the transactions a commit lost (the
        ``TransactionLostError`` of ``end_transactions``, which returns endings only when all ended)."""
        parts = [f for f in (p.committer.figures([r.committable for r in requests if r.committer is p.committer])
                             for p in self.committers) if f is not None]
        if not parts:
            return
        lost_records = tuple(LostTransactionRecord(t.transactional_id, t.record_count, t.producer_id,
                                                   t.producer_epoch, tuple(t.partitions)) for t in lost)
        figures = CommitFigures.sum(parts)
        record_statistics(self.store, checkpoint_id, outcome=outcome, figures=replace(figures, lost=lost_records),
                          timings=timings, lingering_aborted=lingering)
