"""The driver side of the exactly-once Spark sink: one micro-batch is one checkpoint.

Every step of the lifecycle is the coordinator's (``twophase/coordinator.py``); this module only
hands it what Spark gives the driver:

- :meth:`SparkCommitProtocol.recover`, from ``streamWriter()`` before the tasks of a batch write:
  the coordinator's recovery (commit a stored but unconfirmed checkpoint; abort lingering
  transactions, except from ``streamWriter()``, which Spark also calls in the process that commits
  a batch whose tasks have written: there the sweep after the commit does it);
- :meth:`SparkCommitProtocol.commit` (Spark's ``commit(messages, batchId)``): the tasks'
  committables are acknowledged as checkpoint N, which the coordinator stores, commits and marks;
- :meth:`SparkCommitProtocol.abort` (Spark's ``abort(messages, batchId)``): a batch whose
  checkpoint is stored is committed, never aborted; otherwise its transactions are aborted.

Spark calls these from short-lived Python worker processes, so nothing is kept in memory between
calls: the store is the only state.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from connectors.kafka.sink.internal.abort_strategy import LingeringTransactionAborter
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import KafkaClients
from connectors.kafka.sink.commit_loop import abort_by_checkpoint, commit_by_checkpoint
from connectors.kafka.sink.committable import KafkaCommittable
from connectors.kafka.sink.committer import KafkaTransactionCommitter
from connectors.kafka.errors import TransactionLostError
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.spark.commit_statistics import record_commit, record_lost, record_recovery, totals_before
from connectors.spark.options import SinkOptions
from twophase.checkpoint import JsonValue
from twophase.checkpoint_store import FileCheckpointStore
from twophase.checkpoint_statistics import CommitTimings
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator, CommitResult
from twophase.participants import CommittingParticipant
from twophase.errors import IllegalStateError, UnrecoverableCommitError

log = logging.getLogger(__name__)

SINK_PARTICIPANT = "kafka-sink"


def committables_of(state: Any) -> list[KafkaCommittable]:
    return [KafkaCommittable.from_json(c) for c in (state or [])]


class SparkSinkCommitter(CommittingParticipant[KafkaCommittable]):
    """The committer side of the Spark sink: its state in checkpoint N is the list of the tasks'
    committables, as the tasks sent them (JSON), acknowledged through the driver's commit()."""

    acknowledges_externally = True
    # Between batches no transaction of this sink may be open, so everything found is left over
    # (a task count that changed between the crashed run and its replay leaves ids no replayed
    # task re-initialises).
    sweeps_after_commit = True

    def __init__(self, committer: KafkaTransactionCommitter, options: SinkOptions, store: FileCheckpointStore,
                 in_flight: Sequence[str] = ()) -> None:
        self.name = SINK_PARTICIPANT
        self.committer = committer
        self.options = options
        self.store = store
        #: Transactional ids of the batch being committed by this process, which a recovery
        #: that runs first must not take for lingering.
        self.in_flight = list(in_flight)
        #: What the last commit and sweep of this process ended, for the checkpoint's statistics.
        self.committed_now: list[KafkaCommittable] = []
        self.lingering_aborted: list[str] = []

    def committables(self, checkpoint_id: int, state: JsonValue) -> list[tuple[int, KafkaCommittable]]:
        return [(checkpoint_id, c) for c in committables_of(state)]

    def commit_transactions(self, committables: Sequence[tuple[int, KafkaCommittable]], recovering: bool) -> None:
        def committed(checkpoint_id: int, group: list[KafkaCommittable], took_ms: float) -> None:
            self.committed_now.extend(group)
            if recovering:
                record_recovery(self.options, self.store, checkpoint_id, group, took_ms)

        commit_by_checkpoint(self.committer, committables, committed)

    def lost(self, checkpoint_id: int, committables: Sequence[tuple[int, KafkaCommittable]],
             error: UnrecoverableCommitError) -> None:
        # Called once per checkpoint by the coordinator, after every commit was attempted: the
        # record lists every lost transaction, so status and the metrics count all of them.
        lost = error.lost if isinstance(error, TransactionLostError) else ()
        record_lost(self.options, self.store, checkpoint_id, [c for _, c in committables], lost)

    def abort_transactions(self, committables: Sequence[tuple[int, KafkaCommittable]]) -> None:
        abort_by_checkpoint(self.committer, committables)

    def abort_lingering(self, keep: Sequence[KafkaCommittable], checkpoint_id: int | None) -> list[str]:
        config = self.options.config
        if not config.exactly_once or config.transactional_id_prefix is None:
            return []
        kept = [c.transactional_id for c in keep if c.transactional_id] + self.in_flight
        aborter = LingeringTransactionAborter(self.committer, TransactionalIdPool(config.transactional_id_prefix),
                                              config.commit_retry_timeout_s)
        self.lingering_aborted = aborter.abort_lingering(kept)
        return self.lingering_aborted


