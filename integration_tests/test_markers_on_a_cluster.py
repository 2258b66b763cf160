"""Transaction markers per batch on a 3-node cluster at replication 3 (issue 54): the foreachBatch
sink's batch of 64 write tasks into a topic of 64 partitions commits one marker per output
partition, not 64 x 64, and holds every input row once, keyed rows where Java's partitioner puts
them.

The batch goes through the sink's production path: the function ``exactly_once_foreach_batch``
returns, called as Spark's foreachBatch calls it (the query named by Spark's local property), on a
``local[8]`` session whose 8 task slots stand in for a cluster's. A marker takes an offset of its
own, so a partition's markers are its end offset less the records it holds (nothing is aborted).
"""

from __future__ import annotations

from typing import Callable

import pytest

from connectors.kafka.clients import KafkaClients, TopicPartition
from connectors.kafka.clients.factory import clients_for
from connectors.kafka.clients.murmur2 import java_partition
from kafka_io import wait_until_stable

pytestmark = pytest.mark.spark

PARTITIONS = 64
WRITE_TASKS = 64
RECORDS = 64_000


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[8]").appName("kafka-eos-markers-on-a-cluster")
               .config("spark.ui.enabled", "false")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local"))).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _records_and_markers(clients: KafkaClients, topic: str) -> tuple[list[tuple[int, bytes | None, bytes]], dict[int, int]]:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    admin = clients.admin()
    end = admin.list_offsets(tps, "latest", read_committed=True)
    start = admin.list_offsets(tps, "earliest", read_committed=True)
    reader = clients.reader(read_committed=True)
    try:
        records = [(r.partition, r.key, r.value)
                   for r in reader.read({tp: (start[tp], end[tp]) for tp in tps if end[tp] > start[tp]})]
    finally:
        reader.close()
    held = {p: 0 for p in range(PARTITIONS)}
    for partition, _, _ in records:
        held[partition] += 1
    return records, {tp.partition: end[tp] - start[tp] - held[tp.partition] for tp in tps}


def test_a_batch_of_64_write_tasks_into_64_partitions_commits_one_marker_per_partition(
        kafka_cluster, spark, unique_name: Callable[[str], str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    from connectors.spark.foreach_batch import QUERY_ID_PROPERTY, exactly_once_foreach_batch

    clients = clients_for(kafka_cluster.bootstrap_servers)
    topic = unique_name("out")
    clients.admin().create_topic(topic, PARTITIONS)
    write = exactly_once_foreach_batch(warm_up=False, **{
        "kafka.bootstrap.servers": kafka_cluster.bootstrap_servers, "topic": topic,
        "eos.stateDir": str(tmp_path / "state"), "eos.writeTasks": str(WRITE_TASKS)})
    # 64 input partitions, each holding keys of every output partition, as 64 read tasks of a keyed
    # topic do; every 10th row has no key.
    batch = spark.range(0, RECORDS, 1, 64).selectExpr(
        "CASE WHEN id % 10 = 0 THEN NULL ELSE concat('k', CAST(id % 5000 AS STRING)) END AS key",
        "concat('v', CAST(id AS STRING)) AS value")
    spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, unique_name("query"))
    try:
        write(batch, 0)
    finally:
        spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, None)
    wait_until_stable(clients, topic)

    records, markers = _records_and_markers(clients, topic)
    # Unaligned, each of the 64 tasks would have written every partition: 64 markers each.
    assert markers == {p: 1 for p in range(PARTITIONS)}
    assert sorted(value for _, _, value in records) == sorted(f"v{i}".encode() for i in range(RECORDS))
    for partition, key, value in records:
        assert partition == java_partition(key if key is not None else value, PARTITIONS)


