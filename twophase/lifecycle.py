"""The commit lifecycle: what becomes of a checkpoint once its participants have acknowledged it,
what a (re)start does, and what happens when an engine gives up on a checkpoint. Every engine uses
it: the in-process scheduler (``twophase/coordinator.py``) and the Spark sink's driver
(``connectors/spark/sink_driver.py``). It owns no thread and no clock; it keeps nothing between
calls but the participants, so a short-lived process can make one and use it once.

:meth:`CommitLifecycle.complete` makes the decision and carries it out, in these steps:

1. **store** the completed checkpoint durably. This is the decision: from here on its
   transactions are committed, never aborted, by whoever gets there first;
2. **commit** every sink transaction it names (the first alone, then the rest, so that a crash
   between them leaves the partly committed checkpoint recovery must finish), through the one
   loop that ends transactions (``twophase/transaction_endings.py``), whose one rule says what
   follows a failure;
3. **mark** it committed in the store;
4. **sweep**: abort lingering transactions of the sinks that ask for it (housekeeping: its failure
   fails nothing, the next checkpoint sweeps again);
5. **record** its statistics, with the timings of the steps above (best effort);
6. **subsume** the checkpoints beyond retention (after 5, which reads the previous record's
   running totals).

:meth:`CommitLifecycle.recover`, once per (re)start:

1. **commit** the stored checkpoint's transactions if it is not confirmed committed, and mark it;
2. **abort lingering** transactions of every sink, except those it just committed (unless the
   engine says that writers of the next checkpoint may already be writing);
3. **rewind**: every participant gets the checkpoint's state back (sources their offsets).

:meth:`CommitLifecycle.abort`: a stored checkpoint is committed (step 1 of recovery), never
aborted; a checkpoint never stored has the transactions its participants acknowledged aborted.

Commit, recovery, abort and sweep end transactions through the same loop, with the same rule
(``twophase/transaction_endings.py``). The engine tells participants that a checkpoint completed
(``notify_checkpoint_complete``) after :meth:`CommitLifecycle.complete` returns: nothing of
exactly-once depends on it.

Each crash window has one failpoint, hit here and nowhere else, except pre-commit's, which the
writer side hits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
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
from twophase.errors import CheckpointCommitError, UnrecoverableCommitError
from twophase.participants import CheckpointParticipant, CommittingParticipant, RestoredState
from twophase.transaction_endings import EndRequest, Ending, EndingOutcome, end_transactions, ended_transactions, settle

log = logging.getLogger(__name__)


def _ms(seconds: float) -> float:
    return seconds * 1000


class CommitLifecycle:
    def __init__(self, store: FileCheckpointStore, participants: Sequence[CheckpointParticipant]) -> None:
        self.store = store
        self.participants = list(participants)
        self.committers = [p for p in self.participants if isinstance(p, CommittingParticipant)]

    # -- complete --------------------------------------------------------------------------------

    def complete(self, checkpoint: CompletedCheckpoint, *, started: float | None = None) -> CommitTimings:
        """Steps 1-6 of the module doc for ``checkpoint``; returns their timings. ``started``: the
        monotonic time the engine began this commit (its work until step 1 is ``prepare_ms``).
        Nothing is called back: whether the checkpoint got stored is the store's to say."""
        begun = time.monotonic()
        checkpoint_id = checkpoint.checkpoint_id
        # 1. store: the decision.
        self.store.add(checkpoint, subsume=False)
        stored = time.monotonic()
        failpoints.hit(failpoints.AFTER_CHECKPOINT_STORED, checkpoint_id=checkpoint_id)
        # 2. commit: the first transaction alone, then the rest (failpoint mid_commit between).
        requests = self._requests(checkpoint)
        if requests:
            failpoints.hit(failpoints.BEFORE_COMMIT, checkpoint_id=checkpoint_id)
        endings = end_transactions(requests, commit=True, checkpoint_id=checkpoint_id, after_first=lambda: failpoints.hit(
            failpoints.MID_COMMIT, checkpoint_id=checkpoint_id))
        self._settle_commit(checkpoint_id, requests, endings, recovering=False)
        committed = time.monotonic()
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
            store_ms=_ms(stored - begun), commit_ms=_ms(committed - stored), mark_ms=_ms(marked - committed),
            sweep_ms=_ms(swept - marked))
        # 5. record.
        self._record(checkpoint_id, CheckpointOutcome.COMMITTED, requests, endings, timings, lingering or ())
        # 6. subsume.
        self.store.subsume(newest=checkpoint_id)
        return timings

    # -- recover ---------------------------------------------------------------------------------

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
        endings = end_transactions(requests, commit=True, checkpoint_id=checkpoint_id, recovering=True)
        self._settle_commit(checkpoint_id, requests, endings, recovering=True)
        took = time.monotonic() - started
        log.info("checkpoint %d: re-committed %d transaction(s) on restore (%.0f ms): %s", checkpoint_id,
                 len(requests), _ms(took), ", ".join(ended_transactions(endings)) or "none with records")
        self.store.mark_committed(checkpoint_id)
        self._record(checkpoint_id, CheckpointOutcome.RECOVERED, requests, endings,
                     CommitTimings(total_ms=_ms(took), commit_ms=_ms(took)), ())

    # -- abort -----------------------------------------------------------------------------------

    def abort(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> bool:
        """An engine gave up on ``checkpoint_id``, whose participants pre-committed ``states``.

        A stored checkpoint's transactions are committed, never aborted: if it is not confirmed
        committed yet it is committed now, and True is returned. Otherwise every transaction
        pre-committed for it that the states name is aborted (by the one rule) and False is
        returned."""
        if checkpoint_id in self.store.checkpoint_ids():
            if not self.store.is_committed(checkpoint_id):
                self.commit_stored(self.store.load(checkpoint_id))
            return True
        self.abort_transactions(checkpoint_id, states)
        return False

    def abort_transactions(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> None:
        """Abort every transaction pre-committed for ``checkpoint_id`` that ``states`` name, by a
        process that will not commit them (by the one rule). Only for transactions no stored
        checkpoint holds: :meth:`abort` decides that."""
        requests = [EndRequest(p, cid, c) for p in self.committers if states.get(p.name) is not None
                    for cid, c in p.committables(checkpoint_id, states[p.name]) if cid == checkpoint_id]
        settle(end_transactions(requests, commit=False, checkpoint_id=checkpoint_id),
               commit=False, checkpoint_id=checkpoint_id)

    def sweep(self, checkpoint_id: int | None) -> list[str]:
        """Abort every lingering transaction of the sinks (none of theirs may be open now: the
        engine says so); returns their ids. Failures are logged: the next sweep retries."""
        return self._sweep(checkpoint_id, [], self.committers) or []

    # -- the steps' parts ------------------------------------------------------------------------

    def _requests(self, checkpoint: CompletedCheckpoint) -> list[EndRequest]:
        return [EndRequest(p, cid, c) for p in self.committers
                for cid, c in p.committables(checkpoint.checkpoint_id, checkpoint.state_of(p.name))]

    def _settle_commit(self, checkpoint_id: int, requests: list[EndRequest], endings: list[Ending],
                       recovering: bool) -> None:
        """The rule's step 3 for a commit: a loss is recorded and raised; another failure of a
        checkpoint's first commit is a CheckpointCommitError (stored, not confirmed: restore to
        commit it again)."""
        try:
            settle(endings, commit=True, checkpoint_id=checkpoint_id)
        except UnrecoverableCommitError:
            self._record(checkpoint_id, CheckpointOutcome.LOST, requests, endings, None, ())
            raise
        except (failpoints.FailpointCrash, CheckpointCommitError):
            raise
        except Exception as exc:
            if recovering:
                raise
            failed = next(i for i, e in enumerate(endings) if e.outcome in (EndingOutcome.FAILED, EndingOutcome.RETRY_LATER))
            raise CheckpointCommitError(checkpoint_id, requests[failed].participant.name, exc) from exc

    def _sweep(self, checkpoint_id: int | None, requests: list[EndRequest],
               participants: Sequence[CommittingParticipant[Any]], failing: bool = False) -> list[str] | None:
        """Abort the lingering transactions of ``participants``, keeping those ``requests`` name;
        returns their ids, or None if the sweep failed (logged: housekeeping, the next sweep
        retries), unless ``failing``, where the failure is raised."""
        try:
            lingering, unlisted = self._lingering(checkpoint_id, requests, participants)
            endings = end_transactions(lingering, commit=False, checkpoint_id=checkpoint_id)
            settle(endings, commit=False, checkpoint_id=checkpoint_id)
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
            keep = [r.committable for r in requests if r.participant is participant]
            try:
                lingering += [EndRequest(participant, cid, c)
                              for cid, c in participant.lingering_transactions(keep, checkpoint_id)]
            except failpoints.FailpointCrash:
                raise
            except Exception as exc:
                log.warning("checkpoint %s: listing the lingering transactions of %s failed: %r", checkpoint_id,
                            participant.name, exc)
                unlisted.append(exc)
        return lingering, unlisted

    def _record(self, checkpoint_id: int, outcome: CheckpointOutcome, requests: list[EndRequest],
                endings: list[Ending], timings: CommitTimings | None, lingering: Sequence[str]) -> None:
        parts = [f for f in (p.figures([r.committable for r in requests if r.participant is p])
                             for p in self.committers) if f is not None]
        if not parts:
            return
        lost = tuple(LostTransactionRecord(t.transactional_id, t.record_count, t.producer_id, t.producer_epoch,
                                           tuple(t.partitions))
                     for t in (e.lost for e in endings if e.lost is not None))
        figures = CommitFigures.sum(parts)
        record_statistics(self.store, checkpoint_id, outcome=outcome, figures=replace(figures, lost=lost),
                          timings=timings, lingering_aborted=lingering)
