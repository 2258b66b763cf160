"""A windowed aggregation with a watermark, exactly once: the kit's Kafka source and sink.

    python examples/windowed_aggregation.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]

Counts INPUT's records per group in tumbling 500-second windows of event time, with a 300-second
watermark, and writes each window once it is closed (append mode) to OUTPUT as JSON:
{"key": group, "window": {"start": s, "end": e}, "count": n}. The input is what `kafka-eos load`
writes: JSON with a "group" and a "seq", taken as the event time in seconds. A crash anywhere, and
a restart with the same CHECKPOINT, writes no window twice and loses none; check the output with

    kafka-eos verify --bootstrap BOOTSTRAP --input INPUT --output OUTPUT \\
        --shape windowed-count --id-field json:group --event-time-field json:seq
"""

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from connectors.spark import register

bootstrap, source, sink, checkpoint = sys.argv[1:5]
spark = SparkSession.builder.master("local[2]").appName("kafka-eos windowed aggregation").getOrCreate()
spark.conf.set("spark.sql.shuffle.partitions", "8")  # write tasks of the aggregation (Spark's default: 200)
register(spark)  # the "kafka-eos" format

events = (spark.readStream.format("kafka-eos")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source)
          .option("startingOffsets", "earliest")
          .load()
          .select(F.from_json(F.col("value").cast("string"), "group STRING, seq LONG").alias("e"))
          .select("e.group", F.timestamp_seconds("e.seq").alias("event_time")))

counts = (events.withWatermark("event_time", "300 seconds")
          .groupBy(F.window("event_time", "500 seconds"), "group")
          .count())

query = (counts.select(F.col("group").alias("key"),
                       F.to_json(F.struct(F.col("group").alias("key"),
                                          F.struct(F.col("window.start").cast("long").alias("start"),
                                                   F.col("window.end").cast("long").alias("end")).alias("window"),
                                          "count")).alias("value"))
         .writeStream.format("kafka-eos")
         .outputMode("append")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink)
         .option("checkpointLocation", checkpoint)
         .trigger(**({"availableNow": True} if "--available-now" in sys.argv else {"processingTime": "1 second"}))
         .start())
query.awaitTermination()
