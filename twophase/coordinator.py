"""The checkpoint coordinator: Flink's CheckpointCoordinator, the in-process scheduler of
checkpoints, on top of the commit lifecycle (``twophase/lifecycle.py``), which decides what
becomes of each checkpoint. The scheduler decides *when*: periodic triggers, the minimum pause,
tolerable failed checkpoints, savepoints, and the statistics history. Its participants snapshot
in the trigger's call, so a checkpoint completes or fails before the trigger returns. The
protocol: ``design/exactly-once-protocol.md``.

The coordinator owns no thread. Whoever drives the job (the in-process pipeline) calls
:meth:`CheckpointCoordinator.tick` for periodic triggers, so tests control time
through the injected clock.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from twophase import failpoints, savepoints
from twophase.checkpoint import CompletedCheckpoint, JsonValue, wall_clock_ms
from twophase.errors import (
    CheckpointAbortedError,
    CheckpointCommitError,
    CheckpointFailureError,
    CheckpointTriggerError,
    IllegalStateError,
    InvalidValueError,
    UnrecoverableCommitError,
)
from twophase.checkpoint_store import FileCheckpointStore, ensure_writable_directory, validate_retained
from twophase.checkpoint_statistics import CommitTimings
from twophase.lifecycle import CommitLifecycle
from twophase.participants import CheckpointParticipant
from twophase.checkpoint_history import CheckpointHistoryEntry, CheckpointStatus

log = logging.getLogger(__name__)


def _at_least(name: str, value: float | int | None, minimum: float, *, strict: bool, unit: str = "") -> None:
    bad = value is None or isinstance(value, bool) or not isinstance(value, (int, float))
    if not bad:
        bad = value <= minimum if strict else value < minimum
    if bad:
        relation = ">" if strict else ">="
        raise InvalidValueError(f"{name} must be a number {relation} {minimum}{unit}, got {value!r}")


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpointing knobs, with Flink's meaning. Durations are seconds."""

    #: Seconds between periodic checkpoints; None: only manual triggers.
    checkpoint_interval: float | None = 10.0
    #: Seconds from the end of one checkpoint to the next periodic trigger.
    min_pause_between_checkpoints: float = 0.0
    #: Consecutive failed checkpoints tolerated before the job fails.
    tolerable_failed_checkpoints: int = 0
    retained_checkpoints: int = 3

    def __post_init__(self) -> None:
        if self.checkpoint_interval is not None:
            _at_least("checkpoint_interval", self.checkpoint_interval, 0, strict=True, unit=" s (or None)")
        value = self.tolerable_failed_checkpoints
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidValueError(f"tolerable_failed_checkpoints must be an integer >= 0, got {value!r}")
        _at_least("min_pause_between_checkpoints", self.min_pause_between_checkpoints, 0, strict=False, unit=" s")
        validate_retained(self.retained_checkpoints)


@dataclass
class TriggeredCheckpoint:
    """A checkpoint between its trigger and its completion: its participants' states so far."""

    checkpoint_id: int
    trigger_timestamp_ms: int
    savepoint_path: str | Path | None
    states: dict[str, JsonValue] = field(default_factory=dict)

    @property
    def is_savepoint(self) -> bool:
        return self.savepoint_path is not None


