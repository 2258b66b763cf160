"""Quick start (c): the kit's exactly-once sink through ``foreachBatch``.

    python examples/quickstart_foreach_batch.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]

The same guarantee as ``format("kafka-eos")``, with the fastest start: Spark starts no Python
process of its own to plan the write or to commit it. The helper needs the query's checkpoint
location too: it keeps the sink's state under it.
"""

import sys

from pyspark.sql import SparkSession

from connectors.spark import register
from connectors.spark.foreach_batch import exactly_once_foreach_batch

bootstrap, source, sink, checkpoint = sys.argv[1:5]
spark = SparkSession.builder.master("local[2]").appName("kafka-eos quick start, foreachBatch").getOrCreate()
register(spark)  # the "kafka-eos" format, for the source

orders = (spark.readStream.format("kafka-eos")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source)
          .option("startingOffsets", "earliest")
          .load())

write = exactly_once_foreach_batch(**{"kafka.bootstrap.servers": bootstrap, "topic": sink,
                                      "checkpointLocation": checkpoint})
query = (orders.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.foreachBatch(write)
         .option("checkpointLocation", checkpoint)
         .trigger(**({"availableNow": True} if "--available-now" in sys.argv else {"processingTime": "1 second"}))
         .start())
query.awaitTermination()
