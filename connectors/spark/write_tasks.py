"""How many write tasks, so transactions, the foreachBatch helper runs per batch.

A batch DataFrame has a partition per shuffle partition behind a stateful operator: 200 at Spark's
default ``spark.sql.shuffle.partitions``. One write task per partition meant 200 transactions a
batch: 200 producers and InitProducerIds, 200 Python task runs, 200 EndTxn requests, and up to
400 transactional ids on the broker. The helper writes each batch in as many tasks as Spark runs
at once (the cores of its executors), or ``eos.writeTasks``: ``aligned_write.py`` repartitions the
batch into them by output partition (one marker per output partition a batch), or, where it cannot
align, coalesces it to them (whole partitions in order, no shuffle; bench/README.md, "Stateful
queries at 200 shuffle partitions", measures it).
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Rows of the one-time job that counts the default parallelism where no SparkContext is at hand.
_PROBE_ROWS = 1 << 16


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