class CheckpointCoordinator:
    def __init__(
        self,
        store: FileCheckpointStore,
        config: CheckpointConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        allow_non_restored_state: bool = False,
    ) -> None:
        self.config = config or CheckpointConfig(retained_checkpoints=store.retained_checkpoints)
        if store.retained_checkpoints != self.config.retained_checkpoints:
            store.retained_checkpoints = self.config.retained_checkpoints
        self.store = store
        self._clock = clock
        self._allow_non_restored_state = allow_non_restored_state
        self._participants: dict[str, CheckpointParticipant] = {}
        self._pending: dict[int, TriggeredCheckpoint] = {}
        self._stats: dict[int, CheckpointHistoryEntry] = {}
        self._history: deque[int] = deque(maxlen=100)
        self._lock = threading.RLock()
        self._restored = False
        self._stopped = False
        self._next_id = store.next_checkpoint_id()
        self._last_trigger_time: float | None = None
        self._last_completion_time: float | None = None
        self._consecutive_failures = 0
        self.latest_completed: CompletedCheckpoint | None = None
        #: The step timings of the last commit of this coordinator.
        self.last_commit: CommitTimings | None = None

    # -- participants ----------------------------------------------------------------------------

    def register(self, participant: CheckpointParticipant) -> None:
        with self._lock:
            if self._restored:
                raise IllegalStateError("register every participant before restore()")
            if participant.name in self._participants:
                raise InvalidValueError(f"participant name {participant.name!r} is already registered")
            self._participants[participant.name] = participant

    @property
    def participants(self) -> list[CheckpointParticipant]:
        return list(self._participants.values())

    # -- restore ---------------------------------------------------------------------------------

    def restore(self, savepoint_path: str | Path | None = None) -> CompletedCheckpoint | None:
        """Abort pending checkpoints, then :meth:`recover` from the latest completed checkpoint (or
        the savepoint at ``savepoint_path``)."""
        with self._lock:
            self._abort_all_pending("restore")
            return self.recover(savepoint_path)

    def recover(self, savepoint_path: str | Path | None = None) -> CompletedCheckpoint | None:
        """Choose what to recover from: the latest completed checkpoint, or the savepoint at
        ``savepoint_path`` (put into the store first, so a failover after this restore returns to
        it). The recovery itself is the lifecycle's (commit the stored checkpoint if not confirmed,
        abort lingering transactions, rewind)."""
        with self._lock:
            if savepoint_path is not None:
                checkpoint = savepoints.load_savepoint(savepoint_path)
                committed = savepoints.is_savepoint_committed(savepoint_path)
                self._lifecycle().adopt_savepoint(checkpoint, committed=committed, origin=str(savepoint_path))
            else:
                checkpoint, committed = self._lifecycle().stored.newest_readable()
            if checkpoint is not None:
                unknown = set(checkpoint.operator_states) - set(self._participants)
                if unknown and not self._allow_non_restored_state:
                    raise InvalidValueError(
                        f"checkpoint {checkpoint.checkpoint_id} has state for participants "
                        f"{sorted(unknown)} that are not registered; register them or pass "
                        "allow_non_restored_state=True"
                    )
            self._lifecycle().recover(checkpoint, committed=committed)
            if checkpoint is not None and savepoint_path is not None and not committed:
                savepoints.mark_savepoint_committed(savepoint_path)
            self._attach(checkpoint)
            return checkpoint

    def _lifecycle(self) -> CommitLifecycle:
        return CommitLifecycle(self.store, list(self._participants.values()))

    def _attach(self, checkpoint: CompletedCheckpoint | None) -> None:
        self.latest_completed = checkpoint
        restored_id = checkpoint.checkpoint_id if checkpoint else None
        self._next_id = max(self._next_id, self.store.next_checkpoint_id(), (restored_id or 0) + 1)
        self._restored = True

    # -- triggering ------------------------------------------------------------------------------

    def trigger_checkpoint(self) -> int:
        """Trigger a checkpoint now (not the min pause): every participant snapshots, then the
        lifecycle completes it, before this returns its id. Raises CheckpointAbortedError (or
        CheckpointFailureError) if a participant fails to snapshot."""
        return self._trigger(savepoint_path=None, periodic=False)

    def trigger_savepoint(self, path: str | Path) -> int:
        """Trigger a savepoint into ``path``, a folder path or URI (self-contained, never expires)."""
        ensure_writable_directory(path, "savepoint directory")
        return self._trigger(savepoint_path=path, periodic=False)

    def stop_with_savepoint(self, path: str | Path) -> CompletedCheckpoint:
        """Take a final savepoint, commit it, and stop triggering."""
        checkpoint_id = self.trigger_savepoint(path)
        with self._lock:
            self._stopped = True
            assert self.latest_completed is not None
            log.info("stopped with savepoint %d at %s", checkpoint_id, path)
            return self.latest_completed

    def tick(self) -> int | None:
        """Trigger a periodic checkpoint when due. Returns its id."""
        with self._lock:
            if not self._periodic_trigger_due(self._clock()):
                return None
        return self._trigger(savepoint_path=None, periodic=True)

    def _periodic_trigger_due(self, now: float) -> bool:
        interval = self.config.checkpoint_interval
        if interval is None or self._stopped or not self._restored:
            return False
        if self._last_trigger_time is not None and now - self._last_trigger_time < interval:
            return False
        if (self._last_completion_time is not None
                and now - self._last_completion_time < self.config.min_pause_between_checkpoints):
            return False
        return True

    def _trigger(self, savepoint_path: str | Path | None, periodic: bool) -> int:
        with self._lock:
            if not self._restored:
                raise CheckpointTriggerError("call restore() before triggering checkpoints")
            if self._stopped:
                raise CheckpointTriggerError("the coordinator was stopped with a savepoint")
            checkpoint_id = self._next_id
            # An id must never come again, even if this checkpoint never completes.
            self.store.reserve_checkpoint_id(checkpoint_id)
            self._next_id = checkpoint_id + 1
            self._last_trigger_time = self._clock()
            pending = TriggeredCheckpoint(
                checkpoint_id=checkpoint_id,
                trigger_timestamp_ms=wall_clock_ms(),
                savepoint_path=savepoint_path,
            )
            self._pending[checkpoint_id] = pending
            stats = CheckpointHistoryEntry(
                checkpoint_id=checkpoint_id,
                is_savepoint=savepoint_path is not None,
                trigger_timestamp_ms=pending.trigger_timestamp_ms,
                participants=len(self._participants),
            )
            self._stats[checkpoint_id] = stats
            if len(self._history) == self._history.maxlen:
                self._stats.pop(self._history[0], None)
            self._history.append(checkpoint_id)
            log.debug("checkpoint %d triggered (%s)", checkpoint_id,
                      "savepoint" if savepoint_path else "periodic" if periodic else "manual")
            for participant in self._participants.values():
                try:
                    state = participant.snapshot_state(checkpoint_id)
                except failpoints.FailpointCrash:
                    raise
                except Exception as exc:
                    log.warning("checkpoint %d: participant %s failed to snapshot: %r",
                                checkpoint_id, participant.name, exc)
                    raise self._abort(pending, f"participant {participant.name!r} failed: {exc!r}") from exc
                self._acknowledge(pending, participant.name, state)
            return checkpoint_id

    # -- acknowledgements ------------------------------------------------------------------------

    def _acknowledge(self, pending: TriggeredCheckpoint, participant: str, state: JsonValue) -> None:
        # Checked here, not at store time, so a bad state fails its own checkpoint with a clear
        # cause instead of a serialization error deep in the store.
        try:
            json.dumps(state)
        except (TypeError, ValueError) as exc:
            raise self._abort(pending, f"participant {participant!r} returned a state that is not "
                                       f"JSON-serializable: {exc}") from exc
        pending.states[participant] = state
        self._stats[pending.checkpoint_id].acknowledged += 1
        if len(pending.states) == len(self._participants):
            self._complete(pending)

    # -- completion ------------------------------------------------------------------------------

    def _complete(self, pending: TriggeredCheckpoint) -> None:
        checkpoint = CompletedCheckpoint(
            checkpoint_id=pending.checkpoint_id,
            trigger_timestamp_ms=pending.trigger_timestamp_ms,
            completion_timestamp_ms=wall_clock_ms(),
            operator_states=dict(pending.states),
            is_savepoint=pending.is_savepoint,
        )
        stats = self._stats[pending.checkpoint_id]
        if pending.savepoint_path is not None:
            try:
                savepoints.write_savepoint(pending.savepoint_path, checkpoint)
            except OSError as exc:
                raise self._abort(pending, f"writing the savepoint failed: {exc!r}") from exc
        lifecycle = self._lifecycle()
        try:
            self.last_commit = lifecycle.complete(checkpoint).timings
        except failpoints.FailpointCrash:
            raise
        except OSError as exc:
            if not lifecycle.stored_despite(checkpoint.checkpoint_id, exc):
                raise self._abort(pending, f"storing the checkpoint failed: {exc!r}") from exc
            self._stored(pending, checkpoint)
            raise
        except (CheckpointCommitError, UnrecoverableCommitError) as exc:
            self._stored(pending, checkpoint)
            stats.status = CheckpointStatus.COMPLETED_NOT_COMMITTED
            stats.failure_cause = repr(exc.__cause__ if isinstance(exc, CheckpointCommitError) else exc)
            stats.end_to_end_duration_ms = checkpoint.completion_timestamp_ms - checkpoint.trigger_timestamp_ms
            raise
        self._stored(pending, checkpoint)
        if pending.savepoint_path is not None:
            savepoints.mark_savepoint_committed(pending.savepoint_path)
        for participant in self._participants.values():
            try:
                participant.notify_checkpoint_complete(checkpoint.checkpoint_id)
            except Exception as exc:  # nothing of exactly-once depends on it (a crash skips it too)
                log.warning("checkpoint %d: participant %s failed to take note of its completion: %r",
                            checkpoint.checkpoint_id, participant.name, exc)
        stats.status = CheckpointStatus.COMPLETED
        stats.end_to_end_duration_ms = wall_clock_ms() - checkpoint.trigger_timestamp_ms
        log.info("checkpoint %d completed%s in %d ms, state %d bytes", checkpoint.checkpoint_id,
                 " (savepoint)" if checkpoint.is_savepoint else "", stats.end_to_end_duration_ms,
                 stats.state_size_bytes)

    def _stored(self, pending: TriggeredCheckpoint, checkpoint: CompletedCheckpoint) -> None:
        """The scheduler's bookkeeping of a checkpoint the lifecycle stored (the decision), whether
        or not its commit then went through."""
        self._pending.pop(pending.checkpoint_id, None)
        self._stats[pending.checkpoint_id].state_size_bytes = len(json.dumps(checkpoint.operator_states))
        self.latest_completed = checkpoint
        self._last_completion_time = self._clock()
        self._consecutive_failures = 0

    # -- aborting --------------------------------------------------------------------------------

    def _abort(self, pending: TriggeredCheckpoint, cause: str) -> Exception:
        """Abort ``pending``; return the error for the caller to raise: CheckpointAbortedError, or
        CheckpointFailureError once more consecutive checkpoints failed than are tolerable."""
        self._discard(pending, cause)
        self._consecutive_failures += 1
        if self._consecutive_failures > self.config.tolerable_failed_checkpoints:
            return CheckpointFailureError(
                f"{self._consecutive_failures} consecutive checkpoint failures exceed "
                f"tolerable_failed_checkpoints={self.config.tolerable_failed_checkpoints}; "
                f"last: checkpoint {pending.checkpoint_id}: {cause}"
            )
        return CheckpointAbortedError(pending.checkpoint_id, cause)

    def _discard(self, pending: TriggeredCheckpoint, cause: str) -> None:
        self._pending.pop(pending.checkpoint_id, None)
        stats = self._stats[pending.checkpoint_id]
        stats.status = CheckpointStatus.FAILED
        stats.failure_cause = cause
        stats.end_to_end_duration_ms = wall_clock_ms() - pending.trigger_timestamp_ms
        log.warning("checkpoint %d aborted: %s", pending.checkpoint_id, cause)
        try:
            self._lifecycle().abort_transactions(pending.checkpoint_id, pending.states)
        except failpoints.FailpointCrash:
            raise
        except Exception as exc:  # the restore that follows aborts lingering transactions
            log.warning("checkpoint %d: aborting its pre-committed transactions failed: %r; the restore that "
                        "follows aborts them as lingering", pending.checkpoint_id, exc)
        for name in pending.states:
            self._participants[name].notify_checkpoint_aborted(pending.checkpoint_id)

    def _abort_all_pending(self, cause: str) -> None:
        for pending in list(self._pending.values()):
            self._discard(pending, cause)

    # -- statistics ------------------------------------------------------------------------------

    @property
    def pending_checkpoint_ids(self) -> list[int]:
        with self._lock:
            return sorted(self._pending)

    def checkpoint_stats(self) -> list[CheckpointHistoryEntry]:
        """Statistics of the last 100 checkpoints, oldest first (copies)."""
        with self._lock:
            return [self._stats[i].copy() for i in self._history if i in self._stats]

    def stats_for(self, checkpoint_ids: Iterable[int]) -> list[CheckpointHistoryEntry]:
        with self._lock:
            return [self._stats[i].copy() for i in checkpoint_ids if i in self._stats]
