"""A running count, as a user writes it for Spark's Kafka sink, run on ``format("kafka-eos")``: the
query below is ``format("kafka")``'s with the format name changed, nothing else.

    counts = stream.groupBy("key").count()
    counts.selectExpr("key", "CAST(count AS STRING) AS value").writeStream.format(FORMAT)
          .outputMode(MODE).option("kafka.bootstrap.servers", ...).option("topic", ...)
          .option("checkpointLocation", ...).trigger(availableNow=True).start()

One process, a local session (``--master``) or a Spark Connect one (``--remote``); ``register()`` on
the main thread, then one query per ``--query MODE:OUTPUT_TOPIC``, each started from a Python thread
of its own (Spark looks the format up on the thread that starts the query), and one map-only copy
(``stream.select("key", "value")``, append mode) per ``--copy OUTPUT_TOPIC``. Exits 0 when every
query finished, 1 with the failure otherwise.

On Spark 4.0 and 4.1, which give a Python streaming source no read limits, ``maxOffsetsPerTrigger``
is left out and each query reads its input in one batch.

``--shuffle-partitions`` sets ``spark.sql.shuffle.partitions`` (4 by default: a small input; 200 is
Spark's default, where the JVM provider decides how many write tasks a stateful batch has), and
``--min-partitions`` the source's ``minPartitions`` (its read tasks a batch), and
``--ids-by-topic`` gives each query's transactions the prefix ``<output topic>-``
(``eos.transactionalIdPrefix``), so that a test can list them on the broker.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--master", help="a local master, e.g. local[2]")
    where.add_argument("--remote", help="sc://host:port of a Spark Connect server")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--query", action="append", required=True, metavar="MODE:TOPIC",
                        help="an output mode (update, complete) and its output topic; repeatable")
    parser.add_argument("--checkpoint-dir", required=True, help="one checkpointLocation per query is made in it")
    parser.add_argument("--copy", action="append", default=[], metavar="TOPIC",
                        help="the output topic of a map-only copy of the input; repeatable")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=200)
    parser.add_argument("--shuffle-partitions", type=int, default=4)
    parser.add_argument("--min-partitions", type=int, help="the source's minPartitions: its read tasks a batch")
    parser.add_argument("--ids-by-topic", action="store_true",
                        help="eos.transactionalIdPrefix=<output topic>- for each query")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    # A cluster's executors run this interpreter too (the same machine): it has the kit.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from connectors.spark import register
    from connectors.spark.spark_versions import has_stream_admission_control

    if args.remote:
        spark = SparkSession.builder.remote(args.remote).create()
    else:
        spark = (SparkSession.builder.master(args.master).appName("kafka-eos output modes")
                 .config("spark.ui.enabled", "false").getOrCreate())
    # A small input: a few shuffle partitions by default, not Spark's 200 (the speed at 200 is bench/'s).
    spark.conf.set("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
    register(spark)

    failures: list[str] = []

    def run(mode: str, topic: str) -> None:
        try:
            stream = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", args.bootstrap)
                      .option("subscribe", args.input).option("startingOffsets", "earliest"))
            if has_stream_admission_control():  # Spark 4.0 and 4.1 give a Python source no read limit
                stream = stream.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
            if args.min_partitions:
                stream = stream.option("minPartitions", str(args.min_partitions))
            stream = stream.load()
            if mode == "copy":
                output = stream.select("key", "value")
            else:
                output = stream.groupBy("key").count().selectExpr("key", "CAST(count AS STRING) AS value")
            writer = (output.writeStream.format("kafka-eos").outputMode("append" if mode == "copy" else mode)
                      .option("kafka.bootstrap.servers", args.bootstrap).option("topic", topic)
                      .option("checkpointLocation", f"{args.checkpoint_dir}/{mode}-{topic}"))
            if args.ids_by_topic:
                writer = writer.option("eos.transactionalIdPrefix", f"{topic}-")
            query = writer.trigger(availableNow=True).start()
            query.awaitTermination()
            if query.exception() is not None:
                failures.append(f"{mode}: {query.exception()}")
        except Exception as exc:  # reported by the exit code, with the JVM's exception when it is one
            java = getattr(exc, "java_exception", None)
            failures.append(f"{mode}: {java.toString() if java is not None else exc}"[:2000])

    for spec in [*args.query, *(f"copy:{topic}" for topic in args.copy)]:
        mode, _, topic = spec.partition(":")
        query_thread = threading.Thread(target=run, args=(mode, topic), name=f"query-{mode}")
        query_thread.start()
        query_thread.join()
    for failure in failures:
        print(f"query failed: {failure}", file=sys.stderr)
    spark.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
