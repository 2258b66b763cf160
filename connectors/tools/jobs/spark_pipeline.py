"""Exactly-once enrichment pipeline on PySpark Structured Streaming, Kafka to Kafka.

    python -m connectors.tools.jobs.spark_pipeline --bootstrap localhost:9092 --input orders \
        --output enriched --checkpoint-dir /tmp/chk --bounded [--failpoint mid_commit:exit@2]

(or ``python examples/spark_pipeline.py ...`` in a checkout, which runs this module).

Input values are JSON orders ``{"id": ..., "seq": ..., "customer": ..., "amount": ...}`` (other
values pass through as ``{"raw": ...}``). The job parses them, upper-cases the customer, adds a size band and the source
position, and writes JSON keyed like the input. The only change from
a job on Spark's own Kafka connector is the format name ``kafka-eos``; ``--source-format kafka``
and ``--sink-format kafka`` (with ``--jars``) run the same job on Spark's own connector, for
comparison (``bench/run_bench.py``).

``--transform running-count|windowed-count|dedup|join|python-state`` runs a stateful query instead
(``stateful_queries.py``), in ``--output-mode`` append, update or complete as the query allows, with
``--shuffle-partitions`` write tasks; ``kafka-eos verify --shape`` checks its output.

With ``--failpoint`` the whole job (driver JVM, Python workers) dies by SIGKILL at that point of
the protocol, like a host losing power (with ``--failpoint-exit process`` only the Python process
that reaches it dies, and Spark goes on); run it again with the same checkpoint directory and it
recovers. ``KAFKA_EOS_TASK_FAILURE_RATE`` / ``KAFKA_EOS_TASK_FAILURE_SEED`` fail the first
attempt of a seeded share of write tasks, which Spark retries. With ``--hold-until FILE`` a
bounded run waits, once its input is processed, until FILE exists before it exits, so that a fault
timed by ``kafka-eos replay`` always finds it running (see ``job_hold.py``).

Client settings that may be secret (passwords, JAAS lines) go in ``--kafka-options-file FILE``, a
JSON object of ``NAME: VALUE`` (what ``kafka-eos replay`` and ``demo`` pass: a private file, 0600
in a 0700 folder, removed after the replay), not on the command line, which every local user sees.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Mapping

from connectors import worker_python
from connectors.tools.jobs.stateful_queries import OUTPUT_MODES, STATEFUL, output_mode_error, stateful_output
from twophase import failpoints
from twophase.errors import InvalidValueError

log = logging.getLogger("spark_pipeline")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="input topic")
    parser.add_argument("--output", required=True, help="output topic")
    parser.add_argument("--checkpoint-dir", required=True, help="the query's checkpointLocation")
    parser.add_argument("--state-dir", default=None,
                        help="eos.stateDir, where the sink keeps its state: a path or a URI (s3://, abfss://, "
                             "gs://, hdfs://); default <checkpoint-dir>/kafka-eos")
    parser.add_argument("--bounded", action="store_true",
                        help="process what is in the input now (Trigger.AvailableNow), then stop")
    parser.add_argument("--hold-until", default=None, metavar="FILE",
                        help="with --bounded: once the input is processed, wait until FILE exists before "
                             "exiting (kafka-eos replay uses it to land timed faults on a running job)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=200_000,
                        help="maxOffsetsPerTrigger of the source; 0: none, each batch reads all that is "
                             "available (what the kit's source does on Spark 4.0 and 4.1, which refuse the option)")
    parser.add_argument("--source-format", choices=["kafka-eos", "kafka"], default=None,
                        help="kafka: read with Spark's own Kafka source (its connector jars: --jars, else "
                             "spark.jars.packages at pyspark's version) instead of the kit's; the sink is the kit's "
                             "either way. Default: kafka-eos, and kafka on Spark 3.5, 4.0 and 4.1, whose Python "
                             "sources cannot pace their batches")
    parser.add_argument("--jars", default=None,
                        help="comma-separated jars for the driver and executors (spark.jars), e.g. Spark's "
                             "Kafka connector for --source-format kafka")
    parser.add_argument("--trigger-interval", default="0 seconds", help="processing-time trigger when unbounded")
    parser.add_argument("--master", default="local[2,4]",
                        help="Spark master; local[N,F] retries failed tasks up to F times; spark://host:port "
                             "for a standalone cluster")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a librdkafka client setting for the source and the sink (option kafka.NAME), e.g. "
                             "security.protocol=SASL_SSL; may repeat")
    parser.add_argument("--kafka-options-file", default=None, metavar="FILE",
                        help="client settings of the source and the sink as --kafka-option takes them, from a JSON "
                             "object {NAME: VALUE} in FILE, so that secrets stay off the command line; "
                             "--kafka-option overrides them")
    parser.add_argument("--output-bootstrap", default=None,
                        help="the sink's bootstrap servers, when the output topic is on another cluster than the "
                             "input (default: --bootstrap); the sink then takes --output-kafka-option, not "
                             "--kafka-option")
    parser.add_argument("--output-kafka-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a client setting of the sink only (option kafka.NAME), e.g. for an output cluster "
                             "with other security than the input's; with it (or --output-bootstrap) the sink "
                             "takes these instead of --kafka-option; may repeat")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a kafka-eos option of both the source and the sink, e.g. eos.brokerRetryTimeoutMs=30000")
    parser.add_argument("--max-partitions", type=int, default=None,
                        help="eos.maxPartitions of the kit's source: at most this many read tasks per batch, and so "
                             "write tasks and transactions, e.g. the executors' cores (default: by "
                             "eos.minRecordsPerTask)")
    parser.add_argument("--min-records-per-task", type=int, default=None,
                        help="eos.minRecordsPerTask of the kit's source: at most one read task per this many records "
                             "(default 25000, or 0 with a mid_commit failpoint, which needs two transactions or more "
                             "in a batch; 0: one per Kafka partition, as Spark's source)")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="do not start Spark's Python task workers ahead of the query (register's and the "
                             "foreachBatch sink's warm_up=False)")
    parser.add_argument("--commit-offsets-to-group", default=None,
                        help="eos.commitOffsetsToGroup of the source (lag monitoring)")
    parser.add_argument("--py-files", default=None,
                        help="the kit as a zip, shipped to executors whose Python has its dependencies but not "
                             "the kit (as spark-submit --py-files)")
    parser.add_argument("--jvm-class-archive", default=None, metavar="PATH",
                        help="start the driver JVM from this class archive (made by `kafka-eos "
                             "jvm-class-archive PATH`); halves the session start")
    parser.add_argument("--delivery-guarantee", default="exactly_once",
                        choices=["exactly_once", "at_least_once", "none"])
    parser.add_argument("--transaction-timeout-ms", type=int, default=15 * 60 * 1000)
    parser.add_argument("--checkpoint-timeout-ms", type=int, default=10 * 60 * 1000)
    parser.add_argument("--restart-budget-ms", type=int, default=60 * 1000)
    parser.add_argument("--retained-checkpoints", type=int, default=3,
                        help="eos.retainedCheckpoints: checkpoints (and their statistics) kept in the state")
    parser.add_argument("--transactional-id-prefix", default=None,
                        help="eos.transactionalIdPrefix (default: derived from the checkpoint location and sink)")
    parser.add_argument("--transform", choices=list(OUTPUT_MODES), default="enrich",
                        help="copy: value + '|copied' (what the in-process copy_pipeline does); running-count, "
                             "windowed-count, dedup, join, python-state: a stateful query "
                             "(connectors/tools/jobs/stateful_queries.py), whose output `kafka-eos verify --shape` "
                             "checks")
    parser.add_argument("--output-mode", choices=["append", "update", "complete"], default=None,
                        help="the query's output mode (default: the transform's first: update for running-count "
                             "and python-state, append for the others)")
    parser.add_argument("--join-input", default=None, metavar="TOPIC",
                        help="with --transform join: the right-hand input topic, joined with --input on id")
    parser.add_argument("--window-seconds", type=int, default=500,
                        help="windowed-count: the tumbling window's length in event-time seconds (event time: "
                             "the input's seq field, in seconds)")
    parser.add_argument("--watermark-seconds", type=int, default=300,
                        help="windowed-count and dedup: the watermark's delay in event-time seconds")
    parser.add_argument("--shuffle-partitions", type=int, default=4,
                        help="spark.sql.shuffle.partitions: the write tasks of a stateful query (Spark's default: 200)")
    parser.add_argument("--state-file", default=None, metavar="FILE",
                        help="once the query ends, write the rows of its state store (Spark's statestore data "
                             "source at the last batch) to FILE as JSON lines, to compare with the input")
    parser.add_argument("--failpoint", action="append", default=[],
                        help=f"NAME:ACTION[@HIT], NAME in {', '.join(failpoints.ALL)}; may repeat")
    parser.add_argument("--failpoint-exit", choices=["job", "process"], default="job",
                        help="what a failpoint's exit action ends: the whole job (driver JVM and Python workers, "
                             "like a host losing power), or only the Python process that reaches it (the JVM "
                             "lives on and Spark sees its Python worker die)")
    parser.add_argument("--sink-format", choices=["kafka-eos", "kafka-eos-foreach-batch", "kafka"], default=None,
                        help="kafka-eos-foreach-batch: the same sink through foreachBatch and the kit's helper "
                             "(exactly_once_foreach_batch), which commits in this process; kafka: write with "
                             "Spark's own Kafka connector instead, which is at-least-once (a comparison; needs --jars). "
                             "Default: kafka-eos, and kafka-eos-foreach-batch on Spark 3.5")
    parser.add_argument("--log-level", default="WARN")
    parser.add_argument("--metrics-file", default=None,
                        help="append one JSON line per micro-batch (batchId, numInputRows, durationMs, "
                             "timestamp) from the query's progress")
    args = parser.parse_args(argv)
    # One place for the options that depend on each other.
    error = output_mode_error(args.transform, args.output_mode, args.join_input)
    if error:
        parser.error(error)
    if args.output_mode is None:
        args.output_mode = OUTPUT_MODES[args.transform][0]
    # Spark 3.5 has no Python data source API: the same job there reads with Spark's own source and
    # writes through the foreachBatch sink, the pair that runs on every Spark the kit supports. On
    # Spark 4.0 and 4.1 a Python source cannot pace its batches (--max-offsets-per-trigger), so the
    # job reads with Spark's own source there too (spark_versions.py).
    from connectors.spark.spark_versions import has_python_data_source_api, has_stream_admission_control

    if args.source_format is None:
        args.source_format = "kafka-eos" if has_stream_admission_control() else "kafka"
    if args.sink_format is None:
        args.sink_format = "kafka-eos" if has_python_data_source_api() else "kafka-eos-foreach-batch"
    return args


def spark_kafka_package() -> str:
    """Spark's Kafka connector at the installed pyspark's version, for ``spark.jars.packages``
    when no ``--jars`` give it: Scala 2.12 for Spark 3.5's pyspark, 2.13 for Spark 4's."""
    import pyspark

    from connectors.spark.spark_versions import scala_binary_version

    return f"org.apache.spark:spark-sql-kafka-0-10_{scala_binary_version(pyspark.__version__)}:{pyspark.__version__}"


def options_file(path: str) -> dict[str, str]:
    """The client settings of ``--kafka-options-file``: a JSON object of strings."""
    try:
        with open(path, encoding="utf-8") as file:
            settings = json.load(file)
    except (OSError, ValueError) as exc:
        raise InvalidValueError(f"--kafka-options-file {path}: cannot read a JSON object from it: {exc}") from None
    if not isinstance(settings, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in settings.items()):
        raise InvalidValueError(f"--kafka-options-file {path}: expected a JSON object of strings, NAME: VALUE")
    return settings


def kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """Options of both the source and the sink: the bootstrap servers, --kafka-options-file,
    --kafka-option, --option."""
    options = {"kafka.bootstrap.servers": args.bootstrap}
    if args.kafka_options_file:
        options.update({f"kafka.{name}": value for name, value in options_file(args.kafka_options_file).items()})
    for setting in args.kafka_option:
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise InvalidValueError(f"--kafka-option {setting!r}: expected NAME=VALUE, e.g. security.protocol=SASL_SSL")
        options[f"kafka.{name}"] = value
    for setting in args.option:
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise InvalidValueError(f"--option {setting!r}: expected NAME=VALUE, e.g. eos.brokerRetryTimeoutMs=30000")
        options[name] = value
    return options


def sink_kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """The sink's options: those of the source, or, with --output-bootstrap or --output-kafka-option
    (an output cluster of its own), its bootstrap servers and --output-kafka-option instead."""
    if args.output_bootstrap is None and not args.output_kafka_option:
        return kafka_options(args)
    options = {name: value for name, value in kafka_options(args).items() if not name.startswith("kafka.")}
    options["kafka.bootstrap.servers"] = args.output_bootstrap or args.bootstrap
    for setting in args.output_kafka_option:
        name, sep, value = setting.partition("=")
        if not sep or not name:
            raise InvalidValueError(f"--output-kafka-option {setting!r}: expected NAME=VALUE, e.g. security.protocol=SASL_SSL")
        options[f"kafka.{name}"] = value
    return options


def build_query(spark, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    source = (
        spark.readStream.format(args.source_format)
        .options(**kafka_options(args))
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
    )
    if args.max_offsets_per_trigger:
        source = source.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    if args.source_format == "kafka":
        # Spark's source reads read_uncommitted by default: records of aborted input transactions
        # would reach the output. Its offsets in Spark's offset log are what makes a replay exact.
        source = source.option("kafka.isolation.level", "read_committed")
    if args.max_partitions and args.source_format == "kafka-eos":
        source = source.option("eos.maxPartitions", str(args.max_partitions))
    if args.min_records_per_task is not None and args.source_format == "kafka-eos":
        source = source.option("eos.minRecordsPerTask", str(args.min_records_per_task))
    if args.commit_offsets_to_group and args.source_format == "kafka-eos":
        source = source.option("eos.commitOffsetsToGroup", args.commit_offsets_to_group)
    loaded = source.load()
    # The reader is a builder that .option() changes in place: the left side is loaded first.
    right = source.option("subscribe", args.join_input).load() if args.join_input else None
    source = loaded
    if args.transform in STATEFUL:
        output = stateful_output(source, args.transform, window_s=args.window_seconds,
                                 watermark_s=args.watermark_seconds, right=right)
    elif args.transform == "copy":
        output = source.select("key", F.concat("value", F.lit(b"|copied")).alias("value"))
    else:
        order = StructType([
            StructField("id", StringType()), StructField("seq", LongType()),
            StructField("customer", StringType()), StructField("amount", DoubleType()),
        ])
        parsed = source.select("key", "value", "partition", "offset",
                               F.from_json(F.col("value").cast("string"), order).alias("o"))
        enriched = parsed.select(
            "key",
            F.to_json(F.struct(
                F.coalesce(F.col("o.id"), F.col("key").cast("string")).alias("id"),
                F.col("o.seq").alias("seq"),
                F.upper(F.col("o.customer")).alias("customer"),
                F.col("o.amount").alias("amount"),
                F.when(F.col("o.amount") >= 100, "large").when(F.col("o.amount") >= 10, "medium")
                 .otherwise("small").alias("band"),
                F.when(F.col("o").isNull(), F.col("value").cast("string")).alias("raw"),
                F.struct("partition", "offset").alias("source"),
            )).alias("value"),
        )
        output = enriched
    if os.environ.get("KAFKA_EOS_TASK_FAILURE_RATE"):
        from connectors.tools.jobs.task_failures import with_task_failures

        output = with_task_failures(output)
    sink_options = {**sink_kafka_options(args), "topic": args.output, "checkpointLocation": args.checkpoint_dir}
    if args.sink_format != "kafka":
        sink_options.update({
            "eos.deliveryGuarantee": args.delivery_guarantee,
            "eos.transactionTimeoutMs": str(args.transaction_timeout_ms),
            "eos.checkpointTimeoutMs": str(args.checkpoint_timeout_ms),
            "eos.restartBudgetMs": str(args.restart_budget_ms),
            "eos.retainedCheckpoints": str(args.retained_checkpoints),
        })
        if args.transactional_id_prefix:
            sink_options["eos.transactionalIdPrefix"] = args.transactional_id_prefix
        if args.state_dir:
            sink_options["eos.stateDir"] = args.state_dir
    if args.sink_format == "kafka-eos-foreach-batch":
        from connectors.spark.foreach_batch import exactly_once_foreach_batch

        writer = (output.writeStream.foreachBatch(exactly_once_foreach_batch(warm_up=not args.no_warm_up,
                                                                              **sink_options))
                  .option("checkpointLocation", args.checkpoint_dir))
    else:
        writer = output.writeStream.format(args.sink_format).options(**sink_options)
    writer = writer.queryName("kafka-eos-example").outputMode(args.output_mode)
    if args.bounded:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger_interval)
    return writer.start()


def write_state(spark, checkpoint_dir: str, path: str) -> None:  # type: ignore[no-untyped-def]
    """The query's state (Spark's statestore data source, at its last committed batch) as JSON
    lines: what a restart restores, to compare with the input."""
    rows = spark.read.format("statestore").load(checkpoint_dir).toJSON().collect()
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(f"{row}\n" for row in rows)


def append_progress(query, path: str, written: set) -> None:  # type: ignore[no-untyped-def]
    """Append the query's progress entries not yet in ``path`` (keyed by batch id and trigger time)."""
    with open(path, "a") as out:
        for progress in query.recentProgress:
            key = (progress["batchId"], progress["timestamp"])
            if key not in written:
                written.add(key)
                out.write(json.dumps({name: progress[name] for name in
                                      ("batchId", "numInputRows", "durationMs", "timestamp")}) + "\n")


