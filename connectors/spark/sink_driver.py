"""The driver side of the exactly-once Spark sink, for both entry points: the ``kafka-eos`` data
source's writers (``datasource_writers.py``) and the foreachBatch helper (``foreach_batch.py``,
through ``foreach_batch_write.py``). One micro-batch (or one batch write) is one checkpoint.

:class:`SparkSinkDriver` has three steps, and each hands the commit lifecycle
(``twophase/lifecycle.py``) what Spark gives the driver:

- :meth:`~SparkSinkDriver.prepare`, before the tasks of a batch write:
  1. check the input schema and the brokers (the sink's guardrails, once per process);
  2. guard the state (owner, lost state: ``state_guard.py``);
  3. where it is due (:meth:`~SparkSinkDriver._recovery_due`: a run's start, an interrupted
     commit, a replayed batch), the lifecycle's one recovery, which commits a stored but
     unconfirmed checkpoint and aborts lingering transactions; then return the newest stored
     checkpoint id, against which the tasks of a replayed batch find that they have nothing to
     write.
- :meth:`~SparkSinkDriver.commit`, once the tasks of batch N pre-committed their transactions:
  1. a stored checkpoint not confirmed committed is committed first (the decision is carried out
     by whoever gets there first);
  2. a replay of a stored batch commits nothing more (what its tasks wrote is aborted);
  3. tasks that wrote under another checkpoint id fail the batch;
  4. the lifecycle completes N: store (the decision), commit, mark, sweep, record, subsume.
- :meth:`~SparkSinkDriver.fail`, when Spark gives up on batch N: the lifecycle's abort (a stored
  N is committed, never aborted; otherwise its transactions are aborted), then the sweep of what
  its tasks left open that Spark sent no message of.

When to sweep lingering transactions is decided here alone: in the recovery of ``prepare``, after
every commit (between two batches no transaction of this sink may be open), and after a failed
batch. Spark calls these from short-lived Python processes, so nothing is kept in memory between
calls: the store is the only state.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

from pyspark.sql.types import StructType

from connectors.kafka.clients import KafkaClients
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.sink.committer import KafkaTransactionCommitter
from connectors.kafka.sink.committing_participant import KafkaCommittingParticipant
from connectors.kafka.sink.guardrails import check_output_topic, check_sink
from connectors.spark.batch_context import BatchContext
from connectors.spark.options import SinkOptions
from connectors.spark.query_checkpoint import read_query_checkpoint
from connectors.spark.schema import check_sink_schema
from connectors.spark.state_guard import guard_sink_state
from twophase.checkpoint import CompletedCheckpoint, wall_clock_ms
from twophase.checkpoint_statistics import CommitTimings
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import IllegalStateError
from twophase.lifecycle import CommitLifecycle

__all__ = ["BatchContext", "SINK_PARTICIPANT", "SparkSinkDriver", "check_guardrails", "prepare_before_tasks"]

log = logging.getLogger(__name__)

SINK_PARTICIPANT = "kafka-sink"

_guardrails_checked: set[tuple[object, ...]] = set()
_guardrails_lock = threading.Lock()


def check_guardrails(options: SinkOptions) -> None:
    """The broker checks of the sink (its topic exists, then the transactional checks), once per
    process and configuration. A call made while another runs them waits for its outcome; a
    failed check is made again."""
    config = options.config
    key = (config.bootstrap_servers, config.topic, config.delivery_guarantee, config.transactional_id_prefix,
           config.transaction_timeout_ms, config.checkpoint_timeout_ms + config.restart_budget_ms,
           tuple(sorted(config.client_config.items())))
    with _guardrails_lock:
        if key not in _guardrails_checked:
            clients = clients_for(config.bootstrap_servers, config.client_config)
            check_output_topic(config, clients)
            check_sink(config, clients)
            _guardrails_checked.add(key)


def _states(messages: Sequence[Any]) -> list[Any]:
    """The committables the tasks sent (JSON); a failed task's message is None."""
    return [m.committable for m in messages if m is not None and m.committable is not None]


