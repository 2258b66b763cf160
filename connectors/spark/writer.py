"""Kafka writers of the ``kafka-eos`` format (Arrow in): streaming and batch.

On executors each task writes its rows in one Kafka transaction, whose id comes from the sink's
pool (``transactional_ids.py``: ``{prefix}-{partition id}-{batch id % 2}``), and pre-commits it
(flush); the handle goes back to the driver as the task's commit message. A retried task
re-initialises the same id, which fences its zombie and aborts the zombie's transaction. A task of
a replayed batch that is already committed writes nothing.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.kafka.clients import KafkaClients, ProduceBatch
from connectors.kafka.client_factory import clients_for
from connectors.kafka.guardrails import check_sink
from connectors.kafka.producer_pool import PRODUCERS
from connectors.kafka.transactional_ids import TransactionalIdPool
from connectors.kafka.writer import KafkaTransactionWriter
from connectors.spark.commit_protocol import SparkCommitProtocol
from connectors.spark.gc_pause import gc_paused
from connectors.spark.options import SinkOptions
from connectors.spark.schema import check_sink_schema
from connectors.spark.state_guard import guard_sink_state
from twophase import failpoints

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
TASK_FAILURE_RATE_ENV = "KAFKA_EOS_TASK_FAILURE_RATE"
TASK_FAILURE_SEED_ENV = "KAFKA_EOS_TASK_FAILURE_SEED"

_guardrails_checked: set[tuple[object, ...]] = set()
_guardrails_lock = threading.Lock()


class InjectedTaskFailure(RuntimeError):
    """A task failure injected by KAFKA_EOS_TASK_FAILURE_RATE, for failure replay."""


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    checkpoint_id: int
    partition_id: int
    attempt: int
    committable: dict[str, Any] | None
    record_count: int
    skipped: bool = False


def _maybe_fail_task(checkpoint_id: int, partition_id: int, attempt: int) -> None:
    """Fail the first attempt of a seeded random share of tasks (KAFKA_EOS_TASK_FAILURE_RATE)."""
    rate = float(os.environ.get(TASK_FAILURE_RATE_ENV, "0") or 0)
    if rate <= 0 or attempt > 0:
        return
    seed = os.environ.get(TASK_FAILURE_SEED_ENV, "0")
    if random.Random(f"{seed}:{checkpoint_id}:{partition_id}").random() < rate:
        log.warning("injected task failure: checkpoint %d partition %d", checkpoint_id, partition_id)
        raise InjectedTaskFailure(f"injected failure of task {partition_id} of checkpoint {checkpoint_id}")


def _as_binary(column: pa.Array) -> pa.Array:
    # A string column's UTF-8 bytes are its binary form: the cast copies no data, and bytes
    # objects are what the producer sends.
    return column.cast(pa.binary()) if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) \
        else column


def produce_batch_of(batch: pa.RecordBatch, topic_option: str | None, include_headers: bool) -> ProduceBatch:
    """The records of one Arrow batch of the sink's input, as Spark's Kafka sink reads them:
    the ``topic`` option, when set, overrides the topic column; a null partition lets the
    producer's partitioner choose. The schema was checked on the driver (check_sink_schema)."""
    names = batch.schema.names
    values = _as_binary(batch.column("value")).to_pylist()
    keys = _as_binary(batch.column("key")).to_pylist() if "key" in names else None
    topics = None
    if topic_option is None:
        column = batch.column("topic")
        if column.null_count:
            raise ValueError("[kafka-eos] null topic present in the data; use the topic option for "
                             "setting a topic")
        topics = column.to_pylist()
    partitions = None
    if "partition" in names:
        column = batch.column("partition")
        if column.null_count < len(column):
            lowest = pc.min(column).as_py()
            if lowest is not None and lowest < 0:
                raise ValueError(f"[kafka-eos] partition column holds {lowest}; partitions are >= 0 "
                                 "(or null, for the producer's partitioner)")
            partitions = column.to_pylist()
    headers = None
    if include_headers and "headers" in names and batch.column("headers").null_count < batch.num_rows:
        headers = [[(h["key"], h["value"]) for h in record] if record else None
                   for record in batch.column("headers").to_pylist()]
    return ProduceBatch(topic=topic_option, values=values, keys=keys, topics=topics,
                        partitions=partitions, headers=headers)


