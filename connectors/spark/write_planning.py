"""The planning of write tasks, so of transactions, for both sinks: how many a batch has, and who
decides how the batch is handed to them.

A batch DataFrame has a partition per shuffle partition behind a stateful operator: 200 at Spark's
default ``spark.sql.shuffle.partitions``. One write task per partition meant 200 transactions a
batch: 200 producers and InitProducerIds, 200 Python task runs, 200 EndTxn requests, and up to
400 transactional ids on the broker. Both sinks write a batch in as many tasks as Spark runs at
once (the cores of its executors), or ``eos.writeTasks``:

- the foreachBatch helper: :func:`foreach_batch_write_tasks` decides the count here, once per
  query run (:func:`spark_parallelism`), and its :class:`~connectors.spark.aligned_write.AlignedWrite`
  hands each batch to that many tasks: repartitioned by output partition (one marker per output
  partition a batch), or, where it cannot align, coalesced (whole partitions in order, no shuffle;
  bench/README.md, "Stateful queries at 200 shuffle partitions", measures it);
- ``format("kafka-eos")``: Spark plans the write tasks from the distribution the kit's JVM provider
  asks for (``jvm/src/kafkaeos/spark/WritePlanning.java``, reading the same option), where the
  provider is installed (``KafkaEosPythonSource.plans_write_tasks``, ``datasource.py``); without
  it, Spark writes one task per partition of the plan.

The tasks themselves run ``task_writer.py``, one transaction each.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from connectors.spark.aligned_write import AlignedWrite
from connectors.spark.options import SinkOptions

log = logging.getLogger(__name__)

#: Rows of the one-time job that counts the default parallelism where no SparkContext is at hand.
_PROBE_ROWS = 1 << 16


def foreach_batch_write_tasks(sink: SinkOptions, spark: SparkSession, batch_id: int) -> AlignedWrite:
    """How the foreachBatch helper hands its batches to their write tasks, decided at the query
    run's first batch (``batch_id``): at most ``eos.writeTasks`` tasks, or as many as Spark runs at
    once, aligned by output partition where it can be (``aligned_write.py``)."""
    tasks = sink.write_tasks or spark_parallelism(spark)
    log.info("batch %d: at most %s write task(s) a batch (eos.writeTasks=%s)", batch_id,
             tasks or "one per partition", sink.write_tasks or "auto")
    return AlignedWrite(sink, tasks)


def spark_parallelism(spark: SparkSession) -> int | None:
    """How many tasks Spark runs at once: the SparkContext's ``defaultParallelism`` on a classic
    session. A Spark Connect session (the server's Python process that runs a foreachBatch
    function has one) has no SparkContext: there, ``spark.default.parallelism`` if set, else the
    partitions Spark gives a ``range`` without a count, which is that same default parallelism
    (one small job, once per helper). None when it cannot be found: each batch is then written
    with one task per partition, as without the helper's coalescing.

    Only SQL strings here, no ``pyspark.sql.functions``: the server's foreachBatch process has a
    Connect session without Spark Connect's mode switched on in its environment, where those
    functions would build classic columns."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception as exc:  # Spark Connect: no SparkContext
        log.debug("no SparkContext here (%r): the default parallelism is asked of the server", exc)
    try:
        configured = spark.conf.get("spark.default.parallelism", None)
        if configured:
            return max(1, int(configured))
        return range_partitions(spark)
    except Exception as exc:  # only a speed-up: never a reason to fail the batch
        log.info("Spark's default parallelism could not be found (%r): each batch is written with one task "
                 "per partition", exc)
        return None


def range_partitions(spark: SparkSession) -> int:
    """The partitions Spark gives ``range`` without a count (its default parallelism), counted by
    a job of SQL strings, which classic and Connect sessions alike run."""
    # Spark refuses a non-deterministic expression inside an aggregate: the partition id is a
    # column first.
    row = (spark.range(0, _PROBE_ROWS).selectExpr("spark_partition_id() AS p")
           .selectExpr("max(p) AS last").first())
    return int(row["last"]) + 1 if row is not None and row["last"] is not None else 1
