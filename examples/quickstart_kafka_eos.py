"""Quick start (a): the kit's Kafka source and its exactly-once sink.

    python examples/quickstart_kafka_eos.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]

Reads INPUT from the earliest offset, upper-cases each value, and writes OUTPUT exactly once.
Without --available-now it runs until stopped (Ctrl-C); with it, it processes what INPUT holds now
and ends. Run it again with the same CHECKPOINT after any crash: nothing is lost or duplicated.
"""

import sys

from pyspark.sql import SparkSession

from connectors.spark import register

bootstrap, source, sink, checkpoint = sys.argv[1:5]
spark = SparkSession.builder.master("local[2]").appName("kafka-eos quick start").getOrCreate()
register(spark)  # the "kafka-eos" format

orders = (spark.readStream.format("kafka-eos")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source)
          .option("startingOffsets", "earliest")
          .load())

query = (orders.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
         .writeStream.format("kafka-eos")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink)
         .option("checkpointLocation", checkpoint)
         .trigger(**({"availableNow": True} if "--available-now" in sys.argv else {"processingTime": "1 second"}))
         .start())
query.awaitTermination()
