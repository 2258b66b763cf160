"""The driver side of the exactly-once Spark sink: one micro-batch is one checkpoint.

``commit(messages, N)`` runs the twophase lifecycle for checkpoint N: the committables of every
task are stored durably under the query's checkpoint location, then every transaction is
committed (in parallel, bounded), then N is marked committed. :meth:`recover` runs before any task
of a batch writes (from ``streamWriter()``), so a batch stored but not confirmed committed is
committed again before Spark's replay of it could re-initialise (and so abort) its transactions.

Spark calls these from short-lived Python worker processes, so nothing is kept in memory between
calls: the store on disk is the only state.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from connectors.kafka.clients import KafkaClients
from connectors.kafka.client_factory import clients_for
from connectors.kafka.abort_strategy import LingeringTransactionAborter
from connectors.kafka.committable import KafkaCommittable
from connectors.kafka.committer import KafkaTransactionCommitter
from connectors.kafka.errors import TransactionLostError
from connectors.kafka.transactional_ids import TransactionalIdPool
from connectors.spark.commit_statistics import record_commit, record_lost, record_recovery, totals_before
from connectors.spark.options import SinkOptions
from twophase import failpoints
from twophase.checkpoint_statistics import CommitTimings
from twophase.checkpoint_store import FileCheckpointStore
from twophase.coordinator import CheckpointConfig, CheckpointCoordinator
from twophase.participants import CheckpointParticipant, RestoredState

log = logging.getLogger(__name__)

SINK_PARTICIPANT = "kafka-sink"


def committables_of(state: Any) -> list[KafkaCommittable]:
    return [KafkaCommittable.from_json(c) for c in (state or [])]


class _SparkSinkParticipant(CheckpointParticipant):
    """The sink as the coordinator sees it: tasks acknowledge through the driver's commit()."""

    acknowledges_externally = True
    commits_on_notify = True

    def __init__(self, committer: KafkaTransactionCommitter, options: SinkOptions,
                 store: FileCheckpointStore) -> None:
        self.name = SINK_PARTICIPANT
        self.committer = committer
        self._options, self._store = options, store
        self._acknowledged: dict[int, list[KafkaCommittable]] = {}
        #: When the last notify_checkpoint_complete started and ended (monotonic seconds).
        self.notify_span: tuple[float, float] | None = None

    def acknowledging(self, checkpoint_id: int, committables: list[KafkaCommittable]) -> None:
        self._acknowledged[checkpoint_id] = committables

    def snapshot_state(self, checkpoint_id: int) -> Any:
        raise RuntimeError("the Spark sink's state arrives from its tasks, never from a snapshot")

    def restore(self, restored: RestoredState) -> None:
        if restored.checkpoint_id is not None and not restored.committed:
            failpoints.hit(failpoints.DURING_RESTORE, checkpoint_id=restored.checkpoint_id)
            log.info("checkpoint %d is stored but not confirmed committed: committing its "
                     "transactions again", restored.checkpoint_id)
            committables = committables_of(restored.state)
            started = time.monotonic()
            self._commit_all(committables, restored.checkpoint_id)
            record_recovery(self._options, self._store, restored.checkpoint_id, committables,
                            (time.monotonic() - started) * 1000)

    def _commit_all(self, committables: list[KafkaCommittable], checkpoint_id: int) -> None:
        try:
            self.committer.commit_all(committables, checkpoint_id)
        except TransactionLostError as exc:
            record_lost(self._options, self._store, checkpoint_id, committables, [exc.transactional_id])
            raise

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        started = time.monotonic()
        self._commit_all(self._acknowledged.pop(checkpoint_id, []), checkpoint_id)
        self.notify_span = (started, time.monotonic())

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.committer.abort_all(self._acknowledged.pop(checkpoint_id, []), checkpoint_id)


