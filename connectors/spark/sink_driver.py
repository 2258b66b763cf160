"""The driver side of the exactly-once Spark sink, for both entry points: the ``kafka-eos`` data
source's writers (``datasource_writers.py``) and the foreachBatch helper (``foreach_batch_writer.py``).
One micro-batch (or one batch write) is one checkpoint.

:class:`SparkSinkDriver` is a thin adapter: it checks what Spark hands it and hands the commit
lifecycle (``twophase/lifecycle.py``), which alone reads the store and decides, what Spark gives
the driver, in three steps: :meth:`~SparkSinkDriver.before_tasks` (checks, state guard, recovery
where due), :meth:`~SparkSinkDriver.commit` and :meth:`~SparkSinkDriver.fail`. Spark calls them
from short-lived Python processes, so nothing is kept in memory between calls. The protocol:
``design/exactly-once-protocol.md``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Sequence

from pyspark.sql.types import StructType

from connectors.kafka.clients import KafkaClients, TransactionControl
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.sink.committer import KafkaCommitter
from connectors.kafka.sink.guardrails import check_output_topic, check_sink
from connectors.spark.batch_context import BatchContext
from connectors.spark.options import SinkOptions
from connectors.spark.query_checkpoint import read_query_checkpoint
from connectors.spark.schema import check_sink_schema
from connectors.spark.state_guard import guard_sink_state
from twophase.checkpoint import CompletedCheckpoint, JsonValue, wall_clock_ms
from twophase.checkpoint_statistics import CommitTimings
from twophase.checkpoint_store import FileCheckpointStore
from twophase.errors import IllegalStateError
from twophase.lifecycle import CommitLifecycle

__all__ = ["BatchContext", "SINK_PARTICIPANT", "SparkSinkDriver", "check_guardrails", "before_tasks",
           "shared_transaction_control"]

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


_controls: dict[tuple[object, ...], TransactionControl] = {}
_controls_lock = threading.Lock()


def shared_transaction_control(options: SinkOptions, clients: KafkaClients) -> TransactionControl:
    """The transaction control client of this process for the sink's brokers and settings, made
    once and kept: the foreachBatch sink's driver process and Spark's commit runner commit every
    batch of a query, and a client per batch would pay its bootstrap, and on a real cluster its TLS
    and SASL handshakes, at every commit. One client serves concurrent commits (its requests are
    multiplexed over one connection per broker)."""
    config = options.config
    key = (config.bootstrap_servers, tuple(sorted(config.client_config.items())))
    with _controls_lock:
        control = _controls.get(key)
        if control is None:
            control = _controls[key] = clients.txn_control()
        return control


def _committables(messages: Sequence[Any]) -> list[JsonValue]:
    """The committables the tasks sent (JSON); a failed task's message is None."""
    return [m.committable for m in messages if m is not None and m.committable is not None]


def before_tasks(options: SinkOptions, schema: StructType, *, run_starts: bool) -> int | None:
    """The data source's step before the tasks, where Spark plans a write: a streaming query's
    batch (whose id Spark's offset log names) or a plain batch write (``run_starts``): the same
    step as :meth:`SparkSinkDriver.before_tasks`, with the batch found in Spark's offset log.
    Returns ``decided_through``: the newest readable stored checkpoint id (None: nothing stored)."""
    context = None
    if options.streaming and options.checkpoint_location is not None:
        planned = read_query_checkpoint(options.checkpoint_location).last_planned_batch()
        context = None if planned is None else BatchContext(planned)
    with SparkSinkDriver(options) as driver:
        return driver.before_tasks(schema, context, run_starts=run_starts)


