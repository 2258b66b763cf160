"""The commit lifecycle: what becomes of a checkpoint once its participants have acknowledged it,
what a (re)start does, and what happens when an engine gives up on a checkpoint. Every engine uses
it: the in-process scheduler (``twophase/coordinator.py``) and the Spark sink's driver
(``connectors/spark/sink_driver.py``). It owns no thread and no clock; it keeps nothing between
calls but the participants, so a short-lived process can make one and use it once.

:meth:`CommitLifecycle.complete` makes the decision and carries it out, in these steps:

1. **store** the completed checkpoint durably. This is the decision: from here on its
   transactions are committed, never aborted, by whoever gets there first;
2. **commit** every sink transaction it names (the first alone, then the rest, so that a crash
   between them leaves the partly committed checkpoint recovery must finish), and notify the
   participants that commit on notification;
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

Each crash window has one failpoint, hit here and nowhere else, except pre-commit's, which the
writer side hits.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from twophase import failpoints
from twophase.checkpoint import CompletedCheckpoint, JsonValue
from twophase.checkpoint_statistics import CheckpointOutcome, CommitFigures, CommitTimings, record_statistics
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import CheckpointCommitError, UnrecoverableCommitError
from twophase.participants import CheckpointParticipant, CommittingParticipant, RestoredState, attempt_each

log = logging.getLogger(__name__)

#: Each committing participant with what it must end for a checkpoint: its ``(checkpoint id,
#: committable)`` pairs.
Work = list[tuple[CommittingParticipant[Any], list[Any]]]


@dataclass(frozen=True)
class RetryPolicy:
    """How often a participant's commit (or notification) is attempted (tenacity, exponential)."""

    attempts: int = 5
    max_backoff_s: float = 2.0


def _ms(seconds: float) -> float:
    return seconds * 1000


def _by_participant(pairs: list[tuple[CommittingParticipant[Any], Any]]) -> Work:
    """``(participant, item)`` pairs grouped by participant, in first-seen order."""
    grouped: dict[str, tuple[CommittingParticipant[Any], list[Any]]] = {}
    for participant, item in pairs:
        grouped.setdefault(participant.name, (participant, []))[1].append(item)
    return list(grouped.values())