class SparkCommitProtocol:
    def __init__(self, options: SinkOptions, clients: KafkaClients | None = None) -> None:
        self.options = options
        config = options.config
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        self.committer = KafkaTransactionCommitter(self.clients, config)
        # Probed once per worker by guard_sink_state, not for every batch.
        self.store = FileCheckpointStore(options.state_dir, options.retained_checkpoints, check_writable=False)

    def _coordinator(self) -> tuple[CheckpointCoordinator, _SparkSinkParticipant]:
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
        participant = _SparkSinkParticipant(self.committer, self.options, self.store)
        coordinator.register(participant)
        return coordinator, participant

    def recover(self) -> int:
        """Commit a stored but unconfirmed checkpoint again; return the newest committed
        checkpoint id (-1 if none), which write tasks of a replayed batch compare against."""
        coordinator, _ = self._coordinator()
        restored = coordinator.restore()
        return restored.checkpoint_id if restored else -1

    def commit(self, messages: Sequence[Any], checkpoint_id: int, *, replayable: bool = True) -> None:
        """Store and commit checkpoint ``checkpoint_id`` made of the tasks' ``messages``.

        ``replayable``: the id is a batch id that Spark (or the foreachBatch helper) may run again
        after a crash, so an id already stored is such a replay. A plain batch write is never
        replayed: an id at or below the newest stored one means another writer of the same sink
        committed meanwhile, which is refused rather than taken for a replay."""
        started = time.monotonic()
        committables = [KafkaCommittable.from_json(m.committable) for m in messages
                        if m is not None and m.committable is not None]
        latest = self.store.latest()
        if latest is not None and checkpoint_id <= latest.checkpoint_id and not replayable:
            self.committer.abort_all(committables, checkpoint_id)
            raise RuntimeError(
                f"kafka-eos: another write to this sink stored checkpoint {latest.checkpoint_id} while "
                f"this batch write (checkpoint {checkpoint_id}) was running, in {self.options.state_dir}; "
                "this write's transactions were aborted and nothing of it is visible. Concurrent writes "
                "to one sink need their own eos.transactionalIdPrefix and eos.stateDir each.")
        if latest is not None and checkpoint_id <= latest.checkpoint_id:
            # Spark replays a batch whose commit-log entry it lost; its tasks wrote nothing.
            self.recover()
            self.committer.abort_all(committables, checkpoint_id)
            log.info("batch %d was already committed as checkpoint %d; its replay is a no-op",
                     checkpoint_id, latest.checkpoint_id)
            return
        wrong = sorted({m.checkpoint_id for m in messages
                        if m is not None and m.checkpoint_id != checkpoint_id})
        if wrong:
            self.committer.abort_all(committables, checkpoint_id)
            raise RuntimeError(
                f"kafka-eos: tasks of batch {checkpoint_id} wrote under checkpoint ids {wrong}; their "
                "transactions were aborted and the batch fails, to be replayed")
        coordinator, participant = self._coordinator()
        coordinator.restore()
        statistics_before = totals_before(self.store, checkpoint_id)
        coordinator.trigger_checkpoint(checkpoint_id=checkpoint_id)
        participant.acknowledging(checkpoint_id, committables)
        acknowledged = time.monotonic()
        coordinator.acknowledge(checkpoint_id, participant.name, [c.to_json() for c in committables])
        completed = time.monotonic()
        lingering = self.abort_lingering(keep=[c.transactional_id for c in committables if c.transactional_id])
        ended = time.monotonic()
        notify = participant.notify_span or (completed, completed)
        timings = CommitTimings(total_ms=(ended - started) * 1000, prepare_ms=(acknowledged - started) * 1000,
                                store_ms=(notify[0] - acknowledged) * 1000, end_txn_ms=(notify[1] - notify[0]) * 1000,
                                mark_ms=(completed - notify[1]) * 1000, sweep_ms=(ended - completed) * 1000)
        log.info("batch %d committed: %d transactions, %d records, %.0f ms (prepare %.0f, store %.0f, "
                 "EndTxn %.0f, mark %.0f, lingering sweep %.0f)", checkpoint_id,
                 len(committables), sum(c.record_count for c in committables), (ended - started) * 1000,
                 (acknowledged - started) * 1000, (notify[0] - acknowledged) * 1000,
                 (notify[1] - notify[0]) * 1000, (completed - notify[1]) * 1000, (ended - completed) * 1000)
        record_commit(self.options, self.store, checkpoint_id, committables, timings, lingering, statistics_before)

    def abort(self, messages: Sequence[Any], checkpoint_id: int) -> None:
        committables = [KafkaCommittable.from_json(m.committable) for m in messages
                        if m is not None and m.committable is not None]
        log.warning("batch %d failed: aborting %d pre-committed transactions", checkpoint_id, len(committables))
        self.committer.abort_all(committables, checkpoint_id)

    def abort_lingering(self, keep: Sequence[str] = ()) -> list[str]:
        """Abort open transactions of this sink left by crashed tasks or a crashed driver.

        Between batches no transaction of this sink may be open, so everything found is left over
        (a task count that changed between the crashed run and its replay leaves ids no replayed
        task re-initialises)."""
        config = self.options.config
        if not config.exactly_once or config.transactional_id_prefix is None:
            return []
        aborter = LingeringTransactionAborter(self.committer, TransactionalIdPool(config.transactional_id_prefix),
                                              config.commit_retry_timeout_s)
        return aborter.abort_lingering(keep)

    def close(self) -> None:
        self.committer.close()
