"""The foreachBatch sink's aligned write (connectors/spark/aligned_write.py), on a local Spark and the
kit's fake cluster: the JVM functions place keys as Java's partitioner does and deal the output's
partitions round robin over the write tasks; a batch of many input partitions then commits one
marker per output partition it wrote, every row once, keyed rows where Java puts them."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict

import pytest

from connectors.kafka.clients import TopicPartition
from connectors.kafka.clients.murmur2 import java_partition
from connectors.kafka.sink import guardrails
from connectors.simulated_kafka import FakeKafkaClients

pytestmark = pytest.mark.spark

OUT_PARTITIONS = 8


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[4]").appName("kafka-eos-aligned-write")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local"))).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    monkeypatch.setattr(guardrails, "TOPIC_RECHECK_S", 0.0)
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("out", OUT_PARTITIONS)
    clients.admin().create_topic("other", 3)
    return clients


@pytest.fixture
def functions(spark):
    from connectors.spark.aligned_write import register_functions

    assert register_functions(spark) is None
    return spark


def test_kafka_eos_partition_places_keys_where_javas_partitioner_does(functions):
    # Keys of 0 to 40 bytes: every length of MurmurHash2's tail, and whole blocks.
    keys = [bytes(range(n % 7, n % 7 + n)) for n in range(41)] + [f"key-{i}".encode() for i in range(300)]
    frame = functions.createDataFrame([(k,) for k in keys], "k binary")
    got = [row[0] for row in frame.selectExpr(f"kafka_eos_partition(k, {OUT_PARTITIONS + 5})").collect()]
    assert got == [java_partition(k, OUT_PARTITIONS + 5) for k in keys]
    unknown = functions.sql("SELECT kafka_eos_partition(X'01', CAST(NULL AS INT)) AS p, "
                            "kafka_eos_partition(CAST(NULL AS BINARY), 4) AS q").first()
    assert (unknown["p"], unknown["q"]) == (None, None)


def test_the_write_task_key_deals_the_output_partitions_round_robin(functions):
    tasks = 6
    placed = (functions.range(0, 64).selectExpr("CAST(id AS INT) AS slot")
              .selectExpr("slot", f"kafka_eos_write_task_key(slot, {tasks}) AS k")
              .repartition(tasks, "k").selectExpr("slot", "spark_partition_id() AS task").collect())
    assert sorted((row["slot"], row["task"]) for row in placed) == [(slot, slot % tasks) for slot in range(64)]


def _options(fake, tmp_path, **extra):
    from connectors.spark.options import parse_sink_options

    return parse_sink_options({"kafka.bootstrap.servers": fake.bootstrap_servers, "eos.statedir": str(tmp_path / "state"),
                               **extra}, streaming=False, plans_write_tasks=True)


def _batch(spark, rows: int, input_partitions: int, topics: tuple[str, ...] = ()):
    """Keyed rows, every 10th without a key, spread over ``input_partitions`` (each input partition
    holds rows of every output partition, as a read task of a keyed input topic does)."""
    topic = [f"element_at(array({', '.join(repr(t) for t in topics)}), CAST(id % {len(topics)} AS INT) + 1) AS topic"] \
        if topics else []
    return (spark.range(0, rows, 1, input_partitions)
            .selectExpr("CASE WHEN id % 10 = 0 THEN NULL ELSE concat('k', CAST(id % 97 AS STRING)) END AS key",
                        "concat('v', CAST(id AS STRING)) AS value", *topic))


def _markers_and_writers(fake, topic: str, partitions: int) -> tuple[Counter, dict[int, set[str]]]:
    markers: Counter = Counter()
    writers: dict[int, set[str]] = defaultdict(set)
    for partition in range(partitions):
        for entry in fake.log_entries(TopicPartition(topic, partition)):
            if entry.kind == "commit":
                markers[partition] += 1
            elif entry.kind == "data":
                writers[partition].add(entry.transactional_id)
    return markers, writers


def _records(fake, topic: str, partitions: int) -> list[tuple[int, bytes | None, bytes]]:
    return [(p, e.key, e.value) for p in range(partitions) for e in fake.log_entries(TopicPartition(topic, p))
            if e.kind == "data" and e.transaction_state == "committed"]


def test_a_batch_of_many_input_partitions_commits_one_marker_per_output_partition(spark, fake, tmp_path):
    from connectors.spark.aligned_write import AlignedWrite
    from connectors.spark.foreach_batch_writer import write_dataframe
    from connectors.spark.sink_driver import BatchContext

    options = _options(fake, tmp_path, topic="out")
    write_tasks = AlignedWrite(options, 3)
    write_dataframe(_batch(spark, 2_000, 12), options, BatchContext(0, "q"), first_write=True,
                    write_tasks=write_tasks)

    markers, writers = _markers_and_writers(fake, "out", OUT_PARTITIONS)
    # Unaligned, each of 3 tasks (12 partitions coalesced) would write every partition: 3 markers each.
    assert markers == Counter({p: 1 for p in range(OUT_PARTITIONS)})
    assert all(len(ids) == 1 for ids in writers.values())
    assert len(set().union(*writers.values())) == 3  # the 8 partitions dealt over the 3 tasks
    records = _records(fake, "out", OUT_PARTITIONS)
    assert sorted(value for _, _, value in records) == sorted(f"v{i}".encode() for i in range(2_000))
    for partition, key, value in records:
        # A keyed row where Java's partitioner puts it; a row without a key at its value's murmur2.
        assert partition == java_partition(key if key is not None else value, OUT_PARTITIONS)


def test_per_row_topics_align_on_topic_and_partition(spark, fake, tmp_path):
    from connectors.spark.aligned_write import AlignedWrite
    from connectors.spark.foreach_batch_writer import write_dataframe
    from connectors.spark.sink_driver import BatchContext

    options = _options(fake, tmp_path)
    write_dataframe(_batch(spark, 1_000, 6, topics=("out", "other")), options, BatchContext(0, "q"),
                    first_write=True, write_tasks=AlignedWrite(options, 4))

    for topic, partitions in (("out", OUT_PARTITIONS), ("other", 3)):
        markers, writers = _markers_and_writers(fake, topic, partitions)
        assert markers == Counter({p: 1 for p in range(partitions)}), topic
        assert all(len(ids) == 1 for ids in writers.values()), topic
    assert len(_records(fake, "out", OUT_PARTITIONS)) + len(_records(fake, "other", 3)) == 1_000


def test_a_rows_own_partition_is_kept_and_aligned(spark, fake, tmp_path):
    from connectors.spark.aligned_write import AlignedWrite
    from connectors.spark.foreach_batch_writer import write_dataframe
    from connectors.spark.sink_driver import BatchContext

    options = _options(fake, tmp_path, topic="out")
    batch = _batch(spark, 500, 5).selectExpr("key", "value", "CAST(length(value) % 2 AS INT) AS partition")
    write_dataframe(batch, options, BatchContext(0, "q"), first_write=True, write_tasks=AlignedWrite(options, 4))
    markers, _ = _markers_and_writers(fake, "out", OUT_PARTITIONS)
    assert markers == Counter({0: 1, 1: 1})
    assert all(partition == len(value) % 2 for partition, _, value in _records(fake, "out", OUT_PARTITIONS))


def test_a_partitioner_that_ignores_keys_is_kept_and_the_write_is_coalesced(spark, fake, tmp_path, caplog):
    from connectors.spark.aligned_write import AlignedWrite

    options = _options(fake, tmp_path, topic="out",
                       **{"kafka.partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner"})
    with caplog.at_level(logging.INFO, logger="connectors.spark.aligned_write"):
        write_tasks = AlignedWrite(options, 3)
        arranged = write_tasks.arrange(_batch(spark, 100, 12), 0)
    assert arranged.rdd.getNumPartitions() == 3
    [line] = [r.getMessage() for r in caplog.records]
    assert "partitioner random places rows by its own rule" in line


def test_functions_that_cannot_load_leave_the_batch_coalesced_with_one_warning(spark, fake, tmp_path, caplog,
                                                                              monkeypatch):
    from connectors.spark import aligned_write

    monkeypatch.setattr(aligned_write, "FUNCTIONS_JAR", tmp_path / "gone.jar")
    options = _options(fake, tmp_path, topic="out")
    write_tasks = aligned_write.AlignedWrite(options, 3)
    with caplog.at_level(logging.INFO, logger="connectors.spark.aligned_write"):
        for checkpoint in (0, 1):
            assert write_tasks.arrange(_batch(spark, 100, 12), checkpoint).rdd.getNumPartitions() == 3
    [warning] = [r for r in caplog.records]
    assert warning.levelno == logging.WARNING and "gone.jar is missing" in warning.getMessage()


def test_an_at_least_once_sink_has_no_marker_to_save_and_keeps_the_coalesce(spark, fake, tmp_path):
    from connectors.spark.aligned_write import AlignedWrite

    options = _options(fake, tmp_path, topic="out", **{"eos.deliveryGuarantee": "at_least_once"})
    assert AlignedWrite(options, 3).arrange(_batch(spark, 100, 12), 0).rdd.getNumPartitions() == 3



def test_the_functions_are_registered_once_per_session(functions, monkeypatch):
    """Spark warns at every registration that replaces a function: a query's later batches, each
    with a session object of its own for the same session, register nothing."""
    from pyspark.sql.udf import UDFRegistration

    from connectors.spark.aligned_write import register_functions

    registered: list[str] = []
    monkeypatch.setattr(UDFRegistration, "registerJavaFunction",
                        lambda self, name, *args: registered.append(name))
    assert register_functions(functions) is None
    assert registered == []


def test_rows_without_a_key_column_align_on_their_values(spark, fake, tmp_path):
    from connectors.spark.aligned_write import AlignedWrite
    from connectors.spark.foreach_batch_writer import write_dataframe
    from connectors.spark.sink_driver import BatchContext

    options = _options(fake, tmp_path, topic="out")
    batch = spark.range(0, 400, 1, 6).selectExpr("concat('v', CAST(id AS STRING)) AS value")
    write_dataframe(batch, options, BatchContext(0, "q"), first_write=True, write_tasks=AlignedWrite(options, 3))
    markers, _ = _markers_and_writers(fake, "out", OUT_PARTITIONS)
    assert markers == Counter({p: 1 for p in range(OUT_PARTITIONS)})
    records = _records(fake, "out", OUT_PARTITIONS)
    assert len(records) == 400 and all(p == java_partition(v, OUT_PARTITIONS) for p, _, v in records)


def test_the_stage_before_the_aligned_shuffle_runs_in_the_write_tasks(spark, fake, tmp_path):
    """Behind a stateful operator Spark hands the batch in spark.sql.shuffle.partitions (here 12
    aggregate partitions): the aligned write coalesces them to its write tasks before its shuffle,
    so the aggregate's stage runs in 3 tasks, as the unaligned write runs it, not in 12."""
    from connectors.spark.aligned_write import AlignedWrite

    counted = (_batch(spark, 1_000, 4).groupBy("key").count().selectExpr("key", "CAST(count AS STRING) AS value")
               .repartition(12, "key"))
    arranged = AlignedWrite(_options(fake, tmp_path, topic="out"), 3).arrange(counted, 0)
    stages = arranged._jdf.queryExecution().executedPlan().toString()
    assert "Coalesce 3" in stages, stages
    assert arranged.rdd.getNumPartitions() == 3
