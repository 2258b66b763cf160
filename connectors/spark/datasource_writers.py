"""Kafka writers of the ``kafka-eos`` format (Arrow in), streaming and batch: what Spark's Python
Data Source API calls. They differ only in how Spark hands them the batch: tasks run
:func:`connectors.spark.write_task.write_task`; ``commit``/``abort`` hand the messages to the sink
driver (``sink_driver.py``), which the foreachBatch helper uses too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectors.spark.commit_message import KafkaCommitMessage
from connectors.spark.options import SinkOptions
from connectors.spark.batch_context import BatchContext, streaming_task_batch_id
from connectors.spark.sink_driver import SparkSinkDriver
from connectors.spark.spark_versions import has_arrow_stream_writer

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KafkaCommitMessage", "KafkaEosBatchWriter", "KafkaEosStreamWriter"]

if has_arrow_stream_writer():
    from pyspark.sql.datasource import DataSourceStreamArrowWriter

    _ARROW_STREAM_WRITER: tuple[type, ...] = (DataSourceStreamArrowWriter,)
else:
    # Spark 4.0 has no Arrow stream writer. Its write worker (write_into_data_source.py) hands
    # Arrow batches, not rows, to any writer that is a DataSourceArrowWriter, streaming or not.
    _ARROW_STREAM_WRITER = (DataSourceStreamWriter, DataSourceArrowWriter)


def _write_task(options: SinkOptions, batches: Iterator[pa.RecordBatch], checkpoint_id: int,
                stored_through: int | None) -> KafkaCommitMessage:
    # Imported in the task, not with this module: the write planning and the commit runner load
    # this module too, and need neither Arrow nor the producer (bench/README.md, the first batch).
    from connectors.spark.write_task import write_task

    return write_task(options, batches, checkpoint_id, stored_through)


def _end(options: SinkOptions, context: BatchContext, messages: Sequence[WriterCommitMessage | None],
         commit: bool) -> None:
    """Hand a batch's messages to the sink driver: its commit, or its failure."""
    with SparkSinkDriver(options) as driver:
        if commit:
            driver.commit(context, messages)
        else:
            driver.fail(context, messages)


class _KafkaWriting:
    def __init__(self, options: SinkOptions, schema: StructType, stored_through: int | None) -> None:
        self.options = options
        self.schema = schema
        #: The newest stored checkpoint id when the write was planned (None: nothing stored).
        self.stored_through = stored_through


class KafkaEosStreamWriter(_KafkaWriting, *_ARROW_STREAM_WRITER):  # type: ignore[misc]
    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return _write_task(self.options, iterator, streaming_task_batch_id(self.stored_through), self.stored_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        _end(self.options, BatchContext(batchId), messages, commit=True)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        _end(self.options, BatchContext(batchId), messages, commit=False)


class KafkaEosBatchWriter(_KafkaWriting, DataSourceArrowWriter):
    """``df.write.format("kafka-eos")``: every task's transaction committed in one two-phase
    commit, recorded in the sink's state directory first (a crash mid-commit is completed by the
    next write with the same state directory)."""

    def __init__(self, options: SinkOptions, schema: StructType, stored_through: int | None) -> None:
        super().__init__(options, schema, stored_through)
        self.context = BatchContext.of_batch_write(stored_through)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return _write_task(self.options, iterator, self.context.checkpoint_id, self.stored_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        # A write with no task stores nothing.
        if any(isinstance(m, KafkaCommitMessage) for m in messages):
            _end(self.options, self.context, messages, commit=True)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _end(self.options, self.context, messages, commit=False)
