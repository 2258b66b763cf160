"""PySpark adapters: the ``kafka-eos`` format and the exactly-once foreachBatch helper.

    from connectors.spark import register
    register(spark)
    spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", ...).option("subscribe", "in").load()
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from connectors.spark.datasource import FORMAT, KafkaEosDataSource
from connectors.spark.errors import SpeculationNotSupportedError


def register(spark: SparkSession) -> None:
    """Register the ``kafka-eos`` format with ``spark``.

    Refuses speculative execution, which the kit's two-phase commit has not been tested with. (A
    speculative copy of a write task writes under a transactional id of its own, as a retry does,
    so the two cannot fence each other.)"""
    if spark.conf.get("spark.speculation", "false").strip().lower() == "true":
        raise SpeculationNotSupportedError(
            "kafka-eos exactly-once writes refuse spark.speculation=true: speculative copies of write "
            "tasks have not been tested with the kit's two-phase commit. Set spark.speculation=false "
            "(task retries after failures are fine: a retry writes under a transactional id of its own)."
        )
    _register_with_worker_python(spark)


def _register_with_worker_python(spark: SparkSession) -> None:
    """Registers the data source so that the Python processes Spark starts for it (one per
    planning step, and the worker daemon) import pyspark from the installed package, not from
    ``pyspark.zip`` (``connectors/tools/worker_python.py``), where that is safe.

    Spark takes the Python of a data source's processes from ``SparkContext.pythonExec`` when the
    data source is registered, so it is swapped for the registration only: the job's other Python
    code (UDFs, foreachBatch) keeps the session's."""
    from connectors.tools.worker_python import for_data_source

    try:
        context = spark.sparkContext
        launcher = for_data_source(context.pythonExec, context.master)
    except Exception:  # Spark Connect: no SparkContext here, the server starts the processes
        launcher = None
    if launcher is None:
        spark.dataSource.register(KafkaEosDataSource)
        return
    session_python = context.pythonExec
    context.pythonExec = launcher
    try:
        spark.dataSource.register(KafkaEosDataSource)
    finally:
        context.pythonExec = session_python


__all__ = ["FORMAT", "KafkaEosDataSource", "SpeculationNotSupportedError", "register"]
