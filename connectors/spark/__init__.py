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

    Refuses speculative execution: two concurrent attempts of one write task share a
    transactional id, so each fences the other, and the attempt Spark keeps may be the one whose
    transaction was aborted; the query would then fail with TransactionLostError."""
    if spark.conf.get("spark.speculation", "false").strip().lower() == "true":
        raise SpeculationNotSupportedError(
            "kafka-eos exactly-once writes refuse spark.speculation=true: concurrent attempts of a "
            "write task would fence each other's Kafka transactions. Set spark.speculation=false "
            "(task retries after failures are fine and are fenced correctly)."
        )
    spark.dataSource.register(KafkaEosDataSource)


__all__ = ["FORMAT", "KafkaEosDataSource", "SpeculationNotSupportedError", "register"]
