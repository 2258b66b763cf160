"""Spark's Kafka source options on a Spark session (local[2]) over the fake cluster: a job written
for format("kafka") reads the same on format("kafka-eos")."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("pyspark")

from connectors.kafka.clients import TopicPartition  # noqa: E402
from connectors.simulated_kafka import FakeKafkaClients  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from connectors.spark import register

    session = (SparkSession.builder.master("local[2]").appName("kafka-eos-spark-options")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def timed(tmp_path):
    """Topic "in", 2 partitions: partition 0 holds records at 1000..5000 ms, partition 1 at 1500
    and 4500; committed (the commit markers carry the cluster's clock, far later)."""
    clients = FakeKafkaClients(tmp_path / "kafka.db")
    clients.admin().create_topic("in", 2)
    producer = clients.producer("timed", {})
    identity = producer.init_transactions(10)
    producer.begin_transaction()
    for partition, ts in [(0, 1000), (0, 2000), (0, 3000), (0, 4000), (0, 5000), (1, 1500), (1, 4500)]:
        producer.produce("in", f"p{partition}-{ts}".encode(), partition=partition, timestamp_ms=ts)
    producer.flush(10)
    producer.close()
    clients.txn_control().end_txn("timed", identity, True)
    return clients


def read(spark, fake, **options):
    reader = spark.read.format("kafka-eos").option("kafka.bootstrap.servers", fake.bootstrap_servers) \
        .option("subscribe", "in")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def values(df):
    return sorted(row.value.decode() for row in df.select("value").collect())


def test_batch_read_between_a_starting_and_an_ending_timestamp(spark, timed):
    # [startingTimestamp, endingTimestamp): the first offset at or after the end is not read.
    df = read(spark, timed, startingTimestamp="1500", endingTimestamp="4500")
    assert values(df) == ["p0-2000", "p0-3000", "p0-4000", "p1-1500"]
    # endingTimestamp takes precedence over endingOffsetsByTimestamp and endingOffsets.
    df = read(spark, timed, endingTimestamp="2000", endingOffsetsByTimestamp='{"in":{"0":0,"1":0}}',
              endingOffsets='{"in":{"0":1,"1":1}}')
    assert values(df) == ["p0-1000", "p1-1500"]


def test_batch_read_ending_offsets_by_timestamp_no_match_ends_at_latest(spark, timed):
    late = timed.now_ms() + 1
    df = read(spark, timed, endingOffsetsByTimestamp=f'{{"in":{{"0":3000,"1":{late}}}}}')
    assert values(df) == ["p0-1000", "p0-2000", "p1-1500", "p1-4500"]


def test_batch_read_starting_timestamp_no_match_fails_or_starts_at_latest(spark, timed):
    late = timed.now_ms() + 1
    with pytest.raises(Exception, match=rf"no offset of in partition \d has a timestamp at or after {late}"):
        read(spark, timed, startingTimestamp=str(late)).collect()
    assert values(read(spark, timed, startingTimestamp=str(late), startingOffsetsByTimestampStrategy="latest")) == []


def test_max_records_per_partition_sets_the_read_tasks(spark, timed):
    # By default 9 offsets are one task (eos.minRecordsPerTask); 0 plans one per Kafka
    # partition, as Spark's source.
    assert read(spark, timed).rdd.getNumPartitions() == 1
    assert read(spark, timed, **{"eos.minRecordsPerTask": "0"}).rdd.getNumPartitions() == 2
    df = read(spark, timed, maxRecordsPerPartition="2")
    # Partition 0: 6 offsets (5 records and a marker) in 3 tasks; partition 1: 3 in 2.
    assert df.rdd.getNumPartitions() == 5
    assert len(values(df)) == 7


def test_a_job_written_for_sparks_kafka_source_runs_unchanged(spark, timed):
    df = read(spark, timed, startingOffsets="earliest", endingOffsets="latest", failOnDataLoss="true",
              includeHeaders="true", minPartitions="1", maxRecordsPerPartition="100", groupIdPrefix="copied-job",
              **{"kafkaConsumer.pollTimeoutMs": "120000", "fetchOffset.numRetries": "3",
                 "fetchOffset.retryIntervalMs": "10", "maxOffsetsPerTrigger": "1000",
                 "minOffsetsPerTrigger": "10", "maxTriggerDelay": "15m",
                 "startingOffsetsByTimestampStrategy": "error"})
    assert len(values(df)) == 7
    assert "headers" in df.columns
    assert TopicPartition("in", 0) in [TopicPartition(r.topic, r.partition) for r in df.collect()]
