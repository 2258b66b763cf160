"""Kafka writers of the ``kafka-eos`` format (Arrow in), streaming and batch: what Spark's Python
Data Source API calls. They differ only in how Spark hands them the batch: tasks run
:func:`connectors.spark.task_writer.write_task`; ``commit``/``abort`` hand the messages to the sink
driver (``sink_driver.py``), which the foreachBatch helper uses too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectors.spark.commit_message import KafkaCommitMessage
from connectors.spark.options import SinkOptions
from connectors.spark.batch_context import BatchContext
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


def _run_task_writer(options: SinkOptions, batches: Iterator[pa.RecordBatch], checkpoint_id: int,
                     decided_through: int | None) -> KafkaCommitMessage:
    """Run the task writer (``task_writer.py``) in this write task."""
    # Imported in the task, not with this module: the write planning and the commit runner load
    # this module too, and need neither Arrow nor the producer (bench/README.md, the first batch).
    from connectors.spark.task_writer import write_task

    return write_task(options, batches, checkpoint_id, decided_through)


def _end(options: SinkOptions, context: BatchContext, messages: Sequence[WriterCommitMessage | None],
         commit: bool) -> None:
    """Hand a batch's messages to the sink driver: its commit, or its failure."""
    with SparkSinkDriver(options) as driver:
        if commit:
            driver.commit(context, messages)
        else:
            driver.fail(context, messages)


class _KafkaWriting:
    def __init__(self, options: SinkOptions, schema: StructType, decided_through: int | None) -> None:
        self.options = options
        self.schema = schema
        #: The newest readable stored checkpoint id when the write was planned (None: nothing
        #: stored): a task of a batch at or below it writes nothing.
        self.decided_through = decided_through


class KafkaEosStreamWriter(_KafkaWriting, *_ARROW_STREAM_WRITER):  # type: ignore[misc]
    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        context = BatchContext.of_streaming_task(self.decided_through)
        return _run_task_writer(self.options, iterator, context.checkpoint_id, self.decided_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        _end(self.options, BatchContext(batchId), messages, commit=True)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        _end(self.options, BatchContext(batchId), messages, commit=False)


class KafkaEosBatchWriter(_KafkaWriting, DataSourceArrowWriter):
    """``df.write.format("kafka-eos")``: every task's transaction committed in one two-phase
    commit, recorded in the sink's state directory first (a crash mid-commit is completed by the
    next write with the same state directory)."""

    def __init__(self, options: SinkOptions, schema: StructType, decided_through: int | None) -> None:
        super().__init__(options, schema, decided_through)
        self.context = BatchContext.of_batch_write(decided_through)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return _run_task_writer(self.options, iterator, self.context.checkpoint_id, self.decided_through)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        # A write with no task stores nothing.
        if any(isinstance(m, KafkaCommitMessage) for m in messages):
            _end(self.options, self.context, messages, commit=True)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _end(self.options, self.context, messages, commit=False)
