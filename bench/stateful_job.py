"""One stateful streaming query of the stateful bench (``bench/stateful_bench.py``), run in a process
of its own: read the input topic from offset 0 with ``Trigger.AvailableNow``, apply ``--shape``,
write to the output topic through ``--sink``, print one JSON line of timings and exit.

Shapes (the issue 45 user's queries): ``running_count`` (``groupBy("key").count()``, update mode),
``dedup`` (``dropDuplicates(["key"])``, append mode), ``window_count`` (a count per 10 s event-time
window of the record timestamp, 5 s watermark, append mode). Sinks: ``kafka`` (Spark's own
connector at both ends: its jars in ``--jars``), ``kafka-eos`` (the kit's source and sink formats),
``foreach-batch`` (the kit's source, and its foreachBatch helper), ``kafka-eos-by-key``
(``kafka-eos`` after ``repartition(defaultParallelism, "key")``: what a write-side distribution
clustered by key into as many partitions as Spark runs at once would plan, measured before it is
built). Spark's defaults otherwise
(``spark.sql.shuffle.partitions`` from ``--shuffle-partitions``, default 200).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

SHAPES = ("running_count", "dedup", "window_count")
SINKS = ("kafka", "kafka-eos", "foreach-batch", "kafka-eos-by-key")
#: The output mode of each shape, as a user of Spark's Kafka sink writes it.
OUTPUT_MODES = {"running_count": "update", "dedup": "append", "window_count": "append"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--shape", choices=SHAPES, required=True)
    parser.add_argument("--sink", choices=SINKS, required=True)
    parser.add_argument("--shuffle-partitions", type=int, default=200)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--jars", default=None, help="Spark's Kafka connector's jars (spark.jars), for --sink kafka")
    return parser.parse_args(argv)


def stateful(source, shape: str):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    if shape == "running_count":
        counted = source.groupBy("key").count()
        return counted.select("key", F.col("count").cast("string").alias("value"))
    if shape == "dedup":
        return source.dropDuplicates(["key"]).select("key", "value")
    windowed = (source.withWatermark("timestamp", "5 seconds")
                .groupBy(F.window("timestamp", "10 seconds")).count())
    return windowed.select(F.col("window.start").cast("string").alias("key"),
                           F.col("count").cast("string").alias("value"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    from connectors import worker_python

    os.environ.setdefault("PYSPARK_PYTHON", worker_python.path())
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(args.master).appName(f"stateful-bench-{args.shape}-{args.sink}")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions)))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    session_ready = time.monotonic()
    source_format = "kafka" if args.sink == "kafka" else "kafka-eos"
    sink_format = "kafka-eos" if args.sink == "kafka-eos-by-key" else args.sink
    if source_format == "kafka-eos":
        from connectors.spark import register

        register(spark)
    reader = (spark.readStream.format(source_format).option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger)))
    if source_format == "kafka":
        reader = reader.option("kafka.isolation.level", "read_committed")
    output = stateful(reader.load(), args.shape)
    if args.sink == "kafka-eos-by-key":
        output = output.repartition(spark.sparkContext.defaultParallelism, "key")
    options = {"kafka.bootstrap.servers": args.bootstrap, "topic": args.output,
               "checkpointLocation": args.checkpoint_dir}
    if args.sink == "foreach-batch":
        from connectors.spark.foreach_batch import exactly_once_foreach_batch

        writer = output.writeStream.foreachBatch(exactly_once_foreach_batch(**options))
    else:
        writer = output.writeStream.format(sink_format).options(**{k: v for k, v in options.items()
                                                                 if k != "checkpointLocation"})
    query = (writer.option("checkpointLocation", args.checkpoint_dir).outputMode(OUTPUT_MODES[args.shape])
             .trigger(availableNow=True).start())
    query_started = time.monotonic()
    query.awaitTermination()
    query_ended = time.monotonic()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    print(json.dumps({
        "shape": args.shape, "sink": args.sink, "shuffle_partitions": args.shuffle_partitions,
        "session_s": round(session_ready - started, 3),
        "query_s": round(query_ended - query_started, 3),
        "batches": len(batches),
        "batch_ms": [p["durationMs"].get("triggerExecution") for p in batches],
    }), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