class _KafkaWriting:
    def __init__(self, options: SinkOptions, schema: StructType, committed_through: int) -> None:
        self.options = options
        self.schema = schema
        self.committed_through = committed_through

    def _clients(self) -> KafkaClients:
        config = self.options.config
        return clients_for(config.bootstrap_servers, config.client_config)

    def _transactional_id(self, partition_id: int, checkpoint_id: int) -> str | None:
        prefix = self.options.config.transactional_id_prefix
        if not self.options.config.exactly_once or prefix is None:
            return None
        return TransactionalIdPool(prefix).transactional_id(partition_id, checkpoint_id)

    def _write_task(self, batches: Iterator[pa.RecordBatch], checkpoint_id: int) -> KafkaCommitMessage:
        context = TaskContext.get()
        partition_id = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        if checkpoint_id <= self.committed_through:
            for _ in batches:  # Spark expects the input consumed
                pass
            return KafkaCommitMessage(checkpoint_id, partition_id, attempt, None, 0, skipped=True)
        clients = self._clients()
        config = self.options.config
        transactional_id = self._transactional_id(partition_id, checkpoint_id)
        # The producer is made ready (InitProducerId) while Spark computes the task's first rows.
        prepared = None if transactional_id is None else PRODUCERS.prepare(
            clients, transactional_id, KafkaTransactionWriter.producer_config(config), config.flush_timeout_s)
        writer = KafkaTransactionWriter(clients, config, transactional_id, checkpoint_id, prepared=prepared)
        try:
            with gc_paused():
                for batch in batches:
                    if batch.num_rows == 0:
                        continue
                    writer.write_batch(produce_batch_of(batch, config.topic, self.options.include_headers))
            _maybe_fail_task(checkpoint_id, partition_id, attempt)
            if writer.record_count == 0:
                writer.discard()
                return KafkaCommitMessage(checkpoint_id, partition_id, attempt, None, 0)
            failpoints.hit(failpoints.BEFORE_PRE_COMMIT, checkpoint_id=checkpoint_id, task=partition_id)
            committable = writer.pre_commit()
            failpoints.hit(failpoints.AFTER_PRE_COMMIT, checkpoint_id=checkpoint_id, task=partition_id)
        except BaseException:
            writer.abort()
            raise
        return KafkaCommitMessage(checkpoint_id, partition_id, attempt, committable.to_json(),
                                  committable.record_count)


def prepare_sink(options: SinkOptions, schema: StructType) -> int:
    """Run on the driver before tasks write: check the input schema and the broker's limits,
    refuse a lost or foreign state, and recover the sink's last checkpoint. Returns the newest
    committed checkpoint id."""
    check_sink_schema(schema, options.config.topic)
    config = options.config
    key = (config.bootstrap_servers, config.transactional_id_prefix, config.transaction_timeout_ms,
           config.checkpoint_timeout_ms + config.restart_budget_ms, tuple(sorted(config.client_config.items())))
    with _guardrails_lock:
        if key not in _guardrails_checked:
            check_sink(config, clients_for(config.bootstrap_servers, config.client_config))
            _guardrails_checked.add(key)
    if not config.exactly_once:
        return -1
    guard_sink_state(options)
    protocol = SparkCommitProtocol(options)
    try:
        return protocol.recover()
    finally:
        protocol.close()


class KafkaEosStreamWriter(_KafkaWriting, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        context = TaskContext.get()
        raw = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if raw is not None:
            checkpoint_id = int(raw)
        else:
            # Spark 4.x sets the property on every streaming task. Without it, the batch planned
            # after the last committed one is the best guess; commit() refuses a wrong guess.
            checkpoint_id = self.committed_through + 1
            log.warning("Spark local property %r is missing; assuming batch %d (checked at commit)",
                        BATCH_ID_PROPERTY, checkpoint_id)
        return self._write_task(iterator, checkpoint_id)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if not self.options.config.exactly_once:
            return
        protocol = SparkCommitProtocol(self.options)
        try:
            protocol.commit(messages, batchId)
        finally:
            protocol.close()

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if not self.options.config.exactly_once:
            return
        protocol = SparkCommitProtocol(self.options)
        try:
            protocol.abort(messages, batchId)
        finally:
            protocol.close()


class KafkaEosBatchWriter(_KafkaWriting, DataSourceArrowWriter):
    """``df.write.format("kafka-eos")``: every task's transaction committed in one two-phase
    commit, recorded in the sink's state directory first (a crash mid-commit is completed by the
    next write with the same state directory)."""

    def __init__(self, options: SinkOptions, schema: StructType, committed_through: int) -> None:
        super().__init__(options, schema, committed_through)
        # The foreachBatch helper passes its batch id; a plain batch write gets a fresh id above
        # every stored one (wall-clock ms keeps ids increasing across writers of one directory).
        self.checkpoint_id = options.checkpoint_id if options.checkpoint_id is not None else max(
            int(time.time() * 1000), committed_through + 1)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return self._write_task(iterator, self.checkpoint_id)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if not self.options.config.exactly_once:
            return
        ids = {m.checkpoint_id for m in messages if isinstance(m, KafkaCommitMessage)}
        if len(ids) > 1:
            raise RuntimeError(f"kafka-eos: tasks of one batch write reported checkpoints {sorted(ids)}")
        if not ids:
            return
        protocol = SparkCommitProtocol(self.options)
        try:
            # The foreachBatch helper's batch ids are replayed by Spark; a plain write's id never is.
            protocol.commit(messages, ids.pop(), replayable=self.options.checkpoint_id is not None)
        finally:
            protocol.close()

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if not self.options.config.exactly_once:
            return
        protocol = SparkCommitProtocol(self.options)
        try:
            protocol.abort(messages, self.checkpoint_id)
            protocol.abort_lingering()
        finally:
            protocol.close()