class SparkCommitProtocol:
    def __init__(self, options: SinkOptions, clients: KafkaClients | None = None) -> None:
        self.options = options
        config = options.config
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        self.committer = KafkaTransactionCommitter(self.clients, config)
        # Probed once per worker by guard_sink_state, not for every batch.
        self.store = FileCheckpointStore(options.state_dir, options.retained_checkpoints, check_writable=False)

    def _coordinator(self, participant: SparkSinkCommitter | None = None) -> CheckpointCoordinator:
        coordinator = CheckpointCoordinator(
            self.store,
            CheckpointConfig(
                checkpoint_interval=None,
                checkpoint_timeout=self.options.config.checkpoint_timeout_ms / 1000,
                retained_checkpoints=self.options.retained_checkpoints,
                # The committer retries retriable errors itself, bounded by the transaction timeout.
                notify_attempts=1,
            ),
        )
        coordinator.register(participant or SparkSinkCommitter(self.committer, self.options, self.store))
        return coordinator

    def recover(self, abort_lingering: bool = True) -> int:
        """The coordinator's recovery; returns the newest committed checkpoint id (-1 if none),
        which write tasks of a replayed batch compare against.

        ``abort_lingering=False`` where tasks of a batch may have written already: Spark calls
        ``streamWriter()``, and so :func:`prepare_sink`, again in the process that commits or
        aborts a batch."""
        restored = self._coordinator().recover(abort_lingering=abort_lingering)
        return restored.checkpoint_id if restored else -1

    def commit(self, messages: Sequence[Any], checkpoint_id: int, *, replayable: bool = True) -> CommitResult | None:
        """Store and commit checkpoint ``checkpoint_id`` made of the tasks' ``messages``; return
        the timings of its steps (None for a replay, which commits nothing new).

        ``replayable``: the id is a batch id that Spark (or the foreachBatch helper) may run again
        after a crash, so an id already stored is such a replay. A plain batch write is never
        replayed: an id at or below the newest stored one means another writer of the same sink
        committed meanwhile, which is refused rather than taken for a replay."""
        started = time.monotonic()
        states = [m.committable for m in messages if m is not None and m.committable is not None]
        latest = self.store.latest()
        if latest is not None and checkpoint_id <= latest.checkpoint_id:
            committables = [(checkpoint_id, c) for c in committables_of(states)]
            if not replayable:
                self._abort(committables)
                raise IllegalStateError(
                    f"kafka-eos: another write to this sink stored checkpoint {latest.checkpoint_id} while "
                    f"this batch write (checkpoint {checkpoint_id}) was running, in {self.options.state_dir}; "
                    "this write's transactions were aborted and nothing of it is visible. Concurrent writes "
                    "to one sink need their own eos.transactionalIdPrefix and eos.stateDir each.")
            # Spark replays a batch whose commit-log entry it lost; its tasks wrote nothing (what
            # tasks that did not know it was done wrote is aborted).
            self._abort(committables)
            self.recover()
            log.info("batch %d was already committed as checkpoint %d; its replay is a no-op",
                     checkpoint_id, latest.checkpoint_id)
            return None
        wrong = sorted({m.checkpoint_id for m in messages
                        if m is not None and m.checkpoint_id != checkpoint_id})
        if wrong:
            self._abort([(checkpoint_id, c) for c in committables_of(states)])
            raise IllegalStateError(
                f"kafka-eos: tasks of batch {checkpoint_id} wrote under checkpoint ids {wrong}; their "
                "transactions were aborted and the batch fails, to be replayed")
        participant = SparkSinkCommitter(self.committer, self.options, self.store,
                                         in_flight=[s["transactional_id"] for s in states if s.get("transactional_id")])
        coordinator = self._coordinator(participant)
        coordinator.resume()
        # Read before storing N, which may subsume the statistics that hold the running totals.
        statistics_before = totals_before(self.store, checkpoint_id)
        coordinator.trigger_checkpoint(checkpoint_id=checkpoint_id)
        prepared = time.monotonic()
        coordinator.acknowledge(checkpoint_id, SINK_PARTICIPANT, states)
        result = coordinator.last_commit
        assert result is not None and result.checkpoint_id == checkpoint_id
        ended = time.monotonic()
        timings = CommitTimings(total_ms=(ended - started) * 1000, prepare_ms=(prepared - started) * 1000,
                                store_ms=result.store_s * 1000, end_txn_ms=result.commit_s * 1000,
                                mark_ms=result.mark_s * 1000, sweep_ms=result.sweep_s * 1000)
        log.info("batch %d committed: %d transactions, %d records, %.0f ms (prepare %.0f, store %.0f, "
                 "EndTxn %.0f, mark %.0f, lingering sweep %.0f)", checkpoint_id,
                 len(states), sum(int(s.get("record_count", 0)) for s in states), timings.total_ms,
                 timings.prepare_ms, timings.store_ms, timings.end_txn_ms, timings.mark_ms, timings.sweep_ms)
        record_commit(self.options, self.store, checkpoint_id, participant.committed_now, timings,
                      participant.lingering_aborted, statistics_before)
        return result

    def abort(self, messages: Sequence[Any], checkpoint_id: int) -> None:
        """Spark gave up on batch ``checkpoint_id``: the coordinator's abort, which commits a
        stored batch (never aborts it) and aborts only a batch never stored. What this cannot
        end is left to the next recovery."""
        states = [m.committable for m in messages if m is not None and m.committable is not None]
        try:
            stored = self._coordinator().abort_checkpoint(checkpoint_id, {SINK_PARTICIPANT: states})
        except Exception as exc:
            if checkpoint_id in self.store.checkpoint_ids():
                log.warning("batch %d failed after its checkpoint was stored: its %d transactions are committed, "
                            "not aborted; committing them here failed (%r), the next recovery does",
                            checkpoint_id, len(states), exc)
            else:
                log.warning("batch %d failed: aborting its %d pre-committed transactions failed (%r); the next "
                            "recovery aborts them as lingering", checkpoint_id, len(states), exc)
            return
        if stored:
            log.warning("batch %d failed after its checkpoint was stored: its %d transactions are committed, "
                        "not aborted", checkpoint_id, len(states))
        else:
            log.warning("batch %d failed: aborted its %d pre-committed transactions", checkpoint_id, len(states))

    def _abort(self, committables: Sequence[tuple[int, KafkaCommittable]]) -> None:
        try:
            SparkSinkCommitter(self.committer, self.options, self.store).abort_transactions(committables)
        except Exception as exc:
            log.warning("aborting pre-committed transactions failed: %r; the next recovery aborts them as "
                        "lingering", exc)

    def abort_lingering(self) -> list[str]:
        """Abort open transactions of this sink left by crashed tasks or a crashed driver."""
        return SparkSinkCommitter(self.committer, self.options, self.store).abort_lingering([], None)

    def close(self) -> None:
        self.committer.close()