def prepare_before_tasks(options: SinkOptions, schema: StructType, *, first_of_run: bool) -> int:
    """The data source's ``prepare``, where Spark plans a write: a streaming query's batch (whose id
    Spark's offset log names) or a plain batch write (``first_of_run``)."""
    context = None
    if options.streaming and options.checkpoint_location is not None:
        planned = read_query_checkpoint(options.checkpoint_location).last_planned_batch()
        context = None if planned is None else BatchContext(planned)
    with SparkSinkDriver(options) as driver:
        return driver.prepare(schema, context, first_of_run=first_of_run)


class SparkSinkDriver:
    def __init__(self, options: SinkOptions, clients: KafkaClients | None = None,
                 store: FileCheckpointStore | None = None) -> None:
        self.options = options
        config = options.config
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        self.committer = KafkaTransactionCommitter(self.clients, config)
        # Probed once per worker by guard_sink_state, not for every batch.
        self.store = store or FileCheckpointStore(options.state_dir, options.retained_checkpoints,
                                                  check_writable=False)
        self.lifecycle = CommitLifecycle(
            self.store,
            # Sweeping after each commit is what keeps no transaction open between two batches.
            [KafkaCommittingParticipant(self.committer, SINK_PARTICIPANT, sweeps_after_commit=True)])

    # -- prepare ---------------------------------------------------------------------------------

    def prepare(self, schema: StructType, context: BatchContext | None = None, *, first_of_run: bool) -> int:
        """Steps 1-3 of ``prepare`` (module doc). Returns the newest stored checkpoint id (-1 if
        none), which write tasks compare their batch id against. ``context``: the batch about to
        be written, where the caller knows it. ``first_of_run``: the caller knows that no batch of
        this run was written yet (the foreachBatch helper's first call, a plain batch write)."""
        check_sink_schema(schema, self.options.config.topic)
        check_guardrails(self.options)
        if not self.options.config.exactly_once:
            return -1
        guard_sink_state(self.options, context)
        return self.recover(context, first_of_run=first_of_run)

    def recover(self, context: BatchContext | None = None, *, first_of_run: bool = True) -> int:
        """Step 3 of ``prepare``: the lifecycle's recovery from the newest stored checkpoint, where
        :meth:`_recovery_due` says so (always for a run's first batch, ``first_of_run``). Returns
        the newest stored checkpoint id (-1 if none): a stored checkpoint is decided, so its
        batch's tasks, replayed, have nothing to write."""
        latest = self.store.latest()
        committed = latest is not None and self.store.is_committed(latest.checkpoint_id)
        if self._recovery_due(context, latest, committed, first_of_run):
            self.lifecycle.recover(latest, committed=committed)
        return latest.checkpoint_id if latest is not None else -1

    @staticmethod
    def _recovery_due(context: BatchContext | None, latest: CompletedCheckpoint | None, committed: bool,
                      first_of_run: bool) -> bool:
        """The one place that decides when the lifecycle's recovery, with its sweep of lingering
        transactions, runs before a batch's tasks write (the sweeps after a commit and after a
        failed batch are the lifecycle's): once a run starts, and then only for

        - a stored checkpoint not confirmed committed: a crash interrupted its commit;
        - a replayed batch, whose checkpoint is stored already: Spark lost its commit-log entry.

        Spark plans every micro-batch in a process of its own, so "once a run starts" is known
        only where the entry point tells (``first_of_run``); a data source's run that crashed
        before storing anything leaves lingering transactions to the sweep after its first commit."""
        if first_of_run:
            return True
        if latest is None:
            return False
        replay = context is not None and context.checkpoint_id <= latest.checkpoint_id
        return not committed or replay

    # -- commit ----------------------------------------------------------------------------------

    def commit(self, context: BatchContext, messages: Sequence[Any]) -> CommitTimings | None:
        """Steps 1-4 of ``commit`` (module doc) for the tasks' ``messages``; returns the timings
        of the commit (None for a replay, which commits nothing new)."""
        started = time.monotonic()
        checkpoint_id = context.checkpoint_id
        states = _states(messages)
        latest = self.store.latest()
        # 1. A stored checkpoint's transactions are committed before anything else (whoever gets
        # there first: a crash after storing it leaves that to the next process).
        if latest is not None and not self.store.is_committed(latest.checkpoint_id):
            self.lifecycle.commit_stored(latest)
        # 2. A replay of a stored batch.
        if latest is not None and checkpoint_id <= latest.checkpoint_id:
            self._abort(checkpoint_id, states)
            if not context.replayable:
                raise IllegalStateError(
                    f"kafka-eos: another write to this sink stored checkpoint {latest.checkpoint_id} while "
                    f"this batch write (checkpoint {checkpoint_id}) was running, in {self.options.state_dir}; "
                    "this write's transactions were aborted and nothing of it is visible. Concurrent writes "
                    "to one sink need their own eos.transactionalIdPrefix and eos.stateDir each.")
            # Spark replays a batch whose commit-log entry it lost; its tasks wrote nothing (what
            # tasks that did not know it was done wrote is aborted above).
            log.info("batch %d was already committed as checkpoint %d; its replay is a no-op",
                     checkpoint_id, latest.checkpoint_id)
            return None
        # 3. Tasks that wrote under another checkpoint id.
        wrong = sorted({m.checkpoint_id for m in messages if m is not None and m.checkpoint_id != checkpoint_id})
        if wrong:
            self._abort(checkpoint_id, states)
            raise IllegalStateError(
                f"kafka-eos: tasks of batch {checkpoint_id} wrote under checkpoint ids {wrong}; their "
                "transactions were aborted and the batch fails, to be replayed")
        # 4. Store, commit, mark, sweep, record, subsume.
        now_ms = wall_clock_ms()
        checkpoint = CompletedCheckpoint(checkpoint_id, now_ms, now_ms, {SINK_PARTICIPANT: states})
        timings = self.lifecycle.complete(checkpoint, started=started)
        log.info("batch %d committed: %d transactions, %d records, %.0f ms (prepare %.0f, store %.0f, "
                 "EndTxn %.0f, mark %.0f, lingering sweep %.0f)", checkpoint_id,
                 len(states), sum(int(s.get("record_count", 0)) for s in states), timings.total_ms,
                 timings.prepare_ms, timings.store_ms, timings.commit_ms, timings.mark_ms, timings.sweep_ms)
        return timings

    # -- fail ------------------------------------------------------------------------------------

    def fail(self, context: BatchContext, messages: Sequence[Any]) -> None:
        """Spark gave up on batch ``context.checkpoint_id``. What this cannot end is left to the
        next recovery; it never raises, so Spark reports the batch's own failure."""
        checkpoint_id = context.checkpoint_id
        states = _states(messages)
        try:
            stored = self.lifecycle.abort(checkpoint_id, {SINK_PARTICIPANT: states})
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
            return
        # Tasks that pre-committed without Spark passing on their message (the foreachBatch helper
        # gets none at all): between two batches no transaction of this sink may be open.
        aborted = self.lifecycle.sweep(checkpoint_id)
        log.warning("batch %d failed: aborted its %d pre-committed transactions and %d more its tasks left "
                    "open (%s)", checkpoint_id, len(states), len(aborted), ", ".join(aborted) or "none")

    def _abort(self, checkpoint_id: int, states: list[Any]) -> None:
        """Abort what the tasks of a batch that is not committed now wrote (best effort)."""
        try:
            self.lifecycle.abort_transactions(checkpoint_id, {SINK_PARTICIPANT: states})
        except Exception as exc:
            log.warning("aborting pre-committed transactions failed: %r; the next recovery aborts them as "
                        "lingering", exc)

    def close(self) -> None:
        self.committer.close()

    def __enter__(self) -> "SparkSinkDriver":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