class SparkSinkDriver:
    def __init__(self, options: SinkOptions, clients: KafkaClients | None = None,
                 store: FileCheckpointStore | None = None) -> None:
        self.options = options
        config = options.config
        self.clients = clients or clients_for(config.bootstrap_servers, config.client_config)
        # Sweeping after each commit is what keeps no transaction open between two batches.
        self.committer = KafkaCommitter(self.clients, config, SINK_PARTICIPANT, sweeps_after_commit=True,
                                        control=None if clients is not None else
                                        shared_transaction_control(options, self.clients))
        # Probed once per worker by guard_sink_state, not for every batch.
        self.lifecycle = CommitLifecycle(
            store or FileCheckpointStore(options.state_dir, options.retained_checkpoints, check_writable=False),
            [self.committer])

    def before_tasks(self, schema: StructType, context: BatchContext | None = None, *,
                     run_starts: bool) -> int | None:
        """Before the tasks of a batch write: check the input schema and the brokers (once per
        process), guard the state (``state_guard.py``), and run the lifecycle's recovery where it is
        due. Returns ``decided_through``, the newest readable stored checkpoint id (None: nothing
        stored): a task of a batch at or below it has nothing to write (a replay). ``context``: the batch
        about to be written, where the caller knows it. ``run_starts``: no batch of this run was
        written yet (the foreachBatch helper's first call, a plain batch write)."""
        check_sink_schema(schema, self.options.config.topic)
        check_guardrails(self.options)
        if not self.options.config.exactly_once:
            return None
        guard_sink_state(self.options, context)
        return self.recover(context, run_starts=run_starts)

    def recover(self, context: BatchContext | None = None, *, run_starts: bool = True) -> int | None:
        """The lifecycle's recovery where due before ``context``'s tasks; the newest stored id."""
        return self.lifecycle.recover_where_due(None if context is None else context.checkpoint_id,
                                                run_starts=run_starts)

    def commit(self, context: BatchContext, messages: Sequence[Any]) -> CommitTimings | None:
        """The tasks of ``context``'s batch pre-committed their transactions (``messages``): refuse
        tasks that wrote under another checkpoint id, then the lifecycle completes the checkpoint.
        Returns its timings (None for a replay, which commits nothing new, or a sink that is not
        exactly-once: its tasks' records are already visible)."""
        if not self.options.config.exactly_once:
            return None
        started = time.monotonic()
        checkpoint_id = context.checkpoint_id
        committables = _committables(messages)
        wrong = sorted({m.checkpoint_id for m in messages if m is not None and m.checkpoint_id != checkpoint_id})
        if wrong:
            self.lifecycle.abort_best_effort(checkpoint_id, {SINK_PARTICIPANT: committables})
            raise IllegalStateError(
                f"kafka-eos: tasks of batch {checkpoint_id} wrote under checkpoint ids {wrong}; their "
                "transactions were aborted and the batch fails, to be replayed")
        now_ms = wall_clock_ms()
        completion = self.lifecycle.complete(
            CompletedCheckpoint(checkpoint_id, now_ms, now_ms, {SINK_PARTICIPANT: committables}), started=started)
        if completion.replay_of is not None:
            if not context.replayable:
                raise IllegalStateError(
                    f"kafka-eos: another write to this sink stored checkpoint {completion.replay_of} while "
                    f"this batch write (checkpoint {checkpoint_id}) was running, in {self.options.state_dir}; "
                    "this write's transactions were aborted and nothing of it is visible. Concurrent writes "
                    "to one sink need their own eos.transactionalIdPrefix and eos.stateDir each.")
            # Spark replays a batch whose commit-log entry it lost; its tasks wrote nothing.
            log.info("batch %d was already committed as checkpoint %d; its replay is a no-op",
                     checkpoint_id, completion.replay_of)
            return None
        timings = completion.timings
        assert timings is not None
        log.info("batch %d committed: %d transactions, %d records, %.0f ms (prepare %.0f, store %.0f, "
                 "EndTxn %.0f, mark %.0f, lingering sweep %.0f)", checkpoint_id,
                 len(committables), sum(int(c.get("record_count", 0)) for c in committables), timings.total_ms,
                 timings.prepare_ms, timings.store_ms, timings.commit_ms, timings.mark_ms, timings.sweep_ms)
        return timings

    def fail(self, context: BatchContext, messages: Sequence[Any]) -> None:
        """Spark gave up on ``context``'s batch: the lifecycle abandons its checkpoint (a stored one
        is committed, never aborted). Never raises, so Spark reports the batch's own failure."""
        if not self.options.config.exactly_once:
            return
        self.lifecycle.abandon(context.checkpoint_id, {SINK_PARTICIPANT: _committables(messages)})

    def close(self) -> None:
        self.committer.close()

    def __enter__(self) -> "SparkSinkDriver":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