def test_format_kafka_eos_aligns_rows_on_their_partition_column(
        kafka_cluster, spark, unique_name: Callable[[str], str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The format's aligned write: rows that carry a ``partition`` column, here computed with the kit's
    ``kafka_eos_partition`` (Java's partitioning of the key), are clustered by it into the task slots
    (8), so 64 read partitions write one marker per output partition, where they wrote 64 each."""
    from connectors.spark import register
    from connectors.spark.aligned_write import register_functions

    register(spark, warm_up=False)
    assert register_functions(spark) is None
    clients = clients_for(kafka_cluster.bootstrap_servers)
    topic = unique_name("out")
    clients.admin().create_topic(topic, PARTITIONS)
    (spark.range(0, RECORDS, 1, 64)
     .selectExpr("concat('k', CAST(id % 5000 AS STRING)) AS key", "concat('v', CAST(id AS STRING)) AS value")
     .selectExpr("key", "value", f"kafka_eos_partition(CAST(key AS BINARY), {PARTITIONS}) AS partition")
     .write.format("kafka-eos").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
     .option("topic", topic).option("eos.stateDir", str(tmp_path / "state")).mode("append").save())
    wait_until_stable(clients, topic)

    records, markers = _records_and_markers(clients, topic)
    assert markers == {p: 1 for p in range(PARTITIONS)}
    assert sorted(value for _, _, value in records) == sorted(f"v{i}".encode() for i in range(RECORDS))
    assert all(partition == java_partition(key, PARTITIONS) for partition, key, _ in records)


def _streamed(spark, reader, topic: str, kafka_cluster, checkpoint) -> None:  # type: ignore[no-untyped-def]
    """One micro-batch of ``reader`` written to ``topic`` by ``format("kafka-eos")`` at defaults."""
    query = (reader.writeStream.format("kafka-eos")
             .option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers).option("topic", topic)
             .option("checkpointLocation", str(checkpoint)).trigger(once=True).start())
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()


def test_format_kafka_eos_bounds_a_map_only_batch_of_64_read_tasks_by_the_task_slots(
        kafka_cluster, spark, unique_name: Callable[[str], str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A map-only query whose source plans 64 read tasks (Spark's rate source here, as Spark's Kafka
    source plans one per partition of a 64-partition topic) into ``format("kafka-eos")`` at defaults:
    the rows are clustered by key into the 8 task slots, so the batch commits at most 8 markers per
    output partition (64 unclustered), and holds every row once."""
    from connectors.spark import register

    register(spark, warm_up=False)
    clients = clients_for(kafka_cluster.bootstrap_servers)
    topic = unique_name("out")
    clients.admin().create_topic(topic, PARTITIONS)
    rows = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", RECORDS).option("numPartitions", 64)
            .load().selectExpr("concat('k', CAST(value % 5000 AS STRING)) AS key",
                               "concat('v', CAST(value AS STRING)) AS value"))
    _streamed(spark, rows, topic, kafka_cluster, tmp_path / "checkpoint")
    wait_until_stable(clients, topic)

    records, markers = _records_and_markers(clients, topic)
    assert 0 < max(markers.values()) <= 8, markers
    assert sorted(value for _, _, value in records) == sorted(f"v{i}".encode() for i in range(RECORDS))
    assert all(partition == java_partition(key, PARTITIONS) for partition, key, _ in records)


def test_the_kits_source_spreads_a_large_batch_over_the_task_slots_and_no_further(
        kafka_cluster, spark, unique_name: Callable[[str], str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The kit at both ends, map-only, at defaults: the JVM provider hands the source the 8 task slots
    (eos.taskSlots), so a batch of 128,000 records in 61 partitions is read by 8 tasks (the records
    alone, one task per 25,000, would give 6; one per partition 61), and the format adds no shuffle:
    an output partition gets one marker per task whose keys reach it, so 8 markers show 8 writers.
    The input's partition count is prime to the output's: on topics of one count, Java's partitioner
    puts a key at the same partition number in both, and each output partition has one writer."""
    from connectors.spark import register

    register(spark, warm_up=False)
    clients = clients_for(kafka_cluster.bootstrap_servers)
    source, topic = unique_name("in"), unique_name("out")
    clients.admin().create_topic(source, 61)
    clients.admin().create_topic(topic, PARTITIONS)
    records = 2 * RECORDS
    (spark.range(0, records, 1, 16)
     .selectExpr("concat('k', CAST(id % 5000 AS STRING)) AS key", "concat('v', CAST(id AS STRING)) AS value")
     .write.format("kafka-eos").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
     .option("topic", source).option("eos.stateDir", str(tmp_path / "load")).mode("append").save())
    wait_until_stable(clients, source)
    rows = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", kafka_cluster.bootstrap_servers)
            .option("subscribe", source).option("startingOffsets", "earliest").load().select("key", "value"))
    _streamed(spark, rows, topic, kafka_cluster, tmp_path / "checkpoint")
    wait_until_stable(clients, topic)

    copied, markers = _records_and_markers(clients, topic)
    assert max(markers.values()) == 8, markers
    assert sorted(value for _, _, value in copied) == sorted(f"v{i}".encode() for i in range(records))
