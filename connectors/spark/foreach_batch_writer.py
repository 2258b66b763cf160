"""The foreachBatch helper's batch writer: one write of a DataFrame to Kafka whose two-phase
commit runs in the calling Python process (the format's writers: ``datasource_writers.py``).

The tasks run the task writer that both sinks share (``task_writer.py``) through ``mapInArrow``: each
writes its rows in one transaction, pre-commits it and returns its commit message as one row. The
messages are collected here, and this process stores and commits them as one checkpoint: the
same sink driver (``connectors/spark/sink_driver.py``), with the same prepare, commit and fail
steps, as the data source's.

This is what the foreachBatch helper writes with. ``df.write.format("kafka-eos")`` would make
Spark start a Python process for the write planning (``write_into_data_source``) before the tasks
and another for the commit (``commit_data_source_write``) after them, one after the other; the
process that runs a foreachBatch function is already up, with the kit and its clients imported.
"""

from __future__ import annotations

import logging
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StringType, StructField, StructType

from connectors.spark import use_session_python
from connectors.spark.aligned_write import AlignedWrite
from connectors.spark.spark_errors import WorkerPythonError
from connectors.spark.failures import missing_kit_module, worker_python_message
from connectors.spark.options import SinkOptions
from connectors.spark.sink_driver import BatchContext, SparkSinkDriver
from connectors.spark.commit_message import KafkaCommitMessage
from connectors.spark.task_writer import write_task
from twophase.checkpoint_statistics import CommitTimings

log = logging.getLogger(__name__)

#: The one column a write task returns: its commit message as JSON.
COMMIT_MESSAGE_COLUMN = "kafka_eos_commit_message"
# A StructType, not DDL text: Spark would parse the text on every batch (a few ms of round trips).
_COMMIT_MESSAGE_SCHEMA = StructType([StructField(COMMIT_MESSAGE_COLUMN, StringType())])


class _MapInArrowTask:
    """What ``mapInArrow`` runs in each write task (the task writer, ``task_writer.py``, and its
    commit message as one row); pickled with the sink's options."""

    def __init__(self, options: SinkOptions, checkpoint_id: int, decided_through: int | None) -> None:
        self.options = options
        self.checkpoint_id = checkpoint_id
        self.decided_through = decided_through

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        message = write_task(self.options, batches, self.checkpoint_id, self.decided_through)
        yield pa.RecordBatch.from_pydict({COMMIT_MESSAGE_COLUMN: [message.to_json()]},
                                         schema=pa.schema([(COMMIT_MESSAGE_COLUMN, pa.string())]))


def write_dataframe(df: DataFrame, options: SinkOptions, context: BatchContext, *,
                    first_write: bool = False, write_tasks: AlignedWrite | None = None) -> CommitTimings | None:
    """Write ``df`` as batch ``context`` of the sink and commit it here. Returns the commit's
    timings (None for a replay of a stored batch, which writes nothing, or when the sink is not
    exactly-once).

    ``first_write``: the first write of this process's query run (the recovery is due before it).
    ``write_tasks``: how ``df`` is handed to its write tasks (``write_planning.py``,
    ``aligned_write.py``: by output partition, or coalesced); None: one task per partition of ``df``."""
    # Before mapInArrow makes the task function, which takes the Python its workers run from it.
    use_session_python(df.sparkSession)
    with SparkSinkDriver(options) as driver:
        decided_through = driver.before_tasks(df.schema, context, run_starts=first_write)
        task = _MapInArrowTask(options, context.checkpoint_id, decided_through)
        # Per key, the records keep their order either way (aligned_write.py).
        to_write = df if write_tasks is None else write_tasks.arrange(df, context.checkpoint_id)
        try:
            rows = to_write.mapInArrow(task, _COMMIT_MESSAGE_SCHEMA).collect()
        except BaseException as exc:
            # Spark gives this process no message of the tasks that did pre-commit.
            driver.fail(context, [])
            module = missing_kit_module(exc) if isinstance(exc, Exception) else None
            if module is not None:
                # The workers died unpickling the task, before any of the kit's code ran there.
                raise WorkerPythonError(worker_python_message(module, _python_exec(df))) from exc
            raise
        return driver.commit(context, [KafkaCommitMessage.from_json(row[0]) for row in rows])


def _python_exec(df: DataFrame) -> str | None:
    try:
        return str(df.sparkSession.sparkContext.pythonExec)
    except Exception:  # Spark Connect: the server's Python processes are not named here
        return None
