"""Kafka writers of the ``kafka-eos`` format (Arrow in), streaming and batch: what Spark's Python
Data Source API calls. Tasks run :func:`connectors.spark.write_task.write_task` on executors; the
driver's ``commit``/``abort`` hand the tasks' messages to
:class:`connectors.spark.driver_committer.SparkCommitProtocol`; ``prepare_sink``
(``connectors/spark/sink_preparation.py``) runs before the writer is made.
"""

from __future__ import annotations

import logging
import time
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.spark.driver_committer import SparkCommitProtocol
from connectors.spark.options import SinkOptions
from connectors.spark.sink_preparation import prepare_sink
from connectors.spark.write_task import KafkaCommitMessage, produce_batch_of, write_task
from twophase.errors import IllegalStateError

__all__ = ["BATCH_ID_PROPERTY", "KafkaCommitMessage", "KafkaEosBatchWriter", "KafkaEosStreamWriter",
           "prepare_sink", "produce_batch_of"]

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"


class _KafkaWriting:
    def __init__(self, options: SinkOptions, schema: StructType, committed_through: int) -> None:
        self.options = options
        self.schema = schema
        self.committed_through = committed_through

    def _protocol_call(self, call: str, *args: object, **kwargs: object) -> None:
        protocol = SparkCommitProtocol(self.options)
        try:
            getattr(protocol, call)(*args, **kwargs)
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
        return write_task(self.options, iterator, checkpoint_id, self.committed_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.config.exactly_once:
            self._protocol_call("commit", messages, batchId)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.config.exactly_once:
            self._protocol_call("abort", messages, batchId)


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
        return write_task(self.options, iterator, self.checkpoint_id, self.committed_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if not self.options.config.exactly_once:
            return
        ids = {m.checkpoint_id for m in messages if isinstance(m, KafkaCommitMessage)}
        if len(ids) > 1:
            raise IllegalStateError(f"kafka-eos: tasks of one batch write reported checkpoints {sorted(ids)}")
        if not ids:
            return
        # The foreachBatch helper's batch ids are replayed by Spark; a plain write's id never is.
        self._protocol_call("commit", messages, ids.pop(), replayable=self.options.checkpoint_id is not None)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if not self.options.config.exactly_once:
            return
        protocol = SparkCommitProtocol(self.options)
        try:
            protocol.abort(messages, self.checkpoint_id)
            # No later batch of this write will sweep what its failed tasks left open.
            protocol.abort_lingering()
        finally:
            protocol.close()