def report_failure(exc: BaseException) -> int:
    """Print the kit's one-line errors last, under Spark's stack traces; other failures as they are."""
    from connectors.spark.failures import kit_error_lines

    lines = kit_error_lines(exc)
    if not lines:
        raise exc
    log.error("the query failed: %s", exc)
    for line in lines:
        print(f"kafka-eos: {line}", file=sys.stderr)
    return 1


def plan_tasks_for_faults(args: argparse.Namespace, armed: Mapping[str, object]) -> None:
    """mid_commit lies between a batch's first EndTxn and the rest: a batch needs two transactions
    or more for that fault to land, so with it armed (and no --min-records-per-task) the kit's
    source plans one read, and so write, task per Kafka partition, as Spark's does, not one per
    25,000 records."""
    if failpoints.MID_COMMIT in armed and args.min_records_per_task is None:
        args.min_records_per_task = 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    specs = ",".join(args.failpoint)
    plan_tasks_for_faults(args, failpoints.parse(specs))  # a bad spec fails here, before Spark starts
    # Spark's Python workers inherit this process's environment when the session starts.
    os.environ[failpoints.ENV_VAR] = specs
    try:
        os.setpgid(0, 0)  # lead a group of our own, so a failpoint kills this job and nothing else
    except PermissionError:
        pass  # already a session leader (started with start_new_session)
    if args.failpoint_exit == "job":
        os.environ[failpoints.KILL_GROUP_ENV] = str(os.getpgid(0))
    else:
        os.environ.pop(failpoints.KILL_GROUP_ENV, None)
    # The Python Spark starts for the job's processes: this interpreter, importing pyspark with its
    # cached bytecode rather than from pyspark.zip (connectors/worker_python.py).
    os.environ.setdefault("PYSPARK_PYTHON", worker_python.path())
    failpoints.load_from_env()

    from pyspark.sql import SparkSession

    from connectors.spark import register
    from connectors.tools.jobs.task_failures import TASK_FAILURE_RATE_ENV, TASK_FAILURE_SEED_ENV
    from connectors.tools.jobs.job_hold import hold_until

    builder = (
        SparkSession.builder.master(args.master).appName("kafka-eos-example")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
        .config("spark.speculation", "false")
        # Failpoint hit counts live in Python processes: write tasks count in the reused Python
        # workers, the driver-side commit in its reused runner. kafka-eos replay picks hits 1 and
        # 2, which a reused worker reaches by the second batch (Spark's default, set here so a
        # cluster-wide spark-defaults.conf cannot turn it off under the replay).
        .config("spark.python.worker.reuse", "true")
    )
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    elif "kafka" in (args.source_format, args.sink_format):
        builder = builder.config("spark.jars.packages", spark_kafka_package())
    if args.jvm_class_archive:
        from connectors.spark.jvm_class_archive import java_options

        options = java_options(args.jvm_class_archive)
        if options:
            builder = builder.config("spark.driver.extraJavaOptions", options)
    # On a cluster, executors do not inherit this process's environment: pass the fault injection on.
    for name in (failpoints.ENV_VAR, failpoints.KILL_GROUP_ENV, TASK_FAILURE_RATE_ENV, TASK_FAILURE_SEED_ENV):
        if os.environ.get(name):
            builder = builder.config(f"spark.executorEnv.{name}", os.environ[name])
    log.info("starting the Spark session")
    spark = builder.getOrCreate()
    log.info("Spark session ready (master %s)", args.master)
    if args.py_files:
        spark.sparkContext.addPyFile(args.py_files)  # what spark-submit --py-files does
    spark.sparkContext.setLogLevel(args.log_level)
    try:
        if "kafka-eos" in (args.source_format, args.sink_format):
            # The foreachBatch sink needs no data source registered: it writes with mapInArrow.
            register(spark, warm_up=not args.no_warm_up)
        query = build_query(spark, args)
    except Exception as exc:
        spark.stop()
        return report_failure(exc)
    log.info("query started (id %s)", query.id)
    written: set = set()
    try:
        if args.metrics_file:
            # Poll the progress while waiting: recentProgress keeps only the last 100 entries.
            while not query.awaitTermination(1):
                append_progress(query, args.metrics_file, written)
            append_progress(query, args.metrics_file, written)
        else:
            query.awaitTermination()
        if args.state_file:
            write_state(spark, args.checkpoint_dir, args.state_file)
        hold_until(args.hold_until, args.metrics_file)
    except KeyboardInterrupt:
        query.stop()
    except Exception as exc:
        return report_failure(exc)
    finally:
        if args.metrics_file:
            append_progress(query, args.metrics_file, written)
        for progress in query.recentProgress:
            log.info("batch %s: %s rows, %s ms", progress["batchId"], progress["numInputRows"],
                     progress["durationMs"].get("triggerExecution"))
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