class CommitLifecycle:
    def __init__(self, store: FileCheckpointStore, participants: Sequence[CheckpointParticipant],
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.store = store
        self.participants = list(participants)
        self.retry = retry

    # -- complete --------------------------------------------------------------------------------

    def complete(self, checkpoint: CompletedCheckpoint, *, started: float | None = None,
                 on_stored: Callable[[CompletedCheckpoint], None] | None = None) -> CommitTimings:
        """Steps 1-6 of the module doc for ``checkpoint``; returns their timings. ``started``: the
        monotonic time the engine began this commit (its work until step 1 is ``prepare_ms``).
        ``on_stored``: called once the checkpoint is stored, before any transaction is committed
        (the scheduler's bookkeeping)."""
        begun = time.monotonic()
        checkpoint_id = checkpoint.checkpoint_id
        # 1. store: the decision.
        self.store.add(checkpoint, subsume=False)
        stored = time.monotonic()
        failpoints.hit(failpoints.AFTER_CHECKPOINT_STORED, checkpoint_id=checkpoint_id)
        if on_stored is not None:
            on_stored(checkpoint)
        # 2. commit.
        work = self._work(checkpoint)
        flat = [(p, item) for p, items in work for item in items]
        if flat:
            failpoints.hit(failpoints.BEFORE_COMMIT, checkpoint_id=checkpoint_id)
        first, rest = flat[:1], flat[1:]
        try:
            self._commit_groups(checkpoint_id, [_by_participant(first), _by_participant(rest)],
                                recovering=False, between_groups=failpoints.MID_COMMIT)
        except UnrecoverableCommitError as lost:
            self._record(checkpoint_id, CheckpointOutcome.LOST, work, None, (), lost)
            raise
        for participant, _ in work:
            participant.committed(checkpoint_id)
        for participant in self.participants:
            if not isinstance(participant, CommittingParticipant):
                self._notify_complete(participant, checkpoint_id)
        committed = time.monotonic()
        # 3. mark.
        self.store.mark_committed(checkpoint_id)
        marked = time.monotonic()
        failpoints.hit(failpoints.AFTER_COMMIT, checkpoint_id=checkpoint_id)
        # 4. sweep.
        lingering = self._sweep(checkpoint_id, work)
        swept = time.monotonic()
        timings = CommitTimings(
            total_ms=_ms(swept - (started if started is not None else begun)),
            prepare_ms=_ms(begun - started) if started is not None else 0.0,
            store_ms=_ms(stored - begun), commit_ms=_ms(committed - stored), mark_ms=_ms(marked - committed),
            sweep_ms=_ms(swept - marked))
        # 5. record.
        self._record(checkpoint_id, CheckpointOutcome.COMMITTED, work, timings, lingering or ())
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
        committers = [p for p in self.participants if isinstance(p, CommittingParticipant)]
        # What this process holds goes first: the committables below come from the stored state.
        for participant in committers:
            participant.restore(RestoredState(restored_id, checkpoint.state_of(participant.name) if checkpoint
                                              else None, committed))
        work = self._work(checkpoint) if checkpoint is not None else []
        # 1. commit the stored checkpoint.
        if checkpoint is not None and not committed:
            self.commit_stored(checkpoint, work)
        # 2. abort lingering.
        for participant in committers if abort_lingering else []:
            keep = next((items for p, items in work if p is participant), [])
            aborted = participant.abort_lingering([c for _, c in keep], restored_id)
            if aborted:
                log.info("%s: aborted %d lingering transaction(s) after restoring checkpoint %s: %s",
                         participant.name, len(aborted), restored_id, aborted)
        # 3. rewind.
        for participant in self.participants:
            if not isinstance(participant, CommittingParticipant):
                participant.restore(RestoredState(restored_id, checkpoint.state_of(participant.name)
                                                  if checkpoint else None, committed))

    def commit_stored(self, checkpoint: CompletedCheckpoint, work: Work | None = None) -> None:
        """Commit a stored checkpoint that is not confirmed committed (again: commits are
        idempotent), mark it and record it as recovered."""
        work = self._work(checkpoint) if work is None else work
        transactions = sum(len(items) for _, items in work)
        log.info("checkpoint %d is stored but not confirmed committed: committing its %d transaction(s) again",
                 checkpoint.checkpoint_id, transactions)
        started = time.monotonic()
        try:
            self._commit_groups(checkpoint.checkpoint_id, [work], recovering=True)
        except UnrecoverableCommitError as lost:
            self._record(checkpoint.checkpoint_id, CheckpointOutcome.LOST, work, None, (), lost)
            raise
        took = time.monotonic() - started
        self.store.mark_committed(checkpoint.checkpoint_id)
        self._record(checkpoint.checkpoint_id, CheckpointOutcome.RECOVERED, work,
                     CommitTimings(total_ms=_ms(took), commit_ms=_ms(took)), ())

    # -- abort -----------------------------------------------------------------------------------

    def abort(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> bool:
        """An engine gave up on ``checkpoint_id``, whose participants pre-committed ``states``.

        A stored checkpoint's transactions are committed, never aborted: if it is not confirmed
        committed yet it is committed now, and True is returned. Otherwise every transaction the
        states name is aborted (all attempted, the first error raised) and False is returned."""
        if checkpoint_id in self.store.checkpoint_ids():
            if not self.store.is_committed(checkpoint_id):
                self.commit_stored(self.store.load(checkpoint_id))
            return True
        self.abort_transactions(checkpoint_id, states)
        return False

    def abort_transactions(self, checkpoint_id: int, states: Mapping[str, JsonValue]) -> None:
        """Abort every transaction ``states`` name, pre-committed for ``checkpoint_id`` by a
        process that will not commit them (all attempted, the first error raised). Only for
        transactions no stored checkpoint holds: :meth:`abort` decides that."""
        named = [(p, states[p.name]) for p in self.participants
                 if isinstance(p, CommittingParticipant) and states.get(p.name) is not None]
        attempt_each(named, lambda ps: ps[0].abort_transactions(ps[0].committables(checkpoint_id, ps[1])))

    def sweep(self, checkpoint_id: int | None) -> list[str]:
        """Abort every lingering transaction of the sinks (none of theirs may be open now: the
        engine says so); returns their ids. Failures are logged: the next sweep retries."""
        return self._sweep(checkpoint_id, [(p, []) for p in self.participants
                                           if isinstance(p, CommittingParticipant)], always=True) or []

    # -- the steps' parts ------------------------------------------------------------------------

    def _work(self, checkpoint: CompletedCheckpoint) -> Work:
        return [(p, p.committables(checkpoint.checkpoint_id, checkpoint.state_of(p.name)))
                for p in self.participants if isinstance(p, CommittingParticipant)]

    def _sweep(self, checkpoint_id: int | None, work: Work, always: bool = False) -> list[str] | None:
        """Returns the aborted ids, or None if a sweep failed."""
        aborted: list[str] = []
        for participant, items in work:
            if not (always or participant.sweeps_after_commit):
                continue
            try:
                aborted += participant.abort_lingering([c for _, c in items], checkpoint_id)
            except Exception as exc:
                log.warning("checkpoint %s: aborting lingering transactions of %s failed: %r; retried by the "
                            "next sweep", checkpoint_id, participant.name, exc)
                return None
        return aborted

    def _record(self, checkpoint_id: int, outcome: CheckpointOutcome, work: Work, timings: CommitTimings | None,
                lingering: Sequence[str], lost: UnrecoverableCommitError | None = None) -> None:
        figures = [f for f in (p.figures([c for _, c in items], lost) for p, items in work) if f is not None]
        if not figures:
            return
        record_statistics(self.store, checkpoint_id, outcome=outcome, figures=CommitFigures.sum(figures),
                          timings=timings, lingering_aborted=lingering)

    def _commit_groups(self, checkpoint_id: int, groups: list[Work], recovering: bool,
                       between_groups: str | None = None) -> None:
        """Commit the checkpoint's transactions, group after group, each participant's at once.

        A lost transaction (UnrecoverableCommitError) stops nothing: the checkpoint's other
        transactions are committed all the same (none is left open to stall readers), and then
        one error names every loss of the checkpoint, after each participant heard of its own
        (``lost``). Any other failure stops the commit at once, to be retried by a recovery.
        ``between_groups``: a failpoint hit before each later group that has transactions."""
        lost: list[tuple[CommittingParticipant[Any], UnrecoverableCommitError]] = []
        for number, group in enumerate(groups):
            if number and between_groups is not None and any(items for _, items in group):
                failpoints.hit(between_groups, checkpoint_id=checkpoint_id)
            for participant, items in group:
                if not items:
                    continue
                try:
                    self._commit_with_retries(participant, items, checkpoint_id, recovering)
                except UnrecoverableCommitError as exc:
                    lost.append((participant, exc))
        if not lost:
            return
        every_item = [item for group in groups for _, items in group for item in items]
        error = type(lost[0][1]).merged(checkpoint_id, [exc for _, exc in lost], every_item)
        for participant in {p.name: p for p, _ in lost}.values():
            mine = [exc for p, exc in lost if p is participant]
            items = [item for group in groups for p, its in group if p is participant for item in its]
            participant.lost(checkpoint_id, items, type(mine[0]).merged(checkpoint_id, mine, items))
        log.error("checkpoint %d: %s", checkpoint_id, error)
        raise error

    def _commit_with_retries(self, participant: CommittingParticipant[Any], items: list[Any], checkpoint_id: int,
                             recovering: bool) -> None:
        try:
            self._retrying(participant.name, checkpoint_id)(participant.commit_transactions, items, recovering)
        except (failpoints.FailpointCrash, CheckpointCommitError, UnrecoverableCommitError):
            raise
        except Exception as exc:
            log.error("checkpoint %d: participant %s did not confirm the commit: %r",
                      checkpoint_id, participant.name, exc)
            if recovering:
                raise
            raise CheckpointCommitError(checkpoint_id, participant.name, exc) from exc

    def _notify_complete(self, participant: CheckpointParticipant, checkpoint_id: int) -> None:
        try:
            self._retrying(participant.name, checkpoint_id)(participant.notify_checkpoint_complete, checkpoint_id)
        except failpoints.FailpointCrash:
            raise
        except Exception as exc:
            log.error("checkpoint %d: participant %s did not confirm the commit: %r",
                      checkpoint_id, participant.name, exc)
            raise CheckpointCommitError(checkpoint_id, participant.name, exc) from exc

    def _retrying(self, participant: str, checkpoint_id: int) -> Retrying:
        return Retrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=wait_exponential(multiplier=0.05, max=self.retry.max_backoff_s),
            retry=retry_if_exception(
                lambda exc: not isinstance(exc, (failpoints.FailpointCrash, UnrecoverableCommitError))),
            reraise=True,
            before_sleep=lambda state: log.warning(
                "checkpoint %d: committing %s failed (attempt %d): %r; retrying", checkpoint_id,
                participant, state.attempt_number, state.outcome.exception() if state.outcome else None),
        )
