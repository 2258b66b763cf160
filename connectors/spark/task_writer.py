"""The executor side of both exactly-once sinks, the ``kafka-eos`` format's writers
(``datasource_writers.py``) and the foreachBatch helper's (``foreach_batch_writer.py``): one Spark
write task, one Kafka transaction.

Each task writes its rows in one transaction, whose id comes from the sink's pool
(``sink/internal/transactional_ids.py``: ``{prefix}-{partition id}-{batch id % 2}``), and pre-commits it
(flush); the handle goes back to the driver as the task's commit message. A retried task writes
under an id of its own: the attempt it replaces may still be running, and must not be able to
fence it; whatever that attempt left open, the commit's sweep aborts. A task of a replayed batch
that is already committed writes nothing.

A task with no row opens no transaction: its producer, created and connected while Spark computes
the task's first rows, is closed without an InitProducerId, so its transactional id never reaches
the broker. At Spark's 200 shuffle partitions a stateful query's batch has many such
tasks (a key's partition holds no changed row), and each id the broker saw is its state for
``transactional.id.expiration.ms`` (docs/exactly-once.md, "How many transactional ids").
"""

from __future__ import annotations

import itertools
import logging
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext

from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients import ProduceBatch
from connectors.kafka.sink.internal.producer_pool import PRODUCERS
from connectors.kafka.sink.internal.transactional_ids import TransactionalIdPool
from connectors.kafka.sink.writer import KafkaTransactionWriter
from connectors.spark.commit_message import KafkaCommitMessage
from connectors.spark.gc_pause import gc_paused
from connectors.spark.options import SinkOptions
from twophase import failpoints
from twophase.errors import InvalidValueError

log = logging.getLogger(__name__)


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
            raise InvalidValueError("[kafka-eos] null topic present in the data; use the topic option for "
                                    "setting a topic")
        topics = column.to_pylist()
    partitions = None
    if "partition" in names:
        column = batch.column("partition")
        if column.null_count < len(column):
            lowest = pc.min(column).as_py()
            if lowest is not None and lowest < 0:
                raise InvalidValueError(f"[kafka-eos] partition column holds {lowest}; partitions are >= 0 "
                                        "(or null, for the producer's partitioner)")
            partitions = column.to_pylist()
    headers = None
    if include_headers and "headers" in names and batch.column("headers").null_count < batch.num_rows:
        headers = [[(h["key"], h["value"]) for h in record] if record else None
                   for record in batch.column("headers").to_pylist()]
    return ProduceBatch(topic=topic_option, values=values, keys=keys, topics=topics,
                        partitions=partitions, headers=headers)


def first_rows(batches: Iterator[pa.RecordBatch]) -> tuple[Iterator[pa.RecordBatch], pa.RecordBatch | None]:
    """The first Arrow batch with a row (None: the task has no row), and the batches, none lost."""
    seen: list[pa.RecordBatch] = []
    for batch in batches:
        seen.append(batch)
        if batch.num_rows:
            return itertools.chain(seen, batches), batch
    return iter(seen), None


def write_task(options: SinkOptions, batches: Iterator[pa.RecordBatch], checkpoint_id: int,
               decided_through: int | None) -> KafkaCommitMessage:
    """Write one task's rows of checkpoint ``checkpoint_id`` and pre-commit them; nothing if the
    checkpoint is stored already (``decided_through``: the newest readable stored checkpoint id
    when the write was planned, None if none)."""
    context = TaskContext.get()
    partition_id = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    # A retry or speculative copy may run beside the attempt it replaces: an id of its own keeps
    # that attempt's late initialisation from fencing this one (transactional_ids.py).
    task_attempt = context.taskAttemptId() if context and attempt > 0 else None
    if decided_through is not None and checkpoint_id <= decided_through:
        for _ in batches:  # Spark expects the input consumed
            pass
        return KafkaCommitMessage(checkpoint_id, partition_id, attempt, None, 0, skipped=True)
    config = options.config
    clients = clients_for(config.bootstrap_servers, config.client_config)
    transactional_id = None
    if config.exactly_once and config.transactional_id_prefix is not None:
        transactional_id = TransactionalIdPool(config.transactional_id_prefix).transactional_id(
            partition_id, checkpoint_id, task_attempt=task_attempt)
    # The producer is created and connected (the topic option looked up, or librdkafka may wait
    # 500 ms to find the transaction coordinator: ConfluentProducer.look_up) while Spark computes
    # the first rows. Its InitProducerId waits for them.
    initialising = None if transactional_id is None else PRODUCERS.prepare(
        clients, transactional_id, KafkaTransactionWriter.producer_config(config), config.flush_timeout_s,
        config.topic)
    try:
        batches, first = first_rows(batches)
    except BaseException:
        if initialising is not None:
            initialising.discard()
        raise
    if first is None:
        # A task with no row ends here, having registered nothing on the broker.
        if initialising is not None:
            initialising.discard()
        for _ in batches:
            pass
        return KafkaCommitMessage(checkpoint_id, partition_id, attempt, None, 0)
    if initialising is not None:
        # Without the topic option, the topic is the first row's.
        initialising.initialise(first.column("topic")[0].as_py() if config.topic is None
                                and "topic" in first.schema.names else None)
    writer = KafkaTransactionWriter(clients, config, transactional_id, checkpoint_id, initialising=initialising)
    try:
        with gc_paused():
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                writer.write_batch(produce_batch_of(batch, config.topic, options.include_headers))
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
