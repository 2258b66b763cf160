"""Quick start (b): Spark's own Kafka source, ``format("kafka")``, feeding the kit's exactly-once
foreachBatch sink: the pair that runs on every Spark the kit supports, Spark 3.5 included.

    python examples/quickstart_spark_source.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]

For jobs that already read with Spark's source. It needs Spark's Kafka connector, which is not in
pyspark: by default Spark fetches it (``spark.jars.packages``) at the installed pyspark's version
(Scala 2.12 for Spark 3.5, 2.13 for Spark 4); ``SPARK_KAFKA_JARS`` (comma-separated jar paths)
gives the jars instead, e.g. where the machine cannot reach Maven Central, or where that version
is not published.
"""

import os
import sys

import pyspark
from pyspark.sql import SparkSession

from connectors.spark.foreach_batch import exactly_once_foreach_batch

bootstrap, source, sink, checkpoint = sys.argv[1:5]
builder = SparkSession.builder.master("local[2]").appName("kafka-eos quick start, Spark's source")
if os.environ.get("SPARK_KAFKA_JARS"):
    builder = builder.config("spark.jars", os.environ["SPARK_KAFKA_JARS"])
else:
    scala = "2.12" if pyspark.__version__.startswith("3.") else "2.13"
    builder = builder.config("spark.jars.packages",
                             f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}")
spark = builder.getOrCreate()

orders = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source)
          .option("startingOffsets", "earliest")
          # Spark's source reads read_uncommitted by default: records of aborted input
          # transactions would reach the output.
          .option("kafka.isolation.level", "read_committed")
          .load())

write = exactly_once_foreach_batch(**{"kafka.bootstrap.servers": bootstrap, "topic": sink,
                                      "checkpointLocation": checkpoint})
query = (orders.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.foreachBatch(write)
         .option("checkpointLocation", checkpoint)
         .trigger(**({"availableNow": True} if "--available-now" in sys.argv else {"processingTime": "1 second"}))
         .start())
query.awaitTermination()
