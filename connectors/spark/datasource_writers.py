"""Kafka writers of the ``kafka-eos`` format (Arrow in), streaming and batch: what Spark's Python
Data Source API calls. Tasks run :func:`connectors.spark.write_task.write_task` on executors; the
driver's steps (prepare before the tasks, ``commit``/``abort`` after them) are the sink driver's
(``connectors/spark/sink_driver.py``), which the foreachBatch helper uses too.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Iterator, Sequence

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectors.spark.commit_message import KafkaCommitMessage
from connectors.spark.options import SinkOptions
from connectors.spark.sink_driver import BatchContext, SparkSinkDriver
from connectors.spark.spark_versions import has_arrow_stream_writer
from twophase.errors import IllegalStateError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BATCH_ID_PROPERTY", "KafkaCommitMessage", "KafkaEosBatchWriter", "KafkaEosStreamWriter"]

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"

if has_arrow_stream_writer():
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    _ARROW_STREAM_WRITER: tuple[type, ...] = (DataSourceStreamArrowWriter,)
else:
    # Spark 4.0 has no Arrow stream writer. Its write worker (write_into_data_source.py) hands
    # Arrow batches, not rows, to any writer that is a DataSourceArrowWriter, streaming or not.
    _ARROW_STREAM_WRITER = (DataSourceStreamWriter, DataSourceArrowWriter)


def _write_task(options: SinkOptions, batches: Iterator[pa.RecordBatch], checkpoint_id: int,
                committed_through: int) -> KafkaCommitMessage:
    # Imported in the task, not with this module: the write planning and the commit runner load
    # this module too, and need neither Arrow nor the producer (bench/README.md, the first batch).
    from connectors.spark.write_task import write_task

    return write_task(options, batches, checkpoint_id, committed_through)


class _KafkaWriting:
    def __init__(self, options: SinkOptions, schema: StructType, committed_through: int) -> None:
        self.options = options
        self.schema = schema
        self.committed_through = committed_through


class KafkaEosStreamWriter(_KafkaWriting, *_ARROW_STREAM_WRITER):  # type: ignore[misc]
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
        return _write_task(self.options, iterator, checkpoint_id, self.committed_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.config.exactly_once:
            with SparkSinkDriver(self.options) as driver:
                driver.commit(BatchContext(batchId), messages)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.config.exactly_once:
            with SparkSinkDriver(self.options) as driver:
                driver.fail(BatchContext(batchId), messages)


class KafkaEosBatchWriter(_KafkaWriting, DataSourceArrowWriter):
    """``df.write.format("kafka-eos")``: every task's transaction committed in one two-phase
    commit, recorded in the sink's state directory first (a crash mid-commit is completed by the
    next write with the same state directory)."""

    def __init__(self, options: SinkOptions, schema: StructType, committed_through: int) -> None:
        super().__init__(options, schema, committed_through)
        # A fresh id above every stored one (wall-clock ms keeps ids increasing across writers of
        # one directory). Spark never replays it: an id found stored at commit is another write's.
        self.context = BatchContext(max(int(time.time() * 1000), committed_through + 1), replayable=False)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return _write_task(self.options, iterator, self.context.checkpoint_id, self.committed_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if not self.options.config.exactly_once:
            return
        ids = {m.checkpoint_id for m in messages if isinstance(m, KafkaCommitMessage)}
        if ids - {self.context.checkpoint_id}:
            raise IllegalStateError(f"kafka-eos: tasks of one batch write reported checkpoints {sorted(ids)}")
        if ids:
            with SparkSinkDriver(self.options) as driver:
                driver.commit(self.context, messages)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        if self.options.config.exactly_once:
            with SparkSinkDriver(self.options) as driver:
                driver.fail(self.context, messages)
