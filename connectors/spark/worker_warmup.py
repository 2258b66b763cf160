"""Starts Spark's Python task workers, with the kit's task modules imported, while a query is
still starting, so that its first batch's read and write tasks find them ready.

Spark starts a task's Python worker only when the task starts: a worker daemon, then one forked
worker per concurrent task, each importing pyarrow and the kit after the fork. With
``spark.python.worker.reuse`` (Spark's default) a worker that ended a task waits for the next task
of the same Python environment, so workers that ran a small job of this module just before the
query's first batch are reused by its tasks (``bench/README.md`` has the measured effect).
Reuse needs the same Python: the warm-up runs with the Python the query's tasks will run with
(the data source's, for ``format("kafka-eos")``; the session's, for the foreachBatch sink).
"""

from __future__ import annotations

import logging
import threading
from typing import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

JOB_DESCRIPTION = "kafka-eos: start the Python task workers"

# The warm-ups started, by Spark application and the Python they warm: a job that reads with the
# kit's source and writes with its foreachBatch sink calls register() and the helper, each of
# which would otherwise plan (on the caller's thread) and run a warm-up of the same workers.
_started: dict[tuple[str, str], threading.Thread] = {}
_started_lock = threading.Lock()


def _import_task_modules(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import connectors.spark.task_writer  # noqa: F401  (what a write task imports first)
    from connectors.spark.spark_versions import has_python_data_source_api

    # The kit's source runs on Spark's Python data source API (4.0+); on 3.5, where the
    # foreachBatch sink is the kit's only entry, its reader module cannot be imported.
    if has_python_data_source_api():
        import connectors.spark.datasource_readers  # noqa: F401  (what a read task imports first)

    yield from batches


def _run(spark: SparkSession, job: DataFrame) -> None:
    try:
        spark.sparkContext.setJobDescription(JOB_DESCRIPTION)
        job.collect()
    except Exception as exc:  # only a head start: the query starts its workers itself anyway
        log.info("starting the Python task workers ahead of the query failed: %r", exc)


def start_task_workers(spark: SparkSession, python_exec: str | None = None) -> threading.Thread | None:
    """Run the warm-up job in the background on a classic session (a Spark Connect client has no
    executors of its own to warm, and a driver that cannot plan it skips it); returns its thread,
    or None. ``python_exec``: the Python of the tasks to warm, when it is not the session's (Spark
    takes it when the job is planned, here)."""
    try:
        context = spark.sparkContext
        slots = context.defaultParallelism
    except Exception as exc:  # Spark Connect: no SparkContext on the client
        log.debug("no SparkContext here (%r): the task workers start with the query", exc)
        return None
    session_python = context.pythonExec
    key = (str(context.applicationId), str(python_exec or session_python))
    with _started_lock:
        if key in _started:
            log.debug("the Python task workers of %s are started already", key[1])
            return _started[key]
        if python_exec is not None:
            context.pythonExec = python_exec
        try:
            job = spark.range(slots, numPartitions=slots).mapInArrow(_import_task_modules, "id long")
        except Exception as exc:
            # Only a head start, never a reason to fail: pyspark plans mapInArrow only where the
            # driver's Python has pandas (a packed venv shipped to YARN in cluster deploy mode, the
            # driver's Python, need not), and the query starts its workers anyway.
            log.info("not starting the Python task workers ahead of the query: %r", exc)
            return None
        finally:
            context.pythonExec = session_python
        thread = threading.Thread(target=_run, args=(spark, job), name="kafka-eos-worker-warmup", daemon=True)
        thread.start()
        _started[key] = thread
        return thread
