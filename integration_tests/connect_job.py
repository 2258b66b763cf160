"""A Spark Connect client job, as the integration tests run it: a separate process that connects to
``--remote sc://host:port``, registers the kafka-eos format on its session, and copies ``--input``
to ``--output`` (each value + ``|copied``, like ``examples/spark_pipeline.py --transform copy``)
with one of the kit's APIs:

- ``sink``: ``readStream.format(<--source-format>)`` -> ``writeStream.format("kafka-eos")``;
- ``foreach-batch``: the same stream through ``exactly_once_foreach_batch`` with the query's
  ``checkpointLocation`` (what binds its state to the query on Connect); with ``--source-format
  kafka``, read by Spark's own source, the pair that runs on Spark 3.5;
- ``batch``: ``spark.read.format("kafka-eos")`` -> ``df.write.format("kafka-eos").mode("append")``.

Streaming runs with ``Trigger.AvailableNow``: it processes what the input holds now, then stops.
The job exits 0 when done; the server's failpoints (its environment) decide whether it dies first.
"""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger("connect_job")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--remote", required=True, help="sc://host:port of the Spark Connect server")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint-dir", help="the query's checkpointLocation, as the server sees it")
    parser.add_argument("--state-dir", help="eos.stateDir (batch: required on a cluster)")
    parser.add_argument("--api", choices=["sink", "foreach-batch", "batch"], default="sink")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=500)
    parser.add_argument("--source-format", choices=["kafka-eos", "kafka"], default="kafka-eos",
                        help="kafka: Spark's own source (its jars on the server), as on Spark 3.5")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from connectors.spark import register

    spark = SparkSession.builder.remote(args.remote).create()
    if args.source_format == "kafka-eos" or args.api != "foreach-batch":
        register(spark)  # the foreachBatch sink needs no data source: Spark's source feeds it on 3.5
    # The tests kill the server at mid_commit, between a batch's first EndTxn and the rest: a batch
    # needs two transactions or more, so the source plans one task per Kafka partition.
    kafka = {"kafka.bootstrap.servers": args.bootstrap}
    one_task_per_partition = {"eos.minRecordsPerTask": "0"}
    copy = [F.col("key"), F.concat("value", F.lit(b"|copied")).alias("value")]
    if args.api == "batch":
        frame = (spark.read.format("kafka-eos").options(**kafka, **one_task_per_partition)
                 .option("subscribe", args.input)
                 .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
        writer = frame.select(*copy).write.format("kafka-eos").options(**kafka).option("topic", args.output)
        if args.state_dir:
            writer = writer.option("eos.stateDir", args.state_dir)
        writer.mode("append").save()
        log.info("batch write done")
        spark.stop()
        return 0

    source_options = one_task_per_partition if args.source_format == "kafka-eos" else {
        # Spark's source reads read_uncommitted by default: aborted input would reach the output.
        "kafka.isolation.level": "read_committed"}
    stream = (spark.readStream.format(args.source_format).options(**kafka, **source_options)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger)).load())
    if args.api == "sink":
        writer = (stream.select(*copy).writeStream.format("kafka-eos").options(**kafka)
                  .option("topic", args.output).option("checkpointLocation", args.checkpoint_dir))
        if args.state_dir:
            writer = writer.option("eos.stateDir", args.state_dir)
    else:
        from connectors.spark.foreach_batch import exactly_once_foreach_batch

        def transform(batch_df, batch_id):  # type: ignore[no-untyped-def]
            return batch_df.select(F.col("key"), F.concat("value", F.lit(b"|copied")).alias("value"))

        options = {**kafka, "topic": args.output, "checkpointLocation": args.checkpoint_dir}
        if args.state_dir:
            options["eos.stateDir"] = args.state_dir
        writer = (stream.writeStream.foreachBatch(exactly_once_foreach_batch(transform, **options))
                  .option("checkpointLocation", args.checkpoint_dir))
    query = writer.trigger(availableNow=True).start()
    log.info("query started (id %s)", query.id)
    query.awaitTermination()
    failure = query.exception()
    if failure is not None:
        print(f"query failed: {failure}", file=sys.stderr)
        return 1
    log.info("query done")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
