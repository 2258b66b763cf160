"""Quick start (b): Spark's own Kafka source, ``format("kafka")``, feeding the kit's exactly-once sink.

    python examples/quickstart_spark_source.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]

For jobs that already read with Spark's source. It needs Spark's Kafka connector, which is not in
pyspark: by default Spark fetches it (``spark.jars.packages``) at the installed pyspark's version;
``SPARK_KAFKA_JARS`` (comma-separated jar paths) gives the jars instead, e.g. where the machine
cannot reach Maven Central, or where that version is not published.
"""

import os
import sys

import pyspark
from pyspark.sql import SparkSession

from connectors.spark import register

bootstrap, source, sink, checkpoint = sys.argv[1:5]
builder = SparkSession.builder.master("local[2]").appName("kafka-eos quick start, Spark's source")
if os.environ.get("SPARK_KAFKA_JARS"):
    builder = builder.config("spark.jars", os.environ["SPARK_KAFKA_JARS"])
else:
    builder = builder.config("spark.jars.packages",
                             f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}")
spark = builder.getOrCreate()
register(spark)  # the "kafka-eos" format, for the sink

orders = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source)
          .option("startingOffsets", "earliest")
          # Spark's source reads read_uncommitted by default: records of aborted input
          # transactions would reach the output.
          .option("kafka.isolation.level", "read_committed")
          .load())

query = (orders.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.format("kafka-eos")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink)
         .option("checkpointLocation", checkpoint)
         .trigger(**({"availableNow": True} if "--available-now" in sys.argv else {"processingTime": "1 second"}))
         .start())
query.awaitTermination()
